"""The training program: one loop for every task (paper 004, Alg. 1; paper 001, Alg. 1).

    result = program.run(task, config)

Each round: the participation scheduler picks the clients (and the ledger records them), the
TFF learning process broadcasts the model, every client runs local SGD and sends its model
delta, the aggregator clips, sums and adds the round's noise (DP-FTRL: the row of ζσ C⁻¹ Z
from the mechanism's streaming state; DP-FedAvg: independent Gaussian noise), and the server
applies SGD with momentum (learning-rate cooldown at the end). Then metrics are written, and
every `eval_every` rounds the global model is evaluated and the privacy report (from the
realized participation) is refreshed; every `checkpoint_every` rounds, on SIGTERM/SIGINT and
at the end a checkpoint holds everything the next rounds depend on.

Secrets and determinism: the noise seed of the aggregator and the seed of the participation
scheduler are drawn from OS entropy and live only in the learning-process state and the
scheduler state — both in every checkpoint, never in config.json or the logs — so nobody who
reads the config or the code can regenerate the noise or predict the cohorts (the checkpoints
must be kept as secret as the data). `reproducible_noise_seed` derives both from a number
instead, for research, and the report then says the run is not private against anyone who
knows it. Given those seeds a run is deterministic: the model is initialized from `seed`, the
noise is a function of (noise seed, row of C) and the aggregator state, the scheduler draws
from its own seeded streams, and client datasets must be deterministic. A run killed at any
point and resumed from its latest checkpoint ends with the same model, bitwise, as an
uninterrupted one (`tests/training/program_test.py`) — except where the clients draw private
randomness (cpSGD's noise shares, `registry.MechanismEntry.client_randomness`): there a re-run
round is a fresh release: every computed round is logged before it runs
(`privacy.record_release`) and the accountant charges what the ledger does not count.

Privacy bookkeeping: a round's cohort is recorded in the ledger only when the round is
applied; a discarded round (non-finite result) uses no row of C and leaves no trace in the
ledger, so the accounting counts exactly the rows of C used. Every checkpoint carries the
privacy-relevant configuration and a hash of the mechanism, checked on resume whatever files
beside it are missing. Evaluations are published only after the state they evaluate was
checkpointed, so no published result is ever recomputed with the same noise after a crash.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Optional, TextIO

import numpy as np

from dp_fl import files
from dp_fl import resources
from dp_fl import writers
from dp_fl.accounting import report as report_lib
from dp_fl.execution import learners as learners_lib
from dp_fl.execution import runtime as runtime_lib
from dp_fl.mechanisms import catalog
from dp_fl.participation import base as participation_base
from dp_fl.participation import tff_adapter
from dp_fl.training import budget
from dp_fl.training import canaries as canaries_lib
from dp_fl.training import checkpoints as checkpoints_lib
from dp_fl.training import config as config_lib
from dp_fl.training import figures
from dp_fl.training import loop as loop_lib
from dp_fl.training import noise_guard
from dp_fl.training import outputs as outputs_lib
from dp_fl.training import policies as policies_lib
from dp_fl.training import privacy as privacy_lib
from dp_fl.training import registry
from dp_fl.training import run_lock
from dp_fl.training import runtimes
from dp_fl.training import task as task_lib

MECHANISM_FILE = registry.MECHANISM_FILE


@dataclasses.dataclass(frozen=True)
class RunResult:
  """How a call to `run` ended."""
  rounds_completed: int
  stopped: str  # "completed", "paused", "target_epsilon", "signal", "nonfinite", "no_clients"
  eval_metrics: dict[str, float]
  epsilon: Optional[float]
  delta: float
  privacy_report: Optional[Any]
  resumed_from: Optional[int]
  seconds: float
  message: str = ""
  empty_rounds: int = 0  # Skipped in this call: no client could take part (loop.py).
  audit: Optional[dict[str, Any]] = None  # The "empirical" section (--audit_canaries).
  noise_guard: Optional[dict[str, Any]] = None  # noise_guard.Assessment.to_dict().
  noise_drift: Optional[dict[str, float]] = None  # The evaluation that drifted, if any.
  # Wall seconds of this call by loop stage (`loop.STAGES`); the rest of `seconds` is setup
  # (building the process, restoring, calibration checks) and the final report.
  seconds_by_stage: dict[str, float] = dataclasses.field(default_factory=dict)

  @property
  def audit_failed(self) -> bool:
    """The canaries' one-run lower bound exceeds the accounted ε (`canaries.audit`)."""
    return bool(self.audit and self.audit["lower_bound_exceeds_accounted"])


# ---------------------------------------------------------------------------------------
# Building blocks (each a function of the config, so tests and tools can reuse them).


def check_root_dir(root_dir: str) -> None:
  """Creates the run directory and proves it writable, before anything expensive."""
  resources.ensure_writable_dir("`root_dir`", root_dir)


def build_mechanism(config: config_lib.TrainingConfig) -> Optional[catalog.Mechanism]:
  """The run's matrix mechanism (DP-FTRL; None for the others): loaded from the run directory
  when resuming, else from `mechanism_params`, else optimized, and saved (registry.py)."""
  return registry.mechanism(config.mechanism).load_or_build(config)


mechanism_digest = catalog.mechanism_digest


