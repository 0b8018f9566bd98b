"""One entry point to every mechanism: build by name, evaluate, serialize, stream.

The mechanism modules (`blt`, `banded`, `tree`, identity for DP-SGD) each speak their own
math; this module gives the command-line tools, the accounting code and the aggregators one
vocabulary for all of them:

    mechanism = catalog.build("blt", rounds=2052, min_sep=342, max_participations=6,
                              buffers=4, optimize_for="max")
    report = catalog.evaluate(mechanism, rounds=2052, min_sep=342, max_participations=6)
    noise = mechanism.streaming_noise()      # the noise spec: init(shape) / next(z_t, state)
    params = mechanism.to_dict()             # JSON; catalog.from_dict(params) restores it

Evaluation follows paper 004: sensitivity under the min-separation schema Π(b, k) (Thm 3.1
for non-increasing Toeplitz C, column norms for banded C with b >= bands, the exhaustive
maximum where CᵀC ≥ 0 and the search fits its budget; otherwise the Remark 3.2 *lower bound*,
always next to a valid upper bound (`Sensitivity.guaranteed`, what privacy claims use)),
MaxError / RmsError (Prop. 3.3) and MaxLoss = sens × MaxError, RmsLoss = sens × RmsError
(Eqs. 9-10; from the paper's value, as its Table 3 does).
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
import math
import time
import warnings
from typing import Any, Callable, Mapping, Optional

import numpy as np

from dp_fl import _checks
from dp_fl import files
from dp_fl import resources
from dp_fl.mechanisms import banded
from dp_fl.mechanisms import banded_optimize
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import blt_closed_form
from dp_fl.mechanisms import blt_optimize
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import streaming
from dp_fl.mechanisms import tree


# Sensitivity kinds, as reported.
EXACT = "exact"
LOWER_BOUND = "lower_bound"


@dataclasses.dataclass(frozen=True)
class Sensitivity:
  """sens_Π(C) for unit clip norm, and how it was obtained.

  `value` is what paper 004 reports (exact, or the Remark 3.2 lower bound); `upper` is a value
  the true sensitivity never exceeds (equal to `value` when exact). Privacy decisions and
  headline guarantees use `guaranteed` (= `upper`), never a lower bound.
  """
  value: float
  kind: str  # EXACT or LOWER_BOUND
  method: str  # e.g. "Thm 3.1", "column norms (b >= bands)", "Remark 3.2"
  upper: Optional[float] = None  # None: equal to `value` (only allowed when exact).
  upper_method: str = ""

  def __post_init__(self):
    if self.kind not in (EXACT, LOWER_BOUND):
      raise ValueError(f"`kind` must be {EXACT!r} or {LOWER_BOUND!r}; got {self.kind!r}.")
    if self.kind == LOWER_BOUND and self.upper is None:
      raise ValueError("A lower-bound sensitivity needs a valid `upper` bound next to it.")

  @property
  def is_exact(self) -> bool:
    return self.kind == EXACT

  @property
  def guaranteed(self) -> float:
    """An upper bound on the true sensitivity: the exact value, or `upper`."""
    return self.value if self.upper is None else max(self.value, self.upper)


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """A mechanism evaluated for n rounds under Π(min_sep, max_participations)."""
  mechanism: str
  rounds: int
  min_sep: int
  max_participations: int
  requested_max_participations: int
  sensitivity: float
  sensitivity_kind: str
  sensitivity_method: str
  max_error: float
  rms_error: float
  max_loss: float
  rms_loss: float
  buffers: Optional[int]  # Model-sized arrays of the streaming state; None: cannot stream.
  notes: tuple[str, ...] = ()
  # A value the true sensitivity never exceeds (= `sensitivity` when exact): what privacy
  # guarantees use (`Sensitivity.guaranteed`).
  sensitivity_guaranteed: Optional[float] = None

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["notes"] = list(self.notes)
    return d


def bracketed(lower: float, lower_method: str, upper: float, upper_method: str
               ) -> Sensitivity:
  """A sensitivity known to lie in [lower, upper]; exact when the two bounds meet (to 1e-12
  relative: then the upper value is reported, so nothing is ever below a valid bound)."""
  if upper <= lower * (1.0 + 1e-12):
    return Sensitivity(max(lower, upper), EXACT,
                       f"{lower_method} = {upper_method} (the bounds meet)")
  return Sensitivity(lower, LOWER_BOUND, lower_method, upper=upper, upper_method=upper_method)


class Mechanism(abc.ABC):
  """A factorization A = B C with a streaming generator of the noise C⁻¹ Z."""

  name: str = ""
  description: str = ""

  @property
  def max_rounds(self) -> Optional[int]:
    """Rounds the mechanism is defined for; None when any n works (BLT, trees, DP-SGD)."""
    return None

  def check_rounds(self, rounds: int) -> int:
    """`rounds` as an int, refused if the mechanism is not defined for it or if evaluating
    it for that many rounds would exceed the memory or time budget (`dp_fl.resources`)."""
    n = streaming.check_rounds(rounds, self.max_rounds, self.name)
    if self.name in _FAMILIES:
      estimate = evaluation_cost(self.name, n)
      resources.require(estimate, {"rounds": n}, fits_up_to=_fits_up_to(
          lambda m: evaluation_cost(self.name, m), n, estimate))
    return n

  @abc.abstractmethod
  def sensitivity(self, rounds: int, min_sep: int,
                  max_participations: Optional[int]) -> Sensitivity:
    """sens_Π(b,k)(C) restricted to the first `rounds` rounds.

    k is capped at ⌈n/b⌉ (`sensitivity.feasible_participations`; None: as many as fit).
    """

  @abc.abstractmethod
  def per_query_squared_error(self, rounds: int) -> np.ndarray:
    """Squared row norms of B = A C⁻¹ (or the decoder used) for n rounds."""

  @abc.abstractmethod
  def streaming_noise(self, rounds: Optional[int] = None) -> streaming.StreamingNoise:
    """The noise spec: the streaming generator of rows of C⁻¹ Z (paper 004, Alg. 3 for BLTs).

    `rounds` sizes the online tree's state (None: it grows as needed, NumPy only); the TF
    aggregator builds its generator from this spec (`dp_fl.aggregators.noise.from_spec`).
    """

  @abc.abstractmethod
  def to_dict(self) -> dict[str, Any]:
    """JSON-ready parameters, with a "mechanism" key naming the mechanism."""

  def buffers(self, rounds: int) -> Optional[int]:
    """Model-sized arrays the streaming state holds for n rounds; None if it cannot stream."""
    return self.streaming_noise(rounds).buffers

  def lower_triangular_input(self, rounds: int) -> dict[str, np.ndarray]:
    """C for n rounds as {"toeplitz_coefs": c} or {"matrix": C} (square, lower-triangular).

    Used by accounting that needs C itself (balls-in-bins Monte Carlo, paper 003).
    """
    raise ValueError(
        f"The {self.name} mechanism's C is not a square lower-triangular matrix, which "
        f"balls-in-bins accounting (paper 003) needs; use blt, bandmf, tree or dpsgd.")


def mechanism_digest(mechanism: Optional[Mechanism]) -> Optional[str]:
  """SHA-256 of the mechanism's parameters (canonical JSON); None without a mechanism."""
  if mechanism is None:
    return None
  text = json.dumps(mechanism.to_dict(), sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode("utf-8")).hexdigest()


