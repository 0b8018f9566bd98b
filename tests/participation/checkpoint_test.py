"""Scheduler state round-trips through bytes exactly, in this and in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.participation import availability as availability_lib
from dp_fl.participation import checkpoint
from dp_fl.participation import device_timer
from dp_fl.participation import ledger as ledger_lib
from dp_fl.participation import sampling

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make(kind: str, seed: int):
  if kind == "timer":
    model = availability_lib.DiurnalAvailability.random_timezones(
        300, seed, offset_range_hours=(-8.0, 8.0), window_hours=10.0, daily_probability=0.7)
    return device_timer.DeviceTimerScheduler(
        300, 12, 400, seed, min_separation_hours=6.0, min_separation_rounds=3,
        availability=model, round_duration_hours=(0.2, 1.3), on_shortfall="wait",
        wait_step_hours=0.5, max_wait_hours=2.0)
  if kind == "poisson":
    return sampling.PoissonScheduler(300, 0.05, seed)
  if kind == "uniform":
    return sampling.UniformScheduler(300, 17, seed)
  if kind == "bins":
    return sampling.BallsInBinsScheduler(300, 9, seed, fixed_size=30)
  if kind == "cyclic":
    return sampling.CyclicScheduler(300, 40, seed, reshuffle_each_epoch=True)
  raise AssertionError(kind)


KINDS = ["timer", "poisson", "uniform", "bins", "cyclic"]


def assert_same_selection(a, b):
  np.testing.assert_array_equal(a.client_ids, b.client_ids)
  assert (a.round_index, a.denominator, a.num_padding, a.shortfall, a.num_candidates,
          a.start_time_hours, a.duration_hours, a.waited_hours) == (
              b.round_index, b.denominator, b.num_padding, b.shortfall, b.num_candidates,
              b.start_time_hours, b.duration_hours, b.waited_hours)


@hypothesis.settings(derandomize=True, deadline=None, max_examples=30)
@hypothesis.given(st.sampled_from(KINDS), st.integers(0, 2**31), st.integers(0, 120),
                  st.integers(1, 60))
def test_restore_continues_identically(kind, seed, before, after):
  original = make(kind, seed)
  for _ in range(before):
    original.next_round()
  if kind == "timer" and before % 3 == 0:
    original.check_in(np.arange(0, 300, 7))  # pending check-ins are part of the state
  blob = original.to_bytes()
  restored = checkpoint.restore_scheduler(blob)
  assert type(restored) is type(original)
  assert restored.round_index == before
  assert restored.realized() == original.realized()
  assert restored.to_bytes() == blob
  for _ in range(after):
    assert_same_selection(original.next_round(), restored.next_round())
  assert restored.realized() == original.realized()


_CHILD = r"""
import sys
import numpy as np
from dp_fl.participation import checkpoint
blob = open(sys.argv[1], "rb").read()
s = checkpoint.restore_scheduler(blob)
ids, times = [], []
for _ in range(int(sys.argv[3])):
  sel = s.next_round()
  ids.append(sel.client_ids)
  times.append(-1.0 if sel.start_time_hours is None else sel.start_time_hours)
np.savez(sys.argv[2], sizes=np.array([len(x) for x in ids]),
         ids=np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64),
         times=np.array(times), ledger=np.frombuffer(s.ledger.to_bytes(), dtype=np.uint8))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_restore_in_fresh_process(kind):
  """Serialize after round r, restore in a subprocess, continue: identical selections."""
  r, more = 150, 120
  original = make(kind, seed=2024)
  for _ in range(r):
    original.next_round()
  with tempfile.TemporaryDirectory() as tmp:
    state_path = os.path.join(tmp, "state.bin")
    out_path = os.path.join(tmp, "out.npz")
    with open(state_path, "wb") as f:
      f.write(original.to_bytes())
    subprocess.run([sys.executable, "-c", _CHILD, state_path, out_path, str(more)], cwd=_ROOT,
                   check=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": "123"})
    with np.load(out_path) as child:
      sizes, ids, times = child["sizes"], child["ids"], child["times"]
      child_ledger = ledger_lib.ParticipationLedger.from_bytes(child["ledger"].tobytes())
  sels = [original.next_round() for _ in range(more)]
  np.testing.assert_array_equal(sizes, [s.cohort_size for s in sels])
  np.testing.assert_array_equal(ids, np.concatenate([s.client_ids for s in sels]))
  np.testing.assert_array_equal(
      times, [-1.0 if s.start_time_hours is None else s.start_time_hours for s in sels])
  assert child_ledger.realized() == original.realized()


def test_wrong_kind_and_garbage():
  blob = sampling.PoissonScheduler(5, 0.5, 0).to_bytes()
  with pytest.raises(ValueError, match="PoissonScheduler"):
    sampling.UniformScheduler.from_bytes(blob)
  with pytest.raises(ValueError, match="not a scheduler"):
    checkpoint.restore_scheduler(ledger_lib.ParticipationLedger(3).to_bytes())
  with pytest.raises(ValueError, match="state"):
    checkpoint.restore_scheduler(b"\x00\x01")


def test_state_bytes_for_a_million_devices_fit_budget():
  s = device_timer.DeviceTimerScheduler(1_000_000, 6500, 2000, 0, min_separation_hours=150.0)
  s.next_round()
  assert len(s.to_bytes()) < 40_000_000


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
