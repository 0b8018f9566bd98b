"""Sampling-based participation schemes (no device timer).

* `PoissonScheduler` — each client takes part in each round independently with
  probability ``q`` (paper 001 Sec. 2, "random sample of users ... each user
  selected independently with probability q"); the cohort size is variable and
  the aggregator uses paper 001's fixed denominator ``qN``.
* `CyclicPoissonScheduler` — clients in ``G`` groups (drawn once); round ``t``
  Poisson-samples group ``t mod G`` with rate ``q`` (amplified BandMF,
  Choquette-Choo et al. 2023); ``G = 1`` is Poisson sampling.
* `UniformScheduler` — ``m`` distinct clients uniformly at random per round,
  independently across rounds.
* `BallsInBinsScheduler` — paper 003 Def. 3.1: each client is placed once, at
  construction, into one of ``NB`` bins uniformly at random; the ``t``-th
  selection uses bin ``t mod NB`` (a discarded round spends its bin).
  Optional fixed size ``B`` (paper 003 Sec. 5.2.1): larger
  bins are truncated to ``B`` clients (a random subset per round; truncation is
  equivalent to zero updates, so the analysis is unchanged) and smaller ones
  are padded with zero-update slots; the denominator is always ``B``.
* `CyclicScheduler` — deterministic epochs: the population is split into
  ``G = ceil(N / m)`` groups of ``m`` (the last may be smaller), round ``t``
  uses group ``t mod G``; optionally the split is re-drawn every epoch.

Poisson cohorts are sampled as ``K ~ Binomial(N, q)`` followed by a uniform
``K``-subset, which has exactly the distribution of ``N`` independent
Bernoulli(q) draws and costs O(K) instead of O(N) per round.
"""

from __future__ import annotations

import numpy as np

from dp_fl import _checks
from dp_fl.accounting import b_min_sep
from dp_fl.participation import availability as availability_lib
from dp_fl.participation import base


class PoissonScheduler(base.Scheduler):
  """Poisson user sampling with rate ``q`` (paper 001)."""

  KIND = "PoissonScheduler"

  def __init__(self, num_clients: int, sampling_probability: float, seed: int):
    super().__init__(num_clients, seed)
    self._q = _checks.check_half_open_unit("sampling_probability", sampling_probability)

  @property
  def sampling_probability(self) -> float:
    return self._q

  @property
  def expected_cohort_size(self) -> float:
    return self._q * self._num_clients

  def _select(self, round_index, draw_index):
    rng = self._rng(base.STREAM_SELECT, draw_index)
    k = int(rng.binomial(self._num_clients, self._q))
    ids = np.sort(rng.choice(self._num_clients, size=k, replace=False).astype(np.int64))
    return base.RoundSelection(round_index=round_index, client_ids=ids,
                               denominator=self.expected_cohort_size,
                               num_candidates=self._num_clients)

  def _config(self):
    return {"num_clients": self._num_clients, "sampling_probability": self._q,
            "seed": self._seed}, {}

  @classmethod
  def _from_config(cls, config, arrays):
    del arrays
    return cls(config["num_clients"], config["sampling_probability"], config["seed"])


