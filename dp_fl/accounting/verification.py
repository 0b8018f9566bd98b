"""Estimate-Verify-Release's arithmetic (paper 003, Alg. 1 and Thm. 2.1 = Thm. 9 of Wang et
al. 2023): how many Monte Carlo samples a verification at threshold delta_verify needs for the
release to be (eps, delta)-DP, the probability it wrongly passes, and the record of one
verification (`balls_in_bins.estimate_verify_release` runs it on a dominating pair).

Notation: m Monte Carlo samples, delta the released delta, delta_verify = delta / tau
(tau > 1) the threshold delta_hat is checked against.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from scipy import special

from dp_fl import _checks

# Default ratio delta_verify / delta (paper 003 Sec. 5.2: 8e-6 for 1e-5).
DEFAULT_VERIFY_RATIO = 0.8


def _bernoulli_kl(a: float, p: float) -> float:
  return float(special.rel_entr(a, p) + special.rel_entr(1.0 - a, 1.0 - p))


def check_verify_pair(delta_verify: Any, delta: Any) -> tuple[float, float]:
  dv = _checks.check_open_unit("delta_verify", delta_verify)
  d = _checks.check_open_unit("delta", delta)
  if dv >= d:
    raise ValueError(
        f"`delta_verify` must be smaller than the released `delta` = {d!r} "
        f"(Thm. 2.1: delta = tau * delta_verify, tau > 1); got {dv!r}. Use e.g. "
        f"delta_verify = {DEFAULT_VERIFY_RATIO} * delta.")
  return dv, d


def verification_failure_probability(num_samples: int, delta_verify: float,
                                     delta: float) -> float:
  """Bound on P[delta_hat <= delta_verify] when H_{e^eps}(P, Q) >= delta.

  delta_hat is a mean of m i.i.d. [0, 1] variables, so by the Chernoff-
  Hoeffding bound P[delta_hat <= delta_verify] <= exp(-m KL(delta_verify ||
  H)) <= exp(-m KL(delta_verify || delta)) for H >= delta (KL between
  Bernoullis). Thm. 2.1 (paper 003) needs this to be <= delta.
  """
  m = _checks.check_positive_int("num_samples", num_samples)
  dv, d = check_verify_pair(delta_verify, delta)
  return math.exp(-m * _bernoulli_kl(dv, d))


def required_num_samples(delta_verify: float, delta: float) -> int:
  """Smallest m with verification_failure_probability(m, ...) <= delta.

  With this many samples Alg. 1 with threshold delta_verify is (eps, delta)-DP
  (Thm. 2.1 of paper 003 with tau = delta / delta_verify). For delta = 1e-5 and
  delta_verify = 8e-6 this is about 5.4e7.
  """
  dv, d = check_verify_pair(delta_verify, delta)
  return int(math.ceil(math.log(1.0 / d) / _bernoulli_kl(dv, d)))


def check_verification(noise_multiplier: Any, epsilon: Any, delta: Any, delta_verify: Any,
                       num_samples: Any) -> tuple[float, float, float, float, int, int]:
  """(σ, ε, δ, δ_verify, required m, m) of an Estimate-Verify-Release call, checked:
  δ_verify defaults to `DEFAULT_VERIFY_RATIO` δ, m to (and at least) `required_num_samples`."""
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  eps = _checks.check_positive("epsilon", epsilon)
  d = _checks.check_open_unit("delta", delta)
  dv = DEFAULT_VERIFY_RATIO * d if delta_verify is None else delta_verify
  dv, d = check_verify_pair(dv, d)
  need = required_num_samples(dv, d)
  m = need if num_samples is None else _checks.check_positive_int("num_samples", num_samples)
  if m < need:
    raise ValueError(
        f"`num_samples` = {m} is too small for Estimate-Verify-Release at "
        f"delta_verify={dv!r}, delta={d!r}: the failure probability bound "
        f"{verification_failure_probability(m, dv, d):.3g} exceeds delta "
        f"(Thm. 2.1). Use num_samples >= {need}, or a smaller delta_verify / "
        "delta ratio.")
  return sigma, eps, d, dv, need, m


@dataclasses.dataclass(frozen=True)
class VerificationResult:
  """Outcome of Estimate-Verify-Release (Alg. 1 of paper 003).

  Attributes:
    verified: delta_hat <= delta_verify; Alg. 1 released iff True (else it
      returned bottom).
    epsilon, delta: the guarantee Alg. 1 satisfies (Thm. 2.1).
    delta_verify: the verification threshold (delta / tau).
    noise_multiplier: sigma verified.
    delta_hat, standard_error, num_tail_samples: the estimate on the fresh
      sample.
    num_samples: m used.
    required_num_samples: smallest m for which Thm. 2.1 applies.
    failure_probability: Chernoff bound on P[verified] were the true delta
      above `delta` (must be <= delta).
    output: what `release()` returned if verified, else None.
  """

  verified: bool
  epsilon: float
  delta: float
  delta_verify: float
  noise_multiplier: float
  delta_hat: float
  standard_error: float
  num_tail_samples: int
  num_samples: int
  required_num_samples: int
  failure_probability: float
  output: Any = None
