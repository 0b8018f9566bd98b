"""Monte Carlo accounting of b-min-sep sampling for any non-negative lower-triangular C.

b-min-sep sampling (Dong & Ganesh, "Privacy Amplification for BandMF via b-Min-Sep
Subsampling", arXiv 2602.09338, 2026): a client that took part in round t may not take part
in rounds t + 1, ..., t + b - 1; in every round it is eligible for, it is sampled
independently with probability p. b = 1 is Poisson sampling; pure b-min-sep with p = 1 is the
fixed schedule 0, b, 2b, ... (no amplification); the warm start (their Alg. 2: the chain
starts in its stationary law, eligible at round 0 with probability 1 / (1 + (b - 1) p), else
first eligible at a uniform round of 1..b-1) keeps the expected cohort at the stationary
fraction p / (1 + (b - 1) p) of the population from round 0, and with p = 1 it is
balls-in-bins batching (paper 003).

Dominating pair (add/remove adjacency; the worst case puts the same unit vector in every
participation, as in paper 003 App. A for non-negative C): with S ⊂ [n] the client's random
participation pattern (a Markov chain on "rounds until eligible"),
    P = E_S N(C 1_S, σ² I),   Q = N(0, σ² I).
Its likelihood ratio at x, with y = Cᵀx / σ² and G = CᵀC,
    L(x) = E_S exp(Σ_{t∈S} y_t − ½ 1_Sᵀ G 1_S / σ²),
sums over exponentially many patterns. Any two rounds of one pattern are >= b apart, so when
G[s, t] = 0 for |s − t| >= b (C = I, or banded C with at most b bands: BandMF, BSR) the
quadratic form is Σ_{t∈S} G_tt and L is a product over rounds, summed over the chain by a
dynamic program in O(n) (the paper's Sec. 5). For any other C (BLT, TreeAgg, a BandMF with
more bands than b) this module bounds L from both sides, which is exact for the C above and
conservative otherwise (G >= 0 entrywise for non-negative C):
    L_up(x)  = E_S Π_{t∈S} exp(y_t − G_tt / (2σ²))           >= L(x)  (drop the cross terms),
    L_low(x) = E_S Π_{t∈S} exp(y_t − R_t / (2σ²)) <= L(x),   R_t = G_tt + M_t,
M_t the largest Σ_{s∈T} G_ts over sets T of rounds pairwise >= b apart and >= b from t (a
pattern through t has its other rounds in such a set).
Both directions of adjacency are accounted:
    remove: H_{e^ε}(P‖Q) = E_{x~P}[(1 − e^{ε}/L)_+] <= E_{x~P}[(1 − e^{ε − log L_up})_+],
    add:    H_{e^ε}(Q‖P) = E_{x~Q}[(1 − e^{ε} L)_+] <= E_{x~Q}[(1 − e^{ε + log L_low})_+],
and δ(ε) is the larger (dp_accounting does the same for Poisson sampling). Each is estimated
on its own fixed sample (`monte_carlo`'s engine: σ calibrated by root finding with screening,
Alg. 2 of paper 003), and released by Estimate-Verify-Release (paper 003 Alg. 1 / Thm 2.1):
the release happens only if both directions verify.

Device availability (`Availability`): only a client that is checked in can be drawn. Clients
fall into classes by their public windows of rounds (e.g. a time zone's nights), and a client
checks in for a whole window with a secret coin of probability q. For one class the chain runs
with p_t = 0 outside its windows, and each window is the mixture of "checked in" (q: p) and
"not" (1 − q: p_t = 0) — the dynamic program splits its state at the window's first round and
sums the two at its end. Every class is a pair of its own (δ the largest over classes and
directions): for b > 1 lower availability does not simply dominate — a client kept away for b − 1
rounds is surely eligible when it returns.

Notation: n rounds, b = min_sep, p = sampling_probability, u = 1/σ. A sample of the remove
direction is (α, w) with α_t = (G 1_S)_t − G_tt/2 and w = Cᵀ Z, Z ~ N(0, I_n), so that
log a_t = α_t u² + w_t u; one of the add direction is w alone (α_t = −R_t/2 for all).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
from typing import Any, Optional

import numpy as np
import scipy.fft
import scipy.linalg

from dp_fl import _checks
from dp_fl import resources
from dp_fl import root_finding
from dp_fl.accounting import monte_carlo
from dp_fl.accounting import verification
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import sensitivity as sensitivity_lib

REMOVE = "remove"
ADD = "add"
DIRECTIONS = (REMOVE, ADD)

# Rows processed at once: about 10 float64 arrays of chunk x n; by default
# `_CHUNK_ELEMENTS` / n rows (a multiple of the RNG block, at least one block), so that short
# schedules amortize the per-round Python steps of the dynamic program.
DEFAULT_CHUNK_SIZE = None
_CHUNK_ELEMENTS = 2 ** 22


def _chunk_rows(chunk_size: Optional[int], rounds: int) -> int:
  if chunk_size is not None:
    return chunk_size
  block = monte_carlo.RNG_BLOCK
  return max(block, min(64 * block, _CHUNK_ELEMENTS // max(rounds, 1) // block * block))


# The largest n the dense Gram matrix (8 n² bytes, twice) is built for.
MAX_ROUNDS = 12288
# Calibration passes over the sample, for the progress ETA (pilots + screens + verification).
_CALIBRATION_PASSES = 3.0
# Threads of the FFTs (Cᵀz for a Toeplitz C).
_WORKERS = max(1, min(4, os.cpu_count() or 1))
# Rescale the dynamic program's state before it can leave [e^-_SCALE_LOG, e^_SCALE_LOG].
_SCALE_LOG = 230.0


# --------------------------------------------------------------------------------------
# The sampling scheme.


def first_eligible_probabilities(min_sep: int, sampling_probability: float,
                                 warm_start: bool = True) -> np.ndarray:
  """P[a client is first eligible at round j], j = 0..b-1: the chain's stationary law
  (eligible at 0 with probability 1 / (1 + (b − 1) p), else uniform on 1..b-1; their Alg. 2),
  or eligible at 0 (pure, Alg. 1)."""
  b, p = min_sep, sampling_probability
  out = np.zeros(b)
  if not warm_start:
    out[0] = 1.0
    return out
  out[:] = p / (1.0 + (b - 1) * p)
  out[0] = 1.0 / (1.0 + (b - 1) * p)
  return out


def stationary_participation_rate(min_sep: int, sampling_probability: float) -> float:
  """p / (1 + (b − 1) p): the stationary chance of taking part in a round."""
  return sampling_probability / (1.0 + (min_sep - 1) * sampling_probability)


@dataclasses.dataclass(frozen=True, eq=False)
class Availability:
  """When clients can be drawn: public windows of rounds, each open to a client by a coin.

  The device-availability variant of b-min-sep: only checked-in eligible clients can be
  sampled. Clients fall into classes by their public availability pattern (e.g. their time
  zone): row k of `windows` gives, for each round, the index of the availability window
  that round falls in for class k, or -1 when class k cannot check in at all. A client of
  class k checks in for a whole window with probability `window_probability` (q), a coin per
  client and window, independent of everything else and unknown to the adversary; q = 1: a
  client is always there in its windows. The accounting is the worst case over the classes.

  Attributes:
    windows: (K, n) int array (read-only); a window's rounds are consecutive.
    class_sizes: clients in each class (each >= 1).
    window_probability: q in (0, 1].
  """

  windows: np.ndarray
  class_sizes: tuple[int, ...]
  window_probability: float = 1.0

  def __post_init__(self):
    w = np.asarray(self.windows)
    if w.ndim != 2 or w.shape[0] == 0 or w.shape[1] == 0:
      raise ValueError(f"`windows` must be a (classes, rounds) array; got shape {w.shape}.")
    if not np.issubdtype(w.dtype, np.integer) or np.any(w < -1):
      raise ValueError("`windows` must hold window indices >= 0, or -1 where a class cannot "
                       "check in.")
    for k, row in enumerate(w):
      change = np.nonzero(np.diff(row))[0]
      ids = np.concatenate([row[:1], row[change + 1]])
      ids = ids[ids >= 0]
      if np.unique(ids).size != ids.size:
        raise ValueError(f"`windows` row {k}: each window's rounds must be consecutive.")
    sizes = tuple(int(c) for c in self.class_sizes)
    if len(sizes) != w.shape[0] or min(sizes) < 1:
      raise ValueError(f"`class_sizes` must give a positive size for each of the {w.shape[0]} "
                       f"classes; got {self.class_sizes!r}.")
    _checks.check_half_open_unit("window_probability", self.window_probability)
    w = np.array(w, dtype=np.int64)
    w.setflags(write=False)
    object.__setattr__(self, "windows", w)
    object.__setattr__(self, "class_sizes", sizes)

  @property
  def num_classes(self) -> int:
    return int(self.windows.shape[0])

  def segments(self, klass: int) -> list[tuple[int, int, bool]]:
    """Class `klass`'s rounds as runs (start, stop, open): closed runs (-1) and windows."""
    row = self.windows[klass]
    cuts = np.concatenate([[0], np.nonzero(np.diff(row))[0] + 1, [row.size]])
    return [(int(a), int(z), bool(row[a] >= 0)) for a, z in zip(cuts[:-1], cuts[1:])]

  def digest(self) -> str:
    """A short fingerprint of the classes (for cache keys and reports)."""
    h = hashlib.sha256(self.windows.tobytes())
    h.update(repr((self.windows.shape, self.class_sizes, self.window_probability)).encode())
    return h.hexdigest()[:16]

  def to_dict(self) -> dict[str, Any]:
    return {"num_classes": self.num_classes, "class_sizes": list(self.class_sizes),
            "window_probability": self.window_probability,
            "open_rounds": [int(np.count_nonzero(r >= 0)) for r in self.windows],
            "digest": self.digest()}