class BMinSepScheduler(base.Scheduler):
  """b-min-sep sampling (Dong & Ganesh 2026, Alg. 1 / Alg. 2).

  A client that took part in row t of C is ineligible for rows t + 1, ..., t + b - 1; in
  every row it is eligible for, it is sampled independently with probability p (b = 1:
  Poisson sampling). Warm start (their Alg. 2): each client's first eligible row is drawn
  once from the chain's stationary law (0 with probability 1 / (1 + (b - 1) p), else
  uniform on 1..b-1), so the expected cohort is the stationary p N / (1 + (b - 1) p) from the
  first round; otherwise (their Alg. 1) every client is eligible at row 0. Clients of a
  discarded round wait like the others (the rule counts rows; the next draw is for the same
  row). Cohorts vary; an empty one is still run (its noise is released), as under Poisson.
  The denominator is the expected cohort (stationary; with availability, the busiest round's,
  given by the caller).

  Device availability (the issue's variant): with an `availability.AvailabilityModel`, row t
  is held at the model's t-th round time (`round_times`: the `round_hours` grid, skipping
  times no device can be there) and only devices available then (in their window, and
  checked in: the model's coins, drawn from this scheduler's secret seed as in the device
  timer) can be sampled; an eligible device that is not there stays eligible.

  Args:
    num_clients: population N.
    min_sep: b >= 1.
    sampling_probability: p in (0, 1].
    seed: the warm start and every round's draws derive from it (secret in private runs).
    warm_start: see above.
    availability: None (every device always there) or the devices' availability model.
    round_hours: simulated hours between rows (with `availability`).
    denominator: the aggregator's denominator (default: the stationary expected cohort).
  """

  KIND = "BMinSepScheduler"

  def __init__(self, num_clients: int, min_sep: int, sampling_probability: float, seed: int,
               warm_start: bool = True,
               availability: availability_lib.AvailabilityModel | None = None,
               round_hours: float = 1.0, denominator: float | None = None):
    super().__init__(num_clients, seed)
    self._min_sep = _checks.check_positive_int("min_sep", min_sep)
    self._p = _checks.check_half_open_unit("sampling_probability", sampling_probability)
    self._warm_start = bool(warm_start)
    if availability is not None:
      if not isinstance(availability, availability_lib.AvailabilityModel):
        raise ValueError(f"`availability` must be an AvailabilityModel; got {availability!r}.")
      availability.check_num_devices(self._num_clients)
    self._availability = availability
    self._round_hours = _checks.check_positive("round_hours", round_hours)
    self._denominator = (None if denominator is None else
                         _checks.check_positive("denominator", denominator))
    self._times = np.zeros(0)  # Round times (availability), extended on demand.
    self._eligible_from = np.zeros(self._num_clients, dtype=np.int64)
    if self._warm_start and self._min_sep > 1:
      law = b_min_sep.first_eligible_probabilities(self._min_sep, self._p)
      rng = self._rng(base.STREAM_BINS, 0)
      self._eligible_from = rng.choice(self._min_sep, size=self._num_clients,
                                       p=law).astype(np.int64)

  @property
  def enforced_min_separation(self) -> int:
    return self._min_sep

  @property
  def min_sep(self) -> int:
    return self._min_sep

  @property
  def sampling_probability(self) -> float:
    return self._p

  @property
  def warm_start(self) -> bool:
    return self._warm_start

  @property
  def availability(self) -> availability_lib.AvailabilityModel | None:
    return self._availability

  @property
  def round_hours(self) -> float:
    return self._round_hours

  def round_time(self, round_index: int) -> float:
    """When row `round_index` is held (hours): the availability model's round times."""
    if self._availability is None:
      return round_index * self._round_hours
    if round_index >= self._times.size:
      self._times = self._availability.round_times(max(2 * (round_index + 1), 64),
                                                   self._round_hours)
    return float(self._times[round_index])

  @property
  def expected_cohort_size(self) -> float:
    """The denominator given, else p N / (1 + (b - 1) p): the stationary expected cohort."""
    if self._denominator is not None:
      return self._denominator
    return b_min_sep.stationary_participation_rate(self._min_sep, self._p) * self._num_clients

  def eligible(self, round_index: int) -> np.ndarray:
    """Whether each client may be sampled in row `round_index` (and, with availability, is
    there at its time)."""
    out = self._eligible_from <= round_index
    if self._availability is not None:
      present = self._availability.available_ids(self.round_time(round_index), self._seed)
      if present is not None:
        there = np.zeros(self._num_clients, dtype=bool)
        there[present] = True
        out &= there
    return out

  def _select(self, round_index, draw_index):
    rng = self._rng(base.STREAM_SELECT, draw_index)
    sampled = rng.random(self._num_clients) < self._p
    eligible = self.eligible(round_index)
    ids = np.nonzero(eligible & sampled)[0].astype(np.int64)
    return base.RoundSelection(round_index=round_index, client_ids=ids,
                               denominator=self.expected_cohort_size,
                               num_candidates=int(np.count_nonzero(eligible)))

  def _apply(self, selection):
    self._eligible_from[selection.client_ids] = selection.round_index + self._min_sep

  def _config(self):
    config = {"num_clients": self._num_clients, "min_sep": self._min_sep,
              "sampling_probability": self._p, "seed": self._seed,
              "warm_start": self._warm_start}
    if self._availability is None:
      return config, {}
    avail_config, avail_arrays = self._availability.to_config()
    config.update(availability=avail_config, round_hours=self._round_hours,
                  denominator=self._denominator)
    return config, {"availability." + k: v for k, v in avail_arrays.items()}

  @classmethod
  def _from_config(cls, config, arrays):
    availability = None
    if config.get("availability") is not None:
      availability = availability_lib.from_config(
          config["availability"], {k[len("availability."):]: v for k, v in arrays.items()
                                   if k.startswith("availability.")})
    return cls(config["num_clients"], config["min_sep"], config["sampling_probability"],
               config["seed"], config["warm_start"], availability=availability,
               round_hours=config.get("round_hours", 1.0),
               denominator=config.get("denominator"))

  def _dynamic_state(self):
    return {}, {"eligible_from": self._eligible_from}

  def _set_dynamic_state(self, meta, arrays):
    del meta
    value = arrays["eligible_from"]
    if value.shape != (self._num_clients,):
      raise ValueError(f"`state` array 'eligible_from' has shape {value.shape}; expected "
                       f"({self._num_clients},).")
    self._eligible_from = value.astype(np.int64, copy=True)


