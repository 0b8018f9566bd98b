"""Paper 000's learning experiment (cpSGD, Sec. 5, Fig. 2) at laptop scale: accuracy vs bits.

Paper 000 trains a three-hidden-layer MLP (60 ReLU units each) on infinite MNIST, one example
per client, 10,000 clients per round, one epoch, and plots accuracy against the bits each
client sends per coordinate, for the Gaussian mechanism and for cpSGD, Rot(s_k(Bin(m, p)),
HA) (Sec. 4.3, Thm. 4), at several ε. Here: the same model (`model.Mlp`) on scikit-learn's
8 × 8 digits (1,437 training clients; MNIST IDX files with --dataset=mnist), n clients per
round, each client's update its own gradient clipped to L2 norm D, the server taking an SGD
step (with momentum) on the mean estimate of its mechanism:

| mechanism | the server's estimate of the clients' mean gradient                                |
|-----------|------------------------------------------------------------------------------------|
| none      | the plain mean, unclipped, no noise (the non-private reference)                      |
| gaussian  | (Σ clip_D(g_i) + N(0, σ² I)) / n, σ calibrated to (ε, δ) over E participations:     |
|           | E Gaussian releases of sensitivity 2D are one Gaussian of μ = 2D√E/σ, exact (ε, δ)   |
|           | (`dp_fl.accounting.zcdp`, Balle & Wang's curve)                                     |
| cpsgd     | `dp_fl.mechanisms.cpsgd.Protocol`: each client clips, rotates by HA/√d' (fresh      |
|           | public signs each round), quantizes to k levels within ±X_max (Thm. 4's X_max) and   |
|           | adds its Bin(m, p) share; the server decodes the modular sum. m is the smallest for  |
|           | (ε, δ) over E participations (`dp_fl.accounting.cpsgd.trials_for_epsilon`: the       |
|           | Binomial mechanism's Rényi DP with Eq. 10's sensitivities per round, composed over   |
|           | rounds). A client sends ⌈log₂(k + m)⌉ bits per coordinate (Thm. 3)                   |

**Epochs.** With one epoch (`--epochs 1`, the paper's protocol: per-round ε = overall ε) a
1,437-client data set gives only ⌊1437/n⌋ rounds, too few to learn; the default runs E
epochs, each client taking part once per epoch (E times in all, composed in the accounting).

**What ε covers.** Each training example is one client. Neighbouring data sets replace one
client's example by another (the cohort size n is public). Each epoch is a fresh public
permutation cut into ⌊N/n⌋ rounds of n (the N mod n left over sit that epoch out), so a
client is in at most E rounds; ε is for those E rounds composed — every model the server
computes is covered. No amplification by sampling or shuffling is claimed. The seeds are
public (reproducible research runs), so a run is not private against anyone who knows them:
ε is the mechanism's, run with secret randomness. The test images are not protected. `none`
has no privacy. The Gaussian is central DP (a trusted server adds the noise, or clients add
shares of it); cpSGD's noise is the clients' own, the server seeing only the modular sum
(secure aggregation).

Run (writes results.json, results.md and accuracy_vs_bits.png in --out_dir):

  .venv/bin/python -m tasks.digits.experiment                 # the full sweep (ε 2,4,8)
  .venv/bin/python -m tasks.digits.experiment --epochs 1      # the paper's one-epoch protocol
  .venv/bin/python -m tasks.digits.experiment --quick --format json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from dp_fl import exits
from dp_fl import files
from dp_fl.accounting import cpsgd as cpsgd_accounting
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import cpsgd
from tasks.digits import data
from tasks.digits import model

DEFAULT_OUT_DIR = os.path.join("docs", "results", "cpsgd_digits")
RESULTS_JSON, RESULTS_MD, FIGURE_PNG = "results.json", "results.md", "accuracy_vs_bits.png"
CHANCE_ACCURACY = 1.0 / data.NUM_CLASSES

# One seeded stream per purpose and round (`stream`). ROTATION is public randomness shared by
# the clients and the server; CLIENTS holds each client's quantization and Binomial share;
# SERVER the central Gaussian noise.
INIT, ORDER, ROTATION, CLIENTS, SERVER = range(5)


def stream(seed: int, purpose: int, index: int = 0) -> np.random.Generator:
  """The generator of `purpose` (INIT, ORDER, …) at `index` (a round or an epoch)."""
  return np.random.default_rng([seed, purpose, index])


# --------------------------------------------------------------------------------------------
# Settings


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
  """What to run: every mechanism at every ε (and k for cpsgd), each over `seeds`."""
  mechanisms: tuple[str, ...]
  epsilons: tuple[float, ...]
  levels: tuple[int, ...]
  seeds: tuple[int, ...]


FULL = dict(clients_per_round=200, epochs=5, learning_rate=0.2, momentum=0.9, clip_norm=1.0,
            delta=1e-9, binomial_p=0.5, epsilons=(2.0, 4.0, 8.0), levels=(2, 4, 16, 64),
            num_seeds=3)
QUICK = dict(FULL, epochs=2, epsilons=(8.0,), levels=(16,), num_seeds=1)


# --------------------------------------------------------------------------------------------
# Mechanisms: each estimates the clients' mean gradient in one round.


@dataclasses.dataclass(frozen=True)
class PlainMean:
  """`none`: the mean of the unclipped gradients, no noise, no privacy."""
  name: str = "none"

  def estimate(self, gradients: np.ndarray, seed: int, round_index: int) -> np.ndarray:
    del seed, round_index
    return gradients.mean(axis=0)

  def describe(self) -> dict[str, Any]:
    return {"epsilon": None, "bits_per_coordinate": None, "noise_std_of_mean": 0.0}


@dataclasses.dataclass(frozen=True)
class GaussianMean:
  """`gaussian`: (Σ clip_D(g_i) + N(0, σ² I)) / n (paper 000, Thm. 2's baseline)."""
  clip_norm: float
  noise_std_of_sum: float
  cohort: int
  guarantee: dict[str, Any]
  name: str = "gaussian"

  def estimate(self, gradients: np.ndarray, seed: int, round_index: int) -> np.ndarray:
    total = cpsgd.clip_l2(gradients, self.clip_norm).sum(axis=0)
    noise = stream(seed, SERVER, round_index).normal(0.0, self.noise_std_of_sum, total.shape)
    return (total + noise) / gradients.shape[0]

  def describe(self) -> dict[str, Any]:
    return {**self.guarantee, "bits_per_coordinate": None,
            "noise_std_of_mean": self.noise_std_of_sum / self.cohort}


@dataclasses.dataclass(frozen=True)
class CpSgdMean:
  """`cpsgd`: Rot(s_k(Bin(m, p)), HA) of paper 000 (Sec. 4.3, Thm. 4) on the n gradients.

  Each client encodes (clip to D, rotate with the round's public signs, k-level stochastic
  quantization, + its Bin(m, p) share: `Protocol.encode`); secure aggregation reveals the sum
  modulo 2^b (`cpsgd.secure_sum_bits`, nothing wraps); the server decodes it
  (`Protocol.decode`).
  """
  protocol: cpsgd.Protocol
  cohort: int
  guarantee: dict[str, Any]
  name: str = "cpsgd"

  def estimate(self, gradients: np.ndarray, seed: int, round_index: int) -> np.ndarray:
    n, d = gradients.shape
    signs = cpsgd.rademacher_signs(stream(seed, ROTATION, round_index), d)
    messages = self.protocol.encode(gradients, stream(seed, CLIENTS, round_index), signs)
    modulus = 1 << cpsgd.secure_sum_bits(n, self.protocol.num_levels,
                                         self.protocol.num_trials)
    revealed = messages.sum(axis=0) % modulus
    return self.protocol.decode(revealed, n, float(n), d, signs)

  def describe(self) -> dict[str, Any]:
    return {**self.guarantee, "bits_per_coordinate": self.protocol.bits_per_coordinate,
            "noise_std_of_mean": self.protocol.noise_std_of_sum(self.cohort) / self.cohort}


def calibrate_none(settings: Settings, dimension: int, epsilon: Optional[float],
                   num_levels: Optional[int]) -> PlainMean:
  del settings, dimension, epsilon, num_levels
  return PlainMean()


def calibrate_gaussian(settings: Settings, dimension: int, epsilon: Optional[float],
                       num_levels: Optional[int]) -> GaussianMean:
  """σ of the sum for (ε, δ) over E participations, replace-one sensitivity 2D per round.

  A client's E rounds are E Gaussian releases of sensitivity 2D: ρ = E (2D)² / (2σ²)-zCDP,
  exactly one Gaussian of μ = 2D√E/σ, whose exact (ε, δ) (`zcdp.epsilon_from_rho`) is
  calibrated through `zcdp.noise_multiplier_for_epsilon` with sensitivity √E and clip norm 2D.
  """
  del dimension, num_levels
  participations = math.sqrt(settings.epochs)
  multiplier = zcdp.noise_multiplier_for_epsilon(participations, epsilon, settings.delta)
  guarantee = zcdp.matrix_mechanism_guarantee(participations, multiplier, settings.delta)
  if guarantee.epsilon > epsilon * (1 + 1e-9):
    raise RuntimeError(f"Gaussian calibration gave ε = {guarantee.epsilon} > {epsilon}.")
  return GaussianMean(
      clip_norm=settings.clip_norm,
      noise_std_of_sum=multiplier * 2.0 * settings.clip_norm,
      cohort=settings.clients_per_round,
      guarantee={"epsilon": guarantee.epsilon, "delta": settings.delta,
                 "participations": settings.epochs, "rho": guarantee.rho,
                 "accounting": "exact Gaussian (zCDP of E Gaussians, Balle-Wang curve)"})


def calibrate_cpsgd(settings: Settings, dimension: int, epsilon: Optional[float],
                    num_levels: Optional[int]) -> CpSgdMean:
  """m for (ε, δ) over E participations at k levels, X_max of Thm. 4; ε checked back."""
  n, delta = settings.clients_per_round, settings.delta
  padded = cpsgd.padded_dimension(dimension)
  x_max = cpsgd.rotated_x_max(settings.clip_norm, n, dimension, delta)
  trials = cpsgd_accounting.trials_for_epsilon(
      num_levels, settings.binomial_p, x_max, settings.clip_norm, padded, n,
      settings.epochs, epsilon, delta)
  guarantee = cpsgd_accounting.composed_epsilon(
      num_levels, trials, settings.binomial_p, x_max, settings.clip_norm, padded, n,
      settings.epochs, delta)
  if not guarantee.epsilon <= epsilon:
    raise RuntimeError(f"cpSGD calibration gave ε = {guarantee.epsilon} > {epsilon}.")
  protocol = cpsgd.Protocol(num_levels=num_levels, num_trials=trials, p=settings.binomial_p,
                            x_max=x_max, clip_norm=settings.clip_norm, rotate=True)
  return CpSgdMean(
      protocol=protocol, cohort=n,
      guarantee={"epsilon": guarantee.epsilon, "delta": delta,
                 "participations": settings.epochs, "num_levels": num_levels,
                 "num_trials": trials, "x_max": x_max, "padded_dimension": padded,
                 "composition": guarantee.composition,
                 "round_epsilon": guarantee.round_epsilon,
                 "accounting": "Rényi DP of the Binomial mechanism with Eq. 10's "
                               "sensitivities per round, composed over E rounds "
                               "(dp_fl.accounting.cpsgd)"})


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """What a --mechanisms name means: its calibration, whether it is private, uses k."""
  calibrate: Callable[[Settings, int, Optional[float], Optional[int]], Any]
  private: bool
  uses_levels: bool


MECHANISMS = {
    "none": Mechanism(calibrate_none, private=False, uses_levels=False),
    "gaussian": Mechanism(calibrate_gaussian, private=True, uses_levels=False),
    "cpsgd": Mechanism(calibrate_cpsgd, private=True, uses_levels=True),
}


# --------------------------------------------------------------------------------------------
# Training


def train(digits: data.Digits, settings: Settings, estimator: Any, seed: int,
          ) -> dict[str, Any]:
  """One run: E epochs of ⌊N/n⌋ rounds; returns test accuracy, loss and the realized
  participation (each client at most E rounds)."""
  mlp = model.Mlp((digits.num_features, *settings.hidden_layers, data.NUM_CLASSES))
  theta = mlp.init(stream(seed, INIT))
  velocity = np.zeros_like(theta)
  num_clients, n = digits.train_labels.size, settings.clients_per_round
  rounds_per_epoch = num_clients // n
  participations = np.zeros(num_clients, dtype=np.int64)
  accuracy_per_epoch, diverged_at = [], None
  started = time.perf_counter()
  round_index = 0
  for epoch in range(settings.epochs):
    order = stream(seed, ORDER, epoch).permutation(num_clients)
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


@dataclasses.dataclass(frozen=True)
class RunSpec:
  mechanism: str
  epsilon: Optional[float]
  num_levels: Optional[int]
  seed: int

  @property
  def group(self) -> tuple[str, Optional[float], Optional[int]]:
    return (self.mechanism, self.epsilon, self.num_levels)


def run_specs(spec: SweepSpec) -> list[RunSpec]:
  """The sweep's runs: none once per seed, gaussian per ε, cpsgd per (ε, k)."""
  runs = []
  for name in spec.mechanisms:
    mechanism = MECHANISMS[name]
    for epsilon in (spec.epsilons if mechanism.private else (None,)):
      for levels in (spec.levels if mechanism.uses_levels else (None,)):
        runs += [RunSpec(name, epsilon, levels, seed) for seed in spec.seeds]
  return runs


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
  return run, train(_WORKER_DIGITS, settings, estimator, run.seed)


def sweep(digits: data.Digits, settings: Settings, spec: SweepSpec, workers: int = 1,
          progress: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
  """Calibrates each (mechanism, ε, k) once, trains every seed, and aggregates."""
  dimension = model.Mlp((digits.num_features, *settings.hidden_layers,
                         data.NUM_CLASSES)).dimension
  runs = run_specs(spec)
  estimators = {}
  for run in runs:
    if run.group not in estimators:
      estimators[run.group] = MECHANISMS[run.mechanism].calibrate(
          settings, dimension, run.epsilon, run.num_levels)
  jobs = [(run, settings, estimators[run.group]) for run in runs]
  # The slowest (cpsgd, small ε: the most trials) first, so the workers finish together.
  jobs.sort(key=lambda job: (job[0].mechanism != "cpsgd", job[0].epsilon or 0.0))
  results: list[tuple[RunSpec, dict[str, Any]]] = []
  started = time.perf_counter()
  pool = None
  if workers <= 1:
    outcomes = ((run, train(digits, run_settings, estimator, run.seed))
                for run, run_settings, estimator in jobs)
  else:
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, initializer=_init_worker,
                                                  initargs=(digits,))
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
                   time.perf_counter() - started, dimension)


