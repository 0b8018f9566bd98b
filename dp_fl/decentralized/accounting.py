"""Each worker's ε in decentralized DP-SGD (paper 002, Sec. 2.3 and 4), by dp_accounting.

**What is protected.** Worker i's examples: neighbouring data sets add or remove one example
of worker i's shard S_i. Every worker is its own privacy unit with its own guarantee.

**What is released.** Everything worker i sends or that depends on its data — the models it
transmits (D-PSGD: to its graph neighbours every iteration; LEASGD: to its partner every τ
iterations), its final model, and (LEASGD) the training loss it reports at each
recategorization — is a post-processing of its per-iteration releases:

* every iteration t: g̃ᵢ = (Σ_{j∈B_t} clip_C(∇ℓ_j) + N(0, σ²C²)) / L over a Poisson sample
  B_t of S_i with rate qᵢ = L / |S_i| — the Poisson-subsampled Gaussian mechanism, noise
  multiplier σ (Abadi et al. 2016, paper 002's "moments accountant");
* every recategorization (every kτ iterations, LEASGD only): the same batch's sum of
  per-example losses clipped to [0, B] plus N(0, σ_ℓ²B²). Released together with that
  iteration's gradient it is one Gaussian mechanism on the vector (Σ clip_C ∇ℓ / (σC),
  Σ clip_B ℓ / (σ_ℓ B)) of unit noise and sensitivity √(σ⁻² + σ_ℓ⁻²), i.e. noise multiplier
  σ_eff = (σ⁻² + σ_ℓ⁻²)^(−1/2). Paper 002 ranks workers by the exact loss, which no noise
  protects; dp_fl charges for it.

**What is published but not covered.** The experiment also measures, at every evaluation,
the workers' mean training loss on their own shards (`training.Run.measure`, `train_loss` in
metrics/eval.csv, result.json, the comparison's table and figures, the progress lines), without
noise. It is a diagnostic of the experiment, not a message of the protocol, and no ε covers it
(`NOT_COVERED`, written into every private run's result). Publish it only for non-private
runs, or keep it as private as the shards. The held-out test set is not protected either.

The models a worker receives depend on other workers' data only; the composition over T
iterations is adaptive (other workers' models depend on i's earlier releases) and the RDP
bound covers it. No amplification by the unreleased local steps between communications (the
τ − 1 iterations LEASGD keeps to itself) is claimed: that needs convexity (privacy
amplification by iteration), which neural networks lack.

So worker i's guarantee is the event

    Composed[ SelfComposed(PoissonSampled(qᵢ, Gaussian(σ)), T − R),
              SelfComposed(PoissonSampled(qᵢ, Gaussian(σ_eff)), R) ]

with R the recategorizations, converted to (ε, δ) by dp_accounting's RDP accountant. Workers
with smaller shards sample at a higher rate and spend more ε; the run reports every worker's
ε and the maximum.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import dp_accounting

from dp_fl import _checks
from dp_fl.accounting import dpfedavg


def effective_noise_multiplier(noise_multiplier: float,
                               loss_noise_multiplier: Optional[float]) -> float:
  """σ_eff = (σ⁻² + σ_ℓ⁻²)^(−1/2): the gradient and the clipped loss of one batch released
  together, as one Gaussian mechanism (σ_ℓ None: no loss released, σ_eff = σ)."""
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  if loss_noise_multiplier is None:
    return sigma
  loss_sigma = _checks.check_positive("loss_noise_multiplier", loss_noise_multiplier)
  return 1.0 / math.sqrt(sigma ** -2 + loss_sigma ** -2)


def worker_dp_event(sampling_probability: float, noise_multiplier: float, steps: int,
                    loss_releases: int = 0,
                    loss_noise_multiplier: Optional[float] = None) -> dp_accounting.DpEvent:
  """One worker's T iterations, R of them also releasing its noisy clipped loss."""
  q = _checks.check_finite("sampling_probability", sampling_probability)
  if not 0 < q <= 1:
    raise ValueError(f"a worker's sampling rate q = L / |shard| must be in (0, 1]; got {q:g}. "
                     "Lower --batch_size or use fewer workers (larger shards).")
  steps = _checks.check_nonnegative_int("steps", steps)
  releases = _checks.check_nonnegative_int("loss_releases", loss_releases)
  if releases > steps:
    raise ValueError(f"{releases} loss releases in {steps} iterations: a worker reports its "
                     "loss only at an iteration it trains.")
  if releases and loss_noise_multiplier is None:
    raise ValueError("loss releases need `loss_noise_multiplier` (the exact loss is not "
                     "private).")
  sigma = _checks.check_positive("noise_multiplier", noise_multiplier)
  events = []
  if steps - releases:
    events.append(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
        steps - releases))
  if releases:
    joint = effective_noise_multiplier(sigma, loss_noise_multiplier)
    events.append(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(joint)),
        releases))
  return dp_accounting.ComposedDpEvent(events)


NOT_COVERED = (
    "train_loss — the workers' mean loss on their own training shards (the first "
    "--eval_train_examples examples of each, or all), measured without noise at every "
    "evaluation and published in metrics/eval.csv, result.json, comparison.json/.md, the "
    "loss figures and the progress lines: NOT covered by ε (a diagnostic of the experiment, "
    "not a message of the protocol); keep it as private as the shards.",
    "test_accuracy — computed on the held-out test set, which ε does not protect.",
)
"""What a private run publishes beyond the releases its ε covers (module docstring)."""


@dataclasses.dataclass(frozen=True)
class WorkerPrivacy:
  """One worker's (ε, δ) after `steps` iterations."""
  worker: int
  shard_size: int
  sampling_probability: float
  steps: int
  loss_releases: int
  epsilon: float
  order: float

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RunPrivacy:
  """Every worker's guarantee and the largest ε (the run's headline)."""
  delta: float
  noise_multiplier: float
  loss_noise_multiplier: Optional[float]
  workers: tuple[WorkerPrivacy, ...]

  @property
  def max_epsilon(self) -> float:
    return max(w.epsilon for w in self.workers)

  def to_json(self) -> dict[str, Any]:
    return {"delta": self.delta, "noise_multiplier": self.noise_multiplier,
            "loss_noise_multiplier": self.loss_noise_multiplier,
            "max_epsilon": self.max_epsilon,
            "workers": [w.to_json() for w in self.workers],
            "not_covered": list(NOT_COVERED)}


def run_privacy(shard_sizes: Sequence[int], batch_size: float, noise_multiplier: float,
                steps: int, delta: float, loss_releases: int = 0,
                loss_noise_multiplier: Optional[float] = None) -> RunPrivacy:
  """Every worker's ε: rate qᵢ = L / |Sᵢ|, the same σ, T and R for all (the algorithms run in
  lock step). Workers of equal shard size share one computation."""
  batch = _checks.check_positive("batch_size", batch_size)
  cache: dict[int, tuple[float, float]] = {}
  workers = []
  for index, size in enumerate(shard_sizes):
    size = _checks.check_positive_int(f"shard_sizes[{index}]", size)
    q = batch / size
    if size not in cache and not steps:
      cache[size] = (0.0, math.nan)
    if size not in cache:
      event = worker_dp_event(q, noise_multiplier, steps, loss_releases, loss_noise_multiplier)
      cache[size] = dpfedavg.event_rdp_epsilon(event, delta)
    eps, order = cache[size]
    workers.append(WorkerPrivacy(index, size, q, steps, loss_releases, eps, order))
  return RunPrivacy(_checks.check_delta(delta), noise_multiplier, loss_noise_multiplier,
                    tuple(workers))
