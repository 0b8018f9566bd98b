"""What `--calibrate_epsilon` calibrates σ for, and the promise it keeps (issue #39).

A run calibrated for ε releases at most ε, on every path:

1. **The participation the scheduler will realize.** Where the accounting depends on the
   realized participation (DP-FTRL without amplification and cpSGD: device timer,
   `min_sep_rounds`, `uniform`, `cyclic`), σ is calibrated for the (b, k) — and, for cpSGD,
   the smallest cohort — that the run's own scheduler realizes when `TRIALS` emulations of
   it (built from the same flags by `registry.scheduler`, public seeds 0, 1, ...; the
   simulated availability from the run's public `--seed`) commit the planned rounds as the
   training loop does: empty rounds of a device timer are skipped and use no row of C, so
   the timer's separation in rows of C can shrink (`participation.extrapolation`, the
   emulation behind `scripts/plan`). The worst trial is taken — the smallest b, the largest
   k, the smallest cohort — and, where the realization depends on the secret sampling seed
   (the trials disagree, or random availability left rounds empty), a margin: b ×
   `MIN_SEP_MARGIN` (never below what the scheduler's rule enforces in rows of C), k ×
   `PARTICIPATION_MARGIN` (never above ⌈n/b⌉), the cohort × `MIN_SEP_MARGIN`. Trials that
   agree and skip nothing (a cyclic schedule, a timer whose population always fills the
   rounds) are planned for as they are. `--max_participations` and `--min_sep` say what C
   is optimized for; no scheduler enforces k, so calibration never trusts them for it.
2. **The budget stop.** The realized participation can still exceed the prediction (another
   secret seed, a discarded or re-computed round), so a calibrated run also stops before any
   round that would take its *reported* ε above the target (`--calibrate_epsilon` implies
   `--target_epsilon`, `with_budget`; the loop checks the report's accountant when the
   progress lines use a looser one).

The amplified participations (balls-in-bins, cyclic Poisson) and DP-FedAvg's Poisson sampling
are calibrated by their own analyses for the planned rounds (`amplified.py`, the registry);
their reports never exceed the planned ε for a prefix of the rounds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, Optional

from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.participation import extrapolation

if TYPE_CHECKING:
  from dp_fl.training import config as config_lib

TRIALS = 5
"""Emulations of the run's scheduler (public seeds 0 .. TRIALS-1), as `scripts/plan`'s."""

MIN_SEP_MARGIN = 0.9
"""With a margin: b (and cpSGD's cohort) planned at ⌊0.9 × the worst trial's⌋."""

PARTICIPATION_MARGIN = 1.1
"""With a margin: k planned at ⌈1.1 × the worst trial's⌉ (at most ⌈n/b⌉)."""


@dataclasses.dataclass(frozen=True)
class PlannedParticipation:
  """The participation σ is calibrated for.

  Attributes:
    rounds: n.
    min_sep: b planned (n when nobody is predicted to take part twice).
    max_participations: k planned.
    min_cohort: the smallest cohort planned (None: the report goal, unknown shortfall).
    trials: (b or None, k, smallest cohort) of each emulated trial; () for a rule-only bound.
    margin: whether the margin was applied to (b, k): the trials disagreed on them, or
      skipped empty rounds.
    cohort_margin: the same for the smallest cohort.
    enforced_min_sep: the separation in rows of C the scheduler's rule guarantees (1: none).
  """
  rounds: int
  min_sep: int
  max_participations: int
  min_cohort: Optional[int]
  trials: tuple[tuple[Optional[int], int, Optional[int]], ...] = ()
  margin: bool = False
  enforced_min_sep: int = 1
  cohort_margin: bool = False

  def describe(self) -> str:
    """One line for the user: what σ was calibrated for, and from what."""
    what = (f"min-sep {self.min_sep}, at most {self.max_participations} participation"
            f"{'s' if self.max_participations > 1 else ''} per client")
    if not self.trials:
      return f"{what} (the scheduler's rule)"
    if self.min_cohort is not None:
      what += f", cohorts of at least {self.min_cohort}"
    seen = ", ".join(f"b={'—' if b is None else b} k={k}"
                     + ("" if self.min_cohort is None else f" cohort>={c}")
                     for b, k, c in self.trials)
    margins = ([f"b × {MIN_SEP_MARGIN:g}, k × {PARTICIPATION_MARGIN:g}"] if self.margin else []
               ) + ([f"cohort × {MIN_SEP_MARGIN:g}"]
                    if self.cohort_margin and self.min_cohort is not None else [])
    how = (f"worst of {len(self.trials)} emulated trials"
           + (f", with a margin ({'; '.join(margins)}): the realization depends on the "
              "secret sampling seed" if margins else ", which agree and skip no round"))
    return f"{what} ({how}: {seen})"


_CACHE: dict[tuple, PlannedParticipation] = {}


def _key(config: "config_lib.TrainingConfig", num_clients: Optional[int]) -> tuple:
  fields = ("participation", "rounds", "clients_per_round", "min_sep", "seed",
            "participation_settings")
  return tuple(getattr(config, f) for f in fields) + (num_clients,)


def planned_participation(config: "config_lib.TrainingConfig", num_clients: Optional[int],
                          build_scheduler: Callable[[Any, int, int], Any],
                          rule_min_sep: Optional[int] = None) -> PlannedParticipation:
  """The participation to calibrate σ for (module doc, 1).

  Args:
    config: the run's configuration.
    num_clients: the task's population N (None: only a rule-bounded participation can be
      planned).
    build_scheduler: `registry.scheduler` (config, N, seed) -> the run's scheduler.
    rule_min_sep: the separation in rows of C the participation's rule enforces whatever
      the population (None: none); then b = it and k = ⌈n/b⌉ bound the participation
      without the population.

  Raises:
    ValueError: the population is needed and unknown, or the emulation finds the population
      cannot serve the rounds (training would stop there too).
  """
  n = config.rounds
  if num_clients is None:
    if rule_min_sep is None:
      raise ValueError(
          f"Calibrating σ under --participation={config.participation} needs the task's "
          "population: the participation the scheduler realizes (min-sep b, participations "
          "k) depends on it.")
    b = min(rule_min_sep, n)
    return PlannedParticipation(n, b, sensitivity_lib.participation_cap(n, b), None,
                                enforced_min_sep=rule_min_sep)
  key = _key(config, num_clients)
  if key in _CACHE:
    return _CACHE[key]
  trials, skipped = [], 0
  enforced = 1
  for seed in range(TRIALS):
    scheduler = build_scheduler(config, num_clients, seed)
    enforced = scheduler.enforced_min_separation
    try:
      skipped += extrapolation.commit_rounds(scheduler, n)
    except ValueError as e:
      raise ValueError(f"--calibrate_epsilon emulates the run's scheduler "
                       f"(--participation={config.participation}): {e}") from None
    realized = scheduler.realized()
    trials.append((realized.min_separation, realized.max_participations,
                   realized.min_cohort))
  if skipped:  # Skipped empty rounds use no row of C: the rule's separation shrank in rows.
    enforced = 1
  worst_b = min((b for b, _, _ in trials if b is not None), default=n)
  worst_k = max(max(k for _, k, _ in trials), 1)
  cohorts = [c for _, _, c in trials if c is not None]
  worst_cohort = min(cohorts) if cohorts else None
  # The realization depends on the secret seed where the trials disagree, or where random
  # availability left rounds empty (then it shifts the rows of C): plan with a margin.
  margin = len({(b, k) for b, k, _ in trials}) > 1 or skipped > 0
  if margin:
    b = max(enforced, math.floor(MIN_SEP_MARGIN * worst_b), 1)
    k = math.ceil(PARTICIPATION_MARGIN * worst_k)
  else:
    b, k = max(worst_b, 1), worst_k
  cohort = worst_cohort
  cohort_margin = cohort is not None and (len(set(cohorts)) > 1 or skipped > 0)
  if cohort_margin:
    cohort = max(1, math.floor(MIN_SEP_MARGIN * cohort))
  b = min(b, n)
  k = max(1, min(k, sensitivity_lib.participation_cap(n, b)))
  planned = PlannedParticipation(n, b, k, cohort, tuple(trials), margin, enforced,
                                 cohort_margin)
  _CACHE.clear()  # Keep one: the run that follows asks again (cli, compare).
  _CACHE[key] = planned
  return planned


def with_budget(config: "config_lib.TrainingConfig",
                target_epsilon: float) -> "config_lib.TrainingConfig":
  """`config` that stops before any round taking ε above `target_epsilon` (module doc, 2):
  a calibrated run implies `--target_epsilon` (the smaller, if both are given)."""
  current = config.target_epsilon
  budget = target_epsilon if current is None else min(current, target_epsilon)
  return config.replace(target_epsilon=budget)
