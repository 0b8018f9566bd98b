"""Monte Carlo privacy accounting for balls-in-bins batching (paper 003).

Implements, for ANY non-negative lower-triangular correlation matrix C (BLT,
BandMF, TreeAgg, identity = DP-SGD), the accounting of Choquette-Choo, Ganesh,
Haque, Steinke and Thakurta, "Near Exact Privacy Amplification for Matrix
Mechanisms" (paper 003, `shared/papers/003_*.txt`):

* Balls-in-bins batching (Def. 3.1): every example/user is put in one of
  `num_bins` = b bins uniformly at random, once; round t (0-based) of every
  epoch uses bin t mod b, so n = b * E rounds for E = `num_epochs` epochs.
* The dominating pair of Lemma 3.2:
      P = (1/b) sum_i N(m_i, sigma^2 I),  Q = N(0, sigma^2 I),
      m_i = sum_{j=0}^{E-1} C[:, b*j + i]   (i = 0..b-1, 0-based),
  see `dominating_pair` / `mode_means`.
* The privacy loss Y = log(P/Q)(m_k + sigma Z), k ~ Uni([b]), Z ~ N(0, I_n)
  (Sec. 4.1, Alg. 2 line 3), the estimator of Alg. 2 line 4
      delta_hat(sigma) = (1/m) sum_j (1 - exp(eps - Y_j(sigma)))_+
  (Sec. 2: H_{e^eps}(P, Q) = E_Y[(1 - e^{eps - Y})_+]) with its Monte Carlo
  standard error (`estimate_delta`),
* sigma calibration by a bracketing (bisection-safeguarded Brent) root finder on
  ONE fixed sample (Alg. 2, `calibrate_noise_multiplier`), and
* Estimate-Verify-Release (Alg. 1, Thm. 2.1 = Thm. 9 of Wang et al. 2023) with
  the sample size and failure probability reported
  (`estimate_verify_release`).

Notation: n rounds, b bins (= batches per epoch), E epochs, m Monte Carlo
samples, sigma the noise multiplier, u = 1/sigma, G the b x b Gram matrix
G[i, k] = <m_i, m_k>.

Dimension reduction used throughout (exact, not an approximation): with
x = m_k + sigma Z,
    Y = logsumexp_i( (G[k, i] - G[i, i] / 2) u^2 + W_i u ) - log b,
    W = (<m_i, Z>)_i ~ N(0, G),
so a sample is (k, W) and W = F xi with G = F F^T, xi ~ N(0, I_b): the cost per
sample is O(b^2), independent of n. For Toeplitz C every mode is a shift of one
vector (m_i[t] = s[t - i], s the period-b folding of the coefficients), so G is
a table of truncated shifted autocorrelations of s, computed from prefix sums in
O(n b) time and O(n + b^2) memory without forming C (`_toeplitz_gram`).

The sample, δ̂ and the root finding are `monte_carlo`'s engine, of which `_Kernel` is the
balls-in-bins model: samples come in blocks of `monte_carlo.RNG_BLOCK` from independent
streams, so the sample depends only on the seed (not on `chunk_size`), any prefix of a sample
is itself a sample, and memory stays O(chunk_size * b) however large m is.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import special

from dp_fl import _checks
from dp_fl import resources
from dp_fl.accounting import monte_carlo
from dp_fl.accounting import verification
from dp_fl.accounting import zcdp

# Default rows processed at once (memory ~ 8 arrays of chunk_size x b float64).
DEFAULT_CHUNK_SIZE = 8192
# Samples drawn by a calibration, in units of num_samples (measured: 1.12 passes; the
# bracket's screens add about one each when they run), for its progress ETA.
_CALIBRATION_PASSES = 2.0
# Below these the estimate is flagged with an InsufficientSamplesWarning.
MIN_TAIL_SAMPLES = 30
MAX_RELATIVE_STANDARD_ERROR = 0.1

SeedLike = monte_carlo.SeedLike


def monte_carlo_cost(*, num_bins: int, num_epochs: int, num_samples: int,
                     dense: bool = False, chunk_size: int = DEFAULT_CHUNK_SIZE
                     ) -> resources.Estimate:
  """Peak memory and time of calibrating σ and verifying it (Alg. 2 then Alg. 1).

  Memory: about 8 chunk x b float64 arrays plus `monte_carlo.MAX_STORED_CHUNKS` chunks of kept samples,
  the b x b Gram and factor, and C itself when dense (n x n, n = E b). Time: ~3e-7 s per
  sample and bin per pass, `_CALIBRATION_PASSES` + 1 passes. Measured with tracemalloc at
  m = 65536: 12 / 66 / 406 MB and 0.2 / 1.2 / 9 s at b = 32 / 128 / 512 (1.12 passes).
  """
  b, e, m = int(num_bins), int(num_epochs), int(num_samples)
  n = b * e
  per_bin = 8.0 * chunk_size * 8 + 8.0 * monte_carlo.MAX_STORED_CHUNKS * chunk_size
  memory = per_bin * b + 540.0 * b * b + (16.0 * n * n if dense else 16.0 * n)
  seconds = 3e-7 * m * b * (_CALIBRATION_PASSES + 1.0)
  return resources.Estimate(
      f"balls-in-bins Monte Carlo accounting ({e} epochs x {b} bins, {m} samples)",
      memory, seconds, f"~{per_bin / 1e6:.2g} MB per bin + 540 b² bytes"
      + (" + 16 n² bytes (dense C)" if dense else "") + ", ~9e-7 m b s")


class InsufficientSamplesWarning(UserWarning):
  """The Monte Carlo estimate rests on too few privacy-loss tail samples."""


# --------------------------------------------------------------------------
# Dominating pair (Lemma 3.2).
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BallsInBinsPair:
  """The dominating pair (P, Q) of Lemma 3.2 of paper 003, up to sigma.

  P_{C, sigma} = (1/b) sum_i N(m_i, sigma^2 I) and Q_sigma = N(0, sigma^2 I).
  Every quantity of the accounting depends on the modes only through their
  Gram matrix, which is what is stored.

  Attributes:
    num_bins: b, batches (bins) per epoch (Def. 3.1).
    num_epochs: E, so the number of rounds is n = b * E (or `rounds`).
    gram: a x a Gram matrix of the first a bins, gram[i, k] = <m_i, m_k> (read-only):
      a = b, or, in a single epoch of n < b rounds, a = n — the bins whose turn never
      comes have zero modes (their users take part in no round), so only the a active ones
      are stored and sampled (O(a²) a sample instead of O(b²)).
    rounds: n when the last epoch is cut short, b * (E - 1) < n <= b * E (None: b * E);
      bins whose turn in the last epoch never comes take part E - 1 times.
  """

  num_bins: int
  num_epochs: int
  gram: np.ndarray
  rounds: int | None = None

  def __post_init__(self):
    b = _checks.check_positive_int("num_bins", self.num_bins)
    e = _checks.check_positive_int("num_epochs", self.num_epochs)
    object.__setattr__(self, "rounds", _check_rounds(self.rounds, b, e))
    g = _checks.check_finite_array("gram", self.gram, ndim=2)
    a = min(b, self.rounds) if e == 1 else b
    if g.shape not in ((b, b), (a, a)):
      raise ValueError(
          f"`gram` must have shape (num_bins, num_bins) = ({b}, {b}) (or ({a}, {a}), the "
          f"bins whose turn comes in {self.rounds} rounds); got {g.shape}. Build it with "
          "`dominating_pair`.")
    if not np.allclose(g, g.T, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(g).max())):
      raise ValueError("`gram` must be symmetric; got a non-symmetric matrix. "
                       "Build it with `dominating_pair`.")
    if np.any(np.diag(g) < 0) or not np.any(np.diag(g) > 0):
      raise ValueError(
          "`gram` must have a non-negative diagonal with at least one positive "
          f"entry (squared mode norms); got diagonal {np.diag(g)[:4].tolist()}... "
          "C must have at least one non-zero entry.")
    g = g.copy()
    g.setflags(write=False)
    object.__setattr__(self, "gram", g)

  @property
  def num_rounds(self) -> int:
    """n: b * E (Def. 3.1), or fewer when the last epoch is cut short (`rounds`)."""
    return self.rounds

  @property
  def num_active_bins(self) -> int:
    """a: the bins `gram` covers; the other b − a have zero modes."""
    return self.gram.shape[0]

  @property
  def sensitivity(self) -> float:
    """max_i ||m_i||_2: L2 sensitivity of C x under deterministic batching.

    With a fixed bin (no amplification) a user takes part in rounds
    i, i + b, ..., and for non-negative C the worst case is the same unit
    vector in every participation (paper 003, App. A), giving ||m_i||. By joint
    convexity of the hockey-stick divergence, H(P, Q) <= max_i H(N(m_i), N(0)),
    so the Gaussian mechanism with this sensitivity upper-bounds the
    balls-in-bins privacy loss.
    """
    return float(np.sqrt(np.max(np.diag(self.gram))))


def _check_rounds(rounds: Any, b: int, e: int) -> int:
  if rounds is None:
    return b * e
  n = _checks.check_positive_int("rounds", rounds)
  if not b * (e - 1) < n <= b * e:
    raise ValueError(
        f"`rounds` must lie in the last epoch, b * (E - 1) < n <= b * E = ({b * (e - 1)}, "
        f"{b * e}] for num_bins={b}, num_epochs={e}; got {rounds!r}. Use num_epochs = "
        f"ceil(n / num_bins) = {-(-n // b)}.")
  return n


def epochs_for(rounds: int, num_bins: int) -> int:
  """E = ceil(n / b): the epochs n rounds of b bins start (the last possibly cut short)."""
  n = _checks.check_positive_int("rounds", rounds)
  return -(-n // _checks.check_positive_int("num_bins", num_bins))


def _check_matrix_input(num_bins: int, num_epochs: int, matrix: Any,
                        toeplitz_coefs: Any, rounds: Any = None) -> tuple[int, int, int]:
  b = _checks.check_positive_int("num_bins", num_bins)
  e = _checks.check_positive_int("num_epochs", num_epochs)
  if (matrix is None) == (toeplitz_coefs is None):
    raise ValueError(
        "Pass exactly one of `matrix` (dense n x n C) and `toeplitz_coefs` "
        f"(first column of a Toeplitz C); got matrix={'set' if matrix is not None else None}"
        f", toeplitz_coefs={'set' if toeplitz_coefs is not None else None}.")
  return b, e, _check_rounds(rounds, b, e)


def _validated_matrix(matrix: Any, n: int) -> np.ndarray:
  c = _checks.check_finite_array("matrix", matrix, ndim=2)
  if c.shape != (n, n):
    raise ValueError(
        f"`matrix` must be n x n with n = num_bins * num_epochs (or `rounds`) = {n}; got "
        f"shape {c.shape}. Adjust num_bins/num_epochs/rounds or the matrix.")
  if np.any(c < 0):
    raise ValueError(
        f"`matrix` must be entry-wise non-negative (Lemma 3.2 of paper 003); got "
        f"min entry {c.min()!r}. Use a non-negative C (BLT, BandMF, TreeAgg).")
  return _checks.check_lower_triangular("matrix", c)  # Lemma 3.2 of paper 003.


def _validated_toeplitz(toeplitz_coefs: Any, n: int) -> np.ndarray:
  c = _checks.check_finite_array("toeplitz_coefs", toeplitz_coefs, ndim=1)
  if c.size == 0:
    raise ValueError("`toeplitz_coefs` must be non-empty; got an empty array. "
                     "Pass c_0, c_1, ... (c_0 = 1 for BLT/BandMF).")
  if np.any(c < 0):
    raise ValueError(
        f"`toeplitz_coefs` must be non-negative (Lemma 3.2 of paper 003); got min "
        f"{c.min()!r}. Use a non-negative Toeplitz C.")
  out = np.zeros(n)
  out[:min(n, c.size)] = c[:n]  # entries beyond n never reach the n x n C.
  return out


def mode_means(*, num_bins: int, num_epochs: int, matrix: Any = None,
               toeplitz_coefs: Any = None, rounds: int | None = None) -> np.ndarray:
  """The n x b matrix of modes M = [m_0, ..., m_{b-1}] of Lemma 3.2.

  m_i = sum_{j=0}^{E-1} C[:, b*j + i] (0-based bins; paper 003 writes
  1-based i), the sum over the columns b*j + i < n. C is given either densely
  (`matrix`, n x n, lower-triangular, non-negative) or as Toeplitz coefficients
  (`toeplitz_coefs`, c_0, c_1, ...; zero-padded, or truncated, to n). n is
  `rounds` (default b * E); a shorter last epoch is C padded with zero rows and
  columns to b * E: the rounds never run release nothing about anyone.

  Returns:
    float64 array of shape (n, b).
  """
  b, e, n = _check_matrix_input(num_bins, num_epochs, matrix, toeplitz_coefs, rounds)
  if matrix is not None:
    c = np.zeros((n, b * e))
    c[:, :n] = _validated_matrix(matrix, n)
    return c.reshape(n, e, b).sum(axis=1)
  s = _folded(_validated_toeplitz(toeplitz_coefs, b * e), b, e)
  out = np.zeros((n, b))
  for i in range(min(b, n)):
    out[i:, i] = s[:n - i]
  return out


def _folded(coefs: np.ndarray, b: int, e: int) -> np.ndarray:
  """s[u] = sum_{j >= 0, b j <= u} c[u - b j], so that m_i[t] = s[t - i]."""
  return np.cumsum(coefs.reshape(e, b), axis=0).ravel()


def _toeplitz_gram(coefs: np.ndarray, b: int, e: int, n: int | None = None) -> np.ndarray:
  """Gram matrix of the Lemma 3.2 modes of a Toeplitz C in O(n b) time.

  Since m_i[t] = s[t - i] (i <= t < n), for i <= k with d = k - i:
      G[i, k] = sum_{v=0}^{n-1-k} s[v] s[v + d],
  a truncated autocorrelation of s at lag d: one prefix sum per lag (zero for
  a bin k >= n that never takes part). `coefs` has b * E entries; n defaults to
  b * E.
  """
  n = b * e if n is None else n
  s = _folded(coefs, b, e)[:n]
  g = np.zeros((min(b, n), min(b, n)))  # Bins k >= n never take part: not stored.
  ks = np.arange(min(b, n))
  for d in range(ks.size):
    prefix = np.cumsum(s[:n - d] * s[d:])  # prefix[L - 1] = sum_{v < L}.
    k = ks[d:]
    g[k - d, k] = prefix[n - k - 1]
  return np.triu(g) + np.triu(g, 1).T


def dominating_pair(*, num_bins: int, num_epochs: int, matrix: Any = None,
                    toeplitz_coefs: Any = None,
                    rounds: int | None = None) -> BallsInBinsPair:
  """The dominating pair of Lemma 3.2 (paper 003) for balls-in-bins batching.

  Args:
    num_bins: b, batches per epoch (Def. 3.1).
    num_epochs: E; n = b * E rounds (or `rounds`).
    matrix: dense n x n non-negative lower-triangular C, or None.
    toeplitz_coefs: Toeplitz coefficients c_0, c_1, ... of C (e.g. BLT:
      c_0 = 1, c_t = sum_j omega_j theta_j^(t-1)), or None. Shorter arrays
      are zero-padded (BandMF bands), longer ones truncated to n.
    rounds: n when the last epoch is cut short, b * (E - 1) < n <= b * E
      (None: b * E). The pair is that of C padded with zeros to b * E rounds
      (see `mode_means`).

  Returns:
    A `BallsInBinsPair` holding the Gram matrix of the modes m_i.
  """
  b, e, n = _check_matrix_input(num_bins, num_epochs, matrix, toeplitz_coefs, rounds)
  active = min(b, n)  # Bins whose turn comes (all of them from the second epoch on).
  if matrix is not None:
    modes = mode_means(num_bins=b, num_epochs=e, matrix=matrix, rounds=n)[:, :active]
    gram = modes.T @ modes
  else:
    gram = _toeplitz_gram(_validated_toeplitz(toeplitz_coefs, b * e), b, e, n)
  return BallsInBinsPair(num_bins=b, num_epochs=e, gram=gram, rounds=n)


# --------------------------------------------------------------------------
# Privacy loss samples (Sec. 4.1, Alg. 2 lines 1-3).
# --------------------------------------------------------------------------


class _Kernel(monte_carlo.LossModel):
  """The balls-in-bins loss model: G = F F^T over the a active bins, alpha[k, i] = G[k, i] -
  G[i, i] / 2 (row a: a bin that never takes part, G[k, i] = 0), a sample is (k, W = F xi);
  the b - a inactive modes each add e^0 = 1 to the mixture's sum (`log_rest`)."""

  def __init__(self, pair: BallsInBinsPair):
    g = pair.gram
    w, v = np.linalg.eigh(g)
    w = np.clip(w, 0.0, None)
    self.factor_t = np.ascontiguousarray((v * np.sqrt(w)).T)
    half_diag = 0.5 * np.diag(g)[None, :]
    self.alpha = np.concatenate([g - half_diag, -half_diag])
    self.num_bins = pair.num_bins
    self.num_active = self.num_columns = pair.num_active_bins
    self.log_b = math.log(pair.num_bins)
    inactive = pair.num_bins - self.num_active
    self.log_rest = math.log(inactive) if inactive else -math.inf

  def draw(self, generator, count):
    bins = generator.integers(0, self.num_bins, size=count)
    return np.minimum(bins, self.num_active), generator.standard_normal((count, self.num_active))

  def prepare(self, rows):
    bins, xi = rows
    return bins, xi @ self.factor_t

  def stats(self, rows, u, eps, derivative=False):
    k, w = rows
    return _chunk_stats(self.alpha[k], w, u, eps, self.log_b, derivative, self.log_rest)

  def screen(self, rows, u_lo, u_hi, eps):
    """With u in [u_lo, u_hi] each term alpha_i u^2 + W_i u is at most
    B_i = max(alpha_i u_lo^2, alpha_i u_hi^2) + max(W_i u_lo, W_i u_hi), and
    Y <= logsumexp(B, log_rest) - log b; rows with that bound <= eps give f = 0 in the
    bracket."""
    k, w = rows
    a_max = np.where(self.alpha >= 0, self.alpha * u_hi**2, self.alpha * u_lo**2)
    bound = a_max[k]
    bound += w * u_lo
    bound += np.maximum(w, 0.0) * (u_hi - u_lo)
    keep = np.zeros(k.shape[0], dtype=bool)
    cand = np.nonzero(np.maximum(bound.max(axis=1), self.log_rest) > eps)[0]
    if cand.size:
      keep[cand] = np.logaddexp(special.logsumexp(bound[cand], axis=1),
                                self.log_rest) - self.log_b > eps
    return keep


