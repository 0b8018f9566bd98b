"""Common interface of every participation scheduler: who takes part in round t.

A scheduler owns a `ParticipationLedger` and a seed. ``next_round()`` selects
the cohort of the next round, records it in the ledger and returns a
`RoundSelection`. All randomness of round ``t`` comes from
``np.random.Generator(SeedSequence(seed, spawn_key=(stream, t)))`` — never a
global RNG — so the state that must be checkpointed is only the ledger, the
round index and a few per-scheme arrays, and a restored scheduler continues
with exactly the selections an uninterrupted one would make.

``to_bytes()`` serializes configuration *and* state; ``from_bytes()`` (or
`dp_fl.participation.checkpoint.restore_scheduler` for any kind) rebuilds it.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar

import numpy as np

from dp_fl import _checks
from dp_fl.participation import _state_io
from dp_fl.participation import ledger as ledger_lib

# Stream tags of the SeedSequence spawn keys (one per use of randomness).
STREAM_SELECT = 1
STREAM_DURATION = 2
STREAM_AVAILABILITY = 3
STREAM_BINS = 4
STREAM_PERMUTATION = 5
STREAM_TIMEZONES = 6
STREAM_TRUNCATE = 7


def round_rng(seed: int, stream: int, index: int) -> np.random.Generator:
  """The Generator for (seed, stream, index); the only source of randomness."""
  return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream, index)))


@dataclasses.dataclass(frozen=True)
class RoundSelection:
  """The cohort of one round.

  Attributes:
    round_index: 0-based round number.
    client_ids: sorted, distinct int64 client indices that take part.
    denominator: the fixed denominator the aggregator divides the clipped sum by
      (report goal ``m`` in paper 004 Alg. 1; ``qN`` for Poisson, paper 001's
      fixed-denominator estimator; ``B`` for fixed-size balls-in-bins, paper 003
      Sec. 5.2.1). Keeping it fixed when a round runs short keeps the DP
      sensitivity analysis valid.
    num_padding: zero-update slots added to reach a fixed batch size (paper 003
      Sec. 5.2.1 padding); 0 for other schemes.
    shortfall: clients missing relative to the target size (report goal / B);
      0 when the round is full or the scheme has no fixed target.
    num_candidates: clients that were available and eligible when sampling
      (the device-timer scheduler), or the population / bin size otherwise.
    start_time_hours: simulated wall-clock time at which the round started
      (device-timer scheduler), else None.
    duration_hours: simulated duration of the round, else None.
    waited_hours: time the server waited for enough eligible devices, else 0.
    num_truncated: clients of a balls-in-bins bin dropped by truncation to B.
  """
  round_index: int
  client_ids: np.ndarray
  denominator: float
  num_padding: int = 0
  shortfall: int = 0
  num_candidates: int = 0
  start_time_hours: float | None = None
  duration_hours: float | None = None
  waited_hours: float = 0.0
  num_truncated: int = 0

  @property
  def cohort_size(self) -> int:
    return int(self.client_ids.size)


class Scheduler(abc.ABC):
  """Base class: ledger, seed, round counter, serialization."""

  KIND: ClassVar[str] = ""
  VERSION: ClassVar[int] = 1

  def __init__(self, num_clients: int, seed: int):
    self._num_clients = _checks.check_positive_int("num_clients", num_clients)
    self._seed = _checks.check_nonnegative_int("seed", seed)
    self._ledger = ledger_lib.ParticipationLedger(self._num_clients)

  # ------------------------------------------------------------ interface
  @abc.abstractmethod
  def _select(self, round_index: int) -> RoundSelection:
    """Selects round `round_index`'s cohort and updates scheme state (not the ledger)."""

  @abc.abstractmethod
  def _config(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Constructor arguments as (JSON-able dict, arrays)."""

  @classmethod
  @abc.abstractmethod
  def _from_config(cls, config: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Scheduler":
    """Builds a fresh scheduler from `_config()` output."""

  def _dynamic_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Mutable state besides the ledger as (JSON-able dict, arrays)."""
    return {}, {}

  def _set_dynamic_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    del meta, arrays

  # ------------------------------------------------------------ public API
  def next_round(self) -> RoundSelection:
    """Selects the next round's cohort and records it in the ledger."""
    r = self._ledger.num_rounds
    selection = self._select(r)
    self._ledger.record(r, selection.client_ids)
    return selection

  @property
  def num_clients(self) -> int:
    return self._num_clients

  @property
  def seed(self) -> int:
    return self._seed

  @property
  def round_index(self) -> int:
    """Index of the next round to be selected (= rounds run so far)."""
    return self._ledger.num_rounds

  @property
  def ledger(self) -> ledger_lib.ParticipationLedger:
    return self._ledger

  def realized(self) -> ledger_lib.RealizedParticipation:
    """Realized (b, k, histogram) so far; what the privacy report must use."""
    return self._ledger.realized()

  def to_bytes(self) -> bytes:
    """Configuration and full state as bytes (exact round trip via `from_bytes`)."""
    config, config_arrays = self._config()
    ledger_meta, ledger_arrays = self._ledger.state_arrays()
    dyn_meta, dyn_arrays = self._dynamic_state()
    arrays = {}
    for prefix, group in (("config.", config_arrays), ("ledger.", ledger_arrays),
                          ("state.", dyn_arrays)):
      arrays.update({prefix + k: v for k, v in group.items()})
    meta = {"config": config, "ledger": ledger_meta, "state": dyn_meta}
    return _state_io.pack(self.KIND, self.VERSION, meta, arrays)

  @classmethod
  def from_bytes(cls, blob: bytes) -> "Scheduler":
    """Restores a scheduler saved by `to_bytes` (in any process)."""
    _, meta, arrays = _state_io.unpack(blob, cls.KIND, cls.VERSION)
    return cls._from_parts(meta, arrays)

  @classmethod
  def _from_parts(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Scheduler":
    def group(prefix):
      return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
    scheduler = cls._from_config(meta["config"], group("config."))
    scheduler._ledger = ledger_lib.ParticipationLedger.from_state_arrays(
        meta["ledger"], group("ledger."))
    scheduler._set_dynamic_state(meta["state"], group("state."))
    return scheduler

  def _rng(self, stream: int, index: int) -> np.random.Generator:
    return round_rng(self._seed, stream, index)


def sample_without_replacement(rng: np.random.Generator, candidates: np.ndarray,
                               size: int) -> np.ndarray:
  """A uniformly random `size`-subset of `candidates` (all of them if fewer), sorted."""
  if candidates.size <= size:
    return np.sort(candidates.astype(np.int64, copy=False))
  picked = rng.choice(candidates.size, size=size, replace=False)
  return np.sort(candidates[picked].astype(np.int64, copy=False))
