"""TreeAgg accounting: exact tree sensitivity, paper 004 Table 4 (id-ID), TF Privacy cross-check."""

from __future__ import annotations

import math

import pytest

from dp_fl.accounting import report as report_lib
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog


def test_paper_004_table_4_treeagg_id_id():
  # σ = 7, 2350 rounds, min-sep 437, 5 participations: printed ρ = 0.94, ε = 9.29 (δ = 1e-10).
  mechanism = catalog.TreeMechanism(full=False)
  sens = mechanism.sensitivity(2350, 437, 5)
  assert sens.kind == catalog.EXACT
  assert sens.value ** 2 == pytest.approx(92)  # The exact maximum; Remark 3.2 gives 90.
  guarantee = zcdp.matrix_mechanism_guarantee(sens.value, 7.0, 1e-10)
  assert round(guarantee.rho, 2) == 0.94
  # The exact ε is 9.283; the printed 9.29 is the ε of the printed (rounded) ρ = 0.94.
  assert round(guarantee.epsilon, 3) == 9.283
  assert round(zcdp.epsilon_from_rho(0.94, 1e-10), 2) == 9.29


@pytest.mark.parametrize("n,min_sep,k", [(16, 1, 16), (16, 3, 4), (33, 4, 5), (64, 8, 4),
                                         (100, 7, 6), (128, 20, 7), (50, 50, 1)])
def test_matches_tf_privacy_tree_aggregation_accountant(n, min_sep, k):
  # TF Privacy counts the rounds *between* two participations: its min_separation is b − 1.
  tree_aggregation_accountant = pytest.importorskip(
      "tensorflow_privacy.privacy.analysis.tree_aggregation_accountant")
  sigma = 3.0
  tfp_rho = tree_aggregation_accountant.compute_zcdp_single_tree(
      noise_multiplier=sigma, total_steps=n, max_participation=k, min_separation=min_sep - 1)
  sens = catalog.TreeMechanism(full=False).sensitivity(n, min_sep, k)
  assert sens.kind == catalog.EXACT
  assert zcdp.rho_from_sensitivity(sens.value, sigma) == pytest.approx(tfp_rho, rel=1e-12)


def test_report_labels_a_lower_bound():
  # With an exact computation out of budget the tree falls back to Remark 3.2; the report
  # must say that the exact sensitivity is unknown, and compute ρ and ε from the valid upper
  # bound next to it (never from the lower bound).
  from dp_fl.mechanisms import tree  # pylint: disable=g-import-not-at-top
  value, kind, _ = tree.tree_sensitivity(2052, 10, 206, max_work=1)
  assert kind == catalog.LOWER_BOUND
  participation = report_lib.Participation(2052, 10, 206, source="configured")
  mechanism = catalog.TreeMechanism(full=False, max_work=1)
  rep = report_lib.matrix_mechanism_report(mechanism, 7.0, participation, 1e-10)
  assert rep.sensitivity_is_lower_bound
  assert rep.sensitivity_lower_bound == pytest.approx(value)
  sens = mechanism.sensitivity(2052, 10, 206)
  assert sens.upper > value
  assert rep.sensitivity == pytest.approx(sens.guaranteed)
  assert rep.epsilon > rep.epsilon_lower_bound
  assert "lower bound" in rep.to_markdown().lower()
  assert math.isfinite(rep.epsilon)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
