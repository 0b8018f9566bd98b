"""Empirical privacy estimation from canary scores (issue #41): the one-shot estimate and the
one-run lower bound.

Andrew et al. 2023, "One-shot Empirical Privacy Estimation for Federated Learning" (arXiv
2302.03098): K canary clients each contribute a secret random unit direction; the score of a
canary is the cosine between its direction and the released model delta. The scores of the
canaries that took part ("seen") and of those that did not ("unseen") are two samples whose
distributions a membership test must tell apart; fitting a Gaussian to each, the one-shot
estimate is the ε(δ) of that pair of Gaussians (Sec. 3, "estimate ε of the fitted
distributions"). With the closed-form null (Sec. 4) the unseen side is the exact distribution of
the cosine between a fixed vector and a uniformly random unit vector in R^d — mean 0, variance
1/d, (1 + t)/2 ~ Beta((d − 1)/2, (d − 1)/2) — which for d ≥ 1000 is N(0, 1/d) to within
sampling error of any audit (its excess kurtosis is −6/(d + 2)).

The one-run audit (Steinke, Nasr and Jagielski 2023, arXiv 2305.08846) turns the same scores
into a *lower bound* on ε at a stated confidence: each canary's secret fair coin decided whether
it took part, and guessing the coins from the scores better than the (ε, δ) claim allows refutes
the claim (`one_run_lower_bound`). A lower bound above the accounted ε means a bug in the
analysis or the implementation. For a mechanism whose privacy curve is Gaussian (μ-GDP: the
Gaussian matrix mechanism) the stronger claim "μ-GDP with the μ of (ε, δ)" can be tested
instead (Mahloujifar, Melis and Chaudhuri 2024, arXiv 2410.22235: the f-DP one-run audit,
`trade_off=GAUSSIAN`), which refutes far more: 128 perfectly separated canaries certify
ε ≥ 6.2 against 3.2 for the (ε, δ) claim (δ = 1e-5, 95 %).

The one-shot estimate is an estimate, not a bound: the accounted ε is the guarantee.
`gaussian_pair_epsilon` is exact
(no sampling): the hockey-stick divergence between two Gaussians, whose privacy loss is a
quadratic in the output, both directions.

TFF-free (numpy / scipy).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Sequence

import numpy as np
from scipy import special
from scipy import stats

from dp_fl import _checks
from dp_fl import root_finding
from dp_fl.accounting import zcdp

# The closed-form null is used as N(0, 1/d) from this dimension on (see the module doc).
MIN_GAUSSIAN_NULL_DIMENSION = 1000


def _log_mass(mean: float, std: float, lo: float, hi: float) -> float:
  """log P[lo < Y < hi] for Y ~ N(mean, std²), stable in both tails (lo < hi, ±inf allowed)."""
  a, b = (lo - mean) / std, (hi - mean) / std
  if a > 0.0:  # Both in the upper tail: by symmetry, as lower-tail masses.
    a, b = -b, -a
  log_hi, log_lo = special.log_ndtr(b), special.log_ndtr(a)
  if log_lo == -math.inf:
    return float(log_hi)
  if log_hi <= log_lo:
    return -math.inf
  return float(log_hi + math.log1p(-math.exp(log_lo - log_hi)))


def _loss_region(mean_p: float, std_p: float, mean_q: float, std_q: float,
                 epsilon: float) -> list[tuple[float, float]]:
  """The outputs y where log p(y)/q(y) > ε, as disjoint intervals (p = N(mean_p, std_p²))."""
  a = 0.5 / std_q ** 2 - 0.5 / std_p ** 2
  b = mean_p / std_p ** 2 - mean_q / std_q ** 2
  c = 0.5 * (mean_q / std_q) ** 2 - 0.5 * (mean_p / std_p) ** 2 + math.log(std_q / std_p)
  c -= epsilon  # The region: a y² + b y + c > 0.
  if a == 0.0:
    if b == 0.0:
      return [(-math.inf, math.inf)] if c > 0.0 else []
    root = -c / b
    return [(root, math.inf)] if b > 0.0 else [(-math.inf, root)]
  disc = b * b - 4.0 * a * c
  if disc <= 0.0:
    return [(-math.inf, math.inf)] if a > 0.0 else []
  sqrt_disc = math.sqrt(disc)
  # Roots without cancellation (the larger-magnitude one first).
  q = -0.5 * (b + math.copysign(sqrt_disc, b))
  r1, r2 = sorted((q / a, c / q if q != 0.0 else -q / a))
  if a > 0.0:
    return [(-math.inf, r1), (r2, math.inf)]
  return [(r1, r2)]


def _log_delta(mean_p: float, std_p: float, mean_q: float, std_q: float,
               epsilon: float) -> float:
  """log of the hockey-stick divergence sup_S P(S) − e^ε Q(S) (−inf when it is 0)."""
  region = _loss_region(mean_p, std_p, mean_q, std_q, epsilon)
  if not region:
    return -math.inf
  log_p = special.logsumexp([_log_mass(mean_p, std_p, lo, hi) for lo, hi in region])
  log_q = special.logsumexp([_log_mass(mean_q, std_q, lo, hi) for lo, hi in region])
  if log_p == -math.inf:
    return -math.inf
  gap = epsilon + log_q - log_p
  if gap >= 0.0:
    return -math.inf
  return float(log_p + math.log1p(-math.exp(gap)))


def gaussian_pair_delta(mean_a: float, std_a: float, mean_b: float, std_b: float,
                        epsilon: float) -> float:
  """δ(ε) of the pair N(mean_a, std_a²), N(mean_b, std_b²): the larger hockey-stick divergence
  of the two directions (the pair is (ε, δ)-indistinguishable iff δ ≥ this)."""
  args = [_checks.check_finite(n, v) for n, v in
          (("mean_a", mean_a), ("std_a", std_a), ("mean_b", mean_b), ("std_b", std_b))]
  for name, std in (("std_a", args[1]), ("std_b", args[3])):
    if std <= 0.0:
      raise ValueError(f"`{name}` must be > 0; got {std!r}.")
  eps = _checks.check_finite("epsilon", epsilon)
  if eps < 0.0:
    raise ValueError(f"`epsilon` must be >= 0; got {epsilon!r}.")
  ma, sa, mb, sb = args
  return math.exp(max(_log_delta(ma, sa, mb, sb, eps), _log_delta(mb, sb, ma, sa, eps)))


def gaussian_pair_epsilon(mean_a: float, std_a: float, mean_b: float, std_b: float,
                          delta: float) -> float:
  """The smallest ε ≥ 0 with `gaussian_pair_delta(...) <= delta` (δ(ε) is non-increasing).

  Equal standard deviations give the Gaussian mechanism with sensitivity |Δmean| / std
  (Balle and Wang 2018, Thm. 8); unequal ones the exact curve of the quadratic privacy loss.
  """
  d = _checks.check_delta(delta)
  log_d = math.log(d)

  def excess(eps: float) -> float:
    return math.log(max(gaussian_pair_delta(mean_a, std_a, mean_b, std_b, eps), 1e-300)) - log_d

  if excess(0.0) <= 0.0:
    return 0.0
  lo, hi = root_finding.expand_up(lambda eps: excess(eps) > 0.0, 0.0, 1.0, limit=1e6)
  return root_finding.brent(excess, lo, hi, xtol=1e-12, rtol=1e-10)


@dataclasses.dataclass(frozen=True)
class OneShotEstimate:
  """The one-shot estimate (Andrew et al. 2023) and the fits it came from.

  Attributes:
    epsilon: ε at `delta` of the fitted pair (an estimate, not a guarantee).
    delta: δ.
    seen_mean, seen_std: the Gaussian fitted to the seen canaries' cosines.
    unseen_mean, unseen_std: the unseen side: fitted (`null` "empirical") or the closed-form
      null N(0, 1/d) (`null` "closed_form").
    num_seen, num_unseen: the sample sizes (0 unseen with the closed-form null).
    null: "empirical" or "closed_form".
    dimension: d (closed-form null only).
  """
  epsilon: float
  delta: float
  seen_mean: float
  seen_std: float
  unseen_mean: float
  unseen_std: float
  num_seen: int
  num_unseen: int
  null: str
  dimension: int | None = None


def _scores(name: str, values: Sequence[float]) -> np.ndarray:
  x = _checks.check_finite_array(name, np.asarray(values, dtype=np.float64), ndim=1)
  if x.size < 2:
    raise ValueError(f"`{name}` needs at least 2 canary scores to fit a Gaussian; got "
                     f"{x.size}. Use more canaries (--audit_canaries).")
  if not np.all(np.abs(x) <= 1.0 + 1e-9):
    raise ValueError(f"`{name}` must be cosines in [-1, 1]; got values up to "
                     f"{float(np.max(np.abs(x)))!r}.")
  if float(np.std(x, ddof=1)) == 0.0:
    raise ValueError(f"`{name}` are all equal ({float(x[0])!r}): no spread to fit.")
  return x


def one_shot_epsilon(seen: Sequence[float], unseen: Sequence[float],
                     delta: float) -> OneShotEstimate:
  """ε from Gaussians fitted to the seen and the unseen canaries' cosines (Sec. 3)."""
  s, u = _scores("seen", seen), _scores("unseen", unseen)
  fit = dict(seen_mean=float(np.mean(s)), seen_std=float(np.std(s, ddof=1)),
             unseen_mean=float(np.mean(u)), unseen_std=float(np.std(u, ddof=1)))
  eps = gaussian_pair_epsilon(fit["seen_mean"], fit["seen_std"], fit["unseen_mean"],
                              fit["unseen_std"], delta)
  return OneShotEstimate(epsilon=eps, delta=delta, num_seen=s.size, num_unseen=u.size,
                         null="empirical", **fit)


