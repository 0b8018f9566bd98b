"""TrainingConfig: validation, JSON, the cooldown schedule and resume compatibility."""

from __future__ import annotations

import pytest

from dp_fl.training import config as config_lib


def _config(tmp_path, **kw):
  values = dict(task="toy", root_dir=str(tmp_path), rounds=100, clients_per_round=10)
  values.update(kw)
  return config_lib.TrainingConfig(**values)


def test_json_round_trip(tmp_path):
  config = _config(tmp_path, mechanism="tree", target_epsilon=8.0)
  assert config_lib.TrainingConfig.from_dict(config.to_dict()) == config


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
    (dict(jit_compile=True), "worker_binary, which has no XLA device"),
    (dict(server_optimizer="rmsprop"), "`server_optimizer` must be one of"),
    (dict(server_adam_epsilon=0.0), "`server_adam_epsilon`"),
])
def test_bad_values_are_clear_errors(tmp_path, changes, match):
  with pytest.raises(ValueError, match=match):
    _config(tmp_path, **changes)


def test_unknown_fields_are_refused(tmp_path):
  data = _config(tmp_path).to_dict()
  data["learning_rate"] = 1.0
  with pytest.raises(ValueError, match=r"Unknown training config fields \['learning_rate'\]"):
    config_lib.TrainingConfig.from_dict(data)


def test_resume_refuses_privacy_changes_but_allows_others(tmp_path):
  assert config_lib.save_or_check(_config(tmp_path)) is None
  saved = config_lib.save_or_check(_config(tmp_path, rounds=200, eval_every=5))
  assert saved.rounds == 100
  with pytest.raises(ValueError, match=r"clip_norm: 1.0 -> 2.0; seed: 0 -> 1"):
    config_lib.save_or_check(_config(tmp_path, clip_norm=2.0, seed=1))
  with pytest.raises(ValueError, match="belongs to a run of task 'toy'"):
    config_lib.save_or_check(_config(tmp_path, task="other"))


def test_run_directories_from_before_the_bands_rename_resume(tmp_path):
  """`bandmf_bands` became `bands` (it sizes BSR, BISR and BandInvMF too): an older
  config.json or checkpoint privacy record is read under the new name, and still checked."""
  import json  # pylint: disable=g-import-not-at-top
  config = _config(tmp_path, mechanism="bandmf", bands=5)
  old = config.to_dict()
  old["bandmf_bands"] = old.pop("bands")
  assert config_lib.TrainingConfig.from_dict(old) == config
  (tmp_path / config_lib.CONFIG_FILE).write_text(json.dumps(old))
  assert config_lib.save_or_check(config).bands == 5
  record = dict(config.privacy_record())
  record["bandmf_bands"] = record.pop("bands")
  assert config_lib.privacy_differences(record, config) == []
  assert config_lib.privacy_differences(record, config.replace(bands=6)) == ["bands: 5 -> 6"]


def test_resume_refuses_another_server_optimizer(tmp_path):
  config_lib.save_or_check(_config(tmp_path))
  with pytest.raises(ValueError, match=r"another server optimizer \(server_optimizer: 'sgdm' "
                                       r"-> 'adam'\)"):
    config_lib.save_or_check(_config(tmp_path, server_optimizer="adam"))
  # Adam's epsilon or learning rate may change on resume (same state structure).
  config_lib.save_or_check(_config(tmp_path, server_adam_epsilon=1e-2))


def test_unreadable_saved_config_is_a_clear_error(tmp_path):
  (tmp_path / config_lib.CONFIG_FILE).write_text("{not json")
  with pytest.raises(ValueError, match="unreadable config.json"):
    config_lib.save_or_check(_config(tmp_path))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))


@pytest.mark.parametrize("mechanism", ["none", "clip"])
def test_nonprivate_mechanisms_need_no_noise(tmp_path, mechanism):
  config = _config(tmp_path, mechanism=mechanism, noise_multiplier=0.0)
  assert not config.is_private
  assert _config(tmp_path, mechanism="dpsgd").is_private
  with pytest.raises(ValueError, match="--mechanism=none or --mechanism=clip"):
    _config(tmp_path, mechanism="dpsgd", noise_multiplier=0.0)
