"""The shared pieces of paper 004's Figs. 1-6: mechanisms built once, RmsLoss curves, drawing.

Paper 004 ("A Hassle-free Algorithm for Private Learning in Practice: Don't Use Tree
Aggregation, Use BLTs"): Fig. 1 (Sec. 3.3) times the optimization of BandMF and of BLTs
(Alg. 4 minimized by L-BFGS over (θ, θ̂), ω from Alg. 5); Figs. 2-6 (Sec. 4.2) compare
RmsLoss = sens_Π(b,k)(C) × RmsError(A C⁻¹) (Eq. 10) of BLTs, BandMF (ref. [8]) and
TreeAgg-Full across the actual min-separation b, participations k and rounds n. Each figure
is its own module (`fig01_optimization_time` ... `fig06_min_sep_robustness`); this one holds
what they share.

Every mechanism is built by `catalog.build` and every point is `catalog.evaluate`: the
sensitivity is Thm. 3.1 for BLTs, column norms for BandMF with b ≥ bands, and otherwise exact
where the library can certify it, else the Remark 3.2 *lower bound* (its kind is recorded per
point and drawn with an open marker: that loss is optimistic, as in the paper).

Mechanisms are built by `figure_spec.built`, one memo per process shared with the privacy
figures (BandMF(n=2000, b̂=400) is optimized once for Figs. 1-6 and 8-9; a BandMF is keyed by
rounds, min_sep = bands and optimize_for="rms" in both), and evaluations are memoized here
(`evaluation`). `quick=True` rescales every round count and min-separation by 120 / 2000
(n = 120), so the whole compute-and-draw path runs in seconds; the figures themselves use
`quick=False`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from dp_fl import writers
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity
from dp_fl.paper_figures import figure_spec

PAPER_ROUNDS = 2000  # n of Figs. 2-6.
PAPER_MIN_SEP = 400  # b̂: the min-separation (= BandMF bands) every mechanism is built for.
QUICK_ROUNDS = 120  # n of quick=True; every round count and b is rescaled by n / 2000.
BLT_BUFFERS = 4  # d of the BLTs of Figs. 1, 2 and 6 (paper 004, App. A uses d = 4).

MEAN, MAX = "rms", "max"  # catalog's optimize_for; the paper's legend says "mean", "max".
LOSS_WORD = {MEAN: "mean", MAX: "max"}


# ---------------------------------------------------------------------------------------
# Settings: the paper's values, rescaled for quick runs.


@dataclasses.dataclass(frozen=True)
class Scale:
  """Maps the paper's round counts and min-separations (for n = 2000) to this run's n."""
  rounds: int

  @property
  def quick(self) -> bool:
    return self.rounds != PAPER_ROUNDS

  def of(self, paper_value: float) -> int:
    """`paper_value` (rounds or a min-separation at n = 2000) at this run's n, >= 1."""
    return max(1, int(round(paper_value * self.rounds / PAPER_ROUNDS)))

  def grid(self, paper_values: Sequence[float]) -> list[int]:
    """The rescaled values, sorted and without repeats."""
    return sorted({self.of(v) for v in paper_values})

  def geometric(self, low: float, high: float, count: int,
                also: Sequence[float] = ()) -> list[int]:
    """`count` log-spaced paper values in [low, high] and `also`, rescaled."""
    return self.grid(list(np.geomspace(low, high, count)) + list(also))


def scale_for(quick: bool) -> Scale:
  """n = 120 for quick (test) runs, else the paper's n = 2000."""
  return Scale(QUICK_ROUNDS if quick else PAPER_ROUNDS)


# ---------------------------------------------------------------------------------------
# Mechanisms, built and evaluated once per process.


@dataclasses.dataclass(frozen=True)
class CurveMechanism:
  """One curve's mechanism: its legend label and the `catalog.build` arguments."""
  label: str
  name: str
  rounds: int
  min_sep: int
  max_participations: Optional[int] = None
  buffers: int = BLT_BUFFERS
  bands: Optional[int] = None
  optimize_for: str = MEAN

  def build_arguments(self) -> dict[str, Any]:
    """JSON-ready keyword arguments of `catalog.build` (the memo key, without the label)."""
    return {"name": self.name, "rounds": self.rounds, "min_sep": self.min_sep,
            "max_participations": self.max_participations, "buffers": self.buffers,
            "bands": self.bands, "optimize_for": self.optimize_for}


def blt(rounds: int, min_sep: int, max_participations: Optional[int], buffers: int,
        optimize_for: str, label: str) -> CurveMechanism:
  """A BLT(d = `buffers`) optimized for `optimize_for` at (n, b, k) (k None: ⌈n/b⌉)."""
  return CurveMechanism(label, "blt", rounds, min_sep, max_participations, buffers,
                        optimize_for=optimize_for)


def bandmf(rounds: int, bands: int, label: str) -> CurveMechanism:
  """BandMF optimized (for RmsLoss) for n rounds and b̂ = bands (its optimum is free of k)."""
  return CurveMechanism(label, "bandmf", rounds, bands, bands=bands)