class BltMechanism(Mechanism):
  """BLT(θ, ω) (paper 004, Eq. 2); streaming by Alg. 3 with d model-sized buffers."""

  name = "blt"
  description = "buffered linear Toeplitz (BLT) DP-FTRL"

  def __init__(self, params: blt.Blt):
    self.blt = params

  def sensitivity(self, rounds, min_sep, max_participations):
    n = self.check_rounds(rounds)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", blt.ParticipationReducedWarning)
      value = self.blt.sensitivity(n, min_sep, max_participations)
    return Sensitivity(value, EXACT, "Thm 3.1 (non-increasing Toeplitz C)")

  def per_query_squared_error(self, rounds):
    return self.blt.per_query_squared_error(self.check_rounds(rounds))

  def streaming_noise(self, rounds=None):
    return streaming.BltStreamingNoise(self.blt.theta, self.blt.omega)

  def lower_triangular_input(self, rounds):
    return {"toeplitz_coefs": self.blt.coef(self.check_rounds(rounds))}

  def to_dict(self):
    return self.blt.to_dict()


class DpSgdMechanism(Mechanism):
  """C = I: independent noise every round (DP-SGD / DP-FedAvg without sampling)."""

  name = "dpsgd"
  description = "independent Gaussian noise (DP-SGD, C = I)"

  def sensitivity(self, rounds, min_sep, max_participations):
    n = self.check_rounds(rounds)
    k, _ = sensitivity_lib.feasible_participations(n, min_sep, max_participations)
    return Sensitivity(math.sqrt(k), EXACT, "column norms of C = I: sqrt(k)")

  def per_query_squared_error(self, rounds):
    n = self.check_rounds(rounds)
    return np.arange(1, n + 1, dtype=np.float64)  # Row t of B = A has t + 1 ones.

  def streaming_noise(self, rounds=None):
    return streaming.IdentityStreamingNoise()

  def lower_triangular_input(self, rounds):
    return {"toeplitz_coefs": np.eye(1, self.check_rounds(rounds))[0]}

  def to_dict(self):
    return {"mechanism": self.name}