def secret_seeds(config: config_lib.TrainingConfig) -> tuple[int, Optional[int]]:
  """(scheduler seed, aggregator noise seed) of a new run.

  From OS entropy unless `reproducible_noise_seed` is set (research runs; then both derive
  from it, in independent streams). None for the aggregator lets the factory draw its own.
  """
  if config.reproducible_noise_seed is not None:
    return config.reproducible_noise_seed, config.reproducible_noise_seed
  return participation_base.secret_seed(), None


def population(task: task_lib.Task, config: config_lib.TrainingConfig) -> int:
  """The clients the scheduler draws from: the task's, and the audit's canaries."""
  return len(task.train_data.client_ids) + config.audit_canaries


def build_scheduler(config: config_lib.TrainingConfig, num_clients: int,
                    seed: Optional[int] = None) -> participation_base.Scheduler:
  """The participation scheduler of `config.participation` over `num_clients` clients.

  `seed` is the secret seed of the sampling (default: `secret_seeds(config)`); the simulated
  availability (time zones) derives from the public `config.seed`.
  """
  seed = secret_seeds(config)[0] if seed is None else seed
  return registry.scheduler(config, num_clients, seed)


def _server_optimizer(config: config_lib.TrainingConfig):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  if config.server_optimizer == "adam":
    optimizer = tff.learning.optimizers.build_adam(
        learning_rate=config.server_learning_rate, beta_1=config.server_momentum,
        beta_2=0.999, epsilon=config.server_adam_epsilon)
  else:
    optimizer = tff.learning.optimizers.build_sgdm(
        learning_rate=config.server_learning_rate,
        momentum=config.server_momentum if config.server_momentum > 0 else None)
  if config.cooldown_rounds == 0:
    return optimizer
  start = float(config.rounds - config.cooldown_rounds)
  cooldown = float(config.cooldown_rounds)
  drop = 1.0 - config.cooldown_final_fraction
  base = config.server_learning_rate

  def schedule(round_num):
    t = tf.cast(round_num, tf.float32)
    progress = tf.clip_by_value((t - start + 1.0) / cooldown, 0.0, 1.0)
    return base * (1.0 - drop * progress)

  return tff.learning.optimizers.schedule_learning_rate(optimizer, schedule)


def check_job_time(task: task_lib.Task, config: config_lib.TrainingConfig,
                   dimension: Optional[int] = None,
                   announce: bool = True) -> Optional[resources.Estimate]:
  """The whole job's time against `--time_budget_hours` (`budget.check_job_time`): the
  binaries call it before calibrating σ, `run` again before writing anything."""
  workers = getattr(config.runtime_settings, "workers", None)
  return budget.check_job_time(
      config, model_dimension(task) if dimension is None else dimension, task.client_tokens,
      hosts=len(runtime_lib.parse_workers(workers)) if workers else 1, announce=announce,
      eval_tokens=getattr(task, "eval_tokens", None))  # Task-like objects may lack it.


def worker_checks(task: task_lib.Task, config: config_lib.TrainingConfig) -> tuple[Any, ...]:
  """The task's checks of remote workers (`Task.worker_checks`) when the run has workers."""
  if runtimes.remote_workers(config) is None or task.worker_checks is None:
    return ()
  return tuple(task.worker_checks())


def runtime_for_cohort(config: config_lib.TrainingConfig, dimension: int, runtime_given: bool,
                       device: Optional[str] = None
                       ) -> tuple[config_lib.TrainingConfig, Optional[str]]:
  """The runtime a round of `config.clients_per_round` clients of a `dimension`-parameter
  model runs on, and a line saying why when the default was changed (issue #43).

  TFF's C++ worker holds every client's results until the round's aggregate
  (`budget.worker_cohort_estimate`); the in-process runtime folds each client as it
  completes, flat in the cohort, at the worker's speed (docs/BENCHMARKS.md "Runtimes"). With
  the default runtime (`runtime_given` False) a cohort that would hold more than
  `budget.IN_PROCESS_ABOVE_BYTES` in the worker runs in process; an explicit
  `--runtime=tff_worker` is kept, and refused beyond the memory budget naming `--runtime`
  and `--clients_per_round`. `device`: the `--device` the user gave (the worker has no
  device choice, so its settings do not keep it), applied when the run moves in process.
  """
  if config.runtime != runtimes.DEFAULT:
    return config, None
  estimate = budget.worker_cohort_estimate(dimension, config.clients_per_round)
  if not runtime_given and estimate.bytes > budget.IN_PROCESS_ABOVE_BYTES:
    kept = {f.name for f in dataclasses.fields(runtimes.settings_type(runtimes.IN_PROCESS))}
    moved = registry.make_config(**{
        **{k: v for k, v in config.flags().items()
           if k not in runtimes.setting_fields() or k in kept},
        **({} if device is None else {"device": device}), "runtime": runtimes.IN_PROCESS})
    return moved, (
        f"runtime: in process (--runtime={runtimes.IN_PROCESS} on "
        f"{moved.runtime_settings.device}, no XLA compilation), not TFF's C++ worker: "
        f"{estimate.what} would need {resources.format_bytes(estimate.bytes)}; in process "
        "each client is folded into the round's sum as it completes (--runtime=tff_worker "
        "keeps the worker)")
  budget.check_worker_cohort(config, dimension)
  return config, None


def model_dimension(task: task_lib.Task) -> int:
  """The number of trainable parameters of the task's model (the size of a model update)."""
  model = task.keras_model_fn()
  return int(sum(int(np.prod(w.shape)) for w in model.trainable_weights))


def _dimension_kwargs(entry: registry.MechanismEntry,
                      dimension: Optional[int]) -> dict[str, Any]:
  return {"model_dimension": dimension} if entry.needs_model_dimension else {}