@dataclasses.dataclass(frozen=True)
class BMinSepSampling:
  """b-min-sep sampling of one client over n rounds (Dong & Ganesh 2026, Alg. 1 / Alg. 2).

  Attributes:
    rounds: n.
    min_sep: b >= 1; after taking part in round t a client is ineligible until t + b.
    sampling_probability: p in (0, 1], the chance an eligible client is sampled.
    warm_start: True: the chain starts in its stationary law (their Alg. 2; the expected
      cohort is the stationary fraction from round 0). False: every client is eligible at
      round 0 (their Alg. 1; round 0's expected cohort is p N).
    availability: None (every eligible client can be drawn), or the public availability
      classes of the device-availability variant (`Availability`); a client is drawn with
      probability p only in the rounds it is eligible and checked in for.
  """

  rounds: int
  min_sep: int
  sampling_probability: float
  warm_start: bool = True
  availability: Optional[Availability] = None

  def __post_init__(self):
    _checks.check_positive_int("rounds", self.rounds)
    _checks.check_positive_int("min_sep", self.min_sep)
    p = _checks.check_positive("sampling_probability", self.sampling_probability)
    if p > 1.0:
      raise ValueError(f"`sampling_probability` must be in (0, 1]; got {p!r}.")
    if not isinstance(self.warm_start, bool):
      raise ValueError(f"`warm_start` must be True or False; got {self.warm_start!r}.")
    if self.availability is not None:
      if not isinstance(self.availability, Availability):
        raise ValueError(f"`availability` must be an Availability or None; got "
                         f"{type(self.availability).__name__}.")
      if self.availability.windows.shape[1] != self.rounds:
        raise ValueError(f"`availability` describes {self.availability.windows.shape[1]} "
                         f"rounds; the sampling has {self.rounds}.")

  @property
  def num_classes(self) -> int:
    """Classes of clients accounted separately (1 without availability)."""
    return 1 if self.availability is None else self.availability.num_classes

  def segments(self, klass: int = 0) -> list[tuple[int, int, bool]]:
    """(start, stop, open) runs of rounds of class `klass` (one open run without
    availability)."""
    if self.availability is None:
      return [(0, self.rounds, True)]
    return self.availability.segments(klass)

  @property
  def window_probability(self) -> float:
    return 1.0 if self.availability is None else self.availability.window_probability

  @functools.cached_property
  def cohort_rates(self) -> np.ndarray:
    """The expected cohort of each round as a fraction of the population (with availability:
    Σ_k |class k| P_k[t ∈ S] / N, `participation_probabilities`; read-only)."""
    if self.availability is None:
      out = np.full(self.rounds, stationary_participation_rate(self.min_sep,
                                                               self.sampling_probability))
    else:
      sizes = np.asarray(self.availability.class_sizes, dtype=np.float64)
      out = sum(size * participation_probabilities(self, k)
                for k, size in enumerate(sizes)) / sizes.sum()
    out.setflags(write=False)
    return out

  @property
  def participation_rate(self) -> float:
    """The chance a client takes part in a round: p / (1 + (b − 1) p) in the stationary
    chain; with availability, the mean over rounds and clients."""
    if self.availability is None:
      return stationary_participation_rate(self.min_sep, self.sampling_probability)
    return float(self.cohort_rates.mean())

  @property
  def peak_participation_rate(self) -> float:
    """The largest expected cohort of a round, as a fraction of the population (the
    stationary rate without availability)."""
    if self.availability is None:
      return self.participation_rate
    return float(self.cohort_rates.max())

  @staticmethod
  def probability_for_rate(rate: float, min_sep: int) -> float:
    """p whose stationary participation rate is `rate` (an expected cohort / population):
    p = r / (1 − (b − 1) r); refused at r >= 1/b, where even p = 1 gives only 1/b."""
    r = _checks.check_positive("participation rate", rate)
    b = _checks.check_positive_int("min_sep", min_sep)
    if r > 1.0 / b * (1.0 + 1e-12):
      raise ValueError(
          f"An expected cohort of {r:.4g} of the population a round is more than b-min-sep "
          f"with --min_sep={b} can give: a client takes part at most once every {b} rounds, "
          f"so at most 1/{b} = {1.0 / b:.4g} of the population a round. Lower "
          "--clients_per_round or --min_sep, or use more clients.")
    return min(1.0, r / (1.0 - (b - 1) * r))

  def initial_wait_probabilities(self) -> np.ndarray:
    """P[the client is first eligible at round j], j = 0..b-1 (warm start: the stationary
    law of the chain; pure: eligible at 0)."""
    return first_eligible_probabilities(self.min_sep, self.sampling_probability,
                                        self.warm_start)

  def sample_patterns(self, generator: np.random.Generator, count: int,
                      klass: int = 0) -> np.ndarray:
    """`count` participation patterns of class `klass`, a bool array (count, n): the chain
    run forward (with availability: a coin per window, drawn after the chain's draws)."""
    n, b, p = self.rounds, self.min_sep, self.sampling_probability
    wait = generator.choice(b, size=count, p=self.initial_wait_probabilities())
    draws = generator.random((n, count)) < p
    if self.availability is not None:
      q = self.window_probability
      for start, stop, is_open in self.segments(klass):
        if not is_open:
          draws[start:stop] = False
        elif q < 1.0:
          draws[start:stop] &= (generator.random(count) < q)[None, :]
    out = np.zeros((n, count), dtype=bool)
    for t in range(n):
      took = (wait == 0) & draws[t]
      out[t] = took
      wait = np.where(took, b - 1, np.maximum(wait - 1, 0))
    return np.ascontiguousarray(out.T)

  def to_dict(self) -> dict[str, Any]:
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    out["availability"] = (None if self.availability is None else
                           self.availability.to_dict())
    out["participation_rate"] = self.participation_rate
    if self.availability is not None:
      out["peak_participation_rate"] = self.peak_participation_rate
    return out