class BandedMechanism(Mechanism):
  """BandMF: column-normalized banded C optimized for RmsLoss (paper 004 ref. [8])."""

  name = "bandmf"
  description = "banded matrix factorization (BandMF) DP-FTRL"

  def __init__(self, params: "banded.BandedMF"):
    self.banded = params

  @property
  def max_rounds(self):
    return self.banded.n

  def _dense(self, n):
    return self.banded.dense()[:n, :n]

  def sensitivity(self, rounds, min_sep, max_participations):
    n = self.check_rounds(rounds)
    k, _ = sensitivity_lib.feasible_participations(n, min_sep, max_participations)
    c = self._dense(n)
    if min_sep >= self.banded.bands:
      value = sensitivity_lib.banded_sensitivity(c, self.banded.bands, min_sep, k)
      return Sensitivity(value, EXACT, "column norms (min_sep >= bands)")
    # Columns overlap: exact by the maximal-pattern search when CᵀC ≥ 0 and it fits the
    # budget (Eq. 6), else bracketed by Remark 3.2 and the |CᵀC| upper bound.
    certified = sensitivity_lib.certified_sensitivity(c, min_sep, k)
    if certified.kind == sensitivity_lib.EXACT:
      return Sensitivity(certified.value, EXACT, certified.method)
    value = sensitivity_lib.lower_bound_sensitivity(c, min_sep, k)
    return bracketed(value,
                      f"Remark 3.2 lower bound (min_sep {min_sep} < bands {self.banded.bands})",
                      certified.value, certified.method)

  def per_query_squared_error(self, rounds):
    return self.banded.per_query_squared_error(self.check_rounds(rounds))

  def streaming_noise(self, rounds=None):
    if rounds is not None:
      self.check_rounds(rounds)
    return streaming.BandedStreamingNoise.from_band_array(self.banded.band)

  def lower_triangular_input(self, rounds):
    return {"matrix": self._dense(self.check_rounds(rounds))}

  def to_dict(self):
    return self.banded.to_dict()