def tree_full(rounds: int) -> CurveMechanism:
  """TreeAgg-Full: the binary tree inside [0, n) with optimal pseudo-inverse decoding."""
  return CurveMechanism("TreeAgg-Full", "tree_full", rounds, 1)


_EVALUATED: dict[tuple[catalog.Mechanism, int, int, int], catalog.Evaluation] = {}


def built(mechanism: CurveMechanism) -> tuple[catalog.Built, bool]:
  """(`figure_spec.built` of `mechanism`, whether an earlier call of this process, in any
  figure module, built it)."""
  arguments = mechanism.build_arguments()
  name = arguments.pop("name")
  reused = figure_spec.is_built(name, **arguments)
  return figure_spec.built(name, **arguments), reused


def evaluation(mechanism: CurveMechanism, rounds: int, min_sep: int,
               max_participations: Optional[int]) -> catalog.Evaluation:
  """`catalog.evaluate` of `mechanism` for n rounds under Π(b, k) (k None: ⌈n/b⌉)."""
  k, _ = sensitivity.feasible_participations(rounds, min_sep, max_participations)
  shared = built(mechanism)[0].mechanism
  key = (shared, rounds, min_sep, k)  # The shared build: one object per mechanism.
  if key not in _EVALUATED:
    _EVALUATED[key] = catalog.evaluate(shared, rounds, min_sep, k)
  return _EVALUATED[key]


# ---------------------------------------------------------------------------------------
# Series and panels: the JSON every drawing is made from.


def curve_series(mechanism: CurveMechanism, x_name: str,
                 points: Sequence[tuple[int, int, Optional[int]]]) -> dict[str, Any]:
  """RmsLoss of `mechanism` at points (n, b, k); x is n or b (`x_name`: "rounds"/"min_sep")."""
  evaluations = [evaluation(mechanism, *point) for point in points]
  return {
      "label": mechanism.label,
      "mechanism": mechanism.build_arguments(),
      "x": [int(getattr(e, x_name)) for e in evaluations],
      "y": [float(e.rms_loss) for e in evaluations],
      "rounds": [int(e.rounds) for e in evaluations],
      "min_sep": [int(e.min_sep) for e in evaluations],
      "max_participations": [int(e.max_participations) for e in evaluations],
      "sensitivity_kind": [e.sensitivity_kind for e in evaluations],
  }


def over_min_sep(mechanisms: Sequence[CurveMechanism], rounds: int, min_seps: Sequence[int],
                 max_participations: Optional[int]) -> list[dict[str, Any]]:
  """RmsLoss of each mechanism over b (k = None: k = ⌈n/b⌉, else capped at it)."""
  return [curve_series(m, "min_sep", [(rounds, b, max_participations) for b in min_seps])
          for m in mechanisms]


def relative(series: Sequence[Mapping[str, Any]], reference: str) -> list[dict[str, Any]]:
  """Each series divided pointwise (at equal x) by the series labelled `reference`."""
  ref = next(s for s in series if s["label"] == reference)
  by_x = dict(zip(ref["x"], ref["y"]))
  return [dict(s, y=[y / by_x[x] for x, y in zip(s["x"], s["y"])], relative_to=reference)
          for s in series]


def make_panel(title: str, xlabel: str, ylabel: str, series: Sequence[Mapping[str, Any]],
               xscale: str = "log", yscale: str = "linear") -> dict[str, Any]:
  """One panel of a figure's JSON: its axes and the series drawn on them."""
  return {"title": title, "xlabel": xlabel, "ylabel": ylabel, "xscale": xscale,
          "yscale": yscale, "series": list(series)}


def y_at(series: Sequence[Mapping[str, Any]], label: str) -> dict[int, float]:
  """{x: y} of the series labelled `label`."""
  found = next(s for s in series if s["label"] == label)
  return dict(zip(found["x"], found["y"]))


def figure_data(number: int, title: str, caption: str, paper: Mapping[str, Any],
                differences: Sequence[str], checks: Sequence[Mapping[str, Any]],
                panels: Sequence[Mapping[str, Any]], scale: Scale, started: float,
                **extra: Any) -> dict[str, Any]:
  """The JSON of Fig. `number`: its title, caption, the paper's numbers, differences, checks
  and panels, with the scale and the seconds since `started`."""
  if scale.quick:  # The paper's n and b appear in `title`; say they were scaled down.
    title += f" [quick: n and b scaled by {scale.rounds}/{PAPER_ROUNDS}]"
  return {"title": f"Paper 004, Fig. {number}: {title}", "caption": caption,
          "paper": dict(paper), "differences": list(differences), "checks": list(checks),
          "panels": list(panels), "quick": scale.quick, "rounds": scale.rounds,
          "compute_seconds": time.perf_counter() - started, **extra}