def one_shot_epsilon_closed_form_null(seen: Sequence[float], dimension: int,
                                      delta: float) -> OneShotEstimate:
  """ε from the seen canaries' Gaussian fit against the closed-form null N(0, 1/d) (Sec. 4).

  Refused below d = `MIN_GAUSSIAN_NULL_DIMENSION`, where the Gaussian form of the null is not
  the exact one; use `one_shot_epsilon` with unseen canaries there.
  """
  d = _checks.check_positive_int("dimension", dimension)
  if d < MIN_GAUSSIAN_NULL_DIMENSION:
    raise ValueError(
        f"`dimension` = {d}: the closed-form null is used as N(0, 1/d) only from d = "
        f"{MIN_GAUSSIAN_NULL_DIMENSION} on; for a smaller model use the unseen canaries "
        "(`one_shot_epsilon`).")
  s = _scores("seen", seen)
  mean, std = float(np.mean(s)), float(np.std(s, ddof=1))
  eps = gaussian_pair_epsilon(mean, std, 0.0, d ** -0.5, delta)
  return OneShotEstimate(epsilon=eps, delta=delta, seen_mean=mean, seen_std=std,
                         unseen_mean=0.0, unseen_std=d ** -0.5, num_seen=s.size,
                         num_unseen=0, null="closed_form", dimension=d)


