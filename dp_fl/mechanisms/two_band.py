"""Two-band Toeplitz DP-FTRL: C = LtToep(1, c), the simplest correlated noise.

C has ones on the diagonal and c ∈ [0, 1] on the first subdiagonal, so round t releases the
clipped sum plus σζ (C⁻¹Z)_t with (C⁻¹Z)_t = z_t − c (C⁻¹Z)_{t−1} (paper 004, Eq. 1 and 4):
each round cancels a fraction c of the previous round's noise in the prefix sums. c = 0 is
DP-SGD (C = I). Its coefficients are non-negative and non-increasing, so Thm 3.1 of paper
004 gives the exact min-separation sensitivity (`sensitivity.toeplitz_sensitivity`), and its
errors are those of any lower-triangular Toeplitz C (Prop. 3.3, `toeplitz`). It streams as a
banded C with one buffer (`streaming.BandedStreamingNoise`, two bands) and is defined for
any number of rounds. `build` picks c minimizing MaxLoss (or RmsLoss) for (n, b, k), paper
004 Eqs. 9–10, by a bounded scalar search.

It is the worked example of the README's "Adding a mechanism" recipe: this module, one
entry in `dp_fl/training/registry.py`, its import in `dp_fl/mechanisms/families.py`, and
`tests/training/two_band_mechanism_test.py`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import scipy.optimize

from dp_fl import _checks
from dp_fl import resources
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import streaming
from dp_fl.mechanisms import toeplitz

NAME = "two_band"


class TwoBandMechanism(catalog.Mechanism):
  """C = LtToep(1, c) with 0 <= c <= 1 (see the module docstring)."""

  name = NAME
  description = "two-band Toeplitz DP-FTRL, C = LtToep(1, c)"

  def __init__(self, c: float):
    c = _checks.check_nonnegative("c", c)
    if c > 1.0:
      raise ValueError(f"`c` (the subdiagonal of C) must lie in [0, 1], where Thm 3.1 gives "
                       f"the exact sensitivity; got {c!r}.")
    self.c = c

  def coef(self, rounds: int) -> np.ndarray:
    """The first column of C for n rounds: (1, c, 0, ..., 0)."""
    coef = np.zeros(self.check_rounds(rounds))
    coef[0] = 1.0
    if coef.size > 1:
      coef[1] = self.c
    return coef

  def sensitivity(self, rounds, min_sep, max_participations):
    value = sensitivity_lib.toeplitz_sensitivity(self.coef(rounds), min_sep,
                                                 max_participations)
    return catalog.Sensitivity(value, catalog.EXACT, "Thm 3.1 (non-increasing Toeplitz C)")

  def per_query_squared_error(self, rounds):
    return toeplitz.per_query_squared_error(self.coef(rounds))

  def streaming_noise(self, rounds=None):
    if rounds is None:
      raise ValueError(f"The {NAME} noise is streamed as a banded C built for n rounds; pass "
                       "`rounds`.")
    n = self.check_rounds(rounds)
    band = np.zeros((n, min(n, 2)))
    band[:, 0] = 1.0
    band[1:, 1:] = self.c
    return streaming.BandedStreamingNoise.from_band_array(band)

  def lower_triangular_input(self, rounds):
    return {"toeplitz_coefs": self.coef(rounds)}

  def to_dict(self):
    return {"mechanism": NAME, "c": self.c}

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> "TwoBandMechanism":
    if "c" not in data:
      raise ValueError(f"{NAME} parameters need the subdiagonal 'c'; got {dict(data)!r}.")
    return cls(data["c"])


def loss(c: float, options: catalog.BuildOptions) -> float:
  """MaxLoss (Eq. 9) or RmsLoss (Eq. 10) of LtToep(1, c) for the schedule of `options`."""
  mechanism = TwoBandMechanism(c)
  sens = mechanism.sensitivity(options.rounds, options.min_sep, options.max_participations)
  errors = mechanism.per_query_squared_error(options.rounds)
  error = np.max(errors) if options.optimize_for == "max" else np.mean(errors)
  return sens.value * float(np.sqrt(error))


def build(options: catalog.BuildOptions) -> tuple[TwoBandMechanism, tuple[str, ...]]:
  """c ∈ [0, 1] minimizing `loss` (bounded Brent search; c = 0 kept if no better)."""
  if options.optimize_for not in ("max", "rms"):
    raise ValueError(f"`optimize_for` must be 'max' or 'rms'; got {options.optimize_for!r}.")
  if options.rounds == 1:
    return TwoBandMechanism(0.0), ()
  result = scipy.optimize.minimize_scalar(lambda c: loss(c, options), bounds=(0.0, 1.0),
                                          method="bounded", options={"xatol": 1e-6})
  best = float(result.x) if loss(float(result.x), options) < loss(0.0, options) else 0.0
  return TwoBandMechanism(best), ()


def build_cost(options: catalog.BuildOptions) -> resources.Estimate:
  """~30 loss evaluations of length-n arrays (measured 56 MB and 5.4 s at n = 1e6)."""
  n = options.rounds
  return resources.Estimate(f"optimizing the two-band c for n={n} rounds", 64.0 * n,
                            6e-6 * n, "~64 n bytes, ~6e-6 n s")


def evaluation_cost(rounds: int) -> resources.Estimate:
  """Coefficients, errors and the Thm 3.1 sum: length-n arrays (56 MB at n = 1e6)."""
  return resources.Estimate(f"evaluating the two-band C for n={rounds} rounds",
                            64.0 * rounds, 3e-7 * rounds, "~64 n bytes")


catalog.register(catalog.Family(NAME, TwoBandMechanism.description, build,
                                TwoBandMechanism.from_dict, build_cost=build_cost,
                                evaluation_cost=evaluation_cost))
