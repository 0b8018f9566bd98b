"""Every task binary's `quick` preset resolves to a valid config for every registered
mechanism: `--mechanism=NAME` alone must not end in a refusal of the preset's own values
(issue #42 found `stackoverflow.train --mechanism=dpfedavg` refused for the device timer and
`reddit.train --mechanism=bsr` refused for Poisson sampling)."""

from __future__ import annotations

import pytest

from dp_fl.training import cli
from dp_fl.training import registry
from tasks.reddit import train as reddit_train
from tasks.stackoverflow import train as stackoverflow_train

_BINARIES = {"reddit": reddit_train, "stackoverflow": stackoverflow_train}


@pytest.mark.parametrize("mechanism", sorted(registry.MECHANISMS))
@pytest.mark.parametrize("task", sorted(_BINARIES))
def test_the_quick_preset_runs_every_mechanism(task, mechanism, tmp_path):
  binary = _BINARIES[task]
  args = binary.build_parser().parse_args([f"--mechanism={mechanism}",
                                           f"--root_dir={tmp_path}"])
  _, config = cli.task_values_and_config(args, binary.PRESETS, binary.TASK_FIELDS, task)
  assert config.mechanism == mechanism
  registry.validate(config)
  # The scheme the preset picks is one the mechanism's privacy analysis accepts.
  assert config.participation in registry.PARTICIPATIONS


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
