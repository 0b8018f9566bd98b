"""Device-timer scheduler: min-separation participation in cross-device FL.

Paper 004 (Sec. 1, Alg. 1 line "Q^t <- at least m users that did not
participate in the previous b rounds", App. C item 3(b)) enforces
b-min-sep-participation with a timer on each device: a device becomes eligible
again only after a fixed period (e.g. three days) has passed since it last
took part. This module emulates that system:

* a population of ``N`` devices with an `availability.AvailabilityModel`
  (e.g. diurnal windows with per-device time zones and a daily probability);
* a simulated wall clock; round ``t`` starts at ``s_t`` and lasts
  ``duration_t`` hours, fixed or uniform in ``[lo, hi]`` (drawn from the
  round's seeded Generator);
* eligibility: ``s_t - last_time_d >= min_separation_hours`` (time-based timer)
  and/or ``t - last_round_d >= min_separation_rounds`` (round-based separation,
  the paper's footnote 1); devices that never took part are eligible;
* the server samples ``report_goal`` (``m``) devices uniformly without
  replacement from those available (or checked in) and eligible; if fewer are
  eligible it either runs the round short (the aggregator keeps the fixed
  denominator ``m``, so sensitivity and DP are unaffected) or waits in steps of
  ``wait_step_hours`` up to ``max_wait_hours`` and then runs short. Every
  shortfall is logged.

The check-in API (`check_in`) refuses and counts devices that ask to
participate while ineligible (paper 004 App. C footnote: a misbehaving client
does not affect the guarantee of well-behaved ones).

Up-front stall check: the timer guarantees a min-sep of
``b_min = max(min_separation_rounds, ceil(min_separation_hours / h_max))``
rounds where ``h_max`` is the longest a round can take (max duration plus max
wait). If ``b_min >= n`` (the ``n`` planned rounds end before any device can
become eligible again) and ``N < n * m``, training would stall after
``floor(N / m)`` rounds, and the constructor raises. Milder cases, where the
rule merely caps each device at ``ceil(n / b_min)`` participations so some
rounds must run short, are allowed and quantified by `guaranteed_shortfall`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dp_fl import _checks
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.participation import availability as availability_lib
from dp_fl.participation import base

RUN_SHORT = "run_short"
WAIT = "wait"


class DeviceTimerScheduler(base.Scheduler):
  """Min-separation participation via a per-device timer (paper 004 Alg. 1).

  Args:
    num_devices: population size ``N``.
    report_goal: clients per round ``m`` (<= N).
    planned_rounds: rounds the training is planned for ``n`` (used for the
      up-front stall check; the scheduler may run longer).
    seed: non-negative integer; all randomness derives from it.
    min_separation_hours: timer ``T``: a device is eligible iff at least ``T``
      hours passed since the start of the round it last took part in.
    min_separation_rounds: round-based separation ``b``: eligible in round
      ``t`` iff its last round ``t'`` has ``t - t' >= b`` (b-min-sep of paper 004
      Sec. 3.1; Alg. 1's "did not participate in the previous b rounds" is
      ``min_separation_rounds = b + 1``). At least one of the two must be
      given; if both are, both must hold.
    availability: an `AvailabilityModel`; default `AlwaysAvailable()`.
    round_duration_hours: fixed duration (float > 0) or ``(lo, hi)`` for a
      duration uniform in ``[lo, hi]``, drawn per round from the seed.
    on_shortfall: ``"run_short"`` or ``"wait"``.
    wait_step_hours: clock advance per waiting step (``"wait"`` only).
    max_wait_hours: longest wait before running short (``"wait"`` only).
  """

  KIND = "DeviceTimerScheduler"

  def __init__(self, num_devices: int, report_goal: int, planned_rounds: int, seed: int, *,
               min_separation_hours: float | None = None,
               min_separation_rounds: int | None = None,
               availability: availability_lib.AvailabilityModel | None = None,
               round_duration_hours: float | tuple[float, float] = 1.0,
               on_shortfall: str = RUN_SHORT,
               wait_step_hours: float = 0.25,
               max_wait_hours: float = 24.0):
    super().__init__(num_devices, seed)
    n_dev = self._num_clients
    self._m = _checks.check_positive_int("report_goal", report_goal)
    if self._m > n_dev:
      raise ValueError(
          f"`report_goal` must be <= `num_devices` ({n_dev}); got {report_goal!r}. Lower the "
          "report goal or enlarge the population.")
    self._planned = _checks.check_positive_int("planned_rounds", planned_rounds)
    if min_separation_hours is None and min_separation_rounds is None:
      raise ValueError("Pass `min_separation_hours` (device timer) and/or "
                       "`min_separation_rounds` (round-based separation); got neither.")
    self._sep_hours = (None if min_separation_hours is None else
                       _checks.check_positive("min_separation_hours", min_separation_hours))
    self._sep_rounds = (None if min_separation_rounds is None else
                        _checks.check_positive_int("min_separation_rounds",
                                                   min_separation_rounds))
    self._availability = availability if availability is not None else (
        availability_lib.AlwaysAvailable())
    if not isinstance(self._availability, availability_lib.AvailabilityModel):
      raise ValueError(f"`availability` must be an AvailabilityModel; got {availability!r}.")
    self._availability.check_num_devices(n_dev)
    if isinstance(round_duration_hours, (tuple, list)):
      if len(round_duration_hours) != 2:
        raise ValueError(f"`round_duration_hours` must be a float or (lo, hi); got "
                         f"{round_duration_hours!r}.")
      lo = _checks.check_positive("round_duration_hours[0]", round_duration_hours[0])
      hi = _checks.check_positive("round_duration_hours[1]", round_duration_hours[1])
      if lo > hi:
        raise ValueError(
            f"`round_duration_hours` must have lo <= hi; got {round_duration_hours!r}.")
      self._duration = (lo, hi)
    else:
      d = _checks.check_positive("round_duration_hours", round_duration_hours)
      self._duration = (d, d)
    if on_shortfall not in (RUN_SHORT, WAIT):
      raise ValueError(f"`on_shortfall` must be {RUN_SHORT!r} or {WAIT!r}; got {on_shortfall!r}.")
    self._on_shortfall = on_shortfall
    self._wait_step = _checks.check_positive("wait_step_hours", wait_step_hours)
    self._max_wait = _checks.check_nonnegative("max_wait_hours", max_wait_hours)
    self._check_no_stall()

    # Dynamic state (besides the ledger).
    self._clock = 0.0
    self._last_time = np.full(n_dev, -np.inf, dtype=np.float64)
    self._last_draw = np.full(n_dev, -1, dtype=np.int32)  # Last round run (even discarded).
    self._checked_in = np.zeros(n_dev, dtype=bool)
    self._num_checked_in = 0
    self._shortfall_rounds: list[int] = []
    self._shortfall_sizes: list[int] = []
    self._waits: list[float] = []  # waited hours for rounds that waited
    self._wait_rounds: list[int] = []

  # ---------------------------------------------------------- static facts
  @property
  def report_goal(self) -> int:
    return self._m

  @property
  def planned_rounds(self) -> int:
    return self._planned

  @property
  def availability(self) -> availability_lib.AvailabilityModel:
    return self._availability

  @property
  def max_round_hours(self) -> float:
    """Longest simulated time between two consecutive round starts."""
    return self._duration[1] + (self._max_wait if self._on_shortfall == WAIT else 0.0)

  @property
  def enforced_min_separation(self) -> int:
    """Min-sep in rounds that the eligibility rule guarantees by construction.

    ``max(b, ceil(T / h_max))``: two round starts ``r`` rounds apart are at most
    ``r * h_max`` hours apart, so a device cannot return before ``T / h_max``
    rounds. The realized min-sep (`ledger.min_separation`) is at least this.
    """
    return self.separation_rule(self._sep_rounds, self._sep_hours, self.max_round_hours)

  @staticmethod
  def separation_rule(min_separation_rounds: int | None, min_separation_hours: float | None,
                      max_round_hours: float) -> int:
    """``max(1, b, ceil(T / h_max))``: the min-sep in rounds a timer of ``b`` rounds and/or
    ``T`` hours guarantees when no round start is more than ``h_max`` hours after the last
    (`enforced_min_separation`; the one formula, also asked before any population exists)."""
    b = 1
    if min_separation_rounds is not None:
      b = max(b, min_separation_rounds)
    if min_separation_hours is not None:
      b = max(b, math.ceil(min_separation_hours / max_round_hours))
    return b

  @property
  def guaranteed_shortfall(self) -> int:
    """Lower bound on the total shortfall over the planned rounds.

    Each device can take part at most ``ceil(n / b_min)`` times in ``n``
    rounds, so at least ``n * m - N * ceil(n / b_min)`` slots stay empty
    whatever the availability (0 if the bound allows full rounds).
    """
    max_par = sensitivity_lib.participation_cap(self._planned, self.enforced_min_separation)
    return max(0, self._planned * self._m - self._num_clients * max_par)

  def _check_no_stall(self) -> None:
    """Raises if no device can return before the planned rounds end and N < n * m."""
    b = self.enforced_min_separation
    n, m, pop = self._planned, self._m, self._num_clients
    if b >= n and pop < n * m:
      raise ValueError(
          f"Training would stall: the timer guarantees a separation of {b} rounds >= the "
          f"{n} planned rounds, so no device can become eligible again before training ends, "
          f"and {pop} devices / report goal {m} fill only {pop // m} of the {n} rounds "
          "(the rest would be empty). Shorten `min_separation_hours`/`min_separation_rounds`, "
          "lengthen `round_duration_hours` or allow waiting, lower `report_goal`, or reduce "
          "`planned_rounds`.")

  # ---------------------------------------------------------- eligibility
  def _eligible(self, ids: np.ndarray | None, now: float, round_index: int,
                draw_index: int | None = None) -> np.ndarray:
    """Eligibility mask for `ids` (None = all devices) at time `now`, row `round_index`.

    The round-based rule holds in rows of C (what the privacy guarantee needs: the ledger's
    last row) and, like a device's own timer, in rounds run (`draw_index`: a device that
    trained in a round the server then discarded waits all the same).
    """
    last_time = self._last_time if ids is None else self._last_time[ids]
    mask = None
    if self._sep_hours is not None:
      mask = (now - last_time) >= self._sep_hours
    if self._sep_rounds is not None:
      last = self._ledger.last_round if ids is None else self._ledger.last_round[ids]
      rmask = (last < 0) | (last <= round_index - self._sep_rounds)
      draw = self._draws if draw_index is None else draw_index
      last_draw = self._last_draw if ids is None else self._last_draw[ids]
      rmask &= (last_draw < 0) | (last_draw <= draw - self._sep_rounds)
      mask = rmask if mask is None else (mask & rmask)
    return mask

  def is_eligible(self, device_ids) -> np.ndarray:
    """Whether each device would pass the separation rule for the next round now."""
    ids = self._ledger.validate_ids("device_ids", device_ids)
    return self._eligible(ids, self._clock, self.round_index)

  def check_in(self, device_ids) -> np.ndarray:
    """Devices ask to take part in the next round; returns the accepted mask.

    Eligible devices join the next round's candidate pool even if the
    availability model would not list them (they are evidently available).
    Ineligible ones are refused and counted in the ledger's refusals; they can
    never be selected, so a device that ignores its timer cannot raise its own
    participation count or lower the realized min-sep (paper 004 App. C).
    """
    ids = self._ledger.validate_ids("device_ids", device_ids)
    ok = self._eligible(ids, self._clock, self.round_index)
    accepted = ids[ok]
    newly = accepted[~self._checked_in[accepted]]
    self._checked_in[newly] = True
    self._num_checked_in += int(np.unique(newly).size)
    refused = ids[~ok]
    if refused.size:
      self._ledger.record_refusal(refused)
    return ok

  # ---------------------------------------------------------- selection
  def _candidates(self, now: float, round_index: int, draw_index: int) -> np.ndarray:
    """Devices that are (available or checked in) and eligible at `now`."""
    present = self._availability.available_ids(now, self._seed)
    if present is None:  # every device is available
      candidates = np.flatnonzero(self._eligible(None, now, round_index, draw_index))
    else:
      candidates = present[self._eligible(present, now, round_index, draw_index)]
      if self._num_checked_in:
        checked = np.flatnonzero(self._checked_in)
        checked = checked[self._eligible(checked, now, round_index, draw_index)]
        candidates = np.union1d(candidates, checked)
    return candidates

  @property
  def skips_empty_rounds(self) -> bool:
    """A timer in hours: a skipped empty round lets the clock move on (base.Scheduler)."""
    return self._sep_hours is not None

  def _select(self, round_index: int, draw_index: int) -> base.RoundSelection:
    now = self._clock
    waited = 0.0
    candidates = self._candidates(now, round_index, draw_index)
    if self._on_shortfall == WAIT:
      while candidates.size < self._m and waited < self._max_wait:
        step = min(self._wait_step, self._max_wait - waited)
        now += step
        waited += step
        candidates = self._candidates(now, round_index, draw_index)
    chosen = base.sample_without_replacement(
        self._rng(base.STREAM_SELECT, draw_index), candidates, self._m)
    lo, hi = self._duration
    duration = lo if lo == hi else float(
        self._rng(base.STREAM_DURATION, draw_index).uniform(lo, hi))
    return base.RoundSelection(
        round_index=round_index, client_ids=chosen, denominator=float(self._m),
        shortfall=self._m - int(chosen.size), num_candidates=int(candidates.size),
        start_time_hours=now, duration_hours=duration, waited_hours=waited)

  def _apply(self, selection: base.RoundSelection) -> None:
    """The round ran (applied or discarded): its time passed and its devices' timers
    restarted (they trained, whatever the server did with the result)."""
    now = selection.start_time_hours
    self._last_time[selection.client_ids] = now
    self._last_draw[selection.client_ids] = self._draws
    self._clock = now + selection.duration_hours
    if self._num_checked_in:
      self._checked_in[:] = False
      self._num_checked_in = 0
    if selection.shortfall:
      self._shortfall_rounds.append(selection.round_index)
      self._shortfall_sizes.append(selection.shortfall)
    if selection.waited_hours > 0:
      self._wait_rounds.append(selection.round_index)
      self._waits.append(selection.waited_hours)

  # ---------------------------------------------------------- logs
  @property
  def clock_hours(self) -> float:
    """Simulated time at which the next round can start."""
    return self._clock

  @property
  def last_participation_hours(self) -> np.ndarray:
    """Read-only: start time of each device's last round (-inf = never)."""
    view = self._last_time.view()
    view.flags.writeable = False
    return view

  def shortfall_log(self) -> list[tuple[int, int]]:
    """(round, missing clients) for every round that ran short."""
    return list(zip(self._shortfall_rounds, self._shortfall_sizes))

  def wait_log(self) -> list[tuple[int, float]]:
    """(round, hours waited) for every round that waited for eligible devices."""
    return list(zip(self._wait_rounds, self._waits))

  @property
  def state_nbytes(self) -> int:
    """Bytes of mutable state (ledger + per-device arrays)."""
    return (self._ledger.nbytes + self._last_time.nbytes + self._last_draw.nbytes
            + self._checked_in.nbytes)

  # ---------------------------------------------------------- serialization
  def _config(self):
    avail_config, avail_arrays = self._availability.to_config()
    config = {
        "num_devices": self._num_clients, "report_goal": self._m,
        "planned_rounds": self._planned, "seed": self._seed,
        "min_separation_hours": self._sep_hours, "min_separation_rounds": self._sep_rounds,
        "round_duration_hours": list(self._duration), "on_shortfall": self._on_shortfall,
        "wait_step_hours": self._wait_step, "max_wait_hours": self._max_wait,
        "availability": avail_config,
    }
    return config, {"availability." + k: v for k, v in avail_arrays.items()}

  @classmethod
  def _from_config(cls, config: dict[str, Any], arrays: dict[str, np.ndarray]):
    avail_arrays = {k[len("availability."):]: v for k, v in arrays.items()
                    if k.startswith("availability.")}
    lo, hi = config["round_duration_hours"]
    return cls(config["num_devices"], config["report_goal"], config["planned_rounds"],
               config["seed"], min_separation_hours=config["min_separation_hours"],
               min_separation_rounds=config["min_separation_rounds"],
               availability=availability_lib.from_config(config["availability"], avail_arrays),
               round_duration_hours=lo if lo == hi else (lo, hi),
               on_shortfall=config["on_shortfall"], wait_step_hours=config["wait_step_hours"],
               max_wait_hours=config["max_wait_hours"])

  def _dynamic_state(self):
    meta = {"clock": self._clock}
    arrays = {
        "last_time": self._last_time, "last_draw": self._last_draw,
        "checked_in": self._checked_in,
        "shortfall_rounds": np.asarray(self._shortfall_rounds, dtype=np.int64),
        "shortfall_sizes": np.asarray(self._shortfall_sizes, dtype=np.int64),
        "wait_rounds": np.asarray(self._wait_rounds, dtype=np.int64),
        "waits": np.asarray(self._waits, dtype=np.float64),
    }
    return meta, arrays

  def _set_dynamic_state(self, meta, arrays):
    self._clock = float(meta["clock"])
    if arrays["last_time"].shape != (self._num_clients,):
      raise ValueError(f"`state` array 'last_time' has shape {arrays['last_time'].shape}; "
                       f"expected ({self._num_clients},).")
    self._last_time = arrays["last_time"].astype(np.float64, copy=True)
    # States written before discards existed: every round run was a row.
    self._last_draw = (arrays["last_draw"].astype(np.int32, copy=True) if "last_draw" in arrays
                       else self._ledger.last_round.astype(np.int32))
    self._checked_in = arrays["checked_in"].astype(bool, copy=True)
    self._num_checked_in = int(self._checked_in.sum())
    self._shortfall_rounds = [int(x) for x in arrays["shortfall_rounds"]]
    self._shortfall_sizes = [int(x) for x in arrays["shortfall_sizes"]]
    self._wait_rounds = [int(x) for x in arrays["wait_rounds"]]
    self._waits = [float(x) for x in arrays["waits"]]
