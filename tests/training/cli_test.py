"""Training flags: one per common config field and per setting of the registries' settings
dataclasses; defaults < task defaults < preset < given flags."""

from __future__ import annotations

import argparse
import math

import pytest

from dp_fl.training import cli
from dp_fl.training import registry

# The flags and their defaults before the settings were split off the config (issue #40):
# generating the flags from the settings dataclasses keeps every name and default.
_FLAG_DEFAULTS = {
    "root_dir": None, "rounds": None, "clients_per_round": None, "mechanism": "blt",
    "noise_multiplier": 1.0, "clip_norm": 1.0, "seed": 0, "reproducible_noise_seed": None,
    "min_sep": 1, "max_participations": None, "blt_buffers": 4, "bands": None,
    "mechanism_params": None, "cpsgd_levels": 16, "cpsgd_trials": None, "cpsgd_p": 0.5,
    "cpsgd_x_max": None, "ddp_bits": 16, "ddp_beta": math.exp(-0.5), "participation": "device_timer",
    "timer_hours": 24.0,
    "round_hours": 1.0, "availability": "always", "population_sampling_rate": None,
    "sampling_probability": None, "warm_start": True,  # b-min-sep (issue #44).
    "client_optimizer": "sgd", "client_learning_rate": 0.5, "client_epochs": 1,
    "server_learning_rate": 1.0, "server_momentum": 0.9, "server_optimizer": "sgdm",
    "server_adam_epsilon": 0.001, "cooldown_rounds": 0, "cooldown_final_fraction": 0.1,
    "eval_every": 10, "checkpoint_every": 10, "keep_checkpoints": 3, "delta": 1e-06,
    "target_epsilon": None, "on_nonfinite": "stop", "jit_compile": False,
    "runtime": "tff_worker", "device": "auto", "workers": None, "audit_canaries": 0,
    "audit_strict": False, "noise_guard": "warn", "target_unclipped_quantile": None,
    "clip_learning_rate": 0.2, "clip_search_step": 2.0, "clip_count_stddev": None,
    "clip_budget_share": 0.1,
    "worker_timeout_seconds": 600.0, "worker_tls_ca_cert": None,
    "worker_tls_client_cert": None, "worker_tls_client_key": None}


def _parse(argv):
  parser = argparse.ArgumentParser()
  cli.add_training_arguments(parser)
  return parser.parse_args(argv)


def test_priority_of_defaults_preset_and_flags(tmp_path):
  args = _parse([f"--root_dir={tmp_path}", "--noise_multiplier=3.5", "--on_nonfinite=discard"])
  config = cli.training_config(
      args, task="toy", defaults={"rounds": 10, "clients_per_round": 5, "clip_norm": 0.5},
      preset={"rounds": 20, "noise_multiplier": 1.0})
  assert config.task == "toy" and config.root_dir == str(tmp_path)
  assert config.rounds == 20  # preset over task default
  assert config.noise_multiplier == 3.5  # flag over preset
  assert config.clip_norm == 0.5 and config.on_nonfinite == "discard"
  assert config.server_momentum == 0.9  # TrainingConfig default


def test_every_flag_keeps_its_name_default_and_help():
  parser = argparse.ArgumentParser()
  cli.add_training_arguments(parser)
  actions = {a.dest: a for a in parser._actions  # pylint: disable=protected-access
             if a.dest != "help"}
  assert set(actions) == set(_FLAG_DEFAULTS) == set(cli.flag_names())
  assert all(a.default is None for a in actions.values())  # "not given"
  for name, (_, field) in registry.setting_fields().items():
    assert actions[name].help == field.metadata["help"], name
  assert actions["blt_buffers"].help == "d: BLT buffers"
  assert actions["timer_hours"].help == "device timer: hours before a device may take part again"
  assert actions["device"].help.startswith("where --runtime=xla runs: auto, cpu, gpu, tpu")
  defaults = {}
  for mechanism, participation, runtime in (("blt", "device_timer", "tff_worker"),
                                            ("bandmf", "min_sep_rounds", "xla"),
                                            ("dpfedavg", "poisson", "tff_worker"),
                                            ("cpsgd", "uniform", "workers"),
                                            ("ddgauss", "uniform", "tff_worker"),
                                            ("blt", "b_min_sep", "tff_worker")):
    config = registry.make_config(task="toy", root_dir="/tmp/unused", rounds=5,
                                  clients_per_round=5, mechanism=mechanism,
                                  participation=participation, runtime=runtime,
                                  **({"workers": "h:1"} if runtime == "workers" else {}))
    defaults.update({k: v for k, v in config.flags().items()
                     if k not in ("mechanism", "participation", "runtime", "workers")})
  expected = {k: v for k, v in _FLAG_DEFAULTS.items()
              if k not in ("root_dir", "rounds", "clients_per_round", "mechanism",
                           "participation", "runtime", "workers")}
  assert {k: v for k, v in defaults.items() if k in expected} == expected
  assert set(defaults) - set(expected) == {"task", "root_dir", "rounds", "clients_per_round"}


