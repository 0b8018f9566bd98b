"""Tests of dp_fl.mechanisms.blt_optimize, the BLT optimizer of paper 004, Sec. 3.3: its
parameterization and gradient, the losses it reaches (Table 3, the references kept by
scripts/bench_blt.py), its validation, and its batched runs against scipy's one at a time."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import blt_optimize
from dp_fl.mechanisms import optimize
from scripts import bench_blt
from tests.mechanisms import oracles

# The optimizer's losses before they were in closed form (scripts/bench_blt.py keeps them).
REFERENCE_LOSSES = bench_blt.REFERENCE_LOSSES
REFERENCE_TABLE3 = bench_blt.REFERENCE_TABLE3


@pytest.mark.parametrize("loss", ["max", "rms"])
def test_objective_gradient_in_optimizer_parameters(loss):
  rng = np.random.default_rng(3)
  gap, gap_hat = oracles.interlaced_gaps(3, rng)
  # The optimizer orders buffers by increasing decay, i.e. decreasing gap.
  gap, gap_hat = gap[::-1].copy(), gap_hat[::-1].copy()
  y = blt_optimize._params_from_gaps(gap, gap_hat)
  got_gap, got_gap_hat, _, _ = blt_optimize._gaps_from_params(y)
  np.testing.assert_allclose(got_gap, gap, rtol=1e-9)
  np.testing.assert_allclose(got_gap_hat, gap_hat, rtol=1e-9)
  args = (200, 30, 4, loss, 1e-7)
  _, grad = oracles.blt_objective_at(y, *args)
  for i in range(y.size):
    e = np.zeros(y.size)
    e[i] = 1e-6
    fd = (oracles.blt_objective_at(y + e, *args)[0] -
          oracles.blt_objective_at(y - e, *args)[0]) / 2e-6
    assert grad[i] == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_optimizer_small_problem_beats_fewer_buffers_and_is_consistent():
  one = blt_optimize.optimize_blt(64, 8, 4, 1)
  two = blt_optimize.optimize_blt(64, 8, 4, 2)
  assert two.loss_value < one.loss_value
  assert [d for d, _ in two.history] == [1, 2]
  m = two.blt
  assert m.setting == blt.BltSetting(64, 8, 4, 2, "max")
  assert all(0 < t < 1 for t in m.theta) and all(w > 0 for w in m.omega)
  sens, max_err, _, _ = oracles.blt_dense_losses(m.theta, m.omega, 64, 8, 4)
  assert two.loss_value == pytest.approx(sens * max_err, rel=1e-8)
  assert two.evaluation.max_loss == two.loss_value


def test_optimizer_rms_loss_prefers_rms():
  by_rms = blt_optimize.optimize_blt(64, 8, 4, 2, loss="rms")
  by_max = blt_optimize.optimize_blt(64, 8, 4, 2, loss="max")
  assert by_rms.evaluation.rms_loss <= by_max.evaluation.rms_loss * (1 + 1e-9)
  assert by_max.evaluation.max_loss <= by_rms.evaluation.max_loss * (1 + 1e-9)
  assert by_rms.blt.setting.loss == "rms"


def test_optimizer_reduces_infeasible_participations_with_warning():
  with pytest.warns(blt.ParticipationReducedWarning, match="ceil"):
    res = blt_optimize.optimize_blt(20, 8, 9, 1)
  assert res.max_participations == 3
  assert res.requested_max_participations == 9
  assert "feasible maximum" in res.message
  assert res.blt.setting.max_participations == 3
  with pytest.warns(blt.ParticipationReducedWarning):
    ev = res.blt.evaluate(20, 8, 9)
  assert ev.max_participations == 3
  assert ev.message is not None


def test_optimizer_starts_from_a_blt_with_a_decay_within_1e11_of_one():
  published = blt.PUBLISHED_BLTS[400]  # theta_1 = 1 - 7.9e-12.
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # No overflow / invalid-value warnings.
    res = blt_optimize.optimize_blt(300, 60, 5, 4, initial=published, num_starts=1,
                           warm_start=False)
  assert np.isfinite(res.loss_value)
  assert res.loss_value <= published.max_loss(300, 60, 5)
  assert res.blt.buffers == 4


def test_optimizer_refuses_initial_outside_its_domain():
  with pytest.raises(ValueError, match="`initial`"):
    blt_optimize.optimize_blt(50, 5, 2, 2, initial=blt.Blt((1.0, 0.5), (0.1, 0.2)))
  with pytest.raises(ValueError, match="`initial`"):
    blt_optimize.optimize_blt(50, 5, 2, 1, initial="blt")


def test_table3_two_buffer_rows():
  # Paper 004, Table 3 (n=2052, k=6, b=342), loss columns MaxLoss / RmsLoss.
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    single = blt_optimize.optimize_blt(2052, 342, 1, 2).blt.evaluate(2052, 342, 6)
    multi = blt_optimize.optimize_blt(2052, 342, 6, 2).evaluation
  assert round(single.max_loss, 2) == 11.80
  assert round(single.rms_loss, 2) == 11.15
  assert round(multi.max_loss, 2) == 10.81
  assert round(multi.rms_loss, 2) == 9.34


@pytest.mark.parametrize("setting", sorted(REFERENCE_LOSSES))
def test_optimizer_reproduces_reference_losses(setting):
  res = blt_optimize.optimize_blt(*setting)
  assert res.loss_value == pytest.approx(REFERENCE_LOSSES[setting], rel=1e-6)
  ev = oracles.blt_evaluate_materialized(res.blt, *setting[:3]) if setting[0] <= 4000 else None
  if ev is not None:  # The closed-form evaluation agrees with the materialized one.
    value = ev.max_loss if setting[4] == "max" else ev.rms_loss
    assert res.loss_value == pytest.approx(value, rel=1e-10)


@pytest.mark.parametrize("row", sorted(REFERENCE_TABLE3))
def test_optimizer_reproduces_reference_table3_rows(row):
  buffers, k = row
  ev = blt_optimize.optimize_blt(2052, 342, k, buffers).blt.evaluate(2052, 342, 6)
  want_max, want_rms = REFERENCE_TABLE3[row]
  assert ev.max_loss == pytest.approx(want_max, rel=1e-6)
  assert ev.rms_loss == pytest.approx(want_rms, rel=1e-6)


@pytest.mark.parametrize("loss", ["max", "rms"])
def test_runs_advanced_together_match_scipy_minimize_one_at_a_time(loss, monkeypatch):
  rng = np.random.default_rng(5)
  starts = [blt_optimize._params_from_gaps(*blt_optimize._initial_gaps(3, 500, rng, jitter=s > 0))
            for s in range(4)]
  args = (500, 50, 6, loss, blt_optimize.DEFAULT_PENALTY_STRENGTH, 25, 1e-12)
  together = blt_optimize._minimize_all(starts, *args)
  if optimize._SETULB is None:
    pytest.skip("scipy's setulb has another signature: _minimize_all uses scipy.optimize")
  monkeypatch.setattr(optimize, "_SETULB", None)
  alone = blt_optimize._minimize_all(starts, *args)
  for (y1, f1), (y2, f2) in zip(together, alone):  # Bitwise the same runs.
    assert f1 == f2
    np.testing.assert_array_equal(y1, y2)


def test_json_round_trip_is_exact_and_keeps_setting():
  res = blt_optimize.optimize_blt(40, 5, 3, 2, loss="rms")
  text = res.blt.to_json()
  data = json.loads(text)
  assert data["mechanism"] == "blt"
  assert data["setting"] == {"n": 40, "min_sep": 5, "max_participations": 3,
                             "buffers": 2, "loss": "rms"}
  back = blt.Blt.from_json(text)
  assert back == res.blt
  plain = blt.Blt((0.5,), (0.25,))
  assert blt.Blt.from_json(plain.to_json()) == plain


@pytest.mark.parametrize("kwargs,match", [
    (dict(n=0, min_sep=1, max_participations=1, buffers=1), "`n`.*0"),
    (dict(n=10, min_sep=0, max_participations=1, buffers=1), "`min_sep`"),
    (dict(n=10, min_sep=2, max_participations=0, buffers=1),
     "`max_participations`"),
    (dict(n=10, min_sep=2, max_participations=1, buffers=0), "`buffers`"),
    (dict(n=10, min_sep=2, max_participations=1, buffers=1, loss="mean"),
     "`loss`.*'mean'"),
    (dict(n=1, min_sep=1, max_participations=1, buffers=1), "`n`.*>= 2"),
    (dict(n=10, min_sep=2.5, max_participations=1, buffers=1), "`min_sep`"),
])
def test_optimizer_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    blt_optimize.optimize_blt(**kwargs)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
