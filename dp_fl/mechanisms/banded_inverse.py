"""Banded-inverse Toeplitz DP-FTRL: C⁻¹ banded (BISR, and BandInvMF optimized).

Kalinin, McKenna, Upadhyay and Lampert (ICLR 2026, arXiv 2505.12128).
Where BandMF and BSR make C banded, these make its inverse banded: C⁻¹ = LtToep(ĉ) with only
p coefficients ĉ_0, …, ĉ_{p−1}, so the noise of round t is C⁻¹'s band applied to the last p
fresh Gaussians (paper 004, Eq. 1 and 4):

    (C⁻¹ Z)_t = Σ_{j<p} ĉ_j z_{t−j}                        (p − 1 buffers, any n),

while C = LtToep(c), c(x) = 1 / ĉ(x), is dense (materialized only by tests).

- **BISR** ("bisr"): ĉ = the first p coefficients of A^(−1/2) = LtToep(q), q the series of
  (1 − x)^(1/2): q_0 = 1, q_j = q_{j−1} (j − 3/2) / j (−1/2, −1/8, −1/16, −5/128, …).
  Closed form, no optimization.
- **BandInvMF** ("bandinvmf"): ĉ_1, …, ĉ_{p−1} optimized (ĉ_0 = 1; the scale of C does not
  change the losses) for RmsLoss or MaxLoss under Π(b, k) (paper 004, Eqs. 9–10), by L-BFGS-B
  from the BISR coefficients with analytic gradients (`_loss_and_gradient`).

Sensitivity under Π(b, k) (Eq. 5 of paper 004): from c alone, never a dense C.
- If c_0 >= c_1 >= … >= c_{n−1} >= 0 (checked on the coefficients computed by the recurrence
  c_t = −Σ_{j=1}^{p−1} ĉ_j c_{t−j} / ĉ_0, whose terms for BISR are all non-negative), Thm 3.1
  of paper 004 gives it exactly: ||C u(π*)||, π* = (0, b, …, (k−1) b). For BISR the weights
  −q_j are log-convex, so c is non-negative and, except possibly past the band, non-increasing.
- Otherwise the Remark 3.2 value ||C u(π*)|| is only a lower bound: it is reported as such,
  with a valid upper bound from the autocorrelation of |c|
  (`sensitivity.toeplitz_sensitivity_bounds`), which every privacy guarantee uses.

Errors (paper 004, Prop. 3.3): B = A C⁻¹ = LtToep(b) with b_s = Σ_{u<=s} ĉ_u (constant past the
band), so the squared error of query t is Σ_{s<=t} b_s²: O(n), exact.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

import numpy as np
import scipy.signal
import scipy.special

from dp_fl import _checks
from dp_fl import resources
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import optimize
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import streaming
from dp_fl.mechanisms import toeplitz

BISR = "bisr"
BANDINVMF = "bandinvmf"
# Below this many rounds a C whose coefficients break Thm 3.1 gets its sensitivity from the
# dense C too (exact search, or the tighter row-by-row bound: ~0.3 s and 34 MB at n = 2052).
DENSE_SENSITIVITY_MAX_ROUNDS = 4096
_LOSSES = ("max", "rms")


def inverse_sqrt_a_coefficients(bands: int) -> np.ndarray:
  """q_j, j < bands: the series of (1 − x)^(1/2), i.e. A^(−1/2) = LtToep(q) (A = LtToep(1, 1,
  …) has A⁻¹ = LtToep(1, −1)); q_0 = 1 and q_j = q_{j−1} (j − 3/2) / j < 0 for j >= 1."""
  bands = _checks.check_positive_int("bands", bands)
  j = np.arange(1, bands)
  return np.concatenate([[1.0], np.cumprod((j - 1.5) / j)])


def strategy_coefficients(inverse_coef: np.ndarray, n: int) -> np.ndarray:
  """c_0..c_{n−1} of C = (C⁻¹)⁻¹ for C⁻¹ = LtToep(ĉ) banded: the recurrence
  c_t = (δ_t − Σ_{j=1}^{p−1} ĉ_j c_{t−j}) / ĉ_0, evaluated in order (O(n p)). Not finite when
  ĉ(x) has a root well inside the unit disk (C grows geometrically): callers check."""
  impulse = np.zeros(n)
  impulse[0] = 1.0
  with np.errstate(over="ignore", invalid="ignore"):
    return scipy.signal.lfilter([1.0], inverse_coef, impulse)


@dataclasses.dataclass(frozen=True)
class BandedInverseSetting:
  """What a BandInvMF was optimized for: n, b, k, the loss."""
  rounds: int
  min_sep: int
  max_participations: int
  optimize_for: str

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


class BandedInverseMechanism(catalog.Mechanism):
  """C⁻¹ = LtToep(ĉ_0, …, ĉ_{p−1}) banded (module docstring); `name` is "bisr" or
  "bandinvmf"."""

  def __init__(self, name: str, inverse_coef: Any,
               setting: Optional[BandedInverseSetting] = None):
    if name not in _DESCRIPTIONS:
      raise ValueError(f"`name` must be one of {tuple(_DESCRIPTIONS)}; got {name!r}.")
    self.name = name
    self.description = _DESCRIPTIONS[name]
    self.noise = streaming.BandedInverseStreamingNoise(inverse_coef, name)  # Validates ĉ.
    self.inverse_coef = self.noise.inverse_coef
    self.setting = setting

  @property
  def bands(self) -> int:
    return self.noise.bands

  def coef(self, rounds: int) -> np.ndarray:
    """c_0..c_{n−1}, the first column of C (dense Toeplitz); refused when not finite."""
    return self._coef(self.check_rounds(rounds))

  def _coef(self, n: int) -> np.ndarray:
    c = strategy_coefficients(self.inverse_coef, n)
    if not np.all(np.isfinite(c)):
      t = int(np.flatnonzero(~np.isfinite(c))[0])
      raise ValueError(
          f"This {self.name}'s C = (C⁻¹)⁻¹ overflows within n={n} rounds (c_{t} is not "
          f"finite): C⁻¹'s band {self.inverse_coef.tolist()[:8]} has a root inside the unit "
          "disk, so C grows geometrically and its sensitivity is unbounded. Use a band whose "
          "polynomial has no root of modulus < 1 (e.g. BISR's, or one built by "
          "scripts/mechanism).")
    return c

  def decoder_coef(self, rounds: int) -> np.ndarray:
    """b_s = Σ_{u<=s} ĉ_u, s < n: B = A C⁻¹ = LtToep(b)."""
    n = self.check_rounds(rounds)
    padded = np.zeros(n)
    p = min(self.bands, n)
    padded[:p] = self.inverse_coef[:p]
    return np.cumsum(padded)

  def sensitivity(self, rounds, min_sep, max_participations):
    n = self.check_rounds(rounds)
    min_sep = _checks.check_positive_int("min_sep", min_sep)
    k, _ = sensitivity_lib.feasible_participations(n, min_sep, max_participations)
    c = self._coef(n)
    if np.all(c >= 0) and np.all(np.diff(c) <= 0):
      value = sensitivity_lib.toeplitz_sensitivity(c, min_sep, k)
      return catalog.Sensitivity(value, catalog.EXACT,
                                 "Thm 3.1 (C = (C⁻¹)⁻¹ non-negative, non-increasing; checked)")
    lower, upper = sensitivity_lib.toeplitz_sensitivity_bounds(c, min_sep, k)
    upper_method = sensitivity_lib.METHOD_TOEPLITZ_UPPER_BOUND
    if n <= DENSE_SENSITIVITY_MAX_ROUNDS:
      # Small enough for the dense C: the exact search where CᵀC >= 0 (C >= 0) and it fits its
      # budget, else the row-by-row |CᵀC| bound; the tighter valid bound is kept.
      certified = sensitivity_lib.certified_sensitivity(toeplitz.dense(c), min_sep, k)
      if certified.kind == sensitivity_lib.EXACT:
        return catalog.Sensitivity(certified.value, catalog.EXACT, certified.method)
      if certified.value < upper:
        upper, upper_method = certified.value, certified.method
    return catalog.bracketed(
        lower, sensitivity_lib.METHOD_TOEPLITZ_LOWER_BOUND + " (C's coefficients are not "
        "non-negative and non-increasing, so Thm 3.1 does not apply)", upper, upper_method)

  def per_query_squared_error(self, rounds):
    b = self.decoder_coef(rounds)
    return np.cumsum(b * b)

  def streaming_noise(self, rounds=None):
    if rounds is not None:
      self.check_rounds(rounds)
    return self.noise

  def lower_triangular_input(self, rounds):
    return {"toeplitz_coefs": self.coef(rounds)}

  def to_dict(self) -> dict[str, Any]:
    return {"mechanism": self.name, "inverse_coef": self.inverse_coef.tolist(),
            "setting": None if self.setting is None else self.setting.to_dict()}


_DESCRIPTIONS = {
    BISR: "banded inverse square root (BISR) DP-FTRL, C⁻¹ = the p-banded A^(−1/2)",
    BANDINVMF: "BandInvMF DP-FTRL, C⁻¹ banded Toeplitz optimized for (n, b, k)",
}


def _from_dict(name: str):
  def restore(data: Mapping[str, Any]) -> BandedInverseMechanism:
    if "inverse_coef" not in data:
      raise ValueError(f"{name} parameters need 'inverse_coef' (the band ĉ_0..ĉ_(p−1) of "
                       f"C⁻¹); got keys {sorted(data)}.")
    setting = data.get("setting")
    if setting is not None:
      fields = {f.name for f in dataclasses.fields(BandedInverseSetting)}
      if not isinstance(setting, Mapping) or set(setting) != fields:
        raise ValueError(f"`setting` of {name} parameters must be null or an object with "
                         f"exactly the keys {sorted(fields)}; got {setting!r}.")
      setting = BandedInverseSetting(**setting)
    return BandedInverseMechanism(name, data["inverse_coef"], setting)
  return restore


# ---------------------------------------------------------------------------------------
# BandInvMF: the band of C⁻¹ optimized for MaxLoss or RmsLoss under Π(b, k).


def _loss_and_gradient(free: np.ndarray, n: int, min_sep: int, k: int, loss: str
                       ) -> tuple[float, np.ndarray]:
  """log(sens²) + log(err²) of C⁻¹ = LtToep(1, free) and its gradient in `free`.

  sens² = ||c̄||², c̄ = P c the Thm 3.1 participation sum of c = 1/ĉ (the Remark 3.2 value:
  exact when c is non-negative and non-increasing); ∂c_t/∂ĉ_j = −(c ∗ c)_{t−j} (from
  ∂(1/ĉ)/∂ĉ_j = −x^j / ĉ²), so ∂sens²/∂ĉ_j = −2 Σ_t (Pᵀc̄)_t (c ∗ c)_{t−j}. err² = Σ_s w_s b_s²
  with b = cumsum(ĉ) and w_s = 1 (MaxError², the last query) or (n − s)/n (RmsError²), so
  ∂err²/∂ĉ_j = 2 Σ_{s>=j} w_s b_s.
  """
  p = free.size + 1
  inverse = np.concatenate([[1.0], free])
  c = strategy_coefficients(inverse, n)
  participation = sensitivity_lib.participation_sum(c, min_sep, k)
  sens2 = float(np.dot(participation, participation))
  padded = np.zeros(n)
  padded[:min(p, n)] = inverse[:n]
  b = np.cumsum(padded)
  weights = np.ones(n) if loss == "max" else (n - np.arange(n)) / n
  err2 = float(np.dot(weights, b * b))
  if not (sens2 > 0 and err2 > 0 and math.isfinite(sens2) and math.isfinite(err2)):
    return math.inf, np.zeros_like(free)
  adjoint = sensitivity_lib.participation_adjoint(participation, min_sep, k)
  cc = scipy.signal.fftconvolve(c, c)[:n]
  # Σ_t adjoint[t] cc[t − j] for the lags j = 1..p−1 (zero for j >= n).
  inside = min(p, n)
  correlation = scipy.signal.correlate(adjoint, cc, mode="full")[n - 1:]  # Lags 0..n−1.
  d_sens2 = np.zeros(p - 1)
  d_sens2[:inside - 1] = -2.0 * correlation[1:inside]
  tail = np.cumsum((weights * b)[::-1])[::-1]  # tail[j] = Σ_{s>=j} w_s b_s.
  d_err2 = np.zeros(p - 1)
  d_err2[:inside - 1] = 2.0 * tail[1:inside]
  return math.log(sens2) + math.log(err2), d_sens2 / sens2 + d_err2 / err2


def _band_from_params(params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(ĉ_1..ĉ_{p−1}, ∂ĉ/∂params) of the optimizer's parameters (v, u_1..u_{p−1}):
  ĉ_j = −σ(v) softmax(u)_j, so every ĉ_j < 0 and Σ_j |ĉ_j| = σ(v) < 1. On this set c = 1/ĉ
  is the renewal sequence c_t = Σ_j |ĉ_j| c_{t−j}: positive and bounded (C ≥ 0), as BISR's."""
  v, u = params[0], params[1:]
  scale = scipy.special.expit(v)
  weights = scipy.special.softmax(u)
  band = -scale * weights
  jacobian = np.empty((u.size, params.size))
  jacobian[:, 0] = -scale * (1.0 - scale) * weights
  jacobian[:, 1:] = -scale * (np.diag(weights) - np.outer(weights, weights))
  return band, jacobian