def privacy_loss(pair: BallsInBinsPair, noise_multiplier: float, bins: Any,
                 projections: Any) -> np.ndarray:
  """Y = log(P/Q)(m_k + sigma Z) of Alg. 2 line 3, from (k, W = M^T Z).

  Args:
    pair: the dominating pair.
    noise_multiplier: sigma > 0.
    bins: int array (m,) of sampled bins k in [0, b).
    projections: array (m, a) with W[j, i] = <m_i, Z_j> over the active bins.

  Returns:
    float64 array (m,) of privacy losses.
  """
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  k = np.asarray(bins)
  w = _checks.check_finite_array("projections", projections, ndim=2)
  b, a = pair.num_bins, pair.num_active_bins
  if w.shape[1] != a or k.shape != (w.shape[0],):
    raise ValueError(
        f"`bins` must have shape (m,) and `projections` shape (m, {a}); got "
        f"{k.shape} and {w.shape}.")
  if not np.issubdtype(k.dtype, np.integer) or np.any((k < 0) | (k >= b)):
    raise ValueError(f"`bins` must be integers in [0, {b}); got {k[:4]!r}...")
  kernel = _Kernel(pair)
  return _losses(kernel.alpha[np.minimum(k, a)], w, 1.0 / sigma, kernel.log_b,
                 kernel.log_rest)


