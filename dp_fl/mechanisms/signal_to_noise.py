"""How large the DP noise is against the clipped signal: the numbers behind the noise guard.

A private round releases the averaged update Δ̃ₜ = (Σᵢ clip(Δᵢ, ζ) + σζ (C⁻¹Z)ₜ) / m (paper 004,
Eq. 4; DP-FedAvg: C = I and m = qN, paper 001). The clipped part has norm at most ζ (all
clients agreeing); the noise part, d coordinates of std σζ‖(C⁻¹)ₜ‖/m, has norm about
σζ√d‖(C⁻¹)ₜ‖/m. Three ratios say whether a model can learn through it (paper 004, Sec. 5
plans with the RMS noise of the prefix sums; pfl-research's DP signal-to-noise metric is the
first of them):

* `round_noise`: the RMS over rounds of the noise norm of one averaged update, over ζ
  (√d σ rms_t ‖(C⁻¹)ₜ‖ / m). Above 1 the noise of a round exceeds anything the clients can
  say in it.
* `prefix_noise`: the noise norm in the sum of all n averaged updates over the largest signal
  that sum can have, nζ (√d σ ‖(A C⁻¹)ₙ‖ / (m n)): correlated noise cancels here, independent
  noise does not.
* `model_noise`: the noise norm the server optimizer leaves in the final model — with SGD,
  momentum β and rates ηₜ the model moves by Σₛ cₛ Δ̃ₛ, cₛ = Σ_{t≥s} ηₜ β^{t−s}, so its noise
  has norm σζ√d ‖cᵀ C⁻¹‖ / m — divided by the norm of the initial model: above about 1 the
  noise alone moves the model further than its own size, and a language model drifts to
  losses far above the unigram one.

All three are public functions of the configuration (σ, ζ, m, C, d, the server's schedule),
so stating or acting on them costs no privacy.

`MODEL_NOISE_LIMIT` and `PREFIX_NOISE_LIMIT` are where the noise guard
(`dp_fl/training/noise_guard.py`) and `scripts/plan` draw the line; they were read off
real-text runs (`scripts/noise_guard_limits.py`, docs/RESULTS.md "The noise guard").
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from dp_fl import _checks

# Model noise / ‖w₀‖: ≤ 7.1 learned, 8.1 stayed at unigram, ≥ 23.6 diverged.
MODEL_NOISE_LIMIT = 7.5
PREFIX_NOISE_LIMIT = 1.0  # Summed noise / nζ: beyond it the noise exceeds any signal.
DEGRADE_MODEL_NOISE = MODEL_NOISE_LIMIT / 2  # Where a run beyond the limits is scaled to:
# on the stdlib corpus it ended at 1.054× (Reddit) and 1.065× (StackOverflow) the unigram loss,
# against 1.12× and 1.13× when scaled to the limit itself; checked on manual pages: 1.077×
# (Reddit) and 1.043× (StackOverflow).
MARGINAL_MODEL_NOISE = 5.5  # Above it and within the limit, runs went either way: 7.07
# learned (StackOverflow DP-SGD, ζ = 0.3), 6.35 stayed below the unigram accuracy (Reddit
# DP-FedAvg on manual pages, 431 users).


# Suggestions (a cohort, an ε) aim at this fraction of each limit, not at the limit itself:
# followed to the limit, a Reddit run on manual pages ended at 7.34 below the unigram
# accuracy (docs/RESULTS.md); the runs that learned clearly had at most half of it.
SUGGESTED_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class SignalToNoise:
  """The noise-to-signal ratios of a planned run (module docstring).

  Attributes:
    round_noise: ‖noise of one averaged update‖ / ζ (RMS over rounds).
    prefix_noise: ‖noise in the sum of the n averaged updates‖ / (n ζ).
    model_noise: ‖noise left in the final model‖ / ‖initial model‖, or None when the server
      optimizer's response is not linear (Adam) or the initial norm is unknown.
    model_noise_norm: ‖noise left in the final model‖, or None (as above).
  """
  round_noise: float
  prefix_noise: float
  model_noise: Optional[float] = None
  model_noise_norm: Optional[float] = None


def momentum_weights(learning_rates: Sequence[float], momentum: float) -> np.ndarray:
  """cₛ = Σ_{t≥s} ηₜ β^{t−s}: how much of round s's update SGD with momentum β and rates ηₜ
  leaves in the final model."""
  rates = np.asarray(learning_rates, dtype=np.float64)
  if rates.ndim != 1 or rates.size == 0 or np.any(rates < 0):
    raise ValueError("`learning_rates` must be a non-empty sequence of rates >= 0.")
  if not 0 <= momentum < 1:
    raise ValueError(f"`momentum` must be in [0, 1); got {momentum!r}.")
  weights = np.empty_like(rates)
  carry = 0.0
  for s in range(rates.size - 1, -1, -1):  # c_s = η_s + β c_{s+1}.
    carry = rates[s] + momentum * carry
    weights[s] = carry
  return weights


def signal_to_noise(inverse: Optional[np.ndarray], *, rounds: int, noise_multiplier: float,
                    clients_per_round: float, model_dimension: int,
                    learning_rates: Optional[Sequence[float]] = None, momentum: float = 0.0,
                    initial_model_norm: Optional[float] = None,
                    clip_norm: float = 1.0) -> SignalToNoise:
  """The ratios of the module docstring.

  Args:
    inverse: the dense n × n C⁻¹ (`StreamingNoise.materialize(n)`), or None for C = I.
    rounds: n.
    noise_multiplier: σ (the std of each entry of Z over ζ).
    clients_per_round: m, the denominator of the averaged update (qN under Poisson).
    model_dimension: d.
    learning_rates: the server's rate of each of the n rounds (SGD with momentum), for
      `model_noise`; None leaves it out.
    momentum: β of the server's SGD.
    initial_model_norm: ‖w₀‖, for `model_noise`.
    clip_norm: ζ, for `model_noise_norm` (the ratios do not depend on it).
  """
  n = _checks.check_positive_int("rounds", rounds)
  sigma = _checks.check_nonnegative("noise_multiplier", noise_multiplier)
  m = _checks.check_positive("clients_per_round", clients_per_round)
  d = _checks.check_positive_int("model_dimension", model_dimension)
  zeta = _checks.check_positive("clip_norm", clip_norm)
  inv = np.eye(n) if inverse is None else np.asarray(inverse, dtype=np.float64)[:n, :n]
  if inv.shape != (n, n):
    raise ValueError(f"`inverse` must be at least {n} × {n} (C⁻¹ for the run's rounds); got "
                     f"{np.shape(inverse)}.")
  scale = sigma * np.sqrt(d) / m
  round_noise = scale * float(np.sqrt(np.mean(np.sum(inv * inv, axis=1))))
  prefix_noise = scale * float(np.linalg.norm(inv.sum(axis=0))) / n
  model_noise = model_noise_norm = None
  if learning_rates is not None:
    weights = momentum_weights(learning_rates, momentum)
    if weights.size != n:
      raise ValueError(f"`learning_rates` has {weights.size} rates for {n} rounds.")
    model_noise_norm = scale * zeta * float(np.linalg.norm(weights @ inv))
    if initial_model_norm is not None:
      model_noise = model_noise_norm / _checks.check_positive("initial_model_norm",
                                                              initial_model_norm)
  return SignalToNoise(round_noise, prefix_noise, model_noise, model_noise_norm)


def noise_factor(ratios: SignalToNoise, fraction: float = 1.0,
                 with_model: bool = True) -> float:
  """By how much the noise must shrink (≥ 1) for both ratios to be within `fraction` of
  their limits (`with_model` False: the summed noise only, e.g. with adaptive clipping,
  whose model noise follows ζₜ)."""
  model = (ratios.model_noise or 0.0) / (fraction * MODEL_NOISE_LIMIT) if with_model else 0.0
  return float(max(1.0, ratios.prefix_noise / (fraction * PREFIX_NOISE_LIMIT), model))