class CyclicPoissonScheduler(base.Scheduler):
  """Cyclic Poisson sampling (Choquette-Choo et al. 2023, amplified BandMF).

  Each client is put once, at construction, into one of ``G`` groups uniformly at random
  (independently across clients, so adding or removing one client changes no one else's
  group); round ``t`` samples every member of group ``t mod G`` independently with
  probability ``q``. A client can only take part in rounds ``G`` apart, and in each with
  probability ``q``. The denominator is the expected cohort ``qN / G``.

  Args:
    num_clients: population ``N``.
    num_groups: ``G >= 1`` (``G = 1``: plain Poisson sampling).
    sampling_probability: ``q`` in (0, 1], within the round's group.
    seed: the groups and every round's draw derive from it (secret in private runs).
  """

  KIND = "CyclicPoissonScheduler"

  def __init__(self, num_clients: int, num_groups: int, sampling_probability: float,
               seed: int):
    super().__init__(num_clients, seed)
    self._groups = _checks.check_positive_int("num_groups", num_groups)
    self._q = _checks.check_half_open_unit("sampling_probability", sampling_probability)
    group = self._rng(base.STREAM_BINS, 0).integers(self._groups, size=self._num_clients,
                                                    dtype=np.int32)
    self._order = np.argsort(group, kind="stable").astype(np.int64)
    self._offsets = np.concatenate(
        [[0], np.cumsum(np.bincount(group, minlength=self._groups))]).astype(np.int64)

  @property
  def num_groups(self) -> int:
    return self._groups

  @property
  def sampling_probability(self) -> float:
    return self._q

  @property
  def expected_cohort_size(self) -> float:
    return self._q * self._num_clients / self._groups

  def group_members(self, group_index: int) -> np.ndarray:
    """Sorted clients of group `group_index`."""
    g = _checks.check_nonnegative_int("group_index", group_index)
    if g >= self._groups:
      raise ValueError(f"`group_index` must be < num_groups ({self._groups}); got "
                       f"{group_index!r}.")
    return self._order[self._offsets[g]:self._offsets[g + 1]].copy()  # Stable: ascending.

  def _select(self, round_index, draw_index):
    # A discarded draw spends its group's turn, like a balls-in-bins bin: the rounds a
    # client can take part in stay `num_groups` apart.
    g = draw_index % self._groups
    members = self._order[self._offsets[g]:self._offsets[g + 1]]
    rng = self._rng(base.STREAM_SELECT, draw_index)
    k = int(rng.binomial(members.size, self._q))
    ids = np.sort(rng.choice(members, size=k, replace=False).astype(np.int64))
    return base.RoundSelection(round_index=round_index, client_ids=ids,
                               denominator=self.expected_cohort_size,
                               num_candidates=int(members.size))

  def _config(self):
    return {"num_clients": self._num_clients, "num_groups": self._groups,
            "sampling_probability": self._q, "seed": self._seed}, {}

  @classmethod
  def _from_config(cls, config, arrays):
    del arrays
    return cls(config["num_clients"], config["num_groups"], config["sampling_probability"],
               config["seed"])


