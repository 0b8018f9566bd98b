"""Sensitivity of a strategy matrix C under the min-separation schema Pi(b, k).

Paper 004, Sec. 3.1. A participation pattern pi is a set of rounds in which
one user contributes; under b-min-sep participation

    Pi(b, k) = { pi subset of {0, ..., n-1} : |pi| <= k and
                 |i - j| >= b for all i != j in pi }.

(Paper 004 prints |pi| < k; "at most k participations" is meant and is what
Alg. 4 and Thm. 3.1 use.) With u(pi) in {0, 1}^n the indicator of pi and
zeta = 1, the L2 sensitivity of C X under the adjacency of Pi is (Eq. 5)

    sens(C) = sup_pi  sup { ||C U||_F : U has rows ||U_t|| <= 1 for t in pi,
                                        U_t = 0 otherwise }.

Every function takes `c_matrix` with one *column* per round (shape (m, n); m
may exceed n, e.g. for tree matrices) or, for Toeplitz C, its coefficients.

Which function gives which guarantee:

  * `toeplitz_sensitivity` -- exact, Thm. 3.1: for C = LtToep(c) with c
    non-negative and non-increasing, sens(C) = ||C u(pi*)|| with
    pi* = (0, b, 2b, ..., (k-1)b). O(n) or O(kn).
  * `exact_sensitivity` -- exact when the Gram matrix C^T C is elementwise
    non-negative (Eq. 6; Corollary 2.1 of Choquette-Choo et al., paper 004's
    ref. [9]): then sens(C) = max_pi ||C u(pi)||. Exhaustive, for small n.
  * `banded_sensitivity` -- exact for banded C with min_sep >= bands (any
    signs): participations then touch disjoint rows, so sens(C)^2 is the
    largest sum of squared column norms over a pattern. O(kn).
  * `lower_bound_sensitivity` -- Remark 3.2, ||C u(pi*)|| for any C: only a
    LOWER bound; privacy computed from it is optimistic, not a guarantee.

A `max_participations` above ceil(n / min_sep), the most participations that
fit into n rounds, describes the same schema and is reduced to it.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from dp_fl import _checks

DEFAULT_MAX_PATTERNS = 5_000_000  # About a second of search.
# States expanded at once by the vectorized search in `exact_sensitivity`.
_SEARCH_CHUNK = 1 << 16
# Relative tolerance for "C^T C >= 0": entries above -tol * max|C^T C| count
# as non-negative (rounding of entries that are mathematically zero).
_GRAM_TOLERANCE = 1e-12
# `toeplitz_sensitivity` adds the k shifted copies directly (all additions
# of non-negative terms) while k is at most this; beyond, it uses the O(n)
# strided recurrence.
_DIRECT_SHIFTS_MAX = 64


# ---------------------------------------------------------------------------
# Validation helpers.


def feasible_participations(n: int, min_sep: int, max_participations: int) -> int:
  """min(k, ceil(n / b)): the most participations Pi(b, k) allows in n rounds.

  Validates n, min_sep and max_participations (integers >= 1).
  """
  n = _checks.check_positive_int("n", n)
  min_sep = _checks.check_positive_int("min_sep", min_sep)
  k = _checks.check_positive_int("max_participations", max_participations)
  return min(k, -(-n // min_sep))


def _finite_array(name: str, value: Any, ndim: int) -> np.ndarray:
  """_checks.check_finite_array, also for values that are not numeric."""
  try:
    return _checks.check_finite_array(name, value, ndim=ndim)
  except (TypeError, ValueError) as e:
    if str(e).startswith(f"`{name}`"):
      raise
    raise ValueError(f"`{name}` must be a {ndim}-D array of real numbers; got "
                     f"{value!r:.80} ({e}).") from e


def _check_matrix(c_matrix: Any, name: str = "c_matrix") -> np.ndarray:
  c = _finite_array(name, c_matrix, ndim=2)
  if c.shape[0] < 1 or c.shape[1] < 1:
    raise ValueError(
        f"`{name}` must have at least one row and one column (one column per "
        f"round); got shape {c.shape}.")
  return c


def _check_coef(coef: Any) -> np.ndarray:
  c = _finite_array("coef", coef, ndim=1)
  if c.size < 1:
    raise ValueError("`coef` must hold at least one Toeplitz coefficient; got [].")
  return c


def _pi_star(n: int, min_sep: int, k: int) -> np.ndarray:
  """pi* = (0, b, ..., (k-1) b) of Eq. 7 (k already feasible, so (k-1) b < n)."""
  return np.arange(k) * min_sep


# ---------------------------------------------------------------------------
# Thm. 3.1 and Remark 3.2.


def _participation_sum(c: np.ndarray, min_sep: int, k: int) -> np.ndarray:
  """c_bar = LtToep(c) u(pi*) = sum_{i<k} (c shifted down by i b) (Alg. 4)."""
  n = c.size
  if k <= _DIRECT_SHIFTS_MAX:
    c_bar = np.zeros(n)
    for i in range(k):
      s = i * min_sep
      c_bar[s:] += c[:n - s]
    return c_bar
  # c_bar[t] - c_bar[t - b] = c[t] - c[t - k b] (c[<0] = 0): a cumulative sum
  # along each residue class mod b, i.e. down the columns of a (rows, b) grid.
  x = c.copy()
  if k * min_sep < n:
    x[k * min_sep:] -= c[:n - k * min_sep]
  rows = -(-n // min_sep)
  grid = np.zeros(rows * min_sep)
  grid[:n] = x
  return np.cumsum(grid.reshape(rows, min_sep), axis=0).ravel()[:n]


def toeplitz_sensitivity(coef: Any, min_sep: int, max_participations: int) -> float:
  """sens(LtToep(c)) under Pi(b, k) for non-negative, non-increasing c.

  Thm. 3.1 of paper 004 (Kalinin and Lampert, its ref. [26], Thm. 2): if
  c_0 >= c_1 >= ... >= c_{n-1} >= 0, the worst pattern puts the k
  participations as early and as close as allowed, pi* = (0, b, ..., (k-1) b)
  (Eq. 7), and sens = ||C u(pi*)||_2, exactly. Computed as in Alg. 4 by adding
  shifted copies of c (O(kn)), or for k > 64 by an equivalent O(n) strided
  cumulative sum.

  Args:
    coef: c, the first column of C (length n >= 1).
    min_sep: b >= 1.
    max_participations: k >= 1; reduced to ceil(n / b) if larger.

  Returns:
    The sensitivity for clip norm zeta = 1.

  Raises:
    ValueError: for invalid arguments, or if c has a negative entry or an
      increase (Thm. 3.1 does not apply; the message points to the
      alternatives).
  """
  c = _check_coef(coef)
  k = feasible_participations(c.size, min_sep, max_participations)
  min_sep = int(min_sep)
  alternatives = (
      "Thm. 3.1 needs c_0 >= c_1 >= ... >= 0. For other C use "
      "exact_sensitivity(toeplitz.dense(coef), ...) (exact when C^T C >= 0, "
      "small n) or lower_bound_sensitivity (Remark 3.2; a LOWER bound only).")
  if np.any(c < 0):
    t = int(np.flatnonzero(c < 0)[0])
    raise ValueError(
        f"`coef` must be non-negative for toeplitz_sensitivity; got "
        f"coef[{t}]={c[t]!r}. {alternatives}")
  increases = np.flatnonzero(np.diff(c) > 0)
  if increases.size:
    t = int(increases[0])
    raise ValueError(
        f"`coef` must be non-increasing for toeplitz_sensitivity; got "
        f"coef[{t}]={c[t]!r} < coef[{t + 1}]={c[t + 1]!r}. {alternatives}")
  c_bar = _participation_sum(c, min_sep, k)
  return float(np.linalg.norm(c_bar))


def lower_bound_sensitivity(c_matrix: Any, min_sep: int,
                            max_participations: int) -> float:
  """||C u(pi*)||_2 with pi* = (0, b, ..., (k-1) b): a LOWER bound on sens(C).

  Remark 3.2 of paper 004 (Eq. 8): pi* is one pattern of Pi(b, k), so for any
  C (any signs, any shape (m, n) with one column per round) the sensitivity is
  at least this. It equals sens(C) for non-increasing non-negative Toeplitz C
  (Thm. 3.1); in general the true sensitivity may be larger, and a privacy
  guarantee computed from this value is optimistic, not a guarantee.
  """
  c = _check_matrix(c_matrix)
  n = c.shape[1]
  k = feasible_participations(n, min_sep, max_participations)
  cols = _pi_star(n, int(min_sep), k)
  return float(np.linalg.norm(c[:, cols].sum(axis=1)))


# ---------------------------------------------------------------------------
# Patterns and the exhaustive maximum (Eq. 6).


def participation_patterns(n: int, min_sep: int,
                           max_participations: int) -> Iterator[tuple[int, ...]]:
  """All non-empty patterns of Pi(b, k) in n rounds, in lexicographic order.

  Each pattern is a tuple of 0-based rounds, increasing, pairwise >= b apart,
  with 1..k entries (the empty pattern, with sensitivity 0, is left out).
  There are exponentially many: meant for small n.
  """
  n = _checks.check_positive_int("n", n)
  b = _checks.check_positive_int("min_sep", min_sep)
  k = feasible_participations(n, b, max_participations)
  pattern: list[int] = []

  def extend(first: int) -> Iterator[tuple[int, ...]]:
    for r in range(first, n):
      pattern.append(r)
      yield tuple(pattern)
      if len(pattern) < k:
        yield from extend(r + b)
      pattern.pop()

  yield from extend(0)


def _count_maximal_patterns(n: int, b: int, k: int) -> float:
  """Number of patterns `_maximal_pattern_search` visits as leaves.

  Leaves are the maximal patterns of Pi(b, k): those with k entries, and
  those with fewer that admit no further round (first < b, consecutive gaps
  < 2b, last >= n - b). DP over (size, last round, flag), flag = "some gap
  (or the first round) already leaves room", i.e. the pattern must reach k.
  Float counts (inf if astronomically many).
  """
  idx = np.arange(n)
  tight = (idx < b).astype(np.float64)  # flag 0: size-1 prefixes with first < b.
  loose = (idx >= b).astype(np.float64)  # flag 1.
  total = 0.0
  for size in range(1, k + 1):
    if size == k:
      total += tight.sum() + loose.sum()
      break
    total += tight[max(n - b, 0):].sum()
    ct = np.concatenate([[0.0], np.cumsum(tight)])  # ct[p] = sum tight[:p].
    cl = np.concatenate([[0.0], np.cumsum(loose)])
    new_tight = np.zeros(n)
    new_loose = np.zeros(n)
    # New tight round q: previous tight p in [q - 2b + 1, q - b].
    hi = idx - b + 1  # exclusive bound on p.
    lo = np.maximum(idx - 2 * b + 1, 0)
    ok = hi > 0
    new_tight[ok] = ct[hi[ok]] - ct[np.minimum(lo[ok], hi[ok])]
    # New loose round q: previous loose p <= q - b, or tight p <= q - 2b.
    new_loose[ok] = cl[hi[ok]]
    hi2 = idx - 2 * b + 1
    ok2 = hi2 > 0
    new_loose[ok2] += ct[hi2[ok2]]
    tight, loose = new_tight, new_loose
  return float(total)


def _maximal_pattern_search(gram: np.ndarray, b: int, k: int):
  """max over maximal patterns pi of u(pi)^T G u(pi), and an argmax.

  Depth-first over chunks of partial patterns (vectorized within a chunk).
  A partial pattern of size j < k ending at `last` is extended by every round
  r >= last + b that can still lead to a maximal pattern: if the pattern is
  "loose" (first round >= b or some gap >= 2b, so a round could be inserted)
  it must reach k entries, so r + (k - j - 1) b <= n - 1; a "tight" one
  either reaches k or ends at last >= n - b. The quadratic form grows by
  G[r, r] + 2 sum_{s in pi} G[s, r].
  """
  n = gram.shape[0]
  diag = np.diag(gram)
  best_val = -np.inf
  best_pat: tuple[int, ...] = ()
  # State arrays: members (S, j), last (S), loose (S, bool), val (S).
  stack = [(np.zeros((1, 0), dtype=np.int64), np.array([-b]),
            np.array([False]), np.array([0.0]))]
  while stack:
    members, last, loose, val = stack.pop()
    j = members.shape[1]
    lo = last + b
    room = n - 1 - (k - j - 1) * b  # Largest r leaving room for k entries.
    hi = np.where(loose, room, np.maximum(last + 2 * b - 1, room))
    hi = np.minimum(hi, n - 1)
    counts = np.maximum(hi - lo + 1, 0)
    total = int(counts.sum())
    if total == 0:
      continue
    if total > _SEARCH_CHUNK and members.shape[0] > 1:
      half = members.shape[0] // 2
      stack.append((members[half:], last[half:], loose[half:], val[half:]))
      stack.append((members[:half], last[:half], loose[:half], val[:half]))
      continue
    parent = np.repeat(np.arange(members.shape[0]), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    r = lo[parent] + offsets
    child_members = np.concatenate([members[parent], r[:, None]], axis=1)
    cross = gram[members[parent], r[:, None]].sum(axis=1) if j else 0.0
    child_val = val[parent] + diag[r] + 2.0 * cross
    child_loose = loose[parent] | (r - last[parent] >= 2 * b)
    size = j + 1
    if size == k:
      leaf = np.ones(total, dtype=bool)
    else:
      leaf = ~child_loose & (r >= n - b)
    if np.any(leaf):
      i = int(np.argmax(np.where(leaf, child_val, -np.inf)))
      if child_val[i] > best_val:
        best_val = float(child_val[i])
        best_pat = tuple(int(x) for x in child_members[i])
    go = ~leaf
    if np.any(go):
      stack.append((child_members[go], r[go], child_loose[go], child_val[go]))
  return best_val, best_pat


def _check_gram_nonnegative(gram: np.ndarray, name: str) -> None:
  scale = float(np.max(np.abs(gram))) if gram.size else 0.0
  low = float(np.min(gram)) if gram.size else 0.0
  if low < -_GRAM_TOLERANCE * scale:
    i, j = np.unravel_index(int(np.argmin(gram)), gram.shape)
    raise ValueError(
        f"`{name}` must give an elementwise non-negative Gram matrix C^T C for "
        f"exact_sensitivity (Eq. 6 of paper 004); got (C^T C)[{i}, {j}]={low!r}. "
        f"For such C the sensitivity also maximizes over the directions of "
        f"the contributions, which this search does not; use "
        f"lower_bound_sensitivity (Remark 3.2) and report it as a LOWER bound, "
        f"or banded_sensitivity for banded C with min_sep >= bands.")


def exact_sensitivity(c_matrix: Any, min_sep: int, max_participations: int, *,
                      max_patterns: int = DEFAULT_MAX_PATTERNS,
                      gram: Any = None) -> float:
  """max over pi in Pi(b, k) of ||C u(pi)||_2, exact when C^T C >= 0.

  Eq. 6 of paper 004 (Corollary 2.1 of its ref. [9]): if the Gram matrix
  G = C^T C is elementwise non-negative -- e.g. any non-negative C such as
  binary trees, BLTs (Eq. 2 with omega >= 0) or BandMF with non-negative
  entries -- then ||C U||_F^2 = sum_{s,t in pi} G_st <U_s, U_t> is maximized
  by equal unit rows, and sens(C) = max_pi ||C u(pi)|| = max_pi
  sqrt(u(pi)^T G u(pi)). For general C the true sensitivity also maximizes
  over signs/directions of the rows of U; such C is refused (ValueError).

  Because G >= 0, adding a round never lowers u^T G u, so only maximal
  patterns are searched (k entries, or no round can be added), by a
  vectorized depth-first enumeration. Their number is counted first; above
  `max_patterns` the call is refused.

  Args:
    c_matrix: C with one column per round, shape (m, n); or None if `gram`
      is given.
    min_sep: b >= 1.
    max_participations: k >= 1; reduced to ceil(n / b) if larger.
    max_patterns: refuse if more maximal patterns than this would be
      searched (>= 1).
    gram: optional precomputed n x n Gram matrix C^T C instead of c_matrix.

  Returns:
    The sensitivity for clip norm zeta = 1.

  Raises:
    ValueError: invalid arguments, C^T C with a negative entry, or too many
      patterns (use lower_bound_sensitivity, a lower bound, instead).
  """
  if (c_matrix is None) == (gram is None):
    given = "neither" if c_matrix is None else "both"
    raise ValueError(
        "Pass exactly one of `c_matrix` (C, one column per round) and `gram` "
        f"(C^T C) to exact_sensitivity; got {given}.")
  if gram is None:
    c = _check_matrix(c_matrix)
    g = c.T @ c
    name = "c_matrix"
  else:
    g = _check_matrix(gram, "gram")
    name = "gram"
    if g.shape[0] != g.shape[1]:
      raise ValueError(f"`gram` must be a square n x n matrix C^T C; got shape "
                       f"{g.shape}.")
    if not np.allclose(g, g.T, rtol=1e-12, atol=0.0):
      raise ValueError("`gram` must be symmetric (it is C^T C); got an "
                       "asymmetric matrix. Pass C as `c_matrix` instead.")
  n = g.shape[0]
  k = feasible_participations(n, min_sep, max_participations)
  b = int(min_sep)
  max_patterns = _checks.check_positive_int("max_patterns", max_patterns)
  _check_gram_nonnegative(g, name)
  count = _count_maximal_patterns(n, b, k)
  if count > max_patterns:
    raise ValueError(
        f"`max_patterns`={max_patterns} is below the {count:.4g} maximal "
        f"participation patterns of Pi(b={b}, k={k}) in n={n} rounds that "
        f"exact_sensitivity would search. Raise max_patterns (time grows "
        f"linearly), or use lower_bound_sensitivity (Remark 3.2; a LOWER bound "
        f"on the sensitivity), or toeplitz_sensitivity / banded_sensitivity "
        f"where they apply.")
  value, _ = _maximal_pattern_search(g, b, k)
  return float(np.sqrt(max(value, 0.0)))


# ---------------------------------------------------------------------------
# Banded C (column supports of participations are disjoint).


def _max_separated_sum(weights: np.ndarray, b: int, k: int) -> float:
  """max over pi in Pi(b, k) of sum_{i in pi} weights_i, for weights >= 0.

  best_j[t] = best sum of <= j rounds among 0..t; the last round s <= t of
  such a pattern leaves best_{j-1}[s - b] for the rest:
  best_j = cummax(weights + shift_b(best_{j-1})). O(kn).
  """
  n = weights.size
  best = np.zeros(n)
  for _ in range(k):
    shifted = np.zeros(n)
    if n > b:
      shifted[b:] = best[:n - b]
    best = np.maximum.accumulate(weights + shifted)
  return float(best[-1])


def banded_sensitivity(c_matrix: Any, bands: int, min_sep: int,
                       max_participations: int) -> float:
  """Exact sens(C) for a banded C under Pi(b, k) with min_sep >= bands.

  C has `bands` bands below and on the diagonal: C[i, j] = 0 unless
  0 <= i - j < bands (shape (m, n), one column per round), as in BandMF.
  Column j is then supported on rows j .. j+bands-1, and two rounds >= bands
  apart use disjoint rows, so for any pattern pi in Pi(b, k) with
  b >= bands, ||C U||_F^2 = sum_{i in pi} ||C[:, i]||^2 ||U_i||^2, whatever
  the signs of C (no C^T C >= 0 needed; cf. Sec. 3.1 of paper 004 and the
  BandMF analysis of its ref. [8]). Hence
  sens(C)^2 = max_pi sum_{i in pi} ||C[:, i]||^2, found by dynamic
  programming over the column norms in O(kn).

  Raises:
    ValueError: invalid arguments, min_sep < bands (then the value would only
      be a lower bound: use lower_bound_sensitivity), or a non-zero entry of
      C outside the band.
  """
  c = _check_matrix(c_matrix)
  bands = _checks.check_positive_int("bands", bands)
  n = c.shape[1]
  k = feasible_participations(n, min_sep, max_participations)
  b = int(min_sep)
  if b < bands:
    raise ValueError(
        f"`min_sep`={b} must be >= `bands`={bands} for banded_sensitivity "
        f"(participations then touch disjoint rows of C). With min_sep < bands "
        f"the column-norm maximum would only be a LOWER bound; use "
        f"lower_bound_sensitivity (Remark 3.2) and report it as such, or "
        f"exact_sensitivity when C^T C >= 0.")
  diff = np.arange(c.shape[0])[:, None] - np.arange(n)[None, :]
  outside = ((diff < 0) | (diff >= bands)) & (c != 0)
  if np.any(outside):
    i, j = (int(x) for x in np.argwhere(outside)[0])
    raise ValueError(
        f"`c_matrix` must be zero outside its {bands} lower bands "
        f"(C[i, j] = 0 unless 0 <= i - j < bands) for banded_sensitivity; got "
        f"C[{i}, {j}]={c[i, j]!r}. Pass the correct `bands`, or use "
        f"exact_sensitivity / lower_bound_sensitivity.")
  weights = np.sum(c * c, axis=0)
  return float(np.sqrt(_max_separated_sum(weights, b, k)))
