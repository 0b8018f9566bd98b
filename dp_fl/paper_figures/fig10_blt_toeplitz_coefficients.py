"""Paper 004, Fig. 10 (App. A): Toeplitz coefficients of C and C⁻¹ for the App. A BLTs.

c_t of C = LtToep(c) = BLT(θ, ω) by Eq. 2 and ĉ_t of C⁻¹ = LtToep(ĉ) = BLT(θ̂, ω̂) (Sec. 2.4)
for the three published BLTs (d = 4 buffers; b = 100, 400, 1000), with App. A's claim that
b = 100's coefficients decay fastest checked on them.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import toeplitz
from dp_fl.paper_figures import figure_spec
from dp_fl.paper_figures import privacy_curves
# Both panels' y axes end here: b=100's coefficients fall to ~1e-10 (c) and ~1e-87 (ĉ) by
# t = 1999, which would flatten the other curves.
_Y_FLOOR = 1e-8


def compute(quick: bool) -> dict[str, Any]:
  """Fig. 10: c of C = LtToep(c) = BLT(θ, ω) (Eq. 2) and ĉ of C⁻¹ (Prop. 3.3, Sec. 2.4)."""
  settings = privacy_curves.figure_settings(quick)
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
  return {
      "caption": {
          "text": "Toeplitz coefficients c_t of C = LtToep(c) = BLT(θ, ω) (Eq. 2) and ĉ_t of "
                  "C⁻¹ = LtToep(ĉ) for the three App. A BLTs (d = 4 buffers), t = 0..n-1 "
                  "(n = each BLT's App. A rounds); x: t + 1 (log); panel (a) c_t (log y), "
                  "panel (b) |ĉ_t| (log y; ĉ_0 = 1 and ĉ_t < 0 for t >= 1).",
          "rounds": [c["rounds"] for c in curves],
          "y_axis_floor": _Y_FLOOR,
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
          f"Both y axes end at {_Y_FLOOR:g}; b=100's coefficients continue below it "
          "(the stored numbers are complete).",
          "Quick (test) settings plot 300 coefficients per BLT." if quick else
          "None in the numbers: the App. A (θ, ω) are used as printed."],
      "curves": curves,
      "checks": _checks(curves),
  }


def _checks(curves: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """App. A's claim (b=100 decays fastest), ĉ_t < 0 for t ≥ 1, and C C⁻¹ = I."""
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
  return checks


def draw(data: Mapping[str, Any]) -> Any:
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


FIGURE = figure_spec.PaperFigure(
    "fig10_blt_toeplitz_coefficients",
    "Fig. 10: Toeplitz coefficients of C and C⁻¹ for the App. A BLTs", compute, draw)
