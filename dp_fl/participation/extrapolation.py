"""Predicting realized min-sep and max participations before training.

Paper 004 Sec. 5 ("Extrapolation") estimates, optimistically,
``min-sep = floor(population / report_goal)`` and
``max-par = ceil(total_rounds / min-sep)``, and notes that the practical
min-sep can differ substantially from the estimate (e.g. ~90 vs 100 for
pt-PT, ~300 vs 400 for es-ES, 2000+ vs 1000 for pt-BR) because availability,
round durations and the timer interact. `extrapolate` runs the device-timer
emulation (`device_timer.DeviceTimerScheduler`) for the planned rounds and
reports the realized values next to the optimistic formula, so mechanisms
(BandMF bands, BLT optimization for (b, k)) can be chosen from a prediction
rather than a guess.

Rounds are counted as the training program counts them (`dp_fl.training.loop`): where the
scheduler skips empty rounds (a device timer in hours, `Scheduler.skips_empty_rounds`), a
selection with no device is discarded — simulated time passes, but no row of C is used and the
ledger records nothing — and emulation goes on until `planned_rounds` rows are committed. The
realized min-sep is therefore in rows of C, what the privacy accounting uses.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

from dp_fl import _checks
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.participation import base
from dp_fl.participation import device_timer
from dp_fl.participation import ledger as ledger_lib


# `extrapolate` reports its progress every this many committed rounds.
PROGRESS_EVERY = 1000


def optimistic_min_separation(population: int, report_goal: int) -> int:
  """Paper 004 Sec. 5: ``floor(population / report_goal)``."""
  n = _checks.check_positive_int("population", population)
  m = _checks.check_positive_int("report_goal", report_goal)
  if m > n:
    raise ValueError(f"`report_goal` must be <= `population` ({n}); got {report_goal!r}.")
  return n // m


def optimistic_max_participations(num_rounds: int, min_separation: int) -> int:
  """Paper 004 Sec. 5: ``ceil(total_rounds / min_separation)``."""
  n = _checks.check_positive_int("num_rounds", num_rounds)
  b = _checks.check_positive_int("min_separation", min_separation)
  return sensitivity_lib.participation_cap(n, b)


@dataclasses.dataclass(frozen=True)
class Extrapolation:
  """Prediction for one planned training run.

  Attributes:
    planned_rounds: rounds simulated.
    optimistic_min_separation: ``floor(N / m)`` (paper 004 Sec. 5).
    optimistic_max_participations: ``ceil(n / floor(N / m))``.
    enforced_min_separation: the separation the timer guarantees by construction, in
      selections; it bounds the realized min-sep (in rows of C) only when no empty selection
      was skipped.
    min_separation: worst (smallest) realized min-sep over the trials, or None
      if no device ever participated twice in any trial.
    max_participations: worst (largest) realized max participations.
    trials: realized participation of each simulated trial (one per seed).
    rounds_short: per trial, number of rounds that ran short of the report goal.
    total_shortfall: per trial, total missing clients over all rounds.
    simulated_hours: per trial, simulated wall-clock time of the planned rounds.
    skipped_empty_rounds: per trial, selections with no device, skipped as training skips
      them (they use no row of C).
  """
  planned_rounds: int
  optimistic_min_separation: int
  optimistic_max_participations: int
  enforced_min_separation: int
  min_separation: int | None
  max_participations: int
  trials: tuple[ledger_lib.RealizedParticipation, ...]
  rounds_short: tuple[int, ...]
  total_shortfall: tuple[int, ...]
  simulated_hours: tuple[float, ...]
  skipped_empty_rounds: tuple[int, ...] = ()


def extrapolate(population: int, report_goal: int, planned_rounds: int, *,
                seeds: tuple[int, ...] = (0,),
                progress: Optional[Callable[[int], None]] = None,
                **scheduler_kwargs: Any) -> Extrapolation:
  """Simulates the device-timer system to predict realized (b, k).

  Args:
    population: number of devices ``N``.
    report_goal: clients per round ``m``.
    planned_rounds: rounds ``n`` to simulate.
    seeds: one simulation per seed; the result reports the worst case.
    progress: called with the rounds emulated so far (over all seeds) every
      `PROGRESS_EVERY` rounds.
    **scheduler_kwargs: `DeviceTimerScheduler` keyword arguments (timer
      ``min_separation_hours``/``min_separation_rounds``, ``availability``,
      ``round_duration_hours``, ``on_shortfall``, ...). A diurnal availability
      model must describe ``population`` devices.

  Raises:
    ValueError: bad arguments, or a configuration under which training would
      stall (see `DeviceTimerScheduler`).
  """
  seeds = tuple(seeds)
  if not seeds:
    raise ValueError("`seeds` must hold at least one seed; got an empty tuple.")
  trials, short, shortfall, hours, skipped = [], [], [], [], []
  enforced = None
  for i, seed in enumerate(seeds):
    scheduler = device_timer.DeviceTimerScheduler(population, report_goal, planned_rounds, seed,
                                                  **scheduler_kwargs)
    enforced = scheduler.enforced_min_separation
    offset = i * planned_rounds
    skipped.append(commit_rounds(
        scheduler, planned_rounds,
        None if progress is None else (lambda done, offset=offset: progress(offset + done))))
    log = scheduler.shortfall_log()
    trials.append(scheduler.realized())
    short.append(len(log))
    shortfall.append(sum(s for _, s in log))
    hours.append(scheduler.clock_hours)
  seps = [t.min_separation for t in trials if t.min_separation is not None]
  b_opt = optimistic_min_separation(population, report_goal)
  return Extrapolation(
      planned_rounds=planned_rounds,
      optimistic_min_separation=b_opt,
      optimistic_max_participations=optimistic_max_participations(planned_rounds, b_opt),
      enforced_min_separation=enforced,
      min_separation=min(seps) if seps else None,
      max_participations=max(t.max_participations for t in trials),
      trials=tuple(trials), rounds_short=tuple(short), total_shortfall=tuple(shortfall),
      simulated_hours=tuple(hours), skipped_empty_rounds=tuple(skipped))


def commit_rounds(scheduler: base.Scheduler, rounds: int,
                  progress: Optional[Callable[[int], None]] = None) -> int:
  """Advances `scheduler` by `rounds` committed rounds as the training loop does; returns the
  empty selections skipped on the way.

  `dp_fl.training.loop.Loop.round`: an empty selection of a scheduler that
  `skips_empty_rounds` is discarded (no row of C, nothing in the ledger), any other selection
  is committed (an empty one runs as a noise-only round).

  Raises:
    ValueError: `base.MAX_CONSECUTIVE_EMPTY_ROUNDS` empty selections in a row (training stops
      there too: the population cannot serve a round).
  """
  skipped = consecutive = 0
  committed = 0
  while committed < rounds:
    selection = scheduler.select_round()
    if selection.cohort_size == 0 and scheduler.skips_empty_rounds:
      scheduler.discard(selection)
      skipped += 1
      consecutive += 1
      if consecutive >= base.MAX_CONSECUTIVE_EMPTY_ROUNDS:
        raise ValueError(
            f"the emulation found no eligible device in {consecutive} rounds in a row after "
            f"{committed} rounds; training would stop there. Check the availability, the "
            "timer and the report goal against the population.")
      continue
    scheduler.commit(selection)
    committed += 1
    consecutive = 0
    if progress is not None and committed % PROGRESS_EVERY == 0:
      progress(committed)
  return skipped


def rounds_per_timer(min_separation_hours: float, round_duration_hours: float) -> int:
  """Rounds that elapse during a timer of the given length at a fixed round duration.

  With every device always available and ``N >= m * ceil(T / d)``, the realized
  min-sep of the device-timer scheduler equals this number (for durations such
  as 0.5 or 1.0 h whose sums are exact in floating point; otherwise it may
  differ by one round through rounding of the simulated clock).
  """
  t = _checks.check_positive("min_separation_hours", min_separation_hours)
  d = _checks.check_positive("round_duration_hours", round_duration_hours)
  return max(1, math.ceil(t / d))