def _params_from_band(band: np.ndarray) -> np.ndarray:
  total = float(np.sum(-band))
  return np.concatenate([[scipy.special.logit(total)], np.log(-band / total)])


def _objective(params: np.ndarray, n: int, min_sep: int, k: int, loss: str
               ) -> tuple[float, np.ndarray]:
  band, jacobian = _band_from_params(params)
  value, gradient = _loss_and_gradient(band, n, min_sep, k, loss)
  return value, gradient @ jacobian


def optimize_banded_inverse(n: int, min_sep: int, max_participations: int, bands: int,
                            loss: str = "rms", *, max_iterations: int = 1000
                            ) -> BandedInverseMechanism:
  """BandInvMF: ĉ_1..ĉ_{p−1} (ĉ_0 = 1) minimizing MaxLoss or RmsLoss (paper 004, Eqs. 9–10,
  with the Thm 3.1 sensitivity of C = 1/ĉ) under Π(b, k) for n rounds, from BISR's band.

  The search keeps C⁻¹'s off-diagonal band negative with Σ_j |ĉ_j| < 1, as BISR's
  (`_band_from_params`), so C stays non-negative. The returned mechanism's `sensitivity` is
  computed afresh, with Thm 3.1's conditions checked (module docstring): if the optimum breaks
  them, its sensitivity is reported as bounds. Never worse in the optimized loss than BISR
  (kept if the search does not improve on it).
  """
  n = _checks.check_positive_int("n", n)
  min_sep = _checks.check_positive_int("min_sep", min_sep)
  bands = _checks.check_positive_int("bands", bands)
  if loss not in _LOSSES:
    raise ValueError(f"`loss` must be one of {_LOSSES}; got {loss!r}.")
  k, _ = sensitivity_lib.feasible_participations(n, min_sep, max_participations)
  p = min(bands, n)
  setting = BandedInverseSetting(n, min_sep, k, loss)
  bisr = BandedInverseMechanism(BANDINVMF, inverse_sqrt_a_coefficients(p), setting)
  if p == 1:
    return bisr
  params, _ = optimize.minimize_lbfgsb(
      _objective, _params_from_band(bisr.inverse_coef[1:]),
      optimize.LbfgsbOptions(max_iterations, ftol=1e-14, gtol=1e-10), args=(n, min_sep, k, loss))
  band, _ = _band_from_params(params)
  optimized = BandedInverseMechanism(BANDINVMF, np.concatenate([[1.0], band]), setting)
  # The search minimizes Thm 3.1's value, a lower bound where c is not monotone: the two
  # candidates are compared on the loss at their guaranteed sensitivities.
  return min((optimized, bisr), key=lambda m: _guaranteed_loss(m, n, min_sep, k, loss))