def probability_for_peak_rate(rate: float, rounds: int, min_sep: int, *, warm_start: bool,
                              availability: Availability) -> float:
  """p whose largest expected cohort of a round (`BMinSepSampling.peak_participation_rate`)
  is `rate` of the population: the report goal m is then never exceeded in expectation, and
  the aggregators' fixed denominator m is the busiest round's expected cohort. Refused above
  what p = 1 gives."""
  r = _checks.check_positive("participation rate", rate)

  def peak(p: float) -> float:
    return BMinSepSampling(rounds, min_sep, p, warm_start, availability).peak_participation_rate

  most = peak(1.0)
  if r > most * (1.0 + 1e-9):
    raise ValueError(
        f"An expected cohort of {r:.4g} of the population a round is more than b-min-sep "
        f"with --min_sep={min_sep} can give when only available devices can be drawn: even "
        f"p = 1 gives at most {most:.4g} in any round. Lower --clients_per_round or "
        "--min_sep, use more clients, or --availability=always.")
  if r >= most:
    return 1.0
  return root_finding.brent(lambda p: peak(p) - r, 1e-12, 1.0, xtol=1e-12, rtol=1e-10)


def log_likelihood_ratio(sampling: BMinSepSampling, log_a: np.ndarray,
                         klass: int = 0) -> np.ndarray:
  """log E_S Π_{t∈S} a_t for each row of `log_a` (m, n): the dynamic program over the chain.

  e_t: the weight of the paths eligible at round t; r_t = p e_t a_t: those taking part at t,
  eligible again at t + b; e_{t+1} = (1 − p) e_t + r_{t+1−b} (their Sec. 5). The warm start
  seeds the clients first eligible at j = 1..b-1 as returns at j. The result is the total
  weight after round n − 1 (eligible, or still waiting). Linear arithmetic, rescaled per row
  before it can over- or underflow (the recursion is linear, so a common factor per row
  carries to the end as a log offset).

  With availability (class `klass`): a round the class cannot check in has p_t = 0 (returns
  still arrive); a window whose coin is q < 1 is a mixture, so the state is split at its
  first round into q × (checked in: p) and (1 − q) × (not: p_t = 0) and summed at its end —
  the recursion is linear in the state.
  """
  log_a = np.asarray(log_a, dtype=np.float64)
  m, n = log_a.shape
  if n != sampling.rounds:
    raise ValueError(f"`log_a` must have {sampling.rounds} columns (rounds); got {n}.")
  b, p, coin = sampling.min_sep, sampling.sampling_probability, sampling.window_probability
  if m == 0:
    return np.zeros(0)
  a_t = np.exp(np.clip(log_a.T, -_SCALE_LOG, _SCALE_LOG))  # (n, m); clipped rows redone below
  wild = np.nonzero(np.abs(log_a).max(axis=1) > _SCALE_LOG)[0]
  step_log = max(float(np.abs(log_a).max(initial=0.0)), math.log(2.0))
  every = max(1, min(64, int(_SCALE_LOG / 2.0 / step_log)))
  init = sampling.initial_wait_probabilities()
  e = np.full(m, init[0])
  ring = np.zeros((b, m))  # ring[j mod b]: the weight returning to eligibility at round j.
  ring[1:] = init[1:, None]
  offset = np.zeros(m)
  total = np.ones(m)  # e + Σ ring (+ the unchecked-in branch's): the mass, for rescaling.
  q = 1.0 - p
  for start, stop, is_open in sampling.segments(klass):
    away = None  # The "not checked in" branch of a window with a coin: [e, ring, total].
    if is_open and coin < 1.0:
      away = [e * (1.0 - coin), ring * (1.0 - coin), total * (1.0 - coin)]
      e *= coin
      ring *= coin
      total *= coin
    for t in range(start, stop):
      slot, nxt = t % b, (t + 1) % b
      if is_open:
        r = e * a_t[t]
        r *= p
        total += r
        total -= p * e
        e *= q
        if b == 1:
          e += r
        else:
          e += ring[nxt]
          ring[slot] = r
      elif b > 1:
        e += ring[nxt]
        ring[slot] = 0.0
      if away is not None and b > 1:
        away[0] += away[1][nxt]
        away[1][slot] = 0.0
      if (t + 1) % every == 0 or t == n - 1:
        mass = total if away is None else total + away[2]
        bad = (mass > math.exp(_SCALE_LOG / 2)) | (mass < math.exp(-_SCALE_LOG / 2))
        if np.any(bad):
          idx = np.nonzero(bad)[0]
          states = [(e, ring, total)] + ([tuple(away)] if away is not None else [])
          exact = sum(st[0][idx] + (st[1][:, idx].sum(axis=0) if b > 1 else 0.0)
                      for st in states)
          scale = np.where(exact > 0, exact, 1.0)
          for st_e, st_ring, st_total in states:
            st_total[idx] = (st_e[idx] + (st_ring[:, idx].sum(axis=0) if b > 1 else 0.0)
                             ) / scale
            st_e[idx] /= scale
            if b > 1:
              st_ring[:, idx] /= scale
          offset[idx] += np.log(scale)
    if away is not None:
      e += away[0]
      ring += away[1]
      total += away[2]
  # Returns still pending after the last round: every slot but n mod b, whose return (at
  # round n) is in e — participations in rounds n-b+1..n-1, and warm-start returns after
  # round n when n < b (all scaled with e).
  pending = ring.sum(axis=0) - ring[n % b] if b > 1 else 0.0
  with np.errstate(divide="ignore"):
    out = np.log(e + pending) + offset
  if wild.size:
    out[wild] = _log_likelihood_ratio_logspace(sampling, log_a[wild], klass)
  return out


