"""Tests for dp_fl.participation.ledger against a brute-force recomputation."""

from __future__ import annotations

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.participation import ledger as ledger_lib


def brute_force(num_clients, history):
  """(min_sep, max_par, histogram) from the list of (round, ids), pair by pair."""
  rounds_of = {c: [] for c in range(num_clients)}
  for r, ids in history:
    for c in ids:
      rounds_of[c].append(r)
  min_sep = None
  for rs in rounds_of.values():
    for i in range(len(rs)):
      for j in range(i + 1, len(rs)):  # all pairs, not only consecutive ones
        gap = abs(rs[j] - rs[i])
        min_sep = gap if min_sep is None else min(min_sep, gap)
  counts = [len(rs) for rs in rounds_of.values()]
  hist = [0] * (max(counts) + 1)
  for c in counts:
    hist[c] += 1
  return min_sep, max(counts), tuple(hist)


@st.composite
def histories(draw):
  n = draw(st.integers(1, 40))
  num_rounds = draw(st.integers(0, 60))
  history = []
  r = 0
  for _ in range(num_rounds):
    r += draw(st.integers(0, 3))  # rounds may be skipped (empty rounds)
    ids = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    history.append((r, ids))
    r += 1
  return n, history


@hypothesis.settings(derandomize=True, deadline=None, max_examples=200)
@hypothesis.given(histories())
def test_realized_matches_brute_force(case):
  n, history = case
  ledger = ledger_lib.ParticipationLedger(n)
  for r, ids in history:
    ledger.record(r, np.asarray(ids, dtype=np.int64))
  min_sep, max_par, hist = brute_force(n, history)
  realized = ledger.realized()
  assert realized.min_separation == min_sep
  assert realized.max_participations == max_par
  assert realized.participation_histogram == hist
  assert realized.num_rounds == (history[-1][0] + 1 if history else 0)
  assert realized.total_participations == sum(len(ids) for _, ids in history)
  # Separation histogram: consecutive gaps per client.
  gaps = []
  for c in range(n):
    rs = [r for r, ids in history if c in ids]
    gaps += [b - a for a, b in zip(rs, rs[1:])]
  expected = np.bincount(gaps) if gaps else np.zeros(0, dtype=np.int64)
  np.testing.assert_array_equal(ledger.separation_histogram(), expected)
  for c in range(n):
    rs = [r for r, ids in history if c in ids]
    assert ledger.first_round[c] == (rs[0] if rs else -1)
    assert ledger.last_round[c] == (rs[-1] if rs else -1)
    assert ledger.counts[c] == len(rs)
  restored = ledger_lib.ParticipationLedger.from_bytes(ledger.to_bytes())
  assert restored.realized() == realized
  np.testing.assert_array_equal(restored.separation_histogram(), ledger.separation_histogram())


def test_known_pattern():
  ledger = ledger_lib.ParticipationLedger(5)
  ledger.record(0, np.array([0, 1]))
  ledger.record(3, np.array([0, 2]))
  ledger.record(4, np.array([1, 2]))
  r = ledger.realized()
  assert r.min_separation == 1  # client 2: rounds 3, 4
  assert r.max_participations == 2
  assert r.participation_histogram == (2, 0, 3)
  assert r.num_participants == 3
  assert r.num_rounds == 5


def test_empty_ledger():
  r = ledger_lib.ParticipationLedger(3).realized()
  assert r.min_separation is None and r.max_participations == 0
  assert r.participation_histogram == (3,)


def test_refusals_are_counted():
  ledger = ledger_lib.ParticipationLedger(4)
  ledger.record_refusal(np.array([1, 1, 3]))
  np.testing.assert_array_equal(ledger.refusals, [0, 2, 0, 1])
  assert ledger.realized().refused_check_ins == 3


def test_arrays_are_read_only():
  ledger = ledger_lib.ParticipationLedger(3)
  with pytest.raises(ValueError):
    ledger.counts[0] = 5


def test_memory_is_compact():
  ledger = ledger_lib.ParticipationLedger(1_000_000)
  assert ledger.nbytes <= 16_000_000


@pytest.mark.parametrize("round_index,ids,match", [
    (0, [0, 0], "distinct"),
    (0, [5], r"\[0, 4\)"),
    (0, [-1], r"\[0, 4\)"),
    (0, [[0]], "1-D"),
    (0, [0.5], "integers"),
    (-1, [0], "round_index"),
])
def test_bad_records(round_index, ids, match):
  with pytest.raises(ValueError, match=match):
    ledger_lib.ParticipationLedger(4).record(round_index, np.asarray(ids))


def test_rounds_must_increase():
  ledger = ledger_lib.ParticipationLedger(4)
  ledger.record(2, np.array([0]))
  with pytest.raises(ValueError, match="in order"):
    ledger.record(2, np.array([1]))


def test_bad_num_clients():
  with pytest.raises(ValueError, match="num_clients"):
    ledger_lib.ParticipationLedger(0)


def test_from_bytes_rejects_garbage():
  with pytest.raises(ValueError, match="not a participation state"):
    ledger_lib.ParticipationLedger.from_bytes(b"garbage")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))


def test_smallest_cohort_is_tracked_through_what_ifs_and_state():
  # cpSGD's noise comes from the clients of a round: its accountant needs the smallest cohort.
  ledger = ledger_lib.ParticipationLedger(10)
  assert ledger.realized().min_cohort is None
  for r, ids in enumerate(([0, 1, 2], [], [3, 4], [5, 6, 7, 8, 9])):
    ledger.record(r, np.array(ids, dtype=np.int64))
  assert ledger.realized().min_cohort == 2  # The empty round has no noise and no data.
  assert ledger.realized_if(4, [0]).min_cohort == 1
  assert ledger.realized_if(4, []).min_cohort == 2
  restored = ledger_lib.ParticipationLedger.from_bytes(ledger.to_bytes())
  assert restored.realized() == ledger.realized()
  # A state written before the field existed: from the participation record.
  meta, arrays = ledger.state_arrays()
  del meta["min_cohort"]
  assert ledger_lib.ParticipationLedger.from_state_arrays(meta, arrays).realized().min_cohort == 2
  for name in ("record_ids", "record_rounds", "record_sizes"):
    del arrays[name]
  old = ledger_lib.ParticipationLedger.from_state_arrays(meta, arrays)
  assert old.realized().min_cohort == 1  # No record: the least noise a round can have had.