def assess_noise(task: task_lib.Task, config: config_lib.TrainingConfig, mechanism: Any,
                 num_clients: int) -> Optional[noise_guard.Assessment]:
  """The noise guard's verdict on the run (`noise_guard.py`; None without noise, with
  `--noise_guard=off`, or for a C that cannot stream): from public settings and the initial
  model of the run's seed."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  entry = registry.mechanism(config.mechanism)
  if not entry.private or config.noise_guard == "off" or config.noise_multiplier == 0:
    return None
  inverse = None
  if mechanism is not None:
    try:
      inverse = mechanism.streaming_noise(config.rounds).materialize(config.rounds)
    except ValueError:
      return None
  tf.keras.utils.set_random_seed(config.seed)
  weights = [np.asarray(w) for w in task.keras_model_fn().trainable_weights]
  norm = float(np.sqrt(sum(np.sum(np.square(w, dtype=np.float64)) for w in weights)))
  dimension = int(sum(w.size for w in weights))
  return noise_guard.assess(
      config, inverse, registry.expected_cohort(config, num_clients), dimension,
      norm if 0 < norm < np.inf else None,  # A model initialized at 0 has no scale to compare.
      lambda sigma: entry.planned_epsilon_at(config, sigma, num_clients,
                                             **_dimension_kwargs(entry, dimension)),
      num_clients)


def build_aggregator(config: config_lib.TrainingConfig, mechanism: Any, num_clients: int,
                     noise_seed: Optional[int] = None, dimension: Optional[int] = None,
                     max_step_clip_norm: Optional[float] = None):
  """The model aggregator of the run's mechanism (dp_fl.aggregators, via registry.py).

  `noise_seed` None draws the noise seed from OS entropy (it is then only in the state);
  `dimension`: the model's number of parameters, for mechanisms that need it;
  `max_step_clip_norm`: the noise guard's step cap of an adaptive clip norm.
  """
  entry = registry.mechanism(config.mechanism)
  kwargs = _dimension_kwargs(entry, dimension)
  if max_step_clip_norm is not None:
    kwargs["max_step_clip_norm"] = max_step_clip_norm
  return entry.aggregator(config, mechanism, num_clients, noise_seed, **kwargs)


def build_learning_process(task: task_lib.Task, config: config_lib.TrainingConfig,
                           aggregator: Any):
  """FedAvg (paper 004 Alg. 1, paper 001 Alg. 1) with the run's aggregator and optimizers.

  Composed from TFF's own templates as `tff.learning.algorithms.build_weighted_fed_avg`
  composes them — broadcast, model-delta client work, the aggregator, the server optimizer —
  with one difference: the client work builds its model without running the variable
  initializers (`client_work.model_fn(initialize=False)`), which TFF's runtime would otherwise
  run on every client call only to overwrite them with the broadcast weights. The initial
  global model is built with the real initializers. DP-FedAvg weights clients by their number
  of examples (its aggregator turns them into w_k = min(n_k / ŵ, 1)); DP-FTRL and
  no-privacy runs are unweighted (each client counts once, the fixed denominator of
  paper 004 Eq. 1). With `--audit_canaries` the client work is `canaries.with_canaries`'s:
  each client's data is ``<data, canary>``.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from dp_fl.training import client_work  # pylint: disable=g-import-not-at-top
  element_spec = task.train_data.create_tf_dataset_for_client(
      task.train_data.client_ids[0]).element_spec
  initial_model_fn = client_work.model_fn(task, element_spec)

  @tff.tensorflow.computation
  def initial_model_weights():
    return tff.learning.models.ModelWeights.from_model(initial_model_fn())

  weights_type = initial_model_weights.type_signature.result
  if registry.mechanism(config.mechanism).weighting == registry.NUM_EXAMPLES:
    weighting = tff.learning.ClientWeighting.NUM_EXAMPLES
    weighted_aggregator = aggregator
  else:
    weighting = tff.learning.ClientWeighting.UNIFORM
    weighted_aggregator = tff.aggregators.as_weighted_aggregator(aggregator)
  work = client_work.delta_client_work(
      task, element_spec, optimizer=config.client_optimizer,
      learning_rate=config.client_learning_rate, weighting=weighting,
      jit_compile=config.runtime_settings.jit_compile)
  if config.audit_canaries:
    work = canaries_lib.with_canaries(
        work, config.clip_norm,
        canaries_lib.FULL_WEIGHT if weighting == tff.learning.ClientWeighting.NUM_EXAMPLES
        else 1.0)
  return tff.learning.templates.compose_learning_process(
      initial_model_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      work,
      weighted_aggregator.create(weights_type.trainable, tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(_server_optimizer(config),
                                                             weights_type))


def evaluate(task: task_lib.Task, model_weights: Any) -> dict[str, float]:
  """Task metrics of the global model on the held-out data."""
  keras_model = task.keras_model_fn()
  keras_model.compile(loss=task.loss_fn(), metrics=task.metrics_fn())
  model_weights.assign_weights_to(keras_model)
  results = keras_model.evaluate(task.eval_dataset_fn(), verbose=0, return_dict=True)
  return {k: float(v) for k, v in results.items()}


# ---------------------------------------------------------------------------------------
# The loop.


def check_population(restored: checkpoints_lib.Checkpoint, num_clients: int,
                     canaries: int = 0) -> None:
  """Refuses to resume from `restored` on data of another number of clients than it trained
  on, naming that (checked before the settings: a calibrated σ follows the population, and a
  changed σ would otherwise be blamed). `num_clients` counts the audit's `canaries`; their
  number is compared apart, as the setting it is (`--audit_canaries`, with the other privacy
  settings). Checkpoints before the record existed pass."""
  saved_clients = restored.meta.get("num_clients")
  record = restored.meta.get("privacy")
  saved_canaries = (record.get("audit_canaries", canaries) if isinstance(record, dict)
                    else canaries) or 0
  if saved_clients is not None and saved_clients - saved_canaries != num_clients - canaries:
    raise ValueError(
        f"Refusing to resume from the checkpoint {restored.path}: it trained on a population "
        f"of {saved_clients - saved_canaries} clients, the data given now has "
        f"{num_clients - canaries} (another "
        "--data_dir / --data_files or corpus?). Its participation ledger and privacy account "
        "are of the first population: resume with the same data, or start a new run in "
        "another --root_dir.")


def check_checkpoint_privacy(restored: checkpoints_lib.Checkpoint,
                             config: config_lib.TrainingConfig,
                             config_was_saved: bool) -> None:
  """Refuses to resume from `restored` with privacy-relevant settings other than its own.

  Every checkpoint carries the privacy-relevant configuration it was written under; the
  check holds whatever files beside it (config.json, mechanism.json) were removed. A
  checkpoint written before that record existed is accepted only next to its config.json.
  """
  record = restored.meta.get("privacy")
  if record is None:
    if config_was_saved:
      return
    raise ValueError(
        f"The checkpoint {restored.path} holds no record of the privacy settings it was "
        f"written under, and {config_lib.CONFIG_FILE} is missing from {config.root_dir!r}, so "
        "resuming could silently change the noise or the participation. Restore "
        f"{config_lib.CONFIG_FILE}, or start a new run in another --root_dir.")
  changed = config_lib.privacy_differences(record, config)
  if changed:
    raise ValueError(
        f"Refusing to resume from the checkpoint {restored.path}: it was written with other "
        f"privacy settings ({'; '.join(changed)}). Resume with the checkpoint's settings, or "
        "start a new run in another --root_dir.")


@dataclasses.dataclass
class _Start:
  """Where a call to `run` starts: checkpoint manager, checkpoint found, mechanism."""
  manager: checkpoints_lib.CheckpointManager
  restored: Optional[checkpoints_lib.Checkpoint]
  mechanism: Optional[catalog.Mechanism]
  digest: Optional[str]
  num_clients: int
  dimension: int  # The model's trainable parameters (built once, for the checks and d).
  worker_checks: tuple[Any, ...] = ()  # Built and run once at preflight, kept for the learner.


def _open_run_directory(task: task_lib.Task, config: config_lib.TrainingConfig) -> _Start:
  """Validates `config` against the task, the run directory and any checkpoint in it, then —
  only then — saves config.json and mechanism.json; refuses a resume that would change
  privacy. A run that fails validation leaves the directory as it found it (issue #18).

  The caller holds the directory's lock (`run_lock`).
  """
  if task.name != config.task:
    raise ValueError(f"`config.task` is {config.task!r} but the task is {task.name!r}.")
  manager = checkpoints_lib.CheckpointManager(
      os.path.join(config.root_dir, "checkpoints"), keep=config.keep_checkpoints)
  restored = manager.restore_latest()
  num_clients = population(task, config)
  if restored is not None:
    check_population(restored, num_clients, config.audit_canaries)
  saved = config_lib.check_saved(config, registry.config_from_dict)
  if restored is not None:
    check_checkpoint_privacy(restored, config, saved is not None)
  else:
    _refuse_lost_checkpoints(config, manager)
    if saved is None:
      _refuse_stray_mechanism(config)
  if (num_clients < config.clients_per_round
      and not registry.PARTICIPATIONS[config.participation].variable_cohorts):
    raise ValueError(f"--clients_per_round={config.clients_per_round} exceeds the "
                     f"{num_clients} training clients of task {task.name!r}; lower it.")
  budget.check_training(config, num_clients)
  mechanism = build_mechanism(config)
  dimension = model_dimension(task)
  budget.check_model_state(config, dimension,
                           None if mechanism is None else mechanism.buffers(config.rounds))
  check_job_time(task, config, dimension, announce=False)  # The binaries announced it.
  if config.runtime == runtimes.DEFAULT:
    budget.check_worker_cohort(config, dimension)
  digest = mechanism_digest(mechanism)
  if restored is not None and "mechanism_sha256" in restored.meta and (
      restored.meta["mechanism_sha256"] != digest):
    raise ValueError(
        f"Refusing to resume from the checkpoint {restored.path}: it was written with another "
        f"mechanism (parameters hash {restored.meta['mechanism_sha256'][:12]}…, now "
        f"{str(digest)[:12]}…); {MECHANISM_FILE} in {config.root_dir!r} was changed or "
        "rebuilt. Put back the run's mechanism file, or start a new run in another --root_dir.")
  # The device and the workers, before anything is written (#43: config.json used to be
  # written before a missing GPU or an unreachable worker was found).
  checks = worker_checks(task, config)
  learners_lib.preflight(config.runtime, **config.runtime_settings.learner_kwargs(),
                         worker_checks=checks)
  config_lib.save(config)  # Everything validated: the run directory is now this run's.
  save_mechanism(config, mechanism)
  return _Start(manager, restored, mechanism, digest, num_clients, dimension, checks)


def save_mechanism(config: config_lib.TrainingConfig,
                   mechanism: Optional[catalog.Mechanism]) -> None:
  """Writes the run's mechanism.json (once: a resumed run's file is never rewritten)."""
  path = os.path.join(config.root_dir, MECHANISM_FILE)
  if mechanism is not None and not os.path.exists(path):
    catalog.save(mechanism, path)


def _refuse_lost_checkpoints(config: config_lib.TrainingConfig,
                             manager: checkpoints_lib.CheckpointManager) -> None:
  """No usable checkpoint, but the directory shows trained rounds: refuse to start over.

  Retraining from round 0 would silently overwrite the metrics and, worse, release a second
  model trained on the same users with fresh noise — a privacy cost the report would omit.
  """
  train_csv = os.path.join(config.root_dir, "metrics", "train.csv")
  rows = len(writers.read_csv(train_csv)) if os.path.exists(train_csv) else 0
  leftovers = manager.rounds()
  if rows or leftovers:
    evidence = (f"{train_csv} has {rows} trained rounds" if rows else
                f"{manager.directory} holds checkpoints of rounds {leftovers} that do not verify")
    raise ValueError(
        f"--root_dir {config.root_dir!r} holds a run ({evidence}) but no usable checkpoint "
        "to resume from (deleted or damaged manifests?). Starting over would release a second "
        "model of the same users that its privacy report would not count. Restore the "
        "checkpoints, or start a new run in another --root_dir.")


def _refuse_stray_mechanism(config: config_lib.TrainingConfig) -> None:
  """A mechanism.json with neither config.json nor a checkpoint beside it says nothing about
  the settings it was built for (e.g. left by a failed run of an older version)."""
  path = os.path.join(config.root_dir, MECHANISM_FILE)
  if os.path.exists(path):
    raise ValueError(
        f"{path} exists but {config_lib.CONFIG_FILE} and checkpoints do not: it was left by a "
        "run that failed before training (or the rest was deleted), so nothing says which "
        f"settings it was built for. Delete {path} to build the mechanism afresh, or use "
        "another --root_dir.")


def _restore_state(restored: checkpoints_lib.Checkpoint, template: Any) -> Any:
  """The learning-process state of a checkpoint, checked against the fresh state's structure."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  flat_template = tf.nest.flatten(template)
  if len(flat_template) != len(restored.arrays) or any(
      np.shape(a) != np.shape(b) or np.asarray(a).dtype != b.dtype
      for a, b in zip(flat_template, restored.arrays)):
    raise ValueError(f"The checkpoint {restored.path} does not fit this task's model and "
                     f"aggregator ({len(restored.arrays)} arrays saved, {len(flat_template)} "
                     "expected, or other shapes): it belongs to another configuration, or to "
                     "an earlier dp_fl whose state had another layout (e.g. adaptive clipping "
                     "before its start search, --clip_search_step). Resume it with the version "
                     "that wrote it, or start a new run in another --root_dir.")
  return tf.nest.pack_sequence_as(template, restored.arrays)


def _policies(task: task_lib.Task, config: config_lib.TrainingConfig, rounds_done: int,
              max_rounds_this_call: Optional[int]) -> loop_lib.Policies:
  """The loop's policies as `config` (and the task's weight projection) set them."""
  return loop_lib.Policies(
      cadence=policies_lib.Cadence(config.rounds, config.eval_every, config.checkpoint_every),
      budget=policies_lib.EpsilonBudget(config.target_epsilon),
      nonfinite=policies_lib.NonfinitePolicy(config.on_nonfinite),
      projection=policies_lib.WeightProjection(task.project_weights),
      limit=policies_lib.RoundLimit(max_rounds_this_call, rounds_done),
      signal=policies_lib.StopSignal(),
      clock=policies_lib.ProgressClock())


def run(task: task_lib.Task, config: config_lib.TrainingConfig, *,
        progress_stream: Optional[TextIO] = None,
        max_rounds_this_call: Optional[int] = None
        ) -> RunResult:
  """Trains `task` as `config` says, resuming from the latest checkpoint in `root_dir`.

  Args:
    task: the task (data, model, metrics).
    config: the run's configuration (`registry.make_config`; checked again by
      `registry.validate`).
    progress_stream: where progress lines go (default: the current sys.stdout).
    max_rounds_this_call: stop (with a checkpoint) after this many rounds in this call —
      for tests and for chunked jobs; None runs to `config.rounds`.

  Returns:
    A `RunResult`. Must be called inside `dp_fl.execution.runtime.execution_context()`.
  """
  started = time.perf_counter()
  registry.validate(config)
  check_root_dir(config.root_dir)
  with run_lock.RunDirectoryLock(config.root_dir):
    return _run_locked(task, config, progress_stream, max_rounds_this_call, started)


def _run_locked(task: task_lib.Task, config: config_lib.TrainingConfig,
                progress_stream: Optional[TextIO], max_rounds_this_call: Optional[int],
                started: float) -> RunResult:
  """`run` with the run directory's lock held."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  start = _open_run_directory(task, config)
  entry = registry.mechanism(config.mechanism)
  dimension = start.dimension if entry.needs_model_dimension else None
  scheduler_seed, noise_seed = secret_seeds(config)
  guard = assess_noise(task, config, start.mechanism, start.num_clients)
  config = noise_guard.apply(config, guard)  # The server rate, if --noise_guard=scale.
  aggregator = build_aggregator(config, start.mechanism, start.num_clients, noise_seed,
                                dimension, noise_guard.max_step_clip_norm(config, guard))
  scheduler = build_scheduler(config, start.num_clients, scheduler_seed)
  accountant = entry.accountant(config, start.mechanism, start.num_clients,
                                **_dimension_kwargs(entry, dimension))
  tf.keras.utils.set_random_seed(config.seed)
  process = build_learning_process(task, config, aggregator)
  state = process.initialize()
  rounds_done, resumed_from = 0, None
  scores = _canary_scores(task, config, start.restored, process, state)
  client_data = (task.train_data if scores is None
                 else canaries_lib.CanaryClientData(task.train_data, scores.canaries))
  participation = tff_adapter.TffParticipation(scheduler, client_data)
  if start.restored is not None:
    state = _restore_state(start.restored, state)
    participation = tff_adapter.TffParticipation.restore(start.restored.blobs["scheduler"],
                                                         client_data)
    rounds_done = resumed_from = start.restored.round
  outputs = outputs_lib.RunOutputs(config.root_dir, rounds_done, progress_stream)
  outputs.resumed(resumed_from, config.rounds, config.root_dir)
  for line in guard.lines() if guard is not None else ():
    outputs.progress(line)
  drift = noise_guard.DriftWatch(task.baseline_metrics.get("unigram_loss"))
  write_data_quality(task, config.root_dir, outputs)
  learner = learners_lib.runtime(config.runtime).learner(
      process, state, config.client_epochs, **config.runtime_settings.learner_kwargs(),
      max_clients_per_call=budget.clients_per_worker_call(start.dimension),
      worker_checks=start.worker_checks)
  del state

  def save_checkpoint(round_number: int) -> None:
    blobs = {"scheduler": participation.state()}
    if scores is not None:
      blobs[CANARIES_BLOB] = scores.to_bytes()
    start.manager.save(round_number, tf.nest.flatten(learner.state()), blobs,
                       {"discarded_rounds": participation.scheduler.discarded_rounds,
                        "task": task.name, "privacy": config.privacy_record(),
                        "mechanism_sha256": start.digest, "num_clients": start.num_clients})

  def evaluate_and_watch() -> dict[str, float]:
    metrics = evaluate(task, learner.model_weights())
    message = drift.check(loop.rounds_done, metrics)
    if message:
      outputs.progress(message)
    return metrics

  try:
    try:
      loop = loop_lib.TrainingLoop(
          rounds=config.rounds, rounds_done=rounds_done, learner=learner,
          participation=participation, accountant=accountant,
          save_checkpoint=save_checkpoint,
          evaluate=evaluate_and_watch, outputs=outputs,
          meter=outputs_lib.ProgressMeter(rounds_done, config.rounds),
          policies=_policies(task, config, rounds_done, max_rounds_this_call),
          learning_rate_at=config.server_learning_rate_at,
          before_release=(
              (lambda r, ids: privacy_lib.record_release(config.root_dir, r, ids))
              if entry.client_randomness else None),
          after_apply=None if scores is None else (
              lambda r, ids: scores.observe(ids, learner.model_weights().trainable)))
      outcome = loop.run()
    finally:
      learner.close()
      write_data_quality(task, config.root_dir, outputs)
    return _finish(task, config, outcome, resumed_from, started, participation, outputs,
                   scores, guard, drift)
  finally:
    outputs.close()


