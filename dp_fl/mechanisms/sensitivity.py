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
  * `upper_bound_sensitivity` -- a valid UPPER bound for any C (any signs):
    sens(C)^2 <= max_pi sum_{i,j in pi} |(C^T C)_ij|, bounded row by row by
    dynamic programming. Equal to sens(C) for banded C with min_sep >= bands
    (e.g. sqrt(k) for C = I). O(k n^2), vectorized (a Lagrangian bound,
    O(n^2) per step, for large k): ~0.1 s for n = 2052, k = 7.
  * `toeplitz_sensitivity_bounds` -- for C = LtToep(c) with any c (e.g. the
    inverse of a banded C⁻¹ whose coefficients are not monotone): the
    Remark 3.2 lower bound and an upper bound from the autocorrelation of |c|,
    both O(n log n) from c alone (no dense C).
  * `certified_sensitivity` -- the best of these that is a guarantee: exact
    (`exact_sensitivity`) when C^T C >= 0 and the search fits its budget,
    else `upper_bound_sensitivity`; with its kind and method.

A `max_participations` above ceil(n / min_sep), the most participations that
fit into n rounds, describes the same schema and is reduced to it
(`feasible_participations`, the one place k is capped).
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple, Optional

import numpy as np

from dp_fl import _checks

DEFAULT_MAX_PATTERNS = 5_000_000  # About a second of search.

# Kinds and methods returned by `certified_sensitivity`.
EXACT = "exact"
UPPER_BOUND = "upper_bound"
METHOD_EXACT_SEARCH = "exact maximal-pattern search (CᵀC ≥ 0, Eq. 6)"
METHOD_UPPER_BOUND = ("upper bound from |CᵀC| (Σ_{i,j∈π} |G_ij| bounded row by row, "
                      "any C; Eq. 5)")
# States expanded at once by the vectorized search in `exact_sensitivity`.
_SEARCH_CHUNK = 1 << 16
# Relative tolerance for "C^T C >= 0": entries above -tol * max|C^T C| count
# as non-negative (rounding of entries that are mathematically zero).
_GRAM_TOLERANCE = 1e-12
# `toeplitz_sensitivity` adds the k shifted copies directly (all additions
# of non-negative terms) while k is at most this; beyond, it uses the O(n)
# strided recurrence.
_DIRECT_SHIFTS_MAX = 64
# `upper_bound_sensitivity`: rows of |C^T C| per block of the batched dynamic
# program (a block of n = 2052 columns is 2 MB: cache-sized); that program
# while it updates at most _MAX_PASS_WORK n^2 entries (about 0.3 s at
# n = 2052), else the Lagrangian bound with at most _DUAL_ITERATIONS
# cutting-plane steps (about 0.06 s each at n = 2052).
_ROW_BLOCK = 128
_MAX_PASS_WORK = 16
_DUAL_ITERATIONS = 30


# ---------------------------------------------------------------------------
# Validation helpers.