def _label(group: tuple[str, Optional[float], Optional[int]]) -> str:
  name, epsilon, levels = group
  return name + (f" ε={epsilon:g}" if epsilon is not None else "") + (
      f" k={levels}" if levels is not None else "")


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
      "dp_fl.accounting.cpsgd) and covers every model the server computes. No amplification "
      "by sampling or shuffling is claimed. The seeds are public (reproducible research "
      "runs): ε is the mechanism's when run with secret randomness. Test images are not "
      "protected; `none` has no privacy.")


def summarize(digits: data.Digits, settings: Settings, spec: SweepSpec,
              estimators: dict[Any, Any], results: Sequence[tuple[RunSpec, dict[str, Any]]],
              seconds: float, dimension: int) -> dict[str, Any]:
  """The sweep's JSON: settings, privacy statement, one row per (mechanism, ε, k), runs."""
  gaussian_std = {group[1]: est.describe()["noise_std_of_mean"]
                  for group, est in estimators.items() if group[0] == "gaussian"}
  rows = []
  for group, estimator in estimators.items():
    accuracies = [out["test_accuracy"] for run, out in results if run.group == group]
    described = estimator.describe()
    reference = gaussian_std.get(group[1])
    rows.append({
        "mechanism": group[0], "epsilon_target": group[1], "num_levels": group[2],
        "accuracy_mean": float(np.mean(accuracies)),
        "accuracy_std": float(np.std(accuracies, ddof=1)) if len(accuracies) > 1 else 0.0,
        "accuracies": accuracies,
        "noise_std_vs_gaussian": (described["noise_std_of_mean"] / reference
                                  if reference and described["noise_std_of_mean"] else None),
        "diverged_runs": sum(1 for run, out in results
                             if run.group == group and out["diverged_at_round"]),
        **described})
  rows.sort(key=lambda r: (r["epsilon_target"] or math.inf, r["mechanism"],
                           r["num_levels"] or 0))
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


