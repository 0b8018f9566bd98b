"""Device availability patterns for the cross-device device-timer emulation.

Cross-device FL devices train only when idle, charging and on an unmetered
network (paper 004 Sec. 1 and Sec. 5: production training of Gboard LMs), which
in practice means mostly at night in each device's local time zone. Models:

* `AlwaysAvailable` — every device can train at any time (the optimistic
  setting of paper 004 Sec. 5 "Extrapolation", where min-sep is estimated as
  ``floor(population / report_goal)``).
* `DiurnalAvailability` — device ``d`` with time-zone offset ``o_d`` hours is
  available at global time ``t`` iff its local time ``t + o_d`` lies inside a
  daily window ``[start, start + length)`` (mod 24) and its coin for that
  window came up heads; the coin is Bernoulli(``daily_probability``), drawn once
  per device per window, so the pattern is reproducible from the seed and needs
  no checkpointed state. Exactly (float64):
  ``phase_d = (o_d - start) mod 24``, ``u = t + phase_d``,
  ``day = floor(u / 24)``; available iff ``u - 24 day < length`` and
  ``coins_day[d]``, where ``coins_day = Generator(SeedSequence(seed,
  spawn_key=(STREAM_AVAILABILITY, day))).random(N) < daily_probability``.
  A window that crosses local midnight uses one coin.

Time is measured in hours from the start of training (``t >= 0``).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Optional

import numpy as np

from dp_fl import _checks
from dp_fl.participation import base


class AvailabilityModel(abc.ABC):
  """Which devices can train at a given simulated time."""

  KIND: ClassVar[str] = ""

  @abc.abstractmethod
  def available(self, device_ids: np.ndarray, time_hours: float, seed: int) -> np.ndarray:
    """Boolean mask: is each of `device_ids` available at `time_hours`?"""

  def available_ids(self, time_hours: float, seed: int) -> np.ndarray | None:
    """Indices of all devices available at `time_hours`; None means every device."""
    del time_hours, seed
    return None

  @abc.abstractmethod
  def long_run_fraction(self) -> float:
    """Expected fraction of devices available at a uniformly random time."""

  def check_num_devices(self, num_devices: int) -> None:
    """Raises ValueError if the model describes a different population size."""
    del num_devices

  @abc.abstractmethod
  def to_config(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(JSON-able dict, arrays) from which `from_config` rebuilds the model."""

  def round_times(self, num_rounds: int, round_hours: float) -> np.ndarray:
    """When rounds 0..n-1 are held (hours): on the grid of `round_hours`, skipping the times
    at which no device can be available (a public schedule: no round is run for nobody)."""
    n = _checks.check_positive_int("num_rounds", num_rounds)
    return np.arange(n) * _checks.check_positive("round_hours", round_hours)

  def round_windows(self, num_rounds: int,
                    round_hours: float) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """Rounds t = 0..n-1 held at `round_times`: (windows, class_of_device), the distinct
    public patterns of the population — windows[k, t] is the window (coin) round t falls in
    for class k, or -1 when class k cannot be available — and each device's class; None when
    every device is available in every round."""
    del num_rounds, round_hours
    return None

  @property
  def window_probability(self) -> float:
    """The chance a device is available for a whole window it is in (its coin)."""
    return 1.0


class AlwaysAvailable(AvailabilityModel):
  """Every device is available at every time."""

  KIND = "always"

  def available(self, device_ids, time_hours, seed):
    del time_hours, seed
    return np.ones(np.shape(device_ids), dtype=bool)

  def long_run_fraction(self) -> float:
    return 1.0

  def to_config(self):
    return {"kind": self.KIND}, {}

  def __repr__(self):
    return "AlwaysAvailable()"


