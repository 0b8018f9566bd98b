"""Tests of dp_fl.mechanisms.sensitivity against brute force (paper 004, Sec. 3.1).

The references enumerate Pi(b, k) with itertools.combinations, independently
of the module's own `participation_patterns`.
"""

from __future__ import annotations

import math

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import toeplitz
from tests.mechanisms import oracles

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=60)


# ---------------------------------------------------------------------------
# Brute-force references.


def brute_max_column_norms(c: np.ndarray, b: int, k: int) -> float:
  """sqrt(max over Pi(b, k) of sum_{i in pi} ||C[:, i]||^2)."""
  sq = np.sum(c * c, axis=0)
  return math.sqrt(max(sq[list(p)].sum() for p in oracles.separated_patterns(c.shape[1], b, k)))


def brute_maximal_count(n: int, b: int, k: int) -> int:
  """Patterns of Pi(b, k) that are not a proper subset of another pattern."""
  pats = oracles.separated_patterns(n, b, k)
  count = 0
  for p in pats:
    if not any(tuple(sorted(p + (r,))) in pats for r in range(n) if r not in p):
      count += 1
  return count


def nonincreasing_coef(draw_values) -> np.ndarray:
  return np.sort(np.asarray(draw_values, dtype=np.float64))[::-1].copy()


def banded_matrix(rng: np.random.Generator, n: int, bands: int, signed: bool) -> np.ndarray:
  c = rng.uniform(0.1, 1.0, size=(n, n))
  if signed:
    c *= rng.choice([-1.0, 1.0], size=(n, n))
  diff = np.arange(n)[:, None] - np.arange(n)[None, :]
  c[(diff < 0) | (diff >= bands)] = 0.0
  return c


_NBK = st.integers(1, 14).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(1, n + 1), st.integers(1, n + 2)))


# ---------------------------------------------------------------------------
# Participation patterns.


@pytest.mark.parametrize("n", range(1, 9))
def test_participation_patterns_enumerates_exactly_the_schema(n):
  for b in range(1, n + 2):
    for k in range(1, n + 2):
      got = list(sensitivity.participation_patterns(n, b, k))
      assert len(got) == len(set(got))
      assert set(got) == set(oracles.separated_patterns(n, b, k)), (n, b, k)
      assert got == sorted(got)


@pytest.mark.parametrize("n", range(1, 11))
def test_maximal_pattern_count(n):
  for b in range(1, n + 2):
    for k in range(1, n + 2):
      k_eff, _ = sensitivity.feasible_participations(n, b, k)
      assert sensitivity._count_maximal_patterns(n, b, k_eff) == brute_maximal_count(n, b, k)


def test_feasible_participations():
  k, note = sensitivity.feasible_participations(10, 3, 100)
  assert k == 4  # ceil(10 / 3).
  assert "`max_participations`=100" in note and "ceil(n / min_sep)=4" in note
  assert sensitivity.feasible_participations(10, 3, 2) == (2, None)
  assert sensitivity.feasible_participations(10, 3, 4) == (4, None)
  assert sensitivity.feasible_participations(5, 7, 3)[0] == 1
  assert sensitivity.feasible_participations(10, 3) == (4, None)  # None: as many as fit.
  assert sensitivity.feasible_participations(10, 3, None) == (4, None)


@pytest.mark.parametrize("args, match", [
    ((0, 1, 1), "`n`"), ((5, 0, 1), "`min_sep`"), ((5, 1, 0), "`max_participations`"),
    ((5, 1, 2.0), "`max_participations`"),
])
def test_feasible_participations_validation(args, match):
  with pytest.raises(ValueError, match=match):
    sensitivity.feasible_participations(*args)


# ---------------------------------------------------------------------------
# Thm. 3.1 and the exhaustive maximum.