@functools.lru_cache(maxsize=64)
def one_shot_noise_floor(num_seen: int, num_unseen: int, delta: float,
                         closed_form_null: bool = False, quantile: float = 0.95,
                         trials: int = 400) -> float:
  """The `quantile` of the one-shot estimate when the seen and unseen canaries' scores come
  from one distribution (nothing leaks): what sampling error alone makes the estimate say
  with this many canaries. An estimate below it is indistinguishable from no leakage. With
  very few canaries it can be unbounded (a trial whose fitted pair's ε exceeds 1e6 counts
  as ∞).

  The estimate is invariant to an affine change of the scores, so both samples are drawn
  N(0, s²) (s = 1e-3, inside the cosines' range); with `closed_form_null` the seen ones
  against N(0, s²) itself. A fixed public seed: it is a property of the estimator.
  """
  n_seen = _checks.check_positive_int("num_seen", num_seen)
  n_unseen = _checks.check_nonnegative_int("num_unseen", num_unseen)
  q = _checks.check_open_unit("quantile", quantile)
  rng = np.random.default_rng(0x4E4F4953)  # "NOIS"
  scale = 1e-3
  values = []
  for _ in range(_checks.check_positive_int("trials", trials)):
    seen = rng.normal(scale=scale, size=n_seen)
    try:
      if closed_form_null:
        s = np.std(seen, ddof=1)
        values.append(gaussian_pair_epsilon(float(np.mean(seen)), float(s), 0.0, scale,
                                            delta))
      else:
        values.append(one_shot_epsilon(seen, rng.normal(scale=scale, size=n_unseen),
                                       delta).epsilon)
    except root_finding.UnreachableTargetError:
      values.append(math.inf)
  return float(np.quantile(values, q, method="inverted_cdf"))