class DiurnalAvailability(AvailabilityModel):
  """Daily local-time window with per-device time zone and daily probability.

  Args:
    timezone_offsets_hours: per-device offsets (local = global + offset), each
      in (-24, 24); length = population size.
    window_start_hour: local hour in [0, 24) at which the window opens (e.g.
      22.0 for "from 10 pm": idle and charging overnight).
    window_hours: window length in (0, 24].
    daily_probability: probability in (0, 1] that a device is available in a
      given day's window (it may be in use, not charging, or on a metered
      network); drawn independently per device and window.
  """

  KIND = "diurnal"

  def __init__(self, timezone_offsets_hours, window_start_hour: float = 22.0,
               window_hours: float = 8.0, daily_probability: float = 0.5):
    offsets = _checks.check_finite_array("timezone_offsets_hours", timezone_offsets_hours, ndim=1)
    if offsets.size == 0:
      raise ValueError("`timezone_offsets_hours` must have one entry per device; got an empty "
                       "array.")
    if np.any(np.abs(offsets) >= 24):
      bad = offsets[np.abs(offsets) >= 24][:3].tolist()
      raise ValueError(
          f"`timezone_offsets_hours` must lie in (-24, 24); got {bad}. Reduce offsets mod 24.")
    start = _checks.check_finite("window_start_hour", window_start_hour)
    if not 0 <= start < 24:
      raise ValueError(f"`window_start_hour` must be in [0, 24); got {window_start_hour!r}.")
    length = _checks.check_positive("window_hours", window_hours)
    if length > 24:
      raise ValueError(f"`window_hours` must be in (0, 24]; got {window_hours!r}.")
    self._offsets = offsets.copy()
    self._offsets.flags.writeable = False
    self._start = start
    self._length = length
    self._p = _checks.check_half_open_unit("daily_probability", daily_probability)
    self._coin_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    # Phase in [0, 24]: hours after the window opened, at global time 0, mod 24.
    self._phase = np.mod(self._offsets - self._start, 24.0)
    self._by_phase = np.argsort(self._phase, kind="stable").astype(np.int64)
    self._sorted_phase = self._phase[self._by_phase]

  @classmethod
  def random_timezones(cls, num_devices: int, seed: int,
                       offset_range_hours: tuple[float, float] = (-3.0, 3.0),
                       **kwargs) -> "DiurnalAvailability":
    """Offsets drawn uniformly from `offset_range_hours` with the given seed."""
    n = _checks.check_positive_int("num_devices", num_devices)
    s = _checks.check_nonnegative_int("seed", seed)
    lo = _checks.check_finite("offset_range_hours[0]", offset_range_hours[0])
    hi = _checks.check_finite("offset_range_hours[1]", offset_range_hours[1])
    if not -24 < lo <= hi < 24:
      raise ValueError(
          f"`offset_range_hours` must satisfy -24 < low <= high < 24; got {offset_range_hours!r}.")
    offsets = base.round_rng(s, base.STREAM_TIMEZONES, 0).uniform(lo, hi, size=n)
    return cls(offsets, **kwargs)

  @property
  def num_devices(self) -> int:
    return int(self._offsets.size)

  @property
  def timezone_offsets_hours(self) -> np.ndarray:
    return self._offsets

  def check_num_devices(self, num_devices: int) -> None:
    if num_devices != self._offsets.size:
      raise ValueError(
          f"`availability` describes {self._offsets.size} devices but `num_devices` is "
          f"{num_devices}; pass one time-zone offset per device.")

  def _coins(self, day: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Day `day`'s Bernoulli(p) coins, indexed by device and by phase rank."""
    key = (seed, day)
    coins = self._coin_cache.get(key)
    if coins is None:
      rng = base.round_rng(seed, base.STREAM_AVAILABILITY, day)
      by_device = rng.random(self._offsets.size) < self._p
      coins = (by_device, by_device[self._by_phase])
      if len(self._coin_cache) >= 4:  # at most 2 window days are live at any time
        self._coin_cache.pop(min(self._coin_cache))
      self._coin_cache[key] = coins
    return coins

  def _rule(self, t: float, phase: np.ndarray, seed: int, ids: np.ndarray | None,
            sl: slice | None) -> np.ndarray:
    """u = t + phase; day = floor(u / 24); available iff u - 24 day < length and coin(day).

    Coins are looked up by device id (`ids`) or, for a run of the phase-sorted
    order, by the slice `sl` of it; both give identical results.
    """
    u = t + phase
    day = np.floor(u / 24.0)
    out = (u - 24.0 * day) < self._length
    if not np.any(out):
      return out
    d_lo, d_hi = int(day[0]), int(day[-1])
    if ids is not None:
      d_lo, d_hi = int(day.min()), int(day.max())
    for d in range(d_lo, d_hi + 1):
      by_device, by_phase = self._coins(d, seed)
      coin = by_device[ids] if ids is not None else by_phase[sl]
      if d_lo == d_hi:
        out &= coin
      else:
        out &= (day != d) | coin
    return out

  def available(self, device_ids, time_hours, seed):
    t = _checks.check_nonnegative("time_hours", time_hours)
    ids = np.asarray(device_ids, dtype=np.int64)
    if ids.size == 0:
      return np.zeros(ids.shape, dtype=bool)
    return self._rule(t, self._phase[ids], seed, ids, None)

  @property
  def window_probability(self) -> float:
    return self._p

  def _window_of_rounds(self, times: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """`_rule` without the coins: the window (day) each time falls in, or -1; (len(phase),
    len(times))."""
    u = times[None, :] + phase[:, None]
    day = np.floor(u / 24.0)
    return np.where((u - 24.0 * day) < self._length, day, -1.0).astype(np.int64)

  def round_times(self, num_rounds, round_hours):
    """Grid times k · h at which some device's window is open (a device's phase lies in
    [(−τ) mod 24, +length) mod 24; coins aside), the first n of them. Any deterministic
    choice is sound — the scheduler and the accounting use the same times, and a time with
    nobody there only runs an empty round."""
    n = _checks.check_positive_int("num_rounds", num_rounds)
    h = _checks.check_positive("round_hours", round_hours)
    phases = self._sorted_phase
    found: list[np.ndarray] = []
    count, start = 0, 0
    while count < n:
      grid = np.arange(start, start + max(2 * n, 256)) * h
      start += grid.size
      lo = np.mod(-grid, 24.0)
      hi = lo + self._length
      inside = (np.searchsorted(phases, np.minimum(hi, 24.0), side="left")
                - np.searchsorted(phases, lo, side="left"))
      inside += np.searchsorted(phases, np.maximum(hi - 24.0, 0.0), side="left")
      found.append(grid[inside > 0])
      count += found[-1].size
      if count == 0 and start * h > 48.0:  # Two days and no device: the windows are empty.
        raise ValueError("No device is ever available under this availability model.")
    return np.concatenate(found)[:n]

  def round_windows(self, num_rounds, round_hours):
    """Devices are grouped by window phase between the phases at which some round enters or
    leaves a window (t h + phase crossing 24 d or 24 d + length); a group whose first and
    last devices (in phase order) share a pattern shares it throughout (for each round the
    rule is monotone in the phase), and any other group is computed device by device."""
    times = self.round_times(num_rounds, round_hours)  # The scheduler's clock.
    folded = np.mod(times, 24.0)
    cuts = np.unique(np.mod(np.concatenate([-folded, self._length - folded]), 24.0))
    group = np.searchsorted(cuts, self._sorted_phase, side="right")
    bounds = np.nonzero(np.diff(group))[0] + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [group.size]])
    patterns: dict[bytes, int] = {}
    rows: list[np.ndarray] = []
    klass_sorted = np.empty(group.size, dtype=np.int64)

    def class_of(row: np.ndarray) -> int:
      key = row.tobytes()
      if key not in patterns:
        patterns[key] = len(rows)
        rows.append(row)
      return patterns[key]

    for lo, hi in zip(starts, stops):
      ends = self._window_of_rounds(times, self._sorted_phase[[lo, hi - 1]])
      if np.array_equal(ends[0], ends[1]):
        klass_sorted[lo:hi] = class_of(ends[0])
        continue
      for i, row in enumerate(self._window_of_rounds(times, self._sorted_phase[lo:hi])):
        klass_sorted[lo + i] = class_of(row)
    klass = np.empty_like(klass_sorted)
    klass[self._by_phase] = klass_sorted
    return np.stack(rows), klass

  def available_ids(self, time_hours: float, seed: int) -> np.ndarray:
    """All devices available at `time_hours` (same rule as `available`).

    Devices are kept sorted by window phase, so the devices inside the window
    form at most two contiguous runs of that order, found by binary search
    (widened by a tiny margin, then filtered with the exact rule on contiguous
    memory): O(N * window / 24) work instead of O(N).
    """
    t = _checks.check_nonnegative("time_hours", time_hours)
    margin = 1e-6
    n = self._offsets.size
    if self._length + 2 * margin >= 24.0:
      bounds = [(0, n)]
    else:
      a = (-t) % 24.0
      bounds = []
      for k in (-24.0, 0.0, 24.0):
        lo = int(np.searchsorted(self._sorted_phase, a + k - margin, side="left"))
        hi = int(np.searchsorted(self._sorted_phase, a + k + self._length + margin,
                                 side="right"))
        if hi > lo:
          bounds.append((lo, hi))
    runs = []
    for lo, hi in bounds:
      sl = slice(lo, hi)
      ok = self._rule(t, self._sorted_phase[sl], seed, None, sl)
      runs.append(self._by_phase[sl][ok])
    if not runs:
      return np.zeros(0, dtype=np.int64)
    return runs[0] if len(runs) == 1 else np.concatenate(runs)

  def long_run_fraction(self) -> float:
    return self._p * self._length / 24.0

  def to_config(self):
    return ({"kind": self.KIND, "window_start_hour": self._start,
             "window_hours": self._length, "daily_probability": self._p},
            {"timezone_offsets_hours": np.asarray(self._offsets)})

  def __repr__(self):
    return (f"DiurnalAvailability(num_devices={self.num_devices}, window_start_hour={self._start},"
            f" window_hours={self._length}, daily_probability={self._p})")


