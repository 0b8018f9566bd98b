"""BLT sensitivity, MaxError and RmsError in closed form: cost independent of n.

Paper 004 ("A Hassle-free Algorithm for Private Learning in Practice"): the
losses of Alg. 4 -- the min-sep sensitivity of Thm. 3.1 and the errors of
Prop. 3.3 -- for a d-buffer C = BLT(theta, omega) (Eq. 2), evaluated without
materializing the n Toeplitz coefficients, in O(k d^2) time (O(d^2) for the
errors) and memory bounded by CHUNK_ELEMENTS, with analytic gradients for the
optimizer of Sec. 3.3 (`blt_optimize.optimize_blt`). The same losses on length-n
arrays are the test oracles (`blt_loss_from_gaps`, `blt_evaluate_materialized` in
tests/mechanisms/oracles.py).

Notation: lambda_j = -log(theta_j) >= 0, so theta_j^u = exp(-u lambda_j) and a
product theta_j theta_l has lambda_j + lambda_l; g = 1 - theta are the gaps,
g_hat = 1 - theta_hat those of C^{-1} = BLT(theta_hat, omega_hat). For an
integer N >= 0 and rho = exp(-lambda) the moment sums

    S(N) = sum_{u<N} rho^u,   U(N) = sum_{u<N} u rho^u,   W(N) = sum_{u<N} u^2 rho^u

are evaluated by `_moments` (dS/dlambda = -U, dU/dlambda = -W); every loss
below is a combination of them with non-negative terms.

Sensitivity (Thm. 3.1). sens^2 = ||c_bar||^2, c_bar = sum_{i<k} shift_{ib}(c)
on t < n (k <= ceil(n/b), so every shift starts inside [0, n)). Split
c = e_0 + c' with c'_0 = 0, c'_s = sum_j omega_j theta_j^(s-1) (s >= 1). The
e_0 parts put a 1 at each t = ib (k in total); their cross term with c' is
sum_{m=1}^{k-1} (k-m) c'_{mb}; shifts i <= i' of c' overlap on
s = 1..n-1-i'b with products c'_{s+(i'-i)b} c'_s, a geometric sum in
theta_j theta_l times theta_j^((i'-i)b). Summing over i <= i' (the diagonal
once, i < i' twice), with tau_j = theta_j^b and N_i' = n - 1 - i'b:

    sens^2 = k + 2 sum_j omega_j E_j
               + sum_{j,l} omega_j omega_l sum_{i'<k} a_j(i') S_{theta_j theta_l}(N_i'),
    E_j     = sum_{m=1}^{k-1} (k-m) theta_j^(mb-1) = theta_j^(b-1) sum_{i'<k} S_{tau_j}(i'),
    a_j(i') = 1 + 2 sum_{m=1}^{i'} tau_j^m = 1 + 2 tau_j S_{tau_j}(i').

Every term is >= 0 for theta in (0, 1], omega >= 0, so the sum has no
cancellation. Cost O(k d^2), in chunks of lags i' (`_Chunk`).

Errors (Prop. 3.3). b_s = sum_{u<=s} c_hat_u, the coefficients of B = A C^{-1},
have the generating function P_C(x) / ((1 - x) P_hat(x)) with
P_C(x) = prod_i (1 - theta_i x) and P_hat(x) = prod_i (1 - theta_hat_i x)
(C has P_hat / P_C; Lemma 5.2 of Dvijotham et al.). Its partial fractions give

    b_s = beta_0 + sum_j beta_j theta_hat_j^s,
    beta_0 = P_C(1) / P_hat(1) = prod_i g_i / g_hat_i,   beta_j = -omega_hat_j / g_hat_j,

and with the interlacing 0 < theta_hat_1 < theta_1 < ... (omega > 0), Alg. 5's
sign pattern gives omega_hat_j < 0, i.e. beta_j > 0: b_s is a positive sum of
decaying exponentials (b_0 = sum beta = 1). With theta_hat_0 = 1
(lambda_hat_0 = 0) for beta_0, and T(N) = sum_{u<N} (N-u) rho^u = N S - U,

    MaxError^2 = sum_{s<n} b_s^2 = sum_{j,l=0}^{d} beta_j beta_l S_{theta_hat_j theta_hat_l}(n),
    RmsError^2 = (1/n) sum_{s<n} (n-s) b_s^2 = (1/n) sum_{j,l=0}^{d} beta_j beta_l T_{..}(n),

again sums of non-negative terms (the expansion of b_s = 1 + sum_j omega_hat_j
(1 - theta_hat_j^s) / g_hat_j instead would cancel catastrophically once b_s
is far below 1). Cost O(d^2).

Stable moments (`_moments`). With x = N lambda,
beta1(z) = 1/z - 1/(e^z - 1), gamma1(z) = -beta1'(z), kappa(z) = 1/(e^z - 1)
and kappa2 = kappa (1 + kappa):

    S = (1 - e^-x) / (1 - e^-lambda),
    U = S Delta,  Delta = N beta1(x) - beta1(lambda) = kappa(lambda) - N kappa(x),
    W = S (Delta^2 + N^2 gamma1(x) - gamma1(lambda))
      = S (Delta^2 + kappa2(lambda) - N^2 kappa2(x))

(-dlog S/dlambda = Delta; the two forms of Delta and of the variance
W/S - Delta^2 agree because N/x = 1/lambda). 1 - e^-z comes from expm1;
beta1 and gamma1 from their Bernoulli series (z/(e^z - 1) = sum_m B_m z^m/m!)
below z = 1/2 and from 1/z - kappa, 1/z^2 - kappa2 above. z beta1(z) and
z^2 gamma1(z) increase with z, so for lambda < log 2 the beta1 and gamma1
differences lose at most a factor ~2.3 and 4/3 (N >= 2; N = 0 and 1 give 0
exactly) -- unlike the textbook forms such as
sum_{u<N} (N-1-u) rho^u = (N - S)/(1 - rho), which lose ~8 digits at
lambda = 1e-11, N = 2000. For lambda >= log 2 (rho <= 1/2) the kappa forms
lose at most a factor 3 (variance: ~10) and are used instead. T = N S - U and
V = N U - W (= -dT/dlambda) lose at most a factor 2 and 3, as the weights
u rho^u are non-increasing. Relative accuracy: a few ulp for every N and every
lambda >= 0 (theta = 1 included).

Gradients (`objective`). The optimizer's parameters are the interleaved gaps
z = (g_hat_1, g_1, ..., g_hat_d, g_d). Alg. 5 in gap coordinates is a sum of
logarithms: with sign = (+1, -1, +1, ...) and v_a = sum_{b != a} sign_b
log|z_b - z_a|, v[1::2] = log omega and v[0::2] = -log|omega_hat|, so
log beta_j = -v[2j] - log g_hat_j and log beta_0 = -sum_a sign_a log z_a. The
gradient is the adjoint of the formulas above (d/dlambda of S and U are -U and
-W, of powers -exponent * power) chained through these logarithms; like the
materialized gradient it loses relative precision only where Alg. 5 does, in
1/(z_b - z_a) for near-equal decays.

Evaluations are batched: `objective_in_logits` takes B points at once (the
optimizer's candidates, advanced together), for the cost of about one. Every
row's result is bitwise the one it gets alone (elementwise ufuncs and
reductions along fixed axes only; no BLAS, whose kernels depend on the
alignment of each row), so batching never changes an optimizer's run.
"""