def null_cosine_cdf(t: float, dimension: int) -> float:
  """P[cos(u, v) <= t] for a fixed v and u uniform on the sphere of R^d (d >= 2): exactly
  (1 + cos)/2 ~ Beta((d − 1)/2, (d − 1)/2) — the closed-form null of Sec. 4."""
  d = _checks.check_positive_int("dimension", dimension)
  if d < 2:
    raise ValueError(f"`dimension` must be >= 2; got {d}.")
  half = 0.5 * (d - 1)
  return float(stats.beta.cdf((1.0 + float(t)) / 2.0, half, half))


# ---------------------------------------------------------------------------------------
# The one-run audit: a lower bound on ε (Steinke, Nasr and Jagielski 2023, arXiv 2305.08846).


def _check_audit_delta(delta: float) -> float:
  """δ of the audited claim: 0 (pure DP) allowed, unlike a guarantee's δ."""
  d = _checks.check_nonnegative("delta", delta)
  if d >= 1.0:
    raise ValueError(f"`delta` must be in [0, 1); got {delta!r}.")
  return d


def one_run_p_value(num_canaries: int, guesses: int, correct: int, epsilon: float,
                    delta: float) -> float:
  """The p-value of "the mechanism is (ε, δ)-DP" when `correct` of `guesses` guesses of the
  canaries' secret coins were right (Steinke et al. 2023, Thm. 3.1 with δ via Prop. 5.7):

    β = P[Binomial(r, q) ≥ v], q = e^ε / (1 + e^ε);
    α = max_{1≤i≤v} (P[Binomial(r, q) ≥ v − i] − β) / i;
    p = min(1, β + 2 m δ α)

  with m canaries, r guesses and v correct: under (ε, δ)-DP, v is this unlikely or more.
  """
  m = _checks.check_positive_int("num_canaries", num_canaries)
  r = int(guesses)
  v = int(correct)
  if not 0 <= v <= r <= m:
    raise ValueError(f"Need 0 <= correct <= guesses <= num_canaries; got {v}, {r}, {m}.")
  eps = _checks.check_finite("epsilon", epsilon)
  d = _check_audit_delta(delta)
  q = float(special.expit(eps))
  beta = float(stats.binom.sf(v - 1, r, q))
  if d == 0.0 or v == 0:
    return min(beta, 1.0)
  i = np.arange(1, v + 1)
  alpha = float(np.max((stats.binom.sf(v - i - 1, r, q) - beta) / i, initial=0.0))
  return min(beta + 2.0 * m * d * alpha, 1.0)


def one_run_epsilon_for_counts(num_canaries: int, guesses: int, correct: int, delta: float,
                               significance: float) -> float:
  """The largest ε whose (ε, δ) claim these counts reject at `significance` (0 if none):
  p(ε) grows with ε, so this is the root of p(ε) = significance."""
  sig = _checks.check_open_unit("significance", significance)
  return _largest_rejected_epsilon(
      lambda eps: sig - one_run_p_value(num_canaries, guesses, correct, eps, delta), 0.0)


def _largest_rejected_epsilon(margin: Callable[[float], float], smallest: float) -> float:
  """The largest ε ≥ `smallest` with margin(ε) ≥ 0 — the claim rejected —, where the margin
  decreases in ε (0 if the claim at `smallest` stands)."""
  def rejected(eps: float) -> bool:
    return margin(eps) >= 0.0

  if not rejected(smallest):
    return 0.0
  lo, hi = root_finding.expand_up(rejected, smallest, max(1.0, 2.0 * smallest), limit=1e4)
  root = root_finding.brent(margin, lo, hi, xtol=1e-10, rtol=1e-10)
  # A lower bound: the end of the root's tolerance interval whose claim is still rejected.
  step = 1e-9 * max(1.0, root)
  while root > smallest and not rejected(root):
    root = max(smallest, root - step)
  return root


