"""One entry point to every mechanism: build by name, evaluate, serialize, stream.

The mechanism modules (`blt`, `banded`, `tree`, identity for DP-SGD) each speak their own
math; this module gives the command-line tools, the accounting code and the aggregators one
vocabulary for all of them:

    mechanism = catalog.build("blt", rounds=2052, min_sep=342, max_participations=6,
                              buffers=4, optimize_for="max")
    report = catalog.evaluate(mechanism, rounds=2052, min_sep=342, max_participations=6)
    noise = mechanism.streaming_noise()      # init(shape) / next(z_t, state)
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
import math
import time
import warnings
from typing import Any, Mapping, Optional

import numpy as np

from dp_fl import _checks
from dp_fl.mechanisms import banded
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import streaming
from dp_fl.mechanisms import tree

MECHANISMS = ("blt", "bandmf", "tree", "tree_full", "dpsgd")

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
  state_model_copies: Optional[int]
  notes: tuple[str, ...] = ()

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["notes"] = list(self.notes)
    return d


def feasible_participations(rounds: int, min_sep: int, max_participations: Optional[int]
                            ) -> tuple[int, Optional[str]]:
  """k capped at what fits in n rounds at separation b (⌈n/b⌉), with a note if capped.

  `max_participations=None` means "as many as fit".
  """
  n = _checks.check_positive_int("rounds", rounds)
  b = _checks.check_positive_int("min_sep", min_sep)
  most = sensitivity_lib.feasible_participations(n, b, n)
  if max_participations is None:
    return most, None
  k = _checks.check_positive_int("max_participations", max_participations)
  if k > most:
    return most, (f"max_participations={k} cannot happen in {n} rounds at min_sep={b}; "
                  f"reduced to the feasible maximum ceil({n}/{b}) = {most}.")
  return k, None


def _bracketed(lower: float, lower_method: str, upper: float, upper_method: str
               ) -> Sensitivity:
  """A sensitivity known to lie in [lower, upper]; exact when the two bounds meet."""
  if upper <= lower * (1.0 + 1e-12):
    return Sensitivity(lower, EXACT, f"{lower_method} = {upper_method} (the bounds meet)")
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
    n = _checks.check_positive_int("rounds", rounds)
    if self.max_rounds is not None and n > self.max_rounds:
      raise ValueError(
          f"`rounds`={n} exceeds the {self.max_rounds} rounds this {self.name} mechanism was "
          f"built for; {self.name} is not defined beyond them. Rebuild it for n >= {n} or "
          f"train for at most {self.max_rounds} rounds.")
    return n

  @abc.abstractmethod
  def sensitivity(self, rounds: int, min_sep: int, max_participations: int) -> Sensitivity:
    """sens_Π(b,k)(C) restricted to the first `rounds` rounds."""

  @abc.abstractmethod
  def per_query_squared_error(self, rounds: int) -> np.ndarray:
    """Squared row norms of B = A C⁻¹ (or the decoder used) for n rounds."""

  @abc.abstractmethod
  def streaming_noise(self, rounds: Optional[int] = None) -> streaming.StreamingNoise:
    """The streaming generator of rows of C⁻¹ Z (paper 004, Alg. 3 for BLTs)."""

  @abc.abstractmethod
  def to_dict(self) -> dict[str, Any]:
    """JSON-ready parameters, with a "mechanism" key naming the mechanism."""

  def state_model_copies(self, rounds: int) -> Optional[int]:
    """Model-sized arrays the streaming state holds; None if the mechanism cannot stream."""
    return self.streaming_noise(rounds).state_model_copies

  def lower_triangular_input(self, rounds: int) -> dict[str, np.ndarray]:
    """C for n rounds as {"toeplitz_coefs": c} or {"matrix": C} (square, lower-triangular).

    Used by accounting that needs C itself (balls-in-bins Monte Carlo, paper 003).
    """
    raise ValueError(
        f"The {self.name} mechanism's C is not a square lower-triangular matrix, which "
        f"balls-in-bins accounting (paper 003) needs; use blt, bandmf or dpsgd.")


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
    k, _ = feasible_participations(n, min_sep, max_participations)
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
    k, _ = feasible_participations(n, min_sep, max_participations)
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
    return _bracketed(value,
                      f"Remark 3.2 lower bound (min_sep {min_sep} < bands {self.banded.bands})",
                      certified.value, certified.method)

  def per_query_squared_error(self, rounds):
    return self.banded.per_query_squared_error(self.check_rounds(rounds))

  def streaming_noise(self, rounds=None):
    return streaming.BandedStreamingNoise(self.banded.dense())

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
    k, _ = feasible_participations(n, min_sep, max_participations)
    value, kind, method = tree.tree_sensitivity(n, min_sep, k, complete=self.complete,
                                                max_work=self.max_work)
    if kind == EXACT:
      return Sensitivity(value, kind, method)
    # Out of budget: Remark 3.2 from below, the |CᵀC| bound from above (Gram built once).
    upper = sensitivity_lib.upper_bound_sensitivity(
        None, min_sep, k, gram=tree.tree_gram(n, complete=self.complete))
    return _bracketed(value, method, upper, sensitivity_lib.METHOD_UPPER_BOUND)

  def per_query_squared_error(self, rounds):
    n = self.check_rounds(rounds)
    return tree.per_query_squared_error(n, full=self.full, complete=self.complete)

  def state_model_copies(self, rounds):
    return None if self.full else super().state_model_copies(rounds)

  def streaming_noise(self, rounds=None):
    if self.full:
      raise ValueError(
          "`tree_full` decodes with the pseudo-inverse of the whole tree, which needs every "
          "round's noise at once; it is offered for loss comparison only. Use `tree` "
          "(online TreeAgg) for training.")
    return streaming.TreeStreamingNoise(None if rounds is None else self.check_rounds(rounds))

  def to_dict(self):
    return {"mechanism": self.name, "complete": self.complete}


def evaluate(mechanism: Mechanism, rounds: int, min_sep: int,
             max_participations: Optional[int] = None) -> Evaluation:
  """Sensitivity, errors and losses of `mechanism` for n rounds under Π(b, k)."""
  n = mechanism.check_rounds(rounds)
  requested = (max_participations if max_participations is not None
               else -(-n // _checks.check_positive_int("min_sep", min_sep)))
  k, note = feasible_participations(n, min_sep, max_participations)
  sens = mechanism.sensitivity(n, min_sep, k)
  errors = mechanism.per_query_squared_error(n)
  max_error = float(np.sqrt(np.max(errors)))
  rms_error = float(np.sqrt(np.mean(errors)))
  notes = tuple(x for x in (note,) if x)
  if sens.kind == LOWER_BOUND:
    notes += ("sensitivity is a LOWER BOUND (paper 004, Remark 3.2): losses and any ε derived "
              "from it are optimistic",)
  return Evaluation(
      mechanism=mechanism.name, rounds=n, min_sep=min_sep, max_participations=k,
      requested_max_participations=int(requested), sensitivity=sens.value,
      sensitivity_kind=sens.kind, sensitivity_method=sens.method, max_error=max_error,
      rms_error=rms_error, max_loss=sens.value * max_error, rms_loss=sens.value * rms_error,
      state_model_copies=mechanism.state_model_copies(n), notes=notes)


@dataclasses.dataclass(frozen=True)
class Built:
  """A mechanism and how long building (optimizing) it took."""
  mechanism: Mechanism
  optimize_seconds: float
  notes: tuple[str, ...] = ()


def build(name: str, *, rounds: int, min_sep: int, max_participations: Optional[int] = None,
          buffers: int = 4, bands: Optional[int] = None, optimize_for: str = "max",
          seed: int = 0) -> Built:
  """Builds (optimizing where the mechanism is optimized) a mechanism by name.

  Args:
    name: one of MECHANISMS.
    rounds: n, rounds to optimize for.
    min_sep: b, minimum separation between participations.
    max_participations: k; None = ⌈n/b⌉. Reduced to ⌈n/b⌉ if larger (noted).
    buffers: d, BLT buffers.
    bands: BandMF bands (default min(min_sep, rounds), the largest with exact column-norm
      sensitivity).
    optimize_for: "max" (MaxLoss) or "rms" (RmsLoss), for BLT. BandMF optimizes RmsLoss.
    seed: seed of the optimizer's random starts.

  Returns:
    A `Built`.
  """
  if name not in MECHANISMS:
    raise ValueError(f"`mechanism` must be one of {MECHANISMS}; got {name!r}.")
  n = _checks.check_positive_int("rounds", rounds)
  k, note = feasible_participations(n, min_sep, max_participations)
  notes = (note,) if note else ()
  start = time.perf_counter()
  if name == "blt":
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", blt.ParticipationReducedWarning)
      result = blt.optimize_blt(n, min_sep, k, _checks.check_positive_int("buffers", buffers),
                                loss=optimize_for, seed=seed)
    mechanism: Mechanism = BltMechanism(result.blt)
  elif name == "bandmf":
    if optimize_for != "rms":
      notes += (f"BandMF is optimized for RmsLoss (paper 004 ref. [8]); "
                f"optimize_for={optimize_for!r} ignored.",)
    bands = min(min_sep, n) if bands is None else _checks.check_positive_int("bands", bands)
    mechanism = BandedMechanism(banded.optimize_banded(n, bands, min_sep, k))
  elif name == "dpsgd":
    mechanism = DpSgdMechanism()
  else:
    mechanism = TreeMechanism(full=(name == "tree_full"))
  return Built(mechanism, time.perf_counter() - start, notes)


def from_dict(data: Mapping[str, Any]) -> Mechanism:
  """Restores a mechanism from `Mechanism.to_dict()` output (e.g. a --params_in file)."""
  if not isinstance(data, Mapping) or "mechanism" not in data:
    raise ValueError("Mechanism parameters must be a JSON object with a 'mechanism' key "
                     f"(one of {MECHANISMS}); got {str(data)[:200]!r}.")
  name = data["mechanism"]
  if name == "blt":
    return BltMechanism(blt.Blt.from_dict(data))
  if name == "bandmf":
    return BandedMechanism(banded.BandedMF.from_dict(data))
  if name == "dpsgd":
    return DpSgdMechanism()
  if name in ("tree", "tree_full"):
    return TreeMechanism(full=(name == "tree_full"), complete=bool(data.get("complete", False)))
  raise ValueError(f"Unknown mechanism {name!r} in parameters; expected one of {MECHANISMS}.")