CANARIES_BLOB = "canaries"
"""The checkpoint blob of the audit's canaries (secret, coins) and scores."""


def _canary_scores(task: task_lib.Task, config: config_lib.TrainingConfig,
                   restored: Optional[checkpoints_lib.Checkpoint], process: Any,
                   state: Any) -> Optional[canaries_lib.CanaryScores]:
  """The audit's canaries and scores (None without `--audit_canaries`): a new run draws
  them (OS entropy, or `--reproducible_noise_seed`); a resumed run takes its checkpoint's,
  so it keeps its canaries, coins and scores."""
  if not config.audit_canaries:
    return None
  if restored is not None:
    if CANARIES_BLOB not in restored.blobs:
      raise ValueError(f"Refusing to resume from the checkpoint {restored.path}: the run has "
                       f"--audit_canaries={config.audit_canaries} but the checkpoint holds no "
                       "canaries. Start a new run in another --root_dir.")
    scores = canaries_lib.CanaryScores.from_bytes(restored.blobs[CANARIES_BLOB])
    if scores.canaries.num_canaries != config.audit_canaries:
      raise ValueError(f"the checkpoint {restored.path} holds {scores.canaries.num_canaries} "
                       f"canaries, not --audit_canaries={config.audit_canaries}.")
    return scores
  canaries = canaries_lib.Canaries.draw(config.audit_canaries,
                                        len(task.train_data.client_ids),
                                        config.reproducible_noise_seed)
  initial = learners_lib.model_weights(process, state).trainable
  return canaries_lib.CanaryScores(canaries, [np.asarray(w) for w in initial])