class TreeMechanism(Mechanism):
  """Binary-tree aggregation: online TreeAgg (Kairouz et al.) or TreeAgg-Full decoding."""

  def __init__(self, full: bool, complete: bool = False,
               max_work: Optional[int] = tree.DEFAULT_MAX_WORK):
    """Args: full (TreeAgg-Full decoding), complete (tree completed to a power of two),
    max_work (budget of the exact sensitivity's dynamic program; beyond it the Remark 3.2
    lower bound is used and labelled)."""
    self.full = full
    self.complete = complete
    self.max_work = max_work
    self.name = "tree_full" if full else "tree"
    self.description = ("TreeAgg-Full (optimal pseudo-inverse decoding)" if full
                        else "online TreeAgg (Kairouz et al. 2021)")

  def _tree(self, n):
    return tree.binary_tree_matrix(n, complete=self.complete)

  def sensitivity(self, rounds, min_sep, max_participations):
    n = self.check_rounds(rounds)
    k, _ = sensitivity_lib.feasible_participations(n, min_sep, max_participations)
    value, kind, method = tree.tree_sensitivity(n, min_sep, k, complete=self.complete,
                                                max_work=self.max_work)
    if kind == EXACT:
      return Sensitivity(value, kind, method)
    # Out of budget: Remark 3.2 from below, the |CᵀC| bound from above (Gram built once).
    upper = sensitivity_lib.upper_bound_sensitivity(
        None, min_sep, k, gram=tree.tree_gram(n, complete=self.complete))
    return bracketed(value, method, upper, sensitivity_lib.METHOD_UPPER_BOUND)

  def per_query_squared_error(self, rounds):
    n = self.check_rounds(rounds)
    return tree.per_query_squared_error(n, full=self.full, complete=self.complete)

  def buffers(self, rounds):
    return None if self.full else super().buffers(rounds)

  def streaming_noise(self, rounds=None):
    if self.full:
      raise ValueError(
          "`tree_full` decodes with the pseudo-inverse of the whole tree, which needs every "
          "round's noise at once; it is offered for loss comparison only. Use `tree` "
          "(online TreeAgg) for training.")
    return streaming.TreeStreamingNoise(None if rounds is None else self.check_rounds(rounds))

  def lower_triangular_input(self, rounds):
    if self.full:  # TreeAgg-Full decodes all nodes: its C is not square.
      return super().lower_triangular_input(rounds)
    # Online TreeAgg: row t is the node completed at round t (the noise TreeNoise adds).
    return {"matrix": tree.online_tree_matrix(self.check_rounds(rounds))}

  def to_dict(self):
    return {"mechanism": self.name, "complete": self.complete}


def evaluate(mechanism: Mechanism, rounds: int, min_sep: int,
             max_participations: Optional[int] = None) -> Evaluation:
  """Sensitivity, errors and losses of `mechanism` for n rounds under Π(b, k)."""
  n = mechanism.check_rounds(rounds)
  k, note = sensitivity_lib.feasible_participations(n, min_sep, max_participations)
  requested = k if max_participations is None else max_participations
  sens = mechanism.sensitivity(n, min_sep, k)
  errors = mechanism.per_query_squared_error(n)
  max_error = float(np.sqrt(np.max(errors)))
  rms_error = float(np.sqrt(np.mean(errors)))
  notes = tuple(x for x in (note,) if x)
  if sens.kind == LOWER_BOUND:
    notes += ("sensitivity is a LOWER BOUND (paper 004, Remark 3.2): losses and any ε derived "
              f"from it are optimistic; privacy guarantees use the upper bound "
              f"{sens.guaranteed:.6g} ({sens.upper_method})",)
  return Evaluation(
      mechanism=mechanism.name, rounds=n, min_sep=min_sep, max_participations=k,
      requested_max_participations=int(requested), sensitivity=sens.value,
      sensitivity_kind=sens.kind, sensitivity_method=sens.method, max_error=max_error,
      rms_error=rms_error, max_loss=sens.value * max_error, rms_loss=sens.value * rms_error,
      buffers=mechanism.buffers(n), notes=notes, sensitivity_guaranteed=sens.guaranteed)


@dataclasses.dataclass(frozen=True)
class Built:
  """A mechanism and how long building (optimizing) it took."""
  mechanism: Mechanism
  optimize_seconds: float
  notes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class BuildOptions:
  """What a mechanism is built for: the schedule Π(b, k) over n rounds, and the knobs some
  families use (the others ignore them)."""
  rounds: int  # n
  min_sep: int  # b
  max_participations: int  # k, already capped at ⌈n/b⌉
  buffers: int = 4  # BLT buffers d
  bands: Optional[int] = None  # BandMF bands (None: min(b, n))
  optimize_for: str = "max"  # "max" (MaxLoss, Eq. 9) or "rms" (RmsLoss, Eq. 10)
  seed: int = 0  # the optimizer's random starts (public)