# --------------------------------------------------------------------------------------------
# Output


def _accuracy(row: dict[str, Any], seeds: int) -> str:
  text = f"{row['accuracy_mean']:.3f}"
  return text + (f" ± {row['accuracy_std']:.3f}" if seeds > 1 else "")


def markdown(output: dict[str, Any]) -> str:
  """The human table: one line per (ε, mechanism, k)."""
  s = output["settings"]
  seeds = len(output["sweep"]["seeds"])
  lines = [
      f"# cpSGD vs Gaussian on {output['data']['source']}: accuracy vs bits (paper 000, "
      "Sec. 5)", "",
      f"MLP {output['data']['num_features']} → {' → '.join(map(str, s['hidden_layers']))} "
      f"→ {data.NUM_CLASSES} (d = {output['model_dimension']}, d' = "
      f"{output['padded_dimension']}); n = {s['clients_per_round']} clients per round, "
      f"E = {s['epochs']} epoch(s) ({s['rounds']} rounds), clip D = {s['clip_norm']:g}, server "
      f"SGD lr {s['learning_rate']:g} momentum {s['momentum']:g}; δ = {s['delta']:g}, "
      f"p = {s['binomial_p']:g}. Test accuracy: mean ± std (ddof 1) over {seeds} seed(s); "
      f"chance {output['chance_accuracy']:.2f}.", "",
      "| ε | mechanism | k | m | bits/coord | noise std of the mean (× Gaussian) | ε reached "
      "(accounting) | test accuracy |",
      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in output["rows"]:
    eps = "—" if r["epsilon_target"] is None else f"{r['epsilon_target']:g}"
    ratio = ("" if r["noise_std_vs_gaussian"] is None
             else f" (×{r['noise_std_vs_gaussian']:.2f})")
    reached = ("—" if r["epsilon"] is None else
               f"{r['epsilon']:.3f} ({r.get('composition', 'exact Gaussian')})")
    bits = "—" if r["bits_per_coordinate"] is None else str(r["bits_per_coordinate"])
    lines.append(
        f"| {eps} | {r['mechanism']} | {r['num_levels'] or '—'} | "
        f"{r.get('num_trials', '—')} | {bits} | {r['noise_std_of_mean']:.4g}{ratio} | "
        f"{reached} | {_accuracy(r, seeds)}"
        + (f" ({r['diverged_runs']} diverged)" if r["diverged_runs"] else "") + " |")
  lines += ["", "**What ε covers.** " + output["privacy"], "",
            f"{len(output['runs'])} runs in {output['seconds']:.0f} s."]
  return "\n".join(lines) + "\n"


def figure(output: dict[str, Any]) -> Any:
  """Accuracy vs bits per coordinate: cpSGD per ε (points labelled k), the Gaussian of the
  same ε as a dashed horizontal line (its ±std band), `none` dotted, chance grey."""
  from dp_fl.training import figures  # pylint: disable=g-import-not-at-top
  fig, ax = figures.new_figure(7.0, 4.4)
  colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
  epsilons = sorted({r["epsilon_target"] for r in output["rows"]
                     if r["epsilon_target"] is not None})
  cp_rows = [r for r in output["rows"] if r["mechanism"] == "cpsgd"]
  bits = [r["bits_per_coordinate"] for r in cp_rows] or [1, 32]
  for i, eps in enumerate(epsilons):
    color = colors[i % len(colors)]
    points = sorted((r for r in cp_rows if r["epsilon_target"] == eps),
                    key=lambda r: r["bits_per_coordinate"])
    if points:
      ax.errorbar([r["bits_per_coordinate"] for r in points],
                  [r["accuracy_mean"] for r in points],
                  yerr=[r["accuracy_std"] for r in points], marker="o", color=color,
                  capsize=3, label=f"cpSGD ε={eps:g}")
      for r in points:
        ax.annotate(f"k={r['num_levels']}", (r["bits_per_coordinate"], r["accuracy_mean"]),
                    textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
    for r in output["rows"]:
      if r["mechanism"] == "gaussian" and r["epsilon_target"] == eps:
        ax.axhline(r["accuracy_mean"], color=color, linestyle="--", linewidth=1,
                   label=f"Gaussian ε={eps:g} (real-valued)")
        ax.axhspan(r["accuracy_mean"] - r["accuracy_std"],
                   r["accuracy_mean"] + r["accuracy_std"], color=color, alpha=0.08)
  for r in output["rows"]:
    if r["mechanism"] == "none":
      ax.axhline(r["accuracy_mean"], color="black", linestyle=":", label="non-private (none)")
  ax.axhline(output["chance_accuracy"], color="grey", linewidth=0.8, label="chance")
  ax.set_xlim(min(bits) - 1, max(bits) + 2)
  ax.set_ylim(0.0, 1.0)
  ax.set_xlabel("bits per coordinate per client, ⌈log₂(k + m)⌉")
  ax.set_ylabel("test accuracy")
  s = output["settings"]
  ax.set_title(f"cpSGD vs Gaussian, {output['data']['source'].split(' (')[0]}: n = "
               f"{s['clients_per_round']}, E = {s['epochs']}, δ = {s['delta']:g}", fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  return fig


def write_outputs(output: dict[str, Any], out_dir: str) -> dict[str, str]:
  """results.json, results.md (with the figure) and accuracy_vs_bits.png in `out_dir`."""
  from dp_fl.training import figures  # pylint: disable=g-import-not-at-top
  os.makedirs(out_dir, exist_ok=True)
  paths = {name: os.path.join(out_dir, name) for name in (RESULTS_JSON, RESULTS_MD,
                                                          FIGURE_PNG)}
  files.atomic_write_json(paths[RESULTS_JSON], output, indent=1)
  files.atomic_write_text(paths[RESULTS_MD],
                          markdown(output) + f"\n![accuracy vs bits]({FIGURE_PNG})\n")
  figures.save_figure(figure(output), paths[FIGURE_PNG])
  return paths


def replot(results_json: str, out_dir: str) -> int:
  """Rewrites results.md and the figure (and a copy of the JSON) from `results_json`."""
  try:
    with open(results_json, encoding="utf-8") as f:
      output = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"--replot={results_json!r} is not JSON ({e}).") from e
  if not isinstance(output, dict) or "rows" not in output:
    raise ValueError(f"--replot={results_json!r} is not a results.json of this experiment.")
  paths = write_outputs(output, out_dir or ".")
  print(f"wrote {', '.join(paths.values())}", file=sys.stderr)
  print(markdown(output))
  return exits.COMPLETED


# --------------------------------------------------------------------------------------------
# Flags


def _number_list(flag: str, text: str, kind: Callable[[str], Any]) -> tuple[Any, ...]:
  values = []
  for item in text.split(","):
    try:
      values.append(kind(item.strip()))
    except ValueError:
      raise ValueError(f"--{flag}={text!r}: {item.strip()!r} is not a "
                       f"{'number' if kind is float else 'whole number'}; give a comma-"
                       f"separated list such as {'2,4,8' if kind is float else '2,4,16,64'}."
                       ) from None
  if not values:
    raise ValueError(f"--{flag} is empty; give at least one value.")
  return tuple(values)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true",
                      help=f"a small sweep for tests ({QUICK['epochs']} epochs, ε = "
                           f"{','.join(f'{e:g}' for e in QUICK['epsilons'])}, k = "
                           f"{','.join(map(str, QUICK['levels']))}, 1 seed); writes "
                           "nothing unless --out_dir is given")
  parser.add_argument("--dataset", default="sklearn_digits", help=f"one of {data.DATASETS}")
  parser.add_argument("--data_dir", default=None, help="MNIST's IDX files (--dataset=mnist)")
  parser.add_argument("--test_fraction", type=float, default=0.2,
                      help="sklearn_digits: the test share of the public split")
  parser.add_argument("--split_seed", type=int, default=0,
                      help="sklearn_digits: the public seed of the train/test split")
  parser.add_argument("--mechanisms", default="none,gaussian,cpsgd",
                      help=f"comma-separated subset of {', '.join(MECHANISMS)}")
  parser.add_argument("--epsilons", default=None, help="comma-separated ε targets "
                      f"(default {','.join(f'{e:g}' for e in FULL['epsilons'])})")
  parser.add_argument("--levels", default=None, help="comma-separated cpSGD quantization "
                      f"levels k (default {','.join(map(str, FULL['levels']))})")
  parser.add_argument("--num_seeds", type=int, default=None,
                      help=f"seeds 0..S-1 per setting (default {FULL['num_seeds']})")
  for flag, help_text in (
      ("clients_per_round", "n, clients (= examples) per round"),
      ("epochs", "E: each client takes part once per epoch; 1 is the paper's protocol"),
      ("learning_rate", "server SGD learning rate"),
      ("momentum", "server heavy-ball momentum (0: plain SGD)"),
      ("clip_norm", "D, the L2 clip of each client's gradient"),
      ("delta", "δ of every (ε, δ) (paper 000: 1e-9)"),
      ("binomial_p", "p of cpSGD's Bin(m, p) noise shares")):
    parser.add_argument(f"--{flag}", type=str, default=None,
                        help=f"{help_text} (default {FULL[flag]})")
  parser.add_argument("--hidden_layers", default=None,
                      help="comma-separated hidden widths (default "
                           f"{','.join(map(str, model.PAPER_HIDDEN_LAYERS))}, paper 000)")
  parser.add_argument("--replot", default=None, metavar="RESULTS_JSON",
                      help="rewrite results.md and the figure from a results.json (no "
                           "training) into --out_dir (default: beside it)")
  parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                      help="processes running the sweep's runs in parallel")
  parser.add_argument("--out_dir", default=None,
                      help=f"where results.json/.md and {FIGURE_PNG} go (default "
                           f"{DEFAULT_OUT_DIR}, relative to the repository root; none for "
                           "--quick); '' writes nothing")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  parser.add_argument("--progress", action="store_true", help="a line per finished run")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def _scalar(flag: str, text: Optional[str], default: Any, kind: type,
            check: Callable[[str, Any], Any]) -> Any:
  if text is None:
    return default
  try:
    value = kind(text)
  except ValueError:
    what = "number" if kind is float else "whole number"
    raise ValueError(f"--{flag}={text!r} is not a {what}; e.g. --{flag}={FULL[flag]}."
                     ) from None
  try:
    return check(flag, value)
  except ValueError as e:
    raise ValueError(f"--{flag}={text}: {e}") from None