def _audit(config: config_lib.TrainingConfig, outcome: Any,
           scores: Optional[canaries_lib.CanaryScores], outputs: Any
           ) -> Optional[dict[str, Any]]:
  """The empirical section, added to the privacy report; its error line when the lower bound
  exceeds the accounted ε."""
  if scores is None or not scores.rounds_scored:
    return None
  accounted = None if outcome.report is None else outcome.report.epsilon
  section = canaries_lib.audit(scores, accounted, config.delta,
                               gaussian_claim=report_lib.gaussian_claim(outcome.report))
  outputs.empirical(outcome.report, section)
  one_shot = section["one_shot"]["final_model"]["epsilon"]
  outputs.progress(
      f"audit ({section['num_canaries']} canaries): one-shot ε ≈ "
      + ("—" if one_shot is None else f"{one_shot:.4g}") + " (final model), one-run lower "
      f"bound ε ≥ {section['one_run_lower_bound']:.4g} "
      f"({section['confidence']:.0%}), accounted ε = "
      + ("∞" if accounted is None else f"{accounted:.4g}"))
  if section["lower_bound_exceeds_accounted"]:
    outputs.progress(canaries_lib.exceeded_message(section))
  return section


def _finish(task: task_lib.Task, config: config_lib.TrainingConfig, outcome: Any,
            resumed_from: Optional[int], started: float, participation: Any,
            outputs: Any, scores: Optional[canaries_lib.CanaryScores] = None,
            guard: Optional[noise_guard.Assessment] = None,
            drift: Optional[noise_guard.DriftWatch] = None) -> RunResult:
  """The run's result, written to summary.json."""
  result = RunResult(
      rounds_completed=outcome.rounds_done, stopped=outcome.stopped,
      eval_metrics=outcome.eval_metrics,
      epsilon=None if outcome.report is None else outcome.report.epsilon, delta=config.delta,
      privacy_report=outcome.report, resumed_from=resumed_from,
      seconds=time.perf_counter() - started, message=outcome.message,
      empty_rounds=outcome.empty_rounds, audit=_audit(config, outcome, scores, outputs),
      noise_guard=None if guard is None else guard.to_dict(),
      noise_drift=None if drift is None else drift.drifted,
      seconds_by_stage=outcome.seconds_by_stage)
  outputs.summary(_run_summary(task, result, participation.scheduler))
  try:
    figures.write_run_report(config.root_dir)
  except Exception as e:  # pylint: disable=broad-except  (the run itself succeeded)
    outputs.progress(f"figures not written ({type(e).__name__}: {e}); rerun `python -m "
                     f"dp_fl.training.figures {config.root_dir}` to write them")
  if result.message:
    outputs.progress(result.message)
  return result


