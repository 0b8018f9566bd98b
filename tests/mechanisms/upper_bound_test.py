"""The certified sensitivity upper bound (any C) and its use by the catalog.

paper 004, Sec. 3.1: a lower bound (Remark 3.2) must always come with a valid
upper bound. References enumerate Pi(b, k) with itertools.combinations,
independently of the module's own enumeration.
"""

from __future__ import annotations

import itertools
import math

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.mechanisms import banded
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import tree
from tests.mechanisms import oracles

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=60)


# ---------------------------------------------------------------------------
# Brute-force references.


def brute_signed(c: np.ndarray, b: int, k: int) -> float:
  """max over pi and signs s in {+-1}^pi of ||sum_{i in pi} s_i C[:, i]||.

  Contributions s_i e (one unit direction e) are admissible, so for any C
  this is a LOWER bound on sens(C); for C^T C >= 0 it is sens(C) (Eq. 6).
  """
  best = 0.0
  for p in oracles.separated_patterns(c.shape[1], b, k):
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(p))))
    best = max(best, float(np.max(np.linalg.norm(c[:, list(p)] @ signs.T, axis=0))))
  return best


def brute_bound_formula(c: np.ndarray, b: int, k: int) -> float:
  """sqrt(max_pi sum_{i in pi} max_{pi' containing i} sum_{j in pi'} |G_ij|)."""
  n = c.shape[1]
  k, _ = sensitivity.feasible_participations(n, b, k)
  g = np.abs(c.T @ c)
  pats = oracles.separated_patterns(n, b, k)
  w = [max(g[i, list(p)].sum() for p in pats if i in p) for i in range(n)]
  return math.sqrt(max(sum(w[i] for i in p) for p in pats))


def random_matrix(seed: int, rows: int, n: int, kind: str) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if kind == "signed":
    return rng.normal(size=(rows, n)) * (rng.uniform(size=(rows, n)) < 0.7)
  return rng.uniform(size=(rows, n)) * (rng.uniform(size=(rows, n)) < 0.7)


_NBK = st.integers(1, 9).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(1, n + 1), st.integers(1, n + 1)))


# ---------------------------------------------------------------------------
# upper_bound_sensitivity.


@_SETTINGS
@hypothesis.given(nbk=_NBK, extra_rows=st.integers(0, 2), seed=st.integers(0, 2**32 - 1),
                  kind=st.sampled_from(["signed", "nonnegative"]))
def test_upper_bound_dominates_brute_force(nbk, extra_rows, seed, kind):
  n, b, k = nbk
  c = random_matrix(seed, n + extra_rows, n, kind)
  upper = sensitivity.upper_bound_sensitivity(c, b, k)
  assert upper == pytest.approx(brute_bound_formula(c, b, k), rel=1e-12, abs=1e-15)
  assert upper >= brute_signed(c, b, k) * (1 - 1e-12)
  assert upper >= sensitivity.lower_bound_sensitivity(c, b, k) * (1 - 1e-12)
  # Cauchy-Schwarz, |G_ij| <= ||C_i|| ||C_j||: never above k max ||C_i||.
  k_eff, _ = sensitivity.feasible_participations(n, b, k)
  assert upper <= k_eff * np.max(np.linalg.norm(c, axis=0)) * (1 + 1e-12)
  if kind == "nonnegative":
    assert upper >= sensitivity.exact_sensitivity(c, b, k) * (1 - 1e-12)


def test_upper_bound_dominates_every_direction():
  # Eq. 5 maximizes over unit vectors, not only signs.
  rng = np.random.default_rng(3)
  n, b, k = 9, 2, 4
  c = rng.normal(size=(n + 2, n))
  upper = sensitivity.upper_bound_sensitivity(c, b, k)
  for p in oracles.separated_patterns(n, b, k):
    u = np.zeros((n, 3))
    v = rng.normal(size=(len(p), 3))
    u[list(p)] = v / np.linalg.norm(v, axis=1, keepdims=True)
    assert np.linalg.norm(c @ u) <= upper * (1 + 1e-12)


def test_upper_bound_is_exact_where_the_truth_is_known():
  for n, b, k in [(1, 1, 1), (7, 1, 7), (10, 3, 4), (10, 3, 2), (12, 5, 9)]:
    k_eff, _ = sensitivity.feasible_participations(n, b, k)
    # C = I: sqrt(k).
    assert sensitivity.upper_bound_sensitivity(np.eye(n), b, k) == pytest.approx(
        math.sqrt(k_eff), rel=1e-14)
    # One row of ones (G = all ones): sum of k equal unit vectors, norm k.
    assert sensitivity.upper_bound_sensitivity(np.ones((1, n)), b, k) == pytest.approx(
        k_eff, rel=1e-14)
  # Signs do not help against |G|: C = [[1, 0], [1, -1]] has G_01 = -1, attained by u_1 = -u_0.
  c = np.array([[1.0, 0.0], [1.0, -1.0]])
  assert sensitivity.upper_bound_sensitivity(c, 1, 2) == pytest.approx(math.sqrt(5))
  assert brute_signed(c, 1, 2) == pytest.approx(math.sqrt(5))