@_SETTINGS
@hypothesis.given(nbk=_NBK, data=st.data())
def test_toeplitz_sensitivity_equals_exact(nbk, data):
  n, b, k = nbk
  values = data.draw(st.lists(
      st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0)),
      min_size=n, max_size=n))
  c = nonincreasing_coef(values)
  value = sensitivity.toeplitz_sensitivity(c, b, k)
  exact = sensitivity.exact_sensitivity(toeplitz.dense(c), b, k)
  assert value == pytest.approx(exact, rel=1e-12, abs=1e-15)
  assert sensitivity.lower_bound_sensitivity(toeplitz.dense(c), b, k) == pytest.approx(
      value, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("n,b,k", [(1, 1, 1), (5, 1, 5), (9, 2, 3), (12, 5, 10),
                                   (12, 13, 2), (11, 3, 4)])
def test_toeplitz_sensitivity_equals_brute_force(n, b, k):
  rng = np.random.default_rng(n * 100 + b * 10 + k)
  c = nonincreasing_coef(rng.uniform(size=n))
  assert sensitivity.toeplitz_sensitivity(c, b, k) == pytest.approx(
      oracles.max_pattern_norm(toeplitz.dense(c), b, k), rel=1e-12)


def test_toeplitz_sensitivity_prefix_sum_matrix():
  # C = A (c = ones), b = 1, k = n: u = ones, ||A 1||^2 = sum t^2.
  n = 20
  assert sensitivity.toeplitz_sensitivity(np.ones(n), 1, n) == pytest.approx(
      math.sqrt(sum(t * t for t in range(1, n + 1))))
  # Identity: sqrt(k) for any b with k b <= n.
  assert sensitivity.toeplitz_sensitivity(np.r_[1.0, np.zeros(n - 1)], 4, 5) == (
      pytest.approx(math.sqrt(5)))


@pytest.mark.parametrize("n,b,k", [(2000, 1, 2000), (2000, 3, 500), (3001, 7, 65),
                                   (500, 10, 1000), (100, 1, 64), (100, 1, 65)])
def test_toeplitz_sensitivity_long_pattern_path(n, b, k):
  # k > 64 switches to the strided cumulative sum; compare to direct shifts.
  rng = np.random.default_rng(n + b + k)
  c = nonincreasing_coef(rng.uniform(size=n) ** 3)
  k_eff = min(k, -(-n // b))
  u = np.zeros(n)
  u[np.arange(k_eff) * b] = 1.0
  ref = np.linalg.norm(np.convolve(c, u)[:n])
  assert sensitivity.toeplitz_sensitivity(c, b, k) == pytest.approx(ref, rel=1e-13)


def test_max_participations_is_reduced_to_feasible():
  c = nonincreasing_coef(np.random.default_rng(0).uniform(size=10))
  assert sensitivity.toeplitz_sensitivity(c, 3, 99) == sensitivity.toeplitz_sensitivity(c, 3, 4)
  dense = toeplitz.dense(c)
  assert sensitivity.exact_sensitivity(dense, 3, 99) == sensitivity.exact_sensitivity(dense, 3, 4)
  assert (sensitivity.lower_bound_sensitivity(dense, 3, 99) ==
          sensitivity.lower_bound_sensitivity(dense, 3, 4))


@_SETTINGS
@hypothesis.given(nbk=_NBK, extra_rows=st.integers(0, 3), seed=st.integers(0, 2**32 - 1),
                  density=st.sampled_from([0.3, 0.7, 1.0]))
def test_exact_and_lower_bound_on_random_nonnegative_matrices(nbk, extra_rows, seed, density):
  n, b, k = nbk
  rng = np.random.default_rng(seed)
  c = rng.uniform(size=(n + extra_rows, n)) * (rng.uniform(size=(n + extra_rows, n)) < density)
  exact = sensitivity.exact_sensitivity(c, b, k)
  if n <= 11:
    assert exact == pytest.approx(oracles.max_pattern_norm(c, b, k), rel=1e-12, abs=1e-15)
  assert sensitivity.exact_sensitivity(None, b, k, gram=c.T @ c) == pytest.approx(
      exact, rel=1e-12, abs=1e-15)
  assert sensitivity.lower_bound_sensitivity(c, b, k) <= exact * (1 + 1e-12) + 1e-15


def test_exact_sensitivity_bounds_every_direction():
  # Eq. 6: for C^T C >= 0 no choice of unit contribution vectors beats it.
  rng = np.random.default_rng(7)
  n, b, k = 9, 2, 3
  c = rng.uniform(size=(n, n))
  exact = sensitivity.exact_sensitivity(c, b, k)
  for p in oracles.separated_patterns(n, b, k):
    u = np.zeros((n, 4))
    v = rng.normal(size=(len(p), 4))
    u[list(p)] = v / np.linalg.norm(v, axis=1, keepdims=True)
    assert np.linalg.norm(c @ u) <= exact * (1 + 1e-12)


def test_exact_sensitivity_tree_like_matrix():
  # Binary-tree strategy for n = 4 (rows = nodes, non-negative).
  c = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1],
                [1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=np.float64)
  for b in range(1, 5):
    for k in range(1, 5):
      assert sensitivity.exact_sensitivity(c, b, k) == pytest.approx(
          oracles.max_pattern_norm(c, b, k))


def test_exact_sensitivity_refuses_too_many_patterns():
  c = np.tril(np.ones((40, 40)))
  assert sensitivity._count_maximal_patterns(40, 2, 6) > 100
  with pytest.raises(ValueError, match="max_patterns.*lower_bound_sensitivity"):
    sensitivity.exact_sensitivity(c, 2, 6, max_patterns=100)


def test_exact_sensitivity_refuses_negative_gram():
  c = np.array([[1.0, 0.0], [1.0, -1.0]])  # (C^T C)[0, 1] = -1.
  with pytest.raises(ValueError, match="non-negative Gram.*lower_bound_sensitivity"):
    sensitivity.exact_sensitivity(c, 1, 2)
  with pytest.raises(ValueError, match="`gram`"):
    sensitivity.exact_sensitivity(None, 1, 2, gram=c.T @ c)


def test_exact_sensitivity_needs_exactly_one_input():
  with pytest.raises(ValueError, match="exactly one"):
    sensitivity.exact_sensitivity(None, 1, 1)
  with pytest.raises(ValueError, match="exactly one"):
    sensitivity.exact_sensitivity(np.eye(2), 1, 1, gram=np.eye(2))
  with pytest.raises(ValueError, match="square"):
    sensitivity.exact_sensitivity(None, 1, 1, gram=np.ones((2, 3)))
  with pytest.raises(ValueError, match="symmetric"):
    sensitivity.exact_sensitivity(None, 1, 1, gram=np.array([[1.0, 1.0], [0.0, 1.0]]))


# ---------------------------------------------------------------------------
# Banded C.


@_SETTINGS
@hypothesis.given(n=st.integers(1, 12), data=st.data(), seed=st.integers(0, 2**32 - 1),
                  signed=st.booleans())
def test_banded_sensitivity_equals_brute_force(n, data, seed, signed):
  bands = data.draw(st.integers(1, n))
  b = data.draw(st.integers(bands, n + 1))
  k = data.draw(st.integers(1, n + 1))
  c = banded_matrix(np.random.default_rng(seed), n, bands, signed)
  value = sensitivity.banded_sensitivity(c, bands, b, k)
  assert value == pytest.approx(brute_max_column_norms(c, b, k), rel=1e-12)
  if not signed:
    assert value == pytest.approx(sensitivity.exact_sensitivity(c, b, k), rel=1e-12)


def test_banded_sensitivity_with_signs_is_attained():
  # Disjoint row supports: unit directions cannot beat the column-norm bound,
  # and u(pi) attains it.
  rng = np.random.default_rng(11)
  n, bands, b, k = 10, 3, 3, 4
  c = banded_matrix(rng, n, bands, signed=True)
  value = sensitivity.banded_sensitivity(c, bands, b, k)
  best = 0.0
  for p in oracles.separated_patterns(n, b, k):
    best = max(best, np.linalg.norm(c[:, list(p)].sum(axis=1)))
    u = np.zeros((n, 3))
    v = rng.normal(size=(len(p), 3))
    u[list(p)] = v / np.linalg.norm(v, axis=1, keepdims=True)
    assert np.linalg.norm(c @ u) <= value * (1 + 1e-12)
  assert best == pytest.approx(value, rel=1e-12)


def test_banded_sensitivity_rejects_small_min_sep():
  c = banded_matrix(np.random.default_rng(0), 6, 3, signed=False)
  with pytest.raises(ValueError, match="min_sep.*bands.*lower_bound_sensitivity"):
    sensitivity.banded_sensitivity(c, 3, 2, 2)


def test_banded_sensitivity_rejects_entries_outside_band():
  c = banded_matrix(np.random.default_rng(0), 6, 2, signed=False)
  c[5, 0] = 0.1
  with pytest.raises(ValueError, match=r"C\[5, 0\]"):
    sensitivity.banded_sensitivity(c, 2, 2, 2)
  c = banded_matrix(np.random.default_rng(0), 6, 2, signed=False)
  c[0, 1] = 0.1  # Above the diagonal.
  with pytest.raises(ValueError, match="outside"):
    sensitivity.banded_sensitivity(c, 2, 2, 2)


# ---------------------------------------------------------------------------
# Validation.


@pytest.mark.parametrize("n,b,k,name", [
    (0, 1, 1, "`n`"), (3, 0, 1, "`min_sep`"), (3, 1, 0, "`max_participations`"),
    (3, 1, -2, "`max_participations`"), (3, 1.5, 1, "`min_sep`"), (True, 1, 1, "`n`"),
])
def test_bad_schema_is_rejected(n, b, k, name):
  with pytest.raises(ValueError, match=name):
    list(sensitivity.participation_patterns(n, b, k))
  if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
    c = np.ones(n)
    with pytest.raises(ValueError, match=name):
      sensitivity.toeplitz_sensitivity(c, b, k)
    with pytest.raises(ValueError, match=name):
      sensitivity.lower_bound_sensitivity(np.eye(n), b, k)
    with pytest.raises(ValueError, match=name):
      sensitivity.exact_sensitivity(np.eye(n), b, k)
    with pytest.raises(ValueError, match=name):
      sensitivity.banded_sensitivity(np.eye(n), 1, b, k)


@pytest.mark.parametrize("coef,match", [
    ([], "at least one"), ([1.0, np.nan], "finite"), ([np.inf], "finite"),
    ([[1.0]], "1-dimensional"), ("x", "`coef`"),
])
def test_bad_coef_is_rejected(coef, match):
  with pytest.raises(ValueError, match=match):
    sensitivity.toeplitz_sensitivity(coef, 1, 1)


def test_increasing_coef_is_rejected_with_alternatives():
  with pytest.raises(ValueError, match=r"non-increasing.*coef\[1\].*coef\[2\]"
                     r".*exact_sensitivity.*lower_bound_sensitivity"):
    sensitivity.toeplitz_sensitivity([1.0, 0.2, 0.5], 1, 2)
  with pytest.raises(ValueError, match=r"non-negative.*coef\[2\].*exact_sensitivity"):
    sensitivity.toeplitz_sensitivity([1.0, 0.2, -0.1], 1, 2)


@pytest.mark.parametrize("matrix,match", [
    (np.ones(3), "2-dimensional"), (np.zeros((0, 3)), "at least one row"),
    (np.array([[1.0, np.nan]]), "finite"),
])
def test_bad_matrix_is_rejected(matrix, match):
  for fn in (sensitivity.lower_bound_sensitivity, sensitivity.exact_sensitivity):
    with pytest.raises(ValueError, match=match):
      fn(matrix, 1, 1)
  with pytest.raises(ValueError, match=match):
    sensitivity.banded_sensitivity(matrix, 1, 1, 1)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