DATA_QUALITY_FILE = "data_quality.json"


def write_data_quality(task: task_lib.Task, root_dir: str, outputs: Any) -> None:
  """`data_quality.json`: what the task's loaders skipped or quarantined (Task.data_quality),
  with a progress line when anything was."""
  if task.data_quality is None:
    return
  report = dict(task.data_quality())
  files.atomic_write_json(os.path.join(root_dir, DATA_QUALITY_FILE), report, indent=1)
  skipped = report.get("skipped")
  if skipped:
    outputs.progress(f"data: {skipped} bad records or lines skipped so far (by file and "
                     f"reason in {os.path.join(root_dir, DATA_QUALITY_FILE)})")


def _run_summary(task: task_lib.Task, result: RunResult,
                 scheduler: participation_base.Scheduler) -> dict[str, Any]:
  """summary.json of the run directory."""
  return {
      "task": task.name, "rounds_completed": result.rounds_completed,
      "stopped": result.stopped, "message": result.message, "eval": result.eval_metrics,
      "headline_metric": task.headline_metric, "baseline": dict(task.baseline_metrics),
      "epsilon": result.epsilon,
      "epsilon_is_upper_bound": result.privacy_report is not None, "delta": result.delta,
      "resumed_from": result.resumed_from, "seconds_this_call": result.seconds,
      "seconds_by_stage": result.seconds_by_stage,
      "discarded_rounds": scheduler.discarded_rounds,  # Non-finite and empty rounds.
      "empty_rounds_this_call": result.empty_rounds,
      "realized_participation": dataclasses.asdict(scheduler.realized()),
      "audit": None if result.audit is None else audit_summary(result.audit),
      "noise_guard": result.noise_guard, "noise_drift": result.noise_drift,
  }