def one_run_gaussian_margin(num_canaries: int, guesses: int, correct: int, mu: float,
                            significance: float) -> float:
  """> 0 when `correct` of `guesses` guesses reject "the mechanism is μ-GDP" at
  `significance` (Mahloujifar, Melis and Chaudhuri 2024, arXiv 2410.22235, the recursion
  bounding the probability of v or more correct guesses under an f-DP trade-off curve, here
  f(x) = Φ(Φ⁻¹(1 − x) − μ), with its cap at 1).

  Starting from r = α v / m and h = α (n − v) / m, for i = v − 1, …, 0: h ← max(h, f⁻¹-blow-up
  of r) = max(h, Φ(Φ⁻¹(r) − μ)), r ← min(r + i/(n − i)·Δh, 1): under the claim, n / m can
  only be reached with probability below the significance if r + h stays below it, so the
  claim is rejected when the final r + h exceeds n / m (the margin r + h − n / m > 0).
  """
  m, n, v = int(num_canaries), int(guesses), int(correct)
  if not 0 <= v <= n <= m:
    raise ValueError(f"Need 0 <= correct <= guesses <= num_canaries; got {v}, {n}, {m}.")
  r = significance * v / m
  h = significance * (n - v) / m
  for i in range(v - 1, -1, -1):
    h_new = max(h, float(special.ndtr(special.ndtri(r) - mu)))
    if h_new == h:
      break  # Neither h nor r changes any more.
    r = min(r + i / (n - i) * (h_new - h), 1.0)
    h = h_new
  return r + h - n / m


def one_run_gaussian_epsilon_for_counts(num_canaries: int, guesses: int, correct: int,
                                        delta: float, significance: float) -> float:
  """The largest ε whose Gaussian claim — μ-GDP with the μ that is exactly (ε, δ)-DP — these
  counts reject at `significance` (0 if none).

  Tighter than `one_run_epsilon_for_counts`, and valid as a lower bound on a mechanism's
  (ε, δ) only when its privacy curve is a Gaussian one (DP-FTRL and DP-SGD with Gaussian noise
  and fixed participation are exactly μ-GDP); for other mechanisms it bounds their
  Gaussian-equivalent ε. Needs δ > 0 (no Gaussian mechanism is (ε, 0)-DP).
  """
  sig = _checks.check_open_unit("significance", significance)
  d = _check_audit_delta(delta)
  if d == 0.0:
    raise ValueError("The Gaussian one-run bound needs δ > 0: no Gaussian mechanism is "
                     "(ε, 0)-DP; use `one_run_epsilon_for_counts` for δ = 0.")
  def margin(eps: float) -> float:
    mu = 1.0 / zcdp.noise_multiplier_for_epsilon(1.0, eps, d)
    return one_run_gaussian_margin(num_canaries, guesses, correct, mu, sig)

  return _largest_rejected_epsilon(margin, _SMALLEST_GAUSSIAN_EPSILON)


_SMALLEST_GAUSSIAN_EPSILON = 1e-6


@dataclasses.dataclass(frozen=True)
class OneRunBound:
  """A lower bound on ε from one run (Steinke et al. 2023) and how it was reached.

  Attributes:
    epsilon: with probability ≥ `confidence` over the canaries' coins, the true ε at `delta`
      is at least this (0: nothing certified).
    confidence: 1 − significance.
    delta: δ.
    num_canaries: m.
    guesses, correct: the guess count r that gave the bound and its correct guesses v.
    guess_counts_tried: the r searched (the significance is split among them: Bonferroni).
    trade_off: the claim tested (`TRADE_OFFS`).
  """
  epsilon: float
  confidence: float
  delta: float
  num_canaries: int
  guesses: int
  correct: int
  guess_counts_tried: tuple[int, ...]
  trade_off: str = "epsilon_delta"


def _guess_counts(m: int) -> tuple[int, ...]:
  """Even guess counts 2, 4, 8, ... and m (rounded down to even)."""
  counts, r = [], 2
  while r < m:
    counts.append(r)
    r *= 2
  counts.append(m - m % 2)
  return tuple(sorted(set(c for c in counts if c >= 2)))


EPSILON_DELTA = "epsilon_delta"
GAUSSIAN = "gaussian"
TRADE_OFFS = (EPSILON_DELTA, GAUSSIAN)
"""The claim a one-run audit tests: (ε, δ)-DP (Steinke et al.), or the Gaussian trade-off
curve with the same (ε, δ) (the f-DP refinement of Mahloujifar et al., tighter)."""