def bands_for(options: BuildOptions) -> tuple[int, tuple[str, ...]]:
  """(p, notes): the bands of a banded C or C⁻¹ built for `options` (BSR, BISR, BandInvMF):
  `options.bands`, default min(b, n) (the most with column-norm sensitivity for b-separated
  participation), at most n (said in the note when capped)."""
  if options.bands is None:
    return min(options.min_sep, options.rounds), ()
  bands = _checks.check_positive_int("bands", options.bands)
  if bands > options.rounds:
    return options.rounds, (f"bands={bands} > rounds={options.rounds}: using "
                            f"{options.rounds} (no more bands than rounds).",)
  return bands, ()


def _linear_cost(bytes_per_round: float, seconds_per_round: float = 0.0,
                 what: str = "") -> Callable[[int], resources.Estimate]:
  """An evaluation cost linear in n (length-n coefficient and error arrays)."""
  def cost(rounds: int) -> resources.Estimate:
    return resources.Estimate(
        f"evaluating {what} for n={rounds} rounds", bytes_per_round * rounds,
        seconds_per_round * rounds, f"~{bytes_per_round:g} n bytes")
  return cost


def _no_build_cost(options: BuildOptions) -> resources.Estimate:
  return resources.Estimate("building (nothing to optimize)", 0.0)


@dataclasses.dataclass(frozen=True)
class Family:
  """One mechanism name: how to build (optimize) it, restore it from its JSON, and what
  building and evaluating it cost.

  `build` returns the mechanism and notes for the user (e.g. an ignored option).
  `build_cost(options)` and `evaluation_cost(rounds)` estimate peak memory and time
  (`dp_fl.resources.Estimate`) before the work starts; `build` and `Mechanism.check_rounds`
  refuse what exceeds the budget.
  """
  name: str
  description: str
  build: Callable[[BuildOptions], tuple[Mechanism, tuple[str, ...]]]
  from_dict: Callable[[Mapping[str, Any]], Mechanism]
  build_cost: Callable[[BuildOptions], resources.Estimate] = _no_build_cost
  evaluation_cost: Callable[[int], resources.Estimate] = _linear_cost(16.0)
  # The loss the family optimizes when the caller names none (`optimize_for=None`): the one
  # default every path (training's registry, scripts/mechanism, scripts/privacy) shares.
  default_optimize_for: str = "max"
  # How `--mechanism=name` trains (dp_fl.training.registry makes a DP-FTRL entry of every
  # family that trains and has no entry of its own): `trains` False keeps a family out of
  # training (an analysis-only C); `banded`: C is banded, so cyclic Poisson's amplification
  # applies; `knobs`: the build options it reads beyond (n, b, k) — "" none, "bands"
  # (`--bands`) or "blt" (BLT's buffers).
  trains: bool = True
  banded: bool = False
  knobs: str = ""


_FAMILIES: dict[str, Family] = {}
KNOBS = ("", "bands", "blt")  # `Family.knobs`: what a family's build reads beyond (n, b, k).


def register(family: Family) -> Family:
  """Makes `family.name` known to `build`, `from_dict` and `load_or_build` (README recipe).

  A mechanism module registers its family when it is imported; `dp_fl.training.registry`
  imports every module whose mechanism trains, and `dp_fl.mechanisms.families` every one
  (for the tools that do not import the training tier, e.g. `scripts/privacy`).
  """
  if not family.name or family.name in _FAMILIES:
    raise ValueError(f"A mechanism family needs a new, non-empty name; {family.name!r} is "
                     f"{'empty' if not family.name else 'already registered'}.")
  if family.knobs not in KNOBS:
    raise ValueError(f"The family {family.name!r} has knobs={family.knobs!r}; use one of "
                     f"{KNOBS} (the build options it reads beyond (n, b, k)).")
  _FAMILIES[family.name] = family
  return family


def names() -> tuple[str, ...]:
  """The registered mechanism names, built-in first."""
  return tuple(_FAMILIES)