def _log_likelihood_ratio_logspace(sampling: BMinSepSampling, log_a: np.ndarray,
                                   klass: int = 0) -> np.ndarray:
  """`log_likelihood_ratio` in log arithmetic (slow; rows with |log a_t| > _SCALE_LOG)."""
  m, n = log_a.shape
  b, p, coin = sampling.min_sep, sampling.sampling_probability, sampling.window_probability
  with np.errstate(divide="ignore"):
    init = np.log(sampling.initial_wait_probabilities())
    log_p, log_q = math.log(p), (math.log1p(-p) if p < 1.0 else -math.inf)
    log_in, log_out = math.log(coin), (math.log1p(-coin) if coin < 1.0 else -math.inf)
  e = np.full(m, init[0])
  ring = np.full((b, m), -math.inf)
  ring[1:] = init[1:, None]
  for start, stop, is_open in sampling.segments(klass):
    away = None
    if is_open and coin < 1.0:
      away = [e + log_out, ring + log_out]
      e, ring = e + log_in, ring + log_in
    for t in range(start, stop):
      slot, nxt = t % b, (t + 1) % b
      if is_open:
        r = e + log_a[:, t] + log_p
        if b == 1:
          e = np.logaddexp(e + log_q, r)
        else:
          e = np.logaddexp(e + log_q, ring[nxt])
          ring[slot] = r
      elif b > 1:
        e = np.logaddexp(e, ring[nxt])
        ring[slot] = -math.inf
      if away is not None and b > 1:
        away[0] = np.logaddexp(away[0], away[1][nxt])
        away[1][slot] = -math.inf
    if away is not None:
      e, ring = np.logaddexp(e, away[0]), np.logaddexp(ring, away[1])
  terms = [e] + [ring[j] for j in range(b) if b > 1 and j != n % b]
  return np.logaddexp.reduce(np.stack(terms), axis=0)


def participation_probabilities(sampling: BMinSepSampling, klass: int = 0) -> np.ndarray:
  """P[t ∈ S] for each round t (class `klass`): E_S Π a_t with a = 2 at t alone is 1 + P[t ∈ S],
  so one dynamic program over n rows (O(n²)) gives them all exactly."""
  n = sampling.rounds
  out = np.empty(n)
  for lo in range(0, n, 1024):
    hi = min(n, lo + 1024)
    log_a = np.zeros((hi - lo, n))
    log_a[np.arange(hi - lo), np.arange(lo, hi)] = math.log(2.0)
    out[lo:hi] = np.expm1(log_likelihood_ratio(sampling, log_a, klass))
  return np.clip(out, 0.0, 1.0)


# --------------------------------------------------------------------------------------
# The dominating pair.


def _dense(matrix: Any, toeplitz_coefs: Any, n: int) -> tuple[np.ndarray, Optional[np.ndarray]]:
  if (matrix is None) == (toeplitz_coefs is None):
    raise ValueError("Give exactly one of `matrix` (dense lower-triangular C) and "
                     "`toeplitz_coefs` (c_0, c_1, ... of a Toeplitz C).")
  if toeplitz_coefs is not None:
    c = _checks.check_finite_array("toeplitz_coefs", toeplitz_coefs, ndim=1)
    coefs = np.zeros(n)
    coefs[:min(n, c.size)] = c[:n]
    if np.any(coefs < 0):
      raise ValueError("`toeplitz_coefs` must be non-negative (the dominating pair needs a "
                       f"non-negative C); got a minimum of {coefs.min()!r}.")
    return scipy.linalg.toeplitz(coefs, np.zeros(n)), coefs
  c = _checks.check_lower_triangular("matrix", matrix)
  if c.shape != (n, n):
    raise ValueError(f"`matrix` must be n x n = {n} x {n} for {n} rounds; got {c.shape}.")
  if np.any(c < 0):
    raise ValueError("`matrix` must be non-negative (the dominating pair needs a non-negative "
                     f"C); got a minimum entry of {c.min()!r}.")
  return np.array(c, dtype=np.float64), None


def _cross_bound(gram: np.ndarray, b: int) -> np.ndarray:
  """M_t = max over sets T of rounds pairwise >= b apart and >= b from t of Σ_{s∈T} G_ts.

  For any pattern S ∋ t, S without t is such a set, so 1_Sᵀ G 1_S <= Σ_{t∈S} (G_tt + M_t) (G >= 0).
  The two sides of t are independent: best[t, s] = max(best[t, s-1], G_ts + best[t, s-b]) over
  s <= t - b (the weights of the rounds allowed), and the same from the right; O(n²).
  """
  n = gram.shape[0]
  t = np.arange(n)
  out = np.zeros(n)
  for weights in (gram, gram[::-1, ::-1]):  # Left side; then the right side, reversed.
    allowed = np.where(t[None, :] <= t[:, None] - b, weights, 0.0)
    best = np.zeros((n, n + b))  # best[:, b + s]: the best set within rounds 0..s.
    for s in range(n):
      np.maximum(best[:, b + s - 1], allowed[:, s] + best[:, s], out=best[:, b + s])
    side = best[t, t]  # Rounds 0..t-b: column b + (t - b) (zeros while t < b).
    out += side if weights is gram else side[::-1]
  return out


@dataclasses.dataclass(frozen=True, eq=False)
class BMinSepPair:
  """The dominating pair above for one C and one b-min-sep sampling.

  Attributes:
    sampling: the scheme.
    matrix: C (n x n, read-only).
    toeplitz_coefs: c_0..c_{n-1} when C is Toeplitz (Cᵀz by FFT), else None.
    gram: G = CᵀC (read-only).
    column_norms_squared: G_tt.
    cross_bound: M_t of `_cross_bound` per t (0 for every t: the likelihood ratio is exact).
    unamplified_sensitivity: max ||C 1_S|| over patterns of at most ⌈n/b⌉ rounds b apart
      (a guarantee: exact or an upper bound), the min-sep sensitivity without amplification.
  """

  sampling: BMinSepSampling
  matrix: np.ndarray
  toeplitz_coefs: Optional[np.ndarray]
  gram: np.ndarray
  column_norms_squared: np.ndarray
  cross_bound: np.ndarray
  unamplified_sensitivity: float

  @property
  def exact(self) -> bool:
    """True when no two rounds b apart share a row of C: L_up = L = L_low."""
    return bool(np.all(self.cross_bound <= 1e-12 * max(1.0, self.column_norms_squared.max())))

  @property
  def sensitivity(self) -> float:
    """The unamplified min-sep sensitivity (the Gaussian bound beside the amplified one)."""
    return self.unamplified_sensitivity

  @property
  def num_rounds(self) -> int:
    return self.sampling.rounds