def _losses(alpha_rows: np.ndarray, w: np.ndarray, u: float,
            log_b: float, log_rest: float = -math.inf) -> np.ndarray:
  a = alpha_rows * (u * u)
  a += w * u
  return np.logaddexp(special.logsumexp(a, axis=1), log_rest) - log_b


def sample_privacy_loss(pair: BallsInBinsPair, *, noise_multiplier: float,
                        num_samples: int, seed: SeedLike,
                        chunk_size: int = DEFAULT_CHUNK_SIZE) -> np.ndarray:
  """m i.i.d. samples of the privacy loss Y ~ PLD(P_{C,sigma}, Q_sigma).

  Sec. 4.1 of paper 003; the same (seed, m) gives the same sample as
  `estimate_delta` and `calibrate_noise_multiplier` use. Returns an (m,) array
  (the only O(m) memory in this module; meant for diagnostics and tests).
  """
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  m = _checks.check_positive_int("num_samples", num_samples)
  stream = monte_carlo.SampleStream(_Kernel(pair), seed,
                                    monte_carlo.check_chunk_size(chunk_size))
  kernel = stream.model
  return np.concatenate([
      _losses(kernel.alpha[k], w, 1.0 / sigma, kernel.log_b, kernel.log_rest)
      for k, w in stream.chunks(m)
  ])


