"""Paper 004, Figs. 8-10: privacy of the production mechanisms, extrapolated (Sec. 5, App. A).

Paper 004 ("A Hassle-free Algorithm for Private Learning in Practice: Don't Use Tree
Aggregation, Use BLTs"), Sec. 5 "Extrapolation" and App. A:

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

Mechanisms are built by `figure_spec.built`, the process-wide memo shared with
`mechanism_figures` (Figs. 1-6 and 8-9 optimize BandMF(n=2000, b̂=400) once).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from dp_fl.accounting import zcdp
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import toeplitz
from dp_fl.participation import extrapolation
from dp_fl.planning import figure_spec

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
  Built by `figure_spec.built` with the arguments `mechanism_figures` uses for a BandMF
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


def _series(label: str, mechanism_name: str, noise_multiplier: float,
            curve: Mapping[str, list[Any]], **extra: Any) -> dict[str, Any]:
  return {"label": label, "mechanism": mechanism_name,
          "noise_multiplier": float(noise_multiplier), **extra, **curve}


def _worst_case_schedule(rounds: Sequence[int], min_sep: int) -> list[tuple[int, int, int]]:
  """(n, b, ⌈n/b⌉) for each n: the worst-case max-par of Sec. 5's extrapolation."""
  return [(n, min_sep, extrapolation.optimistic_max_participations(n, min_sep))
          for n in rounds]


def _ratio_range(values: Sequence[float]) -> float:
  return max(values) / min(values)


# ---------------------------------------------------------------------------------------
# Fig. 10: Toeplitz coefficients of the App. A BLTs.

# Both panels' y axes end here: b=100's coefficients fall to ~1e-10 (c) and ~1e-87 (ĉ) by
# t = 1999, which would flatten the other curves.
_FIG10_Y_FLOOR = 1e-8


def compute_fig10(quick: bool) -> dict[str, Any]:
  """Fig. 10: c of C = LtToep(c) = BLT(θ, ω) (Eq. 2) and ĉ of C⁻¹ (Prop. 3.3, Sec. 2.4)."""
  settings = figure_settings(quick)
  curves, paper_blts = [], []
  for min_sep, params in sorted(blt.PUBLISHED_BLTS.items()):
    rounds = settings.fig10_rounds or params.setting.n
    coef = params.coef(rounds)
    inverse = params.inverse_coef(rounds)
    identity = toeplitz.convolve(coef, inverse, rounds)
    identity[0] -= 1.0
    curves.append({
        "label": f"BLT b={min_sep} (App. A: n={params.setting.n}, "
                 f"k={params.setting.max_participations})",
        "min_sep": min_sep, "rounds": rounds, "coef": coef.tolist(),
        "inverse_coef": inverse.tolist(),
        "identity_max_abs_error": float(np.max(np.abs(identity)))})
    paper_blts.append({"min_sep": min_sep, "rounds": params.setting.n,
                       "max_participations": params.setting.max_participations,
                       "buffers": params.buffers, "theta": list(params.theta),
                       "omega": list(params.omega)})
  by_sep = {c["min_sep"]: c for c in curves}
  checks = []
  for key, what, symbol in (("coef", "c_t", "c"), ("inverse_coef", "|ĉ_t|", "|ĉ|")):
    faster, details = True, []
    for other in (400, 1000):
      mine = np.abs(np.array(by_sep[100][key]))
      theirs = np.abs(np.array(by_sep[other][key]))
      last = min(mine.size, theirs.size) - 1
      above = np.nonzero(mine[1:last + 1] >= theirs[1:last + 1])[0]
      start = int(above[-1]) + 2 if above.size else 1  # First t after the last crossing.
      decay, decay_other = mine[last] / mine[1], theirs[last] / theirs[1]
      faster &= start <= last and decay < decay_other
      details.append(f"below b={other}'s for every t >= {start} (t <= {last}); "
                     f"{symbol}_{last} / {symbol}_1 = {decay:.3g} vs {decay_other:.3g}")
    checks.append(figure_spec.claim(
        f"App. A: the coefficients ({what}) of BLT(θ, ω) for b=100 decay faster than for "
        "b=400 and b=1000", faster,
        f"b=100's {what}: " + "; ".join(details) + " (holds: below both from some t on "
        "and a smaller decay factor from t = 1 to the last t; c_1 = Σω is "
        f"{by_sep[100]['coef'][1]:.4f} / {by_sep[400]['coef'][1]:.4f} / "
        f"{by_sep[1000]['coef'][1]:.4f} for b = 100 / 400 / 1000)"))
  negative = all(all(x < 0 for x in c["inverse_coef"][1:]) for c in curves)
  checks.append(figure_spec.claim(
      "ĉ_0 = 1 and ĉ_t < 0 for t >= 1 (why panel (b) plots |ĉ_t|)",
      negative and all(c["inverse_coef"][0] == 1.0 for c in curves),
      "C⁻¹ = BLT(θ̂, ω̂) with ω̂ < 0 (Sec. 2.4): ĉ_t = Σ ω̂ θ̂^(t-1) for t >= 1"))
  worst = max(c["identity_max_abs_error"] for c in curves)
  checks.append(figure_spec.claim(
      "C C⁻¹ = I: ĉ is the inverse of c (first n coefficients of c * ĉ = e_0)", worst < 1e-9,
      f"max |(c * ĉ)_t - [t = 0]| = {worst:.2e} (ĉ from the closed-form BLT(θ̂, ω̂), c by "
      "Eq. 2, product by `toeplitz.convolve`)"))
  return {
      "caption": {
          "text": "Toeplitz coefficients c_t of C = LtToep(c) = BLT(θ, ω) (Eq. 2) and ĉ_t of "
                  "C⁻¹ = LtToep(ĉ) for the three App. A BLTs (d = 4 buffers), t = 0..n-1 "
                  "(n = each BLT's App. A rounds); x: t + 1 (log); panel (a) c_t (log y), "
                  "panel (b) |ĉ_t| (log y; ĉ_0 = 1 and ĉ_t < 0 for t >= 1).",
          "rounds": [c["rounds"] for c in curves],
          "y_axis_floor": _FIG10_Y_FLOOR,
          "inverse": "ĉ from C⁻¹ = BLT(θ̂, ω̂) (Sec. 2.4 property (2)); θ̂ from the secular "
                     "equation, ω̂ by Alg. 5 (`Blt.inverse_coef`)"},
      "paper": {
          "caption": "Figure 10: Toeplitz coefficients {c_0, ..., c_n} for C = LtToep(c) and "
                     "{ĉ_0, ..., ĉ_n} for C⁻¹ = LtToep(ĉ); for BLT(θ, ω), c can be computed "
                     "by Eq. 2",
          "claim": "The coefficients of BLT(θ, ω) for b=100 decaying faster than b=400 and "
                   "b=1000.",
          "app_a_blts": paper_blts},
      "differences": [
          "The image is not in the text; its axes are unknown. We plot t + 1 on a log x axis "
          "and |ĉ_t| on a log y axis (ĉ_t < 0 for t >= 1), marking ĉ_0 = 1.",
          "We plot t = 0..n-1 (the n coefficients of an n x n C); the caption writes c_0..c_n.",
          f"Both y axes end at {_FIG10_Y_FLOOR:g}; b=100's coefficients continue below it "
          "(the stored numbers are complete).",
          "Quick (test) settings plot 300 coefficients per BLT." if quick else
          "None in the numbers: the App. A (θ, ω) are used as printed."],
      "curves": curves,
      "checks": checks,
  }


