"""What a task gives the training program: data, model and metrics.

One training program (`dp_fl.training.program`) serves every task; a task is only this
record. Tasks live in `tasks/<name>/` and build it from their data (in the real on-disk
format) and model.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Mapping, Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Task:
  """A federated learning task.

  Attributes:
    name: the task's name (saved with the run; a run directory belongs to one task).
    train_data: the training clients: an object with `client_ids` (sequence of str) and
      `create_tf_dataset_for_client(client_id)` returning the client's preprocessed,
      batched `tf.data.Dataset` (e.g. a `tff.simulation.datasets.ClientData`). The datasets
      must be deterministic (no unseeded shuffling) for runs to be reproducible.
    eval_dataset_fn: returns the held-out evaluation data as one batched dataset.
    keras_model_fn: builds the (uncompiled) Keras model; weights are initialized from the
      global Keras seed, which the program sets from the run's seed.
    loss_fn: builds the Keras loss.
    metrics_fn: builds the list of Keras metrics reported in training and evaluation.
    baseline_metrics: reference figures printed next to the results (e.g. the unigram
      accuracy of a next-word-prediction task).
    project_weights: optional server-side projection applied to the global model's
      trainable weights after every round (e.g. unit-norm embeddings, paper 001 App. B): a
      function from the list of numpy trainable weights to the projected list.
    description: one line for logs and the summary.
    data_quality: optional; returns the counts of what the data loaders skipped or
      quarantined (malformed lines, bad records: totals, per file, per reason), as a
      JSON-able mapping whose "skipped" entry is the total count. The program writes it to
      `data_quality.json` in the run directory and warns when anything was skipped.
    validation_dataset_fn: optional; held-out data disjoint from `eval_dataset_fn`'s, on
      which comparisons choose hyperparameters (`dp_fl.training.compare`), so the figures
      they report on the evaluation data are not selected on it.
    validation_baseline_metrics: `baseline_metrics` computed on the validation data (None:
      the evaluation data's are shown for validation runs too).
    headline_metric: the evaluation metric that says whether the model learned the
      language beyond its most frequent tokens (StackOverflow: accuracy without OOV/EOS;
      Reddit: AccuracyTop1); comparisons rank by it, against `unigram_<headline_metric>`
      of `baseline_metrics`.
    client_tokens: optional; at most how many tokens (examples × their length) one client
      trains on per local epoch, for the whole job's time estimate
      (`budget.check_job_time`; None: no estimate).
    eval_tokens: optional; the tokens one evaluation scores (its sentences × their padded
      length), for the same estimate (None: evaluations left out of it).
    worker_checks: optional; returns the `remote_workers.WorkerCheck`s a remote worker
      (`--workers`) must pass before it trains this task's clients — e.g. that the database
      its clients' datasets read from the worker's own disk is this process's (the
      StackOverflow lazy path: only the datasets' graphs, not their records, go to workers).
  """
  name: str
  train_data: Any
  eval_dataset_fn: Callable[[], Any]
  keras_model_fn: Callable[[], Any]
  loss_fn: Callable[[], Any]
  metrics_fn: Callable[[], list[Any]]
  baseline_metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
  project_weights: Optional[Callable[[list[Any]], list[Any]]] = None
  description: str = ""
  data_quality: Optional[Callable[[], Mapping[str, Any]]] = None
  validation_dataset_fn: Optional[Callable[[], Any]] = None
  validation_baseline_metrics: Optional[Mapping[str, float]] = None
  headline_metric: str = "accuracy"
  client_tokens: Optional[float] = None
  eval_tokens: Optional[float] = None
  worker_checks: Optional[Callable[[], Sequence[Any]]] = None

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise ValueError(f"`name` must be a non-empty string; got {self.name!r}.")
    data = self.train_data
    if not (hasattr(data, "client_ids")
            and callable(getattr(data, "create_tf_dataset_for_client", None))):
      raise ValueError(
          "`train_data` must provide `client_ids` and `create_tf_dataset_for_client` (a "
          f"tff.simulation.datasets.ClientData); got {type(data).__name__}.")
    for name in ("eval_dataset_fn", "keras_model_fn", "loss_fn", "metrics_fn"):
      if not callable(getattr(self, name)):
        raise ValueError(f"`{name}` must be callable; got {getattr(self, name)!r}.")
    for name in ("client_tokens", "eval_tokens"):
      value = getattr(self, name)
      if value is not None and (isinstance(value, bool) or not (
          isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0)):
        raise ValueError(f"`{name}` must be a finite count >= 0 or None; got {value!r}.")
    if self.validation_dataset_fn is not None and not callable(self.validation_dataset_fn):
      raise ValueError("`validation_dataset_fn` must be callable or None; got "
                       f"{self.validation_dataset_fn!r}.")

  def for_validation(self) -> "Task":
    """This task evaluating on its validation data (ValueError if it has none)."""
    if self.validation_dataset_fn is None:
      raise ValueError(f"Task {self.name!r} has no validation data to choose "
                       "hyperparameters on.")
    baselines = (self.baseline_metrics if self.validation_baseline_metrics is None
                 else self.validation_baseline_metrics)
    return dataclasses.replace(self, eval_dataset_fn=self.validation_dataset_fn,
                               baseline_metrics=dict(baselines),
                               description=self.description + " — validation data")