# --------------------------------------------------------------------------
# delta_hat (Alg. 2 line 4) and its standard error.
# --------------------------------------------------------------------------


def _chunk_stats(alpha_rows: np.ndarray, w: np.ndarray, u: float, eps: float,
                 log_b: float, derivative: bool = False,
                 log_rest: float = -math.inf) -> monte_carlo.Stats:
  """delta_hat sums over one chunk at sigma = 1/u (Alg. 2 lines 3-4); `log_rest` is the log
  of the inactive modes' part of the sum (each e^0 = 1)."""
  a = alpha_rows * (u * u)
  a += w * u
  top = np.maximum(a.max(axis=1), log_rest)
  cand = np.nonzero(top > eps)[0]  # Y <= max_i a_i, so others give f = 0.
  if cand.size == 0:
    return monte_carlo.Stats()
  ac = a[cand] - top[cand, None]
  e = np.exp(ac)
  tot = e.sum(axis=1) + np.exp(log_rest - top[cand])
  y = top[cand] + np.log(tot) - log_b
  tail = y > eps
  if not np.any(tail):
    return monte_carlo.Stats()
  g = np.exp(eps - y[tail])  # e^{eps - Y} in (0, 1)
  f = -np.expm1(eps - y[tail])
  out = monte_carlo.Stats(sum_f=float(f.sum()), sum_f2=float(np.dot(f, f)),
               num_tail=int(tail.sum()))
  if derivative:
    # dY/du = sum_i softmax(a)_i (2 alpha_i u + W_i); dY/dsigma = -u^2 dY/du;
    # df/dsigma = e^{eps - Y} dY/dsigma.
    idx = cand[tail]
    p = e[tail] / tot[tail, None]
    dy_du = np.einsum("ij,ij->i", p, 2.0 * u * alpha_rows[idx] + w[idx])
    out.sum_df = float(np.dot(g, -u * u * dy_du))
  return out