def draw_fig10(data: Mapping[str, Any]) -> Any:
  """Two panels: (a) c_t of C, (b) |ĉ_t| of C⁻¹, against t + 1 on log-log axes."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  figure = Figure(figsize=(12, 4.6), layout="constrained")
  axes = figure.subplots(1, 2)
  colors = ("tab:orange", "tab:blue", "tab:green")
  for color, curve in zip(colors, data["curves"]):
    t = np.arange(1, len(curve["coef"]) + 1)
    axes[0].plot(t, curve["coef"], color=color, label=curve["label"])
    axes[1].plot(t[1:], np.abs(curve["inverse_coef"][1:]), color=color,
                 label=curve["label"] + ": |ĉ_t|, t >= 1")
  axes[1].plot([1], [1.0], "ko", label="ĉ_0 = 1 (all BLTs)")
  for ax, title, ylabel in (
      (axes[0], "(a) C = LtToep(c), c by Eq. 2", "c_t"),
      (axes[1], "(b) C⁻¹ = LtToep(ĉ): ĉ_t < 0 for t ≥ 1", "|ĉ_t|")):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(data["caption"]["y_axis_floor"], 2.0 * max(
        max(abs(x) for x in curve[key]) for curve in data["curves"]
        for key in ("coef", "inverse_coef")))
    ax.set_xlabel("t + 1 (coefficient index + 1)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
  figure.suptitle("Paper 004, Fig. 10: Toeplitz coefficients of the App. A BLTs (d = 4)")
  return figure


# ---------------------------------------------------------------------------------------
# Fig. 9: ρ vs rounds for the production mechanisms.

# Table 4 rows that sit on Fig. 9's panels (at their realized min-sep): (panel b, locale,
# mechanism, App. A BLT or BandMF b̂, σ, n, realized b, k, printed ρ, printed ε).
_TABLE4_POINTS = (
    (400, "id-ID", "tree", None, 7.0, 2350, 437, 5, "0.94", 9.29),
    (400, "id-ID", "blt", 400, 7.379, 2350, 447, 5, "0.20", 3.93),
    (1000, "pt-BR", "blt", 1000, 8.681, 2000, 2001, 1, "2.23e-2", 1.25),
    (1000, "pt-BR", "bandmf", 1000, 4.523, 2000, 2001, 1, "2.45e-2", 1.32),
)
_MECHANISM_LABELS = {"tree": "TreeAgg", "blt": "BLT", "bandmf": "BandMF"}


def _printed_unit(value: float) -> float:
  """One unit of the last digit Table 4 prints for ρ (0.94 -> 0.01, 2.23e-2 -> 1e-4)."""
  return 10.0 ** (math.floor(math.log10(value)) - (1 if value >= 0.1 else 2))


def compute_fig09(quick: bool) -> dict[str, Any]:
  """Fig. 9: ρ vs total rounds n for report goal 6500 and b = 100, 400, 1000, k = ⌈n/b⌉."""
  settings = figure_settings(quick)
  bandmf_rounds = [n for n in settings.fig9_rounds if n <= settings.bandmf_rounds]
  panels, bandmf_sigmas, checks = [], {}, []
  for min_sep in sorted(BLT_NOISE_MULTIPLIERS):
    bandmf = bandmf_mechanism(settings.bandmf_rounds, min_sep)
    bandmf_sigma = rmse_matched_noise_multiplier(bandmf, settings.bandmf_rounds)
    bandmf_sigmas[str(min_sep)] = bandmf_sigma
    blt_sigma = BLT_NOISE_MULTIPLIERS[min_sep]
    schedule = _worst_case_schedule(settings.fig9_rounds, min_sep)
    series = [
        _series(f"TreeAgg-{TREE_NOISE_MULTIPLIER:g}", "tree", TREE_NOISE_MULTIPLIER,
                privacy_curve(tree_mechanism(), schedule, TREE_NOISE_MULTIPLIER)),
        _series(f"BLT-{blt_sigma:.4g} (App. A b={min_sep})", "blt", blt_sigma,
                privacy_curve(published_blt_mechanism(min_sep), schedule, blt_sigma)),
        _series(f"BandMF-{bandmf_sigma:.3f} (n={settings.bandmf_rounds}, b̂={min_sep})",
                "bandmf", bandmf_sigma,
                privacy_curve(bandmf, _worst_case_schedule(bandmf_rounds, min_sep),
                              bandmf_sigma)),
    ]
    points = []
    for (panel, locale, name, key, sigma, rounds, realized, k, rho_printed,
         epsilon_printed) in _TABLE4_POINTS:
      if panel != min_sep:
        continue
      mechanism = {"tree": tree_mechanism, "blt": lambda: published_blt_mechanism(key),
                   "bandmf": lambda: bandmf_mechanism(settings.bandmf_rounds, key)}[name]()
      if name == "bandmf" and rounds > settings.bandmf_rounds:
        continue  # Quick settings: BandMF is optimized for fewer rounds.
      curve = privacy_curve(mechanism, [(rounds, realized, k)], sigma)
      points.append({
          "label": f"Table 4 {locale} {_MECHANISM_LABELS[name]}-{sigma:g} / {realized} / {k}",
          "mechanism": name, "locale": locale, "noise_multiplier": sigma,
          "paper_rho": float(rho_printed), "paper_rho_printed": rho_printed,
          "paper_epsilon": epsilon_printed,
          **{field: values[0] for field, values in curve.items()}})
    panels.append({"min_sep": min_sep, "title": f"({'abc'[len(panels)]}) Min-sep b={min_sep}",
                   "series": series, "table4_points": points})
    tree_rho, blt_rho = series[0]["rho"], series[1]["rho"]
    ratios = [b / t for b, t in zip(blt_rho, tree_rho)]
    checks.append(figure_spec.claim(
        f"b={min_sep}: BLTs achieve stronger DP guarantees (smaller ρ) than TreeAgg at "
        "every n", all(r < 1 for r in ratios),
        f"ρ_BLT / ρ_TreeAgg over n = {settings.fig9_rounds[0]}..{settings.fig9_rounds[-1]}: "
        f"{min(ratios):.3f} .. {max(ratios):.3f}"))
    checks.append(figure_spec.claim(
        f"b={min_sep}: BandMF is extrapolated only up to the n it is optimized for",
        max(series[2]["rounds"]) == settings.bandmf_rounds,
        f"BandMF curve stops at n = {max(series[2]['rounds'])}"))
  calibration = es_es_bandmf_calibration(settings.bandmf_rounds)
  for panel in panels:
    for point in panel["table4_points"]:
      unit = _printed_unit(point["paper_rho"])
      checks.append(figure_spec.claim(
          f"{point['label']} at n={point['rounds']} reproduces Table 4's ρ "
          f"{point['paper_rho_printed']}", abs(point["rho"] - point["paper_rho"]) < unit,
          f"ρ = {point['rho']:.4f} (printed {point['paper_rho_printed']}; holds: within one unit "
          "of the last printed digit, as Table 4 rounds some ρ up, e.g. es-ES 0.1535 -> "
          f"0.16), ε = "
          f"{point['epsilon']:.3f} (printed {point['paper_epsilon']:g}), sensitivity "
          f"{point['sensitivity']:.4f} ({point['sensitivity_kind']})"))
  return {
      "caption": {
          "text": "ρ-zCDP vs total rounds n at report goal 6500 for fixed min-sep b and "
                  "worst-case max-par k = ⌈n/b⌉ (ε at δ = 1e-10 stored beside every ρ). "
                  f"TreeAgg: online tree, σ = {TREE_NOISE_MULTIPLIER:g}, exact sensitivity "
                  "of the restricted binary tree (Table 4's id-ID convention). BLT: the App. "
                  "A BLT for that b with its production σ (Table 4). BandMF: optimized for "
                  f"n = {settings.bandmf_rounds} and b̂ = b (bands = min(b, n)), plotted "
                  f"up to n = {settings.bandmf_rounds}, σ chosen so that its prefix-sum "
                  "RMSE σ·RmsError(B) equals TreeAgg-7's at that n (Sec. 5). Markers: "
                  "Table 4 rows at their realized b, on the panel of the App. A BLT used.",
          "report_goal": PRODUCTION_REPORT_GOAL, "delta": DELTA,
          "min_seps": sorted(BLT_NOISE_MULTIPLIERS),
          "rounds": list(settings.fig9_rounds), "bandmf_rounds": settings.bandmf_rounds,
          "noise_multipliers": {
              "tree": TREE_NOISE_MULTIPLIER,
              "blt": {str(b): s for b, s in sorted(BLT_NOISE_MULTIPLIERS.items())},
              "blt_source": {str(b): s for b, s in sorted(BLT_NOISE_SOURCES.items())},
              "bandmf": bandmf_sigmas,
              "bandmf_rule": "σ = 7 · RmsError(online TreeAgg) / RmsError(BandMF), both "
                             f"at n = {settings.bandmf_rounds}",
              "bandmf_table4_es_es_note": {
                  "400": None if calibration is None else calibration.noise_multiplier,
                  "note": "Not drawn here. The σ at which our BandMF(n="
                          f"{settings.bandmf_rounds}, b̂=400) reproduces Table 4's es-ES "
                          "BandMF row (ρ = 0.29 at n = 1280, b = 296, k = 4): σ = "
                          "sens_guaranteed / √(2 · 0.29); Fig. 8 draws BandMF with it. None "
                          "when BandMF is optimized for fewer than 1280 rounds."}},
          "y_axis": "ρ (ρ-zCDP), log scale"},
      "paper": {
          "caption": "Figure 9: Extrapolate by varying number of rounds n for the TreeAgg, "
                     "BLT and BandMF mechanisms used in production. Use the noise multiplier "
                     "for the fixed report goal 6500; fix min separation b=100,400,1000, "
                     "respectively; worst-case max participation is varied assuming fixed "
                     "population size, i.e., k=n/b.",
          "claims": ["we only extrapolate BandMF up to n=2000 rounds",
                     "TreeAgg and BLT can run arbitrary number of rounds, and BLTs achieve "
                     "stronger DP guarantees than TreeAgg"],
          "table4_rows": [
              {"locale": p[1], "mechanism": f"{_MECHANISM_LABELS[p[2]]}-{p[4]:g} / {p[6]} / "
                                            f"{p[7]}", "rounds": p[5], "rho": float(p[8]),
               "rho_printed": p[8], "epsilon": p[9]} for p in _TABLE4_POINTS],
          "bandmf_noise_multipliers_printed": {
              "es-ES (b̂=400)": 1.411, "pt-BR (b̂=1000)": 4.523}},
      "differences": [
          "The image is not in the text: the n grid, log-y axis and layout are ours.",
          "BandMF's σ follows Sec. 5's rule (RMSE equal to TreeAgg-7's) as we compute it: "
          + ", ".join(f"b̂={b}: {s:.3f}" for b, s in bandmf_sigmas.items())
          + ". Table 4 prints BandMF-4.523 for pt-BR (b̂=1000): with unit-column-norm C its "
          "ρ at (n=2000, b=2001, k=1) reproduces (marker), so the production σ differs from "
          "our rule's; es-ES's BandMF-1.411 gives ρ = 0.29 only in a normalization we cannot "
          "infer (unit column norms would give ρ ≈ 1.3), so no b̂=400 anchor is drawn. Our "
          "BandMF(b̂=400) reproduces that row's ρ at σ = "
          + ("n/a (quick settings)" if calibration is None
             else f"{calibration.noise_multiplier:.3f}")
          + " (`noise_multipliers.bandmf_table4_es_es_note`), the σ₀ Fig. 8 draws; this "
          "figure keeps Sec. 5's stated rule, as its caption says.",
          "No production σ is given for a BLT at b=100 and report goal 6500: pt-PT's "
          "BLT-3.12 (report goal 3K) scaled linearly to 6.76 (Sec. 5's hypothesis).",
          "TreeAgg's sensitivity is the exact maximum over Π(b, k) for the restricted tree "
          "(every dyadic interval inside [0, n)), which reproduces Table 4's id-ID ρ = 0.94; "
          "the paper's pt-PT TreeAgg row does not reproduce with it (dp_fl/accounting/"
          "README.md).",
      ] + (["Quick (test) settings: BandMF optimized for n = 200, a coarse n grid."]
           if quick else []),
      "panels": panels,
      "checks": checks,
  }


_MECHANISM_STYLES = {"tree": ("tab:red", "-"), "blt": ("tab:blue", "-"),
                     "bandmf": ("tab:green", "--")}
_POINT_MARKERS = {"tree": "s", "blt": "*", "bandmf": "D"}


def _plot_bracket_markers(ax, xs: Sequence[float], series: Mapping[str, Any], color: str,
                          label: str) -> None:
  """Marks points whose sensitivity is bracketed (ρ from the upper bound), if any."""
  marked = [(x, r) for x, r, lb in zip(xs, series["rho"], series["rho_lower_bound"])
            if lb is not None]
  if marked:
    ax.plot(*zip(*marked), "x", color=color, markersize=5, label=label)


def draw_fig09(data: Mapping[str, Any]) -> Any:
  """Three panels (b = 100, 400, 1000): ρ vs n per mechanism, Table 4 rows as markers."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  panels = data["panels"]
  figure = Figure(figsize=(5.2 * len(panels), 4.8), layout="constrained")
  axes = figure.subplots(1, len(panels))
  for ax, panel in zip(np.atleast_1d(axes), panels):
    for series in panel["series"]:
      color, style = _MECHANISM_STYLES[series["mechanism"]]
      ax.plot(series["rounds"], series["rho"], style, color=color, label=series["label"])
      _plot_bracket_markers(ax, series["rounds"], series, color,
                            f"{series['label']}: sensitivity bracketed, upper bound used")
    for point in panel["table4_points"]:
      color, _ = _MECHANISM_STYLES[point["mechanism"]]
      hollow = point["mechanism"] != "blt"  # A BLT star stays visible inside a baseline's.
      ax.plot([point["rounds"]], [point["rho"]], _POINT_MARKERS[point["mechanism"]],
              color=color, markerfacecolor="none" if hollow else color,
              markeredgecolor=color if hollow else "black", markeredgewidth=2 if hollow else 1,
              markersize=12 if hollow else 10, zorder=3 if hollow else 4,
              label=f"{point['label']}: ρ={point['rho']:.3g} (printed "
                    f"{point['paper_rho_printed']})")
    ax.set_yscale("log")
    ax.set_xlabel("total rounds n (k = ⌈n/b⌉)")
    ax.set_ylabel("ρ (zCDP)")
    ax.set_title(panel["title"], fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6.5)
  figure.suptitle(f"Paper 004, Fig. 9: ρ vs rounds for the production mechanisms, report "
                  f"goal {data['caption']['report_goal']}")
  return figure


