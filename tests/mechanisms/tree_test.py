"""Tests of dp_fl.mechanisms.tree against dense brute force (paper 004, Sec. 2.3, Remark 3.2)."""

from __future__ import annotations

import itertools
import math

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import tree
from tests.mechanisms import oracles

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=60)


# ---------------------------------------------------------------------------
# References, written independently of the module under test.


def recursive_tree(levels: int) -> np.ndarray:
  """Paper 004, Sec. 2.3: C^1 = [1], C^l = [[C^{l-1}, 0], [0, C^{l-1}], [1, 1]]."""
  c = np.ones((1, 1))
  for _ in range(levels - 1):
    zero = np.zeros_like(c)
    c = np.vstack([np.hstack([c, zero]), np.hstack([zero, c]),
                   np.ones((1, 2 * c.shape[1]))])
  return c


def reference_rows(n: int, complete: bool) -> list[tuple[int, ...]]:
  """Sorted rows of the tree over 2^ceil(log2 n) leaves, cut to n columns.

  complete=True keeps every row meeting [0, n); complete=False keeps the rows
  lying inside [0, n).
  """
  levels = (n - 1).bit_length() + 1
  full = recursive_tree(levels)
  rows = []
  for row in full:
    inside = row[:n]
    if not inside.any():
      continue
    if not complete and row[n:].any():
      continue
    rows.append(tuple(int(x) for x in inside))
  return sorted(rows)


def matrix_rows(c: np.ndarray) -> list[tuple[int, ...]]:
  return sorted(tuple(int(x) for x in row) for row in c)


def popcount(x: int) -> int:
  return bin(x).count("1")


def brute_force_square_sensitivity(c: np.ndarray, b: int, k: int) -> float:
  """max over all patterns of ||C u(pi)||^2 by enumeration."""
  n = c.shape[1]
  patterns = oracles.separated_patterns(n, b, k)
  u = np.zeros((len(patterns), n))
  for i, pattern in enumerate(patterns):
    u[i, list(pattern)] = 1.0
  return float(np.max(np.sum((u @ c.T) ** 2, axis=1)))


def lower_triangular_ones(n: int) -> np.ndarray:
  return np.tril(np.ones((n, n)))


# ---------------------------------------------------------------------------
# Tree matrices.


@pytest.mark.parametrize("complete, expected", [(False, 4102), (True, 4112)])
def test_node_count_paper_n(complete, expected):
  assert tree.num_nodes(2052, complete) == expected
  assert tree.binary_tree_matrix(2052, complete).shape == (expected, 2052)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 64, 1024])
@pytest.mark.parametrize("complete", [False, True])
def test_power_of_two_has_2n_minus_1_nodes(n, complete):
  assert tree.binary_tree_matrix(n, complete).shape == (2 * n - 1, n)


@pytest.mark.parametrize("n", list(range(1, 41)) + [63, 100])
@pytest.mark.parametrize("complete", [False, True])
def test_rows_match_recursive_definition(n, complete):
  c = tree.binary_tree_matrix(n, complete)
  assert c.shape == (tree.num_nodes(n, complete), n)
  assert matrix_rows(c) == reference_rows(n, complete)


@pytest.mark.parametrize("n", range(1, 41))
@pytest.mark.parametrize("complete", [False, True])
def test_rows_are_dyadic_intervals_in_documented_order(n, complete):
  c = tree.binary_tree_matrix(n, complete)
  nodes = tree.tree_nodes(n, complete)
  assert np.all(np.diff(nodes[:, 0]) >= 0)  # Level by level, leaves first.
  for row, (level, start, stop) in zip(c, nodes):
    ones = np.flatnonzero(row)
    assert ones[0] == start and ones[-1] == stop - 1
    assert ones.size == stop - start  # Contiguous.
    assert start % (1 << level) == 0
    if complete:
      assert stop == min(start + (1 << level), n)
    else:
      assert stop == start + (1 << level) <= n


@pytest.mark.parametrize("n", range(1, 41))
def test_complete_rows_contain_restricted_rows(n):
  restricted = matrix_rows(tree.binary_tree_matrix(n, complete=False))
  complete = matrix_rows(tree.binary_tree_matrix(n, complete=True))
  remaining = list(complete)
  for row in restricted:
    remaining.remove(row)  # Raises if missing.
  if n & (n - 1) == 0:
    assert not remaining


@pytest.mark.parametrize("n", [1, 2, 5, 13, 32])
@pytest.mark.parametrize("complete", [False, True])
def test_gram(n, complete):
  c = tree.binary_tree_matrix(n, complete)
  np.testing.assert_array_equal(tree.tree_gram(n, complete), c.T @ c)


# ---------------------------------------------------------------------------
# Online TreeAgg.