def resolve(args: argparse.Namespace) -> tuple[Settings, SweepSpec]:
  """Flags → (Settings, SweepSpec); every bad value is a ValueError naming flag and fix."""
  from dp_fl import _checks  # pylint: disable=g-import-not-at-top
  preset = QUICK if args.quick else FULL
  mechanisms = tuple(m.strip() for m in args.mechanisms.split(",") if m.strip())
  unknown = [m for m in mechanisms if m not in MECHANISMS]
  if unknown or not mechanisms:
    raise ValueError(f"--mechanisms={args.mechanisms!r}: unknown {unknown or 'empty'}; use a "
                     f"comma-separated subset of {', '.join(MECHANISMS)}.")
  epsilons = (_number_list("epsilons", args.epsilons, float) if args.epsilons is not None
              else preset["epsilons"])
  for eps in epsilons:
    if not (math.isfinite(eps) and eps > 0):
      raise ValueError(f"--epsilons: {eps:g} is not a finite ε > 0; e.g. --epsilons=2,4,8.")
  levels = (_number_list("levels", args.levels, int) if args.levels is not None
            else preset["levels"])
  for k in levels:
    if k < 2:
      raise ValueError(f"--levels: k = {k} quantization levels; cpSGD needs k >= 2 "
                       "(e.g. --levels=2,4,16,64).")
  num_seeds = preset["num_seeds"] if args.num_seeds is None else args.num_seeds
  if num_seeds < 1:
    raise ValueError(f"--num_seeds={num_seeds}: give at least 1 seed.")
  probability = lambda name, v: _checks.check_open_unit(name, v)
  settings = Settings(
      clients_per_round=_scalar("clients_per_round", args.clients_per_round,
                                preset["clients_per_round"], int,
                                _checks.check_positive_int),
      epochs=_scalar("epochs", args.epochs, preset["epochs"], int, _checks.check_positive_int),
      learning_rate=_scalar("learning_rate", args.learning_rate, preset["learning_rate"],
                            float, _checks.check_positive),
      momentum=_scalar("momentum", args.momentum, preset["momentum"], float,
                       lambda name, v: _checks.check_in_range(name, v, 0.0, 0.999)),
      clip_norm=_scalar("clip_norm", args.clip_norm, preset["clip_norm"], float,
                        _checks.check_positive),
      delta=_scalar("delta", args.delta, preset["delta"], float,
                    lambda name, v: _checks.check_delta(v, name)),
      binomial_p=_scalar("binomial_p", args.binomial_p, preset["binomial_p"], float,
                         probability))
  hidden = (_number_list("hidden_layers", args.hidden_layers, int)
            if args.hidden_layers is not None else model.PAPER_HIDDEN_LAYERS)
  if any(width < 1 for width in hidden):
    raise ValueError(f"--hidden_layers={args.hidden_layers!r}: widths must be >= 1 "
                     "(e.g. --hidden_layers=60,60,60).")
  settings = dataclasses.replace(settings, hidden_layers=tuple(hidden))
  if args.workers < 1:
    raise ValueError(f"--workers={args.workers}: give at least 1 process.")
  return settings, SweepSpec(mechanisms, epsilons, levels, tuple(range(num_seeds)))


def _out_dir(args: argparse.Namespace) -> Optional[str]:
  """--out_dir, relative paths against the repository (`bazel run` starts elsewhere)."""
  out_dir = args.out_dir if args.out_dir is not None else (None if args.quick
                                                           else DEFAULT_OUT_DIR)
  if not out_dir:
    return None
  return files.workspace_path(out_dir)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def body() -> int:
    if args.replot:
      return replot(args.replot, args.out_dir or os.path.dirname(args.replot))
    settings, spec = resolve(args)
    digits = data.load(args.dataset, args.data_dir, args.test_fraction, args.split_seed)
    if settings.clients_per_round > digits.train_labels.size:
      raise ValueError(f"--clients_per_round={settings.clients_per_round} exceeds the "
                       f"{digits.train_labels.size} training clients; use at most that.")
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if args.progress \
        else None
    output = sweep(digits, settings, spec, workers=args.workers, progress=progress)
    out_dir = _out_dir(args)
    if out_dir:
      paths = write_outputs(output, out_dir)
      print(f"wrote {', '.join(paths.values())}", file=sys.stderr)
    print(json.dumps(output, indent=1) if args.format == "json" else markdown(output))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
