"""Common interface of every participation scheduler: who takes part in round t.

A scheduler owns a `ParticipationLedger` and a seed. A round is selected, run, and then
either committed or discarded:

    selection = scheduler.select_round()   # the cohort of row r of C; nothing recorded yet
    ...run the round...
    scheduler.commit(selection)            # applied: the ledger records row r
    scheduler.discard(selection)           # not applied (e.g. non-finite): no row is used,
                                           # the next selection is a fresh draw for row r
    scheduler.withdraw(selection)          # never run: as if it had not been selected

``next_round()`` selects and commits at once (simulations and tools). The ledger therefore
holds exactly the rows of C that were used — the accounting counts rows, never attempts
(paper 004, Sec. 3.1: the participation schema is over the rows of C). All randomness of a
selection comes from ``np.random.Generator(SeedSequence(seed, spawn_key=(stream, draw)))``
where ``draw`` counts selections that were run (committed or discarded); without discards
``draw`` equals the row index. The state that must be checkpointed is the ledger, the draw
counter and a few per-scheme arrays, and a restored scheduler continues with exactly the
selections an uninterrupted one would make. The seed is the secret of the sampling
(amplification and unpredictability of cohorts assume nobody else knows it): draw it with
`secret_seed()` and keep it only in checkpointed state.

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


def secret_seed() -> int:
  """A fresh 128-bit seed from OS entropy: what a private run's sampling must use."""
  return int(np.random.SeedSequence().entropy)


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


MAX_CONSECUTIVE_EMPTY_ROUNDS = 10_000
"""Empty selections in a row after which training stops, and the emulation refuses to go on
(≈ 417 days of 1-hour rounds: the population cannot serve a round)."""


class Scheduler(abc.ABC):
  """Base class: ledger, seed, round counter, serialization."""

  KIND: ClassVar[str] = ""
  VERSION: ClassVar[int] = 1

  @property
  def skips_empty_rounds(self) -> bool:
    """Whether a selection with no client is discarded (no row of C) rather than run.

    Only where time, not rows, makes clients eligible again (a device timer in hours):
    there a skipped round lets the clock move on. Where eligibility counts rows, skipping
    would never make a client eligible; and under Poisson sampling an empty cohort must
    still release its noise-only round — skipping it would reveal that nobody was
    sampled, which the subsampling analysis does not allow for.
    """
    return False

  @property
  def enforced_min_separation(self) -> int:
    """The min-sep in rows of C the rule guarantees by construction whatever the draws:
    1 (none) for random sampling; a device timer's `separation_rule`."""
    return 1

  def __init__(self, num_clients: int, seed: int):
    self._num_clients = _checks.check_positive_int("num_clients", num_clients)
    self._seed = _checks.check_nonnegative_int("seed", seed)
    self._ledger = ledger_lib.ParticipationLedger(self._num_clients)
    self._draws = 0  # Selections run so far (committed or discarded).
    self._discarded = 0
    self._pending: RoundSelection | None = None

  # ------------------------------------------------------------ interface
  @abc.abstractmethod
  def _select(self, round_index: int, draw_index: int) -> RoundSelection:
    """Selects the cohort of row `round_index` without changing any state.

    `draw_index` (selections run before this one, discarded ones included) keys the
    randomness and the position in a schedule (bin, group); `round_index` is the row of C
    the cohort would fill (the ledger's rounds, for separation rules and logs).
    """

  def _apply(self, selection: RoundSelection) -> None:
    """Scheme state after `selection` ran (committed or discarded; the ledger aside)."""
    del selection

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
  def select_round(self) -> RoundSelection:
    """The cohort of the next row of C; recorded only by `commit`.

    Exactly one selection can be pending: `commit`, `discard` or `withdraw` it first.
    """
    if self._pending is not None:
      raise ValueError(
          f"Round {self._pending.round_index} was selected and neither committed, discarded "
          "nor withdrawn; settle it before selecting the next round.")
    self._pending = self._select(self._ledger.num_rounds, self._draws)
    return self._pending

  def _settle(self, selection: RoundSelection, verb: str) -> None:
    if self._pending is None or selection is not self._pending:
      raise ValueError(f"Cannot {verb} a selection that is not the pending one (select_round "
                       "returns it; each is settled once).")
    self._pending = None

  def commit(self, selection: RoundSelection) -> None:
    """The round of `selection` was applied: the ledger records its row."""
    self._settle(selection, "commit")
    self._apply(selection)
    self._ledger.record(selection.round_index, selection.client_ids)
    self._draws += 1

  def discard(self, selection: RoundSelection) -> None:
    """The round of `selection` ran but was not applied: it uses no row of C.

    The scheme moves on (time passed, the draw is spent), so the next selection is a fresh
    draw for the same row.
    """
    self._settle(selection, "discard")
    self._apply(selection)
    self._draws += 1
    self._discarded += 1

  def withdraw(self, selection: RoundSelection) -> None:
    """`selection` never ran: the scheduler is as before `select_round`."""
    self._settle(selection, "withdraw")

  def next_round(self) -> RoundSelection:
    """Selects the next round's cohort and commits it at once."""
    selection = self.select_round()
    self.commit(selection)
    return selection

  def realized_if(self, selection: RoundSelection) -> ledger_lib.RealizedParticipation:
    """The realized participation if `selection` were committed (for ε look-ahead)."""
    return dataclasses.replace(
        self._ledger.realized_if(selection.round_index, selection.client_ids),
        discarded_draws=self._discarded)

  @property
  def draws(self) -> int:
    """Selections run so far (committed rounds plus discarded ones)."""
    return self._draws

  @property
  def discarded_rounds(self) -> int:
    """Selections that ran but were discarded (they used no row of C)."""
    return self._discarded

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
    """Realized (b, k, histogram, discarded draws) so far; what the privacy report uses."""
    return dataclasses.replace(self._ledger.realized(), discarded_draws=self._discarded)

  def to_bytes(self) -> bytes:
    """Configuration and full state as bytes (exact round trip via `from_bytes`).

    A pending selection is not part of the state: a restored scheduler selects it again.
    """
    config, config_arrays = self._config()
    ledger_meta, ledger_arrays = self._ledger.state_arrays()
    dyn_meta, dyn_arrays = self._dynamic_state()
    arrays = {}
    for prefix, group in (("config.", config_arrays), ("ledger.", ledger_arrays),
                          ("state.", dyn_arrays)):
      arrays.update({prefix + k: v for k, v in group.items()})
    meta = {"config": config, "ledger": ledger_meta, "state": dyn_meta,
            "draws": self._draws, "discarded": self._discarded}
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
    # States written before discards were tracked: every draw was a committed row.
    scheduler._draws = int(meta.get("draws", scheduler._ledger.num_rounds))
    scheduler._discarded = int(meta.get("discarded", 0))
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