from __future__ import annotations

import fractions
import functools
import math

import numpy as np
from scipy.special import expit as scipy_expit

# lambda below which the Delta forms are used (rho >= 1/2), and the argument
# below which beta1, gamma1 come from their series.
_LAMBDA_SPLIT = math.log(2.0)
_SERIES_SPLIT = 0.5
_R1_SPLIT = -math.expm1(-_SERIES_SPLIT)
# |B_2p|/(2p)! ~ 2 (2 pi)^-2p: the 9th term is < 1e-18 relative at z = 1/2.
_SERIES_TERMS = 9
# z is clamped below at this (not subnormal) value: phi, beta1, gamma1 keep their
# z -> 0 limits, and N = 0 still gives S = U = W = 0 exactly.
_TINY = 1e-300
# Elements (pairs of buffers x participation lags) evaluated at once.
CHUNK_ELEMENTS = 8192


def _bernoulli_even(count: int) -> list[fractions.Fraction]:
  """B_2, B_4, ..., B_{2 count} (exact), from sum_j C(m+1, j) B_j = 0."""
  b = [fractions.Fraction(1)]
  for m in range(1, 2 * count + 1):
    b.append(-sum(math.comb(m + 1, j) * b[j] for j in range(m)) / (m + 1))
  return [b[2 * p] for p in range(1, count + 1)]


