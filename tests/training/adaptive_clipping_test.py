"""Adaptive clipping through the training program (issue #42): a BLT run trains, reports the
composed ε (audited from the checkpoint: brute-force sensitivity plus the counts' k/2σ_b²) and
resumes bitwise — the clip norm's estimator state included; DP-FedAvg's resumes bitwise too;
the report states the estimator's share and the figure of the clip norm is written."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dp_fl.execution import runtime
from dp_fl.training import checkpoints as checkpoints_lib
from dp_fl.training import program
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task

ADAPTIVE = dict(target_unclipped_quantile=0.5, clip_learning_rate=0.5, clip_norm=0.05,
                reproducible_noise_seed=5)


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def test_blt_with_an_adaptive_clip_norm_trains_reports_and_resumes_bitwise(tmp_path):
  whole, _ = privacy_audit.check_recipe_run(
      toy_task.make_task(),
      lambda name: toy_program.toy_config(str(tmp_path / name), 6, "blt", min_sep=2,
                                          **ADAPTIVE),
      pauses=(2, 1))
  report = whole.privacy_report
  cost = report.adaptive_clipping
  # The default: 10 % of z⁻², i.e. of ρ in proportion k : sens² for the realized (k, sens).
  counts = report.participation.max_participations * 0.1 / 0.9
  assert cost.share == pytest.approx(counts / (report.sensitivity ** 2 + counts), rel=1e-9)
  assert os.path.exists(tmp_path / "whole" / "figures" / "clip_norm.png")
  assert "adaptive clipping" in (tmp_path / "whole" / "privacy_report.md").read_text()


def test_dpfedavg_with_an_adaptive_clip_norm_resumes_bitwise(tmp_path):
  task = toy_task.make_task()

  def config(name):
    return toy_program.toy_config(str(tmp_path / name), 6, "dpfedavg", participation="poisson",
                                  population_sampling_rate=0.5, **ADAPTIVE)

  whole = program.run(task, config("whole"))
  split = config("split")
  assert program.run(task, split, max_rounds_this_call=3).stopped == "paused"
  resumed = program.run(task, split)
  assert resumed.resumed_from == 3 and resumed.epsilon == whole.epsilon
  a, b = (checkpoints_lib.CheckpointManager(os.path.join(c.root_dir, "checkpoints"))
          .restore_latest() for c in (config("whole"), split))
  assert len(a.arrays) == len(b.arrays)
  for x, y in zip(a.arrays, b.arrays):
    assert np.array_equal(x, y)
  assert whole.privacy_report.update_noise_multiplier == split.noise_multiplier
  assert whole.privacy_report.noise_multiplier < split.noise_multiplier  # z_eff < z_Δ.


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
