"""The production mechanisms of paper 004's Sec. 5 and their guarantees: what Figs. 8-10 share.

Paper 004 ("A Hassle-free Algorithm for Private Learning in Practice: Don't Use Tree
Aggregation, Use BLTs"), Sec. 5 "Extrapolation" and App. A; one module per figure:

* Fig. 8, `fig08_extrapolation`: ρ-zCDP of the App. A b̂=400 BLT (σ = 7.379) and of BandMF
  (n=2000, b̂=400; σ₀ calibrated to Table 4's es-ES row) as population, rounds n, report
  goal m and min-sep b change, σ ∝ m.
* Fig. 9, `fig09_epsilon_vs_rounds`: ρ vs n for TreeAgg-7, the App. A BLTs and BandMF at
  report goal 6500, b = 100, 400, 1000 and k = ⌈n/b⌉.
* Fig. 10, `fig10_blt_toeplitz_coefficients`: Toeplitz coefficients of C = BLT(θ, ω) (Eq. 2)
  and of C⁻¹ for the three App. A BLTs.

Every number comes from the library: sensitivities from `dp_fl.mechanisms.catalog`
(`Sensitivity.guaranteed` for ρ; a Remark 3.2 lower bound is kept beside it, labelled),
ρ = sens²/(2σ²) and ε at δ = 1e-10 from `dp_fl.accounting.zcdp.matrix_mechanism_guarantee`
(the exact Gaussian curve; Table 4's convention), the extrapolated min-sep ⌊N/m⌋ and
max-par ⌈n/b⌉ from `dp_fl.participation.extrapolation`. Noise multipliers (Sec. 5):
TreeAgg σ = 7; BLTs their Table 4 production σ; BandMF in Fig. 9 the σ whose prefix-sum RMSE,
σ·RmsError(B) at the n it is optimized for, equals TreeAgg-7's ("the noise multiplier of
BandMF is computed so that the RMSE is similar to TreeAgg with noise multiplier 7"), and in
Fig. 8, "extrapolated from the setting for es-ES and id-ID", the σ₀ at which our BandMF
reproduces Table 4's es-ES BandMF row (`es_es_bandmf_calibration`; our BandMF matrix is not
the production one), with the RMSE rule's σ₀ kept beside it. Extrapolation (Sec. 5): σ
scales linearly with the report goal, σ(m) = σ₀ m / 6500.

Mechanisms are built by `figure_spec.built`, the process-wide memo shared with Figs. 1-6
(`rms_loss`; Figs. 1-6 and 8-9 optimize BandMF(n=2000, b̂=400) once).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from dp_fl.accounting import zcdp
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.paper_figures import figure_spec
from dp_fl.participation import extrapolation

DELTA = 1e-10  # Table 4 and App. C: ε is accounted at δ = 1e-10.
TREE_NOISE_MULTIPLIER = 7.0  # Sec. 5: "We use noise multiplier 7 for TreeAgg".
PRODUCTION_REPORT_GOAL = 6500  # Sec. 5: "typical report goal 6.5K" (es-ES, id-ID, pt-BR).
BANDMF_ROUNDS = 2000  # Sec. 5: BandMF is optimized for n = 2000 and used up to it.
EXTRAPOLATION_MIN_SEP = 400  # Fig. 8: "BandMF and BLT matrices are optimized for min-sep=400".

# Table 4's BLT noise multipliers at report goal 6500, keyed by the App. A BLT's min-sep.
_PT_PT_REPORT_GOAL = 3000  # Sec. 5: "a smaller report goal 3K for pt-PT".
BLT_NOISE_MULTIPLIERS: dict[int, float] = {
    100: 3.12 * PRODUCTION_REPORT_GOAL / _PT_PT_REPORT_GOAL,
    400: 7.379,
    1000: 8.681,
}
BLT_NOISE_SOURCES: dict[int, str] = {
    100: "Table 4 pt-PT BLT-3.12 (report goal 3K) scaled linearly to report goal 6.5K: "
         "3.12 × 6500/3000 = 6.76",
    400: "Table 4 BLT-7.379 (es-ES, id-ID; report goal 6.5K)",
    1000: "Table 4 BLT-8.681 (pt-BR; report goal 6.5K)",
}


@dataclasses.dataclass(frozen=True)
class FigureSettings:
  """The grids behind Figs. 8-10; `figure_settings(quick)` gives the committed or test ones.

  bandmf_rounds: n every BandMF is optimized for (2000, Sec. 5) and the last round it is
    evaluated at; Fig. 8 (c, d) are drawn at this n.
  fig9_rounds: n of Fig. 9's TreeAgg and BLT curves (BandMF: those <= bandmf_rounds).
  fig8_rounds: n of Fig. 8 (a, b).
  fig8_min_seps: b of Fig. 8 (c, d).
  fig10_rounds: coefficients per BLT in Fig. 10; None: the n of its App. A setting.
  """
  bandmf_rounds: int
  fig9_rounds: tuple[int, ...]
  fig8_rounds: tuple[int, ...]
  fig8_min_seps: tuple[int, ...]
  fig10_rounds: Optional[int]


def _geometric_grid(low: int, high: int, points: int, extra: Sequence[int] = ()
                    ) -> tuple[int, ...]:
  """Sorted distinct integers spread evenly on a log scale over [low, high], plus `extra`."""
  grid = {int(round(x)) for x in np.geomspace(low, high, points)}
  return tuple(sorted(grid | set(extra)))


def figure_settings(quick: bool) -> FigureSettings:
  """Full-size grids (the committed figures), or small ones that run in seconds (tests).

  Quick settings keep the min-seps, populations and report goals but optimize BandMF for
  200 rounds instead of 2000 (its O(n³) optimization dominates the full-size run).
  """
  if quick:
    return FigureSettings(
        bandmf_rounds=200, fig9_rounds=(50, 100, 150, 200, 400, 1000, 2000, 2350, 4000),
        fig8_rounds=(100, 200, 1000, 4000), fig8_min_seps=(10, 25, 50, 100, 200, 300),
        fig10_rounds=300)
  return FigureSettings(
      bandmf_rounds=BANDMF_ROUNDS, fig9_rounds=tuple(range(50, 4001, 50)),
      fig8_rounds=tuple(range(250, 4001, 250)),
      fig8_min_seps=_geometric_grid(100, 3000, 25, extra=(EXTRAPOLATION_MIN_SEP, 1000, 2000)),
      fig10_rounds=None)


# ---------------------------------------------------------------------------------------
# Mechanisms and their guarantees.


def bandmf_mechanism(rounds: int, min_sep: int) -> catalog.Mechanism:
  """BandMF optimized for n = `rounds` and b̂ = `min_sep` (bands min(b̂, n)), built once.

  Sec. 5: "The BandMF algorithm are optimized for total round n=2000, band b̂=400 for es-ES,
  and b̂=1000 for pt-BR". O(n³): at n = 2000 we measured 11 s (b̂=100), 25 s (b̂=400) and
  120 s (b̂=1000) on two shared cores; the full-size figures are dominated by these builds.
  Built by `figure_spec.built` with the arguments `rms_loss.bandmf` gives a BandMF
  (min_sep = bands, optimize_for="rms"; its optimum depends on (n, bands) only), so a
  BandMF that Figs. 1-6 built in the same process is not optimized again.
  """
  bands = min(min_sep, rounds)
  return figure_spec.built("bandmf", rounds=rounds, min_sep=bands, bands=bands,
                           optimize_for="rms").mechanism


def tree_mechanism() -> catalog.Mechanism:
  """Online TreeAgg (Kairouz et al.), the production baseline of Sec. 5."""
  return catalog.TreeMechanism(full=False)


def published_blt_mechanism(min_sep: int) -> catalog.Mechanism:
  """The App. A BLT optimized for `min_sep` (100, 400 or 1000)."""
  return catalog.BltMechanism(blt.PUBLISHED_BLTS[min_sep])


def rms_error(mechanism: catalog.Mechanism, rounds: int) -> float:
  """RmsError(B) = sqrt(mean_t ||B[t, :]||²) (Sec. 3.2): the prefix-sum RMSE per unit σ."""
  return float(np.sqrt(np.mean(mechanism.per_query_squared_error(rounds))))


def rmse_matched_noise_multiplier(mechanism: catalog.Mechanism, rounds: int) -> float:
  """σ with σ·RmsError(B) = 7·RmsError(B of TreeAgg) over n rounds (Sec. 5, BandMF's σ)."""
  return TREE_NOISE_MULTIPLIER * rms_error(tree_mechanism(), rounds) / rms_error(
      mechanism, rounds)


def privacy_curve(mechanism: catalog.Mechanism, schedule: Sequence[tuple[int, int, int]],
                  noise_multiplier: float) -> dict[str, list[Any]]:
  """ρ-zCDP and ε at δ = 1e-10 of `mechanism` at each (n, b, k) of `schedule`.

  ρ = sens²/(2σ²) with sens = `Sensitivity.guaranteed` (exact, or a valid upper bound;
  `sensitivity_kind` says which); where the sensitivity is only bracketed,
  `rho_lower_bound` holds the ρ of its Remark 3.2 lower bound (None where it is exact).
  k is recorded as capped at ⌈n/b⌉ (`sensitivity.feasible_participations`).
  """
  curve: dict[str, list[Any]] = {key: [] for key in (
      "rounds", "min_sep", "max_participations", "sensitivity", "sensitivity_kind", "rho",
      "epsilon", "rho_lower_bound")}
  for rounds, min_sep, max_participations in schedule:
    k, _ = sensitivity_lib.feasible_participations(rounds, min_sep, max_participations)
    sens = mechanism.sensitivity(rounds, min_sep, k)
    guarantee = zcdp.matrix_mechanism_guarantee(sens.guaranteed, noise_multiplier, DELTA)
    curve["rounds"].append(int(rounds))
    curve["min_sep"].append(int(min_sep))
    curve["max_participations"].append(int(k))
    curve["sensitivity"].append(float(sens.guaranteed))
    curve["sensitivity_kind"].append("exact" if sens.is_exact else "upper_bound")
    curve["rho"].append(float(guarantee.rho))
    curve["epsilon"].append(float(guarantee.epsilon))
    curve["rho_lower_bound"].append(
        None if sens.is_exact else zcdp.rho_from_sensitivity(sens.value, noise_multiplier))
  return curve


@dataclasses.dataclass(frozen=True)
class RhoCalibration:
  """The σ at which a mechanism gives a printed ρ at one (n, b, k): σ = sens / √(2ρ).

  `sensitivity` is `Sensitivity.guaranteed` (exact, or the valid upper bound, as
  `sensitivity_kind` says) and `sensitivity_lower_bound` its Remark 3.2 lower bound (equal
  where exact), so that ρ(σ) from `privacy_curve` at (n, b, k) is exactly `rho`.
  """
  rounds: int
  min_sep: int
  max_participations: int
  rho: float
  sensitivity: float
  sensitivity_kind: str
  sensitivity_lower_bound: float
  noise_multiplier: float


def calibrate_noise_multiplier(mechanism: catalog.Mechanism, rounds: int, min_sep: int,
                               max_participations: int, rho: float) -> RhoCalibration:
  """The σ at which `mechanism` gives exactly `rho` at (n, b, k) (k capped at ⌈n/b⌉)."""
  k, _ = sensitivity_lib.feasible_participations(rounds, min_sep, max_participations)
  sens = mechanism.sensitivity(rounds, min_sep, k)
  return RhoCalibration(
      int(rounds), int(min_sep), int(k), float(rho), float(sens.guaranteed),
      "exact" if sens.is_exact else "upper_bound", float(sens.value),
      zcdp.noise_multiplier_for_rho(sens.guaranteed, rho))


# Table 4 es-ES BandMF-1.411 / 296 / 4 at n = 1280 and its printed ρ (the printed σ is in a
# normalization we cannot infer; see `es_es_bandmf_calibration`).
_ES_ES_BANDMF = {"rounds": 1280, "min_sep": 296, "max_participations": 4, "rho": 0.29}


@functools.lru_cache(maxsize=None)
def es_es_bandmf_calibration(bandmf_rounds: int) -> Optional[RhoCalibration]:
  """σ₀ at which our BandMF(n=`bandmf_rounds`, b̂=400) gives Table 4's es-ES BandMF ρ = 0.29.

  σ₀ = sens_guaranteed(n=1280, b=296, k=4) / √(2 · 0.29). Our BandMF matrix is not the
  production one (the paper prints none), so this σ₀ is the noise multiplier that makes our
  BandMF reproduce that printed row, not the production σ. None when BandMF is optimized for
  fewer than 1280 rounds (quick settings).
  """
  if bandmf_rounds < _ES_ES_BANDMF["rounds"]:
    return None
  return calibrate_noise_multiplier(
      bandmf_mechanism(bandmf_rounds, EXTRAPOLATION_MIN_SEP), **_ES_ES_BANDMF)


def curve_series(label: str, mechanism_name: str, noise_multiplier: float,
                 curve: Mapping[str, list[Any]], **extra: Any) -> dict[str, Any]:
  """One curve of a figure's JSON: its legend label, mechanism, σ and `privacy_curve`."""
  return {"label": label, "mechanism": mechanism_name,
          "noise_multiplier": float(noise_multiplier), **extra, **curve}


def worst_case_schedule(rounds: Sequence[int], min_sep: int) -> list[tuple[int, int, int]]:
  """(n, b, ⌈n/b⌉) for each n: the worst-case max-par of Sec. 5's extrapolation."""
  return [(n, min_sep, extrapolation.optimistic_max_participations(n, min_sep))
          for n in rounds]


# ---------------------------------------------------------------------------------------
# Drawing (from the JSON only).

# (color, line style) per mechanism in Figs. 8 and 9.
MECHANISM_STYLES = {"tree": ("tab:red", "-"), "blt": ("tab:blue", "-"),
                    "bandmf": ("tab:green", "--")}


def plot_bracket_markers(ax, xs: Sequence[float], series: Mapping[str, Any], color: str,
                         label: str) -> None:
  """Marks points whose sensitivity is bracketed (ρ from the upper bound), if any."""
  marked = [(x, r) for x, r, lb in zip(xs, series["rho"], series["rho_lower_bound"])
            if lb is not None]
  if marked:
    ax.plot(*zip(*marked), "x", color=color, markersize=5, label=label)

