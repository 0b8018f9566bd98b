"""Tests for the diurnal availability model (documented rule, fast path, frequencies)."""

from __future__ import annotations

import math

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.participation import availability as availability_lib
from dp_fl.participation import base


def rule(offset, start, length, p, n, device, t, seed):
  """The module docstring's rule for one device, in plain Python."""
  u = t + float(np.mod(offset - start, 24.0))
  day = math.floor(u / 24.0)
  if u - 24.0 * day >= length:
    return False
  rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3, day)))
  return bool(rng.random(n)[device] < p)


@hypothesis.settings(derandomize=True, deadline=None, max_examples=60)
@hypothesis.given(st.integers(1, 60), st.integers(0, 1000), st.floats(0.0, 23.99),
                  st.floats(0.01, 24.0), st.floats(0.05, 1.0),
                  st.lists(st.floats(0.0, 2000.0), min_size=1, max_size=6))
def test_fast_path_and_mask_follow_the_rule(n, seed, start, length, p, times):
  model = availability_lib.DiurnalAvailability.random_timezones(
      n, seed, offset_range_hours=(-23.5, 23.5), window_start_hour=start, window_hours=length,
      daily_probability=p)
  offsets = model.timezone_offsets_hours
  for t in times:
    mask = model.available(np.arange(n), t, seed)
    expected = [rule(offsets[d], start, length, p, n, d, t, seed) for d in range(n)]
    np.testing.assert_array_equal(mask, expected)
    np.testing.assert_array_equal(np.sort(model.available_ids(t, seed)), np.flatnonzero(mask))


def test_long_run_fraction():
  """Average availability over a week of hourly samples ~ p * window / 24 (5 sd)."""
  n = 20000
  model = availability_lib.DiurnalAvailability.random_timezones(
      n, 1, offset_range_hours=(-12.0, 12.0), window_hours=6.0, daily_probability=0.4)
  fractions = [model.available_ids(t + 0.5, 9).size / n for t in range(0, 24 * 7)]
  expected = model.long_run_fraction()
  assert expected == pytest.approx(0.1)
  # Per-sample sd <= sqrt(p (1 - p) / n) (coins are shared within a day, hence the loose bound).
  assert abs(np.mean(fractions) - expected) < 5 * math.sqrt(expected * (1 - expected) / n) * 3


def test_coin_is_fixed_within_a_window():
  model = availability_lib.DiurnalAvailability(np.array([0.0, 0.0]), window_start_hour=22.0,
                                               window_hours=8.0, daily_probability=0.5)
  # 22:00 to 06:00 is one window (one coin), even across midnight.
  states = {tuple(model.available(np.array([0, 1]), t, 3)) for t in (22.5, 23.9, 24.5, 29.9)}
  assert len(states) == 1
  assert not model.available(np.array([0, 1]), 30.5, 3).any()


def test_always_available():
  model = availability_lib.AlwaysAvailable()
  assert model.available(np.arange(4), 5.0, 0).all()
  assert model.available_ids(5.0, 0) is None
  assert model.long_run_fraction() == 1.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(timezone_offsets_hours=[24.0]), "timezone_offsets_hours"),
    (dict(timezone_offsets_hours=[]), "timezone_offsets_hours"),
    (dict(timezone_offsets_hours=[0.0], window_start_hour=24.0), "window_start_hour"),
    (dict(timezone_offsets_hours=[0.0], window_hours=0.0), "window_hours"),
    (dict(timezone_offsets_hours=[0.0], window_hours=25.0), "window_hours"),
    (dict(timezone_offsets_hours=[0.0], daily_probability=0.0), "daily_probability"),
    (dict(timezone_offsets_hours=[float("nan")]), "timezone_offsets_hours"),
])
def test_bad_input(kwargs, match):
  with pytest.raises(ValueError, match=match):
    availability_lib.DiurnalAvailability(**kwargs)


def test_negative_time_rejected():
  model = availability_lib.DiurnalAvailability(np.zeros(2))
  with pytest.raises(ValueError, match="time_hours"):
    model.available(np.arange(2), -1.0, 0)


@pytest.mark.parametrize("hours,start,length", [(1.0, 22.0, 8.0), (0.7, 21.5, 7.3),
                                                (3.0, 0.0, 24.0), (5.0, 23.0, 2.0),
                                                (1.0 / 3.0, 22.0, 8.0)])
def test_round_windows_are_each_devices_windows(hours, start, length):
  """Classes = distinct per-round windows: each device's row is its own window by the rule,
  computed device by device here; and a device is available at a round exactly when the
  round is in its window and that window's coin came up."""
  offsets = np.concatenate([np.random.default_rng(1).uniform(-3.0, 3.0, 3000),
                            [0.0, 1.0, -2.0, 3.0 - 1e-13, 2.0 + 1e-15]])  # Edges too.
  model = availability_lib.DiurnalAvailability(offsets, window_start_hour=start,
                                           window_hours=length, daily_probability=0.4)
  n = 90
  windows, klass = model.round_windows(n, hours)
  assert np.unique(windows, axis=0).shape[0] == windows.shape[0]  # Distinct classes.
  times = model.round_times(n, hours)
  grid = times / hours
  assert np.allclose(grid, np.round(grid)) and np.all(np.diff(times) > 0)
  skipped = sorted(set(range(int(round(grid[-1])))) - set(np.round(grid).astype(int)))
  for k in skipped:  # Only times at which no device's window is open are skipped (up to
    u = k * hours + (offsets - start) % 24.0  # float rounding at a window's edge).
    local = u - 24.0 * np.floor(u / 24.0)
    assert not np.any((local > 1e-9) & (local < length - 1e-9)), k
  for d in range(offsets.size):
    phase = (offsets[d] - start) % 24.0
    want = []
    for t in range(n):
      u = times[t] + phase
      day = math.floor(u / 24.0)
      want.append(day if u - 24.0 * day < length else -1)
    assert windows[klass[d]].tolist() == want, d
  seed = 11
  for t in range(0, n, 7):
    here = model.available(np.arange(offsets.size), times[t], seed)
    window = windows[klass, t]
    assert not np.any(here[window < 0])
    for day in np.unique(window[window >= 0]):
      coins = base.round_rng(seed, base.STREAM_AVAILABILITY, int(day)).random(
          offsets.size) < 0.4
      members = window == day
      np.testing.assert_array_equal(here[members], coins[members])
  assert availability_lib.AlwaysAvailable().round_windows(n, hours) is None


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
