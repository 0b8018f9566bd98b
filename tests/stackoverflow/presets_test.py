"""The shipped `quick` preset's non-private runs on real text: they must not diverge (#19).

Root cause of the divergence this guards against: plain FedAvg's client updates are not
bounded (nothing clips them), and server momentum 0.9 at rate 1.0 makes the effective
server step 1/(1 − 0.9) = 10 times the average update; as the LSTM's updates grow with its
weights the step overshoots, the loss rises and the updates grow further (7.6 → 9.8 at round
12 → 10^3 at round 37 → 4.8·10^4 at round 49 on the full real-text corpus). The preset gives
`none` local Adam, which bounds each coordinate of the update (`tasks/stackoverflow/train.py`).
"""

from __future__ import annotations

import math
import os

import pytest

from dp_fl import exits
from dp_fl import writers
from tasks import real_text
from tasks.stackoverflow import train

_PACKAGES = ("numpy", "absl", "keras")  # ~640 modules of real prose, ~15 s to read


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("real_text"))
  real_text.write_stackoverflow(real_text.harvest(packages=_PACKAGES), directory)
  return directory


def _train(corpus_dir, root, *flags):
  # The preset's model and learning settings; 20 full 50-client cohorts (the small corpus
  # cannot fill the device timer's cohorts, and participation is no privacy matter here).
  code = train.main([f"--data_dir={corpus_dir}", f"--root_dir={root}", "--rounds=20",
                     "--eval_every=20", "--checkpoint_every=20", "--cooldown_rounds=0",
                     "--participation=uniform", "--format=json", *flags])
  rows = writers.read_csv(os.path.join(root, "metrics", "train.csv"))
  return code, [float(r["client_work/train/loss"]) for r in rows]


def test_the_shipped_non_private_preset_does_not_diverge(corpus_dir, tmp_path):
  code, losses = _train(corpus_dir, tmp_path / "none", "--mechanism=none")
  assert code == exits.COMPLETED and len(losses) == 20
  assert all(math.isfinite(x) for x in losses)
  # It learns and does not climb back: server momentum on Adam-bounded updates may overshoot
  # early (on this small corpus the loss rises once, to 8.5 at round 10 from 7.6), then settles
  # (5.9 at round 20); unbounded updates keep growing (next test).
  assert max(losses[15:]) < losses[0]


def test_the_check_catches_momentum_on_unclipped_updates(corpus_dir, tmp_path):
  # The same failure at a larger step: on this small corpus the old `none` setting (rate 1,
  # momentum 0.9) needs more than 40 rounds to blow up, at rate 3 it does within 10
  # (train loss 7.6 -> 2·10^3 at round 8), so the check above is not one that cannot fail.
  code, losses = _train(corpus_dir, tmp_path / "old", "--mechanism=none",
                        "--client_optimizer=sgd", "--client_learning_rate=1.0",
                        "--server_momentum=0.9", "--server_learning_rate=3.0")
  assert code == exits.NONFINITE or not max(losses[15:]) < losses[0]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
