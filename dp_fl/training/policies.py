"""The small decisions of the training loop, each an object passed in (no TFF in here).

`loop.TrainingLoop` asks these at fixed points of a round, the way TFF's
`learning/programs/training_program_logic.py` takes its evaluation and checkpoint managers
as arguments instead of deciding inline. Each is a few lines of policy that a test drives
with plain numbers:

| policy            | asked                                   | answers                            |
|-------------------|-----------------------------------------|------------------------------------|
| `EpsilonBudget`   | before a round, with the ε it would give | stop before exceeding `target_epsilon` |
| `NonfinitePolicy` | after a round, with its metrics         | apply / discard / stop             |
| `Cadence`         | after an applied round                  | checkpoint? evaluate?              |
| `WeightProjection`| after an applied round                  | the projected model weights        |
| `RoundLimit`      | before a round                          | pause after N rounds in this call  |
| `StopSignal`      | after a round                           | stop on SIGTERM / SIGINT           |
| `ProgressClock`   | after a round                           | is a progress line due?            |

A stop is a `Stop(reason, message)`; `reason` is what `program.RunResult.stopped` reports.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import signal
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from dp_fl import _checks

# Why a run stopped (`RunResult.stopped`).
COMPLETED = "completed"
PAUSED = "paused"
TARGET_EPSILON = "target_epsilon"
SIGNAL = "signal"
NONFINITE = "nonfinite"
NO_CLIENTS = "no_clients"

# `--on_nonfinite` values.
ON_NONFINITE = ("stop", "discard")
MAX_CONSECUTIVE_DISCARDS = 5


@dataclasses.dataclass(frozen=True)
class Stop:
  """The loop stops: `reason` is one of the constants above, `message` says why to a user."""
  reason: str
  message: str


class EpsilonBudget:
  """Stops before the round that would take ε above `target_epsilon` (None: no budget).

  The loop asks with the ε the run would have *if* the selected round were applied
  (`Scheduler.realized_if`), so the released model never exceeds the budget.
  """

  def __init__(self, target_epsilon: Optional[float]):
    self.target_epsilon = (None if target_epsilon is None
                           else _checks.check_positive("target_epsilon", target_epsilon))

  @property
  def active(self) -> bool:
    return self.target_epsilon is not None

  def check(self, next_round: int, epsilon_if_applied: float,
            participation: Any = None, epsilon_now: Optional[float] = None,
            computations: Optional[int] = None) -> Optional[Stop]:
    """A stop if round `next_round` (1-based) would raise ε above the target, else None.

    `participation`: the realized participation if the round were applied (its min-sep and
    max participations, when it has them, say why in the message). For runs that charge
    every computed round (distributed DP), `computations`: the most computations of one
    client with the round, lost ones included, and `epsilon_now`: ε without the round; a
    crash can put a run over its target before the round, and the message then says so.
    """
    if self.target_epsilon is None or epsilon_if_applied <= self.target_epsilon:
      return None
    if epsilon_now is not None and epsilon_now > self.target_epsilon:
      return Stop(TARGET_EPSILON,
                  f"stopped before round {next_round}: ε is already {epsilon_now:.4g} > "
                  f"target {self.target_epsilon:g} without it (computations the server "
                  "saw but the run did not apply, e.g. rounds lost in a crash, are charged "
                  "as participations: privacy_report.md says how many)")
    why = []
    k = getattr(participation, "max_participations", None)
    if k is not None:
      b = getattr(participation, "min_separation", None)
      why.append(f"some client would have taken part in {_count(k, 'applied round')}"
                 + ("" if b is None else f", twice only {_count(b, 'round')} apart"))
    if computations is not None and computations != k:
      why.append(f"counting the computations not applied (lost in a crash, then computed "
                 f"again) some client would have been in {computations}")
    return Stop(TARGET_EPSILON,
                f"stopped before round {next_round}: it would raise ε to "
                f"{epsilon_if_applied:.4g} > target {self.target_epsilon:g}"
                + (f" (with it, {'; '.join(why)})" if why else ""))


def _count(n: int, noun: str) -> str:
  return f"{n} {noun}{'s' if n != 1 else ''}"


class Verdict(enum.Enum):
  APPLY = "apply"
  DISCARD = "discard"
  STOP = "stop"


def nonfinite_problem(metrics: Mapping[str, Any], num_clients: int) -> str:
  """Why a round's result must not be used ('' when it is fine).

  TFF's client work already zeroes the update (and drops the metrics) of a client whose local
  loss became non-finite, and the DP aggregators zero non-finite updates; what is left to
  catch is a non-finite reported loss, a round in which *every* client diverged, and a server
  update TFF refused as non-finite (TFF's finalizer then keeps the model as it was, so the
  model stays finite; the round is still not counted as progress).
  """
  loss = metrics.get("client_work/train/loss", 0.0)
  if not math.isfinite(loss):
    return f"non-finite training loss ({loss})"
  if num_clients and metrics.get("client_work/train/num_batches", 1) == 0:
    return "non-finite loss on every client (TFF dropped all their updates)"
  if metrics.get("finalizer/update_non_finite", 0):
    return "non-finite server update"
  return ""


class NonfinitePolicy:
  """What to do with a round whose result is non-finite (`--on_nonfinite`).

  "stop": stop without applying it (the last checkpoint stays intact). "discard": drop the
  round — the aggregator's row of C does not advance and the ledger records nothing — and
  stop (`give_up`) after `max_consecutive` discards in a row.
  """

  def __init__(self, on_nonfinite: str, max_consecutive: int = MAX_CONSECUTIVE_DISCARDS):
    if on_nonfinite not in ON_NONFINITE:
      raise ValueError(f"`on_nonfinite` must be one of {ON_NONFINITE}; got {on_nonfinite!r}.")
    self.on_nonfinite = on_nonfinite
    self.max_consecutive = _checks.check_positive_int("max_consecutive", max_consecutive)
    self.consecutive = 0

  def judge(self, next_round: int, metrics: Mapping[str, Any], num_clients: int
            ) -> tuple[Verdict, str]:
    """(verdict, message) for round `next_round` (1-based) with these flattened metrics."""
    problem = nonfinite_problem(metrics, num_clients)
    if not problem:
      self.consecutive = 0
      return Verdict.APPLY, ""
    if self.on_nonfinite == "stop":
      return Verdict.STOP, (
          f"round {next_round}: {problem}; stopped without applying it (the last checkpoint "
          "is intact). Lower the learning rates or use --on_nonfinite=discard.")
    self.consecutive += 1
    return Verdict.DISCARD, f"round {next_round}: {problem}; round discarded"

  def give_up(self) -> Optional[Stop]:
    """After a discard: a stop once `max_consecutive` rounds in a row were discarded."""
    if self.consecutive < self.max_consecutive:
      return None
    return Stop(NONFINITE, f"{self.consecutive} consecutive rounds had a non-finite loss; "
                           "stopped. Lower the learning rates or the clip norm.")


@dataclasses.dataclass(frozen=True)
class Cadence:
  """Evaluate every `eval_every` rounds and at the end; checkpoint every `checkpoint_every`
  rounds, at the end, and before every evaluation (a published evaluation is never
  recomputed with the same noise after a crash); record the ε so far (metrics/privacy.csv)
  at `epsilon_points` evenly spaced rounds and at every evaluation — rounds, not the wall
  clock, so two runs of one seed (and a resumed run) write the same file."""
  rounds: int
  eval_every: int
  checkpoint_every: int
  epsilon_points: int = 20

  def evaluate_after(self, round_number: int) -> bool:
    return round_number % self.eval_every == 0 or round_number == self.rounds

  def checkpoint_after(self, round_number: int) -> bool:
    return (round_number % self.checkpoint_every == 0 or round_number == self.rounds
            or self.evaluate_after(round_number))

  def record_epsilon_after(self, round_number: int) -> bool:
    step = max(1, -(-self.rounds // self.epsilon_points))
    return round_number % step == 0 or self.evaluate_after(round_number)


class WeightProjection:
  """Applies a task's projection (e.g. a norm constraint) to the trainable weights.

  `project` maps the list of trainable arrays to a list of the same shapes; None disables.
  Works on any weights object with `trainable` / `non_trainable` fields that its own type
  can be rebuilt from (`tff.learning.models.ModelWeights`).
  """

  def __init__(self, project: Optional[Callable[[list[Any]], Sequence[Any]]]):
    self.project = project

  @property
  def active(self) -> bool:
    return self.project is not None

  def apply(self, weights: Any) -> Any:
    import numpy as np  # pylint: disable=g-import-not-at-top
    trainable = [np.asarray(w) for w in weights.trainable]
    projected = list(self.project(trainable))
    if len(projected) != len(trainable) or any(
        np.shape(p) != t.shape for p, t in zip(projected, trainable)):
      raise ValueError(
          "The task's `project_weights` must return one array per trainable weight, of the "
          f"same shapes {[t.shape for t in trainable]}; got "
          f"{[np.shape(p) for p in projected]}.")
    return type(weights)(trainable=projected, non_trainable=weights.non_trainable)


class RoundLimit:
  """Pauses after `max_rounds` rounds in this call (None: run to the end)."""

  def __init__(self, max_rounds: Optional[int], first_round: int):
    self.max_rounds = (None if max_rounds is None
                       else _checks.check_positive_int("max_rounds_this_call", max_rounds))
    self.first_round = first_round

  def check(self, rounds_done: int) -> Optional[Stop]:
    if self.max_rounds is None or rounds_done - self.first_round < self.max_rounds:
      return None
    return Stop(PAUSED, f"paused after {self.max_rounds} rounds")


class StopSignal:
  """SIGTERM/SIGINT ask the loop to finish the round, checkpoint and exit; a second kills.

  A context manager that installs the handlers (only in the main thread) and restores the
  previous ones on exit. `signum` is set by the first signal (tests may set it directly).
  """

  def __init__(self):
    self.signum: Optional[int] = None
    self._previous = {}

  def _handle(self, signum, frame):  # pylint: disable=unused-argument
    if self.signum is not None:
      signal.signal(signum, signal.SIG_DFL)
      raise KeyboardInterrupt
    self.signum = signum

  def __enter__(self):
    for signum in (signal.SIGTERM, signal.SIGINT):
      try:
        self._previous[signum] = signal.signal(signum, self._handle)
      except ValueError:  # Not the main thread: signals stay with their owner.
        pass
    return self

  def __exit__(self, *exc):
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

  def check(self, rounds_done: int) -> Optional[Stop]:
    if self.signum is None:
      return None
    return Stop(SIGNAL, f"{signal.Signals(self.signum).name} received: stopped after round "
                        f"{rounds_done}; rerun the same command to resume")


class ProgressClock:
  """A progress line is due when `interval` seconds passed since the last one."""

  def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.perf_counter):
    self.interval = interval
    self.clock = clock
    self.last = 0.0

  def due(self) -> bool:
    return self.clock() - self.last > self.interval

  def mark(self) -> None:
    self.last = self.clock()