@pytest.mark.parametrize("n", range(1, 41))
def test_online_tree_matrix(n):
  c = tree.online_tree_matrix(n)
  assert c.shape == (n, n)
  np.testing.assert_array_equal(c, np.tril(c))
  np.testing.assert_array_equal(np.diag(c), np.ones(n))
  for t in range(n):
    count = t + 1
    v = 0
    while count % (1 << (v + 1)) == 0:
      v += 1
    expected = np.zeros(n)
    expected[count - (1 << v):count] = 1.0  # Rounds (t + 1 - 2^v, t + 1], 1-based.
    np.testing.assert_array_equal(c[t], expected)
  complete_rows = set(matrix_rows(tree.binary_tree_matrix(n, complete=True)))
  restricted_rows = set(matrix_rows(tree.binary_tree_matrix(n, complete=False)))
  for row in matrix_rows(c):
    assert row in complete_rows and row in restricted_rows


@pytest.mark.parametrize("n", range(1, 41))
def test_online_decoder_is_binary_counter(n):
  decoder = lower_triangular_ones(n) @ np.linalg.inv(tree.online_tree_matrix(n))
  np.testing.assert_allclose(decoder, np.round(decoder), atol=1e-9)
  decoder = np.round(decoder)
  assert set(np.unique(decoder)) <= {0.0, 1.0}
  counts = decoder.sum(axis=1)
  np.testing.assert_array_equal(counts, [popcount(t + 1) for t in range(n)])
  for complete in (False, True):
    np.testing.assert_array_equal(tree.per_query_squared_error(n, full=False,
                                                               complete=complete), counts)


# ---------------------------------------------------------------------------
# TreeAgg-Full errors.


@pytest.mark.parametrize("n", range(1, 41))
@pytest.mark.parametrize("complete", [False, True])
def test_full_error_matches_dense_pseudo_inverse(n, complete):
  c = tree.binary_tree_matrix(n, complete)
  decoder = lower_triangular_ones(n) @ np.linalg.pinv(c)
  expected = np.sum(decoder ** 2, axis=1)
  got = tree.per_query_squared_error(n, full=True, complete=complete)
  np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
  online = tree.per_query_squared_error(n, full=False)
  assert np.all(got <= online + 1e-9)


def test_table3_tree_agg_full_losses():
  """Paper 004, Table 3: TreeAgg-Full at n = 2052, b = 342, k = 6 has losses 12.47 / 14.98."""
  error = tree.per_query_squared_error(2052, full=True)
  sens, kind, _ = tree.tree_sensitivity(2052, 342, 6)
  assert kind == tree.EXACT
  assert round(math.sqrt(error.mean()) * sens, 2) == 12.47  # RmsLoss (Eq. 10).
  assert round(math.sqrt(error.max()) * sens, 2) == 14.98  # MaxLoss (Eq. 9).


# ---------------------------------------------------------------------------
# Sensitivity.


@pytest.mark.parametrize("complete", [False, True])
def test_participation_square_norm_matches_matrix(complete):
  rng = np.random.default_rng(0)
  for n in range(1, 30):
    c = tree.binary_tree_matrix(n, complete)
    for _ in range(5):
      rounds = rng.choice(n, size=rng.integers(0, n + 1), replace=False)
      u = np.zeros(n)
      u[rounds] = 1.0
      assert tree.participation_square_norm(n, rounds, complete) == np.sum((c @ u) ** 2)


@pytest.mark.parametrize("complete", [False, True])
def test_exact_equals_brute_force_all_small_cases(complete):
  for n in range(1, 13):
    c = tree.binary_tree_matrix(n, complete)
    for b, k in itertools.product(range(1, n + 2), range(1, 5)):
      expected = brute_force_square_sensitivity(c, b, k)
      value, kind, method = tree.tree_sensitivity(n, b, k, complete)
      assert kind == tree.EXACT and method == tree.METHOD_EXACT
      assert value ** 2 == pytest.approx(expected, abs=1e-9), (n, b, k)


@_SETTINGS
@hypothesis.given(n=st.integers(13, 20), b=st.integers(1, 12), k=st.integers(1, 8),
                  complete=st.booleans())
def test_exact_equals_brute_force(n, b, k, complete):
  expected = brute_force_square_sensitivity(tree.binary_tree_matrix(n, complete), b, k)
  assert tree.exact_tree_sensitivity(n, b, k, complete) ** 2 == pytest.approx(expected,
                                                                              abs=1e-9)


@hypothesis.settings(derandomize=True, deadline=None, max_examples=20)
@hypothesis.given(n=st.integers(20, 48), b=st.integers(3, 20), k=st.integers(1, 4),
                  complete=st.booleans())
def test_exact_equals_sensitivity_module(n, b, k, complete):
  c = tree.binary_tree_matrix(n, complete)
  expected = sensitivity.exact_sensitivity(c, b, k, max_patterns=10 ** 6)
  assert tree.exact_tree_sensitivity(n, b, k, complete) == pytest.approx(expected, rel=1e-12)
  assert tree.tree_sensitivity_lower_bound(n, b, k, complete) == pytest.approx(
      sensitivity.lower_bound_sensitivity(c, b, k), rel=1e-12)


