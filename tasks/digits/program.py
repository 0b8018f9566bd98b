"""The digits experiment's program (paper 000, Sec. 5, Fig. 2): calibrate each (mechanism, ε, k
or B) once, train every seed, and summarize the sweep as JSON.

`train` is one run: E epochs, each a fresh public permutation of the N clients cut into ⌊N/n⌋
rounds of n; each round the clients' per-example gradients go to the mechanism's mean
estimator (the name table `dp_fl/aggregators/mean_estimators.py`: NumPy estimators calibrated
by `dp_fl/accounting/mean_estimation.py`, and TFF's distributed discrete Gaussian and Skellam
run by TFF in an execution context around the run) and the server takes an SGD step with
heavy-ball momentum on the estimate. `sweep` runs every (mechanism, ε, k or B, seed) of a
`SweepSpec`, in worker processes (spawned: TensorFlow is loaded) when asked, and `summarize`
returns the JSON-ready dict that `tasks.digits.results` draws from. `tasks.digits.experiment`
is the binary (flags → settings).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import multiprocessing
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from dp_fl.accounting import mean_estimation as mean_estimation_accounting
from dp_fl.aggregators import mean_estimators
from dp_fl.execution import runtime
from dp_fl.mechanisms import cpsgd
from dp_fl.mechanisms import mean_estimation
from tasks.digits import data
from tasks.digits import model

CHANCE_ACCURACY = 1.0 / data.NUM_CLASSES


@dataclasses.dataclass(frozen=True)
class Settings:
  """Training and privacy settings shared by every run of a sweep.

  Attributes:
    clients_per_round: n, clients (examples) per round.
    epochs: E; each client takes part once per epoch (E = participations in the accounting).
    learning_rate, momentum: the server's SGD with heavy-ball momentum on the mean estimate.
    clip_norm: D, the L2 norm each client's gradient is clipped to (gaussian, cpsgd).
    delta: δ of every (ε, δ) (paper 000: 1e-9); also the X_max failure probability (Thm. 4).
    binomial_p: p of cpSGD's Bin(m, p) shares (paper 000: 0.5).
    hidden_layers: the MLP's hidden widths (paper 000: three of 60).
  """
  clients_per_round: int
  epochs: int
  learning_rate: float
  momentum: float
  clip_norm: float
  delta: float
  binomial_p: float
  hidden_layers: tuple[int, ...] = model.PAPER_HIDDEN_LAYERS


@dataclasses.dataclass(frozen=True)
class SweepSpec:
  """What to run: every mechanism at every ε (and every k for cpsgd, every B for ddgauss and
  skellam), each over `seeds`."""
  mechanisms: tuple[str, ...]
  epsilons: tuple[float, ...]
  levels: tuple[int, ...]
  seeds: tuple[int, ...]
  bits: tuple[int, ...] = ()


MECHANISMS = mean_estimators.ESTIMATORS  # --mechanisms: name → calibration.


def calibration_rounds(settings: Settings, dimension: int) -> mean_estimation_accounting.Rounds:
  """What the mechanisms' calibration needs of the settings: E participations of n clients."""
  return mean_estimation_accounting.Rounds(
      cohort=settings.clients_per_round, participations=settings.epochs,
      clip_norm=settings.clip_norm, delta=settings.delta, binomial_p=settings.binomial_p,
      dimension=dimension)


# --------------------------------------------------------------------------------------------
# Training


def train(digits: data.Digits, settings: Settings, estimator: Any, seed: int,
          ) -> dict[str, Any]:
  """One run: E epochs of ⌊N/n⌋ rounds; returns test accuracy, loss and the realized
  participation (each client at most E rounds)."""
  mlp = model.Mlp((digits.num_features, *settings.hidden_layers, data.NUM_CLASSES))
  theta = mlp.init(mean_estimation.stream(seed, mean_estimation.INIT))
  velocity = np.zeros_like(theta)
  num_clients, n = digits.train_labels.size, settings.clients_per_round
  rounds_per_epoch = num_clients // n
  participations = np.zeros(num_clients, dtype=np.int64)
  accuracy_per_epoch, diverged_at = [], None
  started = time.perf_counter()
  round_index = 0
  for epoch in range(settings.epochs):
    order = mean_estimation.stream(seed, mean_estimation.ORDER, epoch).permutation(num_clients)
    for r in range(rounds_per_epoch):
      cohort = order[r * n:(r + 1) * n]
      participations[cohort] += 1
      gradients = mlp.per_example_gradients(theta, digits.train_images[cohort],
                                            digits.train_labels[cohort])
      mean = estimator.estimate(gradients, seed, round_index)
      round_index += 1
      if not np.all(np.isfinite(mean)):
        diverged_at = round_index
        break
      velocity = settings.momentum * velocity + mean
      theta = theta - settings.learning_rate * velocity
    accuracy_per_epoch.append(mlp.accuracy(theta, digits.test_images, digits.test_labels))
    if diverged_at is not None:
      break
  return {"test_accuracy": accuracy_per_epoch[-1],
          "test_loss": mlp.loss(theta, digits.test_images, digits.test_labels),
          "test_accuracy_per_epoch": accuracy_per_epoch, "rounds": round_index,
          "max_participations": int(participations.max()), "diverged_at_round": diverged_at,
          "dimension": mlp.dimension, "seconds": time.perf_counter() - started}