def audit_summary(section: dict[str, Any]) -> dict[str, Any]:
  """The three numbers of the audit (accounted ε, one-shot estimate, one-run lower bound)
  and what they rest on, for summary.json and the binaries' JSON."""
  one_shot = section["one_shot"]
  return {
      "accounted_epsilon": section["accounted_epsilon"],
      "one_shot_epsilon_final_model": one_shot["final_model"]["epsilon"],
      "one_shot_epsilon_all_iterates": one_shot["all_iterates"]["epsilon"],
      "one_run_lower_bound": section["one_run_lower_bound"],
      "one_run_claim_tested": section["one_run_claim_tested"],
      "confidence": section["confidence"], "num_canaries": section["num_canaries"],
      "canary_cohort_share": section["canary_cohort_share"],
      "lower_bound_exceeds_accounted": section["lower_bound_exceeds_accounted"],
  }


# ---------------------------------------------------------------------------------------
# Helpers for binaries.


def calibrate_noise_multiplier(config: config_lib.TrainingConfig,
                               target_epsilon: float,
                               num_clients: Optional[int] = None,
                               task: Optional[task_lib.Task] = None) -> float:
  """σ such that the *planned* schedule reaches `target_epsilon` at `config.delta`.

  DP-FTRL: σ = sens / √(2ρ*) with sens the mechanism's sensitivity for (rounds, min_sep,
  max_participations) (paper 004, Sec. 3.1) — exact, or a valid upper bound where only a
  lower bound is known (never the lower bound); the report after training uses the realized
  participation instead. DP-FedAvg: the smallest z (bisection, RDP accountant) for T = rounds.
  cpSGD: the Gaussian-equivalent σ of the smallest m (needs the `task`: its model's dimension).
  """
  entry = registry.mechanism(config.mechanism)
  if entry.private:
    check_root_dir(config.root_dir)
  dimension = model_dimension(task) if entry.needs_model_dimension and task else None
  return entry.calibrate(config, target_epsilon, num_clients,
                         **_dimension_kwargs(entry, dimension))