RMS_LOSS = "RmsLoss = sens × RmsError (Eq. 10)"
LOWER_BOUND_NOTE = (
    "Sensitivity per point as `catalog.evaluate` gives it: Thm. 3.1 for BLTs, column norms "
    "for BandMF with b ≥ bands, the exact maximum where the library certifies it (BandMF "
    "with b < bands and small k; TreeAgg-Full by its dynamic program), else the Remark 3.2 "
    "lower bound, recorded in `sensitivity_kind` and drawn as an open marker.")


# ---------------------------------------------------------------------------------------
# Figs. 3 and 4: BandMF vs BLTs over b, with k fixed (Fig. 3) or k = n/b (Fig. 4).


def blts_and_bandmf(scale: Scale, k: int) -> list[CurveMechanism]:
  """BLT(d=4), BLT(d=2) for (b̂, k) and BandMF(b̂), b̂ = 400 rescaled: Figs. 3 and 4."""
  n, b_hat = scale.rounds, scale.of(PAPER_MIN_SEP)
  return ([blt(n, b_hat, k, d, MEAN, f"BLT(d={d}, b̂={b_hat})") for d in (BLT_BUFFERS, 2)]
          + [bandmf(n, b_hat, f"BandMF(b̂={b_hat})")])


def relative_and_unnormalized(series: Sequence[Mapping[str, Any]], reference: str,
                              xlabel: str, xscale: str = "log",
                              unnormalized_yscale: str = "linear") -> list[dict[str, Any]]:
  """The left (relative to `reference`) and right (unnormalized) panels of Figs. 3-5."""
  return [make_panel(f"relative to {reference}", xlabel, f"RmsLoss / RmsLoss of {reference}",
                     relative(series, reference), xscale=xscale),
          make_panel("unnormalized", xlabel, RMS_LOSS, series, xscale=xscale,
                     yscale=unnormalized_yscale)]


def smoothness_check(series: Sequence[Mapping[str, Any]], blt_label: str,
                     bandmf_label: str) -> dict[str, Any]:
  """The claim of Figs. 3 and 4 that the BLT's curve is smoother across b (`roughness`)."""
  blt_curve = next(s for s in series if s["label"] == blt_label)
  bandmf_curve = next(s for s in series if s["label"] == bandmf_label)
  blt_rough = figure_spec.roughness(blt_curve["x"], blt_curve["y"])
  bandmf_rough = figure_spec.roughness(bandmf_curve["x"], bandmf_curve["y"])
  return figure_spec.claim(
      "The BLT curve is smoother across b than BandMF's", blt_rough < bandmf_rough,
      f"Σ|Δ slope| of log RmsLoss vs log b: {blt_label} {blt_rough:.3f}, "
      f"{bandmf_label} {bandmf_rough:.3f}")


# ---------------------------------------------------------------------------------------
# Drawing (from the JSON only).

_COLORS = ("tab:blue", "tab:cyan", "tab:orange", "tab:red", "tab:green", "tab:olive",
           "tab:purple", "tab:brown", "tab:pink", "tab:gray")
_LINESTYLE = {"blt": "-", "bandmf": "--", "tree_full": ":"}
LOWER_BOUND_LEGEND = ("open markers: sensitivity is the Remark 3.2 lower bound (that loss is "
                      "optimistic)")


def draw(data: Mapping[str, Any]) -> Any:
  """The figure of `data` (a Fig. 1-6 `compute` result, possibly JSON round-tripped).

  One Axes per panel; a label keeps its color across panels; points whose sensitivity is a
  lower bound get open markers, explained in a note under the axes.
  """
  panels = data["panels"]
  if len(panels) == 1:
    figure, axes = writers.new_figure(7.5, 4.8)
    axes = [axes]
  else:
    from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
    figure = Figure(figsize=(6.8 * len(panels), 5.0))
    axes = list(figure.subplots(1, len(panels)))
  colors: dict[str, str] = {}
  any_lower_bound = False
  for ax, panel in zip(axes, panels):
    for series in panel["series"]:
      color = colors.setdefault(series["label"], _COLORS[len(colors) % len(_COLORS)])
      linestyle = _LINESTYLE.get(series["mechanism"]["name"], "-.")
      ax.plot(series["x"], series["y"], linestyle=linestyle, marker="o", markersize=3.5,
              color=color, label=series["label"])
      lower = [(x, y) for x, y, kind in zip(series["x"], series["y"],
                                            series.get("sensitivity_kind", ()))
               if kind == catalog.LOWER_BOUND]
      if lower:
        any_lower_bound = True
        ax.plot(*zip(*lower), linestyle="none", marker="o", markersize=6,
                markerfacecolor="white", color=color, label="_nolegend_")
    ax.set_xscale(panel["xscale"])
    ax.set_yscale(panel["yscale"])
    ax.set_xlabel(panel["xlabel"])
    ax.set_ylabel(panel["ylabel"])
    ax.set_title(panel["title"], fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2 if len(panel["series"]) > 6 else 1)
  figure.suptitle(data["title"])
  if any_lower_bound:
    figure.text(0.5, -0.01, LOWER_BOUND_LEGEND, ha="center", va="top", fontsize=8)
  return figure

