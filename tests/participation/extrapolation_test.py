"""Tests for extrapolation of realized min-sep / max participations (paper 004 Sec. 5)."""

from __future__ import annotations

import math

import pytest

from dp_fl.participation import availability as availability_lib
from dp_fl.participation import extrapolation


def test_optimistic_formulas_on_paper_settings():
  # Paper 004 Sec. 5: es-ES population 4.21M, report goal 6.5K; pt-PT 0.83M with 3K.
  assert extrapolation.optimistic_min_separation(4_210_000, 6500) == 647
  assert extrapolation.optimistic_min_separation(830_000, 3000) == 276
  # App. A: b = 400 over n = 4000 rounds -> k = 10 is ceil(n / b).
  assert extrapolation.optimistic_max_participations(4000, 400) == 10
  assert extrapolation.optimistic_max_participations(2000, 100) == 20
  assert extrapolation.optimistic_max_participations(2001, 100) == 21


def test_always_available_matches_the_optimistic_estimate():
  """Timer = floor(N/m) rounds, every device always available: realized b = floor(N/m)."""
  n, m, rounds = 5000, 60, 900
  b = extrapolation.optimistic_min_separation(n, m)  # 83
  hours = extrapolation.rounds_per_timer(b * 0.5, 0.5)
  assert hours == b
  result = extrapolation.extrapolate(n, m, rounds, seeds=(0, 1), min_separation_hours=b * 0.5,
                                     round_duration_hours=0.5)
  assert result.min_separation == b == result.optimistic_min_separation
  assert result.max_participations <= math.ceil(rounds / b)
  assert result.rounds_short == (0, 0)
  assert result.enforced_min_separation == b


def test_diurnal_availability_lowers_the_realized_participation():
  n, m, rounds = 3000, 40, 600
  model = availability_lib.DiurnalAvailability.random_timezones(
      n, 0, offset_range_hours=(-2.0, 2.0), window_hours=8.0, daily_probability=0.5)
  result = extrapolation.extrapolate(n, m, rounds, seeds=(3,), min_separation_hours=48.0,
                                     availability=model, round_duration_hours=(0.5, 1.5))
  # Offsets within +-2 h and an 8 h window: for >= 12 h a day no device is available,
  # so many rounds run short; the realized values come from the simulation, not the formula.
  trial = result.trials[0]
  assert result.rounds_short[0] > 0 and result.total_shortfall[0] > 0
  assert trial.num_rounds == rounds
  # Empty selections are skipped as training skips them (no row of C): `rounds` rows are
  # committed, and the skipped selections' shortfall (all m) is in the log too.
  skipped = result.skipped_empty_rounds[0]
  assert skipped > 0 and trial.discarded_draws == skipped
  assert trial.total_participations == rounds * m - (result.total_shortfall[0] - skipped * m)
  assert result.enforced_min_separation == 32  # ceil(48 h / 1.5 h), in selections
  # In rows of C the skipped nights no longer count: the realized min-sep is lower.
  assert 1 <= result.min_separation < 32


@pytest.mark.parametrize("call,match", [
    (lambda: extrapolation.optimistic_min_separation(10, 11), "report_goal"),
    (lambda: extrapolation.optimistic_max_participations(10, 0), "min_separation"),
    (lambda: extrapolation.extrapolate(10, 2, 5, seeds=(), min_separation_rounds=1), "seeds"),
    (lambda: extrapolation.extrapolate(100, 10, 20, min_separation_rounds=50), "stall"),
    (lambda: extrapolation.rounds_per_timer(0.0, 1.0), "min_separation_hours"),
])
def test_bad_input(call, match):
  with pytest.raises(ValueError, match=match):
    call()


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
