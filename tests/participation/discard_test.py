"""Select / commit / discard / withdraw: the ledger holds exactly the rows of C that were used."""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.participation import base
from dp_fl.participation import checkpoint
from dp_fl.participation import device_timer
from dp_fl.participation import ledger as ledger_lib
from dp_fl.participation import sampling


def _schedulers():
  return {
      "device_timer_rounds": lambda: device_timer.DeviceTimerScheduler(
          12, 2, 30, seed=5, min_separation_rounds=3),
      "device_timer_hours": lambda: device_timer.DeviceTimerScheduler(
          12, 2, 30, seed=5, min_separation_hours=3.0),
      "poisson": lambda: sampling.PoissonScheduler(12, 0.25, seed=5),
      "uniform": lambda: sampling.UniformScheduler(12, 2, seed=5),
      "balls_in_bins": lambda: sampling.BallsInBinsScheduler(12, 4, seed=5, fixed_size=2),
      "cyclic": lambda: sampling.CyclicScheduler(12, 2, seed=5, reshuffle_each_epoch=True),
      "cyclic_poisson": lambda: sampling.CyclicPoissonScheduler(12, 3, 0.5, seed=5),
  }


SCHEDULERS = _schedulers()


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_without_discards_select_commit_equals_next_round(name):
  a, b = SCHEDULERS[name](), SCHEDULERS[name]()
  for _ in range(20):
    expected = a.next_round()
    got = b.select_round()
    b.commit(got)
    np.testing.assert_array_equal(expected.client_ids, got.client_ids)
  assert a.to_bytes() == b.to_bytes()


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_discarded_rounds_leave_no_trace_in_the_ledger(name):
  scheduler = SCHEDULERS[name]()
  rng = np.random.default_rng(0)
  rows = []  # The cohorts of the rows actually used, as the accounting must see them.
  for _ in range(30):
    selection = scheduler.select_round()
    assert selection.round_index == len(rows)
    if rng.random() < 0.3:
      scheduler.discard(selection)
    else:
      scheduler.commit(selection)
      rows.append(selection.client_ids)
  ledger = scheduler.ledger
  assert ledger.num_rounds == len(rows) and scheduler.draws == 30
  assert scheduler.discarded_rounds == 30 - len(rows)
  # The ledger equals one that saw only the committed rows.
  reference = ledger_lib.ParticipationLedger(scheduler.num_clients)
  for r, ids in enumerate(rows):
    reference.record(r, ids)
  assert ledger.realized() == reference.realized()
  for r, ids in enumerate(rows):
    np.testing.assert_array_equal(ledger.round_clients(r), np.sort(ids))
  # A restored scheduler continues exactly (draw counter and discards included).
  restored = checkpoint.restore_scheduler(scheduler.to_bytes())
  assert restored.draws == scheduler.draws
  assert restored.discarded_rounds == scheduler.discarded_rounds
  for _ in range(5):
    np.testing.assert_array_equal(scheduler.next_round().client_ids,
                                  restored.next_round().client_ids)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_withdraw_restores_the_scheduler_exactly(name):
  scheduler = SCHEDULERS[name]()
  for _ in range(3):
    scheduler.next_round()
  before = scheduler.to_bytes()
  first = scheduler.select_round()
  scheduler.withdraw(first)
  assert scheduler.to_bytes() == before
  again = scheduler.select_round()
  np.testing.assert_array_equal(first.client_ids, again.client_ids)


def test_a_discard_draws_a_fresh_cohort_for_the_same_row():
  scheduler = sampling.UniformScheduler(1000, 3, seed=1)
  first = scheduler.select_round()
  scheduler.discard(first)
  second = scheduler.select_round()
  assert second.round_index == first.round_index == 0
  assert not np.array_equal(first.client_ids, second.client_ids)


def test_a_pending_selection_must_be_settled_once():
  scheduler = sampling.UniformScheduler(10, 2, seed=1)
  selection = scheduler.select_round()
  with pytest.raises(ValueError, match="neither committed, discarded nor withdrawn"):
    scheduler.select_round()
  scheduler.commit(selection)
  with pytest.raises(ValueError, match="not the pending one"):
    scheduler.commit(selection)
  with pytest.raises(ValueError, match="not the pending one"):
    scheduler.discard(selection)


def test_min_separation_holds_in_rows_and_device_timers_restart_on_discard():
  # 4 devices, one per round, min-sep 4 rows: a discarded device waits like the others
  # (its timer restarted) and the rows of C keep their separation.
  scheduler = device_timer.DeviceTimerScheduler(4, 1, 12, seed=3, min_separation_rounds=4)
  poisoned = None
  for _ in range(16):
    selection = scheduler.select_round()
    if poisoned is None and selection.client_ids.size:
      poisoned = int(selection.client_ids[0])
    if selection.client_ids.size and int(selection.client_ids[0]) == poisoned:
      scheduler.discard(selection)
    else:
      scheduler.commit(selection)
  patterns = scheduler.ledger.participation_patterns()
  assert poisoned not in patterns
  for rows in patterns.values():
    assert all(b - a >= 4 for a, b in zip(rows, rows[1:]))
  assert scheduler.realized().min_separation >= 4
  assert scheduler.discarded_rounds >= 2  # It came back after its timer, not at once.


def test_realized_if_equals_committing():
  scheduler = sampling.UniformScheduler(8, 3, seed=2)
  for _ in range(6):
    selection = scheduler.select_round()
    predicted = scheduler.realized_if(selection)
    scheduler.commit(selection)
    assert predicted == scheduler.realized()


def test_secret_seeds_are_fresh_and_large():
  seeds = {base.secret_seed() for _ in range(4)}
  assert len(seeds) == 4 and all(s >= 0 for s in seeds)
  assert max(seeds).bit_length() > 64
  scheduler = sampling.UniformScheduler(10, 2, seed=max(seeds))
  assert checkpoint.restore_scheduler(scheduler.to_bytes()).seed == max(seeds)


def test_a_ledger_state_without_participation_record_still_restores():
  ledger = ledger_lib.ParticipationLedger(5)
  ledger.record(0, np.array([1, 2]))
  meta, arrays = ledger.state_arrays()
  legacy = {k: v for k, v in arrays.items() if not k.startswith("record_")}
  restored = ledger_lib.ParticipationLedger.from_state_arrays(meta, legacy)
  assert restored.realized() == ledger.realized()
  assert not restored.has_participation_record
  with pytest.raises(ValueError, match="participation record"):
    restored.participation_patterns()
  assert ledger_lib.ParticipationLedger.from_state_arrays(
      meta, arrays).participation_patterns() == {1: (0,), 2: (0,)}


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
