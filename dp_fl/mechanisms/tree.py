"""Binary-tree aggregation (TreeAgg) as a matrix factorization, paper 004 Sec. 2.3.

Notation (paper 004): A is the n x n lower-triangular matrix of ones and
A = B C. For TreeAgg the rows of C are the nodes of a binary tree over the n
rounds (leaves): row v of C is the 0/1 indicator of the rounds below node v,
so C X holds every node's partial sum and Z adds one independent Gaussian per
node. Participation follows the min-separation schema Pi(b, k): a user takes
part in at most k rounds, pairwise at least b = `min_sep` rounds apart.

Three matrices live here (rounds are 0-based, intervals half-open):

* `binary_tree_matrix(n, complete=False)`, the *restricted* tree: one row per
  dyadic interval [j 2^l, (j + 1) 2^l) contained in [0, n). It has
  sum_l floor(n / 2^l) rows (2n - 1 when n is a power of two; 4102 for
  n = 2052, the tree behind paper 004's TreeAgg-Full numbers, Table 3). This
  is also the tree of Kairouz et al.'s accountant (Appendix D of
  arXiv:2103.00039, whose recursion splits n into its largest power of two
  and the rest); Table 4's id-ID TreeAgg rho is its exact sensitivity (see
  `tree_sensitivity`).
* `binary_tree_matrix(n, complete=True)`, the *completed* tree: the tree over
  2^L leaves, L = ceil(log2 n), i.e. the recursion C^1 = [1],
  C^l = [[C^{l-1}, 0], [0, C^{l-1}], [1, 1]] of Sec. 2.3, with its columns
  restricted to [0, n) and every node whose interval meets [0, n) kept
  (sum_{l=0}^{L} ceil(n / 2^l) rows; 4112 for n = 2052). Its rows are a
  superset of the restricted tree's (the "tree completion" of Remark 3.2).
* `online_tree_matrix(n)`: online TreeAgg (Kairouz et al. 2021; the noise of
  `dp_fl.aggregators.noise.TreeNoise` and `streaming.TreeStreamingNoise`),
  the square lower-triangular C whose row t is the node completed at round t.

Rows of both trees are ordered level by level, leaves first, and left to
right within a level (see `tree_nodes`). For n = 5::

    restricted (8 x 5)      completed (11 x 5, extra rows marked *)
    level 0: 1 0 0 0 0      level 0: the same five leaves
             0 1 0 0 0      level 1: 1 1 0 0 0
             0 0 1 0 0               0 0 1 1 0
             0 0 0 1 0               0 0 0 0 1  *  ([4, 6) meets [0, 5))
             0 0 0 0 1      level 2: 1 1 1 1 0
    level 1: 1 1 0 0 0               0 0 0 0 1  *  ([4, 8))
             0 0 1 1 0      level 3: 1 1 1 1 1  *  ([0, 8))
    level 2: 1 1 1 1 0

Decoding. Online TreeAgg uses the binary counter (B = A C^{-1} for the online
C, B selects the dyadic decomposition of each prefix); TreeAgg-Full uses the
optimal linear decoding B = A C^+ with the Moore-Penrose pseudo-inverse of
the whole tree (Sec. 2.3, "full variance reduction").

Sensitivity. Every tree C is 0/1, so C^T C >= 0 entrywise and the worst case
over Pi(b, k) is attained by 0/1 participation vectors u(pi):

    sens_Pi(C)^2 = max_{pi in Pi(b, k)} ||C u(pi)||^2
                 = max_pi sum_{nodes v} (number of participations below v)^2.

`tree_sensitivity` computes this maximum exactly with a dynamic program over
the tree (`exact_tree_sensitivity`) when its work fits a budget, and otherwise
returns paper 004's Remark 3.2 lower bound ||C u(pi*)||,
pi* = (0, b, ..., (k - 1) b) (Eq. 7-8), flagged as a lower bound.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Iterable, Optional

import numpy as np
import scipy.linalg

from dp_fl import _checks
from dp_fl.mechanisms import sensitivity

MECHANISM_NAME = "tree"

# Sensitivity kinds and methods, as reported by `tree_sensitivity`.
EXACT = "exact"
LOWER_BOUND = "lower_bound"
METHOD_EXACT = "exact (dynamic program over the tree)"
METHOD_LOWER_BOUND = "Remark 3.2 lower bound ||C u(pi*)||"

# Default work budget of the exact dynamic program, in state transitions
# (about 1-2 microseconds each): a few seconds at most.
DEFAULT_MAX_WORK = 2_000_000


# ---------------------------------------------------------------------------
# Tree structure.


def _check_bool(name: str, value: object) -> bool:
  if not isinstance(value, (bool, np.bool_)):
    raise ValueError(f"`{name}` must be True or False; got {value!r}.")
  return bool(value)


def num_levels(n: int, complete: bool = False) -> int:
  """Number of tree levels (leaves are level 0).

  Restricted tree: levels 0..floor(log2 n) (the largest dyadic interval
  inside [0, n) has length 2^floor(log2 n)). Completed tree: levels
  0..ceil(log2 n).
  """
  n = _checks.check_positive_int("n", n)
  complete = _check_bool("complete", complete)
  top = (n - 1).bit_length() if complete else n.bit_length() - 1
  return top + 1


def _node_exists(n: int, complete: bool, level: int, index: int) -> bool:
  """Whether the dyadic node [index 2^level, (index + 1) 2^level) is in the tree."""
  if complete:
    return index << level < n
  return (index + 1) << level <= n


def _level_sizes(n: int, complete: bool) -> list[int]:
  """Number of nodes on each level, leaves first."""
  levels = num_levels(n, complete)
  if complete:
    return [-(-n // (1 << l)) for l in range(levels)]
  return [n >> l for l in range(levels)]


def num_nodes(n: int, complete: bool = False) -> int:
  """Rows of `binary_tree_matrix(n, complete)`.

  sum_l floor(n / 2^l) for the restricted tree (2n - 1 for a power of two,
  4102 for n = 2052) and sum_{l <= ceil(log2 n)} ceil(n / 2^l) for the
  completed tree.
  """
  return sum(_level_sizes(n, complete))


def tree_nodes(n: int, complete: bool = False) -> np.ndarray:
  """(num_nodes, 3) int array of (level, start, stop), in row order of C.

  Node (l, start, stop) covers rounds [start, stop) (0-based, half-open);
  start = j 2^l, and stop = min((j + 1) 2^l, n) (the column restriction only
  shortens nodes of the completed tree). Order: level by level from the leaves
  (l = 0) up, left to right within a level.
  """
  n = _checks.check_positive_int("n", n)
  complete = _check_bool("complete", complete)
  rows = []
  for level, size in enumerate(_level_sizes(n, complete)):
    starts = np.arange(size, dtype=np.int64) << level
    stops = np.minimum(starts + (1 << level), n)
    rows.append(np.stack([np.full(size, level, dtype=np.int64), starts, stops], axis=1))
  return np.concatenate(rows, axis=0)


def binary_tree_matrix(n: int, complete: bool = False) -> np.ndarray:
  """C of TreeAgg (paper 004, Sec. 2.3): (num_nodes, n) 0/1 float matrix.

  Row v is the indicator of the rounds below tree node v, rows ordered as in
  `tree_nodes`. complete=False: the restricted tree (dyadic intervals inside
  [0, n); 4102 rows for n = 2052). complete=True: the tree over
  2^ceil(log2 n) leaves (the recursion C^l of Sec. 2.3) with columns
  restricted to [0, n), keeping every node that meets [0, n). See the module
  docstring for a drawing.
  """
  nodes = tree_nodes(n, complete)
  cols = np.arange(n)
  return ((cols[None, :] >= nodes[:, 1:2]) & (cols[None, :] < nodes[:, 2:3])).astype(
      np.float64)


def online_tree_matrix(n: int) -> np.ndarray:
  """C of online TreeAgg (Kairouz et al. 2021): (n, n) lower-triangular 0/1.

  Row t (0-based) is the tree node completed at round t: the indicator of
  rounds (t + 1 - 2^v, t + 1] in 1-based terms, i.e. [t + 1 - 2^v, t] 0-based,
  where v is the number of trailing zero bits of t + 1. This is the
  convention of `dp_fl.aggregators.noise.TreeNoise` (the node gets the round's
  fresh Gaussian z_t, and (C^{-1} Z)_t is the round's noise). The diagonal is
  one, B = A C^{-1} is the binary counter (row t selects the popcount(t + 1)
  nodes of the dyadic decomposition of [0, t]), and every row is a row of
  both `binary_tree_matrix` variants, so ||C_online u|| <= ||C_tree u|| for
  every u and the tree's sensitivity bounds the online tree's.
  """
  n = _checks.check_positive_int("n", n)
  out = np.zeros((n, n))
  for t in range(n):
    count = t + 1
    width = count & -count  # 2^v, v = trailing zero bits of t + 1.
    out[t, count - width:count] = 1.0
  return out


def tree_gram(n: int, complete: bool = False) -> np.ndarray:
  """C^T C of `binary_tree_matrix(n, complete)`, built node by node.

  Entry (i, j) counts the tree nodes containing both rounds i and j. The leaves
  make C^T C = I + (PSD), so its eigenvalues are >= 1.
  """
  n = _checks.check_positive_int("n", n)
  gram = np.zeros((n, n))
  for _, start, stop in tree_nodes(n, complete):
    gram[start:stop, start:stop] += 1.0
  return gram


# ---------------------------------------------------------------------------
# Errors (paper 004, Sec. 3.2).


def per_query_squared_error(n: int, full: bool, complete: bool = False) -> np.ndarray:
  """Squared prefix-sum error of each round, sum_j B[t, j]^2, shape (n,).

  full=False: online TreeAgg with the binary counter, B = A C^{-1} for
  `online_tree_matrix(n)`: prefix [0, t] is the sum of popcount(t + 1) nodes,
  each with unit-variance noise, so the error is popcount(t + 1) (`complete`
  does not matter: the counter never uses the other nodes).

  full=True: TreeAgg-Full (Sec. 2.3, the full variance reduction of Honaker
  [22]) on `binary_tree_matrix(n, complete)` with the optimal decoding
  B = A C^+. As C has full column rank, C^+ = (C^T C)^{-1} C^T and the squared
  row norms of B are diag(A (C^T C)^{-1} A^T). With C^T C = L L^T (Cholesky),
  that is the squared column norms of L^{-1} A^T, and the columns of
  L^{-1} A^T are cumulative sums of the columns of L^{-1} (column t of A^T is
  the indicator of [0, t]). O(n^3 / 3); about a second for n = 2052.

  MaxError and RmsError (Sec. 3.2) are sqrt(max) and sqrt(mean) of this.
  """
  n = _checks.check_positive_int("n", n)
  full = _check_bool("full", full)
  complete = _check_bool("complete", complete)
  if not full:
    counts = np.arange(1, n + 1, dtype=np.int64)
    bits = np.zeros(n, dtype=np.int64)
    while np.any(counts):
      bits += counts & 1
      counts >>= 1
    return bits.astype(np.float64)
  chol = scipy.linalg.cholesky(tree_gram(n, complete), lower=True)
  chol_inv = scipy.linalg.solve_triangular(chol, np.eye(n), lower=True)
  decoded = np.cumsum(chol_inv, axis=1)  # L^{-1} A^T.
  return np.einsum("ij,ij->j", decoded, decoded)


# ---------------------------------------------------------------------------
# Sensitivity under Pi(b, k).


def participation_square_norm(n: int, rounds: Iterable[int], complete: bool = False) -> int:
  """||C u||^2 for C = `binary_tree_matrix(n, complete)` and u the indicator of `rounds`.

  Equals sum over tree nodes of (number of `rounds` below the node)^2, computed
  level by level without forming C. `rounds` are distinct 0-based rounds.
  """
  n = _checks.check_positive_int("n", n)
  pos = np.asarray(sorted(int(r) for r in rounds), dtype=np.int64)
  if pos.size and (pos[0] < 0 or pos[-1] >= n):
    raise ValueError(f"`rounds` must lie in [0, n) = [0, {n}); got {pos.tolist()}.")
  if np.any(np.diff(pos) == 0):
    raise ValueError(f"`rounds` must be distinct; got {pos.tolist()}.")
  total = 0
  for level in range(num_levels(n, complete)):
    index, counts = np.unique(pos >> level, return_counts=True)
    for j, c in zip(index.tolist(), counts.tolist()):
      if _node_exists(n, complete, level, j):
        total += c * c
  return total


def tree_sensitivity_lower_bound(n: int, min_sep: int, max_participations: int,
                                 complete: bool = False) -> float:
  """Paper 004, Remark 3.2 (Eq. 8): ||C u(pi*)||, pi* = (0, b, ..., (k - 1) b) (Eq. 7).

  A valid *lower* bound on sens_Pi(C); the true sensitivity may be larger.
  k is reduced to ceil(n / b) first.
  """
  k, _ = sensitivity.feasible_participations(n, min_sep, max_participations)
  return math.sqrt(participation_square_norm(n, range(0, k * min_sep, min_sep), complete))


class _BudgetExceeded(Exception):
  pass


@functools.lru_cache(maxsize=256)
def _cached_square_sum(n: int, b: int, k: int, complete: bool,
                       max_work: float) -> Optional[int]:
  """`_exact_square_sum`, memoized; None when it ran past `max_work`."""
  try:
    return _exact_square_sum(n, b, k, complete, max_work)
  except _BudgetExceeded:
    return None


def _exact_square_sum(n: int, b: int, k: int, complete: bool, max_work: int) -> int:
  """max over Pi(b, k) of ||C u(pi)||^2 for the tree C; raises _BudgetExceeded.

  Dynamic program over the tree (the idea of Kairouz et al.'s accountant,
  arXiv:2103.00039 App. D, organized differently so that its state does not
  grow with b):

  1. Blocks. Let w = 2^l0 be the largest power of two <= b (and <= the tree's
     top level). Tree nodes of level <= l0 lie inside one block
     [beta w, (beta + 1) w); as w <= b, a block holds at most one
     participation, so each such node holds at most one and contributes
     1 per participation below it: d_low(p) nodes for a participation at p,
     which is l0 + 1 for every round of a full block (only the last, partial
     block of the restricted tree varies). Nodes above level l0 are the
     nodes of a coarse tree whose leaves are the blocks.
  2. Greedy positions. For a fixed increasing sequence of blocks the coarse
     nodes' counts, hence the objective outside the partial block, do not
     depend on where inside its block each participation sits; feasibility is
     best served by the earliest positions p_1 = start(beta_1),
     p_{i+1} = max(start(beta_{i+1}), p_i + b), which are <= any feasible
     choice. So it suffices to search block sequences with greedy positions,
     taking the best d_low over [p_m, n) when the last block is partial.
  3. Chain DP over block sequences, left to right. Adding a participation in
     block beta' after one at e (block beta) adds, for each tree node v above
     it, (c_v + 1)^2 - c_v^2 = 2 c_v + 1, where c_v is nonzero only on the
     common coarse ancestors of beta and beta' (nodes of the coarse tree on
     the path above their lowest common ancestor). The state is therefore
     (e, counts of the coarse ancestors of e's block), with the largest value
     kept, and states dominated within their block are dropped (`_prune`).
     The answer is the largest value over all layers m = 1..k.

  Cost. The program stops with _BudgetExceeded as soon as it has made more
  than `max_work` transitions (deterministic, roughly 1.5 microseconds each),
  and before starting when its second layer alone, about (number of
  blocks)^2 / 2 transitions, would exceed it. Paper 004's cases take a few
  hundred transitions; e.g. n = 4096, b = 64, k = 64 takes about 0.6 s.
  """
  if b == 1 and k == n:
    # Every round participates; u(pi) <= 1 entrywise and C >= 0, so this is the max.
    return participation_square_norm(n, range(n), complete)
  levels = num_levels(n, complete)
  l0 = min(b.bit_length() - 1, levels - 1)
  num_blocks = -(-n // (1 << l0))
  if k >= 2 and num_blocks * (num_blocks - 1) // 2 > max_work:
    raise _BudgetExceeded()
  blocks = _Blocks.of(n, complete, levels, l0)
  work = num_blocks
  layer = blocks.first_layer()
  best = max(layer.values())
  for _ in range(2, k + 1):
    nxt, work = blocks.next_layer(layer, b, work, max_work)
    if not nxt:
      break
    best = max(best, max(nxt.values()))
    layer = _prune(nxt, l0)
  return best


@dataclasses.dataclass(frozen=True)
class _Blocks:
  """Steps 1 and 3 of `_exact_square_sum`: blocks of w = 2^l0 rounds under the coarse tree.

  present[beta]: how many of block beta's coarse ancestors (levels l0 + 1, ...) are tree
  nodes (a prefix of the coarse levels: a node's descendants are nodes too); last_low[i]:
  the largest d_low over [last_start + i, n) for the last, possibly partial, block.
  """
  n: int
  l0: int
  num_blocks: int
  depth: int
  present: tuple[int, ...]
  last_low: tuple[int, ...]

  @classmethod
  def of(cls, n: int, complete: bool, levels: int, l0: int) -> "_Blocks":
    num_blocks = -(-n // (1 << l0))
    coarse = list(range(l0 + 1, levels))  # Levels above the blocks.

    def d_low(p: int) -> int:
      return sum(1 for l in range(l0 + 1) if _node_exists(n, complete, l, p >> l))

    last_low = [d_low(p) for p in range(((num_blocks - 1) << l0), n)]
    for i in range(len(last_low) - 2, -1, -1):
      last_low[i] = max(last_low[i], last_low[i + 1])
    present = [sum(1 for l in coarse if _node_exists(n, complete, l, beta >> (l - l0)))
               for beta in range(num_blocks)]
    return cls(n, l0, num_blocks, len(coarse), tuple(present), tuple(last_low))

  def low(self, block: int, p: int) -> int:
    """Tree nodes of level <= l0 above a participation at p in `block` (the best over
    [p, n) in the last block, where positions are free)."""
    if block == self.num_blocks - 1:
      return self.last_low[p - ((self.num_blocks - 1) << self.l0)]
    return self.l0 + 1

  def first_layer(self) -> dict[tuple[int, tuple[int, ...]], int]:
    """Layer m = 1: one participation at the start of a block."""
    layer = {}
    for beta in range(self.num_blocks):
      counts = (1,) * self.present[beta] + (0,) * (self.depth - self.present[beta])
      layer[(beta << self.l0, counts)] = self.low(beta, beta << self.l0) + self.present[beta]
    return layer

  def next_layer(self, layer: dict, b: int, work: int, max_work: float
                 ) -> tuple[dict[tuple[int, tuple[int, ...]], int], int]:
    """(layer m + 1, work so far) from layer m: one more participation, at the greedy
    position of every later block; raises _BudgetExceeded past `max_work` transitions."""
    w, depth = 1 << self.l0, self.depth
    nxt: dict[tuple[int, tuple[int, ...]], int] = {}
    for (e, counts), value in layer.items():
      beta = e >> self.l0
      first = max(beta + 1, (e + b) >> self.l0)
      work += self.num_blocks - first
      if work > max_work:
        raise _BudgetExceeded()
      cum = [0]
      for c in counts:
        cum.append(cum[-1] + c)
      for beta2 in range(first, self.num_blocks):
        p = max(beta2 * w, e + b)
        if p >= self.n:
          break
        # Coarse index i (level l0 + 1 + i) holds a common ancestor of blocks
        # beta and beta2 iff i >= shared; those nodes already hold counts[i].
        shared = (beta ^ beta2).bit_length() - 1
        top_present = self.present[beta2]
        gain = value + self.low(beta2, p) + top_present
        if shared < top_present:
          gain += 2 * (cum[top_present] - cum[shared])
          new_counts = ((1,) * shared + tuple(c + 1 for c in counts[shared:top_present]) +
                        (0,) * (depth - top_present))
        else:
          new_counts = (1,) * top_present + (0,) * (depth - top_present)
        key = (p, new_counts)
        if nxt.get(key, -1) < gain:
          nxt[key] = gain
    return nxt, work


def _prune(layer: dict, l0: int) -> dict:
  """Drops states dominated by another state in the same block.

  (e, counts) with value v is dominated by (e', counts') in the same block with
  e' <= e, v' >= v and counts' >= counts entrywise: every continuation of the
  former is feasible for the latter (its positions only depend on e) and gains
  at least as much (each gain is a sum of 2 c + 1 over nodes whose counts c
  are at least as large).
  """
  groups: dict[int, list[tuple[int, int, tuple[int, ...]]]] = {}
  for (e, counts), value in layer.items():
    groups.setdefault(e >> l0, []).append((e, -value, counts))
  out = {}
  for items in groups.values():
    items.sort()  # By e, then by decreasing value.
    kept: list[tuple[int, tuple[int, ...]]] = []
    for e, neg_value, counts in items:
      value = -neg_value
      if any(v >= value and all(a >= c for a, c in zip(cs, counts)) for v, cs in kept):
        continue
      kept.append((value, counts))
      out[(e, counts)] = value
  return out


def _square_sum_within(n, min_sep, max_participations, complete, max_work):
  """Validated (n, b, k, complete) and the exact max sum of squares, None over budget."""
  n = _checks.check_positive_int("n", n)
  b = _checks.check_positive_int("min_sep", min_sep)
  k, _ = sensitivity.feasible_participations(n, b, max_participations)
  complete = _check_bool("complete", complete)
  budget = math.inf if max_work is None else _checks.check_positive_int("max_work",
                                                                          max_work)
  return n, b, k, complete, _cached_square_sum(n, b, k, complete, budget)


def exact_tree_sensitivity(n: int, min_sep: int, max_participations: int,
                           complete: bool = False,
                           max_work: Optional[int] = DEFAULT_MAX_WORK) -> float:
  """sens_Pi(C) = max over Pi(b, k) of ||C u(pi)|| for C = `binary_tree_matrix(n, complete)`.

  Exact (see `_exact_square_sum` for the dynamic program and why it is exact);
  C is 0/1 so C^T C >= 0 and 0/1 participation vectors attain the maximum
  (paper 004, Sec. 3.1). k is reduced to ceil(n / b). Raises ValueError when
  the program would need more than `max_work` transitions (None: no limit).
  """
  n, b, k, complete, square_sum = _square_sum_within(n, min_sep, max_participations,
                                                     complete, max_work)
  if square_sum is None:
    raise ValueError(
        f"`max_work`={max_work} is too small for the exact tree sensitivity at n={n}, "
        f"min_sep={b}, max_participations={k}; raise it (or pass None), or use "
        f"`tree_sensitivity`, which falls back to the Remark 3.2 lower bound.")
  return math.sqrt(square_sum)


def tree_sensitivity(n: int, min_sep: int, max_participations: int, complete: bool = False,
                     max_work: Optional[int] = DEFAULT_MAX_WORK) -> tuple[float, str, str]:
  """(sens, kind, method) of the TreeAgg C under Pi(b, k) (paper 004, Sec. 3.1).

  kind is EXACT ("exact") with method METHOD_EXACT when the dynamic program
  of `exact_tree_sensitivity` fits in `max_work` transitions (paper 004's
  cases take milliseconds), and LOWER_BOUND ("lower_bound") with method
  METHOD_LOWER_BOUND otherwise: Remark 3.2's ||C u(pi*)||, which is *not* a
  valid upper bound for accounting. k above ceil(n / b) is reduced to it.
  Results are memoized.

  Paper 004's cases (sens^2, exact / Remark 3.2 lower bound):

    n = 2052, b = 342, k = 6 (Table 3): restricted 118 / 118, completed
      154 / 154. With the restricted tree, TreeAgg-Full's RmsLoss and MaxLoss
      are 12.47 and 14.98, Table 3's numbers (printed in swapped columns).
    n = 2350, b = 437, k = 5 (Table 4, id-ID TreeAgg, sigma = 7): restricted
      92 / 90, completed 117 / 115. The printed rho = sens^2 / (2 sigma^2) =
      0.94 is the exact restricted-tree value (92 / 98); the lower bound
      would give 0.92.

  The online tree (`online_tree_matrix`) keeps a subset of these rows, so its
  sensitivity is at most the value returned for complete=False.
  """
  n, b, k, complete, square_sum = _square_sum_within(n, min_sep, max_participations,
                                                     complete, max_work)
  if square_sum is None:
    return tree_sensitivity_lower_bound(n, b, k, complete), LOWER_BOUND, METHOD_LOWER_BOUND
  return math.sqrt(square_sum), EXACT, METHOD_EXACT
