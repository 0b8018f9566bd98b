"""Planning a DP-FTRL run before launching it (paper 004, Sec. 5 "Extrapolation", Figs. 6, 8-9).

A production run is configured by its population N, report goal m, device timer T, round
duration, device availability and rounds n. Its privacy depends on the participation it will
*realize* — min-sep b and max participations k — which paper 004 estimates optimistically as
b = ⌊N/m⌋, k = ⌈n/b⌉ and then observes to differ in production (~90 vs 100 for pt-PT, ~300
vs 400 for es-ES, 2000+ vs 1000 for pt-BR). `make_plan`:

1. runs the device-timer emulation (`participation.extrapolation`) with exactly the
   scheduler and availability the training program builds from the same flags, over several
   trials, and reports the realized (b, k) of every trial next to the optimistic formula;
2. builds every requested mechanism for the predicted worst case (n, b, k) — BLT optimized for
   MaxLoss (paper 004, Sec. 3.3), BandMF when its O(n³) optimization fits the time allowed,
   TreeAgg, DP-SGD — by `mechanisms.catalog`, the same builder training uses;
3. gives each mechanism's ρ and ε at a noise multiplier σ (or σ for a target ε) by
   `accounting.report.min_sep_guarantee`, the one computation behind `scripts/privacy`, so the
   two agree for the same (n, b, k, σ); with the prefix-sum noise σ·RmsError / σ·MaxError, the
   utility side of the comparison (paper 004, Eqs. 9-10);
4. checks robustness as paper 004's Fig. 6 does: ε and the losses if the realized min-sep comes
   out lower than predicted (b × 0.9, 0.75, 0.5 by default);
5. traces ε over the rounds (k(r) = min(k, ⌈r/b⌉)), for the figure;
6. with `b_min_sep`, estimates the σ the same ε would need under b-min-sep sampling (what
   amplification the planned population would buy; `b_min_sep_estimate`).

The plan is a prediction, not a guarantee: the training program reports ε from the
participation its ledger realizes. The emulation's seeds are public and unrelated to the
secret sampling seed of a run.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
import warnings
from typing import Any, Optional, Sequence

from dp_fl import _checks
from dp_fl import resources
from dp_fl.accounting import amplification
from dp_fl.accounting import b_min_sep as b_min_sep_lib
from dp_fl.accounting import report as report_lib
from dp_fl.mechanisms import blt as blt_lib
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import signal_to_noise as signal_to_noise_lib
from dp_fl.participation import availability as availability_lib
from dp_fl.participation import extrapolation
from dp_fl.participation import schemes

DEFAULT_MECHANISMS = ("blt", "bandmf", "tree")
DEFAULT_ROBUSTNESS = (0.9, 0.75, 0.5)
COMPARE = ("rms_noise", "noise_multiplier")
EPSILON_CURVE_POINTS = 40


@dataclasses.dataclass(frozen=True)
class PlanSettings:
  """What a planned run is configured with (the training program's flags of the same names).

  Attributes:
    population: N, devices (the training task's clients).
    report_goal: m, clients per round (`--clients_per_round`).
    rounds: n, planned rounds.
    timer_hours: T, the device timer (`--timer_hours`).
    round_hours: simulated duration of a round (`--round_hours`).
    availability: one of `availability.SIMULATED` (`--availability`).
    seed: the run's public seed (`--seed`): the simulated time zones derive from it.
    delta: δ.
    noise_multiplier: σ; or None with `target_epsilon`. With `compare="rms_noise"` it is the
      first mechanism's σ, and every other mechanism gets the σ that gives it the same
      root-mean-squared prefix-sum noise (σ × RmsError): paper 004's signal-to-noise
      hypothesis (Sec. 5: equal noise, equal utility; Table 4 sets BandMF's σ so), under which
      comparing ε is comparing mechanisms. With `compare="noise_multiplier"` all use σ.
    target_epsilon: calibrate σ per mechanism for this ε; or None with `noise_multiplier`.
    mechanisms: names from `catalog.names()`.
    buffers: BLT buffers d.
    trials: emulation trials (seeds 0 .. trials-1); the worst (b, k) over them is planned for.
    robustness: fractions f < 1: ε and losses are also reported at min-sep ⌊f·b⌋.
    bandmf_max_seconds: BandMF is built only when its estimated optimization time fits.
  """
  population: int
  report_goal: int
  rounds: int
  timer_hours: float
  round_hours: float
  availability: str = "always"
  seed: int = 0
  delta: float = 1e-10
  noise_multiplier: Optional[float] = None
  target_epsilon: Optional[float] = None
  mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
  buffers: int = 4
  trials: int = 5
  robustness: tuple[float, ...] = DEFAULT_ROBUSTNESS
  bandmf_max_seconds: float = 120.0
  compare: str = "rms_noise"
  model_dimension: Optional[int] = None  # d: with it, the noise guard's ratios (issue #42).
  client_tokens: Optional[float] = None  # With d: the job's training time (issue #43).
  b_min_sep: bool = False  # Also estimate σ under b-min-sep sampling (issue #44).
  b_min_sep_samples: int = 2 ** 18  # The most samples that estimate draws.

  def __post_init__(self):
    _checks.check_positive_int("population", self.population)
    _checks.check_positive_int("report_goal", self.report_goal)
    if self.model_dimension is not None:
      _checks.check_positive_int("model_dimension", self.model_dimension)
    if self.client_tokens is not None:
      _checks.check_positive("client_tokens", self.client_tokens)
      if self.model_dimension is None:
        raise ValueError(f"`client_tokens`={self.client_tokens!r} estimates the job's time "
                         "only with `model_dimension` (d, the model's parameters); give both.")
    if self.report_goal > self.population:
      raise ValueError(f"`report_goal`={self.report_goal} exceeds `population`="
                       f"{self.population}; a round cannot take more devices than exist.")
    _checks.check_positive_int("rounds", self.rounds)
    _checks.check_positive("timer_hours", self.timer_hours)
    _checks.check_positive("round_hours", self.round_hours)
    if self.availability not in availability_lib.SIMULATED:
      raise ValueError(f"`availability` must be one of {availability_lib.SIMULATED}; got "
                       f"{self.availability!r}.")
    _checks.check_nonnegative_int("seed", self.seed)
    _checks.check_open_unit("delta", self.delta)
    report_lib.check_noise_or_target(self.noise_multiplier, self.target_epsilon)
    if self.noise_multiplier is not None:
      _checks.check_positive("noise_multiplier", self.noise_multiplier)
    if self.target_epsilon is not None:
      _checks.check_positive("target_epsilon", self.target_epsilon)
    if not self.mechanisms:
      raise ValueError("`mechanisms` must name at least one mechanism.")
    for name in self.mechanisms:
      catalog.family(name)
    _checks.check_positive_int("buffers", self.buffers)
    _checks.check_positive_int("trials", self.trials)
    for f in self.robustness:
      if not 0.0 < f < 1.0:
        raise ValueError(f"`robustness` fractions must lie in (0, 1); got {f!r}.")
    _checks.check_positive("bandmf_max_seconds", self.bandmf_max_seconds)
    if self.compare not in COMPARE:
      raise ValueError(f"`compare` must be one of {COMPARE}; got {self.compare!r}.")
    if len(set(self.mechanisms)) != len(self.mechanisms):
      raise ValueError(f"`mechanisms` lists a mechanism twice: {list(self.mechanisms)}.")


@dataclasses.dataclass(frozen=True)
class Prediction:
  """The device-timer emulation's realized participation (paper 004, Sec. 5).

  `min_sep` / `max_participations` are the worst over the trials (smallest b, largest k):
  what the mechanisms are built and the headline ε is computed for. A trial's min-sep is None
  when no device took part twice in it.
  """
  rounds: int
  optimistic_min_sep: int
  optimistic_max_participations: int
  enforced_min_sep: int
  min_sep: Optional[int]
  max_participations: int
  min_sep_per_trial: tuple[Optional[int], ...]
  max_participations_per_trial: tuple[int, ...]
  rounds_short_per_trial: tuple[int, ...]
  skipped_empty_per_trial: tuple[int, ...]
  simulated_days_per_trial: tuple[float, ...]
  emulation_seconds: float

  @property
  def planned_min_sep(self) -> int:
    """b to build and account for: the worst realized min-sep, or n when no device took part
    twice (then any b >= n describes the schedule, and k = 1)."""
    return self.min_sep if self.min_sep is not None else self.rounds

  def to_dict(self) -> dict[str, Any]:
    seps = [s for s in self.min_sep_per_trial if s is not None]
    return {
        "optimistic_min_sep": self.optimistic_min_sep,
        "optimistic_max_participations": self.optimistic_max_participations,
        "enforced_min_sep": self.enforced_min_sep,
        "min_sep": self.min_sep, "max_participations": self.max_participations,
        "planned_min_sep": self.planned_min_sep,
        "min_sep_per_trial": list(self.min_sep_per_trial),
        "min_sep_range": [min(seps), max(seps)] if seps else None,
        "min_sep_median": statistics.median(seps) if seps else None,
        "max_participations_per_trial": list(self.max_participations_per_trial),
        "max_participations_range": [min(self.max_participations_per_trial),
                                     max(self.max_participations_per_trial)],
        "rounds_short_per_trial": list(self.rounds_short_per_trial),
        "skipped_empty_per_trial": list(self.skipped_empty_per_trial),
        "simulated_days_per_trial": list(self.simulated_days_per_trial),
        "emulation_seconds": self.emulation_seconds,
    }


# The emulation's cost per round whatever the population (Python's round trip through the
# scheduler, and the ledger's participation record: an array of the cohort per round).
# Measured (#43): 1.7 ms and 220 bytes per round at 1000 devices, 10 per round, on the
# loaded 2-core machine — the per-device figures alone had estimated 22 min and 1 MB for
# 10⁸ rounds, which then grew past 20 GB without a progress line.
EMULATION_SECONDS_PER_ROUND = 1.7e-3
# Per device and round: always-available devices, and diurnal ones (docstring below).
EMULATION_SECONDS_PER_DEVICE_ROUND = {"always": 2.7e-9, "diurnal": 7.5e-9}
EMULATION_BYTES_PER_ROUND = 160.0
EMULATION_BYTES_PER_PARTICIPATION = 4.0


def emulation_cost(settings: PlanSettings) -> resources.Estimate:
  """The emulation's time and memory: measured (docs/BENCHMARKS.md, `bench_participation`)
  2.7 ms per round per 10⁶ always-available devices and 7.5 ms diurnal, where about as many
  empty night rounds are skipped as rounds trained; ~33 bytes of state per device; plus
  `EMULATION_SECONDS_PER_ROUND` and the ledger's record of every round (one trial at a
  time)."""
  diurnal = settings.availability == "diurnal"
  per_device_round = EMULATION_SECONDS_PER_DEVICE_ROUND["diurnal" if diurnal else "always"]
  selections = settings.rounds * (2.0 if diurnal else 1.0)
  per_round_bytes = (EMULATION_BYTES_PER_ROUND
                     + EMULATION_BYTES_PER_PARTICIPATION * settings.report_goal)
  return resources.Estimate(
      f"emulating {settings.trials} trial(s) of {settings.rounds} rounds over "
      f"{settings.population} devices",
      33.0 * settings.population + per_round_bytes * settings.rounds + 1e6,
      settings.trials * selections * (settings.population * per_device_round
                                      + EMULATION_SECONDS_PER_ROUND),
      f"~3-8 ns per device and {EMULATION_SECONDS_PER_ROUND * 1e3:g} ms per round, ~33 bytes "
      f"per device and {per_round_bytes:g} per round")


def predict(settings: PlanSettings) -> Prediction:
  """Runs the device-timer emulation `settings.trials` times (seeds 0, 1, ...).

  Raises:
    ValueError: the emulation would exceed the memory or time budget (`dp_fl.resources`).
  """
  flags = {"population": settings.population, "trials": settings.trials,
           "rounds": settings.rounds}
  if (settings.population * EMULATION_SECONDS_PER_DEVICE_ROUND["always"]
      < EMULATION_SECONDS_PER_ROUND):  # Rounds cost the most.
    flags = {"rounds": settings.rounds, "trials": settings.trials,
             "population": settings.population}
  resources.require(emulation_cost(settings), flags)
  start = time.perf_counter()
  progress = resources.Progress(f"emulating the device timer ({settings.trials} trial(s) of "
                                f"{settings.rounds} rounds)", settings.trials * settings.rounds)
  result = extrapolation.extrapolate(
      settings.population, settings.report_goal, settings.rounds,
      seeds=tuple(range(settings.trials)), progress=progress.update,
      min_separation_hours=settings.timer_hours,
      round_duration_hours=settings.round_hours,
      availability=availability_lib.simulated(settings.availability, settings.population,
                                              settings.seed))
  progress.finish()
  return Prediction(
      rounds=settings.rounds, optimistic_min_sep=result.optimistic_min_separation,
      optimistic_max_participations=result.optimistic_max_participations,
      enforced_min_sep=result.enforced_min_separation,
      min_sep=result.min_separation, max_participations=result.max_participations,
      min_sep_per_trial=tuple(t.min_separation for t in result.trials),
      max_participations_per_trial=tuple(t.max_participations for t in result.trials),
      rounds_short_per_trial=result.rounds_short,
      skipped_empty_per_trial=result.skipped_empty_rounds,
      simulated_days_per_trial=tuple(h / 24.0 for h in result.simulated_hours),
      emulation_seconds=time.perf_counter() - start)


@dataclasses.dataclass(frozen=True)
class Scenario:
  """One mechanism under one participation (n, b, k) at the plan's σ."""
  min_sep: int
  max_participations: int
  sensitivity: float
  sensitivity_kind: str  # "exact" or "upper_bound" (the lower bound is then next to it)
  rho: float
  epsilon: float
  epsilon_lower_bound: Optional[float]
  rms_loss: float
  max_loss: float

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class MechanismPlan:
  """A mechanism built for the prediction, and what it gives."""
  name: str
  params: dict[str, Any]
  optimize_seconds: float
  noise_multiplier: float
  buffers: Optional[int]
  rms_error: float
  max_error: float
  planned: Scenario
  optimistic: Scenario
  robustness: tuple[Scenario, ...]
  epsilon_vs_rounds: tuple[tuple[int, float], ...]
  notes: tuple[str, ...]
  # With `PlanSettings.model_dimension`: one round's noise / ζ and the summed updates' noise /
  # nζ (`dp_fl/mechanisms/signal_to_noise.py`); None without it or without streaming noise.
  signal_to_noise: Optional[signal_to_noise_lib.SignalToNoise] = None
  # With `PlanSettings.b_min_sep`: the σ the same ε needs under b-min-sep sampling.
  b_min_sep: Optional[dict[str, Any]] = None

  @property
  def rms_noise(self) -> float:
    """σ × RmsError: the root-mean-squared noise of the prefix sums (per unit clip norm)."""
    return self.noise_multiplier * self.rms_error

  @property
  def max_noise(self) -> float:
    return self.noise_multiplier * self.max_error

  def to_dict(self) -> dict[str, Any]:
    return {
        "name": self.name, "noise_multiplier": self.noise_multiplier,
        "optimize_seconds": self.optimize_seconds, "buffers": self.buffers,
        "rms_error": self.rms_error, "max_error": self.max_error,
        "rms_noise": self.rms_noise, "max_noise": self.max_noise,
        "planned": self.planned.to_dict(), "optimistic": self.optimistic.to_dict(),
        "robustness": [s.to_dict() for s in self.robustness],
        "epsilon_vs_rounds": [list(p) for p in self.epsilon_vs_rounds],
        "notes": list(self.notes), "params": self.params,
        "signal_to_noise": (None if self.signal_to_noise is None
                            else dataclasses.asdict(self.signal_to_noise)),
        "b_min_sep": self.b_min_sep,
    }


@dataclasses.dataclass(frozen=True)
class Plan:
  settings: PlanSettings
  prediction: Prediction
  mechanisms: tuple[MechanismPlan, ...]
  skipped: tuple[tuple[str, str], ...]  # (mechanism, why)

  def sigma_rule(self) -> str:
    """How each mechanism's σ was chosen, in words."""
    s = self.settings
    if s.target_epsilon is not None:
      return (f"σ calibrated per mechanism for ε = {s.target_epsilon:g} (rounded up to 6 "
              "digits); compare the RMS noise")
    if s.compare == "rms_noise" and len(self.mechanisms) > 1:
      first = self.mechanisms[0]
      return (f"σ = {s.noise_multiplier:g} for {first.name}; the others get the σ giving the "
              f"same RMS prefix-sum noise {first.rms_noise:.4g} (paper 004 Sec. 5: equal noise, "
              "equal utility); compare ε")
    return f"σ = {s.noise_multiplier:g} for every mechanism"

  def warnings(self) -> list[str]:
    """What the user should change before launching."""
    out = []
    p, s = self.prediction, self.settings
    short = max(r - e for r, e in zip(p.rounds_short_per_trial, p.skipped_empty_per_trial))
    if short:
      out.append(
          f"up to {short} of the {s.rounds} rounds trained fewer than the report goal "
          f"{s.report_goal} devices in the emulation: too few were eligible and available "
          f"(timer {s.timer_hours:g} h = {p.enforced_min_sep} rounds against ⌊N/m⌋ = "
          f"{p.optimistic_min_sep}, availability {s.availability}); a shorter --timer_hours or "
          "a larger population fills them. Short rounds keep the fixed denominator, so privacy "
          "holds but the noise weighs more")
    skipped = max(p.skipped_empty_per_trial)
    if skipped:
      out.append(
          f"up to {skipped} rounds of the clock found no eligible, available device and were "
          f"skipped (no row of C): the {s.rounds} rounds take {(s.rounds + skipped) / s.rounds:.2g}× "
          f"the clock time, about {max(p.simulated_days_per_trial):.3g} days, and rows of C "
          "come closer together than the timer's rounds (a lower min-sep). A timer of at most "
          f"⌊N/m⌋ × round_hours = {p.optimistic_min_sep * s.round_hours:g} h, or a larger "
          "population, keeps devices eligible" + (
              "; with diurnal availability nights stay empty" if s.availability == "diurnal"
              else ""))
    seps = [x for x in p.min_sep_per_trial if x is not None]
    if (len(seps) != len(p.min_sep_per_trial) and seps) or (
        seps and max(seps) > 1.1 * min(seps)):
      out.append(
          f"the trials disagree on the min-sep ({_fmt_list(p.min_sep_per_trial)}): the realized "
          "value is uncertain; the plan uses the smallest, raise --trials to see the spread "
          "better, and read the robustness rows for the cost of a lower one")
    if p.min_sep is not None and p.min_sep < p.optimistic_min_sep:
      out.append(f"the realized min-sep ({p.min_sep}) is below the optimistic ⌊N/m⌋ = "
                 f"{p.optimistic_min_sep}: a mechanism optimized for the formula would be "
                 "optimized for the wrong b")
    limit = signal_to_noise_lib.PREFIX_NOISE_LIMIT
    for m in self.mechanisms:
      ratios = m.signal_to_noise
      if ratios is not None and ratios.prefix_noise > limit:
        factor = signal_to_noise_lib.noise_factor(
            ratios, signal_to_noise_lib.SUGGESTED_FRACTION, with_model=False)
        out.append(
            f"{m.name}: the noise of the summed updates is {ratios.prefix_noise:.3g}× the "
            f"largest signal they can carry (limit {limit:g}, the noise guard's): a model is "
            "unlikely to learn; about "
            f"{math.ceil(s.report_goal * factor)}"
            " devices per round at this σ, or a larger ε, bring it to half the limit (where "
            "runs learned clearly)")
    return out

  def job_estimate(self) -> Optional[resources.Estimate]:
    """The training rounds' wall time on this machine as the training binaries model it
    (`resources.training_job_estimate`: rounds × report goal × the cost of a client of
    `client_tokens` tokens on a model of `model_dimension` parameters; one local epoch, no
    evaluations — the binaries add both); None without them."""
    s = self.settings
    if s.client_tokens is None:
      return None
    return resources.training_job_estimate(s.rounds, s.report_goal, s.model_dimension,
                                           s.client_tokens)

  def to_dict(self) -> dict[str, Any]:
    settings = dataclasses.asdict(self.settings)
    settings["mechanisms"] = list(self.settings.mechanisms)
    settings["robustness"] = list(self.settings.robustness)
    return {
        "settings": settings, "prediction": self.prediction.to_dict(),
        "mechanisms": [m.to_dict() for m in self.mechanisms],
        "skipped": [{"mechanism": n, "why": why} for n, why in self.skipped],
        "sigma_rule": self.sigma_rule(), "warnings": self.warnings(), "scope": SCOPE,
        "job_estimate": _estimate_dict(self.job_estimate()),
    }


def _estimate_dict(estimate: Optional[resources.Estimate]) -> Optional[dict[str, Any]]:
  if estimate is None:
    return None
  return {"what": estimate.what, "seconds": estimate.seconds, "basis": estimate.basis}


SCOPE = (
    "A prediction before training, not a privacy guarantee. ε is ρ-zCDP of the Gaussian "
    "matrix mechanism (ρ = sens²/(2σ²), exact Gaussian (ε, δ)) for user-level DP under "
    "b-min-sep participation with at most k participations (paper 004, Sec. 3.1), for the "
    "worst (b, k) the device-timer emulation realized over its trials; no amplification by "
    "sampling. The training program reports ε from the participation it actually realizes.")


def _scenario(mechanism: catalog.Mechanism, settings: PlanSettings, sigma: float, min_sep: int,
              max_participations: Optional[int], errors: tuple[float, float]) -> Scenario:
  result = report_lib.min_sep_guarantee(mechanism, settings.rounds, min_sep, max_participations,
                                        settings.delta, noise_multiplier=sigma)
  sens = result.sensitivity
  max_error, rms_error = errors
  return Scenario(
      min_sep=int(min_sep), max_participations=result.max_participations,
      sensitivity=sens.guaranteed, sensitivity_kind="exact" if sens.is_exact else "upper_bound",
      rho=result.guarantee.rho, epsilon=result.guarantee.epsilon,
      epsilon_lower_bound=None if result.lower is None else result.lower.epsilon,
      rms_loss=sens.value * rms_error, max_loss=sens.value * max_error)


def _epsilon_curve(mechanism: catalog.Mechanism, settings: PlanSettings, sigma: float,
                   min_sep: int, max_participations: int) -> tuple[tuple[int, float], ...]:
  """ε after r rounds, k(r) = min(k, ⌈r/b⌉), on up to EPSILON_CURVE_POINTS rounds."""
  n = settings.rounds
  step = max(1, math.ceil(n / EPSILON_CURVE_POINTS))
  points = sorted(set(list(range(step, n + 1, step)) + [n]))
  curve = []
  for r in points:
    k = min(max_participations, sensitivity_lib.participation_cap(r, min_sep))
    result = report_lib.min_sep_guarantee(mechanism, r, min(min_sep, r), k, settings.delta,
                                          noise_multiplier=sigma)
    curve.append((r, result.guarantee.epsilon))
  return tuple(curve)


def _bandmf_skip_reason(settings: PlanSettings, min_sep: int, k: int) -> Optional[str]:
  options, _ = catalog.build_options("bandmf", rounds=settings.rounds, min_sep=min_sep,
                                     max_participations=k)
  estimate = catalog.family("bandmf").build_cost(options)
  if estimate.seconds > settings.bandmf_max_seconds:
    return (f"optimizing BandMF for n={settings.rounds} would take about "
            f"{estimate.seconds:.0f} s ({estimate.basis}) > --bandmf_max_seconds="
            f"{settings.bandmf_max_seconds:g}; BLT's optimization does not grow like that "
            "(paper 004, Fig. 1)")
  return None


def plan_mechanism(name: str, settings: PlanSettings, prediction: Prediction,
                   built: Optional[catalog.Built] = None,
                   rms_noise: Optional[float] = None) -> MechanismPlan:
  """Builds `name` for the prediction (unless `built` is given) and evaluates it.

  σ: for `rms_noise`, the σ with σ × RmsError = rms_noise; else `settings.noise_multiplier`,
  or calibrated for `settings.target_epsilon`.
  """
  n, b, k = settings.rounds, prediction.planned_min_sep, prediction.max_participations
  if built is None:
    built = catalog.build(name, rounds=n, min_sep=b, max_participations=k,
                          buffers=settings.buffers)  # The loss training builds it for.
  mechanism = built.mechanism
  errors = mechanism.per_query_squared_error(n)
  max_error, rms_error = math.sqrt(float(errors.max())), math.sqrt(float(errors.mean()))
  if rms_noise is not None:  # Rounded up (more noise) so the σ printed is the σ accounted.
    sigma = amplification.round_up(rms_noise / rms_error)
  elif settings.noise_multiplier is not None:
    sigma = settings.noise_multiplier
  else:
    sigma = report_lib.min_sep_guarantee(mechanism, n, b, k, settings.delta,
                                         target_epsilon=settings.target_epsilon
                                         ).noise_multiplier
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", blt_lib.ParticipationReducedWarning)
    planned = _scenario(mechanism, settings, sigma, b, k, (max_error, rms_error))
    optimistic = _scenario(mechanism, settings, sigma, prediction.optimistic_min_sep,
                           prediction.optimistic_max_participations, (max_error, rms_error))
    lower_seps = sorted({max(1, math.floor(f * b)) for f in settings.robustness} - {b},
                        reverse=True)
    robustness = tuple(_scenario(mechanism, settings, sigma, s, None, (max_error, rms_error))
                       for s in lower_seps)
    curve = _epsilon_curve(mechanism, settings, sigma, b, k)
  ratios = None
  if settings.model_dimension is not None and mechanism.buffers(n) is not None:
    ratios = signal_to_noise_lib.signal_to_noise(
        mechanism.streaming_noise(n).materialize(n), rounds=n, noise_multiplier=sigma,
        clients_per_round=settings.report_goal, model_dimension=settings.model_dimension)
  notes = list(built.notes)
  amplified = None
  if settings.b_min_sep:
    amplified = b_min_sep_estimate(mechanism, settings, prediction, planned.epsilon, sigma,
                                   rms_error)
  if planned.sensitivity_kind != "exact":
    notes.append("sensitivity only bracketed (paper 004, Remark 3.2): ε uses the upper "
                 "bound; the lower bound's ε is shown next to it")
  return MechanismPlan(
      name=name, params=mechanism.to_dict(), optimize_seconds=built.optimize_seconds,
      noise_multiplier=sigma, buffers=mechanism.buffers(n), rms_error=rms_error,
      max_error=max_error, planned=planned, optimistic=optimistic, robustness=robustness,
      epsilon_vs_rounds=curve, notes=tuple(notes), signal_to_noise=ratios,
      b_min_sep=amplified)


def b_min_sep_estimate(mechanism: catalog.Mechanism, settings: PlanSettings,
                       prediction: Prediction, epsilon: float, sigma: float,
                       rms_error: float) -> dict[str, Any]:
  """What b-min-sep sampling would buy at the planned ε: a client that took part waits
  b − 1 rounds (b = the predicted min-sep, at most ⌊N/m⌋ so that m a round is reachable), then
  is sampled with the p whose stationary expected cohort is m; σ by the Monte Carlo
  calibration (defensive importance sampling, `dp_fl/accounting/b_min_sep.py`) — an estimate
  with its standard error, not a release (a run verifies its own). With `--availability`
  other than always, the device-availability variant over the planned population's time
  zones (each class of windows accounted), b lowered until m a round is reachable."""
  classes = schemes.b_min_sep_availability(settings.availability, settings.population,
                                           settings.seed, settings.rounds, settings.round_hours)
  rate = settings.report_goal / settings.population

  def probability(b: int) -> Optional[float]:
    try:
      return schemes.b_min_sep_probability(rate, settings.rounds, b, True, classes)
    except ValueError:
      return None

  b = max(1, min(prediction.planned_min_sep, settings.population // settings.report_goal))
  if probability(b) is None:
    reachable = [c for c in range(1, b) if c == 1 or c % max(1, b // 64) == 0]
    found = [c for c in reachable if probability(c) is not None]
    if not found:
      return {"min_sep": None, "why_not": (
          f"an expected {settings.report_goal} of {settings.population} a round is not "
          f"reachable under --availability={settings.availability} even with b = 1")}
    b = max(found)
  sampling = b_min_sep_lib.BMinSepSampling(settings.rounds, b, probability(b),
                                           availability=classes)
  pair = amplification.b_min_sep_pair(mechanism, sampling)
  started = time.perf_counter()
  cal = b_min_sep_lib.calibrate_noise_multiplier(
      pair, epsilon=epsilon, delta=settings.delta, num_samples=settings.b_min_sep_samples,
      seed=settings.seed, relative_standard_error=0.05)
  return {
      "min_sep": b, "sampling_probability": sampling.sampling_probability,
      "epsilon": epsilon, "noise_multiplier": cal.noise_multiplier,
      "noise_multiplier_standard_error": cal.noise_multiplier_standard_error,
      "delta_relative_standard_error": (cal.delta_standard_error / cal.delta_hat
                                        if cal.delta_hat > 0 else None),
      "rms_noise": cal.noise_multiplier * rms_error,
      "noise_reduction_percent": 100.0 * (1.0 - cal.noise_multiplier / sigma),
      "exact_likelihood_ratio": pair.exact, "num_samples": cal.num_samples,
      "availability_classes": sampling.num_classes,
      "seconds": time.perf_counter() - started,
  }


def make_plan(settings: PlanSettings) -> Plan:
  """Predicts the participation, builds the mechanisms for it and accounts for each."""
  prediction = predict(settings)
  plans, skipped = [], []
  reference = None  # Set by the first mechanism planned, with compare="rms_noise" and σ.
  for name in settings.mechanisms:
    if name == "bandmf":
      why = _bandmf_skip_reason(settings, prediction.planned_min_sep,
                                prediction.max_participations)
      if why:
        skipped.append((name, why))
        continue
    try:
      plans.append(plan_mechanism(name, settings, prediction, rms_noise=reference))
      if (reference is None and settings.compare == "rms_noise"
          and settings.noise_multiplier is not None):
        reference = plans[-1].rms_noise
    except ValueError as e:  # Out of the memory/time budget, or no finite bound: say why.
      skipped.append((name, str(e)))
  if not plans:
    raise ValueError("No mechanism could be planned: " + "; ".join(
        f"{n}: {why}" for n, why in skipped))
  return Plan(settings, prediction, tuple(plans), tuple(skipped))


def training_flags(plan: Plan, mechanism: MechanismPlan, params_path: str) -> list[str]:
  """The training binaries' flags that run `mechanism` as planned (`--mechanism_params`)."""
  s, p = plan.settings, plan.prediction
  return [f"--mechanism={mechanism.name}", f"--mechanism_params={params_path}",
          f"--noise_multiplier={mechanism.noise_multiplier!r}",
          f"--rounds={s.rounds}", f"--clients_per_round={s.report_goal}",
          f"--min_sep={p.planned_min_sep}", f"--max_participations={p.max_participations}",
          "--participation=device_timer", f"--timer_hours={s.timer_hours!r}",
          f"--round_hours={s.round_hours!r}", f"--availability={s.availability}",
          f"--seed={s.seed}", f"--delta={s.delta!r}"]


def format_table(plan: Plan, params_paths: Optional[dict[str, str]] = None) -> str:
  """The human-readable plan."""
  s, p = plan.settings, plan.prediction
  d = p.to_dict()
  lines = [
      f"Plan: N={s.population}, m={s.report_goal}, n={s.rounds}, timer {s.timer_hours:g} h, "
      f"rounds of {s.round_hours:g} h, availability {s.availability} (seed {s.seed}), "
      f"δ={s.delta:g}",
      "",
      "Participation (device-timer emulation, "
      f"{s.trials} trial{'s' if s.trials > 1 else ''}, {p.emulation_seconds:.1f} s):",
      f"  optimistic (paper 004 Sec. 5): min-sep ⌊N/m⌋ = {p.optimistic_min_sep}, "
      f"max-par ⌈n/b⌉ = {p.optimistic_max_participations}",
      f"  timer guarantees min-sep >= {p.enforced_min_sep} rounds of the clock"
      + (f"; {max(p.skipped_empty_per_trial)} empty rounds skipped (no row of C), so fewer "
         "rows separate participations" if max(p.skipped_empty_per_trial) else ""),
      f"  realized min-sep per trial: {_fmt_list(p.min_sep_per_trial)} "
      f"(range {_fmt_range(d['min_sep_range'])})",
      f"  realized max-par per trial: {_fmt_list(p.max_participations_per_trial)}",
      f"  rounds short of the report goal per trial: {_fmt_list(p.rounds_short_per_trial)}",
      f"  planned for (worst trial): min-sep b = {p.planned_min_sep}"
      + (" (no device took part twice)" if p.min_sep is None else "")
      + f", max-par k = {p.max_participations}",
      "",
  ]
  header = (f"{'mechanism':<10} {'σ':>9} {'sens':>8} {'ρ':>10} {'ε':>9} {'ε optimistic':>13} "
            f"{'RMS noise':>10} {'max noise':>10} {'buffers':>8} {'opt. s':>7}")
  lines += [f"Mechanisms, built for (n={s.rounds}, b={p.planned_min_sep}, "
            f"k={p.max_participations}); {plan.sigma_rule()}:", header, "-" * len(header)]
  for m in plan.mechanisms:
    lines.append(
        f"{m.name:<10} {m.noise_multiplier:>9.4g} {m.planned.sensitivity:>8.4g} "
        f"{m.planned.rho:>10.4g} {m.planned.epsilon:>9.4g} {m.optimistic.epsilon:>13.4g} "
        f"{m.rms_noise:>10.4g} {m.max_noise:>10.4g} "
        f"{'-' if m.buffers is None else m.buffers:>8} {m.optimize_seconds:>7.1f}")
  if s.model_dimension is not None:
    lines += ["", f"Noise against signal for a model of d = {s.model_dimension} parameters "
              "(the noise guard's ratios; the training run adds the model's own):"]
    for m in plan.mechanisms:
      r = m.signal_to_noise
      lines.append(f"  {m.name:<10} " + ("no streaming noise" if r is None else
                   f"one round's noise {r.round_noise:.3g}× ζ; summed updates' noise "
                   f"{r.prefix_noise:.3g}× their largest signal nζ"))
  if s.b_min_sep:
    lines += ["", "With b-min-sep sampling instead of the device timer (Dong & Ganesh 2026: a "
              "client waits b − 1 rounds, then is sampled with probability p; secret draws), "
              "the σ the same ε needs — a Monte Carlo estimate, verified by a run's release:"]
    for m in plan.mechanisms:
      a = m.b_min_sep
      if a.get("min_sep") is None:
        lines.append(f"  {m.name:<10} not reachable: {a['why_not']}")
        continue
      where = (f", {a['availability_classes']} availability classes"
               if a.get("availability_classes", 1) > 1 else "")
      lines.append(
          f"  {m.name:<10} b = {a['min_sep']}{where}, p = {a['sampling_probability']:.4g}: σ "
          f"{a['noise_multiplier']:.4g} ± {a['noise_multiplier_standard_error']:.2g} for ε "
          f"{a['epsilon']:.4g} ({a['noise_reduction_percent']:+.1f} % less noise than "
          f"{m.noise_multiplier:.4g}; RMS noise {a['rms_noise']:.4g}; "
          f"{'exact' if a['exact_likelihood_ratio'] else 'bounded'} likelihood ratio)")
  job = plan.job_estimate()
  if job is not None:
    lines += ["", f"Training time on this machine (the training binaries' model of a round, "
              f"one local epoch; they add --client_epochs and the evaluations, and refuse a "
              f"job beyond --time_budget_hours): {resources.format_seconds(job.seconds)} — "
              f"{job.what}; {job.basis}"]
  lines += ["", "Robustness (paper 004 Fig. 6): if the realized min-sep comes out lower, at the "
            "same σ:"]
  for m in plan.mechanisms:
    cells = [f"b={r.min_sep} (k={r.max_participations}): ε {r.epsilon:.4g}, "
             f"RmsLoss ×{r.rms_loss / m.planned.rms_loss:.3f}" for r in m.robustness]
    lines.append(f"  {m.name:<10} " + "; ".join(cells))
  for name, why in plan.skipped:
    lines.append(f"skipped {name}: {why}")
  for warning in plan.warnings():
    lines.append(f"warning: {warning}")
  for m in plan.mechanisms:
    for note in m.notes:
      lines.append(f"note ({m.name}): {note}")
  if params_paths:
    lines += ["", "Train as planned (each mechanism's parameters were written):"]
    for m in plan.mechanisms:
      if m.buffers is None:  # No streaming noise (TreeAgg-Full decodes all rounds at once).
        lines.append(f"  {m.name}: not trainable (no streaming noise generator); shown for "
                     "comparison only")
      elif m.name in params_paths:
        lines.append("  " + " ".join(training_flags(plan, m, params_paths[m.name])))
  lines += ["", SCOPE]
  return "\n".join(lines)


def _fmt_list(values: Sequence[Any]) -> str:
  shown = ["none" if v is None else f"{v:g}" if isinstance(v, float) else str(v)
           for v in values[:12]]
  return ", ".join(shown) + (f", … ({len(values)} trials)" if len(values) > 12 else "")


def _fmt_range(values: Optional[Sequence[int]]) -> str:
  return "none: no device took part twice" if values is None else f"{values[0]}–{values[1]}"


def epsilon_figure(plan_dict: dict[str, Any]) -> Any:
  """ε vs rounds per mechanism (from `Plan.to_dict()` only)."""
  from dp_fl import writers  # pylint: disable=g-import-not-at-top
  figure, ax = writers.new_figure()
  s, p = plan_dict["settings"], plan_dict["prediction"]
  for m in plan_dict["mechanisms"]:
    rounds, eps = zip(*m["epsilon_vs_rounds"])
    ax.plot(rounds, eps, label=f"{m['name']} (σ = {m['noise_multiplier']:.4g})")
  if s.get("target_epsilon") is not None:
    ax.axhline(s["target_epsilon"], color="gray", linestyle=":", label="target ε")
  ax.set_xlabel("rounds")
  ax.set_ylabel(f"ε at δ = {s['delta']:g}")
  ax.set_title(f"Planned ε: N = {s['population']}, m = {s['report_goal']}, "
               f"b = {p['planned_min_sep']}, k = {p['max_participations']}", fontsize=9)
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8)
  return figure
