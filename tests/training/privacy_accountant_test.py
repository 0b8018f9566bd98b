"""The matrix-mechanism accountant computes a realized (n, b, k)'s sensitivity once (issue #43:
the budget check before a round and the progress line after it ask for the same ε; BandMF's
exact search with b < bands costs ≈ 0.9 s at n = 2052), and never serves a stale one. The
accountants of computed rounds (cpSGD, DDGauss, Skellam) charge client by client, and their
look-ahead counts what the round will add."""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import cpsgd
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


def _binomial_accountant(root_dir):
  protocol = cpsgd.Protocol(num_levels=16, num_trials=2_000_000, p=0.5, x_max=0.05,
                            clip_norm=1.0)
  return privacy.BinomialAccountant(protocol, 64, 30, 1.0, 1e-5, str(root_dir))


def _apply(ledger, root_dir, round_number, ids):
  privacy.record_release(str(root_dir), round_number, ids)
  ledger.record(round_number - 1, np.array(ids))


def test_the_look_ahead_counts_an_earlier_lost_computation_of_its_round(tmp_path):
  # Rounds 1-2 applied; a crash while round 3 was computed with clients 0 and 4 (logged, not
  # applied); the resume draws the same cohort. Its look-ahead must be the ε the run has
  # once round 3 is applied: client 0 then took part in round 1 and in two computations of
  # round 3. (It used to treat the lost computation as the pending round's own, so the
  # budget let through a round that took ε above the target.)
  accountant, ledger = _binomial_accountant(tmp_path), ledger_lib.ParticipationLedger(8)
  _apply(ledger, tmp_path, 1, [0, 1])
  _apply(ledger, tmp_path, 2, [2, 3])
  privacy.record_release(str(tmp_path), 3, [0, 4])
  look_ahead = ledger.realized_if(2, np.array([0, 4]))
  assert look_ahead.pending_clients == (0, 4)
  before = accountant.report(look_ahead)
  assert accountant.epsilon(look_ahead) == before.epsilon
  _apply(ledger, tmp_path, 3, [0, 4])
  after = accountant.report(ledger.realized())
  assert ledger.realized().pending_clients is None
  assert before.participations == after.participations == 3
  assert before.epsilon == after.epsilon
  assert after.replayed_participations == 1
  # A cohort without client 0: two computations for client 4 (the lost one, the pending one).
  assert accountant.report(ledger.realized_if(3, np.array([4, 5]))).participations == 3
  assert accountant.report(ledger.realized_if(3, np.array([6, 7]))).participations == 3


def test_lost_computations_are_charged_client_by_client(tmp_path):
  # A crash lost rounds 3 and 4 (new clients 4-7) after the checkpoint of round 2: nobody
  # was in more than one computation, so k = 1, not the ledger's 1 plus the most lost 1.
  accountant, ledger = _binomial_accountant(tmp_path), ledger_lib.ParticipationLedger(8)
  _apply(ledger, tmp_path, 1, [0, 1])
  _apply(ledger, tmp_path, 2, [2, 3])
  privacy.record_release(str(tmp_path), 3, [4, 5])
  privacy.record_release(str(tmp_path), 4, [6, 7])
  report = accountant.report(ledger.realized())
  assert (report.participations, report.replayed_participations) == (1, 1)
  (tmp_path / "clean").mkdir()
  clean = _binomial_accountant(tmp_path / "clean")
  clean_ledger = ledger_lib.ParticipationLedger(8)
  _apply(clean_ledger, tmp_path / "clean", 1, [0, 1])
  _apply(clean_ledger, tmp_path / "clean", 2, [2, 3])
  assert report.epsilon == clean.report(clean_ledger.realized()).epsilon
  # The resume computes round 3 again with clients 4 and 5: now they count two.
  assert accountant.report(ledger.realized_if(2, np.array([4, 5]))).participations == 2
  # A log that lacks an applied round (deleted): the ledger's count plus the most lost.
  (tmp_path / privacy.RELEASE_LOG).write_text(
      '{"round": 2, "cohort": 2, "clients": [2, 3]}\n'
      '{"round": 3, "cohort": 2, "clients": [4, 5]}\n')
  assert _binomial_accountant(tmp_path).report(ledger.realized()).participations == 2


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