@dataclasses.dataclass(frozen=True)
class DeltaEstimate:
  """delta_hat(sigma) of Alg. 2 line 4 with its Monte Carlo standard error.

  Attributes:
    epsilon: eps of the (eps, delta) guarantee.
    noise_multiplier: sigma.
    delta_hat: (1/m) sum_j (1 - exp(eps - Y_j))_+, an unbiased estimate of
      H_{e^eps}(P, Q).
    standard_error: sample standard deviation of the summands / sqrt(m).
    num_samples: m.
    num_tail_samples: samples with Y_j > eps (the only non-zero summands).
  """

  epsilon: float
  noise_multiplier: float
  delta_hat: float
  standard_error: float
  num_samples: int
  num_tail_samples: int

  @property
  def relative_standard_error(self) -> float:
    return self.standard_error / self.delta_hat if self.delta_hat > 0 else math.inf


def _warn_if_few(what: str, num_tail: int, rel_se: float, m: int,
                 stacklevel: int = 3) -> None:
  if num_tail >= MIN_TAIL_SAMPLES and rel_se <= MAX_RELATIVE_STANDARD_ERROR:
    return
  factor = max(MIN_TAIL_SAMPLES / max(num_tail, 1),
               (rel_se / MAX_RELATIVE_STANDARD_ERROR)**2 if math.isfinite(rel_se)
               else MIN_TAIL_SAMPLES)
  suggestion = int(2 ** math.ceil(math.log2(m * factor)))
  warnings.warn(
      f"{what} rests on {num_tail} privacy-loss tail samples (Y > eps) out of "
      f"num_samples={m}; relative standard error {rel_se:.3g}. Increase "
      f"`num_samples` to about {suggestion} (>= {MIN_TAIL_SAMPLES} tail samples "
      f"and relative SE <= {MAX_RELATIVE_STANDARD_ERROR}), or use a larger delta.",
      InsufficientSamplesWarning, stacklevel=stacklevel)


