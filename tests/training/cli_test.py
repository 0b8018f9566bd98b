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


def test_bad_flags_are_clear_errors(tmp_path):
  with pytest.raises(SystemExit):
    _parse(["--mechanism=fancy"])
  args = _parse([f"--root_dir={tmp_path}", "--rounds=0", "--clients_per_round=3"])
  with pytest.raises(ValueError, match="`--rounds` must be a positive integer"):
    cli.training_config(args, task="toy")
  with pytest.raises(ValueError, match="--clients_per_round required"):
    cli.training_config(_parse([f"--root_dir={tmp_path}", "--rounds=3"]), task="toy")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