def _guaranteed_loss(mechanism: BandedInverseMechanism, n: int, min_sep: int, k: int,
                     loss: str) -> float:
  errors = mechanism.per_query_squared_error(n)
  error = math.sqrt(float(errors[-1] if loss == "max" else np.mean(errors)))
  return mechanism.sensitivity(n, min_sep, k).guaranteed * error


def build_bisr(options: catalog.BuildOptions) -> tuple[BandedInverseMechanism, tuple[str, ...]]:
  """BISR with p = `catalog.bands_for(options)` bands (default min(b, n)): closed form (the
  loss and k do not change it)."""
  bands, notes = catalog.bands_for(options)
  return BandedInverseMechanism(BISR, inverse_sqrt_a_coefficients(bands)), notes


def build_bandinvmf(options: catalog.BuildOptions
                    ) -> tuple[BandedInverseMechanism, tuple[str, ...]]:
  """BandInvMF with p = `catalog.bands_for(options)` bands (default min(b, n)), optimized
  for `options.optimize_for`."""
  bands, notes = catalog.bands_for(options)
  return (optimize_banded_inverse(options.rounds, options.min_sep, options.max_participations,
                                  bands, options.optimize_for), notes)


def _evaluation_cost(rounds: int) -> resources.Estimate:
  """c by its recurrence (O(n p), at worst p = n), the participation sum, b and the errors: a
  few length-n arrays; the upper bound's autocorrelation O(n²) below 8192 rounds, FFT above."""
  n = float(rounds)
  return resources.Estimate(f"evaluating a banded-inverse C for n={rounds} rounds",
                            96.0 * n + 1e6, 2e-9 * n * n + 1e-9 * min(n, 8192.0) ** 2,
                            "~96 n bytes, at most ~2e-9 n² s")


def _optimization_cost(options: catalog.BuildOptions) -> resources.Estimate:
  """Up to 1000 L-BFGS-B steps, each the recurrence for c (O(n p)) and a few FFTs of length
  2n (measured: 2.7–4.3 s for n = 2052, p = 342 on two cores)."""
  n = options.rounds
  p, _ = catalog.bands_for(options)
  seconds = 1.0 + 1000 * (2e-9 * n * p + 5e-8 * n * math.log2(n + 1))
  return resources.Estimate(f"optimizing a {p}-band BandInvMF for n={n} rounds",
                            200.0 * n + 1e6, seconds, "~200 n bytes")


catalog.register(catalog.Family(BISR, _DESCRIPTIONS[BISR], build_bisr, _from_dict(BISR),
                                evaluation_cost=_evaluation_cost, knobs="bands"))
catalog.register(catalog.Family(BANDINVMF, _DESCRIPTIONS[BANDINVMF], build_bandinvmf,
                                _from_dict(BANDINVMF), build_cost=_optimization_cost,
                                evaluation_cost=_evaluation_cost,
                                default_optimize_for="rms",  # The paper's objective.
                                knobs="bands"))
