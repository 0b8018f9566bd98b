"""The matrix-mechanism accountant computes a realized (n, b, k)'s sensitivity once (issue #43:
the budget check before a round and the progress line after it ask for the same ε; BandMF's
exact search with b < bands costs ≈ 0.9 s at n = 2052), and never serves a stale one."""

from __future__ import annotations

import pytest

from dp_fl.mechanisms import catalog
from dp_fl.participation import ledger as ledger_lib
from dp_fl.training import privacy


class _CountingMechanism(catalog.DpSgdMechanism):
  calls = 0

  def sensitivity(self, rounds, min_sep, max_participations):
    type(self).calls += 1
    return super().sensitivity(rounds, min_sep, max_participations)


def _realized(rounds, min_sep, k, seen=10):
  return ledger_lib.RealizedParticipation(
      num_rounds=rounds, min_separation=min_sep, max_participations=k,
      participation_histogram=(0,) * k + (seen,), num_participants=seen,
      total_participations=seen * k, refused_check_ins=0, discarded_draws=0, min_cohort=5)


def test_the_same_participation_is_accounted_once_and_a_new_one_again():
  mechanism = _CountingMechanism()
  accountant = privacy.MatrixMechanismAccountant(mechanism, 1.0, 1.0, 5, 1e-6)
  first = accountant.epsilon(_realized(10, 3, 3))
  assert accountant.epsilon(_realized(10, 3, 3)) == first
  assert accountant.report(_realized(10, 3, 3)).epsilon == first
  assert _CountingMechanism.calls == 1
  # Any change of n, b, k or the clients seen is a new report, and ε follows it.
  more = accountant.epsilon(_realized(11, 3, 4))
  assert more > first and _CountingMechanism.calls == 2
  assert accountant.epsilon(_realized(10, 3, 3)) == first and _CountingMechanism.calls == 3
  assert accountant.report(_realized(10, 3, 3, seen=11)).participation.clients_seen == 11
  assert accountant.epsilon(_realized(10, 3, 3)) == pytest.approx(first)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
