"""Ledger of realized client participation (min-sep and max participations).

The privacy guarantee of DP-FTRL (paper 004, Alg. 1 and Sec. 3) depends on the
*realized* participation pattern: the minimum separation ``b`` (smallest number
of rounds between two consecutive participations of any client) and the maximum
number of participations ``k`` of any client ("b-min-sep-participation",
paper 004 Sec. 3.1). Paper 004 Sec. 5 stresses that with a device timer the
min-sep is only known after training, and App. C item 3(b) lists min-sep and
limited participation as the accounting assumptions. This ledger records what
actually happened so the privacy report uses realized, not configured, values.

Storage is three ``int32`` arrays of length ``num_clients`` (first round, last
round, participation count) plus one ``int32`` array of refused check-ins:
16 bytes per client, i.e. 16 MB for 1,000,000 clients. A histogram of realized
separations (one ``int64`` counter per distinct gap length) is kept too, and the
participation record itself: the clients of every recorded round (4 bytes per
participation, 8 MB for paper 004's 2052 rounds of 1000 clients), so the rows of C
each client used can be audited against C exactly (`round_clients`,
`participation_patterns`).

Notation: rounds are 0-based; a client that took part in rounds ``r1 < r2`` and
in no round between has separation ``r2 - r1``; ``min_separation`` is the
minimum over all clients and all consecutive pairs (equivalently over all
pairs), ``None`` while no client has taken part twice.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dp_fl import _checks
from dp_fl.participation import _state_io

_NEVER = -1
_KIND = "ParticipationLedger"
_VERSION = 1


@dataclasses.dataclass(frozen=True)
class RealizedParticipation:
  """Realized participation summary consumed by the privacy report.

  Attributes:
    num_rounds: rounds recorded so far (including short or empty rounds).
    min_separation: realized min-sep ``b`` in rounds (paper 004, Sec. 3.1), or
      ``None`` if no client participated twice (then ``b`` is unconstrained).
    max_participations: realized ``k``: largest number of rounds any client took
      part in.
    participation_histogram: entry ``j`` = number of clients that took part in
      exactly ``j`` rounds (length ``max_participations + 1``).
    num_participants: clients that took part at least once.
    total_participations: sum of cohort sizes over all rounds.
    refused_check_ins: check-ins refused because the device was ineligible
      (paper 004 App. C: misbehaving clients do not affect others' guarantee).
    discarded_draws: selections that were run but discarded (no row of C); they shift
      which bin or group later rows use, which amplification analyses do not model.
    min_cohort: the smallest number of clients of any non-empty round (None before any);
      mechanisms whose noise the clients add (cpSGD) have the least noise in that round.
    pending_clients: for a look-ahead (`realized_if`), the clients of the round counted as
      if applied, the last of the ``num_rounds``; None when every round was applied.
      Accountants that charge every computed round (`dp_fl.training.privacy.ReleaseLog`)
      need them: the pending round is not logged yet, and earlier computations of it are
      all lost ones. Not compared: a look-ahead equals the summary after the commit.
  """
  num_rounds: int
  min_separation: int | None
  max_participations: int
  participation_histogram: tuple[int, ...]
  num_participants: int
  total_participations: int
  refused_check_ins: int
  discarded_draws: int = 0
  min_cohort: int | None = None
  pending_clients: tuple[int, ...] | None = dataclasses.field(default=None, repr=False,
                                                             compare=False)


class ParticipationLedger:
  """Per-client first/last participation rounds and counts, in compact arrays."""

  def __init__(self, num_clients: int):
    n = _checks.check_positive_int("num_clients", num_clients)
    if n > np.iinfo(np.int32).max:
      raise ValueError(f"`num_clients` must be < 2**31; got {num_clients!r}.")
    self._num_clients = n
    self._first = np.full(n, _NEVER, dtype=np.int32)
    self._last = np.full(n, _NEVER, dtype=np.int32)
    self._count = np.zeros(n, dtype=np.int32)
    self._refused = np.zeros(n, dtype=np.int32)
    self._separation_hist = np.zeros(0, dtype=np.int64)
    self._num_rounds = 0
    self._min_separation: int | None = None
    self._max_participations = 0
    self._total = 0
    self._min_cohort: int | None = None
    # The participation record: _history[i] holds the sorted clients of row
    # _history_rounds[i] (empty rows are left out). None for a ledger restored from a state
    # written before the record was kept.
    self._history: list[np.ndarray] | None = []
    self._history_rounds: list[int] = []

  # ---------------------------------------------------------------- recording
  def record(self, round_index: int, client_ids: np.ndarray) -> None:
    """Records that `client_ids` took part in round `round_index`.

    Rounds must be recorded in increasing order, each at most once; rounds that
    are skipped are counted as empty rounds. `client_ids` must be distinct
    integers in ``[0, num_clients)`` (an empty array records an empty round).
    """
    r = _checks.check_nonnegative_int("round_index", round_index)
    if r < self._num_rounds:
      raise ValueError(
          f"`round_index` must be >= {self._num_rounds} (rounds are recorded in order, once "
          f"each); got {round_index!r}.")
    if r >= np.iinfo(np.int32).max:
      raise ValueError(f"`round_index` must be < 2**31 - 1; got {round_index!r}.")
    ids = self.validate_ids("client_ids", client_ids)
    if ids.size > 1:
      sorted_ids = np.sort(ids)
      if np.any(sorted_ids[1:] == sorted_ids[:-1]):
        dup = sorted_ids[1:][sorted_ids[1:] == sorted_ids[:-1]][:3].tolist()
        raise ValueError(
            f"`client_ids` must be distinct within a round; got duplicates {dup}.")
    if ids.size:
      last = self._last[ids]
      repeat = last != _NEVER
      if np.any(repeat):
        gaps = r - last[repeat].astype(np.int64)
        g_min = int(gaps.min())
        if self._min_separation is None or g_min < self._min_separation:
          self._min_separation = g_min
        g_max = int(gaps.max())
        if g_max >= self._separation_hist.size:
          grown = np.zeros(max(g_max + 1, 2 * self._separation_hist.size), dtype=np.int64)
          grown[:self._separation_hist.size] = self._separation_hist
          self._separation_hist = grown
        np.add.at(self._separation_hist, gaps, 1)
      first_time = ~repeat
      self._first[ids[first_time]] = r
      self._last[ids] = r
      self._count[ids] += 1
      self._max_participations = max(self._max_participations, int(self._count[ids].max()))
      self._total += int(ids.size)
      self._min_cohort = (int(ids.size) if self._min_cohort is None
                          else min(self._min_cohort, int(ids.size)))
      if self._history is not None:
        self._history.append(np.sort(ids).astype(np.int32))
        self._history_rounds.append(r)
    self._num_rounds = r + 1

  def realized_if(self, round_index: int, client_ids) -> RealizedParticipation:
    """`realized()` as it would be after `record(round_index, client_ids)`; no change."""
    r = _checks.check_nonnegative_int("round_index", round_index)
    if r < self._num_rounds:
      raise ValueError(f"`round_index` must be >= {self._num_rounds}; got {round_index!r}.")
    ids = np.unique(self.validate_ids("client_ids", client_ids))
    min_sep = self._min_separation
    last = self._last[ids]
    repeat = last != _NEVER
    if np.any(repeat):
      gap = int((r - last[repeat].astype(np.int64)).min())
      min_sep = gap if min_sep is None else min(min_sep, gap)
    counts = self._count[ids].astype(np.int64)
    k = max(self._max_participations, int(counts.max()) + 1 if ids.size else 0)
    hist = np.zeros(k + 1, dtype=np.int64)
    current = self.participation_histogram()
    hist[:current.size] = current
    np.subtract.at(hist, counts, 1)
    np.add.at(hist, counts + 1, 1)
    min_cohort = self._min_cohort
    if ids.size:
      min_cohort = int(ids.size) if min_cohort is None else min(min_cohort, int(ids.size))
    return dataclasses.replace(
        self._summary(r + 1, min_sep, k, hist, self._total + int(ids.size), min_cohort),
        pending_clients=tuple(int(c) for c in ids))

  def record_refusal(self, client_ids: np.ndarray) -> None:
    """Counts refused check-ins (ineligible devices asking to participate)."""
    ids = self.validate_ids("client_ids", client_ids)
    np.add.at(self._refused, ids, 1)

  def validate_ids(self, name: str, client_ids) -> np.ndarray:
    """Returns `client_ids` as int64 after checking shape, dtype and range."""
    ids = np.asarray(client_ids)
    if ids.ndim != 1:
      raise ValueError(f"`{name}` must be a 1-D array of client indices; got shape {ids.shape}.")
    if ids.size == 0:
      return ids.astype(np.int64)
    if not np.issubdtype(ids.dtype, np.integer):
      raise ValueError(f"`{name}` must hold integers; got dtype {ids.dtype}.")
    ids = ids.astype(np.int64, copy=False)
    if ids.min() < 0 or ids.max() >= self._num_clients:
      bad = ids[(ids < 0) | (ids >= self._num_clients)][:3].tolist()
      raise ValueError(
          f"`{name}` must lie in [0, {self._num_clients}); got out-of-range ids {bad}.")
    return ids

  # ---------------------------------------------------------------- queries
  @property
  def num_clients(self) -> int:
    return self._num_clients

  @property
  def num_rounds(self) -> int:
    """Rounds recorded so far (the next round to record is this index)."""
    return self._num_rounds

  @property
  def min_separation(self) -> int | None:
    """Realized min-sep ``b`` in rounds, or None if nobody participated twice."""
    return self._min_separation

  @property
  def max_participations(self) -> int:
    """Realized ``k``: the most rounds any single client took part in."""
    return self._max_participations

  @property
  def first_round(self) -> np.ndarray:
    """Read-only view: first round of each client (-1 = never)."""
    return _read_only(self._first)

  @property
  def last_round(self) -> np.ndarray:
    """Read-only view: last round of each client (-1 = never)."""
    return _read_only(self._last)

  @property
  def counts(self) -> np.ndarray:
    """Read-only view: number of rounds each client took part in."""
    return _read_only(self._count)

  @property
  def refusals(self) -> np.ndarray:
    """Read-only view: refused check-ins per client."""
    return _read_only(self._refused)

  @property
  def has_participation_record(self) -> bool:
    """Whether every recorded round's clients are known (see `participation_patterns`)."""
    return self._history is not None

  def _check_record(self) -> list[np.ndarray]:
    if self._history is None:
      raise ValueError("This ledger was restored from a state written before the "
                       "participation record was kept; only its summary is known.")
    return self._history

  def round_clients(self, round_index: int) -> np.ndarray:
    """Sorted clients that took part in row `round_index` (empty for an empty round)."""
    r = _checks.check_nonnegative_int("round_index", round_index)
    history = self._check_record()
    i = int(np.searchsorted(self._history_rounds, r))
    if i < len(self._history_rounds) and self._history_rounds[i] == r:
      return history[i].astype(np.int64)
    return np.zeros(0, dtype=np.int64)

  def participation_patterns(self) -> dict[int, tuple[int, ...]]:
    """client -> the rows of C it took part in, for every client that took part."""
    history = self._check_record()
    patterns: dict[int, list[int]] = {}
    for r, ids in zip(self._history_rounds, history):
      for c in ids.tolist():
        patterns.setdefault(c, []).append(r)
    return {c: tuple(rows) for c, rows in patterns.items()}

  def participation_histogram(self) -> np.ndarray:
    """Entry j = number of clients that took part in exactly j rounds."""
    return np.bincount(self._count, minlength=self._max_participations + 1).astype(np.int64)

  def separation_histogram(self) -> np.ndarray:
    """Entry g = number of consecutive-participation pairs that were g rounds apart."""
    nz = np.flatnonzero(self._separation_hist)
    size = int(nz[-1]) + 1 if nz.size else 0
    return self._separation_hist[:size].copy()

  def realized(self) -> RealizedParticipation:
    """The realized (b, k, histogram) for the privacy report (paper 004, App. C)."""
    return self._summary(self._num_rounds, self._min_separation, self._max_participations,
                         self.participation_histogram(), self._total, self._min_cohort)

  def _summary(self, num_rounds: int, min_separation: int | None, max_participations: int,
               hist: np.ndarray, total: int, min_cohort: int | None) -> RealizedParticipation:
    return RealizedParticipation(
        num_rounds=num_rounds,
        min_separation=min_separation,
        max_participations=max_participations,
        participation_histogram=tuple(int(x) for x in hist),
        num_participants=int(self._num_clients - hist[0]),
        total_participations=total,
        refused_check_ins=int(self._refused.sum()),
        min_cohort=min_cohort,
    )

  @property
  def nbytes(self) -> int:
    """Bytes held by the ledger's arrays (the participation record included)."""
    record = sum(a.nbytes for a in self._history) if self._history is not None else 0
    return int(self._first.nbytes + self._last.nbytes + self._count.nbytes
               + self._refused.nbytes + self._separation_hist.nbytes + record)

  # ---------------------------------------------------------------- state
  def state_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, arrays) describing the ledger exactly; used by schedulers' to_bytes."""
    meta = {"num_clients": self._num_clients, "num_rounds": self._num_rounds,
            "min_separation": self._min_separation,
            "max_participations": self._max_participations, "total": self._total,
            "min_cohort": self._min_cohort}
    arrays = {"first": self._first, "last": self._last, "count": self._count,
              "refused": self._refused, "separation_hist": self._separation_hist}
    if self._history is not None:
      arrays["record_ids"] = (np.concatenate(self._history) if self._history
                              else np.zeros(0, dtype=np.int32))
      arrays["record_rounds"] = np.asarray(self._history_rounds, dtype=np.int64)
      arrays["record_sizes"] = np.asarray([a.size for a in self._history], dtype=np.int64)
    return meta, arrays

  @classmethod
  def from_state_arrays(cls, meta: dict, arrays: dict[str, np.ndarray]) -> "ParticipationLedger":
    """Inverse of `state_arrays`."""
    ledger = cls(meta["num_clients"])
    n = ledger._num_clients
    for name, attr in (("first", "_first"), ("last", "_last"), ("count", "_count"),
                       ("refused", "_refused")):
      arr = arrays[name]
      if arr.shape != (n,):
        raise ValueError(f"`state` array {name!r} has shape {arr.shape}; expected ({n},).")
      setattr(ledger, attr, arr.astype(np.int32, copy=True))
    ledger._separation_hist = arrays["separation_hist"].astype(np.int64, copy=True)
    ledger._num_rounds = int(meta["num_rounds"])
    ledger._min_separation = (None if meta["min_separation"] is None
                              else int(meta["min_separation"]))
    ledger._max_participations = int(meta["max_participations"])
    ledger._total = int(meta["total"])
    if "record_ids" in arrays:
      sizes = arrays["record_sizes"].astype(np.int64)
      ids = arrays["record_ids"].astype(np.int32)
      if int(sizes.sum()) != ids.size or ids.size != ledger._total:
        raise ValueError("`state` participation record is inconsistent with the ledger's "
                         f"totals ({ids.size} ids for {ledger._total} participations).")
      ledger._history = list(np.split(ids, np.cumsum(sizes)[:-1])) if sizes.size else []
      ledger._history_rounds = [int(r) for r in arrays["record_rounds"]]
    else:
      ledger._history, ledger._history_rounds = None, []
    # A state written before the smallest cohort was kept: from the participation record,
    # else 1 when anyone took part (the least noise any round can have had).
    min_cohort = meta.get("min_cohort")
    if min_cohort is None and ledger._total:
      min_cohort = (min(a.size for a in ledger._history) if ledger._history else 1)
    ledger._min_cohort = None if min_cohort is None else int(min_cohort)
    return ledger

  def to_bytes(self) -> bytes:
    """Serializes the ledger (exact round trip with `from_bytes`)."""
    meta, arrays = self.state_arrays()
    return _state_io.pack(_KIND, _VERSION, meta, arrays)

  @classmethod
  def from_bytes(cls, blob: bytes) -> "ParticipationLedger":
    _, meta, arrays = _state_io.unpack(blob, _KIND, _VERSION)
    return cls.from_state_arrays(meta, arrays)


def _read_only(arr: np.ndarray) -> np.ndarray:
  view = arr.view()
  view.flags.writeable = False
  return view
