"""Training flags: one per config field; defaults < task defaults < preset < given flags."""

from __future__ import annotations

import argparse

import pytest

from dp_fl.training import cli


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
