"""One paper figure = the numbers it plots (JSON) + a drawing made from those numbers only.

`scripts/paper004_figures` runs `compute`, writes its JSON, then draws the PNG from the JSON
read back (`draw(data)`, by `dp_fl.results`, the pattern every study of the repository writes its
results by), so a figure never shows more than the file beside it; `--replot` redraws from
committed JSON without recomputing. One module of this package per figure, each exposing
`FIGURE`; `paper004.FIGURES` lists them in the paper's order.

`compute(quick)` returns a JSON-ready dict with at least:
  "caption": the settings behind every curve (n, b, k, d, σ, what the y-axis is, ...);
  "paper": what paper 004 prints for this figure (numbers where it prints them, else a
    sentence on the shape its figure shows), and "differences": where ours differ and why.
`quick=True` shrinks every setting so the whole compute+draw path runs in seconds (tests);
the committed figures use `quick=False`.

Shared by every figure module, since `scripts/paper004_figures` runs them all in one process:
`built` (one memo of `catalog.build` per process, so a mechanism that two figure modules use,
e.g. BandMF(n=2000, b̂=400), is optimized once), `claim` (one entry of a figure's "checks")
and `log_log_slopes` / `roughness` (the shape measures behind the "smoother" claims).
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog


@dataclasses.dataclass(frozen=True)
class PaperFigure:
  """A reproducible figure: `name` is the file stem under the output directory."""
  name: str
  title: str
  compute: Callable[[bool], dict[str, Any]]
  draw: Callable[[Mapping[str, Any]], Any]  # -> matplotlib.figure.Figure

  def __post_init__(self):
    if not self.name or any(c in self.name for c in "/\\ ."):
      raise ValueError(f"A figure's name is a file stem without '/', '.' or spaces; got "
                       f"{self.name!r}.")


def check_data(figure: PaperFigure, data: Mapping[str, Any]) -> Mapping[str, Any]:
  """Refuses figure data without the keys every figure JSON carries."""
  missing = [key for key in ("caption", "paper") if key not in data]
  if missing:
    raise ValueError(f"Figure {figure.name!r}: its data lacks {missing}; every figure "
                     "records its settings ('caption') and the paper's numbers ('paper').")
  return data


# ---------------------------------------------------------------------------------------
# Built mechanisms, shared by every figure of the process.


class _ErrorsOnce(catalog.Mechanism):
  """`mechanism` with its per-round errors computed once per n.

  The squared row norms of B = A C⁻¹ do not depend on (b, k), and for BandMF and TreeAgg-Full
  they cost a dense O(n³) solve; a sweep over b (Figs. 2-6), or an RMSE-matched σ computed
  by two figures (Figs. 8, 9), then costs one solve per n.
  """

  def __init__(self, mechanism: catalog.Mechanism):
    self.inner = mechanism
    self.name = mechanism.name
    self.description = mechanism.description
    self._errors: dict[int, np.ndarray] = {}

  @property
  def max_rounds(self):
    return self.inner.max_rounds

  def sensitivity(self, rounds, min_sep, max_participations):
    return self.inner.sensitivity(rounds, min_sep, max_participations)

  def per_query_squared_error(self, rounds):
    if rounds not in self._errors:
      self._errors[rounds] = self.inner.per_query_squared_error(rounds)
    return self._errors[rounds]

  def buffers(self, rounds):
    return self.inner.buffers(rounds)

  def streaming_noise(self, rounds=None):
    return self.inner.streaming_noise(rounds)

  def to_dict(self):
    return self.inner.to_dict()


_BUILT: dict[tuple, catalog.Built] = {}


def _build_key(name: str, build_kwargs: Mapping[str, Any]) -> tuple:
  """`catalog.build`'s arguments with its defaults filled in, as a sorted tuple.

  A default spelled out and one left out give the same key (`buffers=4` and no `buffers`);
  any other difference, e.g. BandMF's `bands=None` against `bands=400`, gives another key.
  """
  bound = inspect.signature(catalog.build).bind(name, **build_kwargs)
  bound.apply_defaults()
  return tuple(sorted(bound.arguments.items()))


def is_built(name: str, **build_kwargs: Any) -> bool:
  """Whether `built(name, **build_kwargs)` would return an earlier call's mechanism."""
  return _build_key(name, build_kwargs) in _BUILT


def built(name: str, **build_kwargs: Any) -> catalog.Built:
  """`catalog.build(name, **build_kwargs)`, built once per process.

  Every figure module builds its mechanisms here, so equal mechanisms are optimized once per
  process (BandMF costs 10-120 s at n = 2000). Key: `name` and the keyword arguments sorted,
  with `catalog.build`'s defaults filled in (`_build_key`): spell the arguments of equal
  mechanisms identically across modules. A BandMF is best keyed by rounds, min_sep = bands
  and optimize_for="rms" (its optimum depends on (n, bands) only; min_sep and k are only
  recorded). `optimize_seconds` is the first build's time, also when returned again (see
  `is_built`). The mechanism memoizes its per-round errors per n (`_ErrorsOnce`); a k reduced
  to ⌈n/b⌉ is recorded in `notes`, not warned.
  """
  key = _build_key(name, build_kwargs)
  if key not in _BUILT:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", blt.ParticipationReducedWarning)
      result = catalog.build(name, **build_kwargs)
    _BUILT[key] = dataclasses.replace(result, mechanism=_ErrorsOnce(result.mechanism))
  return _BUILT[key]


# ---------------------------------------------------------------------------------------
# Checks: the paper's claims evaluated on a figure's numbers.


def claim(text: str, holds: bool, detail: str) -> dict[str, Any]:
  """One entry of a figure's "checks": the paper's claim (as made concrete), whether our
  numbers bear it out, and the numbers that decide it."""
  return {"claim": text, "holds": bool(holds), "detail": detail}


def log_log_slopes(xs: Sequence[float], ys: Sequence[float]) -> np.ndarray:
  """Δlog y / Δlog x between adjacent points: a curve's local slopes on log-log axes."""
  return np.diff(np.log(np.asarray(ys, float))) / np.diff(np.log(np.asarray(xs, float)))


def roughness(xs: Sequence[float], ys: Sequence[float]) -> float:
  """Σ |change of the log-log slope| between adjacent segments: 0 for a straight line (a
  power law) on log-log axes, larger the more a curve bends or kinks."""
  return float(np.sum(np.abs(np.diff(log_log_slopes(xs, ys)))))