def dominating_pair(sampling: BMinSepSampling, *, matrix: Any = None, toeplitz_coefs: Any = None,
                    unamplified_sensitivity: Optional[float] = None) -> BMinSepPair:
  """The pair of the module doc for C (dense `matrix` or `toeplitz_coefs`, zero-padded or cut
  to n) under `sampling`; `unamplified_sensitivity` (default: certified from G, exact when
  the patterns can be searched) is the min-sep sensitivity of the same C."""
  if not isinstance(sampling, BMinSepSampling):
    raise ValueError(f"`sampling` must be a BMinSepSampling; got {type(sampling).__name__}.")
  n, b = sampling.rounds, sampling.min_sep
  if n > MAX_ROUNDS:
    raise ValueError(
        f"b-min-sep Monte Carlo accounting builds the {n} x {n} Gram matrix of C; at most "
        f"{MAX_ROUNDS} rounds are supported (got {n}).")
  c, coefs = _dense(matrix, toeplitz_coefs, n)
  if not np.any(c):
    raise ValueError("C must have at least one non-zero entry.")
  gram = c.T @ c
  diag = np.diag(gram).copy()
  cross = _cross_bound(gram, b)
  if unamplified_sensitivity is None:
    k = sensitivity_lib.participation_cap(n, b)
    unamplified_sensitivity = sensitivity_lib.certified_sensitivity(
        None, b, k, gram=gram).value
  sens = _checks.check_positive("unamplified_sensitivity", unamplified_sensitivity)
  for a in (c, gram, diag, cross) + ((coefs,) if coefs is not None else ()):
    a.setflags(write=False)
  return BMinSepPair(sampling=sampling, matrix=c, toeplitz_coefs=coefs, gram=gram,
                     column_norms_squared=diag, cross_bound=cross,
                     unamplified_sensitivity=float(sens))


def monte_carlo_cost(rounds: int, num_samples: int,
                     chunk_size: Optional[int] = DEFAULT_CHUNK_SIZE,
                     num_classes: int = 1) -> resources.Estimate:
  """Memory and time of calibrating and verifying (both directions, each availability class).

  Memory: C and G (16 n² bytes), about 10 chunk x n float64 arrays, and the screened rows
  (`monte_carlo.MAX_STORED_CHUNKS` chunks of 2 n floats). Time: measured ~1.2e-8 s per
  sample and round per pass (0.25 s per 1024 samples at n = 2052, a Toeplitz C, 2 cores),
  `_CALIBRATION_PASSES` passes a direction and class.
  """
  n, m = int(rounds), int(num_samples)
  chunk_size = _chunk_rows(chunk_size, n)
  memory = 16.0 * n * n + (10.0 + 2.0 * monte_carlo.MAX_STORED_CHUNKS) * 8.0 * chunk_size * n
  seconds = 1.2e-7 * m * n * _CALIBRATION_PASSES * 2.0 * int(num_classes)
  return resources.Estimate(f"b-min-sep Monte Carlo accounting ({n} rounds, {m} samples"
                            + (f", {num_classes} availability classes)" if num_classes > 1
                               else ")"),
                            memory, seconds, "16 n² + ~18 chunk n float64, ~7e-7 m n s")


# --------------------------------------------------------------------------------------
# The loss models (one per direction).


@dataclasses.dataclass(frozen=True)
class Tilt:
  """Importance sampling of the noise (defensive exponential tilting), for estimates.

  Remove direction: given the pattern S (mean m_S = C 1_S, μ_S = ‖m_S‖ / σ_ref), half the
  samples (a fair coin each) draw their noise as Z' = Z + θ_S m_S / ‖m_S‖ with θ_S = `scale` ·
  max(ε/μ_S − μ_S/2, 0), the tail boundary of the pattern's own Gaussian privacy loss; the
  other half are plain. Add direction: Z' = Z − θ v/‖v‖, v = C 1, θ = `scale`. Each sample
  is weighted by φ(Z') / (½ φ(Z') + ½ φ(Z' − shift)) <= 2, so every estimate stays unbiased
  for any σ (the weights do not depend on σ) and its variance is at most twice plain Monte
  Carlo's, however poor the tilt. Estimate-Verify-Release never tilts (its Chernoff bound
  needs summands in [0, 1]).
  """
  scale: float = 0.0
  epsilon: float = 1.0
  reference_noise_multiplier: float = 1.0


_NO_TILT = Tilt()