@pytest.mark.parametrize("signed", [False, True])
def test_upper_bound_equals_banded_sensitivity_when_min_sep_covers_the_bands(signed):
  rng = np.random.default_rng(5)
  for n, bands in [(8, 1), (10, 3), (14, 4), (40, 6)]:
    c = rng.uniform(0.1, 1.0, size=(n, n))
    if signed:
      c *= rng.choice([-1.0, 1.0], size=(n, n))
    diff = np.arange(n)[:, None] - np.arange(n)[None, :]
    c[(diff < 0) | (diff >= bands)] = 0.0
    for b in (bands, bands + 1):
      for k in (1, 2, 5, n):
        assert sensitivity.upper_bound_sensitivity(c, b, k) == pytest.approx(
            sensitivity.banded_sensitivity(c, bands, b, k), rel=1e-12)


def test_upper_bound_is_strict_somewhere():
  # Non-negative tree C: the bound is above the exact value for some schema, so the
  # equality tests above are not vacuous. (n = 12, b = 2, k = 3: exact 20, bound 21.)
  c = tree.binary_tree_matrix(12)
  assert sensitivity.exact_sensitivity(c, 2, 3) ** 2 == pytest.approx(20)
  assert sensitivity.upper_bound_sensitivity(c, 2, 3) ** 2 == pytest.approx(21)


@pytest.mark.parametrize("path", ["blocks", "duality"])
def test_both_row_programs_compute_the_bound(monkeypatch, path):
  if path == "blocks":
    monkeypatch.setattr(sensitivity, "_ROW_BLOCK", 3)  # Many blocks, partial last one.
  else:
    monkeypatch.setattr(sensitivity, "_MAX_PASS_WORK", 0)  # Always the Lagrangian bound.
  rng = np.random.default_rng(17)
  for _ in range(40):
    n = int(rng.integers(1, 10))
    b, k = int(rng.integers(1, n + 2)), int(rng.integers(1, n + 2))
    c = rng.normal(size=(n + 1, n)) * (rng.uniform(size=(n + 1, n)) < 0.7)
    assert sensitivity.upper_bound_sensitivity(c, b, k) == pytest.approx(
        brute_bound_formula(c, b, k), rel=1e-10, abs=1e-15), (n, b, k)


def test_lagrangian_row_bound_is_valid_at_every_step_and_converges():
  rng = np.random.default_rng(23)
  n = 120
  c = np.tril(rng.normal(size=(n, n)))
  g = c.T @ c
  for b, k in [(1, 40), (3, 12), (4, 10)]:
    exact = sensitivity._row_maxima_by_passes(g, b, k)
    for iterations in (0, 1, 3):
      loose = sensitivity._row_maxima_by_duality(g, b, k, iterations)
      assert np.all(loose >= exact * (1 - 1e-12))
    assert np.max(sensitivity._row_maxima_by_duality(g, b, k, 0) / exact) > 1.01
    converged = sensitivity._row_maxima_by_duality(g, b, k, sensitivity._DUAL_ITERATIONS)
    np.testing.assert_allclose(converged, exact, rtol=1e-9)


def test_upper_bound_accepts_the_gram_matrix():
  c = random_matrix(1, 12, 10, "signed")
  assert sensitivity.upper_bound_sensitivity(None, 2, 3, gram=c.T @ c) == pytest.approx(
      sensitivity.upper_bound_sensitivity(c, 2, 3), rel=1e-14)


@pytest.mark.parametrize("args,kwargs,match", [
    ((None, 1, 1), {}, "exactly one"),
    ((np.eye(2), 1, 1), {"gram": np.eye(2)}, "exactly one"),
    ((None, 1, 1), {"gram": np.ones((2, 3))}, "square"),
    ((None, 1, 1), {"gram": np.array([[1.0, 1.0], [0.0, 1.0]])}, "symmetric"),
    ((np.eye(3), 0, 1), {}, "`min_sep`"),
    ((np.eye(3), 1, 0), {}, "`max_participations`"),
    ((np.ones(3), 1, 1), {}, "2-dimensional"),
])
def test_bad_arguments_are_rejected(args, kwargs, match):
  with pytest.raises(ValueError, match=match):
    sensitivity.upper_bound_sensitivity(*args, **kwargs)
  with pytest.raises(ValueError, match=match):
    sensitivity.certified_sensitivity(*args, **kwargs)


# ---------------------------------------------------------------------------
# certified_sensitivity.


def test_certified_is_exact_for_nonnegative_gram_within_budget():
  for seed in range(5):
    c = random_matrix(seed, 11, 9, "nonnegative")
    got = sensitivity.certified_sensitivity(c, 2, 3)
    assert got.kind == sensitivity.EXACT and got.method == sensitivity.METHOD_EXACT_SEARCH
    assert got.value == pytest.approx(brute_signed(c, 2, 3), rel=1e-12)