SIMULATED = ("always", "diurnal")
"""`--availability` values of the training program and `scripts/plan`."""


def simulated(kind: str, num_devices: int, public_seed: int) -> AvailabilityModel:
  """The availability `--availability=kind` simulates for `num_devices` devices.

  "always": every device always available. "diurnal": the default `DiurnalAvailability`
  window (8 h from 10 pm local time, daily probability 1/2) with time zones uniform in
  ±3 h drawn from the run's *public* seed (they are simulated facts about the population,
  not secrets). The training program (`registry.scheduler`) and `scripts/plan` both call
  this, so a plan emulates exactly the population a run with the same flags trains on.
  """
  if kind == "always":
    return AlwaysAvailable()
  if kind == "diurnal":
    n = _checks.check_positive_int("num_devices", num_devices)
    offsets = np.random.default_rng([int(public_seed), 7]).uniform(-3.0, 3.0, n)
    return DiurnalAvailability(offsets)
  raise ValueError(f"`availability` must be one of {SIMULATED}; got {kind!r}.")


def from_config(config: dict[str, Any], arrays: dict[str, np.ndarray]) -> AvailabilityModel:
  """Inverse of `AvailabilityModel.to_config`."""
  kind = config.get("kind")
  if kind == AlwaysAvailable.KIND:
    return AlwaysAvailable()
  if kind == DiurnalAvailability.KIND:
    return DiurnalAvailability(arrays["timezone_offsets_hours"],
                               window_start_hour=config["window_start_hour"],
                               window_hours=config["window_hours"],
                               daily_probability=config["daily_probability"])
  raise ValueError(f"`availability` config has unknown kind {kind!r}; expected 'always' or "
                   "'diurnal'.")
