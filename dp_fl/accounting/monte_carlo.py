"""The Monte Carlo engine of amplified accounting: one fixed sample, δ̂(σ), σ by root finding.

Paper 003 (Sec. 2, Alg. 2) estimates the hockey-stick divergence H_{e^ε}(P, Q) of a dominating
pair by the mean of f(Y) = (1 - e^{ε - Y})_+ over privacy losses Y = log(P/Q)(X), X ~ P, and
calibrates σ as the root of δ̂(σ) = δ on ONE fixed sample. This module is that procedure,
whatever the sampling scheme; a scheme supplies a `LossModel`:

* `draw(generator, count)`: `count` raw samples (a tuple of arrays, samples along axis 0) from
  one independent RNG block, and `prepare(rows)`, the per-chunk transform to what `stats`
  reads;
* `stats(rows, u, ε, derivative)`: the sums of f, f² (and df/dσ) at σ = 1/u;
* `screen(rows, u_lo, u_hi, ε)`: a mask of the rows whose f can be non-zero for some σ in
  [1/u_hi, 1/u_lo] (the others contribute exactly 0 there);
* `num_columns`: the width of a row (memory sizing).

Balls-in-bins (`balls_in_bins`, paper 003 Lemma 3.2) and b-min-sep (`b_min_sep`, Dong &
Ganesh 2026) are the two models.

Samples are produced in blocks of `RNG_BLOCK` from independent streams
`SeedSequence(entropy, spawn_key=key + (block,))`, so the sample depends only on the seed (not
on `chunk_size`), any prefix of a sample is itself a sample, and any chunk can be regenerated:
memory stays O(chunk_size × row width) however large m is.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, Optional

import numpy as np

from dp_fl import _checks
from dp_fl import resources
from dp_fl import root_finding

# Rows per independent RNG stream; `chunk_size` must be a multiple of it.
RNG_BLOCK = 1024
# Calibration keeps at most this many chunks' worth of screened samples in memory; beyond
# that it narrows its bracket or streams (bounded memory).
MAX_STORED_CHUNKS = 4
# Screening passes per level before falling back to streaming δ̂.
_MAX_SCREENS = 12
# Pilot sample sizes shrink by this factor per level (Alg. 2 warm start).
_PILOT_FACTOR = 8
# Initial half-width (ratio) of the bracket around a pilot's σ.
_BRACKET_RATIO = 1.25

SeedLike = int | np.random.SeedSequence | np.random.Generator
Rows = tuple[np.ndarray, ...]


@dataclasses.dataclass
class Stats:
  """Sums over samples of f = (1 - e^{ε - Y})_+, f² and df/dσ; the samples with f > 0."""
  sum_f: float = 0.0
  sum_f2: float = 0.0
  sum_df: float = 0.0
  num_tail: int = 0

  def add(self, other: "Stats") -> None:
    self.sum_f += other.sum_f
    self.sum_f2 += other.sum_f2
    self.sum_df += other.sum_df
    self.num_tail += other.num_tail

  def mean_and_se(self, m: int) -> tuple[float, float]:
    """δ̂ = (1/m) Σ f and its standard error (sample sd / √m)."""
    mean = self.sum_f / m
    if m < 2:
      return mean, math.inf
    var = max(self.sum_f2 - m * mean * mean, 0.0) / (m - 1)
    return mean, math.sqrt(var / m)


@dataclasses.dataclass(frozen=True)
class Calibration:
  """Result of Alg. 2 (paper 003): sigma with delta_hat(sigma) = delta.

  Attributes:
    noise_multiplier: sigma*, the root of delta_hat(sigma) = delta on the
      fixed sample.
    epsilon, delta: the target.
    delta_hat: delta_hat(sigma*) on the sample (= delta up to root tolerance).
    delta_standard_error: Monte Carlo standard error of delta_hat(sigma*).
    noise_multiplier_standard_error: delta-method standard error of sigma*,
      delta_standard_error / |d delta_hat / d sigma|.
    num_samples: m.
    num_tail_samples: samples with Y > eps at sigma*.
    unamplified_noise_multiplier: sigma without amplification (fixed bins / min-sep).
    num_passes: full passes over the sample (pilots counted pro rata).
    direction, by_direction: for a pair accounted in both directions of adjacency
      (b-min-sep), the one whose sigma is reported (the larger) and each one's result.
  """

  noise_multiplier: float
  epsilon: float
  delta: float
  delta_hat: float
  delta_standard_error: float
  noise_multiplier_standard_error: float
  num_samples: int
  num_tail_samples: int
  unamplified_noise_multiplier: float
  num_passes: float
  direction: str = ""  # b-min-sep: the direction of adjacency that set sigma.
  by_direction: Optional[dict] = None  # b-min-sep: each direction's own root.


class LossModel(abc.ABC):
  """The privacy-loss samples of one dominating pair (see the module doc)."""

  num_columns: int = 1

  @abc.abstractmethod
  def draw(self, generator: np.random.Generator, count: int) -> Rows:
    """`count` raw samples from `generator` (one RNG block)."""

  def prepare(self, rows: Rows) -> Rows:
    """The per-chunk transform of raw samples into what `stats` and `screen` read."""
    return rows

  @abc.abstractmethod
  def stats(self, rows: Rows, u: float, eps: float, derivative: bool = False) -> Stats:
    """The sums of f over `rows` at σ = 1/u."""

  @abc.abstractmethod
  def screen(self, rows: Rows, u_lo: float, u_hi: float, eps: float) -> np.ndarray:
    """Boolean mask: rows whose f can be positive for u in [u_lo, u_hi]."""


def take(rows: Rows, index: Any) -> Rows:
  return tuple(a[index] for a in rows)


def concatenate(parts: list[Rows]) -> Rows:
  return tuple(np.concatenate(arrays) for arrays in zip(*parts))


def root_seed(seed: SeedLike) -> np.random.SeedSequence:
  if isinstance(seed, np.random.Generator):
    return np.random.SeedSequence(seed.integers(0, 2**63, size=4).tolist())
  if isinstance(seed, np.random.SeedSequence):
    return seed
  _checks.check_nonnegative_int("seed", seed)
  return np.random.SeedSequence(int(seed))


def check_chunk_size(chunk_size: Any) -> int:
  c = _checks.check_positive_int("chunk_size", chunk_size)
  if c % RNG_BLOCK:
    raise ValueError(
        f"`chunk_size` must be a multiple of {RNG_BLOCK} (the RNG block, which "
        f"keeps samples independent of the chunking); got {c}. Use "
        f"{max(RNG_BLOCK, c // RNG_BLOCK * RNG_BLOCK)}.")
  return c


class SampleStream:
  """The fixed Monte Carlo sample of Alg. 2 lines 1-2, regenerated by chunks."""

  def __init__(self, model: LossModel, seed: SeedLike, chunk_size: int,
               progress: resources.Progress | None = None):
    self.model = model
    self.progress = progress  # Advanced by the samples of every chunk drawn.
    root = root_seed(seed)
    self._entropy = root.entropy
    self._key = tuple(root.spawn_key)
    self.chunk_size = chunk_size

  def chunks(self, num_samples: int, first_sample: int = 0) -> Iterator[Rows]:
    """Yields the prepared rows of samples [first_sample, num_samples), chunk by chunk, in
    order (`first_sample` a multiple of the chunk size)."""
    if first_sample % self.chunk_size:
      raise ValueError(f"`first_sample` must be a multiple of the chunk size "
                       f"{self.chunk_size}; got {first_sample}.")
    for start in range(first_sample, num_samples, self.chunk_size):
      rows = min(self.chunk_size, num_samples - start)
      blocks = -(-rows // RNG_BLOCK)
      first = start // RNG_BLOCK
      parts = []
      for j in range(blocks):
        seq = np.random.SeedSequence(self._entropy, spawn_key=self._key + (first + j,))
        parts.append(self.model.draw(np.random.Generator(np.random.SFC64(seq)), RNG_BLOCK))
      raw = parts[0] if len(parts) == 1 else concatenate(parts)
      yield self.model.prepare(take(raw, slice(0, rows)))
      if self.progress is not None:
        self.progress.advance(rows)


def streaming_stats(stream: SampleStream, m: int, sigma: float, eps: float,
                    derivative: bool = False, workers: int = 1) -> Stats:
  """The sums of f over samples [0, m) at (σ, ε). With `workers` > 1 and at least
  `_PARALLEL_MIN_CHUNKS` chunks, ranges of chunks are summed by that many processes (each
  chunk is regenerated from its own seed, so the sample is the same; only the order of the
  floating-point sums differs)."""
  total = Stats()
  num_chunks = -(-m // stream.chunk_size)
  if workers > 1 and num_chunks >= _PARALLEL_MIN_CHUNKS:
    return _parallel_stats(stream, m, sigma, eps, derivative, workers)
  for rows in stream.chunks(m):
    total.add(stream.model.stats(rows, 1.0 / sigma, eps, derivative))
  return total


# Fewest chunks worth worker processes (each start costs about a second).
_PARALLEL_MIN_CHUNKS = 32
# Chunks a task sums (the progress advances per task).
_CHUNKS_PER_TASK = 4


def default_workers() -> int:
  """Processes for long Monte Carlo sums: the CPUs this process may use (at most 8)."""
  try:
    cpus = len(os.sched_getaffinity(0))
  except AttributeError:  # Not Linux.
    cpus = os.cpu_count() or 1
  return max(1, min(8, cpus))


def _parallel_stats(stream, m, sigma, eps, derivative, workers) -> Stats:
  """`streaming_stats` by `workers` fresh interpreters (`python -m` this module): none
  inherits the caller's threads (TensorFlow's, in a training job) or re-runs its main
  module; each receives the model once on its stdin and writes each task's sums to its
  stdout. Any worker failing fails the call (its traceback is on stderr)."""
  quiet = SampleStream.__new__(SampleStream)
  quiet.__dict__.update(stream.__dict__, progress=None)
  step = _CHUNKS_PER_TASK * stream.chunk_size
  jobs = [(a, min(m, a + step), sigma, eps, derivative) for a in range(0, m, step)]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
  procs = [subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env) for _ in range(workers)]
  results: queue.Queue = queue.Queue()

  def read(proc):
    try:
      while True:
        results.put(pickle.load(proc.stdout))
    except EOFError:
      results.put(None)
    except Exception as e:  # pylint: disable=broad-except
      results.put(e)
      results.put(None)

  readers = [threading.Thread(target=read, args=(p,), daemon=True) for p in procs]
  total, done, finished = Stats(), 0, 0
  try:
    for r in readers:
      r.start()
    for i, proc in enumerate(procs):
      with proc.stdin:
        pickle.dump((quiet, jobs[i::workers]), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
    while finished < workers:
      item = results.get()
      if item is None:
        finished += 1
        continue
      if isinstance(item, Exception):
        raise RuntimeError(f"A Monte Carlo worker's output could not be read: {item}")
      part, count = item
      total.add(part)
      done += count
      if stream.progress is not None:
        stream.progress.advance(count)
    codes = [p.wait() for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  if any(codes) or done != m:
    raise RuntimeError(
        f"Monte Carlo worker processes failed (exit codes {codes}; {done} of {m} samples "
        "summed); see their errors above. Pass workers=1 to sum in this process.")
  return total


def _worker_main() -> None:
  """A worker of `_parallel_stats`: (stream, tasks) on stdin, one (Stats, samples) per task
  on stdout (the real stdout kept for that; anything printed goes to stderr)."""
  out = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  stream, jobs = pickle.load(sys.stdin.buffer)
  for first, stop, sigma, eps, derivative in jobs:
    part = Stats()
    for rows in stream.chunks(stop, first):
      part.add(stream.model.stats(rows, 1.0 / sigma, eps, derivative))
    pickle.dump((part, stop - first), out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()
  out.close()


class Evaluator:
  """δ̂ sums on a prefix of the sample, for σ in a bracket: on the screened rows kept in
  memory, or streamed (`rows` None)."""

  def __init__(self, stream: SampleStream, m: int, eps: float, rows: Rows | None):
    self.stream, self.m, self.eps, self.rows = stream, m, eps, rows
    self.passes = 0.0

  def stats(self, sigma: float, derivative: bool = False) -> Stats:
    if self.rows is None:
      self.passes += 1.0
      return streaming_stats(self.stream, self.m, sigma, self.eps, derivative)
    if self.rows[0].shape[0] == 0:
      return Stats()
    return self.stream.model.stats(self.rows, 1.0 / sigma, self.eps, derivative)

  def delta(self, sigma: float) -> float:
    return self.stats(sigma).sum_f / self.m


def _screen(stream: SampleStream, m: int, eps: float, lo: float, hi: float,
            max_rows: int) -> Rows | None:
  """The samples whose f can be positive for some σ in [lo, hi]; None when more than
  `max_rows` survive."""
  kept, count = [], 0
  for rows in stream.chunks(m):
    keep = np.nonzero(stream.model.screen(rows, 1.0 / hi, 1.0 / lo, eps))[0]
    count += keep.size
    if count > max_rows:
      return None
    kept.append(take(rows, keep))
  return concatenate(kept)


def _brent(ev: Evaluator, delta: float, lo: float, hi: float, rtol: float) -> float:
  return root_finding.brent(lambda s: ev.delta(s) - delta, lo, hi,
                            xtol=rtol * lo, rtol=max(rtol, 1e-15), maxiter=200)


def _find_bracket(ev: Evaluator, delta: float, lo: float, hi: float) -> tuple[float, float]:
  """Moves [lo, hi] until δ̂(lo) > δ >= δ̂(hi)."""
  return root_finding.expand_both(
      lambda s: ev.delta(s) > delta, lambda s: ev.delta(s) <= delta, lo, hi, max_steps=200,
      unreachable=lambda lo, hi: (f"could not bracket delta_hat(sigma) = delta = {delta!r} "
                                  f"within [{lo!r}, {hi!r}]; check that C is non-degenerate."))


def solve(stream: SampleStream, m: int, eps: float, delta: float, guess: float,
          rtol: float) -> tuple[float, Evaluator]:
  """σ with δ̂(σ) = δ on the first m samples, starting near `guess` (Alg. 2 line 5).

  Speed-ups that leave the root unchanged: a warm start from the same procedure on the first
  m/8 samples (recursively), and screening: for σ in a bracket only the samples whose f can
  be positive are kept, so each root-finder step touches only those. Memory is O(chunk_size ×
  row width); if more than `MAX_STORED_CHUNKS` chunks survive the screen the bracket is
  narrowed, and finally δ̂ is streamed.
  """
  c = stream.chunk_size
  if m <= c:
    rows = next(stream.chunks(m))
    ev = Evaluator(stream, m, eps, rows)
    lo, hi = _find_bracket(ev, delta, guess / 2.0, guess)
    ev.passes = 1.0
    return _brent(ev, delta, lo, hi, rtol), ev
  pilot, pilot_ev = solve(stream, max(c, m // _PILOT_FACTOR), eps, delta, guess, rtol)
  passes = pilot_ev.passes * pilot_ev.m / m
  ratio = _BRACKET_RATIO
  lo, hi = pilot / ratio, pilot * ratio
  max_rows = MAX_STORED_CHUNKS * c
  for attempt in range(_MAX_SCREENS + 1):
    rows = None
    if attempt < _MAX_SCREENS:
      rows = _screen(stream, m, eps, lo, hi, max_rows)
      passes += 1.0
    if rows is None:
      # Too many near-tail samples to keep (or no progress): stream instead.
      if ratio < 1.0 + 1e-3 or attempt >= _MAX_SCREENS - 1:
        ev = Evaluator(stream, m, eps, None)
        lo, hi = _find_bracket(ev, delta, lo, hi)
        sigma = _brent(ev, delta, lo, hi, rtol)
        ev.passes += passes
        return sigma, ev
      ratio = math.sqrt(ratio)
      mid = math.sqrt(lo * hi)
      lo, hi = mid / ratio, mid * ratio
      continue
    ev = Evaluator(stream, m, eps, rows)
    d_lo, d_hi = ev.delta(lo), ev.delta(hi)
    if d_lo > delta >= d_hi:
      sigma = _brent(ev, delta, lo, hi, rtol)
      ev.passes = passes
      return sigma, ev
    ratio = ratio * ratio
    lo, hi = (hi, hi * ratio) if d_hi > delta else (lo / ratio, lo)
  raise AssertionError("unreachable: the last attempt always streams")


def epsilon_on_tails(tails: list[np.ndarray], m: int, delta: float,
                     upper: float) -> tuple[float, float, float]:
  """(ε*, δ̂(ε*), its standard error): the smallest ε with δ̂(ε) <= δ in every one of
  `tails`, each the privacy losses V > 0 of one sample of m (the others give f = 0 at every
  ε >= 0; δ̂(ε) = (1/m) Σ (1 − e^{ε − V})_+ is non-increasing in ε). `upper`: where to start
  looking (e.g. the unamplified ε, which any sample meets)."""
  best = (0.0, 0.0, 0.0)
  for tail in tails:
    top = np.sort(np.asarray(tail, dtype=np.float64))[::-1]

    def excess(eps, top=top):
      return float(np.sum(-np.expm1(eps - top[top > eps]))) / m - delta

    eps = 0.0
    if excess(0.0) > 0.0:
      _, hi = root_finding.expand_up(lambda e: excess(e) > 0.0, 0.0, max(upper, 1e-6))
      eps = root_finding.brent(excess, 0.0, hi, xtol=1e-10, rtol=1e-10)
    values = -np.expm1(eps - top[top > eps])
    hat = float(values.sum()) / m
    se = float(math.sqrt(max(0.0, float(np.dot(values, values)) / m - hat * hat) / m))
    if eps >= best[0]:
      best = (eps, hat, se)
  return best


if __name__ == "__main__":  # A `_parallel_stats` worker: its results are of the imported module.
  from dp_fl.accounting import monte_carlo  # pylint: disable=import-self
  monte_carlo._worker_main()  # pylint: disable=protected-access