class _Model(monte_carlo.LossModel):
  """Samples of one direction: remove (x ~ P, L_up) or add (x ~ Q, L_low), optionally tilted
  (`Tilt`); a prepared row is (α, Cᵀx-part w, log weight) for remove, (w, log weight) for
  add."""

  def __init__(self, pair: BMinSepPair, direction: str, tilt: Tilt = _NO_TILT,
               klass: int = 0):
    if direction not in DIRECTIONS:
      raise ValueError(f"`direction` must be one of {DIRECTIONS}; got {direction!r}.")
    self.pair = pair
    self.direction = direction
    self.klass = klass
    self.sampling = pair.sampling
    self.tilt = tilt
    n = self.num_columns = pair.sampling.rounds
    if pair.toeplitz_coefs is not None:
      self._fft_size = scipy.fft.next_fast_len(2 * n - 1, real=True)
      self._coefs_fft = scipy.fft.rfft(pair.toeplitz_coefs, self._fft_size)
    self._half_diag = 0.5 * pair.column_norms_squared
    self._add_alpha = -0.5 * (pair.column_norms_squared + pair.cross_bound)
    ones_gram = pair.gram.sum(axis=1)  # G 1 = Cᵀ v, v = C 1; ‖v‖² = 1ᵀ G 1.
    self._ones_norm = math.sqrt(max(float(ones_gram.sum()), 1e-300))
    self._add_shift = ones_gram / self._ones_norm

  def draw(self, generator, count):
    n = self.num_columns
    rows: tuple = ()
    if self.direction == REMOVE:
      rows = (self.sampling.sample_patterns(generator, count, self.klass),)
    rows += (generator.standard_normal((count, n)),)
    if self.tilt.scale:  # Defensive mixture: half the samples tilted.
      rows += (generator.random(count) < 0.5,)
    return rows

  @staticmethod
  def _mixture_log_weight(theta: np.ndarray, along: np.ndarray,
                          tilted: np.ndarray) -> np.ndarray:
    """log φ(Z') / (½ φ(Z') + ½ φ(Z' − θd)) with Z' = Z + θd where `tilted`, ⟨d, Z⟩ =
    `along`: at most log 2, so no sample weighs more than twice its plain weight."""
    along_used = along + theta * tilted
    return -np.logaddexp(0.0, theta * along_used - 0.5 * theta ** 2) + math.log(2.0)

  def _transpose_apply(self, z: np.ndarray) -> np.ndarray:
    """Cᵀ z for each row z (rows @ C)."""
    if self.pair.toeplitz_coefs is None:
      return z @ self.pair.matrix
    n = self.num_columns
    reversed_z = scipy.fft.rfft(z[:, ::-1], self._fft_size, axis=1, workers=_WORKERS)
    reversed_z *= self._coefs_fft
    return scipy.fft.irfft(reversed_z, self._fft_size, axis=1,
                           workers=_WORKERS)[:, :n][:, ::-1]

  def prepare(self, rows):
    if self.direction == REMOVE:
      patterns, z = rows[0], rows[1]
      gram_s = self._gram_times(patterns)
      w = self._transpose_apply(z)
      log_weight = np.zeros(z.shape[0])
      if self.tilt.scale:
        tilted = rows[2]
        patterns = patterns.astype(np.float64)
        norm2 = np.einsum("ij,ij->i", patterns, gram_s)  # ‖C 1_S‖² = 1_Sᵀ G 1_S.
        norm = np.sqrt(norm2)
        mu = norm / self.tilt.reference_noise_multiplier
        with np.errstate(divide="ignore", invalid="ignore"):
          theta = np.where(norm > 0, self.tilt.scale * np.maximum(
              self.tilt.epsilon / mu - mu / 2.0, 0.0), 0.0)
          along = np.where(norm > 0, np.einsum("ij,ij->i", patterns, w) / norm, 0.0)
          # Cᵀ(θ m_S/‖m_S‖) on the tilted half.
          w += np.where((norm > 0) & tilted, theta / norm, 0.0)[:, None] * gram_s
        log_weight = self._mixture_log_weight(theta, along, tilted)
      gram_s -= self._half_diag
      return gram_s, w, log_weight
    z = rows[0]
    w = self._transpose_apply(z)
    theta = self.tilt.scale
    log_weight = np.zeros(z.shape[0])
    if theta:  # d = −v/‖v‖: ⟨d, Z⟩ = −⟨1, CᵀZ⟩/‖v‖, Cᵀ(θ d) = −θ G1/‖v‖.
      tilted = rows[1]
      along = -w.sum(axis=1) / self._ones_norm
      log_weight = self._mixture_log_weight(np.full(z.shape[0], theta), along, tilted)
      w -= np.where(tilted, theta, 0.0)[:, None] * self._add_shift
    return w, log_weight

  def _gram_times(self, patterns: np.ndarray) -> np.ndarray:
    """G 1_S for each row's pattern: a sum of the rows of G it took part in (at most
    ⌈n/b⌉ of them), or a dense product when patterns are long."""
    counts = patterns.sum(axis=1)
    most = int(counts.max(initial=0))
    if most > 64:
      return patterns.astype(np.float64) @ self.pair.gram
    out = np.zeros(patterns.shape)
    rows, cols = np.nonzero(patterns)  # Row-major: each row's rounds in order.
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(rows.size) - starts[rows]
    for j in range(most):
      pick = rank == j
      out[rows[pick]] += self.pair.gram[cols[pick]]
    return out

  def _log_a(self, rows, u: float) -> np.ndarray:
    if self.direction == REMOVE:
      alpha, w = rows[0], rows[1]
      log_a = alpha * (u * u)
    else:
      w = rows[0]
      log_a = np.broadcast_to(self._add_alpha * (u * u), w.shape).copy()
    log_a += w * u
    return log_a

  def losses(self, rows, u: float) -> np.ndarray:
    """Y: log L_up (remove) or log L_low (add) of each row at σ = 1/u."""
    return log_likelihood_ratio(self.sampling, self._log_a(rows, u), self.klass)

  def _f(self, y: np.ndarray, eps: float) -> np.ndarray:
    if self.direction == REMOVE:
      return -np.expm1(np.minimum(eps - y, 0.0))
    return -np.expm1(np.minimum(eps + y, 0.0))

  def stats(self, rows, u, eps, derivative=False):
    weight = np.exp(rows[-1])
    f = self._f(self.losses(rows, u), eps)
    fw = f * weight
    out = monte_carlo.Stats(sum_f=float(fw.sum()), sum_f2=float(np.dot(fw, fw)),
                            num_tail=int(np.count_nonzero(f)))
    if derivative and out.num_tail:
      h = 1e-4  # df/dσ by a central difference in σ on the same rows.
      up = np.dot(self._f(self.losses(rows, u / (1.0 + h)), eps), weight)
      down = np.dot(self._f(self.losses(rows, u / (1.0 - h)), eps), weight)
      out.sum_df = float((up - down) / (2.0 * h / u))
    return out

  def screen(self, rows, u_lo, u_hi, eps):
    """L is non-decreasing in every a_t, and each log a_t = α_t u² + w_t u lies between its
    values' min and max over u in [u_lo, u_hi] (separately for the two terms)."""
    if self.direction == REMOVE:
      alpha, w = rows[0], rows[1]
      quad = np.where(alpha >= 0, alpha * u_hi**2, alpha * u_lo**2)
      bound = quad + np.maximum(w * u_lo, w * u_hi)
      return log_likelihood_ratio(self.sampling, bound, self.klass) > eps
    w = rows[0]
    quad = np.where(self._add_alpha >= 0, self._add_alpha * u_lo**2, self._add_alpha * u_hi**2)
    bound = quad + np.minimum(w * u_lo, w * u_hi)
    return log_likelihood_ratio(self.sampling, bound, self.klass) < -eps


# --------------------------------------------------------------------------------------
# Estimates, calibration and Estimate-Verify-Release.


@dataclasses.dataclass(frozen=True)
class DirectionEstimate:
  """δ̂ of one direction at (σ, ε)."""
  direction: str
  delta_hat: float
  standard_error: float
  num_samples: int
  num_tail_samples: int


@dataclasses.dataclass(frozen=True)
class DeltaEstimate:
  """δ̂(σ, ε) = max over the directions (each on its own sample)."""
  epsilon: float
  noise_multiplier: float
  remove: DirectionEstimate
  add: DirectionEstimate

  @property
  def delta_hat(self) -> float:
    return max(self.remove.delta_hat, self.add.delta_hat)

  @property
  def worse(self) -> DirectionEstimate:
    return self.remove if self.remove.delta_hat >= self.add.delta_hat else self.add


def _components(pair: BMinSepPair) -> list[tuple[int, str]]:
  """(class, direction) of every pair accounted: δ is the largest of their δs."""
  return [(k, d) for k in range(pair.sampling.num_classes) for d in DIRECTIONS]


def _label(pair: BMinSepPair, component: tuple[int, str]) -> str:
  klass, direction = component
  return direction if pair.sampling.num_classes == 1 else f"{direction}:class{klass}"


def _component_seeds(seed: monte_carlo.SeedLike,
                     num_classes: int) -> dict[tuple[int, str], np.random.SeedSequence]:
  """An independent stream per (class, direction); class 0's are those of a sampling
  without availability classes (so its records reproduce)."""
  root = monte_carlo.root_seed(seed)
  return {(k, d): np.random.SeedSequence(
      root.entropy, spawn_key=tuple(root.spawn_key) + ((i,) if k == 0 else (i, k)))
          for k in range(num_classes) for i, d in enumerate(DIRECTIONS)}


