"""Property tests for the device-timer scheduler (paper 004 Alg. 1, Sec. 1, App. C).

Every selection is re-checked by brute force from the selection history: the
device was available (or had checked in) at the round's start, its timer had
expired (>= T hours since its previous round's start) and/or >= b rounds had
passed, the cohort is exactly min(report goal, #available-and-eligible), and
the ledger's realized min-sep / max participations equal a recomputation.
"""

from __future__ import annotations

import math

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
from scipy import stats

from dp_fl.participation import availability as availability_lib
from dp_fl.participation import device_timer
from dp_fl.participation import ledger as ledger_lib


_COINS = {}


def brute_available(model, seed, ids, t):
  """Availability recomputed from the documented rule (module docstring of availability)."""
  if isinstance(model, availability_lib.AlwaysAvailable):
    return np.ones(len(ids), dtype=bool)
  config = model.to_config()[0]
  offsets = model.timezone_offsets_hours
  phase = np.mod(offsets[ids] - config["window_start_hour"], 24.0)
  u = t + phase
  day = np.floor(u / 24.0)
  out = (u - 24.0 * day) < config["window_hours"]
  for d in np.unique(day[out]).astype(int).tolist():
    key = (seed, d, len(offsets), config["daily_probability"])
    if key not in _COINS:
      rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3, d)))
      _COINS[key] = rng.random(len(offsets)) < config["daily_probability"]
    sel = out & (day == d)
    out[sel] = _COINS[key][ids[sel]]
  return out


