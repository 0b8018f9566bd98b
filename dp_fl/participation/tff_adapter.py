"""Thin bridge from a participation scheduler to TFF simulation client data.

Given a `base.Scheduler` over ``N`` clients and a
``tff.simulation.datasets.ClientData``-like object (anything with
``client_ids`` and ``create_tf_dataset_for_client``), `TffParticipation`
yields, round by round, the selected client ids and their ``tf.data``
datasets — the federated data argument of a TFF learning process's ``next``
(paper 004 Alg. 1, the set ``Q^t``) — and records the participation in the
scheduler's ledger once the round is committed (a discarded round records
none). Scheduler index ``i`` maps to ``client_ids[i]``.

This module imports neither TensorFlow nor TFF: it only calls methods of the
objects it is given (the datasets are whatever the client data creates), so the
participation package stays framework-free. For fixed-size balls-in-bins
(paper 003 Sec. 5.2.1) it can append ``num_padding`` empty datasets
(``dataset.take(0)``): an empty client contributes a zero update, which is the
padding the paper's analysis assumes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from dp_fl.participation import base
from dp_fl.participation import checkpoint


@dataclasses.dataclass(frozen=True)
class TffRound:
  """One round's federated data.

  Attributes:
    selection: the scheduler's `RoundSelection` (round index, denominator,
      shortfall, padding, simulated times).
    client_ids: the selected clients' string ids, in scheduler-index order.
    datasets: one dataset per selected client (plus empty padding datasets
      when padding is enabled), aligned with ``client_ids`` for the real ones.
    clients_with_data: how many of the selected clients train on data of their own: all
      of them, unless the client data says otherwise (`has_data`: the audit's canaries
      have none, and a round of canaries alone reports no examples without diverging).
  """
  selection: base.RoundSelection
  client_ids: tuple[str, ...]
  datasets: tuple[Any, ...]
  clients_with_data: int


class TffParticipation:
  """Feeds a TFF training loop from a scheduler; records who took part.

  Args:
    scheduler: any `base.Scheduler` with ``num_clients == len(client_ids)``.
    client_data: object with ``client_ids`` (sequence of str) and
      ``create_tf_dataset_for_client(client_id)``, e.g.
      ``tff.simulation.datasets.TestClientData``.
    pad_with_empty_datasets: append ``selection.num_padding`` empty datasets
      so every round has the scheduler's fixed size.
  """

  def __init__(self, scheduler: base.Scheduler, client_data: Any,
               pad_with_empty_datasets: bool = False):
    if not isinstance(scheduler, base.Scheduler):
      raise ValueError(f"`scheduler` must be a dp_fl.participation Scheduler; got {scheduler!r}.")
    if not (hasattr(client_data, "client_ids")
            and callable(getattr(client_data, "create_tf_dataset_for_client", None))):
      raise ValueError(
          "`client_data` must provide `client_ids` and `create_tf_dataset_for_client` (a "
          f"tff.simulation.datasets.ClientData); got {type(client_data).__name__}.")
    ids: Sequence[str] = tuple(client_data.client_ids)
    if len(ids) != scheduler.num_clients:
      raise ValueError(
          f"`client_data` has {len(ids)} clients but `scheduler` was built for "
          f"{scheduler.num_clients}; build the scheduler with num_clients=len(client_ids).")
    if len(set(ids)) != len(ids):
      raise ValueError("`client_data.client_ids` must be distinct.")
    if not isinstance(pad_with_empty_datasets, bool):
      raise ValueError(
          f"`pad_with_empty_datasets` must be a bool; got {pad_with_empty_datasets!r}.")
    self._scheduler = scheduler
    self._client_data = client_data
    self._ids = ids
    self._pad = pad_with_empty_datasets

  @property
  def scheduler(self) -> base.Scheduler:
    return self._scheduler

  @property
  def client_ids(self) -> tuple[str, ...]:
    return tuple(self._ids)

  def select_round(self) -> TffRound:
    """Selects the next cohort and builds its datasets; nothing is recorded until `commit`
    (see `base.Scheduler.select_round`). If building a dataset fails, the selection is
    withdrawn: the scheduler is as before."""
    selection = self._scheduler.select_round()
    try:
      return self._datasets(selection)
    except BaseException:
      self._scheduler.withdraw(selection)
      raise

  def commit(self, round_: TffRound) -> None:
    """The round was applied: the ledger records it."""
    self._scheduler.commit(round_.selection)

  def discard(self, round_: TffRound) -> None:
    """The round ran but was not applied: it uses no row of C."""
    self._scheduler.discard(round_.selection)

  def withdraw(self, round_: TffRound) -> None:
    """The round never ran."""
    self._scheduler.withdraw(round_.selection)

  def next_round(self) -> TffRound:
    """Selects the next cohort, records it, and builds its datasets."""
    return self._datasets(self._scheduler.next_round())

  def _datasets(self, selection: base.RoundSelection) -> TffRound:
    names = tuple(self._ids[i] for i in selection.client_ids)
    datasets = [self._client_data.create_tf_dataset_for_client(c) for c in names]
    if self._pad and selection.num_padding:
      datasets.extend(self._padding(datasets) for _ in range(selection.num_padding))
    has_data = getattr(self._client_data, "has_data", None)
    with_data = (sum(1 for c in names if has_data(c)) if callable(has_data) else len(names))
    return TffRound(selection=selection, client_ids=names, datasets=tuple(datasets),
                    clients_with_data=with_data)

  def _padding(self, datasets: list[Any]) -> Any:
    """An empty client's input: the client data's `create_padding_input()` where it has one
    (inputs that are more than a dataset, e.g. the audit's canary clients), else an empty
    dataset of the clients' element spec."""
    create = getattr(self._client_data, "create_padding_input", None)
    if callable(create):
      return create()
    template = datasets[0] if datasets else (
        self._client_data.create_tf_dataset_for_client(self._ids[0]))
    return template.take(0)

  def state(self) -> bytes:
    """Scheduler state for the training checkpoint."""
    return self._scheduler.to_bytes()

  @classmethod
  def restore(cls, state: bytes, client_data: Any,
              pad_with_empty_datasets: bool = False) -> "TffParticipation":
    """Rebuilds the adapter from `state()` bytes and the same client data."""
    return cls(checkpoint.restore_scheduler(state), client_data,
               pad_with_empty_datasets=pad_with_empty_datasets)