def _stream(pair, component, seed, chunk_size, progress=None,
            tilt: Tilt = _NO_TILT) -> monte_carlo.SampleStream:
  klass, direction = component
  return monte_carlo.SampleStream(
      _Model(pair, direction, tilt, klass), seed,
      monte_carlo.check_chunk_size(_chunk_rows(chunk_size, pair.sampling.rounds)), progress)


# Tilt scales tried by `choose_tilt` (remove: × the pattern's tail boundary; add: θ itself).
_TILT_CANDIDATES = {REMOVE: (0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0),
                    ADD: (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)}
_PILOT_SAMPLES = 8192


def choose_tilt(pair: BMinSepPair, direction: str, *, epsilon: float, noise_multiplier: float,
                seed: monte_carlo.SeedLike, pilot_samples: int = _PILOT_SAMPLES,
                klass: int = 0) -> Tilt:
  """The `Tilt` of the smallest relative standard error of δ̂ at (σ, ε) on a pilot sample
  (at least 10 tail samples; no tilt when none qualifies)."""
  best, best_rse = _NO_TILT, math.inf
  for scale in _TILT_CANDIDATES[direction]:
    tilt = Tilt(scale, epsilon, noise_multiplier)
    stats = monte_carlo.streaming_stats(
        _stream(pair, (klass, direction), seed, min(_chunk_rows(None, pair.sampling.rounds),
                                           pilot_samples), tilt=tilt),
        pilot_samples, noise_multiplier, epsilon)
    mean, se = stats.mean_and_se(pilot_samples)
    if stats.num_tail >= 10 and mean > 0 and se / mean < best_rse:
      best, best_rse = tilt, se / mean
  return best


def estimate_delta(pair: BMinSepPair, *, noise_multiplier: float, epsilon: float,
                   num_samples: int, seed: monte_carlo.SeedLike,
                   chunk_size: Optional[int] = DEFAULT_CHUNK_SIZE,
                   importance_sampling: bool = False) -> DeltaEstimate:
  """δ̂ of both directions at (σ, ε) from `num_samples` samples each (with availability
  classes: each direction's worst class); with `importance_sampling`, of a tilted sample
  (`choose_tilt`; an estimate, never a release)."""
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  eps = _checks.check_positive("epsilon", epsilon)
  m = _checks.check_positive_int("num_samples", num_samples)
  seeds = _component_seeds(seed, pair.sampling.num_classes)
  out = {}
  for c in _components(pair):
    klass, d = c
    tilt = (choose_tilt(pair, d, epsilon=eps, noise_multiplier=sigma, seed=seeds[c],
                        klass=klass) if importance_sampling else _NO_TILT)
    stats = monte_carlo.streaming_stats(
        _stream(pair, c, seeds[c], chunk_size, tilt=tilt), m, sigma, eps)
    mean, se = stats.mean_and_se(m)
    if d not in out or mean > out[d].delta_hat:
      out[d] = DirectionEstimate(d, mean, se, m, stats.num_tail)
  return DeltaEstimate(eps, sigma, out[REMOVE], out[ADD])


def unamplified_noise_multiplier(pair: BMinSepPair, *, epsilon: float, delta: float) -> float:
  """σ for (ε, δ) without amplification: the Gaussian mechanism at the min-sep sensitivity."""
  return zcdp.noise_multiplier_for_epsilon(pair.sensitivity, epsilon, delta)


def calibrate_noise_multiplier(pair: BMinSepPair, *, epsilon: float, delta: float,
                               num_samples: int, seed: monte_carlo.SeedLike,
                               chunk_size: Optional[int] = DEFAULT_CHUNK_SIZE, rtol: float = 1e-6,
                               importance_sampling: bool = True,
                               relative_standard_error: float = 0.05
                               ) -> monte_carlo.Calibration:
  """Alg. 2 of paper 003 on each direction's pair: σ_d solving δ̂_d(σ) = δ; σ = max_d σ_d
  (with availability classes, the largest over every class and direction).

  With `importance_sampling` (the default) the sample is tilted towards the tail (`Tilt`,
  chosen on a pilot at the unamplified σ, then again at the σ found) and sized sequentially:
  from 2^15 samples, doubled until δ̂(σ*)'s relative standard error is at most
  `relative_standard_error` or `num_samples` is reached (the default 5 %: four standard
  errors are then the release's default calibration margin, 20 %). The result is an
  estimate: a release verifies it on a fresh, untilted sample (`estimate_verify_release`).
  """
  eps = _checks.check_positive("epsilon", epsilon)
  dlt = _checks.check_open_unit("delta", delta)
  m_max = _checks.check_positive_int("num_samples", num_samples)
  if not importance_sampling and m_max * dlt < 1.0:
    raise ValueError(
        f"`num_samples` must be at least 1/delta = {1.0 / dlt:.4g} for a Monte Carlo estimate "
        f"of delta = {dlt!r}; got {m_max}. Use num_samples >= {int(100.0 / dlt)} (about "
        "100/delta) or a larger delta.")
  components = _components(pair)
  progress = resources.Progress(
      f"b-min-sep Monte Carlo calibration of σ (up to {m_max} samples x {len(components)})",
      len(components) * _CALIBRATION_PASSES * (
          min(m_max, 2 ** 18) if importance_sampling else m_max))
  seeds = _component_seeds(seed, pair.sampling.num_classes)
  sigma_unamp = unamplified_noise_multiplier(pair, epsilon=eps, delta=dlt)
  results, passes, used = {}, 0.0, 0
  for c in components:
    klass, d = c
    label = _label(pair, c)
    if noiseless_delta(pair, d, eps, klass) <= dlt:  # This component holds at any σ.
      results[label] = dict(noise_multiplier=0.0, delta_hat=0.0, delta_standard_error=0.0,
                        noise_multiplier_standard_error=0.0, num_tail_samples=0,
                        tilt_scale=0.0, num_samples=0)
      continue
    sigma, tilt = sigma_unamp, _NO_TILT
    m = m_max if not importance_sampling else min(m_max, 2 ** 15)
    for attempt in range(64):
      if importance_sampling and attempt < 2:  # Tilt for the σ at hand (twice at most).
        tilt = choose_tilt(pair, d, epsilon=eps, noise_multiplier=sigma, seed=seeds[c],
                           klass=klass)
      # The sample grows as needed: keep the ETA's total ahead of what is left.
      progress.total = max(progress.total, progress.done + _CALIBRATION_PASSES * m * (
          2 if d == REMOVE else 1))
      stream = _stream(pair, c, seeds[c], chunk_size, progress, tilt)
      sigma, ev = monte_carlo.solve(stream, m, eps, dlt, sigma, rtol)
      passes += ev.passes * m / m_max
      stats = ev.stats(sigma, derivative=True)
      mean, se = stats.mean_and_se(m)
      precise = mean > 0 and se / mean <= relative_standard_error and attempt >= 1
      if not importance_sampling or m >= m_max or precise:
        break
      if attempt >= 1:
        m = min(m_max, 2 * m)
    slope = abs(stats.sum_df / m)
    used = max(used, m)
    results[label] = dict(noise_multiplier=float(sigma), delta_hat=mean, delta_standard_error=se,
                      noise_multiplier_standard_error=se / slope if slope > 0 else math.inf,
                      num_tail_samples=stats.num_tail, tilt_scale=tilt.scale, num_samples=m)
  progress.finish()
  if all(r["noise_multiplier"] == 0.0 for r in results.values()):
    chance = max(1.0 - math.exp(_log_never(pair.sampling, k))
                 for k in range(pair.sampling.num_classes))
    raise ValueError(
        f"Under this b-min-sep sampling a client takes part with probability "
        f"{chance:.3g} at all, which is (ε = {eps:g}, δ = "
        f"{dlt:g})-DP without any noise; raise the sampling probability or the rounds, or "
        "lower δ.")
  worst = max(results, key=lambda k: results[k]["noise_multiplier"])
  r = results[worst]
  return monte_carlo.Calibration(
      noise_multiplier=r["noise_multiplier"], epsilon=eps, delta=dlt, delta_hat=r["delta_hat"],
      delta_standard_error=r["delta_standard_error"],
      noise_multiplier_standard_error=r["noise_multiplier_standard_error"],
      num_samples=r["num_samples"], num_tail_samples=r["num_tail_samples"],
      unamplified_noise_multiplier=sigma_unamp, num_passes=passes, direction=worst,
      by_direction=results)