def estimate_delta(pair: BallsInBinsPair, *, noise_multiplier: float,
                   epsilon: float, num_samples: int, seed: SeedLike,
                   chunk_size: int = DEFAULT_CHUNK_SIZE) -> DeltaEstimate:
  """delta_hat(sigma; C, eps) of Alg. 2 line 4 (paper 003), streamed by chunks.

  Estimates H_{e^eps}(P_{C,sigma}, Q_sigma) = E_Y[(1 - e^{eps - Y})_+]
  (Sec. 2) from m samples. Warns (`InsufficientSamplesWarning`) when fewer
  than `MIN_TAIL_SAMPLES` samples exceed eps or the relative standard error
  exceeds `MAX_RELATIVE_STANDARD_ERROR`.
  """
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  eps = _checks.check_positive("epsilon", epsilon)
  m = _checks.check_positive_int("num_samples", num_samples)
  stream = monte_carlo.SampleStream(_Kernel(pair), seed,
                                    monte_carlo.check_chunk_size(chunk_size))
  stats = monte_carlo.streaming_stats(stream, m, sigma, eps)
  mean, se = stats.mean_and_se(m)
  est = DeltaEstimate(epsilon=eps, noise_multiplier=sigma, delta_hat=mean,
                      standard_error=se, num_samples=m,
                      num_tail_samples=stats.num_tail)
  _warn_if_few("delta_hat", est.num_tail_samples, est.relative_standard_error, m)
  return est