def participation_cap(rounds: int, min_sep: int) -> int:
  """⌈n/b⌉: the most participations, pairwise at least b = `min_sep` rounds apart, that fit
  in n = `rounds` rounds (paper 004, Sec. 3.1 and Sec. 5's "max-par").

  Participations at rounds t₁ < … < t_k with t_{i+1} − t_i >= b span (k − 1) b <= n − 1, so
  k <= ⌊(n − 1)/b⌋ + 1 = ⌈n/b⌉, attained by π* = (0, b, …) (Eq. 7). This is the one cap on
  participations in the repository (n = 0 rounds hold none).
  """
  n = _checks.check_nonnegative_int("rounds", rounds)
  b = _checks.check_positive_int("min_sep", min_sep)
  return -(-n // b)


def feasible_participations(n: int, min_sep: int,
                            max_participations: Optional[int] = None
                            ) -> tuple[int, Optional[str]]:
  """(k, note): k capped at ⌈n/b⌉, the most participations Pi(b, k) allows in n rounds.

  Under Pi(b, k) (paper 004, Sec. 3.1) at most ⌈n/b⌉ participations, pairwise at least
  b = `min_sep` apart, fit into n rounds, so a larger k describes the same schema. This is
  the one place every module caps k.

  Args:
    n: rounds (>= 1).
    min_sep: b (>= 1).
    max_participations: k (>= 1), or None for "as many as fit" (k = ⌈n/b⌉).

  Returns:
    (the capped k, a note saying what was reduced, or None when k fits as given).
  """
  n = _checks.check_positive_int("n", n)
  min_sep = _checks.check_positive_int("min_sep", min_sep)
  most = participation_cap(n, min_sep)
  if max_participations is None:
    return most, None
  k = _checks.check_positive_int("max_participations", max_participations)
  if k <= most:
    return k, None
  return most, (
      f"`max_participations`={k} cannot be realized in n={n} rounds with "
      f"min_sep={min_sep}; reduced to the feasible maximum ceil(n / min_sep)={most}.")


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


def participation_sum(c: np.ndarray, min_sep: int, k: int) -> np.ndarray:
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


def participation_adjoint(v: np.ndarray, min_sep: int, k: int) -> np.ndarray:
  """The transpose of `participation_sum`: out[s] = Σ_{i<k} v[s + i b] (gradients of
  Thm. 3.1's sensitivity, Alg. 4)."""
  n = v.size
  out = np.zeros(n)
  for i in range(k):
    shift = i * min_sep
    if shift >= n:
      break
    out[:n - shift] += v[shift:]
  return out


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
  k, _ = feasible_participations(c.size, min_sep, max_participations)
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
  c_bar = participation_sum(c, min_sep, k)
  return float(np.linalg.norm(c_bar))


METHOD_TOEPLITZ_UPPER_BOUND = ("upper bound from the autocorrelation of |c| (Σ_{i,j∈π} "
                               "|G_ij| <= k R(0) + 2 Σ_d (k − d) max_{Δ ≥ d b} R(Δ); any c)")
METHOD_TOEPLITZ_LOWER_BOUND = "Remark 3.2 lower bound, ||C u(π*)|| with π* = (0, b, …, (k−1)b)"
# Below this many coefficients the autocorrelation is summed directly (O(n²), exact
# summation order); above, by FFT with a margin for its absolute rounding error.
_DIRECT_CORRELATION_MAX = 8192
_FFT_CORRELATION_MARGIN = 1e-11


def _abs_autocorrelation(c: np.ndarray) -> np.ndarray:
  """R(Δ) = Σ_{t=0}^{n−1−Δ} |c_t| |c_{t+Δ}| for Δ = 0..n−1, never below its true value."""
  a = np.abs(c)
  n = a.size
  if n <= _DIRECT_CORRELATION_MAX:
    return np.correlate(a, a, mode="full")[n - 1:]
  size = 1 << int(2 * n - 1).bit_length()
  spectrum = np.fft.rfft(a, size)
  r = np.fft.irfft(spectrum * np.conj(spectrum), size)[:n]
  # FFT rounding errors are absolute, a few ulp of R(0) = max R (Cauchy–Schwarz): lifting
  # every lag by a margin far above them keeps each value an over-estimate.
  return np.maximum(r, 0.0) + _FFT_CORRELATION_MARGIN * float(np.dot(a, a))


def toeplitz_sensitivity_bounds(coef: Any, min_sep: int,
                                max_participations: int) -> tuple[float, float]:
  """(lower, upper) bounds on sens(LtToep(c)) under Π(b, k) for any real c.

  lower = ||C u(π*)||, π* = (0, b, …, (k−1) b): one pattern of Π(b, k) (Remark 3.2 of paper
  004), equal to sens(C) when c is non-negative and non-increasing (Thm. 3.1).

  upper: with G = CᵀC, G_ab = Σ_{s=0}^{n−1−max(a,b)} c_s c_{s+|a−b|}, so
  |G_ab| <= R(|a−b|) with R(Δ) = Σ_{s=0}^{n−1−Δ} |c_s| |c_{s+Δ}|. For a pattern
  p_1 < … < p_m (m <= k) of unit contributions, Eq. 5 gives
  sens² <= Σ_{i,j} |G_{p_i p_j}| <= m R(0) + 2 Σ_{d=1}^{m−1} (m − d) R*(d b), because
  p_{i+d} − p_i >= d b, with R*(Δ) = max_{Δ' >= Δ} R(Δ'); the right side grows with m, so
  m = k bounds every pattern. O(n log n) (O(n²) summed directly below 8192 rounds).
  """
  c = _check_coef(coef)
  n = c.size
  min_sep = _checks.check_positive_int("min_sep", min_sep)
  k, _ = feasible_participations(n, min_sep, max_participations)
  lower = float(np.linalg.norm(participation_sum(c, min_sep, k)))
  suffix_max = np.maximum.accumulate(_abs_autocorrelation(c)[::-1])[::-1]
  lags = np.arange(1, k) * min_sep  # d b < n because k <= ⌈n / b⌉.
  weights = k - np.arange(1, k)
  upper_squared = k * suffix_max[0] + 2.0 * float(np.dot(weights, suffix_max[lags]))
  return lower, max(lower, float(np.sqrt(upper_squared)))


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
  k, _ = feasible_participations(n, min_sep, max_participations)
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
  k, _ = feasible_participations(n, b, max_participations)
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


def _gram_is_nonnegative(gram: np.ndarray) -> bool:
  """Whether C^T C >= 0 elementwise, up to _GRAM_TOLERANCE (relative)."""
  scale = float(np.max(np.abs(gram))) if gram.size else 0.0
  low = float(np.min(gram)) if gram.size else 0.0
  return low >= -_GRAM_TOLERANCE * scale


def _check_gram_nonnegative(gram: np.ndarray, name: str) -> None:
  if not _gram_is_nonnegative(gram):
    low = float(np.min(gram))
    i, j = np.unravel_index(int(np.argmin(gram)), gram.shape)
    raise ValueError(
        f"`{name}` must give an elementwise non-negative Gram matrix C^T C for "
        f"exact_sensitivity (Eq. 6 of paper 004); got (C^T C)[{i}, {j}]={low!r}. "
        f"For such C the sensitivity also maximizes over the directions of "
        f"the contributions, which this search does not; use "
        f"upper_bound_sensitivity (a valid UPPER bound, or certified_sensitivity "
        f"to pick the best guarantee), lower_bound_sensitivity (Remark 3.2) "
        f"reported as a LOWER bound, or banded_sensitivity for banded C with "
        f"min_sep >= bands.")


def _gram(c_matrix: Any, gram: Any, caller: str) -> tuple[np.ndarray, str]:
  """(G = C^T C, name of the argument it came from), validated.

  Exactly one of `c_matrix` (C, one column per round) and `gram` (a square,
  symmetric n x n C^T C) must be given.
  """
  if (c_matrix is None) == (gram is None):
    given = "neither" if c_matrix is None else "both"
    raise ValueError(
        "Pass exactly one of `c_matrix` (C, one column per round) and `gram` "
        f"(C^T C) to {caller}; got {given}.")
  if gram is None:
    c = _check_matrix(c_matrix)
    return c.T @ c, "c_matrix"
  g = _check_matrix(gram, "gram")
  if g.shape[0] != g.shape[1]:
    raise ValueError(f"`gram` must be a square n x n matrix C^T C; got shape "
                     f"{g.shape}.")
  if not (np.array_equal(g, g.T) or np.allclose(g, g.T, rtol=1e-12, atol=0.0)):
    raise ValueError("`gram` must be symmetric (it is C^T C); got an "
                     "asymmetric matrix. Pass C as `c_matrix` instead.")
  return g, "gram"


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
      patterns (use upper_bound_sensitivity, a valid upper bound, or
      lower_bound_sensitivity, a lower bound, instead).
  """
  g, name = _gram(c_matrix, gram, "exact_sensitivity")
  n = g.shape[0]
  k, _ = feasible_participations(n, min_sep, max_participations)
  b = int(min_sep)
  max_patterns = _checks.check_positive_int("max_patterns", max_patterns)
  _check_gram_nonnegative(g, name)
  count = _count_maximal_patterns(n, b, k)
  if count > max_patterns:
    raise ValueError(
        f"`max_patterns`={max_patterns} is below the {count:.4g} maximal "
        f"participation patterns of Pi(b={b}, k={k}) in n={n} rounds that "
        f"exact_sensitivity would search. Raise max_patterns (time grows "
        f"linearly), or use upper_bound_sensitivity (a valid UPPER bound) or "
        f"lower_bound_sensitivity (Remark 3.2; a LOWER bound on the "
        f"sensitivity), or toeplitz_sensitivity / banded_sensitivity where they "
        f"apply.")
  value, _ = _maximal_pattern_search(g, b, k)
  return float(np.sqrt(max(value, 0.0)))


# ---------------------------------------------------------------------------
# Banded C (column supports of participations are disjoint).


def _separated_sum_passes(weights: np.ndarray, b: int,
                          passes: int) -> Iterator[np.ndarray]:
  """best_1, ..., best_passes of the separated-sum DP, along the last axis.

  For weights >= 0 (any leading axes, rounds along the last one),
  best_j[..., t] = max over patterns pi of <= j rounds among 0..t, pairwise
  >= b apart, of sum_{i in pi} weights[..., i]. The last round s <= t of such
  a pattern leaves best_{j-1}[..., s - b] for the rest:
  best_j = cummax(weights + shift_b(best_{j-1})), one pass over the array
  each. Yields one buffer, updated in place: read it before the next step.
  """
  n = weights.shape[-1]
  best = np.zeros(weights.shape)
  candidate = np.empty(weights.shape)
  head = min(b, n)
  candidate[..., :head] = weights[..., :head]  # Nothing fits before round b.
  for _ in range(passes):
    if n > b:
      np.add(weights[..., b:], best[..., :n - b], out=candidate[..., b:])
    np.maximum.accumulate(candidate, axis=-1, out=best)
    yield best


def _max_separated_sum(weights: np.ndarray, b: int, k: int) -> float:
  """max over pi in Pi(b, k) of sum_{i in pi} weights_i, for weights >= 0.

  The last best_k[-1] of `_separated_sum_passes`. O(kn).
  """
  best = np.zeros(weights.shape)
  for best in _separated_sum_passes(weights, b, k):
    pass
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
  k, _ = feasible_participations(n, min_sep, max_participations)
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


# ---------------------------------------------------------------------------
# Any C: a valid upper bound, and the best certified value.


def _blocks(n: int, b: int, k: int) -> Iterator[tuple[int, int, int, int]]:
  """(r0, r1, left passes, right passes) of `_row_maxima_by_passes`' blocks.

  Rows r0..r1-1 use columns [0, r1 - b) on the left and [r0 + b, n) on the
  right; `width` columns hold at most ceil(width / b) rounds, so more than
  that many passes change nothing.
  """
  for r0 in range(0, n, _ROW_BLOCK):
    r1 = min(r0 + _ROW_BLOCK, n)
    left_width = max(r1 - b, 0)
    right_width = max(n - r0 - b, 0)
    yield (r0, r1, min(k - 1, participation_cap(left_width, b)),
           min(k - 1, participation_cap(right_width, b)))


def _pass_work(n: int, b: int, k: int) -> int:
  """Array entries `_row_maxima_by_passes` updates (both sides)."""
  return sum((r1 - r0) * (max(r1 - b, 0) * left + max(n - r0 - b, 0) * right)
             for r0, r1, left, right in _blocks(n, b, k))


def _row_maxima_by_passes(gram: np.ndarray, b: int, k: int) -> np.ndarray:
  """The w_i of `_row_pattern_maxima`, exactly, by the count-indexed DP.

  left_a[i], the best sum of |G[i, :]| over <= a rounds in [0, i - b], is
  column i - b of the a-th of `_separated_sum_passes` run on a block of rows
  of |G| at once; right_c[i], the same over [i + b, n), comes from the passes
  on the columns reversed. Both grow with the count, so
  w_i = |G_ii| + max_{a + c = k - 1} (left_a[i] + right_c[i]). Rows go in
  blocks of _ROW_BLOCK, each side over the columns it needs only: at most
  2 (k - 1) passes over about half of the n x n array (`_pass_work`),
  O(k n^2) time, O(n _ROW_BLOCK) extra memory.
  """
  n = gram.shape[0]
  left = np.zeros((k, n))  # left[a, i] = left_a[i]; left[0] = 0.
  right = np.zeros((k, n))

  def fill(side, block, rows, local, cols, passes):
    for a, best in enumerate(_separated_sum_passes(block, b, passes), start=1):
      side[a, rows] = best[local, cols]
    side[passes + 1:, rows] = side[passes, rows]  # Saturated.

  for r0, r1, left_passes, right_passes in _blocks(n, b, k):
    rows = np.arange(r0, r1)
    # Left: columns [0, i - b] of row i, all inside [0, r1 - b).
    ok = rows[rows >= b]
    if ok.size:
      fill(left, np.abs(gram[r0:r1, :r1 - b]), ok, ok - r0, ok - b, left_passes)
    # Right: columns [i + b, n) of row i, reversed: local column t'' = n-1-t,
    # so row i needs t'' in [0, n-1-i-b], inside the block [r0 + b, n).
    ok = rows[rows + b <= n - 1]
    if ok.size:
      fill(right, np.abs(gram[r0:r1, r0 + b:][:, ::-1]), ok, ok - r0,
           n - 1 - b - ok, right_passes)
  # right[::-1][a] = right_{k-1-a}.
  return np.abs(np.diagonal(gram)) + (left + right[::-1]).max(axis=0)


def _penalized_left_maxima(at: np.ndarray, b: int, lam: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
  """Per row i: max over S in [0, i - b], pairwise >= b apart, of
  sum_{t in S} (at[t, i] - lam[i]), and |S| for one maximizer S.

  `at` holds the rows of |G| as columns (at[t, i] = |G_it|). The count-free
  recurrence best_t = max(best_{t-1}, at[t] - lam + best_{t-b}) runs down
  the rounds t for all rows at once (rows i >= t + b only; row i is read off
  at t = i - b), keeping the last b + 1 states. O(n^2).
  """
  n = at.shape[0]
  value = np.zeros(n)
  count = np.zeros(n, dtype=np.int64)
  ring_v = np.zeros((b + 1, n))
  ring_c = np.zeros((b + 1, n), dtype=np.int64)
  for t in range(n - b):
    s = slice(t + b, n)
    take_v = at[t, s] - lam[s]
    take_c = np.ones(n - t - b, dtype=np.int64)
    if t >= b:
      take_v += ring_v[(t - b) % (b + 1), s]
      take_c += ring_c[(t - b) % (b + 1), s]
    if t >= 1:
      keep_v = ring_v[(t - 1) % (b + 1), s]
      keep_c = ring_c[(t - 1) % (b + 1), s]
    else:
      keep_v, keep_c = 0.0, 0
    take = take_v > keep_v
    cur = t % (b + 1)
    ring_v[cur, s] = np.where(take, take_v, keep_v)
    ring_c[cur, s] = np.where(take, take_c, keep_c)
    value[t + b] = ring_v[cur, t + b]
    count[t + b] = ring_c[cur, t + b]
  return value, count


def _row_maxima_by_duality(gram: np.ndarray, b: int, k: int,
                           iterations: int) -> np.ndarray:
  """Upper bounds on the w_i of `_row_pattern_maxima`, O(n^2) per iteration.

  Lagrangian relaxation of the count: for every lam >= 0,

      w_i - |G_ii| <= f_i(lam) = lam (k - 1) + max_S sum_{j in S} (|G_ij| - lam),

  S over the rounds in [0, i - b] and [i + b, n), pairwise >= b apart, of
  any size (`_penalized_left_maxima` on each side, all rows at once). Every
  lam gives a valid bound, so the smallest value seen is kept. f_i is
  convex and piecewise linear with slope k - 1 - |S*|; the constraints are
  intervals, so the LP relaxation is integral and min f_i = w_i - |G_ii|
  (no duality gap). lam is chosen by cutting planes: where the tangents at
  lo (slope < 0) and hi (slope >= 0) meet, which also certifies
  min f_i >= their value there. A row stops when a maximizer has exactly
  k - 1 rounds, has at most k - 1 at lam = 0, or its certified gap is below
  1e-12 relative; all stop after a few iterations in practice (`iterations`
  caps them).
  """
  n = gram.shape[0]
  at = np.ascontiguousarray(np.abs(gram).T)  # at[t, i] = |G_it|.
  at_reversed = np.ascontiguousarray(at[::-1, ::-1])

  def dual(lam):
    left_v, left_c = _penalized_left_maxima(at, b, lam)
    right_v, right_c = _penalized_left_maxima(at_reversed, b, lam[::-1].copy())
    return lam * (k - 1) + left_v + right_v[::-1], left_c + right_c[::-1]

  lo = np.zeros(n)
  f_lo, c_lo = dual(lo)
  hi = at.max(axis=0)  # Nothing is taken at lam = max_j |G_ij|: S = {}.
  f_hi, c_hi = hi * (k - 1), np.zeros(n, dtype=np.int64)
  best = np.minimum(f_lo, f_hi)
  done = c_lo <= k - 1
  for _ in range(iterations):
    if np.all(done):
      break
    s_lo = (k - 1 - c_lo).astype(np.float64)  # < 0 where not done.
    s_hi = (k - 1 - c_hi).astype(np.float64)  # >= 0.
    slope = np.where(done, -1.0, s_lo - s_hi)
    lam = (f_hi - f_lo + s_lo * lo - s_hi * hi) / slope
    lam = np.where(done, lo, np.clip(lam, lo, hi))
    certified = f_lo + s_lo * (lam - lo)  # <= min f_i.
    f, c = dual(lam)
    best = np.minimum(best, f)
    done |= (c == k - 1) | (best - certified <= 1e-12 * best)
    more = c > k - 1
    lo, f_lo, c_lo = (np.where(more, lam, lo), np.where(more, f, f_lo),
                      np.where(more, c, c_lo))
    hi, f_hi, c_hi = (np.where(more, hi, lam), np.where(more, f_hi, f),
                      np.where(more, c_hi, c))
  return np.abs(np.diagonal(gram)) + best


def _row_pattern_maxima(gram: np.ndarray, b: int, k: int) -> np.ndarray:
  """w_i >= max over pi' in Pi(b, k) with i in pi' of sum_{j in pi'} |G_ij|.

  Such a pi' is i plus at most k - 1 rounds, pairwise >= b apart, in
  [0, i - b] and [i + b, n). Exact by `_row_maxima_by_passes` (O(k n^2))
  while its work is at most _MAX_PASS_WORK n^2 entries (k up to ~16, more
  for large b); beyond, by `_row_maxima_by_duality` (O(n^2) per iteration,
  at most _DUAL_ITERATIONS), a bound that is exact or very nearly so.
  Either way every w_i is at least the maximum, which is all that
  `upper_bound_sensitivity` needs.
  """
  n = gram.shape[0]
  if k == 1:
    return np.abs(np.diagonal(gram))
  if _pass_work(n, b, k) <= _MAX_PASS_WORK * n * n:
    return _row_maxima_by_passes(gram, b, k)
  return _row_maxima_by_duality(gram, b, k, _DUAL_ITERATIONS)


def upper_bound_sensitivity(c_matrix: Any, min_sep: int, max_participations: int,
                            *, gram: Any = None) -> float:
  """A valid UPPER bound on sens(C) under Pi(b, k), for any C (any signs).

  Eq. 5 of paper 004: with unit contributions u_i (rows of U) on a pattern
  pi and G = C^T C,

      ||C U||_F^2 = ||sum_{i in pi} C[:, i] u_i^T||_F^2
                  = sum_{i,j in pi} G_ij <u_i, u_j>
                 <= sum_{i,j in pi} |G_ij|                (|<u_i, u_j>| <= 1)
                  = sum_{i in pi} sum_{j in pi} |G_ij|
                 <= sum_{i in pi} w_i,   w_i = max_{pi' in Pi(b, k), i in pi'}
                                               sum_{j in pi'} |G_ij|
                 <= max_{pi in Pi(b, k)} sum_{i in pi} w_i,

  (pi itself is one of the pi' containing i), and the last maximum is the
  O(kn) dynamic program of `banded_sensitivity` over w >= 0. The value
  returned is its square root. All w_i come at once from a dynamic program
  batched over blocks of rows of |G| (`_row_pattern_maxima`: exact,
  O(min(k, n / b) n^2)), or, where that would be slow (large k and n / b),
  from a Lagrangian relaxation of the count (O(n^2) per cutting-plane step,
  at most a few dozen steps; it is never below the w_i and in practice equal
  to them up to 1e-12). About 0.1 s for n = 2052, k = 7 and under a second
  for any k at n = 2052, besides forming C^T C.

  Tightness. For banded C with min_sep >= bands, G_ij = 0 for i != j in one
  pattern, so w_i = ||C[:, i]||^2 and the bound equals the exact
  `banded_sensitivity` (sqrt(k) for C = I). When G >= 0 it is at least the
  exact value of Eq. 6 and may exceed it (each w_i picks its own pi'). It is
  always at least Remark 3.2's lower bound ||C u(pi*)||.

  Args:
    c_matrix: C with one column per round, shape (m, n); or None if `gram`
      is given.
    min_sep: b >= 1.
    max_participations: k >= 1; reduced to ceil(n / b) if larger.
    gram: optional precomputed n x n Gram matrix C^T C instead of c_matrix.

  Returns:
    An upper bound on the sensitivity for clip norm zeta = 1.

  Raises:
    ValueError: invalid arguments (both or neither of c_matrix and gram, a
      non-square or asymmetric gram, a bad schema).
  """
  g, _ = _gram(c_matrix, gram, "upper_bound_sensitivity")
  n = g.shape[0]
  k, _ = feasible_participations(n, min_sep, max_participations)
  b = int(min_sep)
  weights = _row_pattern_maxima(g, b, k)
  return float(np.sqrt(_max_separated_sum(weights, b, k)))


class Certified(NamedTuple):
  """A sensitivity that is a guarantee: `value` >= sens(C) (equal if exact)."""
  value: float
  kind: str  # EXACT or UPPER_BOUND.
  method: str  # METHOD_EXACT_SEARCH or METHOD_UPPER_BOUND.


def certified_sensitivity(c_matrix: Any, min_sep: int, max_participations: int,
                          *, max_patterns: int = DEFAULT_MAX_PATTERNS,
                          gram: Any = None) -> Certified:
  """The best value of sens(C) under Pi(b, k) that is a guarantee, and its kind.

  Exact (kind EXACT, method METHOD_EXACT_SEARCH) by the maximal-pattern
  search of `exact_sensitivity` when the Gram matrix C^T C is elementwise
  non-negative (Eq. 6 of paper 004; same tolerance) and the number of
  maximal patterns, counted first in O(kn), is at most `max_patterns`.
  Otherwise `upper_bound_sensitivity` (kind UPPER_BOUND, method
  METHOD_UPPER_BOUND), valid for any C. Never Remark 3.2's lower bound: the
  value can be used for privacy accounting.

  Args:
    c_matrix: C with one column per round, shape (m, n); or None if `gram`
      is given.
    min_sep: b >= 1.
    max_participations: k >= 1; reduced to ceil(n / b) if larger.
    max_patterns: search exactly only up to this many maximal patterns
      (>= 1; about a second per 5 million).
    gram: optional precomputed n x n Gram matrix C^T C instead of c_matrix.

  Returns:
    Certified(value, kind, method).

  Raises:
    ValueError: invalid arguments (as for exact_sensitivity).
  """
  g, _ = _gram(c_matrix, gram, "certified_sensitivity")
  n = g.shape[0]
  k, _ = feasible_participations(n, min_sep, max_participations)
  b = int(min_sep)
  max_patterns = _checks.check_positive_int("max_patterns", max_patterns)
  if (_gram_is_nonnegative(g) and
      _count_maximal_patterns(n, b, k) <= max_patterns):
    value, _ = _maximal_pattern_search(g, b, k)
    return Certified(float(np.sqrt(max(value, 0.0))), EXACT,
                     METHOD_EXACT_SEARCH)
  return Certified(upper_bound_sensitivity(None, b, k, gram=g), UPPER_BOUND,
                   METHOD_UPPER_BOUND)