# ---------------------------------------------------------------------------------------
# Fig. 8: extrapolating population, rounds, report goal and min-sep.

POPULATIONS = (3_000_000, 10_000_000)  # Fig. 8 (a), (b).
REPORT_GOALS = (3250, 6500, 13000, 26000)
OPTIMISTIC_MAX_PARTICIPATIONS = 2  # Fig. 8 (d).
def _monotone(values: Sequence[float], decreasing: bool = True) -> bool:
  pairs = list(zip(values, values[1:]))
  return all(b <= a for a, b in pairs) if decreasing else all(b >= a for a, b in pairs)


_RMSE_RULE = "rmse_rule"
_ES_ES_RULE = "table4_es_es"


def compute_fig08(quick: bool) -> dict[str, Any]:
  """Fig. 8: ρ of the b̂=400 BLT and BandMF as population, n, report goal m and b vary.

  σ(m) = σ₀ m / 6500, b = ⌊N/m⌋ and k = ⌈n/b⌉ (Sec. 5 "Extrapolation") unless a panel fixes
  them. σ₀ = 7.379 for the BLT (Table 4); for BandMF the σ₀ at which our BandMF reproduces
  Table 4's es-ES BandMF row (ρ = 0.29; `es_es_bandmf_calibration`), since Fig. 8 is
  extrapolated from the es-ES / id-ID setting. Sec. 5's RMSE rule
  (`rmse_matched_noise_multiplier`) is kept beside it, with the σ₀-dependent checks stated
  under both; quick settings (BandMF optimized for fewer than 1280 rounds) cannot calibrate
  and draw the RMSE rule.
  """
  settings = figure_settings(quick)
  blt_mechanism = published_blt_mechanism(EXTRAPOLATION_MIN_SEP)
  bandmf = bandmf_mechanism(settings.bandmf_rounds, EXTRAPOLATION_MIN_SEP)
  blt_sigma0 = BLT_NOISE_MULTIPLIERS[EXTRAPOLATION_MIN_SEP]
  rmse_sigma0 = rmse_matched_noise_multiplier(bandmf, settings.bandmf_rounds)
  calibration = es_es_bandmf_calibration(settings.bandmf_rounds)
  if calibration is None:
    drawn, bandmf_sigma0 = _RMSE_RULE, rmse_sigma0
    sigma0s = ((f"σ₀ = {rmse_sigma0:.3f}, Sec. 5 RMSE rule, drawn", rmse_sigma0),)
  else:
    drawn, bandmf_sigma0 = _ES_ES_RULE, calibration.noise_multiplier
    sigma0s = ((f"σ₀ = {bandmf_sigma0:.3f}, Table 4 es-ES calibration, drawn", bandmf_sigma0),
               (f"σ₀ = {rmse_sigma0:.3f}, Sec. 5 RMSE rule, not drawn", rmse_sigma0))
  mechanisms = (("blt", "BLT", blt_mechanism, blt_sigma0),
                ("bandmf", "BandMF", bandmf, bandmf_sigma0))

  def sigma_at(sigma0: float, report_goal: int) -> float:
    return sigma0 * report_goal / PRODUCTION_REPORT_GOAL

  panels = []
  for population in POPULATIONS:
    series = []
    for report_goal in REPORT_GOALS:
      min_sep = extrapolation.optimistic_min_separation(population, report_goal)
      for name, label, mechanism, sigma0 in mechanisms:
        rounds = [n for n in settings.fig8_rounds
                  if name != "bandmf" or n <= settings.bandmf_rounds]
        sigma = sigma_at(sigma0, report_goal)
        series.append(_series(
            f"{label}-{sigma:.3g}, m={report_goal} (b={min_sep})", name, sigma,
            privacy_curve(mechanism, _worst_case_schedule(rounds, min_sep), sigma),
            report_goal=report_goal))
    panels.append({"key": "ab"[len(panels)], "x": "rounds", "population": population,
                   "title": f"({'ab'[len(panels)]}) Population {population / 1e6:g}M",
                   "x_label": "total rounds n (b = ⌊N/m⌋, k = ⌈n/b⌉)", "series": series})
  rounds = settings.bandmf_rounds
  for key, max_participations, what in (
      ("c", None, "worst-case max-par k = ⌈n/b⌉"),
      ("d", OPTIMISTIC_MAX_PARTICIPATIONS,
       f"optimistic max-par={OPTIMISTIC_MAX_PARTICIPATIONS}")):
    series = []
    for name, label, mechanism, sigma0 in mechanisms:
      sigma = sigma_at(sigma0, PRODUCTION_REPORT_GOAL)
      schedule = [(rounds, b, max_participations or
                   extrapolation.optimistic_max_participations(rounds, b))
                  for b in settings.fig8_min_seps]
      series.append(_series(f"{label}-{sigma:.3g} (optimized for b̂=400)", name, sigma,
                            privacy_curve(mechanism, schedule, sigma),
                            report_goal=PRODUCTION_REPORT_GOAL))
    panels.append({"key": key, "x": "min_sep", "rounds": rounds,
                   "title": f"({key}) Report goal {PRODUCTION_REPORT_GOAL}, {what}, n={rounds}",
                   "x_label": "min-sep b", "series": series})
  if drawn == _ES_ES_RULE:
    bandmf_text = (
        f"σ₀ = {bandmf_sigma0:.3f}, at which it gives Table 4's es-ES BandMF ρ = "
        f"{calibration.rho:g} at n = {calibration.rounds}, b = {calibration.min_sep}, k = "
        f"{calibration.max_participations}; Sec. 5's RMSE rule would give {rmse_sigma0:.3f}")
  else:
    bandmf_text = (f"σ₀ = {bandmf_sigma0:.3f}, its prefix-sum RMSE equal to TreeAgg-7's; "
                   "quick settings cannot calibrate to Table 4's es-ES row at n = 1280")
  by_key = {p["key"]: p for p in panels}
  blt_c, bandmf_c = by_key["c"]["series"]
  ratio_at_b_hat = {b: r1 / r2 for b, r1, r2 in
                    zip(blt_c["min_sep"], blt_c["rho"], bandmf_c["rho"])}.get(
                        EXTRAPOLATION_MIN_SEP)
  return {
      "caption": {
          "text": "Extrapolated ρ-zCDP (ε at δ = 1e-10 stored beside every ρ) of the "
                  "mechanisms optimized for min-sep 400 (es-ES / id-ID): the App. A b=400 BLT "
                  f"(σ₀ = {blt_sigma0:g}, solid) and BandMF optimized for n = "
                  f"{settings.bandmf_rounds}, b̂ = 400 ({bandmf_text}; dashed, only up to "
                  f"n = {settings.bandmf_rounds}). σ scales linearly with the report goal m: "
                  "σ(m) = σ₀ m / 6500. (a, b): ρ vs n for populations 3M and 10M, one "
                  "color per m, b = ⌊N/m⌋, k = ⌈n/b⌉. (c, d): m = 6500, n = "
                  f"{rounds}, ρ vs b with k = ⌈n/b⌉ (c) or k = min(2, ⌈n/b⌉) (d).",
          "delta": DELTA, "populations": list(POPULATIONS), "report_goals": list(REPORT_GOALS),
          "rounds": list(settings.fig8_rounds), "min_seps": list(settings.fig8_min_seps),
          "bandmf_rounds": settings.bandmf_rounds,
          "noise_multiplier_at_6500": {"blt": blt_sigma0, "bandmf": bandmf_sigma0},
          "bandmf_noise_multiplier_at_6500": {
              "drawn": drawn,
              _ES_ES_RULE: None if calibration is None else calibration.noise_multiplier,
              _RMSE_RULE: rmse_sigma0,
              "rules": {
                  _ES_ES_RULE: "σ₀ = sens_guaranteed(n=1280, b=296, k=4) / √(2 · 0.29) of "
                               "our BandMF: Table 4's es-ES BandMF row reproduced (our "
                               "BandMF matrix is not the production one)",
                  _RMSE_RULE: "σ₀ = 7 · RmsError(online TreeAgg) / RmsError(BandMF), both "
                              f"at n = {settings.bandmf_rounds} (Sec. 5's stated rule)"}},
          "noise_multiplier_rule": "σ(m) = σ₀ · m / 6500 (Sec. 5: linearly scaling the noise "
                                   "multiplier with the report goal keeps utility)",
          "min_sep_rule": "b = ⌊population / m⌋ (extrapolation.optimistic_min_separation)",
          "max_participations_rule": "k = ⌈n / b⌉ "
                                     "(extrapolation.optimistic_max_participations)",
          "y_axis": "ρ (ρ-zCDP), log scale"},
      "paper": {
          "caption": "Figure 8: The effect of population size, number of rounds, report "
                     "goals, and min-seps on DP-FTRL privacy guarantees. The results are "
                     "extrapolate from the setting for es-ES and id-ID (BandMF and BLT "
                     "matrices are optimized for min-sep=400) based on the hypothesis that "
                     "linearly scale noise multiplier and report goal, or only change "
                     "min-sep will not affect the model utility. For a fixed number of "
                     "rounds to achieve utility target, increasing report goal and min-sep "
                     "can achieve stronger guarantees measured by smaller zCDP. The optimal "
                     "min-sep is capped by population size for a fixed report goal, and BLT "
                     "provides better guarantees, and smoother transition across different "
                     "min-seps.",
          "panels": ["(a) Population 3M", "(b) Population 10M",
                     "(c) Report goal 6500, worst-case max-par",
                     "(d) Report goal 6500, optimistic max-par=2"],
          "claims": [
              "(1) BLT achieves better DP guarantees because of its robustness to min-seps "
              "and total rounds.",
              "(2) using larger report goal and optimizing for the largest possible min-sep "
              "achieves better results than using smaller report goals and larger "
              "corresponding min-sep",
              "(3) Fig. 8(b) shows training more rounds does not necessarily increasing DP "
              "guarantees when min-sep is large.",
              "(4) The gap of BLT and BandMF is small when min-sep is accurately estimated."],
          "anchors": "Table 4 es-ES (population 4.21M): BandMF-1.411 / 296 / 4 ρ=0.29, "
                     "BLT-7.379 / 300 / 4 ρ=0.16 at n=1280; id-ID (8.9M): TreeAgg-7 / 437 / 5 "
                     "ρ=0.94, BLT-7.379 / 447 / 5 ρ=0.20 at n=2350; report goal 6.5K."},
      "differences": _fig08_differences(quick, drawn, bandmf_sigma0, rmse_sigma0, calibration,
                                        ratio_at_b_hat),
      "panels": panels,
      "table4_es_es_bandmf_calibration": (None if calibration is None
                                          else dataclasses.asdict(calibration)),
      "checks": _fig08_checks(panels, sigma0s),
  }