def one_run_lower_bound(in_scores: Sequence[float], out_scores: Sequence[float],
                        delta: float, confidence: float = 0.95,
                        guess_counts: Sequence[int] | None = None,
                        trade_off: str = EPSILON_DELTA) -> OneRunBound:
  """ε lower bound from the scores of the canaries whose coin put them in (`in_scores`) and
  out (`out_scores`) of the run: for each guess count r, guess "in" for the r/2 highest
  scores and "out" for the r/2 lowest, count the correct guesses, and bound ε
  (`one_run_epsilon_for_counts`, or with `trade_off=GAUSSIAN`
  `one_run_gaussian_epsilon_for_counts`); the best r is taken with the significance split
  over the counts tried (a union bound), so the confidence holds for the maximum.

  Valid when every canary's coin was a fair secret coin drawn independently of everything
  but its own inclusion (the audit's design); the scores may depend on everything released.
  """
  ins = _checks.check_finite_array("in_scores", np.asarray(in_scores, np.float64), ndim=1)
  outs = _checks.check_finite_array("out_scores", np.asarray(out_scores, np.float64), ndim=1)
  m = ins.size + outs.size
  if m < 2:
    raise ValueError(f"A one-run audit needs at least 2 canaries; got {m}.")
  conf = _checks.check_open_unit("confidence", confidence)
  if trade_off not in TRADE_OFFS:
    raise ValueError(f"`trade_off` must be one of {TRADE_OFFS}; got {trade_off!r}.")
  counts = _guess_counts(m) if guess_counts is None else tuple(int(r) for r in guess_counts)
  if not counts or any(r < 2 or r > m or r % 2 for r in counts):
    raise ValueError(f"`guess_counts` must be even numbers in [2, {m}]; got {counts!r}.")
  d = _check_audit_delta(delta)
  significance = (1.0 - conf) / len(counts)
  scores = np.concatenate([ins, outs])
  coins = np.concatenate([np.ones(ins.size, bool), np.zeros(outs.size, bool)])
  # Ascending; a tie is broken against the auditor ("in" canaries first, so the lowest
  # guesses "out" and the highest "in" miss them): it can only lower the correct counts.
  order = np.argsort(scores, kind="stable")
  bound_for_counts = (one_run_gaussian_epsilon_for_counts if trade_off == GAUSSIAN
                      else one_run_epsilon_for_counts)
  best = (0.0, counts[0], 0)
  for r in counts:
    half = r // 2
    correct = int(np.sum(coins[order[m - half:]]) + np.sum(~coins[order[:half]]))
    eps = bound_for_counts(m, r, correct, d, significance)
    if eps > best[0]:
      best = (eps, r, correct)
  return OneRunBound(epsilon=best[0], confidence=conf, delta=d, num_canaries=m,
                     guesses=best[1], correct=best[2], guess_counts_tried=counts,
                     trade_off=trade_off)


def one_run_ceiling(num_in: int, num_out: int, delta: float,
                    confidence: float = 0.95, trade_off: str = EPSILON_DELTA) -> float:
  """The largest bound `one_run_lower_bound` can return for `num_in` canaries whose coin put
  them in and `num_out` out: the bound of scores that tell every one apart (each guess count
  r guesses the r/2 highest "in" and the r/2 lowest "out", so with unequal halves even
  perfect scores miss some at r = m). What a run whose canaries are perfectly separated
  certifies (≤ `one_run_maximum`)."""
  n_in = _checks.check_nonnegative_int("num_in", num_in)
  n_out = _checks.check_nonnegative_int("num_out", num_out)
  return one_run_lower_bound(np.full(n_in, 1.0), np.full(n_out, 0.0), delta,
                             confidence, trade_off=trade_off).epsilon


def one_run_maximum(num_canaries: int, confidence: float = 0.95) -> float:
  """The largest bound m canaries can certify at δ = 0 (every one of m guesses right, one guess
  count): q^m = 1 − confidence with q = e^ε/(1 + e^ε), so ε = logit((1 − confidence)^{1/m})."""
  m = _checks.check_positive_int("num_canaries", num_canaries)
  q = (1.0 - _checks.check_open_unit("confidence", confidence)) ** (1.0 / m)
  return float(special.logit(q))
