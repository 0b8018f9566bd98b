"""One decentralized training run: LEASGD or D-PSGD, private or not (paper 002, Sec. 2–4).

The m workers run in lock step. Iteration t (0-based):

1. every worker draws a Poisson sample of its shard (rate qᵢ = L / |Sᵢ|);
2. the iteration's mixing matrix A_t: D-PSGD — the gossip matrix of the graph, every
   iteration; LEASGD — on communication iterations ((t + 1) mod τ = 0) each follower paired
   with a random leader (fresh pairs every communication, Sec. 2.2) and the elastic matrix of
   Eq. 3, else the identity (local SGD);
3. one compiled step for all workers (`model_step`): W ← A_t W − η (G̃ + λW);
4. LEASGD, at the end of every kτ-iteration block: every worker reports its batch's clipped
   loss sum plus N(0, σ_ℓ²B²) (private runs) and the pools are re-chosen from the reports
   (`updates.leader_follower_pools`), effective from the next iteration.

All randomness of iteration t (samples, pairs, gradient and loss noise) is drawn from a
generator keyed by (run key, t): the run key comes from OS entropy unless a reproducible seed
is given, and is kept only in the run's checkpoint — so a resumed run continues bitwise as if
never stopped, and nobody who reads the settings can recompute the noise.

**Communication accounting** (Fig. 2(b)): a worker sending its model to another is one
transmitted vector of d floats; an iteration transmits one vector per off-diagonal non-zero of
A_t (D-PSGD on a ring: 2m; LEASGD: 2 per pair on communication iterations, none otherwise).
A recategorization moves 2(m − 1) scalars (the losses to the elected worker, the new roles
back). Bytes count float32 payloads.

Run directory: `checkpoint.npz` (state, key, history), `metrics/eval.csv` and TensorBoard
events (dp_fl.writers), `result.json` when finished (read back instead of rerun).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import secrets
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from dp_fl import _checks
from dp_fl import files
from dp_fl import writers
from dp_fl.decentralized import accounting
from dp_fl.decentralized import graphs
from dp_fl.decentralized import model_step
from dp_fl.decentralized import updates

LEASGD = "leasgd"
D_PSGD = "d_psgd"
ALGORITHMS = (LEASGD, D_PSGD)
MODELS = ("mlp", "cnn")
BYTES_PER_FLOAT = 4
CHECKPOINT = "checkpoint.npz"
RESULT = "result.json"


@dataclasses.dataclass(frozen=True)
class Settings:
  """One run's hyper-parameters (all public).

  Attributes:
    algorithm: "leasgd" or "d_psgd".
    num_workers: m.
    iterations: T.
    batch_size: L, each worker's expected Poisson batch.
    learning_rate: η.
    private: DP-SGD per worker (clip + noise); False: plain SGD (no clipping, no noise).
    clip_norm: C.
    noise_multiplier: σ (gradient noise std σC).
    loss_noise_multiplier: σ_ℓ (LEASGD's reported losses: noise std σ_ℓ B on the clipped sum).
    loss_clip: B, per-example losses clipped to [0, B] before they are reported.
    delta: δ of the reported (ε, δ).
    l2: λ, L2 regularization (weight decay on kernels).
    graph: D-PSGD's communication graph (`graphs.GRAPHS`).
    communication_interval: τ (LEASGD).
    recategorization_interval: k; pools re-chosen every kτ iterations (LEASGD).
    elastic: ρ; LEASGD's elastic step is ηρ (must be <= 1).
    num_leaders: leader pool size (default ⌈m/2⌉).
    model: "mlp" or "cnn".
    eval_every: iterations between evaluations (and points of the figures).
    eval_train_examples: each worker's training loss is measured on the first this many
      examples of its shard (a diagnostic, un-noised: not covered by ε,
      `accounting.NOT_COVERED`; 0: the whole shard).
    checkpoint_every: iterations between checkpoints.
  """
  algorithm: str
  num_workers: int
  iterations: int = 600
  batch_size: int = 16
  learning_rate: float = 0.1
  private: bool = True
  clip_norm: float = 1.0
  noise_multiplier: float = 1.0
  loss_noise_multiplier: float = 2.0
  loss_clip: float = 4.0
  delta: float = 1e-5
  l2: float = 1e-4
  graph: str = "ring"
  communication_interval: int = 1
  recategorization_interval: int = 10
  elastic: float = 2.0
  num_leaders: Optional[int] = None
  model: str = "mlp"
  eval_every: int = 20
  eval_train_examples: int = 0
  checkpoint_every: int = 100

  def validated(self) -> "Settings":
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"--algorithm={self.algorithm!r} is not known; use one of "
                       f"{', '.join(ALGORITHMS)}.")
    if self.model not in MODELS:
      raise ValueError(f"--model={self.model!r} is not known; use one of {', '.join(MODELS)}.")
    if self.graph not in graphs.GRAPHS:
      raise ValueError(f"--graph={self.graph!r} is not known; use one of "
                       f"{', '.join(graphs.GRAPHS)}.")
    for name in ("num_workers", "iterations", "batch_size", "communication_interval",
                 "recategorization_interval", "eval_every", "checkpoint_every"):
      _checks.check_positive_int(f"--{name}", getattr(self, name))
    _checks.check_nonnegative_int("--eval_train_examples", self.eval_train_examples)
    if self.num_workers < 2:
      raise ValueError(f"--num_workers={self.num_workers}: decentralized training needs at "
                       "least 2 workers.")
    for name in ("learning_rate", "clip_norm", "loss_clip"):
      _checks.check_positive(f"--{name}", getattr(self, name))
    for name in ("l2", "elastic"):
      _checks.check_nonnegative(f"--{name}", getattr(self, name))
    if self.private:
      _checks.check_positive("--noise_multiplier", self.noise_multiplier)
      _checks.check_positive("--loss_noise_multiplier", self.loss_noise_multiplier)
      _checks.check_delta(self.delta, "--delta")
    if self.algorithm == LEASGD:
      if self.learning_rate * self.elastic > 1:
        raise ValueError(f"LEASGD's elastic step ηρ = --learning_rate × --elastic = "
                         f"{self.learning_rate * self.elastic:g} must be <= 1 (a convex pull "
                         "between partners); lower --elastic.")
      if self.num_leaders is not None:
        updates.leader_follower_pools(np.zeros(self.num_workers), self.num_leaders)
    return self

  @property
  def recategorization_period(self) -> int:
    """kτ."""
    return self.communication_interval * self.recategorization_interval

  def loss_releases(self, steps: int) -> int:
    """Recategorizations in the first `steps` iterations (private LEASGD's loss releases)."""
    if self.algorithm != LEASGD:
      return 0
    return steps // self.recategorization_period

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def label(self) -> str:
    name = {LEASGD: "LEASGD", D_PSGD: "D-PSGD"}[self.algorithm]
    return f"{name} m={self.num_workers} {'private' if self.private else 'non-private'}"


@dataclasses.dataclass(frozen=True)
class Shards:
  """The workers' training shards and the common test set (flat features).

  Attributes:
    train: per worker (x (nᵢ, input) float32, y (nᵢ,) int32).
    test_x, test_y: the held-out set (not protected; used for accuracy only).
    image_shape: (H, W, C) of one flattened example.
    num_classes: labels are 0 … num_classes − 1.
    source: where the data came from.
  """
  train: tuple[tuple[np.ndarray, np.ndarray], ...]
  test_x: np.ndarray
  test_y: np.ndarray
  image_shape: tuple[int, int, int]
  num_classes: int
  source: str

  @property
  def shard_sizes(self) -> list[int]:
    return [int(y.size) for _, y in self.train]


def make_shards(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                test_y: np.ndarray, image_shape: Sequence[int], num_classes: int,
                num_workers: int, source: str, split_seed: int = 0) -> Shards:
  """Splits the training set into m near-equal IID shards by a public permutation."""
  m = _checks.check_positive_int("num_workers", num_workers)
  n = int(train_y.size)
  if n < 2 * m:
    raise ValueError(f"{source}: {n} training examples cannot give {m} workers 2 or more "
                     "each; use fewer --num_workers.")
  order = np.random.default_rng(split_seed).permutation(n)
  train = tuple((np.asarray(train_x[part], np.float32), np.asarray(train_y[part], np.int32))
                for part in np.array_split(order, m))
  return Shards(train, np.asarray(test_x, np.float32), np.asarray(test_y, np.int32),
                tuple(int(v) for v in image_shape), int(num_classes), source)


def architecture_for(settings: Settings, shards: Shards) -> model_step.Architecture:
  if settings.model == "cnn":
    return model_step.cnn(shards.image_shape, shards.num_classes)
  return model_step.mlp(int(np.prod(shards.image_shape)), shards.num_classes)


def run_key(reproducible_seed: Optional[int]) -> np.ndarray:
  """The run's secret key: 128 bits of OS entropy, or derived from a public seed (research
  runs that must be repeatable; not private against whoever knows the seed)."""
  if reproducible_seed is None:
    return np.array([secrets.randbits(32) for _ in range(4)], dtype=np.uint32)
  seed = _checks.check_nonnegative_int("--reproducible_noise_seed", reproducible_seed)
  return np.random.SeedSequence(seed).generate_state(4).astype(np.uint32)


def iteration_rng(key: np.ndarray, iteration: int) -> np.random.Generator:
  return np.random.Generator(np.random.Philox(np.random.SeedSequence([*key.tolist(),
                                                                      iteration])))


def batch_capacity(expected: int, largest: int) -> int:
  """Padded batch size: L + 4√L + 4 rounded up to a multiple of 8 (a Poisson batch exceeds it
  with probability < 1e-4 per worker), larger only for an iteration that needs it."""
  base = expected + 4 * math.sqrt(expected) + 4
  return 8 * math.ceil(max(base, largest) / 8)


@dataclasses.dataclass
class State:
  """What a checkpoint holds (with the key and the evaluation history)."""
  weights: np.ndarray
  iteration: int
  leaders: np.ndarray
  followers: np.ndarray
  vectors: int = 0
  scalars: int = 0
  loss_releases: int = 0


class Run:
  """The compiled pieces of one run and its iteration, checkpoint and evaluation logic."""

  def __init__(self, settings: Settings, shards: Shards, jit_compile: bool = True):
    self.settings = settings.validated()
    if len(shards.train) != settings.num_workers:
      raise ValueError(f"{len(shards.train)} shards for --num_workers={settings.num_workers}.")
    for index, size in enumerate(shards.shard_sizes):
      if settings.batch_size >= size:
        raise ValueError(f"--batch_size={settings.batch_size} is not below worker {index}'s "
                         f"shard of {size} examples (the Poisson rate L/|S| must be < 1); "
                         "lower --batch_size or --num_workers.")
    self.shards = shards
    self.architecture = architecture_for(settings, shards)
    self.step = model_step.make_train_step(
        self.architecture, clip_norm=settings.clip_norm if settings.private else None,
        noise_multiplier=settings.noise_multiplier if settings.private else 0.0,
        expected_batch_size=settings.batch_size, loss_clip=settings.loss_clip,
        l2=settings.l2, jit_compile=jit_compile)
    self.evaluate = model_step.make_evaluate(self.architecture, jit_compile=jit_compile)
    self.gossip = (graphs.mixing_matrix(settings.graph, settings.num_workers)
                   if settings.algorithm == D_PSGD else None)
    self.rates = [settings.batch_size / n for n in shards.shard_sizes]

  def initial_state(self, init_seed: int) -> State:
    m = self.settings.num_workers
    leaders, followers = updates.leader_follower_pools(np.zeros(m), self.settings.num_leaders)
    return State(model_step.init_params(self.architecture, m, init_seed), 0, leaders,
                 followers)

  def mixing(self, state: State, rng: np.random.Generator) -> np.ndarray:
    s = self.settings
    if s.algorithm == D_PSGD:
      return self.gossip
    if (state.iteration + 1) % s.communication_interval:
      return np.eye(s.num_workers)
    pairs = updates.random_pairing(state.leaders, state.followers, rng)
    return updates.elastic_mixing(pairs, s.num_workers, s.learning_rate * s.elastic)

  def batches(self, rng: np.random.Generator):
    """Every worker's Poisson sample, padded: x (m, K, input), y (m, K), mask (m, K)."""
    drawn = [np.flatnonzero(rng.random(y.size) < q)
             for (_, y), q in zip(self.shards.train, self.rates)]
    capacity = batch_capacity(self.settings.batch_size, max(len(d) for d in drawn))
    m, width = self.settings.num_workers, self.architecture.input_size
    x = np.zeros((m, capacity, width), np.float32)
    y = np.zeros((m, capacity), np.int32)
    mask = np.zeros((m, capacity), np.float32)
    for i, (index, (shard_x, shard_y)) in enumerate(zip(drawn, self.shards.train)):
      x[i, :len(index)], y[i, :len(index)], mask[i, :len(index)] = (shard_x[index],
                                                                    shard_y[index], 1.0)
    return x, y, mask

  def advance(self, state: State, key: np.ndarray) -> float:
    """One iteration in place; returns the workers' mean (exact, diagnostic) batch loss."""
    s = self.settings
    rng = iteration_rng(key, state.iteration)
    x, y, mask = self.batches(rng)
    mixing = self.mixing(state, rng)
    seed = rng.integers(0, 2 ** 31 - 1, size=2)
    weights, clipped, mean_losses = self.step(
        tf.constant(state.weights), tf.constant(x), tf.constant(y), tf.constant(mask),
        tf.constant(mixing, tf.float32), tf.constant(s.learning_rate, tf.float32),
        tf.constant(seed, tf.int32))
    state.weights = weights.numpy()
    state.vectors += int(np.count_nonzero(mixing - np.diag(np.diag(mixing))))
    state.iteration += 1
    if s.algorithm == LEASGD and state.iteration % s.recategorization_period == 0:
      reported = clipped.numpy().astype(np.float64)
      if s.private:
        reported += s.loss_noise_multiplier * s.loss_clip * rng.normal(size=reported.shape)
        state.loss_releases += 1
      state.leaders, state.followers = updates.leader_follower_pools(
          reported / s.batch_size, s.num_leaders)
      state.scalars += 2 * (s.num_workers - 1)
    return float(np.mean(mean_losses.numpy()))

  def privacy(self, steps: int) -> Optional[accounting.RunPrivacy]:
    s = self.settings
    if not s.private:
      return None
    releases = s.loss_releases(steps)
    return accounting.run_privacy(self.shards.shard_sizes, s.batch_size, s.noise_multiplier,
                                  steps, s.delta, releases,
                                  s.loss_noise_multiplier if releases else None)

  def measure(self, state: State, chunk: int = 2048) -> dict[str, Any]:
    """Mean training loss of the workers on their own shards (un-noised: not covered by ε,
    `accounting.NOT_COVERED`), test accuracy of every worker's model (mean, min, max),
    communication so far and ε so far."""
    s = self.settings
    weights = tf.constant(state.weights)
    limit = s.eval_train_examples or max(self.shards.shard_sizes)
    train = [(x[:limit], y[:limit]) for x, y in self.shards.train]
    rows = min(len(y) for _, y in train)  # equal-length chunks for the paired evaluation
    loss_sum = np.zeros(s.num_workers)
    for start in range(0, rows, chunk):
      stop = min(rows, start + chunk)
      loss, _ = self.evaluate(weights, tf.constant(np.stack([x[start:stop] for x, _ in train])),
                              tf.constant(np.stack([y[start:stop] for _, y in train])))
      loss_sum += loss.numpy()
    correct = np.zeros(s.num_workers)
    for start in range(0, self.shards.test_y.size, chunk):
      _, hits = self.evaluate(weights, tf.constant(self.shards.test_x[start:start + chunk]),
                              tf.constant(self.shards.test_y[start:start + chunk]))
      correct += hits.numpy()
    accuracy = correct / self.shards.test_y.size
    d = self.architecture.dimension
    row = {"iteration": state.iteration, "train_loss": float(np.mean(loss_sum / rows)),
           "test_accuracy": float(np.mean(accuracy)),
           "test_accuracy_min": float(np.min(accuracy)),
           "test_accuracy_max": float(np.max(accuracy)),
           "vectors_per_worker": state.vectors / s.num_workers,
           "bytes_per_worker": (state.vectors * d + state.scalars) * BYTES_PER_FLOAT
                               / s.num_workers}
    privacy = self.privacy(state.iteration) if state.iteration else None
    row["epsilon"] = privacy.max_epsilon if privacy else (0.0 if s.private else math.inf)
    return row


def _save_checkpoint(path: str, state: State, key: np.ndarray, settings: Settings,
                     history: list[dict[str, Any]]) -> None:
  buffer = io.BytesIO()
  np.savez(buffer, weights=state.weights, iteration=state.iteration, leaders=state.leaders,
           followers=state.followers,
           counters=np.array([state.vectors, state.scalars, state.loss_releases], np.int64),
           key=key, settings=json.dumps(settings.to_json(), sort_keys=True),
           history=json.dumps(history))
  with files.atomic_output(path) as f:
    f.write(buffer.getvalue())


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
  """What must match to resume: everything but the length and the cadences."""
  return {k: v for k, v in settings.items()
          if k not in ("iterations", "eval_every", "checkpoint_every")}


def _load_checkpoint(path: str, settings: Settings
                     ) -> tuple[State, np.ndarray, list[dict[str, Any]]]:
  try:
    with np.load(path, allow_pickle=False) as saved:
      stored = json.loads(str(saved["settings"]))
      counters = saved["counters"]
      state = State(saved["weights"], int(saved["iteration"]), saved["leaders"],
                    saved["followers"], int(counters[0]), int(counters[1]), int(counters[2]))
      key, history = saved["key"], json.loads(str(saved["history"]))
  except (OSError, KeyError, ValueError) as e:  # json.JSONDecodeError is a ValueError
    raise ValueError(f"{path} is not a readable decentralized checkpoint ({e}); delete it to "
                     "start the run again.") from e
  current = settings.to_json()
  if _comparable(stored) != _comparable(current):
    changed = sorted(k for k in _comparable(stored) if stored.get(k) != current.get(k))
    raise ValueError(f"{path} was written with other settings ({', '.join(changed)} differ); "
                     "resume with the same flags or use another --out_dir.")
  return state, key, history


def train(settings: Settings, shards: Shards, run_dir: Optional[str] = None, *,
          reproducible_seed: Optional[int] = None, init_seed: int = 0,
          progress: Optional[Callable[[str], None]] = None,
          stop_after: Optional[int] = None, jit_compile: bool = True) -> dict[str, Any]:
  """Trains (or resumes, or reads back) one run; returns its result.

  Args:
    settings: the run's hyper-parameters.
    shards: the workers' data.
    run_dir: where the checkpoint, metrics and result live (None: nothing written).
    reproducible_seed: derive the run key from this public seed (default: OS entropy).
    init_seed: the initial model's seed (public; the same for the algorithms compared).
    progress: receives a line per evaluation.
    stop_after: stop (after checkpointing) at this iteration, as if interrupted (tests).
    jit_compile: XLA-compile the step and the evaluation.
  """
  run = Run(settings, shards, jit_compile=jit_compile)
  checkpoint = os.path.join(run_dir, CHECKPOINT) if run_dir else None
  result_path = os.path.join(run_dir, RESULT) if run_dir else None
  if result_path and os.path.exists(result_path):
    with open(result_path, encoding="utf-8") as f:
      finished = json.load(f)
    if finished.get("settings") == settings.to_json():
      return finished
  if checkpoint and os.path.exists(checkpoint):
    state, key, history = _load_checkpoint(checkpoint, settings)
    resumed_from: Optional[int] = state.iteration
  else:
    state, key, history = run.initial_state(init_seed), run_key(reproducible_seed), []
    resumed_from = None
  metrics = tensorboard = None
  if run_dir:
    os.makedirs(os.path.join(run_dir, "metrics"), exist_ok=True)
    metrics = writers.MetricsCsv(os.path.join(run_dir, "metrics", "eval.csv"),
                                 state.iteration)
    tensorboard = writers.TensorBoardWriter(os.path.join(run_dir, "tensorboard"))
  history = [row for row in history if row["iteration"] <= state.iteration]

  def record() -> None:
    row = run.measure(state)
    history[:] = [r for r in history if r["iteration"] != row["iteration"]] + [row]
    if metrics:
      metrics.append(row["iteration"], {k: v for k, v in row.items() if k != "iteration"})
      tensorboard.scalars("decentralized", row["iteration"],
                          {k: v for k, v in row.items() if math.isfinite(v)})
    if progress:
      progress(f"{settings.label()}: iteration {row['iteration']}/{settings.iterations} "
               f"train loss {row['train_loss']:.4f} test accuracy {row['test_accuracy']:.4f}"
               + (f" ε {row['epsilon']:.3f}" if settings.private else ""))

  started = time.perf_counter()
  if not history:
    record()
  while state.iteration < settings.iterations:
    run.advance(state, key)
    if state.iteration % settings.eval_every == 0 or state.iteration == settings.iterations:
      record()
    if checkpoint and (state.iteration % settings.checkpoint_every == 0
                       or state.iteration == settings.iterations):
      _save_checkpoint(checkpoint, state, key, settings, history)
    if stop_after is not None and state.iteration >= stop_after:
      if checkpoint:
        _save_checkpoint(checkpoint, state, key, settings, history)
      break
  if tensorboard:
    tensorboard.close()
  privacy = run.privacy(state.iteration)
  final = history[-1]
  result = {
      "settings": settings.to_json(),
      "label": settings.label(),
      "iterations_done": state.iteration,
      "resumed_from": resumed_from,
      "model": {"architecture": run.architecture.name,
                "parameters": run.architecture.dimension},
      "data": {"source": shards.source, "shard_sizes": shards.shard_sizes,
               "test_examples": int(shards.test_y.size)},
      "final": final,
      "history": history,
      "communication": {"vectors": state.vectors, "scalars": state.scalars,
                        "vectors_per_worker_per_iteration":
                            state.vectors / settings.num_workers / max(state.iteration, 1),
                        "bytes_per_worker": final["bytes_per_worker"]},
      "privacy": privacy.to_json() if privacy else None,
      "noise_key": "reproducible (public seed)" if reproducible_seed is not None
                   else "OS entropy (kept in the checkpoint only)",
      "seconds_this_process": time.perf_counter() - started,
  }
  if result_path and state.iteration >= settings.iterations:
    files.atomic_write_json(result_path, result, indent=1, sort_keys=True)
  return result