# --------------------------------------------------------------------------
# Gaussian mechanism (the unamplified baseline and the initial bracket).
# --------------------------------------------------------------------------


def unamplified_noise_multiplier(pair: BallsInBinsPair, *, epsilon: float,
                                 delta: float) -> float:
  """sigma for (eps, delta)-DP WITHOUT amplification (fixed, known bins).

  The Gaussian mechanism with sensitivity `pair.sensitivity` (max_i ||m_i||),
  calibrated with its exact (eps, delta) curve. This is the baseline of
  paper 003 Sec. 5.1 ("no amplification") and, by joint convexity of the
  hockey-stick divergence, an upper bound on the balls-in-bins sigma.
  """
  # The exact Gaussian curve, inverted once for the library (dp_fl.accounting.zcdp).
  return zcdp.noise_multiplier_for_epsilon(pair.sensitivity, epsilon, delta)


# --------------------------------------------------------------------------
# sigma calibration (Alg. 2).
# --------------------------------------------------------------------------


Calibration = monte_carlo.Calibration


def calibrate_noise_multiplier(pair: BallsInBinsPair, *, epsilon: float,
                               delta: float, num_samples: int, seed: SeedLike,
                               chunk_size: int = DEFAULT_CHUNK_SIZE,
                               rtol: float = 1e-6) -> Calibration:
  """Alg. 2 of paper 003: sigma solving delta_hat(sigma) = delta, fixed sample.

  The sample (i_j, Z_j), j < m (Alg. 2 lines 1-2) is drawn once from `seed`;
  delta_hat(sigma) (line 4) is then a deterministic, continuous function of
  sigma and line 5 is solved by Brent's bracketing method (bisection
  safeguarded). Speed-ups that leave the root unchanged: a warm start from the
  same procedure on the first m/8 samples (recursively), and screening: for
  sigma in a bracket, only samples whose privacy loss can exceed eps are kept
  (`_Kernel.screen`), so each root-finder step touches only those. Memory is
  O(chunk_size * b); if more than `4 * chunk_size` samples survive the
  screen, the bracket is narrowed, and finally delta_hat is streamed.

  For a formal guarantee calibrate to delta_verify < delta (paper 003 uses
  8e-6 for delta = 1e-5) and run `estimate_verify_release` on a FRESH seed.

  Raises:
    ValueError: on bad input, or when num_samples < 1/delta (delta_hat cannot
      resolve delta at all).
  Warns:
    InsufficientSamplesWarning: fewer than `MIN_TAIL_SAMPLES` tail samples or
      relative standard error above `MAX_RELATIVE_STANDARD_ERROR` at sigma*.
  """
  eps = _checks.check_positive("epsilon", epsilon)
  dlt = _checks.check_open_unit("delta", delta)
  m = _checks.check_positive_int("num_samples", num_samples)
  rtol = _checks.check_positive("rtol", rtol)
  c = monte_carlo.check_chunk_size(chunk_size)
  if m * dlt < 1.0:
    need = int(2 ** math.ceil(math.log2(100.0 / dlt)))
    raise ValueError(
        f"`num_samples` must be at least 1/delta = {1.0 / dlt:.4g} for a Monte "
        f"Carlo estimate of delta = {dlt!r}; got {m}. Use num_samples >= {need} "
        f"(about 100/delta, ~10% relative standard error) or a larger delta.")
  progress = resources.Progress(f"Monte Carlo calibration of σ ({m} samples)",
                                _CALIBRATION_PASSES * m)
  stream = monte_carlo.SampleStream(_Kernel(pair), seed, c, progress)
  sigma_unamp = unamplified_noise_multiplier(pair, epsilon=eps, delta=dlt)
  sigma, ev = monte_carlo.solve(stream, m, eps, dlt, sigma_unamp, rtol)
  progress.finish()
  stats = ev.stats(sigma, derivative=True)
  mean, se = stats.mean_and_se(m)
  slope = abs(stats.sum_df / m)
  out = Calibration(
      noise_multiplier=float(sigma), epsilon=eps, delta=dlt, delta_hat=mean,
      delta_standard_error=se,
      noise_multiplier_standard_error=se / slope if slope > 0 else math.inf,
      num_samples=m, num_tail_samples=stats.num_tail,
      unamplified_noise_multiplier=sigma_unamp, num_passes=ev.passes)
  _warn_if_few("calibrated sigma", stats.num_tail,
               se / mean if mean > 0 else math.inf, m)
  return out