def _series_coefficients() -> np.ndarray:
  """(2, terms): beta1(z) = 1/2 - z sum_p row0[p] z^2p, gamma1(z) = sum_p row1[p] z^2p."""
  out = np.empty((2, _SERIES_TERMS))
  for p, b2p in enumerate(_bernoulli_even(_SERIES_TERMS), start=1):
    out[0, p - 1] = float(b2p / math.factorial(2 * p))
    out[1, p - 1] = float(b2p * (2 * p - 1) / math.factorial(2 * p))
  out.setflags(write=False)
  return out


_COEF = _series_coefficients()
_POWERS = np.arange(_SERIES_TERMS, dtype=np.float64)[:, None]
_POWERS.setflags(write=False)


def _moments(lam: np.ndarray, counts: np.ndarray, want_w: bool) -> np.ndarray:
  """[S, U] (or [S, U, W]) = sum_{u<N} (1, u, u^2) e^{-lambda u} elementwise, stacked.

  `lam` (..., m) >= _TINY (lambda = 0, theta = 1, is passed as _TINY: its limit)
  and integer-valued `counts` N >= 0 of shape (m,); returns (..., 2, m) or
  (..., 3, m). See the module docstring for the formulas and their accuracy
  (a few ulp, independent of N and of how close lambda is to 0).
  """
  m = lam.shape[-1]
  z = np.concatenate((counts * lam, lam), axis=-1)  # (x, lambda); x = 0 iff N = 0.
  mz = -z
  e = np.exp(mz)
  em1 = np.expm1(mz)  # -(1 - e^-z)
  zs = np.minimum(z, _SERIES_SPLIT)
  coef = _COEF if want_w else _COEF[:1]
  ser = np.add.reduce(coef[:, :, None] * ((zs * zs)[..., None, None, :] ** _POWERS), axis=-2)
  big = z >= _SERIES_SPLIT
  inv = 1.0 / np.maximum(z, _SERIES_SPLIT)
  # kappa = 1/(e^z - 1) where z >= 1/2 (bounded elsewhere: no overflow).
  kappa = e / np.maximum(-em1, _R1_SPLIT)
  beta1 = np.where(big, inv - kappa, 0.5 - zs * ser[..., 0, :])
  small = lam < _LAMBDA_SPLIT
  out = np.empty(lam.shape[:-1] + (3 if want_w else 2, m))
  s = out[..., 0, :]
  np.divide(em1[..., :m], em1[..., m:], out=s)  # (1 - e^-x) / (1 - e^-lambda)
  # Delta = U / S = N beta1(x) - beta1(lambda) = kappa(lambda) - N kappa(x).
  delta = np.where(small, counts * beta1[..., :m] - beta1[..., m:],
                   kappa[..., m:] - counts * kappa[..., :m])
  np.multiply(s, delta, out=out[..., 1, :])
  if want_w:
    # W / S - Delta^2 = N^2 gamma1(x) - gamma1(lambda) = kappa2(lambda) - N^2 kappa2(x),
    # kappa2 = kappa (1 + kappa) = 1/z^2 - gamma1(z).
    kappa2 = kappa + kappa * kappa
    gamma1 = np.where(big, inv * inv - kappa2, ser[..., 1, :])
    n2 = counts * counts
    var = np.where(small, n2 * gamma1[..., :m] - gamma1[..., m:],
                   kappa2[..., m:] - n2 * kappa2[..., :m])
    np.multiply(s, delta * delta + var, out=out[..., 2, :])
  return out


# ---------------------------------------------------------------------------
# Layout: which (lambda, N) pairs one evaluation needs, fixed per (n, b, k, d).