@st.composite
def configs(draw):
  n = draw(st.integers(5, 120))
  m = draw(st.integers(1, max(1, n // 3)))
  rounds = draw(st.integers(1000, 2500))
  use_hours = draw(st.booleans())
  use_rounds = (not use_hours) or draw(st.booleans())
  kwargs = {}
  if use_hours:
    kwargs["min_separation_hours"] = draw(st.floats(0.5, 30.0))
  if use_rounds:
    kwargs["min_separation_rounds"] = draw(st.integers(1, max(1, n // m)))
  if draw(st.booleans()):
    lo = draw(st.floats(0.1, 3.0))
    kwargs["round_duration_hours"] = (lo, lo + draw(st.floats(0.0, 3.0)))
  else:
    kwargs["round_duration_hours"] = draw(st.floats(0.1, 3.0))
  if draw(st.booleans()):
    kwargs["availability"] = availability_lib.DiurnalAvailability.random_timezones(
        n, draw(st.integers(0, 5)), offset_range_hours=(-12.0, 12.0),
        window_start_hour=draw(st.floats(0.0, 23.9)), window_hours=draw(st.floats(1.0, 20.0)),
        daily_probability=draw(st.floats(0.2, 1.0)))
  if draw(st.booleans()):
    kwargs["on_shortfall"] = "wait"
    kwargs["wait_step_hours"] = draw(st.floats(0.1, 2.0))
    kwargs["max_wait_hours"] = draw(st.floats(0.0, 6.0))
  return n, m, rounds, draw(st.integers(0, 2**32)), kwargs


def run_and_check(n, m, rounds, seed, kwargs, check_in_prob=0.0):
  try:
    scheduler = device_timer.DeviceTimerScheduler(n, m, rounds, seed, **kwargs)
  except ValueError as e:  # the stall check: verify it is justified, then skip
    assert "Training would stall" in str(e)
    hypothesis.assume(False)
  model = scheduler.availability
  sep_h = kwargs.get("min_separation_hours")
  sep_r = kwargs.get("min_separation_rounds")
  last_time = np.full(n, -np.inf)
  last_round = np.full(n, -1)
  history = []
  rng = np.random.default_rng(seed)
  refusals = np.zeros(n, dtype=int)

  def brute_eligible(t, r):
    eligible = np.ones(n, dtype=bool)
    if sep_h is not None:
      eligible &= (t - last_time) >= sep_h
    if sep_r is not None:
      eligible &= (last_round < 0) | (r - last_round >= sep_r)
    return eligible

  for r in range(rounds):
    checked_in = np.zeros(n, dtype=bool)
    if check_in_prob:
      asking = np.flatnonzero(rng.random(n) < check_in_prob)
      accepted = scheduler.check_in(asking)
      np.testing.assert_array_equal(accepted, brute_eligible(scheduler.clock_hours, r)[asking])
      refusals[asking[~accepted]] += 1
      checked_in[asking[accepted]] = True
    sel = scheduler.next_round()
    t = sel.start_time_hours
    assert sel.round_index == r
    # Brute-force candidate set at the round's start time.
    eligible = brute_eligible(t, r)
    present = brute_available(model, seed, np.arange(n), t) | checked_in
    candidates = set(np.flatnonzero(eligible & present).tolist())
    ids = sel.client_ids.tolist()
    assert set(ids) <= candidates, "a device was selected while ineligible or unavailable"
    assert len(ids) == min(m, len(candidates))
    assert len(set(ids)) == len(ids)
    assert sel.shortfall == m - len(ids) and sel.denominator == m
    if kwargs.get("on_shortfall") == "wait":
      assert sel.waited_hours <= kwargs["max_wait_hours"] + 1e-9
      if sel.waited_hours and len(ids) == m:
        assert sel.num_candidates >= m
    else:
      assert sel.waited_hours == 0
    last_time[ids] = t
    last_round[ids] = r
    history.append((r, ids))
  np.testing.assert_array_equal(scheduler.ledger.refusals, refusals)
  return scheduler, history


@hypothesis.settings(derandomize=True, deadline=None, max_examples=25)
@hypothesis.given(configs())
def test_never_ineligible_and_ledger_matches_brute_force(config):
  n, m, rounds, seed, kwargs = config
  scheduler, history = run_and_check(n, m, rounds, seed, kwargs)
  # Realized min-sep (all pairs = consecutive pairs) and max participations.
  per_client = [[] for _ in range(n)]
  for r, ids in history:
    for c in ids:
      per_client[c].append(r)
  gaps = [b - a for rs in per_client for a, b in zip(rs, rs[1:])]
  realized = scheduler.realized()
  assert realized.min_separation == (min(gaps) if gaps else None)
  assert realized.max_participations == max(len(rs) for rs in per_client)
  assert realized.participation_histogram == tuple(
      np.bincount([len(rs) for rs in per_client]).tolist())
  if gaps:
    assert min(gaps) >= scheduler.enforced_min_separation
  short = [(r, m - len(ids)) for r, ids in history if len(ids) < m]
  assert scheduler.shortfall_log() == short


@hypothesis.settings(derandomize=True, deadline=None, max_examples=8)
@hypothesis.given(configs())
def test_misbehaving_check_ins_are_refused(config):
  """Devices checking in at random times (ignoring their timers) are refused when ineligible.

  `run_and_check` verifies each check-in answer against brute-force eligibility,
  that refused devices are never selected in that round, that accepted ones may
  be selected even when the availability model says they are away, and that
  the ledger counts every refusal. The realized (b, k) of the run still equal
  the brute-force values (paper 004 App. C: misbehaving clients do not affect
  the others' guarantees).
  """
  n, m, rounds, seed, kwargs = config
  scheduler, history = run_and_check(n, m, min(rounds, 1200), seed, kwargs, check_in_prob=0.3)
  assert scheduler.realized().refused_check_ins == int(scheduler.ledger.refusals.sum())
  per_client = [[] for _ in range(n)]
  for r, ids in history:
    for c in ids:
      per_client[c].append(r)
  gaps = [b - a for rs in per_client for a, b in zip(rs, rs[1:])]
  assert scheduler.realized().min_separation == (min(gaps) if gaps else None)
  if gaps:
    assert min(gaps) >= scheduler.enforced_min_separation


def test_check_in_refuses_and_counts():
  s = device_timer.DeviceTimerScheduler(10, 2, 10, seed=1, min_separation_rounds=5)
  first = s.next_round().client_ids
  ok = s.check_in(np.concatenate([first, [d for d in range(10) if d not in first][:1]]))
  np.testing.assert_array_equal(ok, [False, False, True])
  np.testing.assert_array_equal(s.ledger.refusals[first], [1, 1])
  assert s.realized().refused_check_ins == 2
  # A device that keeps asking every round is never selected within 5 rounds.
  for _ in range(4):
    s.check_in(first)
    assert not set(first) & set(s.next_round().client_ids.tolist())
  assert s.realized().min_separation is None or s.realized().min_separation >= 5


def test_checked_in_device_joins_candidates_when_unavailable():
  # A window that never covers time ~0 for offset 0: nobody is available by the model.
  model = availability_lib.DiurnalAvailability(np.zeros(4), window_start_hour=12.0,
                                               window_hours=1.0, daily_probability=1.0)
  s = device_timer.DeviceTimerScheduler(4, 2, 4, seed=0, min_separation_hours=1.0,
                                        availability=model)
  assert s.check_in(np.array([3])).tolist() == [True]
  sel = s.next_round()
  assert sel.client_ids.tolist() == [3] and sel.shortfall == 1
  assert s.shortfall_log() == [(0, 1)]


def test_round_mode_min_sep_is_population_over_report_goal():
  """Always available, b = floor(N/m): realized min-sep = b exactly, no shortfall."""
  n, m = 1000, 13
  b = n // m  # 76
  s = device_timer.DeviceTimerScheduler(n, m, 1500, seed=3, min_separation_rounds=b)
  for _ in range(1500):
    assert s.next_round().cohort_size == m
  assert s.realized().min_separation == b
  assert s.realized().max_participations <= math.ceil(1500 / b)


def test_timer_mode_min_sep_with_fixed_duration():
  n, m = 600, 10
  s = device_timer.DeviceTimerScheduler(n, m, 800, seed=0, min_separation_hours=30.0,
                                        round_duration_hours=0.5)
  for _ in range(800):
    s.next_round()
  assert s.enforced_min_separation == 60
  assert s.realized().min_separation == 60
  assert s.shortfall_log() == []


def test_short_rounds_are_logged_and_wait_mode_waits():
  # N = 20, m = 5, b = 5 rounds needs 25 devices: every 5th round runs short.
  s = device_timer.DeviceTimerScheduler(20, 5, 20, seed=0, min_separation_rounds=5)
  sizes = [s.next_round().cohort_size for _ in range(20)]
  assert sizes == [5, 5, 5, 5, 0] * 4  # 20 devices cover 4 rounds; round 5 has none eligible
  assert s.shortfall_log() == [(4, 5), (9, 5), (14, 5), (19, 5)]
  # Timer mode: waiting lets timers expire, so the round is full after a wait.
  w = device_timer.DeviceTimerScheduler(20, 5, 20, seed=0, min_separation_hours=5.0,
                                        round_duration_hours=1.0, on_shortfall="wait",
                                        wait_step_hours=0.5, max_wait_hours=3.0)
  sels = [w.next_round() for _ in range(20)]
  assert all(x.cohort_size == 5 for x in sels)
  assert any(x.waited_hours > 0 for x in sels)
  assert w.wait_log() and w.shortfall_log() == []


def test_uniform_among_candidates():
  """With no binding constraint, per-device counts are Multinomial-like: chi-square p > 1e-6.

  Deterministic seed; the flake rate for a fresh seed would be < 1e-6.
  """
  n, m, rounds = 50, 5, 4000
  s = device_timer.DeviceTimerScheduler(n, m, rounds, seed=11, min_separation_rounds=1)
  for _ in range(rounds):
    s.next_round()
  counts = s.ledger.counts
  assert stats.chisquare(counts).pvalue > 1e-6


def test_state_size_for_a_million_devices():
  s = device_timer.DeviceTimerScheduler(1_000_000, 6500, 2000, seed=0,
                                        min_separation_hours=150.0)
  assert s.state_nbytes < 30_000_000


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_devices=10, report_goal=11, planned_rounds=5, min_separation_rounds=1),
     "report_goal"),
    (dict(num_devices=100, report_goal=10, planned_rounds=20, min_separation_rounds=20),
     "Training would stall:.*no device can become eligible again"),
    (dict(num_devices=100, report_goal=10, planned_rounds=20, min_separation_hours=1000.0),
     "Training would stall:.*no device can become eligible again"),
    (dict(num_devices=10, report_goal=2, planned_rounds=5), "min_separation_hours"),
    (dict(num_devices=10, report_goal=2, planned_rounds=5, min_separation_hours=-1.0),
     "min_separation_hours"),
    (dict(num_devices=10, report_goal=2, planned_rounds=5, min_separation_rounds=0),
     "min_separation_rounds"),
    (dict(num_devices=10, report_goal=2, planned_rounds=5, min_separation_rounds=1,
          round_duration_hours=(2.0, 1.0)), "lo <= hi"),
    (dict(num_devices=10, report_goal=2, planned_rounds=5, min_separation_rounds=1,
          on_shortfall="skip"), "on_shortfall"),
    (dict(num_devices=10, report_goal=0, planned_rounds=5, min_separation_rounds=1),
     "report_goal"),
    (dict(num_devices=10, report_goal=2, planned_rounds=5, min_separation_rounds=1,
          availability=availability_lib.DiurnalAvailability(np.zeros(3))), "3 devices"),
])
def test_bad_input(kwargs, match):
  with pytest.raises(ValueError, match=match):
    device_timer.DeviceTimerScheduler(seed=0, **kwargs)


def test_guaranteed_shortfall():
  # b = 15 over 40 rounds: at most 3 participations each, 300 < 400 slots.
  s = device_timer.DeviceTimerScheduler(100, 10, 40, seed=0, min_separation_rounds=15)
  assert s.guaranteed_shortfall == 100
  for _ in range(40):
    s.next_round()
  assert sum(x for _, x in s.shortfall_log()) >= 100


def test_wait_mode_relaxes_the_stall_check():
  # 1000 h timer with up to 100 h per round (1 h + 99 h wait) => min-sep >= 10, not a stall.
  s = device_timer.DeviceTimerScheduler(100, 10, 20, seed=0, min_separation_hours=1000.0,
                                        on_shortfall="wait", wait_step_hours=10.0,
                                        max_wait_hours=99.0)
  assert s.enforced_min_separation == 10


def test_check_in_rejects_bad_ids():
  s = device_timer.DeviceTimerScheduler(10, 2, 5, seed=0, min_separation_rounds=1)
  with pytest.raises(ValueError, match="device_ids"):
    s.check_in(np.array([10]))


def test_ledger_type():
  s = device_timer.DeviceTimerScheduler(10, 2, 5, seed=0, min_separation_rounds=1)
  assert isinstance(s.ledger, ledger_lib.ParticipationLedger)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
