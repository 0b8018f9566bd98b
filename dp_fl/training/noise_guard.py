"""The noise guard: is the DP noise of a run learnable, and what to do when it is not.

Before training (`assess`, from public settings only: σ, ζ, the cohort, C, the model's size and
initial norm, the server's schedule — `dp_fl/mechanisms/signal_to_noise.py`) every private run
states its noise-to-signal ratios in its progress lines, summary.json and report.md. When the
noise left in the final model exceeds `MODEL_NOISE_LIMIT` × the initial model's norm, or the
noise in the summed updates exceeds the largest signal they can carry (`PREFIX_NOISE_LIMIT`),
it warns, with the cohort and the ε that would bring the noise into the learnable range, and
with `--noise_guard=scale` (the task presets') scales the server learning rate down so the
model's noise is at half the limit (`DEGRADE_MODEL_NOISE`): a run the noise wins then degrades
towards the best constant predictor instead of diverging (at the limit itself the stdlib runs
of docs/RESULTS.md ended at 1.12–1.13× the unigram loss, at half of it 1.05–1.07×). Scaling a
learning rate is post-processing: privacy is unchanged.

The limits were read off real-text runs (docs/RESULTS.md, "The noise guard"): on the
StackOverflow quick job every run that learned past unigram had a model-noise ratio ≤ 7.1
(DP-SGD at ζ = 0.3), TreeAgg at ζ = 1 (8.1) stayed at the unigram figure, and the runs that
diverged had 23.6 (DP-SGD, ζ = 1) and 40.4 (BLT with 20 clients a round, the issue's loss-230
run); the Reddit quick jobs that learn have 2.7 (DP-FedAvg) and 1.1 (BLT). Between
`MARGINAL_MODEL_NOISE` (5.5) and the limit runs went either way (6.35 stayed below the unigram
accuracy on manual pages): such a run is told so, not scaled.

During training (`DriftWatch`), an evaluation loss above `DRIFT_FACTOR` × the reference (the
task's unigram loss, else the first evaluation) says the model is drifting on noise.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import numpy as np

from dp_fl.mechanisms import signal_to_noise as snr_lib

GUARDS = ("warn", "scale", "off")
"""`--noise_guard`: state and warn; also scale the server rate down; or say nothing."""

MODEL_NOISE_LIMIT = snr_lib.MODEL_NOISE_LIMIT
PREFIX_NOISE_LIMIT = snr_lib.PREFIX_NOISE_LIMIT
DEGRADE_MODEL_NOISE = snr_lib.DEGRADE_MODEL_NOISE
MARGINAL_MODEL_NOISE = snr_lib.MARGINAL_MODEL_NOISE
SUGGESTED_FRACTION = snr_lib.SUGGESTED_FRACTION
DRIFT_FACTOR = 1.5
# The suggested ε aims this much inside the limits, and is rounded up (3 significant digits),
# so that a run calibrated to the printed figure lands within them.
SUGGESTION_MARGIN = 1.02


def _round_up(value: float, digits: int = 3) -> float:
  """`value` rounded up to `digits` significant digits."""
  if value <= 0 or not math.isfinite(value):
    return value
  step = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
  return math.ceil(value / step - 1e-9) * step


@dataclasses.dataclass(frozen=True)
class Assessment:
  """The guard's verdict on a planned run.

  Attributes:
    ratios: the `SignalToNoise` ratios.
    learnable: whether both limited ratios are within their limits.
    excess: the factor by which the noise must shrink to be within the limits (1 when
      learnable).
    suggested_cohort: beyond the limits or marginal, the clients per round that bring the
      noise to half the limits (`signal_to_noise.SUGGESTED_FRACTION`) at this σ.
    suggested_epsilon: likewise an ε (`SUGGESTION_MARGIN` further inside, rounded up; None
      where the mechanism's accounting cannot be re-planned this simply).
    marginal: within the limits but with a model-noise ratio above `MARGINAL_MODEL_NOISE`,
      where runs have gone either way (a note, no scaling).
    learning_rate_scale: the factor `--noise_guard=scale` applies to the server rate (1: none).
    max_clip_norm: the clip norm at which the model's noise would be at its limit (at
      `DEGRADE_MODEL_NOISE` for a run beyond the limits; None without a model ratio); with
      adaptive clipping `--noise_guard=scale` caps each round's step at it
      (`quantile.QuantileEstimator.max_step_clip_norm`), since the noise follows ζₜ.
  """
  ratios: snr_lib.SignalToNoise
  learnable: bool
  excess: float
  suggested_cohort: Optional[int]
  suggested_epsilon: Optional[float]
  learning_rate_scale: float
  max_clip_norm: Optional[float] = None
  adaptive: bool = False
  population: Optional[int] = None
  mode: str = "warn"  # `--noise_guard` of the run.
  marginal: bool = False

  def to_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out.update(model_noise_limit=MODEL_NOISE_LIMIT, prefix_noise_limit=PREFIX_NOISE_LIMIT)
    return out

  def lines(self) -> list[str]:
    r = self.ratios
    model = ("" if r.model_noise is None else
             f", noise left in the final model {r.model_noise:.3g}× the initial model's norm "
             f"(limit {MODEL_NOISE_LIMIT:g}" + (
                 f"; at ζ₀ — with adaptive clipping it follows ζₜ, and --noise_guard=scale "
                 f"caps each round's step at ζ = {self.max_clip_norm:.3g})"
                 if self.adaptive and self.max_clip_norm else ")"))
    lines = [f"noise guard: one round's noise is {r.round_noise:.3g}× the clip norm; the summed "
             f"updates' noise {r.prefix_noise:.3g}× their largest signal (limit "
             f"{PREFIX_NOISE_LIMIT:g}){model}"]
    fixes = ([f"--clients_per_round={self.suggested_cohort} (at this σ; beyond the "
              f"population of {self.population} clients)"
              if self.population and self.suggested_cohort > self.population else
              f"--clients_per_round={self.suggested_cohort} (at this σ)"]
             if self.suggested_cohort else [])
    if self.suggested_epsilon is not None:
      fixes.append(f"ε ≈ {self.suggested_epsilon:.3g} (--calibrate_epsilon)")
    fix_text = (f"Half the limits (where runs learned clearly) needs "
                f"{' or '.join(fixes) or 'a larger cohort or ε'} (or fewer rounds: more "
                "noise-free signal per row).")
    if self.marginal:
      lines.append(
          f"  note: the model's noise is within the limit but above {MARGINAL_MODEL_NOISE:g}, "
          "where runs have both learned and stayed at the unigram figure (docs/RESULTS.md). "
          + fix_text)
    if not self.learnable:
      lines.append(
          f"  WARNING: the noise is {self.excess:.3g}× what runs that learned had: this run is "
          f"likely to stay at the unigram figure or diverge. {fix_text}")
      if self.learning_rate_scale < 1 and self.mode == "scale":
        lines.append(f"  --noise_guard=scale: server learning rate × "
                     f"{self.learning_rate_scale:.3g} (the model's noise at half the limit), so "
                     "the noise cannot carry the model away (it degrades towards the constant "
                     "predictor instead of diverging)")
      elif self.learning_rate_scale < 1:
        lines.append(f"  --noise_guard=scale would multiply the server learning rate by "
                     f"{self.learning_rate_scale:.3g} so the noise cannot carry the model away")
    return lines


def assess(config: Any, inverse: Optional[np.ndarray], clients_per_round: float,
           model_dimension: int, initial_model_norm: Optional[float],
           epsilon_at: Optional[Callable[[float], Optional[float]]] = None,
           population: Optional[int] = None) -> Optional[Assessment]:
  """The guard's verdict for `config` (None when the run adds no noise).

  Args:
    config: the run's `TrainingConfig`.
    inverse: the dense C⁻¹ for `config.rounds` (None: C = I, independent noise).
    clients_per_round: the averaged update's denominator (the expected cohort).
    model_dimension: d.
    initial_model_norm: ‖w₀‖ (None: no model ratio).
    epsilon_at: σ -> the ε the planned participation reaches at σ (None: not suggested).
    population: the clients there are (a suggested cohort beyond it is said to be so).
  """
  if config.noise_multiplier == 0:
    return None
  sgdm = config.server_optimizer == "sgdm"
  rates = [config.server_learning_rate_at(t) for t in range(config.rounds)] if sgdm else None
  ratios = snr_lib.signal_to_noise(
      inverse, rounds=config.rounds, noise_multiplier=config.noise_multiplier,
      clients_per_round=clients_per_round, model_dimension=model_dimension,
      learning_rates=rates, momentum=config.server_momentum if sgdm else 0.0,
      initial_model_norm=initial_model_norm, clip_norm=config.clip_norm)
  adaptive = bool(getattr(config.mechanism_settings, "adaptive_clipping", False))
  # The model's noise scales with ζ: with adaptive clipping ζ₀ says nothing about it.
  excess = snr_lib.noise_factor(ratios, with_model=not adaptive)
  learnable = bool(excess == 1.0)
  marginal = bool(learnable and not adaptive and ratios.model_noise is not None
                  and ratios.model_noise > MARGINAL_MODEL_NOISE)
  cohort = epsilon = max_clip = None
  target = MODEL_NOISE_LIMIT if learnable else DEGRADE_MODEL_NOISE
  if ratios.model_noise:
    max_clip = float(config.clip_norm * target / ratios.model_noise)
  scale = 1.0
  if not learnable or marginal:
    # The fixes aim at half of each limit (`SUGGESTED_FRACTION`), where runs learned clearly.
    factor = snr_lib.noise_factor(ratios, SUGGESTED_FRACTION, with_model=not adaptive)
    cohort = int(math.ceil(clients_per_round * factor))
    if epsilon_at is not None:
      epsilon = epsilon_at(config.noise_multiplier / (factor * SUGGESTION_MARGIN))
      epsilon = None if epsilon is None else _round_up(epsilon)
  if not learnable and not adaptive and ratios.model_noise and (
      ratios.model_noise > DEGRADE_MODEL_NOISE):
    scale = float(DEGRADE_MODEL_NOISE / ratios.model_noise)
  return Assessment(ratios, learnable, excess, cohort, epsilon, scale, max_clip, adaptive,
                    population, config.noise_guard, marginal)


def max_step_clip_norm(config: Any, assessment: Optional[Assessment]) -> Optional[float]:
  """The step cap of an adaptive clip norm under `--noise_guard=scale` (None: no cap)."""
  if assessment is None or config.noise_guard != "scale" or not assessment.adaptive:
    return None
  return assessment.max_clip_norm


def apply(config: Any, assessment: Optional[Assessment]) -> Any:
  """`config` with the server rate scaled when `--noise_guard=scale` asks for it."""
  if (assessment is None or config.noise_guard != "scale"
      or assessment.learning_rate_scale >= 1):
    return config
  return config.replace(
      server_learning_rate=config.server_learning_rate * assessment.learning_rate_scale)


class DriftWatch:
  """Says (once) when an evaluation loss exceeds `DRIFT_FACTOR` × the reference: the task's
  unigram loss, else the run's first evaluation loss."""

  def __init__(self, reference: Optional[float]):
    self.reference = reference
    self.drifted: Optional[dict[str, float]] = None

  def check(self, round_number: int, metrics: dict[str, float]) -> Optional[str]:
    loss = metrics.get("loss")
    if loss is None or self.drifted is not None:
      return None
    if self.reference is None:
      if math.isfinite(loss):
        self.reference = loss
      return None
    if not loss > DRIFT_FACTOR * self.reference:  # NaN included.
      return None
    self.drifted = {"round": round_number, "loss": float(loss),
                    "reference": float(self.reference)}
    return (f"round {round_number}: WARNING evaluation loss {loss:.4g} is above "
            f"{DRIFT_FACTOR:g}× the reference {self.reference:.4g}: the model is drifting on "
            "the DP noise (see the noise guard's line at the start; a larger cohort or ε, or "
            "--noise_guard=scale)")