def _fig08_differences(quick: bool, drawn: str, bandmf_sigma0: float, rmse_sigma0: float,
                       calibration: Optional[RhoCalibration],
                       ratio_at_b_hat: Optional[float]) -> list[str]:
  """Fig. 8's "differences": where our settings and numbers differ from the paper's, and why."""
  differences = [
      "The image is not in the text: the panel layout follows the caption; its axes, "
      "ranges and the report goals drawn (3250, 6500, 13000, 26000) are our choice."]
  if drawn == _ES_ES_RULE:
    differences += [
        "Our BandMF(n=2000, b̂=400) matrix is not the production one (the paper prints no "
        "BandMF matrix, and Table 4's es-ES σ = 1.411 is in a normalization we cannot "
        f"infer), so BandMF's drawn σ₀ = {bandmf_sigma0:.3f} is calibrated to Table 4's "
        f"printed es-ES BandMF row: ρ = {calibration.rho:g} at n = {calibration.rounds}, "
        f"realized b = {calibration.min_sep}, k = {calibration.max_participations}, σ₀ = "
        f"sens / √(2ρ) with our sens = {calibration.sensitivity:.4f} "
        f"({calibration.sensitivity_kind}; lower bound "
        f"{calibration.sensitivity_lower_bound:.4f}). That row is reproduced by construction, "
        "not checked.",
        f"Sec. 5's RMSE rule (σ·RmsError(B) equal to TreeAgg-7's at n = 2000) gives σ₀ = "
        f"{rmse_sigma0:.3f} for our BandMF (`bandmf_noise_multiplier_at_6500.rmse_rule`): "
        f"every BandMF ρ would be ({bandmf_sigma0:.3f} / {rmse_sigma0:.3f})² = "
        f"{(bandmf_sigma0 / rmse_sigma0) ** 2:.2f} × the drawn one. The checks whose outcome "
        "depends on σ₀ are stated under both, each naming its σ₀; the others are σ₀-free "
        "(ρ_BandMF ∝ 1/σ₀² moves only the BLT/BandMF ratio).",
        "At the drawn σ₀, ρ_BLT / ρ_BandMF at b = b̂ = 400 (panel c, n = 2000, k = 5) is "
        + ("n/a" if ratio_at_b_hat is None else f"{ratio_at_b_hat:.2f}")
        + "; Table 4's es-ES rows give 0.16 / 0.29 = 0.55 (n = 1280, b ≈ 300, k = 4)."]
  else:
    differences.append(
        f"Quick (test) settings draw BandMF with Sec. 5's RMSE rule, σ₀ = {bandmf_sigma0:.3f}: "
        "BandMF optimized for fewer than 1280 rounds cannot be calibrated to Table 4's es-ES "
        "row (the committed figure is).")
  differences.append(
      "Where b < b̂ = 400, BandMF's sensitivity is computed exactly when the library's "
      "search fits, else bracketed: ρ uses the valid upper bound ('x' markers), the "
      "Remark 3.2 lower bound's ρ is kept in rho_lower_bound.")
  if quick:
    differences.append("Quick (test) settings: BandMF optimized for n = 200; (c, d) at n = 200 "
                       "with b = 10..300.")
  return differences


