"""Compares the mechanisms at one ε on StackOverflow, each with its own tuned learning rate.

For each mechanism (default: none, clip, dpsgd, tree, bandmf, blt): σ calibrated so the
planned schedule reaches `--calibrate_epsilon` (default 8) at δ; the server learning rate
chosen on validation data (held-out clients disjoint from the evaluation sample) from a
small grid around the mechanism's tuned rate; then `--seeds` runs at that rate, the accuracy
without OOV/EOS (content words) and the realized ε of each — `dp_fl/training/compare.py`.
Writes `comparison.json`, `comparison.md` and `comparison.png` to `--out_dir`.

  ./bazelw run //tasks/stackoverflow:compare -- --corpus=real_text
  .venv/bin/python -m tasks.stackoverflow.compare --mechanisms=clip,blt --seeds=1 \
      --lr_factors=1 --rounds=40

Every flag of tasks/stackoverflow/train.py applies (preset, data, model, training) except
--mechanism and --root_dir. The non-private rows are references: `none` is plain FedAvg,
`clip` the DP estimator (clipped updates over the fixed cohort) without the noise.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from dp_fl.training import cli


def main(argv: Optional[Sequence[str]] = None) -> int:
  from tasks.stackoverflow import task as so_task  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import train  # pylint: disable=g-import-not-at-top
  return cli.compare_main(None if argv is None else list(argv), __doc__.splitlines()[0],
                          train.build_parser, train.settings_and_config, so_task.make_task,
                          so_task.TASK_NAME)


if __name__ == "__main__":
  sys.exit(main())