def _log_never(sampling: BMinSepSampling, klass: int = 0) -> float:
  """log P[S = ∅]: the client never takes part."""
  return float(_log_likelihood_ratio_logspace(sampling, np.full((1, sampling.rounds), -1e6),
                                             klass)[0])


def noiseless_delta(pair: BMinSepPair, direction: str, epsilon: float, klass: int = 0) -> float:
  """The limit of a direction's δ(ε) as σ → 0 (class `klass`): P[S ≠ ∅] (remove) and
  (1 − e^ε P[S = ∅])_+ (add, since P >= P[S = ∅] Q). When it is at most δ the direction
  needs no noise."""
  never = math.exp(_log_never(pair.sampling, klass))
  if direction == REMOVE:
    return 1.0 - never
  return max(0.0, 1.0 - math.exp(epsilon) * never)


def epsilon_tails(pair: BMinSepPair, *, noise_multiplier: float, num_samples: int,
                  seed: monte_carlo.SeedLike, chunk_size: Optional[int] = DEFAULT_CHUNK_SIZE
                  ) -> list[np.ndarray]:
  """The positive privacy losses at σ of each (class, direction)'s sample (log L_up under P;
  −log L_low under Q), for `monte_carlo.epsilon_on_tails`: ε for a given σ on fixed samples."""
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  m = _checks.check_positive_int("num_samples", num_samples)
  components = _components(pair)
  progress = resources.Progress(f"b-min-sep Monte Carlo ε ({m} samples x {len(components)})",
                                len(components) * m)
  seeds = _component_seeds(seed, pair.sampling.num_classes)
  out = []
  for c in components:
    sign = 1.0 if c[1] == REMOVE else -1.0
    stream = _stream(pair, c, seeds[c], chunk_size, progress)
    parts = []
    for rows in stream.chunks(m):
      v = sign * stream.model.losses(rows, 1.0 / sigma)
      parts.append(v[v > 0.0])
    out.append(np.concatenate(parts))
  progress.finish()
  return out


def calibrate_epsilon(pair: BMinSepPair, *, noise_multiplier: float, delta: float,
                      num_samples: int, seed: monte_carlo.SeedLike,
                      chunk_size: Optional[int] = DEFAULT_CHUNK_SIZE) -> tuple[float, float, float]:
  """(ε*, δ̂(ε*), its standard error): the smallest ε with max_d δ̂_d(ε) <= δ on the
  samples at σ."""
  d = _checks.check_open_unit("delta", delta)
  tails = epsilon_tails(pair, noise_multiplier=noise_multiplier, num_samples=num_samples,
                        seed=seed, chunk_size=chunk_size)
  upper = zcdp.matrix_mechanism_guarantee(pair.sensitivity, noise_multiplier, d).epsilon
  return monte_carlo.epsilon_on_tails(tails, num_samples, d, upper)


def estimate_verify_release(pair: BMinSepPair, *, noise_multiplier: float, epsilon: float,
                            delta: float, seed: monte_carlo.SeedLike,
                            delta_verify: float | None = None, num_samples: int | None = None,
                            chunk_size: Optional[int] = DEFAULT_CHUNK_SIZE,
                            workers: Optional[int] = None
                            ) -> verification.VerificationResult:
  """Alg. 1 of paper 003 on both directions (and every availability class), each on a fresh
  sample of `num_samples` (default and minimum: what Thm 2.1 needs): verified iff every δ̂ <=
  δ_verify (a component whose δ is at most δ_verify at every σ, `noiseless_delta`, needs no
  sample). Were the true δ(ε) of any one client's pair above δ, its own check would pass
  with probability at most the Chernoff bound, and the release needs every check to pass, so
  the release is (ε, δ)-DP for every client. The result reports the worst component. Long
  samples are summed by `workers` processes (default: the CPUs available)."""
  sigma, eps, d, dv, need, m = verification.check_verification(
      noise_multiplier, epsilon, delta, delta_verify, num_samples)
  # A component whose δ at any σ is at most δ_verify (`noiseless_delta`: exact, not sampled)
  # verifies without a sample.
  components = _components(pair)
  sampled = [c for c in components if noiseless_delta(pair, c[1], eps, c[0]) > dv]
  progress = resources.Progress(
      f"b-min-sep Monte Carlo verification ({m} samples x {len(sampled)})", len(sampled) * m)
  seeds = _component_seeds(seed, pair.sampling.num_classes)
  found = {}
  for c in components:
    if c not in sampled:
      found[c] = (monte_carlo.Stats(), noiseless_delta(pair, c[1], eps, c[0]), 0.0)
      continue
    stats = monte_carlo.streaming_stats(
        _stream(pair, c, seeds[c], chunk_size, progress), m, sigma, eps,
        workers=monte_carlo.default_workers() if workers is None else workers)
    found[c] = (stats, *stats.mean_and_se(m))
    if found[c][1] > dv:
      break  # Fails already: the others cannot make it pass.
  progress.finish()
  worst = max(found, key=lambda k: found[k][1])
  stats, mean, se = found[worst]
  return verification.VerificationResult(
      verified=bool(all(v[1] <= dv for v in found.values()) and len(found) == len(components)),
      epsilon=eps, delta=d, delta_verify=dv, noise_multiplier=sigma, delta_hat=mean,
      standard_error=se, num_tail_samples=stats.num_tail, num_samples=m,
      required_num_samples=need,
      failure_probability=verification.verification_failure_probability(m, dv, d))