def family(name: str) -> Family:
  """The family of `name`; unknown names fail with the known ones."""
  found = _FAMILIES.get(name)
  if found is None:
    raise ValueError(f"`mechanism` must be one of {names()}; got {name!r}.")
  return found


def evaluation_cost(name: str, rounds: int) -> resources.Estimate:
  """Estimated peak memory and time of evaluating mechanism `name` for n rounds."""
  return family(name).evaluation_cost(rounds)


def _fits_up_to(estimate_at: Callable[[int], resources.Estimate], rounds: int,
                estimate: resources.Estimate) -> Optional[int]:
  """The most rounds that fit the budgets when `estimate` (at `rounds`) does not."""
  if (estimate.bytes <= resources.memory_budget()
      and estimate.seconds <= resources.time_budget()):
    return None
  fits = resources.largest_fitting(estimate_at, 1, rounds, resources.memory_budget(),
                                   resources.time_budget())
  return fits if fits >= 1 else None


def build_options(name: str, *, rounds: int, min_sep: int,
                  max_participations: Optional[int] = None, buffers: int = 4,
                  bands: Optional[int] = None, optimize_for: Optional[str] = None,
                  seed: int = 0) -> tuple[BuildOptions, Optional[str]]:
  """The validated `BuildOptions` of `build` (k capped at ⌈n/b⌉; `optimize_for` None: the
  family's `default_optimize_for`) and the note on it."""
  chosen = family(name)
  if optimize_for is None:
    optimize_for = chosen.default_optimize_for
  n = _checks.check_positive_int("rounds", rounds)
  k, note = sensitivity_lib.feasible_participations(n, min_sep, max_participations)
  return BuildOptions(n, int(min_sep), k, buffers, bands, optimize_for, seed), note


def build(name: str, *, rounds: int, min_sep: int, max_participations: Optional[int] = None,
          buffers: int = 4, bands: Optional[int] = None, optimize_for: Optional[str] = None,
          seed: int = 0) -> Built:
  """Builds (optimizing where the mechanism is optimized) a mechanism by name.

  Args:
    name: one of `names()`.
    rounds: n, rounds to optimize for.
    min_sep: b, minimum separation between participations.
    max_participations: k; None = ⌈n/b⌉. Reduced to ⌈n/b⌉ if larger (noted).
    buffers: d, BLT buffers.
    bands: BandMF bands (default min(min_sep, rounds), the largest with exact column-norm
      sensitivity).
    optimize_for: "max" (MaxLoss) or "rms" (RmsLoss) for the optimized families (BLT,
      BandInvMF, two_band); None: the family's default (`Family.default_optimize_for`: MaxLoss
      for BLT, RmsLoss for BandMF, which optimizes nothing else, and for BandInvMF).
    seed: seed of the optimizer's random starts.

  Returns:
    A `Built`.

  Raises:
    ValueError: on bad input, or when building would exceed the memory or time budget of
      `dp_fl.resources` (checked before any work, naming --rounds and the fix).
  """
  chosen = family(name)
  options, note = build_options(name, rounds=rounds, min_sep=min_sep,
                                max_participations=max_participations, buffers=buffers,
                                bands=bands, optimize_for=optimize_for, seed=seed)
  at = lambda m: chosen.build_cost(dataclasses.replace(
      options, rounds=m, min_sep=min(options.min_sep, m),
      bands=None if options.bands is None else min(options.bands, m)))
  estimate = at(options.rounds)
  resources.require(estimate, {"rounds": options.rounds},
                    fits_up_to=_fits_up_to(at, options.rounds, estimate))
  start = time.perf_counter()
  mechanism, notes = chosen.build(options)
  return Built(mechanism, time.perf_counter() - start, ((note,) if note else ()) + notes)


def from_dict(data: Mapping[str, Any]) -> Mechanism:
  """Restores a mechanism from `Mechanism.to_dict()` output (e.g. a --params_in file)."""
  if not isinstance(data, Mapping) or "mechanism" not in data:
    raise ValueError("Mechanism parameters must be a JSON object with a 'mechanism' key "
                     f"(one of {names()}); got {str(data)[:200]!r}.")
  name = data["mechanism"]
  if name not in _FAMILIES:
    raise ValueError(f"Unknown mechanism {name!r} in parameters; expected one of {names()}.")
  return _FAMILIES[name].from_dict(data)