@_SETTINGS
@hypothesis.given(n=st.integers(1, 400), b=st.integers(1, 400), k=st.integers(1, 12),
                  complete=st.booleans())
def test_lower_bound_at_most_exact(n, b, k, complete):
  lower = tree.tree_sensitivity_lower_bound(n, b, k, complete)
  exact = tree.exact_tree_sensitivity(n, b, k, complete, max_work=None)
  assert lower <= exact + 1e-12
  k_eff = min(k, -(-n // b))
  assert tree.participation_square_norm(
      n, range(0, k_eff * b, b), complete) == pytest.approx(lower ** 2)


@pytest.mark.parametrize("n", [5, 9, 12, 16])
def test_online_tree_sensitivity_at_most_tree_sensitivity(n):
  online = tree.online_tree_matrix(n)
  for b, k in itertools.product(range(1, n + 1), range(1, 4)):
    online_sq = brute_force_square_sensitivity(online, b, k)
    assert online_sq <= tree.exact_tree_sensitivity(n, b, k) ** 2 + 1e-9


def test_paper_cases():
  """Paper 004: Table 3 (n = 2052, b = 342, k = 6) and Table 4 id-ID TreeAgg (2350, 437, 5).

  Table 4 prints rho = 0.94 for sigma = 7: sens^2 / (2 * 49) with the exact
  restricted-tree sens^2 = 92 (the Remark 3.2 lower bound, 90, gives 0.92).
  """
  cases = {
      (2052, 342, 6, False): (118, 118),
      (2052, 342, 6, True): (154, 154),
      (2350, 437, 5, False): (92, 90),
      (2350, 437, 5, True): (117, 115),
  }
  for (n, b, k, complete), (exact_sq, lower_sq) in cases.items():
    value, kind, method = tree.tree_sensitivity(n, b, k, complete)
    assert (kind, method) == (tree.EXACT, tree.METHOD_EXACT)
    assert value ** 2 == pytest.approx(exact_sq)
    assert tree.tree_sensitivity_lower_bound(n, b, k, complete) ** 2 == pytest.approx(lower_sq)
  rho = tree.tree_sensitivity(2350, 437, 5)[0] ** 2 / (2 * 7.0 ** 2)
  assert round(rho, 2) == 0.94


def test_all_rounds_participating():
  for complete in (False, True):
    value, kind, _ = tree.tree_sensitivity(2052, 1, 5000, complete)
    assert kind == tree.EXACT
    assert value ** 2 == pytest.approx(tree.participation_square_norm(2052, range(2052),
                                                                      complete))


def test_participations_reduced_to_feasible_maximum():
  for n, b in [(10, 3), (17, 4), (300, 50)]:
    most = -(-n // b)
    assert tree.tree_sensitivity(n, b, 10 ** 6) == tree.tree_sensitivity(n, b, most)
    assert tree.tree_sensitivity_lower_bound(n, b, most + 5) == (
        tree.tree_sensitivity_lower_bound(n, b, most))


def test_falls_back_to_lower_bound_over_budget():
  value, kind, method = tree.tree_sensitivity(2350, 437, 5, max_work=3)
  assert (kind, method) == (tree.LOWER_BOUND, tree.METHOD_LOWER_BOUND)
  assert value == tree.tree_sensitivity_lower_bound(2350, 437, 5)
  value, kind, _ = tree.tree_sensitivity(20_000, 1, 50)  # 20000 blocks: refused up front.
  assert kind == tree.LOWER_BOUND
  with pytest.raises(ValueError, match="max_work"):
    tree.exact_tree_sensitivity(2350, 437, 5, max_work=3)


# ---------------------------------------------------------------------------
# Validation.


@pytest.mark.parametrize("call, name", [
    (lambda: tree.binary_tree_matrix(0), "n"),
    (lambda: tree.binary_tree_matrix(2.5), "n"),
    (lambda: tree.binary_tree_matrix(4, complete="yes"), "complete"),
    (lambda: tree.online_tree_matrix(-1), "n"),
    (lambda: tree.per_query_squared_error(0, full=True), "n"),
    (lambda: tree.per_query_squared_error(4, full=None), "full"),
    (lambda: tree.tree_sensitivity(0, 1, 1), "n"),
    (lambda: tree.tree_sensitivity(10, 0, 1), "min_sep"),
    (lambda: tree.tree_sensitivity(10, 2, 0), "max_participations"),
    (lambda: tree.tree_sensitivity(10, 2, True), "max_participations"),
    (lambda: tree.tree_sensitivity(10, 2, 2, complete=1), "complete"),
    (lambda: tree.tree_sensitivity(10, 2, 2, max_work=0), "max_work"),
    (lambda: tree.tree_sensitivity_lower_bound(10, -2, 2), "min_sep"),
    (lambda: tree.participation_square_norm(4, [0, 4]), "rounds"),
    (lambda: tree.participation_square_norm(4, [1, 1]), "rounds"),
])
def test_bad_input(call, name):
  with pytest.raises(ValueError, match=f"`{name}`"):
    call()


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