class _Chunk:
  """Participation lags i' in [start, stop) for d buffers, flat, in three blocks.

  Block "pairs" (lags, d, d): N = n - 1 - i' b at lambda_j + lambda_l; block
  "taus" (lags, d): N = i' at b lambda_j; block "errors" ((d+1)^2, first chunk
  only): N = n at lambda_hat_j + lambda_hat_l with lambda_hat_0 = 0.
  """

  def __init__(self, n, min_sep, start, stop, d, with_error):
    lags = np.arange(start, stop, dtype=np.float64)
    c = stop - start
    self.size = c
    self.pairs = c * d * d
    self.taus = self.pairs + c * d  # End of the taus block.
    self.total = self.taus + ((d + 1) ** 2 if with_error else 0)
    self.with_error = with_error
    counts = np.empty(self.total)
    counts[:self.pairs].reshape(c, d, d)[...] = (n - 1.0 - lags * min_sep)[:, None, None]
    counts[self.pairs:self.taus].reshape(c, d)[...] = lags[:, None]
    counts[self.taus:] = float(n)
    counts.setflags(write=False)
    self.counts = counts
    self.sens_counts = counts[:self.taus]


class _Workspace:
  """Per-d constants: signs (+1, -1, ...), the 0/1 mask of the g entries, the
  2d x 2d identity, and the chunks of lags."""

  def __init__(self, pl: "Plan", d: int):
    self.sign = np.tile([1.0, -1.0], d)
    self.mask = (1.0 - self.sign) / 2.0
    self.eye = np.eye(2 * d)
    per = max(1, CHUNK_ELEMENTS // (d * d + d))
    self.chunks = tuple(
        _Chunk(pl.n, pl.min_sep, s, min(s + per, pl.k), d, with_error=s == 0)
        for s in range(0, pl.k, per))
    for a in (self.sign, self.mask, self.eye):
      a.setflags(write=False)


class Plan:
  """Everything of one evaluation that depends only on (n, b, k): reused per call.

  k must already be feasible (k <= ceil(n / b); `sensitivity.feasible_participations`).
  """

  def __init__(self, n: int, min_sep: int, k: int):
    if not (n >= 1 and min_sep >= 1 and 1 <= k and (k - 1) * min_sep <= n - 1):
      raise ValueError(
          f"closed-form BLT losses need n >= 1, min_sep >= 1 and 1 <= k <= "
          f"ceil(n / min_sep); got n={n}, min_sep={min_sep}, k={k}.")
    self.n, self.min_sep, self.k = int(n), int(min_sep), int(k)
    self._workspaces: dict[int, _Workspace] = {}

  def workspace(self, d: int) -> _Workspace:
    found = self._workspaces.get(d)
    if found is None:
      found = self._workspaces[d] = _Workspace(self, d)
    return found


@functools.lru_cache(maxsize=32)
def plan(n: int, min_sep: int, k: int) -> Plan:
  """The (cached) `Plan` of (n, b, k)."""
  return Plan(n, min_sep, k)


def _fill_sensitivity_lambdas(chunk: _Chunk, lam: np.ndarray, min_sep: int) -> np.ndarray:
  """(B, chunk.total) lambdas of the pairs and taus blocks (errors block left empty)."""
  batch, d = lam.shape
  out = np.empty((batch, chunk.total))
  out[:, :chunk.pairs].reshape(batch, chunk.size, d, d)[...] = (
      lam[:, None, :, None] + lam[:, None, None, :])
  np.multiply(min_sep, lam[:, None, :],
              out=out[:, chunk.pairs:chunk.taus].reshape(batch, chunk.size, d))
  return out


# ---------------------------------------------------------------------------
# The two halves of the loss, given their moments (leading axis: the batch).


def _sensitivity_part(chunk: _Chunk, su: np.ndarray, omega: np.ndarray,
                      tau: np.ndarray, pow_b1: np.ndarray, min_sep: int,
                      want_grad: bool):
  """The chunk's share of sens^2 - k, and of its d/domega and d/dlambda if asked.

  With F_jl = sum_i' a_j(i') S_jl(N_i'), G_jl = sum_i' a_j(i') U_jl(N_i') and
  A'_jl = sum_i' (d a_j(i')/d lambda_j) S_jl(N_i') (module docstring):
  share = 2 omega.E + omega.F omega, d/domega = 2E + (F + F^T) omega,
  d/dlambda = omega (2 dE/dlambda + A' omega - (G + G^T) omega).
  """
  batch, d = omega.shape
  c = chunk.size
  taus = su[:, :, chunk.pairs:chunk.taus].reshape(batch, su.shape[1], c, d)
  weights = np.empty((batch, 2, c, d, 1))
  a = weights[:, 0, :, :, 0]
  np.multiply((2.0 * tau)[:, None, :], taus[:, 0], out=a)
  a += 1.0
  sums = np.add.reduce(taus, axis=2)
  e2 = 2.0 * pow_b1 * sums[:, 0]  # 2 E
  if not want_grad:
    f = np.add.reduce(weights[:, 0] * su[:, 0, :chunk.pairs].reshape(batch, c, d, d),
                      axis=1)
    g_omega = e2 + np.add.reduce(f * omega[:, None, :], axis=2)
    return np.add.reduce(omega * g_omega, axis=1), None, None
  np.add(taus[:, 0], taus[:, 1], out=weights[:, 1, :, :, 0])
  weights[:, 1] *= ((-2.0 * min_sep) * tau)[:, None, :, None]
  # r[:, p, q] = sum_i' weights[p] * moment[q] of the pairs: F, G (p = 0), A' (p = 1).
  r = np.add.reduce(
      weights[:, :, None] * su[:, None, :2, :chunk.pairs].reshape(batch, 1, 2, c, d, d),
      axis=3)
  r_omega = np.add.reduce(r * omega[:, None, None, None, :], axis=-1)
  omega_r = np.add.reduce(r * omega[:, None, None, :, None], axis=-2)
  g_omega = e2 + r_omega[:, 0, 0]
  value = np.add.reduce(omega * g_omega, axis=1)
  d_omega = g_omega + omega_r[:, 0, 0]
  # 2 dE/dlambda = -(b - 1) 2E - 2 b theta^(b-1) sum_i' U_tau(i').
  d_lam = omega * ((1 - min_sep) * e2 - (2.0 * min_sep) * pow_b1 * sums[:, 1]
                   + r_omega[:, 1, 0] - r_omega[:, 0, 1] - omega_r[:, 0, 1])
  return value, d_omega, d_lam


def _error_part(su: np.ndarray, beta_t: np.ndarray, n: int, loss: str, want_grad: bool):
  """err^2 and, if asked, d/dbeta_tilde and d/dlambda_hat (module docstring).

  `su` (B, q, (d+1)^2) holds [S, U] (and W for 'rms' with the gradient) of the
  pairs (j, l) of lambda_hat_tilde.
  """
  batch, d1 = beta_t.shape
  mom = su.reshape(batch, su.shape[1], d1, d1)
  if loss == "max":
    m = mom[:, 0]
  else:
    m = mom[:, 0] - mom[:, 1] / n  # T / n = S - U / n
  m_beta = np.add.reduce(m * beta_t[:, None, :], axis=2)
  value = np.add.reduce(beta_t * m_beta, axis=1)
  if not want_grad:
    return value, None, None
  if loss == "max":
    dm = mom[:, 1, 1:]  # U = -dS/dlambda
  else:
    dm = mom[:, 1, 1:] - mom[:, 2, 1:] / n  # V / n = U - W / n = -d(T / n)/dlambda
  return value, 2.0 * m_beta, -2.0 * beta_t[:, 1:] * np.add.reduce(dm * beta_t[:, None, :], axis=2)


# ---------------------------------------------------------------------------
# Entry points.


def sensitivity_squared(n: int, min_sep: int, k: int, theta, omega) -> float:
  """sens^2 of BLT(theta, omega) under Pi(b, k) (Thm. 3.1), theta in (0, 1], omega >= 0.

  k must be feasible (<= ceil(n / b)). Thm. 3.1 needs c non-increasing
  (sum(omega) <= 1); the caller checks that.
  """
  theta = np.asarray(theta, dtype=np.float64)[None, :]
  omega = np.asarray(omega, dtype=np.float64)[None, :]
  lam = np.maximum(-np.log(theta), _TINY)
  tau = np.exp(-min_sep * lam)
  pow_b1 = np.exp(-(min_sep - 1) * lam)
  pl = plan(n, min_sep, k)
  total = float(pl.k)
  for chunk in pl.workspace(lam.shape[1]).chunks:
    lam_flat = _fill_sensitivity_lambdas(chunk, lam, min_sep)[:, :chunk.taus]
    su = _moments(lam_flat, chunk.sens_counts, False)
    total += float(_sensitivity_part(chunk, su, omega, tau, pow_b1, min_sep, False)[0][0])
  return total


def error_squared(n: int, lam_hat, beta_t) -> tuple[float, float]:
  """(MaxError^2, RmsError^2) from b_s = beta_0 + sum_j beta_j exp(-lam_hat_j s) (Prop. 3.3).

  `beta_t` = (beta_0, beta_1, ..., beta_d) >= 0, `lam_hat` > 0 of length d.
  """
  beta_t = np.asarray(beta_t, dtype=np.float64)[None, :]
  tilde = np.concatenate(([_TINY], np.asarray(lam_hat, dtype=np.float64)))
  lam = (tilde[:, None] + tilde).reshape(1, -1)
  su = _moments(lam, np.full(lam.size, float(n)), False)
  return (float(_error_part(su, beta_t, n, "max", False)[0][0]),
          float(_error_part(su, beta_t, n, "rms", False)[0][0]))


def _objective(z, theta_z, lam_z, log_z, pl, loss, penalty_strength, want_grad):
  """Batched `objective` given z, 1 - z, -log(1 - z) and log z (B, 2d), each
  accurate to a few ulp; rows must hold valid interlaced gaps."""
  batch, d2 = z.shape
  d = d2 // 2
  ws = pl.workspace(d)
  sign = ws.sign
  diff = z[:, None, :] - z[:, :, None]  # diff[:, a, b] = z_b - z_a
  diff += ws.eye
  v = np.add.reduce(np.log(np.abs(diff)) * sign, axis=2)
  omega = np.exp(v[:, 1::2])
  log_beta = np.empty((batch, d + 1))
  log_beta[:, 0] = np.add.reduce(log_z * sign, axis=1)
  np.add(v[:, 0::2], log_z[:, 0::2], out=log_beta[:, 1:])
  beta_t = np.exp(-log_beta)
  lam = lam_z[:, 1::2]
  min_sep = pl.min_sep
  tau = np.exp((-min_sep) * lam)
  pow_b1 = tau / theta_z[:, 1::2]
  sens_sq = float(pl.k)
  d_omega = d_lam = None
  for chunk in ws.chunks:
    lam_flat = _fill_sensitivity_lambdas(chunk, lam, min_sep)
    if chunk.with_error:
      tilde = np.empty((batch, d + 1))
      tilde[:, 0] = _TINY
      tilde[:, 1:] = lam_z[:, 0::2]
      lam_flat[:, chunk.taus:].reshape(batch, d + 1, d + 1)[...] = (
          tilde[:, :, None] + tilde[:, None, :])
      su = _moments(lam_flat, chunk.counts, want_grad and loss == "rms")
      err_sq, d_beta, d_lam_hat = _error_part(su[:, :, chunk.taus:], beta_t, pl.n,
                                              loss, want_grad)
    else:
      su = _moments(lam_flat[:, :chunk.taus], chunk.sens_counts, False)
    part, part_omega, part_lam = _sensitivity_part(chunk, su, omega, tau, pow_b1,
                                                   min_sep, want_grad)
    sens_sq = sens_sq + part
    if want_grad:
      d_omega = part_omega if d_omega is None else d_omega + part_omega
      d_lam = part_lam if d_lam is None else d_lam + part_lam
  sens = np.sqrt(sens_sq)
  err = np.sqrt(err_sq)
  value = sens * err
  # Barrier -(sum log theta + sum log g + sum log omega) over the g entries.
  obj = value + penalty_strength * np.add.reduce((lam_z - log_z - v) * ws.mask, axis=1)
  if not want_grad:
    return obj, value, sens, err, None
  cs = (err / (2.0 * sens))[:, None]
  ce = (sens / (2.0 * err))[:, None]
  l_beta = ce * d_beta * beta_t  # d objective / d log beta
  # Through lambda (dlambda/dz = 1/theta) ...
  direct = np.empty((batch, d2))
  direct[:, 1::2] = cs * d_lam + penalty_strength
  direct[:, 0::2] = ce * d_lam_hat
  # ... through log z (the barrier's -log g; log beta_0 = -sum sign log z,
  # log beta_j = log|omega_hat_j| - log g_hat_j) ...
  by_log = l_beta[:, :1] * -sign
  by_log[:, 1::2] -= penalty_strength
  by_log[:, 0::2] -= l_beta[:, 1:]
  # ... and through v (Alg. 5): l_v = d objective / d v, stacked over sign.
  stack = np.empty((batch, 2, d2))
  l_v = stack[:, 0]
  l_v[:, 1::2] = cs * d_omega * omega - penalty_strength
  l_v[:, 0::2] = -l_beta[:, 1:]
  stack[:, 1] = sign
  inv = 1.0 / diff
  inv -= ws.eye
  # adj[:, p] = stack[:, p] @ inv; inv is antisymmetric, so also inv @ sign = -adj[:, 1].
  adj = -np.add.reduce(stack[:, :, None, :] * inv[:, None, :, :], axis=3)
  grad = direct / theta_z + by_log / z + sign * adj[:, 0] + l_v * adj[:, 1]
  return obj, value, sens, err, grad


def objective(z: np.ndarray, pl: Plan, loss: str, penalty_strength: float,
              want_grad: bool = True):
  """Alg. 4's objective err * sens + penalty * barrier, and its gradient, in closed form.

  `z` holds the interleaved gaps (g_hat_1, g_1, ..., g_hat_d, g_d) with the
  interlacing that makes omega > 0 (buffers in any order); the barrier is
  -(sum log theta + sum log g + sum log omega) as in Alg. 4's oracle
  (tests/mechanisms/oracles.py, `blt_loss_from_gaps`).
  Returns (objective, err * sens, sens, err, d objective / d z or None).

  Alg. 5 in gap coordinates: with v_a = sum_{b != a} sign_b log|z_b - z_a| and
  sign = (+1, -1, ...), v[1::2] = log omega and v[0::2] = -log|omega_hat|, so
  beta_j = exp(-v[2j] - log g_hat_j) and log beta_0 = -sum_a sign_a log z_a;
  dv_a/dz_m = sign_m / (z_m - z_a) (m != a) and -sum_b sign_b / (z_b - z_a)
  (m = a).
  """
  z = np.asarray(z, dtype=np.float64)[None, :]
  obj, value, sens, err, grad = _objective(
      z, 1.0 - z, -np.log1p(-z), np.log(z), pl, loss, penalty_strength, want_grad)
  return (float(obj[0]), float(value[0]), float(sens[0]), float(err[0]),
          None if grad is None else grad[0])


def objective_in_logits(logits: np.ndarray, pl: Plan, loss: str,
                        penalty_strength: float):
  """`objective` of every row of z = 1/(1 + e^logits) (B, 2d), with its gradient
  w.r.t. the logits: (objective (B,), gradient (B, 2d)).

  The logits must increase along each row (z decreasing: g_hat_1 > g_1 >
  g_hat_2 > ...); rows where rounding makes two gaps equal, or the loss or its
  gradient is not finite, get objective inf and gradient 0. 1 - z = expit(logits),
  -log(1 - z) = log(1 + e^-logits) and log z are formed from the logits, so
  they keep full precision at both ends (z near 0 and near 1).
  """
  z = scipy_expit(-logits)
  valid = (z[:, -1] > 0.0) & np.logical_and.reduce(z[:, 1:] < z[:, :-1], axis=1)
  if not valid.all():
    obj = np.full(logits.shape[0], math.inf)
    grad = np.zeros(logits.shape)
    if valid.any():
      obj[valid], grad[valid] = objective_in_logits(logits[valid], pl, loss,
                                                    penalty_strength)
    return obj, grad
  theta_z = scipy_expit(logits)
  obj, _, _, _, grad = _objective(z, theta_z, np.logaddexp(0.0, -logits),
                                  -np.logaddexp(0.0, logits), pl, loss,
                                  penalty_strength, True)
  grad *= -z * theta_z
  finite = np.isfinite(obj) & np.logical_and.reduce(np.isfinite(grad), axis=1)
  if not finite.all():
    obj[~finite] = math.inf
    grad[~finite] = 0.0
  return obj, grad