Group = tuple[str, Optional[float], Optional[int], Optional[int]]  # (name, ε, k, B)


@dataclasses.dataclass(frozen=True)
class RunSpec:
  mechanism: str
  epsilon: Optional[float]
  num_levels: Optional[int]
  seed: int
  bits: Optional[int] = None

  @property
  def group(self) -> Group:
    return (self.mechanism, self.epsilon, self.num_levels, self.bits)


def run_specs(spec: SweepSpec) -> list[RunSpec]:
  """The sweep's runs: none once per seed, gaussian per ε, cpsgd per (ε, k), ddgauss and
  skellam per (ε, B)."""
  runs = []
  for name in spec.mechanisms:
    mechanism = MECHANISMS[name]
    for epsilon in (spec.epsilons if mechanism.private else (None,)):
      for levels in (spec.levels if mechanism.grid == mean_estimators.LEVELS else (None,)):
        for bits in (spec.bits if mechanism.grid == mean_estimators.BITS else (None,)):
          runs += [RunSpec(name, epsilon, levels, seed, bits) for seed in spec.seeds]
  return runs


def calibrate(run: RunSpec, rounds: mean_estimation_accounting.Rounds) -> Any:
  """The estimator of `run`'s group (raises ValueError where its (ε, B) is unreachable)."""
  mechanism = MECHANISMS[run.mechanism]
  grid_value = {mean_estimators.LEVELS: run.num_levels,
                mean_estimators.BITS: run.bits}.get(mechanism.grid)
  return mechanism.calibrate(rounds, run.epsilon, grid_value)


def train_run(digits: data.Digits, settings: Settings, estimator: Any, run: RunSpec
              ) -> dict[str, Any]:
  """`train` for `run`, inside a TFF execution context where its estimator runs in TFF."""
  context = (runtime.execution_context() if MECHANISMS[run.mechanism].tff_context
             else contextlib.nullcontext())
  with context:
    return train(digits, settings, estimator, run.seed)


_WORKER_DIGITS: Optional[data.Digits] = None


def _one_blas_thread() -> Any:
  """A context limiting NumPy's BLAS to one thread (runs are parallel across processes)."""
  try:
    import threadpoolctl  # pylint: disable=g-import-not-at-top
  except ImportError:
    return contextlib.nullcontext()
  return threadpoolctl.threadpool_limits(1)


def _init_worker(digits: data.Digits) -> None:
  global _WORKER_DIGITS
  _WORKER_DIGITS = digits
  _one_blas_thread()  # For the worker's lifetime.


def _run_one(job: tuple[RunSpec, Settings, Any]) -> tuple[RunSpec, dict[str, Any]]:
  run, settings, estimator = job
  return run, train_run(_WORKER_DIGITS, settings, estimator, run)


def sweep(digits: data.Digits, settings: Settings, spec: SweepSpec, workers: int = 1,
          progress: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
  """Calibrates each (mechanism, ε, k or B) once, trains every seed, and aggregates. A
  (mechanism, ε, B) no noise reaches (too few bits) is a row saying so, without runs."""
  dimension = model.Mlp((digits.num_features, *settings.hidden_layers,
                         data.NUM_CLASSES)).dimension
  runs = run_specs(spec)
  estimators, unreachable = {}, {}
  for run in runs:
    if run.group not in estimators and run.group not in unreachable:
      try:
        estimators[run.group] = calibrate(run, calibration_rounds(settings, dimension))
      except ValueError as e:
        if MECHANISMS[run.mechanism].grid != mean_estimators.BITS:
          raise
        unreachable[run.group] = str(e)
  jobs = [(run, settings, estimators[run.group]) for run in runs if run.group in estimators]
  # The slowest (TFF's rounds; cpsgd at small ε: the most trials) first, so the workers
  # finish together.
  jobs.sort(key=lambda job: (not MECHANISMS[job[0].mechanism].tff_context,
                             job[0].mechanism != "cpsgd", job[0].epsilon or 0.0))
  results: list[tuple[RunSpec, dict[str, Any]]] = []
  started = time.perf_counter()
  pool = None
  if workers <= 1:
    outcomes = ((run, train_run(digits, run_settings, estimator, run))
                for run, run_settings, estimator in jobs)
  else:
    # Spawned, not forked: this process has loaded TensorFlow (the table imports TFF), whose
    # threads a forked child would inherit mid-lock.
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, initializer=_init_worker, initargs=(digits,),
        mp_context=multiprocessing.get_context("spawn"))
    outcomes = pool.map(_run_one, jobs)
  try:
    with _one_blas_thread():
      for run, outcome in outcomes:
        results.append((run, outcome))
        if progress:
          progress(f"[{len(results)}/{len(jobs)} {time.perf_counter() - started:.0f}s] "
                   f"{_label(run.group)} seed {run.seed}: accuracy "
                   f"{outcome['test_accuracy']:.3f}")
  finally:
    if pool is not None:
      pool.shutdown(cancel_futures=True)
  return summarize(digits, settings, spec, estimators, results,
                   time.perf_counter() - started, dimension, unreachable)