def calibration_lines(config: config_lib.TrainingConfig, target_epsilon: float,
                      num_clients: Optional[int] = None,
                      task: Optional[task_lib.Task] = None) -> list[str]:
  """What a binary prints after `calibrate_noise_multiplier` (σ now in `config`): the ε the
  planned schedule reaches — the target, or less where a setting other than σ fixes the
  noise — the participation it was planned for, and the budget stop it implies."""
  entry = registry.mechanism(config.mechanism)
  dimension = model_dimension(task) if entry.needs_model_dimension and task else None
  epsilon, why = entry.planned_epsilon(config, target_epsilon, num_clients,
                                       **_dimension_kwargs(entry, dimension))
  lines = [f"noise multiplier {config.noise_multiplier:.6g} gives ε = {epsilon:.4g} at "
           f"δ = {config.delta:g} for the planned schedule"
           + (f" (below the target {target_epsilon:g}: {why})" if why else "")]
  planned = entry.calibrated_participation(config, num_clients)
  if planned is not None:
    lines.append(f"  planned for the participation --participation={config.participation} "
                 f"realizes: {planned.describe()}")
  if task is not None and num_clients is not None:
    guard = assess_noise(task, config, build_mechanism(config), num_clients)
    lines += ["  " + line for line in (guard.lines() if guard is not None else ())]
  lines.append(f"  --calibrate_epsilon={target_epsilon:g} also stops the run before any round "
               f"that would take its reported ε above {target_epsilon:g} (as --target_epsilon)")
  return lines


def summary_dict(task: task_lib.Task, config: config_lib.TrainingConfig,
                 result: RunResult) -> dict[str, Any]:
  """The end-of-run record a binary prints with --format=json."""
  return {
      "task": task.name, "description": task.description, "root_dir": config.root_dir,
      "rounds_completed": result.rounds_completed, "stopped": result.stopped,
      "message": result.message, "eval": result.eval_metrics,
      "headline_metric": task.headline_metric, "baseline": dict(task.baseline_metrics),
      "mechanism": config.mechanism,
      "noise_multiplier": config.noise_multiplier, "epsilon": result.epsilon,
      "delta": result.delta, "seconds": result.seconds,
      "privacy_report": None if result.privacy_report is None
      else result.privacy_report.to_dict(),
      "audit": None if result.audit is None else audit_summary(result.audit),
  }


def stage_line(result: RunResult) -> str:
  """"  time: training 93.1 s (91 %), data 3.0 s (3 %), ..." — where this call's wall time
  went (summary.json's `seconds_by_stage`), largest first; "" before any stage ran."""
  stages = {k: v for k, v in result.seconds_by_stage.items() if v > 0}
  if not stages or result.seconds <= 0:
    return ""
  setup = max(0.0, result.seconds - sum(stages.values()))
  parts = sorted([*stages.items(), ("setup and reports", setup)], key=lambda kv: -kv[1])
  return "  time: " + ", ".join(f"{name} {seconds:.1f} s ({100 * seconds / result.seconds:.0f} %)"
                                for name, seconds in parts)


def summary_lines(task: task_lib.Task, result: RunResult) -> list[str]:
  """The human end-of-run block: metrics next to the task's baselines, then privacy."""
  lines = ["", f"== {task.name}: {result.rounds_completed} rounds ({result.stopped}) in "
               f"{result.seconds:.0f} s =="]
  for name, value in result.eval_metrics.items():
    base = task.baseline_metrics.get(f"unigram_{name}", task.baseline_metrics.get(name))
    ref = "" if base is None else f"   (baseline {base:.4f})"
    lines.append(f"  {name:<50} {value:.4f}{ref}")
  report = result.privacy_report
  if report is None:
    lines.append("  privacy: none (non-private training)")
  else:
    lower = getattr(report, "epsilon_lower_bound", None)
    bound = ("" if lower is None else
             f" (an upper bound: the sensitivity is only bracketed; ε ≥ {lower:.4g})")
    lines.append(f"  privacy: ε = {report.epsilon:.4g} at δ = {report.delta:g}{bound}")
    for caveat in getattr(report, "caveats", ()):
      lines.append(f"           NOTE: {caveat}")
    participation = getattr(report, "participation", None)
    if participation is not None:
      lines.append(f"           ρ = {report.rho:.4g}-zCDP; realized min-sep "
                   f"{participation.min_sep} rounds, at most "
                   f"{participation.max_participations} participations per client")
  stages = stage_line(result)
  if stages:
    lines.append(stages)
  if result.empty_rounds:  # The same count as summary.json's `empty_rounds_this_call`.
    lines.append(f"  empty rounds this call: {result.empty_rounds} (no eligible client: "
                 "skipped, or noise-only where the scheme requires the round)")
  lines.append("  outputs: report.md (figures/*.png), metrics/train.csv, metrics/eval.csv, "
               "tensorboard/, privacy_report.md, summary.json")
  return lines
