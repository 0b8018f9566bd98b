"""Continues a DP-FTRL aggregator from a saved state in a fresh process (resume test helper).

Usage: resume_program.py STATE_NPZ ROUNDS OUT_NPZ
Builds the same aggregators as `resume_test.PRESETS`, restores each one's state from
STATE_NPZ (saved with `resume_test.save_state`), runs ROUNDS more rounds with zero client
updates and writes the results (one array per preset) to OUT_NPZ.
"""

from __future__ import annotations

import sys

from dp_fl.execution import runtime


def main(argv: list[str]) -> int:
  runtime.configure_logging(0)
  runtime.install_signal_handlers()
  from tests.aggregators import resume_test  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  state_path, rounds, out_path = argv[1], int(argv[2]), argv[3]
  saved = np.load(state_path)
  results = {}
  with runtime.execution_context():
    for preset in resume_test.PRESETS:
      process = resume_test.build(preset).create(resume_test.VALUE_TYPE)
      state = resume_test.load_state(process, saved, preset)
      results[preset], _ = resume_test.run(process, state, rounds)
  np.savez(out_path, **results)
  return 0


if __name__ == "__main__":
  raise SystemExit(main(sys.argv))