class UniformScheduler(base.Scheduler):
  """``m`` clients uniformly without replacement each round."""

  KIND = "UniformScheduler"

  def __init__(self, num_clients: int, clients_per_round: int, seed: int):
    super().__init__(num_clients, seed)
    self._m = _checks.check_positive_int("clients_per_round", clients_per_round)
    if self._m > self._num_clients:
      raise ValueError(f"`clients_per_round` must be <= `num_clients` ({self._num_clients}); "
                       f"got {clients_per_round!r}.")

  def _select(self, round_index, draw_index):
    rng = self._rng(base.STREAM_SELECT, draw_index)
    ids = np.sort(rng.choice(self._num_clients, size=self._m, replace=False).astype(np.int64))
    return base.RoundSelection(round_index=round_index, client_ids=ids,
                               denominator=float(self._m), num_candidates=self._num_clients)

  def _config(self):
    return {"num_clients": self._num_clients, "clients_per_round": self._m,
            "seed": self._seed}, {}

  @classmethod
  def _from_config(cls, config, arrays):
    del arrays
    return cls(config["num_clients"], config["clients_per_round"], config["seed"])


class BallsInBinsScheduler(base.Scheduler):
  """Balls-in-bins batching (paper 003 Def. 3.1, fixed-size variant Sec. 5.2.1).

  Args:
    num_clients: population ``N``.
    num_bins: ``NB >= 1`` bins (= rounds per epoch).
    seed: the bin assignment is drawn from ``Generator(SeedSequence(seed,
      spawn_key=(STREAM_BINS, 0)))``, so it is re-derived on restore.
    fixed_size: optional ``B``: pad/truncate every round to exactly ``B`` slots.
  """

  KIND = "BallsInBinsScheduler"

  def __init__(self, num_clients: int, num_bins: int, seed: int, fixed_size: int | None = None):
    super().__init__(num_clients, seed)
    if isinstance(num_bins, (int, np.integer)) and not isinstance(num_bins, bool) and num_bins < 1:
      raise ValueError(f"`num_bins` (NB) must be >= 1; got {num_bins!r}. Use NB = number of "
                       "rounds per epoch.")
    self._nb = _checks.check_positive_int("num_bins", num_bins)
    self._fixed = None if fixed_size is None else _checks.check_positive_int(
        "fixed_size", fixed_size)
    bins = self._rng(base.STREAM_BINS, 0).integers(self._nb, size=self._num_clients,
                                                   dtype=np.int32)
    self._order = np.argsort(bins, kind="stable").astype(np.int64)
    self._offsets = np.concatenate(
        [[0], np.cumsum(np.bincount(bins, minlength=self._nb))]).astype(np.int64)

  @property
  def num_bins(self) -> int:
    return self._nb

  @property
  def fixed_size(self) -> int | None:
    return self._fixed

  def bin_members(self, bin_index: int) -> np.ndarray:
    """Sorted clients of bin `bin_index` (before truncation)."""
    j = _checks.check_nonnegative_int("bin_index", bin_index)
    if j >= self._nb:
      raise ValueError(f"`bin_index` must be < num_bins ({self._nb}); got {bin_index!r}.")
    return self._order[self._offsets[j]:self._offsets[j + 1]].copy()

  def bin_sizes(self) -> np.ndarray:
    return np.diff(self._offsets)

  def _select(self, round_index, draw_index):
    # A discarded draw spends its bin: its clients wait for the next epoch.
    members = self._order[self._offsets[draw_index % self._nb]:
                          self._offsets[draw_index % self._nb + 1]]
    if self._fixed is None:
      return base.RoundSelection(round_index=round_index, client_ids=members.copy(),
                                 denominator=self._num_clients / self._nb,
                                 num_candidates=int(members.size))
    b = self._fixed
    truncated = max(0, members.size - b)
    if truncated:
      ids = base.sample_without_replacement(self._rng(base.STREAM_TRUNCATE, draw_index),
                                            members, b)
    else:
      ids = members.copy()
    return base.RoundSelection(round_index=round_index, client_ids=ids, denominator=float(b),
                               num_padding=b - int(ids.size), num_candidates=int(members.size),
                               num_truncated=truncated)

  def _config(self):
    return {"num_clients": self._num_clients, "num_bins": self._nb, "seed": self._seed,
            "fixed_size": self._fixed}, {}

  @classmethod
  def _from_config(cls, config, arrays):
    del arrays
    return cls(config["num_clients"], config["num_bins"], config["seed"],
               fixed_size=config["fixed_size"])