def test_a_flag_of_another_mechanism_is_validated_then_left_out(tmp_path):
  args = _parse([f"--root_dir={tmp_path}", "--rounds=3", "--clients_per_round=2",
                 "--mechanism=bandmf", "--bands=2", "--blt_buffers=3"])
  config = cli.training_config(args, task="toy")
  assert config.mechanism_settings == registry.BandedSettings(bands=2)
  with pytest.raises(ValueError, match="is read only by --mechanism=blt"):
    cli.check_flags_read(args, [(config.mechanism, config.participation)])
  bad = _parse([f"--root_dir={tmp_path}", "--rounds=3", "--clients_per_round=2",
                "--blt_buffers=0", "--mechanism=bandmf"])
  with pytest.raises(ValueError, match="`--blt_buffers` must be a positive integer"):
    cli.training_config(bad, task="toy")


def test_the_bands_flag_keeps_its_earlier_name():
  assert _parse(["--bands=7"]).bands == 7
  assert _parse(["--bandmf_bands=5"]).bands == 5  # Command lines from before the rename.


def test_bad_flags_are_clear_errors(tmp_path):
  with pytest.raises(SystemExit):
    _parse(["--mechanism=fancy"])
  args = _parse([f"--root_dir={tmp_path}", "--rounds=0", "--clients_per_round=3"])
  with pytest.raises(ValueError, match="`--rounds` must be a positive integer"):
    cli.training_config(args, task="toy")
  with pytest.raises(ValueError, match="--clients_per_round required"):
    cli.training_config(_parse([f"--root_dir={tmp_path}", "--rounds=3"]), task="toy")


_PRESETS = {"p": cli.Preset(
    task={"vocab_size": 10},
    training={"rounds": 20, "clients_per_round": 5, "mechanism": "blt",
              "server_learning_rate": 1.0, "server_momentum": 0.9},
    per_mechanism={"none": {"server_momentum": 0.0, "client_optimizer": "adam"}},
    calibrate_epsilon=8.0)}


def _binary_args(argv):
  parser = argparse.ArgumentParser()
  cli.add_binary_arguments(parser, _PRESETS, "p")
  cli.add_training_arguments(parser)
  return parser.parse_args(argv)


@pytest.mark.parametrize("argv, momentum, optimizer", [
    ([], 0.9, "sgd"),  # the preset's own mechanism
    (["--mechanism=none"], 0.0, "adam"),  # its tuned settings
    (["--mechanism=none", "--server_momentum=0.5"], 0.5, "adam"),  # flags win
    (["--mechanism=clip"], 0.9, "sgd"),  # no tuned settings: the preset's
])
def test_per_mechanism_settings_apply_to_their_mechanism_only(tmp_path, argv, momentum,
                                                               optimizer):
  args = _binary_args([f"--root_dir={tmp_path}"] + argv)
  values, config = cli.task_values_and_config(args, _PRESETS, (), "toy")
  assert values == {"vocab_size": 10}
  assert config.server_momentum == momentum and config.client_optimizer == optimizer


def test_a_per_mechanism_value_is_blamed_on_the_preset(tmp_path):
  presets = {"p": _PRESETS["p"]._replace(
      per_mechanism={"none": {"server_momentum": 1.5}})}
  parser = argparse.ArgumentParser()
  cli.add_binary_arguments(parser, presets, "p")
  cli.add_training_arguments(parser)
  args = parser.parse_args([f"--root_dir={tmp_path}", "--mechanism=none"])
  with pytest.raises(ValueError, match="comes from --preset=p"):
    cli.task_values_and_config(args, presets, (), "toy")


@pytest.mark.parametrize("argv, epsilon", [
    ([], 8.0),  # the preset's target ε
    (["--calibrate_epsilon=3"], 3.0),  # the flag's
    (["--noise_multiplier=1.2"], None),  # σ given: not calibrated
    (["--noise_multiplier=1.2", "--calibrate_epsilon=3"], 3.0),
])
def test_which_epsilon_the_noise_is_calibrated_to(argv, epsilon):
  assert cli.epsilon_to_calibrate(_binary_args(argv), _PRESETS) == epsilon


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