def load(path: str, name: Optional[str] = None, what: str = "Mechanism parameters"
         ) -> Mechanism:
  """The mechanism saved in the JSON file `path`; if `name` is given, it must be that one.

  `what` names the file in errors (e.g. "`--params_in`").
  """
  try:
    with open(path, encoding="utf-8") as f:
      data = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{what} {path!r} is not a readable JSON file ({e}).") from e
  try:
    mechanism = from_dict(data)
  except ValueError as e:
    raise ValueError(f"{what} {path!r}: {e}") from e
  if name is not None and mechanism.name != name:
    raise ValueError(f"{what} {path!r} holds a {mechanism.name!r} mechanism, but "
                     f"--mechanism={name}; pass --mechanism={mechanism.name} or another file.")
  return mechanism


def load_or_build(name: str, params_path: Optional[str] = None,
                  what: str = "Mechanism parameters", **build_args: Any) -> Built:
  """`load(params_path, name)` when a path is given, else `build(name, **build_args)`.

  The one way a mechanism is obtained by the training program (its run directory's
  mechanism.json, or --mechanism_params), `scripts/mechanism` and `scripts/privacy`
  (--params_in).
  """
  if params_path:
    return Built(load(params_path, name, what), 0.0)
  return build(name, **build_args)


def save(mechanism: Mechanism, path: str) -> None:
  """Writes `mechanism.to_dict()` to `path` as JSON, atomically."""
  files.atomic_write_json(path, mechanism.to_dict(), indent=1)


# ---------------------------------------------------------------------------------------
# The built-in families (paper 004, Table 1).


def _build_blt(options: BuildOptions) -> tuple[Mechanism, tuple[str, ...]]:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", blt.ParticipationReducedWarning)
    result = blt_optimize.optimize_blt(
        options.rounds, options.min_sep, options.max_participations,
        _checks.check_positive_int("buffers", options.buffers), loss=options.optimize_for,
        seed=options.seed)
  return BltMechanism(result.blt), ()


def _build_bandmf(options: BuildOptions) -> tuple[Mechanism, tuple[str, ...]]:
  notes = ()
  if options.optimize_for != "rms":
    notes = (f"BandMF is optimized for RmsLoss (paper 004 ref. [8]); "
             f"optimize_for={options.optimize_for!r} ignored.",)
  bands = (min(options.min_sep, options.rounds) if options.bands is None
           else _checks.check_positive_int("bands", options.bands))
  return BandedMechanism(banded_optimize.optimize_banded(
      options.rounds, options.min_sep, options.max_participations, bands=bands)), notes


def _blt_build_cost(options: BuildOptions) -> resources.Estimate:
  """`blt_optimize.optimize_blt` evaluates its losses in closed form (`blt_closed_form`): O(k d²)
  per evaluation, independent of n, on at most `CHUNK_ELEMENTS` (lag, buffer pair)
  elements at a time, for the up to 2d + 1 candidates of a buffer count together.
  Measured on the 2-core CPU (2026-11-26, tracemalloc): peak 0.36-0.55 MB for k <= 20
  (n up to 10^6), 4.2 MB at k = 100 (n = 10^7, d = 4), 10.2 MB at k = 5000 (d = 2) and
  22.8 MB at k = 20000 (d = 4), i.e. <= ~350 bytes per element and candidate; <= 1300
  candidate evaluations for d = 5 (~250 per buffer), each <= 1e-4 s plus ~1e-7 s per
  element (0.06 s at n = 2000, b = 400, k = 5; 8 s at k = 20000, d = 4). Model:
  1e6 + 500 B x (2d + 1) x elements; 2 + 350 d (2e-4 + 1.2e-7 k (d² + d)) s."""
  d = max(int(options.buffers), 1) if isinstance(options.buffers, int) else 4
  n = options.rounds
  k = sensitivity_lib.participation_cap(n, max(int(options.min_sep), 1))  # k <= ⌈n/b⌉.
  if isinstance(options.max_participations, int):
    k = max(1, min(k, options.max_participations))
  per_lag = d * d + d
  elements = min(k * per_lag, blt_closed_form.CHUNK_ELEMENTS) + (d + 1) ** 2
  return resources.Estimate(
      f"optimizing a {d}-buffer BLT for n={n} rounds",
      1e6 + 500.0 * (2 * d + 1) * elements,
      2.0 + 350.0 * d * (2e-4 + 1.2e-7 * k * per_lag),
      f"closed form, k={k}: ~{500 * (2 * d + 1)} B per (lag, buffer pair) up to "
      f"{blt_closed_form.CHUNK_ELEMENTS}, ~{350 * d * 1.2e-7:.2g} k (d² + d) s")