# --------------------------------------------------------------------------
# Estimate-Verify-Release (Alg. 1, Thm. 2.1).
# --------------------------------------------------------------------------


def estimate_verify_release(
    pair: BallsInBinsPair, *, noise_multiplier: float, epsilon: float,
    delta: float, seed: SeedLike, delta_verify: float | None = None,
    num_samples: int | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
    release: Callable[[], Any] | None = None) -> verification.VerificationResult:
  """Alg. 1 of paper 003 (Estimate-Verify-Release of Wang et al. 2023).

  Estimates delta_hat(sigma) on a sample drawn from `seed` (which must be
  independent of any sample used to choose sigma, e.g. the calibration seed),
  verifies delta_hat <= delta_verify and only then calls `release`. By
  Thm. 2.1 the procedure is (eps, delta)-DP when the sample is large enough
  that verification fails with probability >= 1 - delta whenever the true
  H_{e^eps}(P, Q) > delta; that is checked here with the Chernoff bound of
  `verification_failure_probability`.

  Args:
    pair: the dominating pair (Lemma 3.2).
    noise_multiplier: sigma to verify (e.g. from `calibrate_noise_multiplier`
      at delta_verify on another seed).
    epsilon: eps > 0.
    delta: the delta to release, in (0, 1).
    seed: fresh randomness for the verification sample.
    delta_verify: threshold, default verification.DEFAULT_VERIFY_RATIO * delta.
    num_samples: m, default (and minimum) `required_num_samples`.
    chunk_size: rows per chunk (memory O(chunk_size * b)).
    release: zero-argument callable run only if verified (the mechanism M(D)).

  Raises:
    ValueError: on bad input, or when num_samples is too small for Thm. 2.1.
  """
  sigma, eps, d, dv, need, m = verification.check_verification(
      noise_multiplier, epsilon, delta, delta_verify, num_samples)
  if release is not None and not callable(release):
    raise ValueError(f"`release` must be a zero-argument callable or None; got "
                     f"{release!r}.")
  progress = resources.Progress(f"Monte Carlo verification ({m} samples)", m)
  stream = monte_carlo.SampleStream(_Kernel(pair), seed,
                                    monte_carlo.check_chunk_size(chunk_size), progress)
  stats = monte_carlo.streaming_stats(stream, m, sigma, eps)
  progress.finish()
  mean, se = stats.mean_and_se(m)
  verified = mean <= dv
  output = release() if (verified and release is not None) else None
  return verification.VerificationResult(
      verified=bool(verified), epsilon=eps, delta=d, delta_verify=dv,
      noise_multiplier=sigma, delta_hat=mean, standard_error=se,
      num_tail_samples=stats.num_tail, num_samples=m,
      required_num_samples=need,
      failure_probability=verification.verification_failure_probability(m, dv, d),
      output=output)
