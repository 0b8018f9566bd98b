"""TrainingConfig: validation, settings, JSON of every version, the cooldown schedule and
resume compatibility."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os

import pytest

from dp_fl.training import config as config_lib
from dp_fl.training import registry
from dp_fl.training import runtimes

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


def _config(tmp_path, **kw):
  values = dict(task="toy", root_dir=str(tmp_path), rounds=100, clients_per_round=10)
  values.update(kw)
  return registry.make_config(**values)


def _save_or_check(config):
  return config_lib.save_or_check(config, registry.config_from_dict)


@pytest.mark.parametrize("changes", [
    dict(mechanism="tree", target_epsilon=8.0),
    dict(mechanism="bandmf", bands=3, max_participations=2, participation="uniform"),
    dict(mechanism="cpsgd", cpsgd_levels=64, participation="cyclic", runtime="xla",
         device="cpu"),
    dict(mechanism="dpfedavg", participation="poisson", population_sampling_rate=0.2),
    dict(audit_canaries=100, audit_strict=True)])
def test_json_round_trip(tmp_path, changes):
  config = _config(tmp_path, **changes)
  assert registry.config_from_dict(config.to_dict()) == config
  assert registry.config_from_dict(json.loads(config.to_json())) == config
  assert registry.make_config(**config.flags()) == config


def test_the_common_config_is_small_and_the_settings_are_typed(tmp_path):
  """Issue #40: the common fields stay few (<= 33; #42 added noise_guard), their checks short
  (<= 30 lines); each
  name's own flags live in its entry's settings."""
  assert len(dataclasses.fields(config_lib.TrainingConfig)) <= 33
  assert len(inspect.getsource(config_lib.TrainingConfig.__post_init__).splitlines()) <= 30
  config = _config(tmp_path, mechanism="bandmf", bands=4, participation="min_sep_rounds",
                   round_hours=0.5, runtime="xla", jit_compile=True)
  assert config.mechanism_settings == registry.BandedSettings(bands=4)
  assert config.participation_settings.round_hours == 0.5
  assert config.runtime_settings == runtimes.XlaSettings(jit_compile=True)
  assert "blt_buffers" not in config.flags()  # BLT's, not BandMF's.
  assert config.replace(bands=5).mechanism_settings.bands == 5
  with pytest.raises(ValueError, match=r"\['blt_buffers'\] are no settings of this config"):
    config.replace(blt_buffers=2)
  with pytest.raises(ValueError, match="registry.make_config"):
    config.replace(mechanism="blt")
  with pytest.raises(TypeError):
    config_lib.TrainingConfig(task="toy", root_dir=str(tmp_path), rounds=1,
                              clients_per_round=1)  # Settings come from the registry.
  with pytest.raises(ValueError, match="must be a BltSettings"):
    registry.validate(dataclasses.replace(config, mechanism="blt"))


def test_workers_select_their_runtime_and_its_settings(tmp_path):
  config = _config(tmp_path, workers="localhost:8000,localhost:8001",
                   worker_timeout_seconds=30.0)
  assert config.runtime == "workers"
  assert config.runtime_settings == runtimes.WorkersSettings(
      workers="localhost:8000,localhost:8001", worker_timeout_seconds=30.0)
  assert runtimes.remote_workers(config) == "localhost:8000,localhost:8001"
  assert runtimes.remote_workers(_config(tmp_path)) is None


def test_cooldown_schedule(tmp_path):
  config = _config(tmp_path, server_learning_rate=2.0, cooldown_rounds=10,
                   cooldown_final_fraction=0.5)
  assert config.server_learning_rate_at(0) == 2.0
  assert config.server_learning_rate_at(89) == 2.0
  assert config.server_learning_rate_at(90) == pytest.approx(2.0 * (1 - 0.5 * 0.1))
  assert config.server_learning_rate_at(99) == pytest.approx(1.0)


@pytest.mark.parametrize("changes, match", [
    (dict(rounds=0), "`rounds` must be a positive integer"),
    (dict(mechanism="fancy"), "`mechanism` must be one of"),
    (dict(clip_norm=0.0), "`clip_norm` must be a finite number > 0"),
    (dict(noise_multiplier=0.0), "σ = 0 gives no privacy"),
    (dict(delta=1.0), "`delta` must be strictly between 0 and 1"),
    (dict(target_epsilon=-1.0), "`target_epsilon`"),
    (dict(server_momentum=1.0), "`server_momentum`"),
    (dict(cooldown_rounds=101), "exceeds `rounds`"),
    (dict(mechanism="dpfedavg"), "needs --participation=poisson"),
    (dict(participation="poisson"), "only group by group: use --participation=cyclic_poisson"),
    (dict(on_nonfinite="ignore"), "`on_nonfinite` must be one of"),
    (dict(audit_canaries=1), "needs at least 2"),
    (dict(audit_canaries=-3), "`audit_canaries` must be a non-negative integer"),
    (dict(audit_canaries=2.5), "`audit_canaries`"),
    (dict(audit_strict=True), "add --audit_canaries=K"),
    (dict(audit_canaries=8, audit_strict="yes"), "`audit_strict` must be a bool"),
    (dict(jit_compile=True), "worker_binary, which has no XLA device"),
    (dict(server_optimizer="rmsprop"), "`server_optimizer` must be one of"),
    (dict(server_adam_epsilon=0.0), "`server_adam_epsilon`"),
    (dict(participation="round_robin"), "`participation` must be one of"),
    (dict(runtime="gpu"), "`runtime` must be one of"),
    (dict(mechanism="bandmf", bands=0), "`bands` must be a positive integer"),
    (dict(mechanism="cpsgd", cpsgd_levels=1), "`cpsgd_levels`"),
    (dict(cpsgd_p=1.5), "`cpsgd_p`"),  # Checked even where the mechanism does not read it.
    (dict(max_participations=0), "`max_participations` must be a positive integer"),
    (dict(device="gpu0"), "`device` must be one of"),
    (dict(runtime="workers"), "--runtime=workers needs --workers"),
    (dict(runtime="xla", workers="localhost:1"), "--runtime=xla cannot take it"),
    (dict(worker_tls_ca_cert="ca.pem"), "give --workers too"),
    (dict(worker_timeout_seconds=0.0), "`worker_timeout_seconds`"),
    (dict(timer_hours=0.0), "`timer_hours`"),
    (dict(participation="poisson", mechanism="dpfedavg", population_sampling_rate=2.0),
     "`population_sampling_rate`"),
])
def test_bad_values_are_clear_errors(tmp_path, changes, match):
  with pytest.raises(ValueError, match=match):
    _config(tmp_path, **changes)


def test_unknown_fields_are_refused(tmp_path):
  data = _config(tmp_path).to_dict()
  data["learning_rate"] = 1.0
  with pytest.raises(ValueError, match=r"Unknown training config fields \['learning_rate'\]"):
    registry.config_from_dict(data)
  flat = _config(tmp_path).flags()
  flat["learning_rate"] = 1.0
  with pytest.raises(ValueError, match=r"Unknown training config fields \['learning_rate'\]"):
    registry.config_from_dict(flat)
  data = _config(tmp_path).to_dict()
  data["mechanism_settings"]["bands"] = 3
  with pytest.raises(ValueError, match=r"Unknown mechanism_settings fields \['bands'\]"):
    registry.config_from_dict(data)


def test_a_legacy_flat_config_json_reads_as_the_new_config():
  """config.json of the main job written before the settings (46 flat keys, HEAD of issue
  #40): read into the new structure, equal to the config the same flags build now, and
  accepted by the resume check (no privacy difference)."""
  with open(os.path.join(TESTDATA, "legacy_main_job_config.json"), encoding="utf-8") as f:
    legacy = json.load(f)
  assert len(legacy) == 46 and "mechanism_settings" not in legacy
  config = registry.config_from_dict(legacy)
  assert config == registry.make_config(
      task="stackoverflow", root_dir=legacy["root_dir"], rounds=100, clients_per_round=50,
      mechanism="blt", blt_buffers=4, noise_multiplier=legacy["noise_multiplier"],
      reproducible_noise_seed=7, min_sep=100, timer_hours=20.0, round_hours=0.2,
      client_learning_rate=1.0, cooldown_rounds=25, eval_every=25, checkpoint_every=25,
      delta=1e-5, target_epsilon=8.0)
  assert config.mechanism_settings == registry.BltSettings(blt_buffers=4)
  assert config.participation_settings.timer_hours == 20.0
  assert config.runtime_settings == runtimes.TffWorkerSettings()
  assert config_lib.privacy_differences(legacy, config) == []  # A flat record, as saved.
  assert config_lib.privacy_differences(legacy, config.replace(blt_buffers=3)) == [
      "blt_buffers: 4 -> 3"]


def test_a_legacy_run_directory_passes_the_resume_check(tmp_path):
  with open(os.path.join(TESTDATA, "legacy_main_job_config.json"), encoding="utf-8") as f:
    legacy = json.load(f)
  (tmp_path / config_lib.CONFIG_FILE).write_text(json.dumps({**legacy,
                                                             "root_dir": str(tmp_path)}))
  config = registry.config_from_dict({**legacy, "root_dir": str(tmp_path), "rounds": 200})
  saved = _save_or_check(config)
  assert saved.rounds == 100 and saved.replace(rounds=200) == config
  assert json.loads((tmp_path / config_lib.CONFIG_FILE).read_text())["mechanism_settings"] == {
      "blt_buffers": 4, "max_participations": None, "mechanism_params": None,
      # Issue #42's settings, at the defaults a legacy run had (a fixed clip norm).
      "target_unclipped_quantile": None, "clip_learning_rate": 0.2, "clip_search_step": 2.0,
      "clip_count_stddev": None, "clip_budget_share": 0.1}
  with pytest.raises(ValueError, match=r"blt_buffers: 4 -> 2"):
    _save_or_check(config.replace(blt_buffers=2))


def test_resume_refuses_privacy_changes_but_allows_others(tmp_path):
  assert _save_or_check(_config(tmp_path)) is None
  saved = _save_or_check(_config(tmp_path, rounds=200, eval_every=5))
  assert saved.rounds == 100
  with pytest.raises(ValueError, match=r"clip_norm: 1.0 -> 2.0; seed: 0 -> 1"):
    _save_or_check(_config(tmp_path, clip_norm=2.0, seed=1))
  with pytest.raises(ValueError, match="belongs to a run of task 'toy'"):
    _save_or_check(_config(tmp_path, task="other"))
  _save_or_check(_config(tmp_path, timer_hours=3.0))  # A participation knob, not privacy.
  with pytest.raises(ValueError, match=r"blt_buffers: 4 -> 2"):
    _save_or_check(_config(tmp_path, blt_buffers=2))


def test_a_run_from_before_ddp_beta_reads_as_unconditional_rounding(tmp_path):
  """`--ddp_beta` came with a default of e^(-1/2); runs before it rounded unconditionally
  (β = 0). Their config.json and checkpoint records lack the field: they read as β = 0, and
  resuming one under the new default is refused (its earlier rounds' sensitivity is β = 0's)
  until --ddp_beta=0 is given."""
  config = _config(tmp_path, mechanism="ddgauss", participation="uniform", ddp_bits=14)
  assert config.mechanism_settings.ddp_beta == pytest.approx(0.6065306597)
  old = config.to_dict()
  del old["mechanism_settings"]["ddp_beta"]
  (tmp_path / config_lib.CONFIG_FILE).write_text(json.dumps(old))
  assert registry.config_from_dict(old).mechanism_settings.ddp_beta == 0.0
  record = config.privacy_record()
  del record["ddp_beta"]
  assert config_lib.privacy_differences(record, config) == [
      f"ddp_beta: 0.0 -> {config.mechanism_settings.ddp_beta!r}"]
  with pytest.raises(ValueError, match=r"ddp_beta: 0.0 -> 0.606"):
    _save_or_check(config)
  unconditional = config.replace(ddp_beta=0.0)
  assert config_lib.privacy_differences(record, unconditional) == []
  assert _save_or_check(unconditional).mechanism_settings.ddp_beta == 0.0


def test_run_directories_from_before_the_bands_rename_resume(tmp_path):
  """`bandmf_bands` became `bands` (it sizes BSR, BISR and BandInvMF too): an older
  config.json or checkpoint privacy record is read under the new name, and still checked."""
  config = _config(tmp_path, mechanism="bandmf", bands=5)
  old = config.flags()  # Flat, as older versions wrote it.
  old["bandmf_bands"] = old.pop("bands")
  assert registry.config_from_dict(old) == config
  (tmp_path / config_lib.CONFIG_FILE).write_text(json.dumps(old))
  assert _save_or_check(config).mechanism_settings.bands == 5
  record = dict(config.privacy_record())
  record["bandmf_bands"] = record.pop("bands")
  assert config_lib.privacy_differences(record, config) == []
  assert config_lib.privacy_differences(record, config.replace(bands=6)) == ["bands: 5 -> 6"]


def test_resume_refuses_another_server_optimizer(tmp_path):
  _save_or_check(_config(tmp_path))
  with pytest.raises(ValueError, match=r"another server optimizer \(server_optimizer: 'sgdm' "
                                       r"-> 'adam'\)"):
    _save_or_check(_config(tmp_path, server_optimizer="adam"))
  # Adam's epsilon or learning rate may change on resume (same state structure).
  _save_or_check(_config(tmp_path, server_adam_epsilon=1e-2))


def test_unreadable_saved_config_is_a_clear_error(tmp_path):
  (tmp_path / config_lib.CONFIG_FILE).write_text("{not json")
  with pytest.raises(ValueError, match="unreadable config.json"):
    _save_or_check(_config(tmp_path))



@pytest.mark.parametrize("mechanism", ["none", "clip"])
def test_nonprivate_mechanisms_need_no_noise(tmp_path, mechanism):
  config = _config(tmp_path, mechanism=mechanism, noise_multiplier=0.0)
  assert not registry.mechanism(config.mechanism).private
  assert registry.mechanism(_config(tmp_path, mechanism="dpsgd").mechanism).private
  with pytest.raises(ValueError, match="--mechanism=none or --mechanism=clip"):
    _config(tmp_path, mechanism="dpsgd", noise_multiplier=0.0)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