def _bandmf_build_cost(options: BuildOptions) -> resources.Estimate:
  """Dense n x n work arrays (measured 75 n² B at n = 1024) and O(n³) flops per
  evaluation (5.1 s at n = 1024)."""
  n = options.rounds
  return resources.Estimate(f"optimizing BandMF for n={n} rounds", 80.0 * n * n + 1e6,
                            0.5 + 5e-9 * float(n) ** 3,
                            "dense n x n work arrays, ~80 n² bytes, ~5e-9 n³ s")


def _dense_evaluation_cost(what: str, bytes_per_entry: float, seconds_per_cube: float
                           ) -> Callable[[int], resources.Estimate]:
  def cost(rounds: int) -> resources.Estimate:
    return resources.Estimate(
        f"evaluating {what} for n={rounds} rounds (dense n x n)",
        bytes_per_entry * float(rounds) ** 2, seconds_per_cube * float(rounds) ** 3,
        f"~{bytes_per_entry:g} n² bytes")
  return cost


def _tree_from_dict(full: bool) -> Callable[[Mapping[str, Any]], Mechanism]:
  return lambda data: TreeMechanism(full=full, complete=bool(data.get("complete", False)))


# Evaluation costs: measured peaks (dp_fl/resources.py docstring) with some headroom. The
# online tree's sensitivity falls back to the n x n Gram matrix when its exact dynamic program
# exceeds its work budget, which depends on (b, k); its estimate is that worst case.
register(Family("blt", BltMechanism.description, _build_blt,
                lambda data: BltMechanism(blt.Blt.from_dict(data)),
                build_cost=_blt_build_cost,
                # Length-n errors (per_query_squared_error), then the closed-form
                # sensitivity: at most CHUNK_ELEMENTS elements of ~500 B (the larger peak).
                evaluation_cost=lambda rounds: _linear_cost(96.0, 0.0, "a BLT")(rounds) +
                resources.Estimate("its closed-form sensitivity (Thm 3.1)",
                                   500.0 * blt_closed_form.CHUNK_ELEMENTS),
                knobs="blt"))
register(Family("bandmf", BandedMechanism.description, _build_bandmf,
                lambda data: BandedMechanism(banded.BandedMF.from_dict(data)),
                build_cost=_bandmf_build_cost, default_optimize_for="rms",
                evaluation_cost=_dense_evaluation_cost("BandMF", 32.0, 2e-10),
                banded=True, knobs="bands"))
register(Family("tree", "online TreeAgg (Kairouz et al. 2021)",
                lambda options: (TreeMechanism(full=False), ()), _tree_from_dict(False),
                evaluation_cost=_dense_evaluation_cost("TreeAgg", 24.0, 0.0)))
register(Family("tree_full", "TreeAgg-Full (optimal pseudo-inverse decoding)",
                lambda options: (TreeMechanism(full=True), ()), _tree_from_dict(True),
                evaluation_cost=_dense_evaluation_cost("TreeAgg-Full", 32.0, 1e-10),
                trains=False))  # Its decoder is not a streaming recurrence.
register(Family("dpsgd", DpSgdMechanism.description, lambda options: (DpSgdMechanism(), ()),
                lambda data: DpSgdMechanism(),
                evaluation_cost=_linear_cost(16.0, 0.0, "DP-SGD"), banded=True))

MECHANISMS = names()  # The built-in names (`names()` also lists mechanisms added later).