def _label(group: Group) -> str:
  name, epsilon, levels, bits = group
  return name + (f" ε={epsilon:g}" if epsilon is not None else "") + (
      f" k={levels}" if levels is not None else "") + (f" B={bits}" if bits is not None else "")


def privacy_statement(settings: Settings, num_clients: int) -> str:
  n, rounds = settings.clients_per_round, num_clients // settings.clients_per_round
  return (
      f"Each training example is one client ({num_clients} clients). Neighbouring data sets "
      f"replace one client's example (replace-one; the cohort size n = {n} is public). Each "
      f"epoch is a fresh public permutation cut into {rounds} rounds of {n} (the "
      f"{num_clients - rounds * n} left over sit that epoch out), so a client is in at most "
      f"E = {settings.epochs} round(s); ε at δ = {settings.delta:g} is for those rounds "
      "composed (gaussian: exact Gaussian composition; cpsgd: the Binomial mechanism's Rényi "
      "DP with Eq. 10's sensitivities per round, composed over the rounds, "
      "dp_fl.accounting.cpsgd; ddgauss and skellam: TFF's distributed discrete Gaussian and "
      "Skellam at B bits, Rényi DP of Prop. 14 of arXiv:2102.06387 and Thm. 3.5 of "
      "arXiv:2110.04995 with replace-one sensitivities of TFF's rounded vector, composed over "
      "the rounds, dp_fl.aggregators.distributed_dp) and covers every model the server "
      "computes. No amplification by sampling or shuffling is claimed. The seeds are public "
      "(reproducible research runs): ε is the mechanism's when run with secret randomness "
      "(ddgauss and skellam draw their noise from the clients' own unseeded randomness, so "
      "their runs do not repeat exactly). Test images are not protected; `none` has no "
      "privacy.")


def summarize(digits: data.Digits, settings: Settings, spec: SweepSpec,
              estimators: dict[Group, Any], results: Sequence[tuple[RunSpec, dict[str, Any]]],
              seconds: float, dimension: int,
              unreachable: Optional[dict[Group, str]] = None) -> dict[str, Any]:
  """The sweep's JSON: settings, privacy statement, one row per (mechanism, ε, k or B) —
  an unreachable (ε, B) as a row with its reason and no accuracy — and the runs."""
  gaussian_std = {group[1]: est.describe()["noise_std_of_mean"]
                  for group, est in estimators.items() if group[0] == "gaussian"}
  rows = [{"mechanism": group[0], "epsilon_target": group[1], "num_levels": group[2],
           "bits": group[3], "accuracy_mean": None, "accuracy_std": None, "accuracies": [],
           "noise_std_vs_gaussian": None, "diverged_runs": 0, "epsilon": None,
           "bits_per_coordinate": group[3], "noise_std_of_mean": None, "unreachable": reason}
          for group, reason in (unreachable or {}).items()]
  for group, estimator in estimators.items():
    accuracies = [out["test_accuracy"] for run, out in results if run.group == group]
    described = estimator.describe()
    reference = gaussian_std.get(group[1])
    rows.append({
        "mechanism": group[0], "epsilon_target": group[1], "num_levels": group[2],
        "bits": group[3], "accuracy_mean": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies, ddof=1)) if len(accuracies) > 1 else 0.0,
        "accuracies": accuracies,
        "noise_std_vs_gaussian": (described["noise_std_of_mean"] / reference
                                  if reference and described["noise_std_of_mean"] else None),
        "diverged_runs": sum(1 for run, out in results
                             if run.group == group and out["diverged_at_round"]),
        **described})
  rows.sort(key=lambda r: (r["epsilon_target"] or math.inf, r["mechanism"],
                           r["num_levels"] or 0, r["bits"] or 0))
  return {
      "experiment": "paper 000 (cpSGD) Sec. 5 / Fig. 2 at laptop scale",
      "data": digits.describe(), "model_dimension": dimension,
      "padded_dimension": cpsgd.padded_dimension(dimension),
      "settings": {**dataclasses.asdict(settings),
                   "rounds": settings.epochs * (digits.train_labels.size //
                                                settings.clients_per_round)},
      "sweep": dataclasses.asdict(spec),
      "privacy": privacy_statement(settings, digits.train_labels.size),
      "chance_accuracy": CHANCE_ACCURACY, "seconds": seconds, "rows": rows,
      "runs": [{**dataclasses.asdict(run), **out} for run, out in results]}
