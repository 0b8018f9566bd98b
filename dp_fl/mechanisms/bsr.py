"""Banded square root (BSR) DP-FTRL: C = the p-banded truncation of A^(1/2), no optimization.

Kalinin and Lampert, "Banded Square Root Matrix Factorization for Differentially Private Model
Training" (NeurIPS 2024, arXiv 2405.13763). The square root of the prefix-sum matrix A is the
Toeplitz matrix LtToep(r) with r_j = binom(2j, j) / 4^j (the series of (1 − x)^(−1/2); positive
and decreasing). BSR keeps its first p bands and, for multiple participations, scales every
column of C to unit L2 norm (the normalization of banded factorizations, as BandMF's):

            [ r_0/ν_0                      ]
    C   =   [ r_1/ν_0   r_0/ν_1            ]     ν_j = ||(r_0, …, r_{min(p, n−j)−1})||,
            [ r_2/ν_0   r_1/ν_1   r_0/ν_2  ]     zero below the p-th band.

So C is Toeplitz except in its last p − 1 columns (shorter, hence scaled more), and it is
built for n rounds (like BandMF, not defined beyond them). Everything else is that of a banded
C (`catalog.BandedMechanism`):

- sensitivity under Π(b, k): with b >= p, participations touch disjoint rows and
  sens² = Σ of k unit column norms, exactly √k (column norms, Eq. 5 of paper 004); with
  b < p, CᵀC ≥ 0 (all entries of C are positive), so the maximal-pattern search is exact where
  it fits its budget, else Remark 3.2's lower bound next to a valid upper bound;
- MaxError / RmsError of B = A C⁻¹ (paper 004, Sec. 3.2), by the banded inverse;
- streaming noise by forward substitution in the band, p − 1 buffers
  (`streaming.BandedStreamingNoise`).

The default p is min(b, n) (`catalog.bands_for`): the most bands whose sensitivity is the
column-norm √k.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from dp_fl import _checks
from dp_fl import resources
from dp_fl.mechanisms import banded
from dp_fl.mechanisms import catalog

NAME = "bsr"


class BsrMechanism(catalog.BandedMechanism):
  """BSR for n rounds with p bands (module docstring)."""

  name = NAME
  description = "banded square root (BSR) DP-FTRL, the p-banded A^(1/2) (no optimization)"

  def __init__(self, rounds: int, bands: int):
    rounds = _checks.check_positive_int("rounds", rounds)
    bands = _checks.check_positive_int("bands", bands)
    if bands > rounds:
      raise ValueError(f"`bands` (p) of a BSR must be <= the rounds n={rounds} it is built "
                       f"for; got {bands}. Pass bands <= n (n bands is the full A^(1/2)).")
    self.rounds = rounds
    super().__init__(banded.square_root_factorization(rounds, bands))

  def band_checksum(self) -> list[float]:
    """(Σ C, Σ C², Σ_t t·Σ_j C[t, t−j]) over the band: the parameters name C by (n, p); these
    pin the matrix they built (any change of the construction moves them), while tolerating
    the last-bit differences of another CPU's summation order."""
    band = self.banded.band
    rows = np.arange(band.shape[0], dtype=np.float64)
    return [float(np.sum(band)), float(np.sum(band * band)), float(rows @ band.sum(axis=1))]

  def to_dict(self) -> dict[str, Any]:
    return {"mechanism": NAME, "rounds": self.rounds, "bands": self.banded.bands,
            "band_checksum": self.band_checksum()}

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> "BsrMechanism":
    missing = [key for key in ("rounds", "bands") if key not in data]
    if missing:
      raise ValueError(f"{NAME} parameters need {', '.join(repr(k) for k in missing)} (the "
                       f"rounds n and the bands p of C); got {dict(data)!r}.")
    mechanism = cls(data["rounds"], data["bands"])
    saved = data.get("band_checksum")
    if saved is None:
      raise ValueError(f"{NAME} parameters need 'band_checksum' (it pins the C they were saved "
                       f"with); got keys {sorted(data)}. Rebuild them with scripts/mechanism.")
    built = mechanism.band_checksum()
    if (not isinstance(saved, list) or len(saved) != len(built)
        or not np.allclose(np.asarray(saved, dtype=np.float64), built, rtol=1e-10, atol=0.0)):
      raise ValueError(
          f"{NAME} parameters (n={mechanism.rounds}, p={mechanism.banded.bands}) were saved "
          f"with a C whose band checksum is {saved}, but this dp_fl builds {built}: the BSR "
          "construction changed since. Resuming would switch C mid-run; finish the run with "
          "the dp_fl that started it, or start anew.")
    return mechanism


def build(options: catalog.BuildOptions) -> tuple[BsrMechanism, tuple[str, ...]]:
  """BSR for n = `options.rounds` with p = `catalog.bands_for(options)` bands (closed form:
  the loss, k and the seed do not change it)."""
  if options.optimize_for not in ("max", "rms"):
    raise ValueError(f"`optimize_for` must be 'max' or 'rms'; got {options.optimize_for!r}.")
  bands, notes = catalog.bands_for(options)
  return BsrMechanism(options.rounds, bands), notes


def build_cost(options: catalog.BuildOptions) -> resources.Estimate:
  """The (n, p) band and its normalization: ~40 n p bytes."""
  n = options.rounds
  p, _ = catalog.bands_for(options)
  return resources.Estimate(f"building a BSR for n={n} rounds", 40.0 * n * p + 1e6,
                            1e-7 * n * p, "~40 n p bytes")


catalog.register(catalog.Family(
    NAME, BsrMechanism.description, build, BsrMechanism.from_dict, build_cost=build_cost,
    evaluation_cost=catalog.family("bandmf").evaluation_cost, banded=True, knobs="bands"))