def _same_k_steepness(series: Mapping[str, Any]) -> tuple[float, int]:
  """Largest |Δlog ρ / Δlog b| between adjacent min-seps with the same k, and its b."""
  seps, ks = series["min_sep"], series["max_participations"]
  slopes = figure_spec.log_log_slopes(seps, series["rho"])
  steps = [(abs(float(slope)), seps[i]) for i, slope in enumerate(slopes)
           if ks[i] == ks[i + 1]]
  return max(steps) if steps else (0.0, seps[0])


def _fig08_checks(panels: Sequence[Mapping[str, Any]],
                  sigma0s: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
  """Sec. 5's claims (2)-(4) and the caption's, evaluated on Fig. 8's numbers.

  `sigma0s`: (description, BandMF σ₀) pairs, the drawn σ₀ first. ρ_BandMF ∝ 1/σ₀², so the
  checks comparing the BLT with BandMF are stated under each σ₀ (and name the σ₀ below which
  the BLT would win); the others do not depend on σ₀.
  """
  by_key = {p["key"]: p for p in panels}
  checks = []
  # (2): at every (N, n), ρ decreases as m grows (b = ⌊N/m⌋ shrinks, σ ∝ m).
  failures, cases = [], 0
  for key in "ab":
    for name in ("blt", "bandmf"):
      curves = [s for s in by_key[key]["series"] if s["mechanism"] == name]
      for i, rounds in enumerate(curves[0]["rounds"]):
        cases += 1
        rhos = [c["rho"][i] for c in curves]
        if not _monotone(rhos):
          failures.append(f"({key}) {name} n={rounds}: " + ", ".join(
              f"m={c['report_goal']}: {r:.3g}" for c, r in zip(curves, rhos)))
  checks.append(figure_spec.claim(
      "(2) a larger report goal with the largest possible min-sep ⌊N/m⌋ gives smaller ρ "
      "than a smaller report goal with its larger min-sep (σ ∝ m)", not failures,
      f"ρ non-increasing in m at {cases - len(failures)} of {cases} (population, n, "
      "mechanism) cases" + (": fails at " + "; ".join(failures[:4]) if failures else "")))
  # (3): Fig. 8(b), the largest min-sep: ρ nearly flat in n while k stays 1.
  flat, details = True, []
  for series in by_key["b"]["series"]:
    if series["report_goal"] != REPORT_GOALS[0]:
      continue
    single = [(n, r) for n, r, k in zip(series["rounds"], series["rho"],
                                       series["max_participations"]) if k == 1]
    late = [r for n, r in single if n >= EXTRAPOLATION_MIN_SEP]
    growth = _ratio_range(late) if late else 1.0
    flat &= growth < 1.25
    late_rounds = [n for n, _ in single if n >= EXTRAPOLATION_MIN_SEP]
    over = (f"{late_rounds[0]} <= n <= {late_rounds[-1]}" if late_rounds else
            f"no n >= {EXTRAPOLATION_MIN_SEP}")
    details.append(f"{series['label']}: ρ x{growth:.3f} over {over} (k = 1), "
                   f"x{_ratio_range([r for _, r in single]):.3f} "
                   f"from n = {single[0][0]}, x{_ratio_range(series['rho']):.2f} over the "
                   "whole curve")
  checks.append(figure_spec.claim(
      "(3) Fig. 8(b): training more rounds does not necessarily increase ρ when min-sep is "
      f"large (m={REPORT_GOALS[0]}: ρ flat in n while k = 1)", flat,
      "; ".join(details) + ". Holds: growth < 25 % while k = 1, counted from n = 400: "
      "below n = b̂ = 400, BandMF's C truncated to n rounds has column norms < 1 (ρ grows "
      "up to n = 400, then is constant, 1/(2σ²))."))
  # Caption: for fixed n, a larger min-sep gives smaller ρ (worst-case k, panel c).
  panel_c = by_key["c"]["series"]
  checks.append(figure_spec.claim(
      "Caption: for a fixed number of rounds, a larger min-sep gives smaller ρ (panel c)",
      all(_monotone(s["rho"]) for s in panel_c),
      "; ".join(f"{s['label']}: ρ from {s['rho'][0]:.3g} (b={s['min_sep'][0]}) to "
                f"{s['rho'][-1]:.3g} (b={s['min_sep'][-1]})" for s in panel_c)))
  # Caption and (1): BLT better than BandMF across min-seps (panels c, d), under each σ₀.
  drawn_sigma0 = sigma0s[0][1]
  for key in "cd":
    blt_series, bandmf_series = by_key[key]["series"]
    drawn_ratios = [b / m for b, m in zip(blt_series["rho"], bandmf_series["rho"])]
    threshold = drawn_sigma0 / math.sqrt(max(drawn_ratios))
    for which, sigma0 in sigma0s:
      ratios = [r * (sigma0 / drawn_sigma0) ** 2 for r in drawn_ratios]
      wins = sum(r < 1 for r in ratios)
      checks.append(figure_spec.claim(
          f"Caption and (1), panel ({key}), BandMF {which}: BLT gives better guarantees "
          "(smaller ρ) than BandMF across min-seps", wins == len(ratios),
          f"ρ_BLT < ρ_BandMF at {wins} of {len(ratios)} min-seps; ρ_BLT / ρ_BandMF = "
          f"{min(ratios):.2f} .. {max(ratios):.2f}. The BLT wins at every b iff BandMF's "
          f"σ₀ < {threshold:.3f}"))
  # Caption: smoother transition across min-seps; panel (d) holds k = 2 fixed for b < n,
  # so ρ's change between adjacent b is the min-sep's own effect (in (c) k changes at
  # almost every grid step below 400).
  blt_series, bandmf_series = by_key["d"]["series"]
  (blt_step, blt_at), (bandmf_step, bandmf_at) = (
      _same_k_steepness(blt_series), _same_k_steepness(bandmf_series))
  checks.append(figure_spec.claim(
      "Caption: BLT gives a smoother transition across min-seps than BandMF (panel d, "
      "k = 2 fixed)", blt_step < bandmf_step,
      f"largest |Δlog ρ / Δlog b| between adjacent min-seps with equal k: BLT {blt_step:.2f} "
      f"(from b = {blt_at}), BandMF {bandmf_step:.2f} (from b = {bandmf_at})"))
  # (4): the BLT-BandMF gap is smallest where b = b̂ = 400 (panel c), under each σ₀.
  blt_series, bandmf_series = by_key["c"]["series"]
  drawn_ratio_at = {b: r1 / r2 for b, r1, r2 in
                    zip(blt_series["min_sep"], blt_series["rho"], bandmf_series["rho"])}
  if EXTRAPOLATION_MIN_SEP in drawn_ratio_at:
    ends = (min(drawn_ratio_at), max(drawn_ratio_at))
    for which, sigma0 in sigma0s:
      ratio_at = {b: r * (sigma0 / drawn_sigma0) ** 2 for b, r in drawn_ratio_at.items()}
      gap = {b: abs(math.log(r)) for b, r in ratio_at.items()}
      checks.append(figure_spec.claim(
          "(4) the gap of BLT and BandMF is small when min-sep is accurately estimated "
          f"(b = b̂ = 400; panel c), BandMF {which}",
          gap[EXTRAPOLATION_MIN_SEP] < min(gap[b] for b in ends),
          f"|log(ρ_BLT / ρ_BandMF)| = {gap[EXTRAPOLATION_MIN_SEP]:.2f} at b = 400, "
          f"{gap[ends[0]]:.2f} at b = {ends[0]}, {gap[ends[1]]:.2f} at b = {ends[1]} (holds: "
          f"smaller at 400 than at both ends); ρ_BLT / ρ_BandMF = "
          f"{ratio_at[EXTRAPOLATION_MIN_SEP]:.2f} at 400, {ratio_at[ends[0]]:.2f} at b = "
          f"{ends[0]}, {ratio_at[ends[1]]:.2f} at b = {ends[1]}"))
  return checks


def draw_fig08(data: Mapping[str, Any]) -> Any:
  """Four panels: (a, b) ρ vs n per report goal, (c, d) ρ vs min-sep; BLT solid, BandMF
  dashed."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  figure = Figure(figsize=(13, 11), layout="constrained")
  axes = figure.subplots(2, 2).ravel()
  palette = ("tab:purple", "tab:blue", "tab:green", "tab:orange", "tab:red", "tab:brown")
  for ax, panel in zip(axes, data["panels"]):
    x_key = panel["x"]
    goals = sorted({s["report_goal"] for s in panel["series"]})
    for series in panel["series"]:
      if x_key == "rounds":
        color = palette[goals.index(series["report_goal"]) % len(palette)]
      else:
        color = _MECHANISM_STYLES[series["mechanism"]][0]
      style = _MECHANISM_STYLES[series["mechanism"]][1]
      ax.plot(series[x_key], series["rho"], style, marker="." if x_key == "min_sep" else None,
              color=color, label=series["label"])
      _plot_bracket_markers(ax, series[x_key], series, color,
                            f"{series['label']}: bracketed, upper bound used")
    if x_key == "min_sep":
      ax.set_xscale("log")
      ax.axvline(EXTRAPOLATION_MIN_SEP, color="gray", linestyle=":", linewidth=1,
                 label="b̂ = 400 (optimized for)")
    ax.set_yscale("log")
    ax.set_xlabel(panel["x_label"])
    ax.set_ylabel("ρ (zCDP)")
    ax.set_title(panel["title"], fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if x_key == "rounds":
      ax.legend(fontsize=6.5, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    else:
      ax.legend(fontsize=6.5)
  figure.suptitle("Paper 004, Fig. 8: extrapolated ρ vs population, rounds, report goal and "
                  "min-sep (BLT solid, BandMF dashed; σ ∝ report goal)")
  return figure


FIGURES: tuple[figure_spec.PaperFigure, ...] = (
    figure_spec.PaperFigure(
        "fig08_extrapolation",
        "Fig. 8: extrapolated ρ vs population, rounds, report goal and min-sep",
        compute_fig08, draw_fig08),
    figure_spec.PaperFigure(
        "fig09_epsilon_vs_rounds",
        "Fig. 9: ρ vs rounds for TreeAgg, BLT and BandMF at report goal 6500",
        compute_fig09, draw_fig09),
    figure_spec.PaperFigure(
        "fig10_blt_toeplitz_coefficients",
        "Fig. 10: Toeplitz coefficients of C and C⁻¹ for the App. A BLTs",
        compute_fig10, draw_fig10),
)