class CyclicScheduler(base.Scheduler):
  """Cyclic epochs of ``ceil(N / m)`` rounds, each client once per epoch."""

  KIND = "CyclicScheduler"

  def __init__(self, num_clients: int, clients_per_round: int, seed: int,
               reshuffle_each_epoch: bool = False):
    super().__init__(num_clients, seed)
    self._m = _checks.check_positive_int("clients_per_round", clients_per_round)
    if self._m > self._num_clients:
      raise ValueError(f"`clients_per_round` must be <= `num_clients` ({self._num_clients}); "
                       f"got {clients_per_round!r}.")
    if not isinstance(reshuffle_each_epoch, bool):
      raise ValueError(f"`reshuffle_each_epoch` must be a bool; got {reshuffle_each_epoch!r}.")
    self._reshuffle = reshuffle_each_epoch
    self._groups = -(-self._num_clients // self._m)
    self._perm_epoch = -1
    self._perm = np.zeros(0, dtype=np.int64)

  @property
  def rounds_per_epoch(self) -> int:
    return self._groups

  def _permutation(self, epoch: int) -> np.ndarray:
    key = epoch if self._reshuffle else 0
    if self._perm_epoch != key:
      self._perm = self._rng(base.STREAM_PERMUTATION, key).permutation(
          self._num_clients).astype(np.int64)
      self._perm_epoch = key
    return self._perm

  def _select(self, round_index, draw_index):
    epoch, group = divmod(draw_index, self._groups)
    perm = self._permutation(epoch)
    ids = np.sort(perm[group * self._m:(group + 1) * self._m])
    return base.RoundSelection(round_index=round_index, client_ids=ids,
                               denominator=float(self._m), shortfall=self._m - int(ids.size),
                               num_candidates=self._num_clients)

  def _config(self):
    return {"num_clients": self._num_clients, "clients_per_round": self._m, "seed": self._seed,
            "reshuffle_each_epoch": self._reshuffle}, {}

  @classmethod
  def _from_config(cls, config, arrays):
    del arrays
    return cls(config["num_clients"], config["clients_per_round"], config["seed"],
               reshuffle_each_epoch=config["reshuffle_each_epoch"])
