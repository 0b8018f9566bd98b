"""What a `--mechanism` and a `--participation` name mean: one registry each.

An entry of `MECHANISMS` owns everything the training tier needs for one mechanism name:

    config = registry.make_config(**flag_values)    # the one way a TrainingConfig is built
    entry = registry.mechanism(config.mechanism)    # unknown names fail with the known ones
    entry.settings_type                             # its flags: config.mechanism_settings
    entry.check_config(config)                      # participation it needs, σ > 0 if private
    mechanism = entry.load_or_build(config)         # DP-FTRL's C (None for the others)
    aggregator = entry.aggregator(config, mechanism, num_clients, noise_seed)
    entry.weighting                                 # how TFF weights clients
    accountant = entry.accountant(config, mechanism, num_clients)   # ε so far, reports
    sigma = entry.calibrate(config, target_epsilon) # σ for a planned schedule

`PARTICIPATIONS` is dp_fl/participation/schemes.py's registry: each `--participation` name's
entry owns its scheduler, settings, cohort, separation, amplification and the mechanism
accountings it serves (`MechanismEntry.accounting`; `check_participation` asks the run's
scheme). No name is compared as a string anywhere else, and nothing falls back silently.

A mechanism's own flags are the fields of its entry's settings dataclass (`BltSettings`,
`BandedSettings`, `CpSgdSettings`, ...; `config_lib.setting` gives each its help text, and
marks it privacy-relevant and its earlier names): `cli` generates the flags from them,
`make_config` builds `config.mechanism_settings` from the flag values, `ignored_flags`
refuses a flag the run's mechanism does not read, and the settings validate themselves.
The participation's settings are dp_fl/participation/schemes.py's, the runtime's
`runtimes.py`'s. `make_config` and `config_from_dict` (config.json of every version, the
flat one of older runs included) end in `validate`, the checks that span the config and its
entries; the config module itself knows no names.

Imports of TensorFlow / TFF happen inside the methods that need them, so the configuration
stays importable without them.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
import os
from typing import Any, Callable, Mapping, Optional, Sequence

from dp_fl import _checks
from dp_fl.mechanisms import banded_inverse
from dp_fl.mechanisms import bsr
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import families  # pylint: disable=unused-import
from dp_fl.participation import base as participation_base
from dp_fl.participation import schemes
from dp_fl.training import amplified
from dp_fl.training import calibration
from dp_fl.training import config as config_lib
from dp_fl.training import privacy as privacy_lib
from dp_fl.training import runtimes

MECHANISM_FILE = "mechanism.json"

UNIFORM = "uniform"
NUM_EXAMPLES = "num_examples"


# ---------------------------------------------------------------------------------------
# The settings of the mechanisms that read flags of their own (paper 004 Alg. 1; paper 000).

_setting = config_lib.setting


@dataclasses.dataclass(frozen=True)
class AdaptiveClipSettings:
  """Adaptive clipping (Andrew et al., NeurIPS 2021): `--clip_norm` becomes ζ₀ and the clip
  norm follows a private estimate of the `target_unclipped_quantile` γ of the update norms
  (dp_fl/aggregators/quantile.py; its cost: dp_fl/accounting/adaptive_clipping.py)."""
  target_unclipped_quantile: Optional[float] = _setting(
      None, "γ: adapt the clip norm so this fraction of updates is unclipped (Andrew et al. "
      "2021; --clip_norm is the initial value); default: a fixed clip norm", privacy=True)
  clip_learning_rate: float = _setting(
      0.2, "η of the adaptive clip norm's geometric update ζ ← ζ·exp(−η(b̃ − γ))",
      privacy=True)  # Not in ε, but the released sequence: a resume keeps it.
  clip_search_step: float = _setting(
      2.0, "s₀: the adaptive clip norm starts with a search over log ζ (steps of ±s₀, halved "
      "at each reversal, until no larger than the geometric update's; post-processing of the "
      "same noised counts) so a ζ₀ far off costs a few rounds, not tens; 0: the geometric "
      "update from the first round", privacy=True)
  clip_count_stddev: Optional[float] = _setting(
      None, "σ_b: noise std of the adaptive clip norm's count of unclipped updates; default: "
      "the one whose noise multiplier gives the count --clip_budget_share of z⁻² (of ρ for "
      "C = I; the report states the realized share)",
      privacy=True)
  clip_budget_share: float = _setting(
      0.1, "the adaptive clip norm's share of the privacy budget (of ρ, or of z⁻² under "
      "Poisson sampling) when --clip_count_stddev is not given", privacy=True)

  def __post_init__(self):
    from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
    _checks.check_positive("clip_learning_rate", self.clip_learning_rate)
    _checks.check_in_range("clip_search_step", self.clip_search_step, 0.0,
                           adaptive_clipping.MAX_SEARCH_STEP,
                           why="a log-step of the clip norm, e.g. 2; 0 for no start search")
    adaptive_clipping.check_budget_share(self.clip_budget_share)
    if self.clip_count_stddev is not None:
      _checks.check_positive("clip_count_stddev", self.clip_count_stddev)
    if self.target_unclipped_quantile is not None:
      _checks.check_open_unit("target_unclipped_quantile", self.target_unclipped_quantile)
      return
    given = [f"--{f.name}={getattr(self, f.name)!r}"
             for f in dataclasses.fields(AdaptiveClipSettings)
             if f.name != "target_unclipped_quantile" and getattr(self, f.name) != f.default]
    if given:
      raise ValueError(f"{', '.join(given)} set(s) the adaptive clip norm, which is off "
                       "without --target_unclipped_quantile; add --target_unclipped_quantile="
                       "0.5 (say), or drop them.")

  @property
  def adaptive_clipping(self) -> bool:
    return self.target_unclipped_quantile is not None


@dataclasses.dataclass(frozen=True)
class DpFtrlSettings(AdaptiveClipSettings):
  """What every DP-FTRL C is loaded from or built for (paper 004, Alg. 1), and its clip norm."""
  mechanism_params: Optional[str] = _setting(
      None, "JSON file with mechanism parameters (from scripts/mechanism)", privacy=True)
  max_participations: Optional[int] = _setting(
      None, "k the mechanism is optimized for (default ceil(n/b))", privacy=True)

  def __post_init__(self):
    super().__post_init__()
    if self.max_participations is not None:
      _checks.check_positive_int("max_participations", self.max_participations)

  def build_args(self) -> dict[str, Any]:
    """The `catalog.build` arguments these settings give (besides n, b and the seed)."""
    return {"max_participations": self.max_participations}


@dataclasses.dataclass(frozen=True)
class BltSettings(DpFtrlSettings):
  """BLT (paper 004, Alg. 1 and 3): d, its buffers."""
  blt_buffers: int = _setting(4, "d: BLT buffers", privacy=True)

  def __post_init__(self):
    super().__post_init__()
    _checks.check_positive_int("blt_buffers", self.blt_buffers)

  def build_args(self):
    return {**super().build_args(), "buffers": self.blt_buffers}


@dataclasses.dataclass(frozen=True)
class BandedSettings(DpFtrlSettings):
  """The banded families: p, the bands of C (BandMF, BSR) or of C⁻¹ (BISR, BandInvMF)."""
  bands: Optional[int] = _setting(
      None, "p: bands of the banded matrix, C for bandmf/bsr, C⁻¹ for bisr/bandinvmf "
      "(default min(b, n); p − 1 model-sized buffers)", privacy=True,
      aliases=("bandmf_bands",))

  def __post_init__(self):
    super().__post_init__()
    if self.bands is not None:
      _checks.check_positive_int("bands", self.bands)

  def build_args(self):
    return {**super().build_args(), "bands": self.bands}


@dataclasses.dataclass(frozen=True)
class CpSgdSettings:
  """cpSGD's Binomial mechanism (paper 000, Sec. 4.3).

  Attributes:
    cpsgd_levels: k, the quantization levels of each coordinate (paper 000, Eq. 8).
    cpsgd_trials: m, the Binomial trials of each client's noise share; None: the smallest m
      whose noise in the sum is at least `noise_multiplier` × clip norm (what
      `--calibrate_epsilon` sets).
    cpsgd_p: p, each trial's success probability.
    cpsgd_x_max: X_max, the bound rotated coordinates are clipped to; None: Thm. 4's
      D √(2 log(2nd/δ)/d).
  """
  cpsgd_levels: int = _setting(16, "", privacy=True)
  cpsgd_trials: Optional[int] = _setting(None, "", privacy=True)
  cpsgd_p: float = _setting(0.5, "", privacy=True)
  cpsgd_x_max: Optional[float] = _setting(None, "", privacy=True)

  def __post_init__(self):
    _checks.check_in_range("cpsgd_levels", self.cpsgd_levels, 2, 2 ** 30, integer=True,
                           why="cpSGD quantizes each coordinate to k >= 2 levels; typical 2–256")
    if self.cpsgd_trials is not None:
      _checks.check_nonnegative_int("cpsgd_trials", self.cpsgd_trials)
    _checks.check_open_unit("cpsgd_p", self.cpsgd_p)
    if self.cpsgd_x_max is not None:
      _checks.check_positive("cpsgd_x_max", self.cpsgd_x_max)


@dataclasses.dataclass(frozen=True)
class DistributedDpSettings:
  """The distributed discrete Gaussian / Skellam (TFF's DistributedDpSumFactory).

  Attributes:
    ddp_bits: B, bits per coordinate of each client's message and of the secure sum's
      modulus 2^B (TFF scales the updates so the sum's 3.9 standard deviations fit).
    ddp_beta: β of TFF's stochastic rounding. β > 0 redraws the rounding until its norm
      meets a bound near c (Kairouz, Liu & Steinke 2021, Sec. 4), each draw with probability
      >= 1 − β; the default is the paper's e^(-1/2) = 0.6065 (at 14 bits on StackOverflow it
      needs 1.07× DP-SGD's noise, 0 needs 1.36×). 0 (TFF's default) rounds unconditionally
      and the sensitivity is the worst case c + γ√d' — what runs before the flag existed did
      (their saved configs read as 0).
  """
  ddp_bits: int = _setting(16, "", privacy=True)
  ddp_beta: float = _setting(math.exp(-0.5), "", privacy=True, absent=0.0)

  # TFF 0.87's own limit and dp_fl's β range (distributed_dp.MAX_BITS, MAX_BETA; without
  # importing TF here).
  MAX_BITS = 22
  MAX_BETA = 0.9

  def __post_init__(self):
    _checks.check_in_range("ddp_bits", self.ddp_bits, 1, self.MAX_BITS, integer=True,
                           why="bits per coordinate of the secure sum; the distributed DP "
                           "paper's runs use 12–18")
    _checks.check_in_range("ddp_beta", self.ddp_beta, 0.0, self.MAX_BETA,
                           why="β of the stochastic rounding: 0 unconditional, the paper's "
                           "runs e^(-1/2) = 0.6065")


class MechanismEntry(abc.ABC):
  """One `--mechanism` value: its aggregator, accountant, calibration and checks."""

  name: str = ""
  description: str = ""
  private: bool = True
  weighting: str = UNIFORM  # UNIFORM: each client counts once; NUM_EXAMPLES: by its examples.
  # The model's number of parameters is passed to aggregator, accountant and calibrate (as
  # `model_dimension=`) when True.
  needs_model_dimension: bool = False
  # The clients draw private randomness (their own noise shares): runs are not bitwise
  # reproducible, and a re-run round is a fresh release.
  client_randomness: bool = False
  # What its accounting needs of the participation (`schemes.ACCOUNTINGS`): each
  # participation scheme says which it serves (`schemes.Scheme.check_mechanism`).
  accounting: str = ""
  # The type of `config.mechanism_settings`: the flags this mechanism reads beyond the common
  # ones (a flag of another mechanism's given for this one is refused: `ignored_flags`).
  settings_type: type = config_lib.NoSettings

  def check_config(self, config: "config_lib.TrainingConfig") -> None:
    """Raises ValueError for settings this mechanism cannot run or account for."""
    if self.private and config.noise_multiplier == 0:
      raise ValueError(
          f"`noise_multiplier` must be > 0 for --mechanism={self.name} (σ = 0 gives no "
          f"privacy); use {' or '.join('--mechanism=' + n for n in non_private_names())} "
          "for non-private training.")
    self.check_participation(config)

  def check_participation(self, config: "config_lib.TrainingConfig") -> None:
    """Raises ValueError when the run's participation scheme refuses this mechanism."""
    schemes.scheme(config.participation).check_mechanism(
        self, [n for n, e in MECHANISMS.items() if getattr(e, "banded", False)])

  def load_or_build(self, config: "config_lib.TrainingConfig"
                    ) -> Optional[catalog.Mechanism]:
    """The matrix mechanism of the run (None when the mechanism has none)."""
    del config
    return None

  @abc.abstractmethod
  def aggregator(self, config: "config_lib.TrainingConfig", mechanism: Any,
                 num_clients: int, noise_seed: Optional[int] = None) -> Any:
    """The TFF aggregation factory; `noise_seed` None draws one from OS entropy."""

  def accountant(self, config: "config_lib.TrainingConfig", mechanism: Any,
                 num_clients: int) -> privacy_lib.Accountant:
    """How the run's ε is computed from the realized participation."""
    del config, mechanism, num_clients
    return privacy_lib.NoPrivacy()

  def calibrate(self, config: "config_lib.TrainingConfig", target_epsilon: float,
                num_clients: Optional[int] = None) -> float:
    """σ such that the planned schedule reaches `target_epsilon` at `config.delta`
    (`num_clients`: the task's population, when the mechanism's accounting needs it)."""
    del config, target_epsilon, num_clients
    raise ValueError(f"`--calibrate_epsilon` needs a private mechanism; --mechanism={self.name} "
                     "has no noise to calibrate.")

  def planned_epsilon(self, config: "config_lib.TrainingConfig", target_epsilon: float,
                      num_clients: Optional[int] = None, model_dimension: Optional[int] = None
                      ) -> tuple[float, str]:
    """(ε, why) the planned schedule reaches with `config`'s calibrated noise: the target,
    unless a setting other than σ fixes the noise (then what it gives, <= the target, and
    `why` names that setting)."""
    del config, num_clients, model_dimension
    return target_epsilon, ""

  def calibrated_participation(self, config: "config_lib.TrainingConfig",
                               num_clients: Optional[int]
                               ) -> Optional[calibration.PlannedParticipation]:
    """The participation `calibrate` plans for, where its σ depends on one (None: not)."""
    del config, num_clients
    return None

  def planned_epsilon_at(self, config: "config_lib.TrainingConfig", noise_multiplier: float,
                         num_clients: Optional[int], model_dimension: Optional[int] = None
                         ) -> Optional[float]:
    """The ε the planned schedule reaches with σ = `noise_multiplier` (what the noise guard
    suggests); None where this entry cannot re-plan it simply (`model_dimension`: passed to
    the entries that `needs_model_dimension`)."""
    del config, noise_multiplier, num_clients, model_dimension
    return None


# The last mechanism optimized in this process, by its build settings: `--calibrate_epsilon`
# optimizes C before the run starts (and writes nothing); the run then uses that very C.
_OPTIMIZED: dict[Any, catalog.Mechanism] = {}


class DpFtrlEntry(MechanismEntry):
  """DP-FTRL with a correlated-noise matrix mechanism C (paper 004, Alg. 1); under an
  amplifying participation (`amplified.of(scheme)`) its σ and ε are amplified ones."""

  accounting = schemes.CORRELATED

  def __init__(self, name: str, description: str, banded: bool = False,
               settings_type: type = DpFtrlSettings):
    self.name = name
    self.description = description
    self.banded = banded  # C is banded (cyclic Poisson's analysis applies).
    # Every DP-FTRL C can be loaded from a file and is built for (n, b, k): `DpFtrlSettings`,
    # or a subclass with the family's own knobs (BLT's buffers, the banded families' bands).
    self.settings_type = settings_type

  def check_config(self, config):
    super().check_config(config)
    if (config.mechanism_settings.adaptive_clipping
        and amplified.of(schemes.scheme(config.participation)) is not None):
      raise ValueError(
          f"--target_unclipped_quantile with --participation={config.participation}: the "
          "amplified analysis of this participation does not compose the adaptive clip "
          "norm's count releases, so its ε could not be stated. Use a fixed --clip_norm, or "
          "--participation=device_timer (min-separation, zCDP composition).")

  @staticmethod
  def count_stddev(config) -> Optional[float]:
    """σ_b of the adaptive clip norm's count (None for a fixed clip norm): the flag, or
    z_b = σ √((1 − s)/s) with s = `clip_budget_share` (the count's share of z⁻², which is its
    share of ρ when sens² = k, as for C = I; the report states the realized share). A function
    of privacy fields only: a resumed run with more rounds keeps the σ_b its rounds had."""
    from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
    settings = config.mechanism_settings
    if not settings.adaptive_clipping:
      return None
    if settings.clip_count_stddev is not None:
      return settings.clip_count_stddev
    return adaptive_clipping.count_stddev_of(
        adaptive_clipping.count_multiplier_for_share(config.noise_multiplier,
                                                     settings.clip_budget_share),
        adaptive_clipping.ZERO_OUT)

  def clip_estimator(self, config, num_clients: Optional[int] = None):
    """The run's `adaptive_clipping.ClipEstimator` (None for a fixed clip norm)."""
    from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
    del num_clients  # σ_b depends on no participation (`count_stddev`).
    return clip_estimator(config, self.count_stddev(config), adaptive_clipping.ZERO_OUT)

  def load_or_build(self, config):
    """Loaded from the run directory when resuming (so a resumed run uses exactly the same
    C), else from `mechanism_params`, else optimized for (rounds, min_sep,
    max_participations). Writes nothing: the program saves it to the run directory once the
    whole configuration has been validated (`program.save_mechanism`), and refuses a
    mechanism.json that neither a config.json nor a checkpoint vouches for."""
    saved = os.path.join(config.root_dir, MECHANISM_FILE)
    settings = config.mechanism_settings
    source = saved if os.path.exists(saved) else settings.mechanism_params
    build_args = dict(rounds=config.rounds, min_sep=config.min_sep, optimize_for=None,
                      seed=config.seed, **settings.build_args())  # None: the family's loss.
    key = None if source else (self.name, tuple(sorted(build_args.items())))
    mechanism = _OPTIMIZED.get(key) if key else None
    if mechanism is None:
      mechanism = catalog.load_or_build(self.name, source, **build_args).mechanism
      if key:
        _OPTIMIZED.clear()  # Keep one: calibration's C, which the run then uses.
        _OPTIMIZED[key] = mechanism
    mechanism.check_rounds(config.rounds)
    return mechanism

  def aggregator(self, config, mechanism, num_clients, noise_seed=None,
                 max_step_clip_norm=None):
    from dp_fl.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
    return dp_ftrl.DPFTRLFactory(
        mechanism, clip_norm=config.clip_norm, noise_multiplier=config.noise_multiplier,
        clients_per_round=config.clients_per_round, rounds=config.rounds, seed=noise_seed,
        adaptive=quantile_estimator(config, self.clip_estimator(config, num_clients),
                                    config.clients_per_round, max_step_clip_norm))

  def accountant(self, config, mechanism, num_clients):
    amplification = amplified.of(schemes.scheme(config.participation))
    if amplification is not None:
      amplification.check(config, mechanism, num_clients)
      return amplification.accountant(config, mechanism, num_clients)
    return privacy_lib.MatrixMechanismAccountant(
        mechanism, config.noise_multiplier, config.clip_norm, config.clients_per_round,
        config.delta, scope=privacy_lib.release_scope(config, sampled=False),
        clip_estimator=self.clip_estimator(config, num_clients))

  def planned_epsilon_at(self, config, noise_multiplier, num_clients):
    from dp_fl.accounting import report as report_lib  # pylint: disable=g-import-not-at-top
    if amplified.of(schemes.scheme(config.participation)) is not None:
      return None  # Re-planning an amplified σ is a Monte Carlo release of its own.
    changed = config.replace(noise_multiplier=noise_multiplier)
    planned = planned_participation(changed, num_clients)
    return report_lib.matrix_mechanism_report(
        self.load_or_build(changed), noise_multiplier,
        report_lib.Participation(config.rounds, planned.min_sep, planned.max_participations,
                                 source="configured"),
        config.delta, clip_estimator=self.clip_estimator(changed, num_clients)).epsilon

  def calibrated_participation(self, config, num_clients):
    if amplified.of(schemes.scheme(config.participation)) is not None:
      return None  # The amplified analyses plan for the scheme's own schedule.
    planned = planned_participation(config, num_clients)
    return dataclasses.replace(planned, min_cohort=None)  # DP-FTRL's sens ignores it.

  def calibrate(self, config, target_epsilon, num_clients=None):
    """σ = sens / √(2ρ*) with sens the mechanism's sensitivity (paper 004, Sec. 3.1) —
    exact, or a valid upper bound where only a lower bound is known (never the lower bound)
    — for the participation the run's scheduler realizes (`calibration.py`: emulated, worst
    trial, with a margin; not the configured min_sep / max_participations, which only say
    what C is optimized for). The σ returned gives the report's ε <= `target_epsilon` at
    that participation. Under an amplifying participation, the amplified σ for the task's
    population `num_clients` (`amplified.py`)."""
    from dp_fl.accounting import zcdp  # pylint: disable=g-import-not-at-top
    mechanism = self.load_or_build(config)
    amplification = amplified.of(schemes.scheme(config.participation))
    if amplification is not None:
      if num_clients is None:
        raise ValueError(f"Calibrating σ under --participation={config.participation} needs "
                         "the task's population (its analysis depends on it).")
      amplification.check(config, mechanism, num_clients)
      return amplification.calibrate(config, mechanism, num_clients, target_epsilon)
    planned = planned_participation(config, num_clients)
    sens = mechanism.sensitivity(config.rounds, planned.min_sep,
                                 planned.max_participations).guaranteed
    settings = config.mechanism_settings
    if not settings.adaptive_clipping:
      sigma = zcdp.noise_multiplier_for_epsilon(sens, target_epsilon, config.delta)
      # The report computes ε from σ again: never a rounding above the target.
      while zcdp.matrix_mechanism_guarantee(sens, sigma, config.delta).epsilon > target_epsilon:
        sigma = math.nextafter(sigma, math.inf)
      return sigma
    return self._calibrate_adaptive(config, target_epsilon, num_clients, sens,
                                    planned.max_participations)

  def _calibrate_adaptive(self, config, target_epsilon, num_clients, sens, participations):
    """σ of the updates when the adaptive clip norm's counts take their share of ρ*: the
    `clip_budget_share` (σ_b then follows σ, `count_stddev`), or what the given
    `--clip_count_stddev` costs for the planned k; the composed ε is then <= the target."""
    from dp_fl.accounting import zcdp  # pylint: disable=g-import-not-at-top
    settings = config.mechanism_settings
    total = zcdp.rho_for_epsilon(target_epsilon, config.delta)
    if settings.clip_count_stddev is None:
      # σ_b = σ √((1 − s)/s): ρ = (sens² + k s/(1 − s)) / 2σ² (`count_stddev`).
      share = settings.clip_budget_share
      sigma = math.sqrt((sens * sens + participations * share / (1.0 - share)) / (2.0 * total))
    else:
      spent = self.clip_estimator(config, num_clients).rho(participations)
      update_rho = total - spent
      if update_rho <= 0:
        raise ValueError(
            f"--clip_count_stddev={settings.clip_count_stddev} alone costs ρ = {spent:.4g} "
            f"over the planned {participations} participations, the whole budget of ε = "
            f"{target_epsilon:g} (ρ = {total:.4g}); raise it, or drop it to give the "
            f"estimator --clip_budget_share={settings.clip_budget_share:g} of the budget.")
      sigma = zcdp.noise_multiplier_for_rho(sens, update_rho)

    def composed_epsilon(sigma_):
      rho = (zcdp.rho_from_sensitivity(sens, sigma_) + self.clip_estimator(
          config.replace(noise_multiplier=sigma_), num_clients).rho(participations))
      return zcdp.epsilon_from_rho(rho, config.delta)

    while composed_epsilon(sigma) > target_epsilon:
      sigma = math.nextafter(sigma, math.inf) * (1 + 1e-12)
    return sigma


class DpFedAvgEntry(MechanismEntry):
  """DP-FedAvg with Poisson user sampling (paper 001, Alg. 1)."""

  name = "dpfedavg"
  description = "DP-FedAvg with Poisson user sampling (paper 001)"
  weighting = NUM_EXAMPLES
  accounting = schemes.POISSON_GAUSSIAN  # Its accountant: the Poisson-subsampled Gaussian.
  settings_type = AdaptiveClipSettings

  @staticmethod
  def clip_estimator(config):
    """The run's `adaptive_clipping.ClipEstimator` (None for a fixed clip norm): σ_b the
    flag's, or the one whose z_b⁻² is `clip_budget_share` of the effective z⁻² (Andrew et
    al.'s split: z_b = z_Δ √((1 − s)/s), with z_Δ = `noise_multiplier`)."""
    from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
    settings = config.mechanism_settings
    if not settings.adaptive_clipping:
      return None
    stddev = settings.clip_count_stddev
    if stddev is None:
      stddev = adaptive_clipping.count_stddev_of(
          adaptive_clipping.count_multiplier_for_share(config.noise_multiplier,
                                                       settings.clip_budget_share),
          adaptive_clipping.ADD_REMOVE)
    return clip_estimator(config, stddev, adaptive_clipping.ADD_REMOVE)

  def effective_noise_multiplier(self, config) -> float:
    """The z the Poisson accountant composes: `noise_multiplier`, or with adaptive clipping
    (z_Δ⁻² + z_b⁻²)^(−½) (Andrew et al., Thm. 1)."""
    from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
    estimator = self.clip_estimator(config)
    if estimator is None:
      return config.noise_multiplier
    return adaptive_clipping.effective_noise_multiplier(config.noise_multiplier,
                                                        estimator.noise_multiplier)

  def check_config(self, config):
    self.check_participation(config)
    super().check_config(config)

  @staticmethod
  def sampling_rate(config, num_clients: int) -> float:
    """q of the run's Poisson sampling (a scheme serving `POISSON_GAUSSIAN` has one)."""
    return schemes.scheme(config.participation).sampling_rate(config, num_clients)

  def planned_epsilon_at(self, config, noise_multiplier, num_clients):
    from dp_fl.accounting import dpfedavg  # pylint: disable=g-import-not-at-top
    changed = config.replace(noise_multiplier=noise_multiplier)
    rate = self.sampling_rate(config, num_clients)
    return dpfedavg.dpfedavg_epsilon(num_clients, rate * num_clients,
                                     self.effective_noise_multiplier(changed), config.rounds,
                                     config.delta, method=dpfedavg.RDP).epsilon

  def aggregator(self, config, mechanism, num_clients, noise_seed=None,
                 max_step_clip_norm=None):
    from dp_fl.aggregators import dp_fedavg  # pylint: disable=g-import-not-at-top
    del mechanism
    rate = self.sampling_rate(config, num_clients)
    return dp_fedavg.DPFedAvgFactory(
        clip_norm=config.clip_norm, noise_multiplier=config.noise_multiplier,
        sampling_probability=rate, total_weight=float(num_clients), seed=noise_seed,
        adaptive=quantile_estimator(config, self.clip_estimator(config), rate * num_clients,
                                    max_step_clip_norm))

  def accountant(self, config, mechanism, num_clients):
    del mechanism
    # C̃ = qK: the Poisson rate the scheduler and the aggregator use.
    return privacy_lib.PoissonAccountant(
        num_clients, self.sampling_rate(config, num_clients) * num_clients,
        self.effective_noise_multiplier(config), config.clip_norm, config.delta,
        scope=privacy_lib.release_scope(config, sampled=True),
        clip_estimator=self.clip_estimator(config), update_noise_multiplier=config.noise_multiplier)

  def calibrate(self, config, target_epsilon, num_clients=None):
    """The smallest z reaching `target_epsilon` for T = rounds (RDP accountant), for the
    population `num_clients` (q = m / N) or the one `--population_sampling_rate` implies."""
    from dp_fl.accounting import dpfedavg  # pylint: disable=g-import-not-at-top
    rate = config.participation_settings.population_sampling_rate
    if rate is not None:
      population = config.clients_per_round / rate
    elif num_clients is not None:
      population = num_clients
    else:
      raise ValueError("Calibrating DP-FedAvg needs --population_sampling_rate (q), or the "
                       "task's population, to know the sampling rate.")
    effective = _cached(dpfedavg.noise_multiplier_for_epsilon, population,
                        config.clients_per_round, config.rounds, target_epsilon, config.delta,
                        method=dpfedavg.RDP)
    settings = config.mechanism_settings
    if not settings.adaptive_clipping:
      return effective
    return self._update_noise_multiplier(config, effective)

  def _update_noise_multiplier(self, config, effective: float) -> float:
    """z_Δ whose effective multiplier with the adaptive clip norm's counts is at least
    `effective` (Andrew et al.'s split: z_Δ = (z⁻² − z_b⁻²)^(−½))."""
    from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
    settings = config.mechanism_settings
    if settings.clip_count_stddev is None:
      z_update = adaptive_clipping.split_noise_multiplier(effective,
                                                          settings.clip_budget_share)[0]
    else:
      z_count = self.clip_estimator(config).noise_multiplier
      if z_count <= effective:
        raise ValueError(
            f"--clip_count_stddev={settings.clip_count_stddev} gives the clip norm's counts "
            f"the noise multiplier z_b = {z_count:.4g}, at most the effective z = "
            f"{effective:.4g} the target needs: no noise on the updates could reach it. "
            "Raise it, or drop it to give the estimator --clip_budget_share of the budget.")
      z_update = (effective ** -2 - z_count ** -2) ** -0.5
    while self.effective_noise_multiplier(
        config.replace(noise_multiplier=z_update)) < effective:
      z_update = math.nextafter(z_update, math.inf) * (1 + 1e-12)
    return z_update


class NoNoiseEntry(MechanismEntry):
  """Non-private FedAvg: the mean over the clients that reported (`none`), or the DP
  aggregators' estimator without the noise (`clip`); both zero for an empty round."""

  private = False
  accounting = schemes.NOT_PRIVATE

  def __init__(self, name: str, description: str, clipped: bool):
    self.name = name
    self.description = description
    self.clipped = clipped

  def aggregator(self, config, mechanism, num_clients, noise_seed=None):
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    from dp_fl.aggregators import means  # pylint: disable=g-import-not-at-top
    del mechanism, noise_seed
    if not self.clipped:  # Plain FedAvg: the mean over the clients that reported.
      return means.cohort_mean_factory()
    # The DP presets' guard stack and estimator (sum / the fixed denominator of the DP
    # aggregators) without the noise: a clip-only run differs from a DP run by the noise
    # alone. The zeroing step matters: a client whose local training blew up to huge finite
    # values has an infinite L2 norm, and `tf.clip_by_global_norm` (TFF's clipping) turns
    # such an update into NaNs.
    from dp_fl.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
    from dp_fl.aggregators import guards  # pylint: disable=g-import-not-at-top
    return guards.nonfinite_zeroing_factory(tff.aggregators.zeroing_factory(
        dp_ftrl.DEFAULT_ZEROING_MULTIPLE * config.clip_norm,
        tff.aggregators.clipping_factory(config.clip_norm, means.cohort_mean_factory(
            expected_cohort(config, num_clients)))))


class DistributedEntry(MechanismEntry):
  """A mechanism whose clients add their own noise shares to integer messages summed by secure
  aggregation (cpSGD, the distributed discrete Gaussian, Skellam): every computed round is a
  release (`client_randomness`: logged before it runs), its rounds are composed without
  amplification (`COMPOSED`) at the smallest realized cohort, and its analysis depends on the
  model's dimension (`needs_model_dimension`)."""

  needs_model_dimension = True
  client_randomness = True
  accounting = schemes.COMPOSED  # Its rounds composed, without amplification by sampling.

  def check_workers(self, config) -> None:
    """With --workers, each worker returns to this process the sum of its clients' messages
    (`dp_fl/execution/remote_workers.py`): refuses a cohort that would leave a worker too few
    clients."""
    workers = runtimes.remote_workers(config)
    if workers is None:
      return
    from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
    from dp_fl.execution import runtime as runtime_lib  # pylint: disable=g-import-not-at-top
    count = len(runtime_lib.parse_workers(workers))
    least = remote_workers.MIN_CLIENTS_PER_SECURE_PARTIAL
    if config.clients_per_round < least * count:
      raise ValueError(
          f"--mechanism={self.name} with --workers={workers} ({count} workers) and "
          f"--clients_per_round={config.clients_per_round}: each worker returns to this "
          "process the sum of its clients' integer messages, which carries only their noise "
          f"shares, so a worker needs at least {least} clients of a round (over one client "
          f"the sum is that client's message). Use at most "
          f"{max(1, config.clients_per_round // least)} workers, or --clients_per_round >= "
          f"{least * count}.")

  def check_config(self, config):
    self.check_distributed(config)
    super().check_config(config)

  def check_distributed(self, config) -> None:
    """What every distributed-DP run needs: workers with enough clients each, and no
    discarded rounds (each is released all the same)."""
    self.check_workers(config)
    if config.on_nonfinite == "discard":
      raise ValueError(
          f"--mechanism={self.name} with --on_nonfinite=discard: the server sees every "
          "round's sum (distributed DP trusts it with nothing else), so a discarded round is "
          "still released and the ledger would not count it. Use --on_nonfinite=stop.")

  def planned(self, config, num_clients=None) -> tuple[int, int]:
    """(k, smallest cohort) of the participation the run's scheduler realizes
    (`calibration.py`: emulated, worst trial, with a margin; full cohorts of
    `clients_per_round` where the population is not known)."""
    planned = planned_participation(config, num_clients)
    cohort = planned.min_cohort or config.clients_per_round
    return planned.max_participations, min(cohort, config.clients_per_round)

  def calibrated_participation(self, config, num_clients):
    return planned_participation(config, num_clients)


class DistributedDpEntry(DistributedEntry):
  """The distributed discrete Gaussian (`ddgauss`; Kairouz, Liu & Steinke 2021) or the
  distributed Skellam mechanism (`skellam`; Agarwal, Kairouz & Liu 2021), TFF 0.87's own
  `DistributedDpSumFactory` (`dp_fl/aggregators/distributed_dp.py`): each client rotates,
  clips to c, scales, rounds and adds its integer noise share; the B-bit messages are summed
  modulo 2^B (`--ddp_bits`). `--noise_multiplier` is TFF's z (the central noise std over c);
  `--calibrate_epsilon` sets z by the mechanism's Rényi DP for the planned participation."""

  settings_type = DistributedDpSettings

  def __init__(self, name: str, description: str):
    self.name = name
    self.description = description

  def setting(self, config, model_dimension: Optional[int], noise_multiplier=None):
    """The run's `distributed_dp.Setting`: one round of m = `clients_per_round` clients."""
    from dp_fl.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
    if model_dimension is None:
      raise ValueError(f"--mechanism={self.name} needs the model's dimension (its scale and "
                       "sensitivities depend on it).")
    return distributed_dp.setting_at(
        self.name, config.noise_multiplier if noise_multiplier is None else noise_multiplier,
        config.clients_per_round, model_dimension, config.mechanism_settings.ddp_bits,
        config.delta, config.clip_norm, beta=config.mechanism_settings.ddp_beta)

  def aggregator(self, config, mechanism, num_clients, noise_seed=None, model_dimension=None):
    """TFF's factory in `DistributedDpMeanFactory`. The clients' noise is their own OS
    entropy, whatever `noise_seed` says (TFF's factory takes none): like cpSGD's shares, it
    is never reproducible."""
    from dp_fl.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
    del mechanism, num_clients, noise_seed
    self.setting(config, model_dimension)  # Refuses a B that cannot hold the sum.
    return distributed_dp.DistributedDpMeanFactory(
        self.name, noise_multiplier=config.noise_multiplier, clip_norm=config.clip_norm,
        bits=config.mechanism_settings.ddp_bits, clients_per_round=config.clients_per_round,
        beta=config.mechanism_settings.ddp_beta)

  def accountant(self, config, mechanism, num_clients, model_dimension=None):
    del mechanism, num_clients
    return privacy_lib.DistributedDpAccountant(
        self.setting(config, model_dimension), config.clip_norm, model_dimension,
        config.clients_per_round, config.delta, config.root_dir,
        scope=privacy_lib.distributed_scope(config, self.name))

  def calibrate(self, config, target_epsilon, num_clients=None, model_dimension=None):
    """The smallest z (to 0.1 %) whose ε for the participation the run's scheduler realizes
    — k participations, sums of between the smallest planned cohort and m shares — is <=
    `target_epsilon` (`distributed_dp.calibrated_setting`)."""
    from dp_fl.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
    if model_dimension is None:
      self.setting(config, model_dimension)  # Raises the clear error.
    k, cohort = self.planned(config, num_clients)
    setting = _cached(distributed_dp.calibrated_setting, self.name, target_epsilon,
                      config.delta, config.clients_per_round, model_dimension,
                      config.mechanism_settings.ddp_bits, config.clip_norm,
                      fewest_clients=cohort, releases=k, adjacency=distributed_dp.ZERO_OUT,
                      beta=config.mechanism_settings.ddp_beta)
    return setting.noise_multiplier

  def planned_epsilon_at(self, config, noise_multiplier, num_clients, model_dimension=None):
    if model_dimension is None:
      return None
    from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
    k, cohort = self.planned(config, num_clients)
    return self.setting(config, model_dimension, noise_multiplier).composed_epsilon(
        cohort, config.clients_per_round, k, config.delta, adaptive_clipping.ZERO_OUT)[0]


class CpSgdEntry(DistributedEntry):
  """cpSGD, Rot(s_k(Bin(m, p)), HA) with secure aggregation (paper 000, Sec. 4.3).

  Its noise is set by m, the trials of each client's Bin(m, p) share: `--cpsgd_trials`, or
  the smallest m whose noise in the sum has at least the std σζ of the Gaussian-equivalent
  `--noise_multiplier` σ (which `--calibrate_epsilon` calibrates). Its analysis depends on the
  model's dimension, which the program passes (`needs_model_dimension`).
  """

  name = "cpsgd"
  description = "cpSGD: Rot(s_k(Bin(m, p)), HA), distributed Binomial noise (paper 000)"
  settings_type = CpSgdSettings

  def check_config(self, config):
    from dp_fl.accounting import cpsgd as cpsgd_accounting  # pylint: disable=g-import-not-at-top
    settings = config.mechanism_settings
    cpsgd_accounting.check_symmetric(settings.cpsgd_p)
    if settings.cpsgd_trials == 0:
      raise ValueError("--cpsgd_trials=0 adds no noise (no privacy); use m >= 1, or "
                       "--mechanism=clip for the non-private baseline.")
    if settings.cpsgd_trials is None:
      super().check_config(config)
    else:  # m sets the noise: σ may be 0.
      self.check_distributed(config)
      self.check_participation(config)

  @staticmethod
  def protocol(config, model_dimension: int, num_trials: Optional[int] = None):
    """The run's `cpsgd.Protocol` for a model of `model_dimension` parameters."""
    from dp_fl.mechanisms import cpsgd  # pylint: disable=g-import-not-at-top
    if model_dimension is None:
      raise ValueError("--mechanism=cpsgd needs the model's dimension (its analysis and "
                       "X_max depend on it).")
    settings = config.mechanism_settings
    x_max = settings.cpsgd_x_max or cpsgd.rotated_x_max(
        config.clip_norm, config.clients_per_round, model_dimension, config.delta)
    spacing = 2.0 * x_max / (settings.cpsgd_levels - 1)
    if num_trials is None:
      num_trials = settings.cpsgd_trials
    if num_trials is None:  # The smallest m with w √(n m p(1−p)) >= σζ.
      per_trial = (spacing ** 2 * config.clients_per_round * settings.cpsgd_p
                   * (1.0 - settings.cpsgd_p))
      num_trials = max(1, math.ceil(
          (config.noise_multiplier * config.clip_norm) ** 2 / per_trial * (1 - 1e-12)))
    return cpsgd.Protocol(num_levels=settings.cpsgd_levels, num_trials=int(num_trials),
                          p=settings.cpsgd_p, x_max=x_max, clip_norm=config.clip_norm)

  def aggregator(self, config, mechanism, num_clients, noise_seed=None, model_dimension=None):
    from dp_fl.aggregators import cpsgd  # pylint: disable=g-import-not-at-top
    del mechanism, num_clients
    return cpsgd.CpSgdFactory(self.protocol(config, model_dimension),
                              clients_per_round=config.clients_per_round, seed=noise_seed)

  def accountant(self, config, mechanism, num_clients, model_dimension=None):
    from dp_fl.mechanisms import cpsgd  # pylint: disable=g-import-not-at-top
    del mechanism, num_clients
    protocol = self.protocol(config, model_dimension)
    return privacy_lib.BinomialAccountant(
        protocol, cpsgd.padded_dimension(model_dimension),
        cpsgd.secure_sum_bits(config.clients_per_round, protocol.num_levels,
                              protocol.num_trials),
        self.noise_multiplier(config, protocol), config.delta, config.root_dir,
        scope=privacy_lib.distributed_scope(config))

  @staticmethod
  def noise_multiplier(config, protocol) -> float:
    """σ of the Gaussian with the same noise std in the sum: w √(n m p(1−p)) / ζ."""
    return protocol.noise_std_of_sum(config.clients_per_round) / config.clip_norm

  def _epsilon_of_trials(self, config, trials, num_clients, model_dimension) -> float:
    """ε of m = `trials` for the planned participation (k, smallest cohort)."""
    from dp_fl.mechanisms import cpsgd  # pylint: disable=g-import-not-at-top
    base = self.protocol(config, model_dimension, num_trials=1)
    k, cohort = self.planned(config, num_clients)
    return _composed_epsilon(base.num_levels, int(trials), base.p, base.x_max, base.clip_norm,
                             cpsgd.padded_dimension(model_dimension), cohort, k, config.delta)

  def planned_epsilon(self, config, target_epsilon, num_clients=None, model_dimension=None):
    """With `--cpsgd_trials` the noise is m's, not the target's: the ε m gives for the
    planned participation (what the report will say if the run realizes it)."""
    trials = config.mechanism_settings.cpsgd_trials
    if trials is None:
      return target_epsilon, ""
    return (self._epsilon_of_trials(config, trials, num_clients, model_dimension),
            f"--cpsgd_trials={trials} sets the noise, not the target")

  def calibrate(self, config, target_epsilon, num_clients=None, model_dimension=None):
    """σ (Gaussian-equivalent) of the smallest m whose ε for the participation the run's
    scheduler realizes — k participations, the smallest cohort (`planned`) — is <=
    `target_epsilon`; with `--cpsgd_trials` given, checks that its m reaches the target."""
    from dp_fl.accounting import cpsgd as cpsgd_accounting  # pylint: disable=g-import-not-at-top
    from dp_fl.mechanisms import cpsgd  # pylint: disable=g-import-not-at-top
    base = self.protocol(config, model_dimension, num_trials=1)
    dimension = cpsgd.padded_dimension(model_dimension)
    k, cohort = self.planned(config, num_clients)
    args = (base.num_levels, base.p, base.x_max, base.clip_norm, dimension, cohort, k)
    trials = config.mechanism_settings.cpsgd_trials
    if trials is not None:
      reached = self._epsilon_of_trials(config, trials, num_clients, model_dimension)
      if reached > target_epsilon:
        raise ValueError(
            f"--cpsgd_trials={trials} gives ε = {reached:.4g} > the target "
            f"{target_epsilon:g} for the planned schedule (k = {k}, cohorts of at least "
            f"{cohort}); drop --cpsgd_trials to calibrate m, or raise it.")
    else:
      trials = _cached(cpsgd_accounting.trials_for_epsilon, *args, target_epsilon,
                       config.delta)
    sigma = self.noise_multiplier(config, self.protocol(config, model_dimension, trials))
    # σ² ζ² / per-trial must give back at least m through `protocol`'s ceil (float rounding).
    while self.protocol(config.replace(noise_multiplier=sigma, cpsgd_trials=None),
                        model_dimension).num_trials < trials:
      sigma = math.nextafter(sigma, math.inf)
    return sigma


@functools.lru_cache(maxsize=8)
def _composed_epsilon(*args) -> float:
  """cpSGD's composed ε (`accounting.cpsgd.composed_epsilon`), once per settings in this
  process: calibration checks a given m, then the plan printed states what it gives."""
  from dp_fl.accounting import cpsgd as cpsgd_accounting  # pylint: disable=g-import-not-at-top
  return cpsgd_accounting.composed_epsilon(*args).epsilon


@functools.lru_cache(maxsize=32)
def _cached(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
  """`fn(*args, **kwargs)` of a pure calibration routine, once per arguments in this process
  (compare calibrates a row for each seed it runs; most analyses do not depend on it)."""
  return fn(*args, **kwargs)


def clip_estimator(config: "config_lib.TrainingConfig", count_stddev: Optional[float],
                   adjacency: str):
  """The `adaptive_clipping.ClipEstimator` of `config`'s adaptive clip norm with σ_b =
  `count_stddev` (None when the clip norm is fixed)."""
  from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
  settings = config.mechanism_settings
  if not getattr(settings, "adaptive_clipping", False):
    return None
  return adaptive_clipping.ClipEstimator(
      settings.target_unclipped_quantile, settings.clip_learning_rate, count_stddev,
      adjacency)


def quantile_estimator(config: "config_lib.TrainingConfig", estimator: Any,
                       expected_count: float, max_step_clip_norm: Optional[float] = None):
  """The aggregators' `quantile.QuantileEstimator` of a `ClipEstimator` (None: fixed ζ), from
  ζ₀ = `--clip_norm` with denominator `expected_count` (the cohort the aggregator divides
  by) and the noise guard's step cap `max_step_clip_norm`."""
  if estimator is None:
    return None
  from dp_fl.aggregators import quantile  # pylint: disable=g-import-not-at-top
  return quantile.QuantileEstimator(
      initial_estimate=config.clip_norm, target_quantile=estimator.target_quantile,
      learning_rate=estimator.learning_rate, count_stddev=estimator.count_stddev,
      expected_count=expected_count, max_step_clip_norm=max_step_clip_norm,
      search_step=config.mechanism_settings.clip_search_step)


def expected_cohort(config: "config_lib.TrainingConfig", num_clients: int) -> float:
  """The DP aggregators' fixed denominator: the participation scheme's expected cohort (qN
  under Poisson sampling, paper 001 Alg. 1; else the report goal m, paper 004 Alg. 1)."""
  return schemes.scheme(config.participation).expected_cohort(config, num_clients)


_DP_FTRL_ENTRIES = (
    DpFtrlEntry("blt", "BLT-DP-FTRL (paper 004, Alg. 1 and 3)", settings_type=BltSettings),
    DpFtrlEntry("bandmf", "BandMF DP-FTRL (paper 004, ref. [8])", banded=True,
                settings_type=BandedSettings),
    DpFtrlEntry("tree", "online TreeAgg DP-FTRL (Kairouz et al. 2021)"),
    DpFtrlEntry("dpsgd", "DP-SGD with a fixed cohort (C = I)", banded=True),
    DpFtrlEntry(bsr.NAME, "BSR DP-FTRL, the p-banded square root of A (Kalinin and Lampert "
                "2024)", banded=True, settings_type=BandedSettings),
    DpFtrlEntry(banded_inverse.BISR, "BISR DP-FTRL, C⁻¹ the p-banded inverse square root of A "
                "(Kalinin et al. 2025)", settings_type=BandedSettings),
    DpFtrlEntry(banded_inverse.BANDINVMF, "BandInvMF DP-FTRL, banded C⁻¹ optimized for RmsLoss "
                "under (n, b, k) (Kalinin et al. 2025)", settings_type=BandedSettings),
)
# The settings type of each `catalog.Family.knobs`.
SETTINGS_OF_KNOBS: dict[str, type] = {"": DpFtrlSettings, "bands": BandedSettings,
                                      "blt": BltSettings}


def _family_entries(listed: Sequence[str]) -> tuple[DpFtrlEntry, ...]:
  """A DP-FTRL entry for every catalog family that trains and is not in `listed`: a mechanism
  module that registers its family (`dp_fl.mechanisms.families` imports every one) trains
  with `--mechanism=<its name>` — the README recipe's module + test, no line here."""
  return tuple(
      DpFtrlEntry(f.name, f.description, banded=f.banded,
                  settings_type=SETTINGS_OF_KNOBS[f.knobs])
      for f in map(catalog.family, catalog.names()) if f.trains and f.name not in listed)


MECHANISMS: dict[str, MechanismEntry] = {e.name: e for e in (
    *_DP_FTRL_ENTRIES,
    *_family_entries([e.name for e in _DP_FTRL_ENTRIES]),
    DpFedAvgEntry(),
    CpSgdEntry(),
    DistributedDpEntry("ddgauss", "the distributed discrete Gaussian (Kairouz, Liu & Steinke "
                       "2021) on TFF's DistributedDpSumFactory, B-bit secure sums"),
    DistributedDpEntry("skellam", "the distributed Skellam mechanism (Agarwal, Kairouz & Liu "
                       "2021) on TFF's DistributedDpSumFactory, B-bit secure sums"),
    NoNoiseEntry("none", "non-private FedAvg", clipped=False),
    NoNoiseEntry("clip", "non-private: the DP estimator (updates clipped to ζ, summed, / the "
                 "fixed cohort) without the noise", clipped=True),
)}


ADAPTIVE_VARIANT = "+adaptive"
"""A compared row `<mechanism>+adaptive`: the mechanism with adaptive clipping from its tuned
ζ (Andrew et al. 2021), at `ADAPTIVE_SETTINGS` unless the user's flags set them."""
ADAPTIVE_SETTINGS = {"target_unclipped_quantile": 0.5}
"""γ = 0.5 (Andrew et al.'s median) with their η = 0.2 after the start search (the
`clip_search_step` default), which brackets a ζ₀ 100× off in a few rounds. With η = 1 (what
these rows used before the search existed) ζ swung ×1.6 between rounds and the adaptive BLT
and BandMF runs lost to the tuned ζ on the StackOverflow quick job (docs/RESULTS.md)."""


def variant(label: str) -> tuple[str, dict[str, Any]]:
  """(mechanism, the settings the row's variant adds) of a compared row's label: `blt`, or
  `blt+adaptive` (only for mechanisms whose settings have an adaptive clip norm)."""
  if not label.endswith(ADAPTIVE_VARIANT):
    mechanism(label)
    return label, {}
  name = label[:-len(ADAPTIVE_VARIANT)]
  adaptive = [n for n, e in MECHANISMS.items()
              if "target_unclipped_quantile" in _field_names(e.settings_type)]
  if name not in adaptive:
    mechanism(name)  # Unknown names fail with the known ones.
    raise ValueError(f"`{label}`: --mechanism={name} has no adaptive clip norm; the variant "
                     f"{ADAPTIVE_VARIANT} applies to {', '.join(adaptive)}.")
  return name, dict(ADAPTIVE_SETTINGS)


def mechanism(name: str) -> MechanismEntry:
  """The entry of `--mechanism=name`; unknown names fail with the known ones."""
  entry = MECHANISMS.get(name)
  if entry is None:
    raise ValueError(f"`mechanism` must be one of {tuple(MECHANISMS)}; got {name!r}.")
  return entry


def non_private_names() -> tuple[str, ...]:
  return tuple(name for name, entry in MECHANISMS.items() if not entry.private)


def ignored_flags(given: Mapping[str, Any], runs: Sequence[tuple[str, str]]) -> list[str]:
  """Why each flag in `given` (flag -> value, what the user passed) would be ignored by
  every one of `runs` ((mechanism, participation) pairs): a setting that only some
  mechanisms (`MechanismEntry.settings_type`) or participations (`schemes.readers`) read,
  none of which is run. Empty when every given flag is read by some run."""
  out = []
  for field, value in given.items():
    readers = [name for name, e in MECHANISMS.items()
               if field in _field_names(e.settings_type)]
    used = [m for m, _ in runs if m in readers]
    kind = "mechanism"
    if not readers:
      readers = list(schemes.readers(field))
      used = [p for _, p in runs if p in readers]
      kind = "participation"
    if not readers or used:
      continue
    ran = sorted({m if kind == "mechanism" else p for m, p in runs})
    out.append(
        f"--{field}={value!r} is read only by --{kind}={' or '.join(readers)}; "
        f"--{kind}={' and '.join(ran)} would ignore it. Drop --{field}, or pass "
        f"--{kind}={readers[0]}.")
  return out


# ---------------------------------------------------------------------------------------
# Configs: built from flag values, read from config.json of any version, validated whole.

_NAME_DEFAULTS = {f.name: f.default for f in dataclasses.fields(config_lib.TrainingConfig)
                  if f.name in config_lib.NAMES}
_COMMON = tuple(f.name for f in dataclasses.fields(config_lib.TrainingConfig)
                if f.name not in config_lib.SETTINGS)


def _field_names(settings_type: type) -> tuple[str, ...]:
  return tuple(f.name for f in dataclasses.fields(settings_type))


def setting_fields() -> dict[str, tuple[str, dataclasses.Field]]:
  """Every flag of a settings dataclass once: name -> (kind, field), the kinds in the order
  mechanism (in `MECHANISMS`' order), participation, runtime."""
  out: dict[str, tuple[str, dataclasses.Field]] = {}
  for entry in MECHANISMS.values():
    for field in dataclasses.fields(entry.settings_type):
      out.setdefault(field.name, ("mechanism", field))
  for kind, fields in (("participation", schemes.setting_fields()),
                       ("runtime", runtimes.setting_fields())):
    for name, field in fields.items():
      out.setdefault(name, (kind, field))
  return out


def make_config(**values: Any) -> config_lib.TrainingConfig:
  """The validated TrainingConfig of flag values: the common fields and every setting by its
  flag name (what `config.flags()` returns; earlier names of a setting accepted).

  `config.mechanism_settings` is the run's mechanism entry's `settings_type` built from the
  values it declares (the others are left at their defaults), likewise the participation's
  and the runtime's (`runtimes.settings_from`). A value of a setting the run's mechanism or
  participation does not read is validated all the same, then not kept: the binaries refuse
  such a flag (`ignored_flags`), and a saved config of an older version holds every one.
  """
  flags = setting_fields()
  for name, (_, field) in flags.items():  # Earlier names.
    for alias in field.metadata.get("aliases", ()):
      if alias in values and name not in values:
        values[name] = values.pop(alias)
  unknown = sorted(set(values) - set(_COMMON) - set(flags))
  if unknown:
    raise ValueError(f"Unknown training config fields {unknown}; known: "
                     f"{sorted(set(_COMMON) | set(flags))}.")
  names = {**_NAME_DEFAULTS, **{k: values[k] for k in config_lib.NAMES if k in values}}
  entry = mechanism(names["mechanism"])
  scheme = schemes.scheme(names["participation"])
  for settings_type in dict.fromkeys([e.settings_type for e in MECHANISMS.values()]
                                     + [s.settings_type for s in schemes.SCHEMES.values()]):
    _settings(settings_type, values)  # Every value given is checked, read or not.
  names["runtime"], runtime_settings = runtimes.settings_from(values, names["runtime"])
  config = config_lib.TrainingConfig(
      **{k: v for k, v in values.items() if k in _COMMON and k not in names}, **names,
      mechanism_settings=_settings(entry.settings_type, values),
      participation_settings=scheme.settings_from(values),
      runtime_settings=runtime_settings)
  validate(config)
  return config


def _settings(settings_type: type, values: Mapping[str, Any]) -> Any:
  """`settings_type` with the fields `values` gives (validated by its `__post_init__`)."""
  own = _field_names(settings_type)
  return settings_type(**{k: v for k, v in values.items() if k in own})


def validate(config: config_lib.TrainingConfig) -> None:
  """Raises ValueError unless `config`'s names are known, each of its settings has the type
  its entry declares, and the entries accept the whole (`MechanismEntry.check_config`: the
  participation a mechanism needs, σ > 0 if private, ...)."""
  entry = mechanism(config.mechanism)
  expected = (entry.settings_type, schemes.scheme(config.participation).settings_type,
              runtimes.settings_type(config.runtime))
  for field, settings_type in zip(config_lib.SETTINGS, expected):
    if type(getattr(config, field)) is not settings_type:
      raise ValueError(
          f"`{field}` must be a {settings_type.__name__} for --mechanism={config.mechanism}, "
          f"--participation={config.participation}, --runtime={config.runtime}; got "
          f"{getattr(config, field)!r}. Build configs with registry.make_config.")
  entry.check_config(config)


def _with_absent_values(values: dict[str, Any]) -> dict[str, Any]:
  """`values` of a saved config, with the value a setting had before it existed wherever the
  saved config lacks one whose default changed since (`settings.setting`'s `absent`)."""
  for name, (_, field) in setting_fields().items():
    given = (name,) + tuple(field.metadata.get("aliases", ()))
    if "absent" in field.metadata and not any(key in values for key in given):
      values[name] = field.metadata["absent"]
  return values


def config_from_dict(data: Mapping[str, Any]) -> config_lib.TrainingConfig:
  """The validated config saved as `data` (`TrainingConfig.to_dict()`, config.json): its
  settings nested under `mechanism_settings`, ... (this version), or every field flat, as
  older versions wrote it (earlier names of a setting included)."""
  if not isinstance(data, Mapping):
    raise ValueError(f"A training config must be a JSON object; got {type(data).__name__}.")
  values = {k: v for k, v in data.items() if k not in config_lib.SETTINGS}
  nested = [name for name in config_lib.SETTINGS if name in data]
  if not nested:
    return make_config(**_with_absent_values(values))  # An older version's flat config.json.
  unknown = sorted(set(values) - set(_COMMON))
  if unknown:
    raise ValueError(f"Unknown training config fields {unknown}; known: "
                     f"{sorted(set(_COMMON) | set(config_lib.SETTINGS))}.")
  for name in nested:
    section = data[name]
    if not isinstance(section, Mapping) or set(section) & set(values):
      raise ValueError(f"`{name}` of a saved training config must be a JSON object of its "
                       f"settings; got {section!r}.")
    values.update(section)
  config = make_config(**_with_absent_values(values))
  for name in nested:
    known = _field_names(type(getattr(config, name)))
    stray = sorted(set(data[name]) - set(known))
    if stray:
      raise ValueError(f"Unknown {name} fields {stray} for --mechanism={config.mechanism}, "
                       f"--participation={config.participation}, --runtime="
                       f"{config.runtime}; known: {list(known)}.")
  return config


# ---------------------------------------------------------------------------------------
# Participation: the entries of dp_fl/participation/schemes.py.

PARTICIPATIONS = schemes.SCHEMES
"""`--participation`: each scheme's entry (`schemes.Scheme`), by name."""


def planned_participation(config: "config_lib.TrainingConfig", num_clients: Optional[int]
                          ) -> calibration.PlannedParticipation:
  """The participation `--calibrate_epsilon` plans for: the run's scheduler emulated
  (`calibration.py`), or its rule alone where the population is not known."""
  return calibration.planned_participation(
      config, num_clients, scheduler,
      rule_min_sep=schemes.scheme(config.participation).rule_separation(config))


def scheduler(config: "config_lib.TrainingConfig", num_clients: int,
              seed: int) -> participation_base.Scheduler:
  """The scheduler of `config.participation`; unknown names fail with the known ones."""
  return schemes.scheme(config.participation).scheduler(config, num_clients, seed)