def test_certified_falls_back_to_the_upper_bound():
  c = random_matrix(0, 11, 9, "nonnegative")
  count = sensitivity._count_maximal_patterns(9, 2, 3)
  got = sensitivity.certified_sensitivity(c, 2, 3, max_patterns=int(count) - 1)
  assert got.kind == sensitivity.UPPER_BOUND
  assert got.value == pytest.approx(sensitivity.upper_bound_sensitivity(c, 2, 3))
  signed = np.array([[1.0, 0.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, 1.0]])
  got = sensitivity.certified_sensitivity(signed, 1, 3)
  assert got.kind == sensitivity.UPPER_BOUND and got.method == sensitivity.METHOD_UPPER_BOUND
  assert got.value >= brute_signed(signed, 1, 3) * (1 - 1e-12)
  with pytest.raises(ValueError, match="`max_patterns`"):
    sensitivity.certified_sensitivity(c, 2, 3, max_patterns=0)


# ---------------------------------------------------------------------------
# The catalog: BandMF with min_sep < bands, trees past their work budget.


def _check_banded(mechanism, n, b, k):
  sens = mechanism.sensitivity(n, b, k)
  c = mechanism.banded.dense()[:n, :n]
  truth_or_below = brute_signed(c, b, k)
  if sens.kind == catalog.EXACT:
    assert sens.value == pytest.approx(truth_or_below, rel=1e-12)
    assert "exact maximal-pattern search" in sens.method
  else:
    assert sens.value <= truth_or_below * (1 + 1e-12)
    assert truth_or_below <= sens.guaranteed * (1 + 1e-12)
    assert sens.guaranteed == pytest.approx(sensitivity.upper_bound_sensitivity(c, b, k))
    assert sens.upper_method == sensitivity.METHOD_UPPER_BOUND
  return sens


def test_bandmf_below_its_bands_is_exact_when_the_gram_is_nonnegative():
  mechanism = catalog.build("bandmf", rounds=12, min_sep=2, bands=4).mechanism
  c = mechanism.banded.dense()
  assert np.all(c.T @ c >= 0)
  for b, k in [(2, 6), (3, 3), (1, 4)]:
    assert _check_banded(mechanism, 12, b, k).kind == catalog.EXACT
  assert _check_banded(mechanism, 10, 2, 3).kind == catalog.EXACT  # Leading rounds only.


def test_bandmf_below_its_bands_with_signs_is_bracketed():
  rng = np.random.default_rng(2)
  n, bands = 11, 4
  c = np.tril(rng.uniform(0.2, 1.0, size=(n, n)) * rng.choice([-1.0, 1.0], size=(n, n)))
  c[np.arange(n)[:, None] - np.arange(n)[None, :] >= bands] = 0.0
  c[np.arange(n), np.arange(n)] = np.abs(np.diag(c))
  mechanism = catalog.BandedMechanism(banded.BandedMF.from_dense(c, bands=bands))
  for b, k in [(2, 5), (3, 3), (1, 3)]:
    sens = _check_banded(mechanism, n, b, k)
    assert sens.kind == catalog.LOWER_BOUND
    assert sens.value < sens.guaranteed
  # min_sep >= bands is still the exact column-norm value.
  assert mechanism.sensitivity(n, bands, 2).kind == catalog.EXACT


@pytest.mark.parametrize("n,b,k", [(12, 2, 4), (13, 3, 3), (64, 2, 8), (100, 7, 6)])
@pytest.mark.parametrize("complete", [False, True])
def test_tree_past_its_budget_has_a_valid_upper_bound(n, b, k, complete):
  mechanism = catalog.TreeMechanism(full=False, complete=complete, max_work=1)
  sens = mechanism.sensitivity(n, b, k)
  assert sens.value == pytest.approx(tree.tree_sensitivity_lower_bound(n, b, k, complete))
  exact = tree.exact_tree_sensitivity(n, b, k, complete=complete)
  assert sens.value <= exact * (1 + 1e-12) <= sens.guaranteed * (1 + 1e-12)
  c = tree.binary_tree_matrix(n, complete=complete)
  upper = sensitivity.upper_bound_sensitivity(c, b, k)
  if upper <= sens.value * (1 + 1e-12):  # The bounds meet: the value is exact.
    assert sens.kind == catalog.EXACT and sens.value == pytest.approx(exact, rel=1e-12)
  else:
    assert sens.kind == catalog.LOWER_BOUND
    assert sens.upper == pytest.approx(upper, rel=1e-12)
  assert catalog.TreeMechanism(full=False, complete=complete).sensitivity(n, b, k).kind == (
      catalog.EXACT)


def test_tree_at_paper_size_past_its_budget():
  # n = 2052, b = 342, k = 6 (paper 004 Table 3): exact sens^2 = 118.
  sens = catalog.TreeMechanism(full=True, max_work=1).sensitivity(2052, 342, 6)
  assert sens.kind == catalog.LOWER_BOUND
  assert sens.value ** 2 == pytest.approx(118)
  assert 118 <= sens.guaranteed ** 2 <= 120


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
