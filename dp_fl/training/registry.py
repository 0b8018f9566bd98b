"""What a `--mechanism` and a `--participation` name mean: one registry each.

An entry of `MECHANISMS` owns everything the training tier needs for one mechanism name:

    entry = registry.mechanism(config.mechanism)    # unknown names fail with the known ones
    entry.check_config(config)                      # participation it needs, σ > 0 if private
    mechanism = entry.load_or_build(config)         # DP-FTRL's C (None for the others)
    aggregator = entry.aggregator(config, mechanism, num_clients, noise_seed)
    entry.weighting                                 # how TFF weights clients
    accountant = entry.accountant(config, mechanism, num_clients)   # ε so far, reports
    sigma = entry.calibrate(config, target_epsilon) # σ for a planned schedule

`PARTICIPATIONS` maps each `--participation` name to the builder of its scheduler (the
participation package's own `KIND` registry restores them from checkpoints). No name is
compared as a string anywhere else in the training tier, and nothing falls back silently.

Imports of TensorFlow / TFF happen inside the methods that need them, so the configuration
(which validates names against this registry) stays importable without them.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence


from dp_fl.mechanisms import banded_inverse
from dp_fl.mechanisms import bsr
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import two_band
from dp_fl.participation import availability as availability_lib
from dp_fl.participation import base as participation_base
from dp_fl.participation import device_timer
from dp_fl.participation import sampling
from dp_fl.training import amplified
from dp_fl.training import calibration
from dp_fl.training import privacy as privacy_lib

if TYPE_CHECKING:
  from dp_fl.training import config as config_lib

MECHANISM_FILE = "mechanism.json"

UNIFORM = "uniform"
NUM_EXAMPLES = "num_examples"

VARIABLE_COHORTS = ("poisson", "cyclic_poisson")
"""Participations whose cohort size is random (it may exceed m)."""


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
  refused_participations: tuple[str, ...] = ()  # Variable-cohort schemes it cannot account.
  # Config fields that only some mechanisms read, of which this one reads these: a flag of
  # another mechanism's given for this one is refused, not ignored (`ignored_flags`).
  settings: tuple[str, ...] = ()

  def check_config(self, config: "config_lib.TrainingConfig") -> None:
    """Raises ValueError for settings this mechanism cannot run or account for."""
    if self.private and config.noise_multiplier == 0:
      raise ValueError(
          f"`noise_multiplier` must be > 0 for --mechanism={self.name} (σ = 0 gives no "
          f"privacy); use {' or '.join('--mechanism=' + n for n in non_private_names())} "
          "for non-private training.")
    if config.participation in self.refused_participations:
      raise ValueError(
          f"`mechanism`={self.name!r} is DP-FTRL; its correlated noise is accounted under "
          "Poisson sampling only group by group: use --participation=cyclic_poisson (with "
          "--mechanism=bandmf or dpsgd; --min_sep=1 is plain Poisson for dpsgd), "
          "--participation=balls_in_bins (any C), --mechanism=dpfedavg with Poisson, or a "
          "min-sep/device-timer participation.")

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
                      num_clients: Optional[int] = None) -> tuple[float, str]:
    """(ε, why) the planned schedule reaches with `config`'s calibrated noise: the target,
    unless a setting other than σ fixes the noise (then what it gives, <= the target, and
    `why` names that setting)."""
    del config, num_clients
    return target_epsilon, ""

  def calibrated_participation(self, config: "config_lib.TrainingConfig",
                               num_clients: Optional[int]
                               ) -> Optional[calibration.PlannedParticipation]:
    """The participation `calibrate` plans for, where its σ depends on one (None: not)."""
    del config, num_clients
    return None


# The last mechanism optimized in this process, by its build settings: `--calibrate_epsilon`
# optimizes C before the run starts (and writes nothing); the run then uses that very C.
_OPTIMIZED: dict[Any, catalog.Mechanism] = {}


class DpFtrlEntry(MechanismEntry):
  """DP-FTRL with a correlated-noise matrix mechanism C (paper 004, Alg. 1); under an
  amplifying participation (`amplified.AMPLIFICATIONS`) its σ and ε are amplified ones."""

  refused_participations = ("poisson",)  # Its amplification is cyclic_poisson's (G = 1).

  def __init__(self, name: str, description: str, banded: bool = False,
               settings: tuple[str, ...] = ()):
    self.name = name
    self.description = description
    self.banded = banded  # C is banded (cyclic Poisson's analysis applies).
    # Every DP-FTRL C can be loaded from a file and is built for (n, b, k); `settings` adds
    # the family's own knobs (BLT's buffers, the banded families' bands).
    self.settings = ("mechanism_params", "max_participations") + tuple(settings)

  def check_config(self, config):
    super().check_config(config)
    if (config.participation in amplified.BANDED_ONLY and not self.banded):
      raise ValueError(
          f"--participation={config.participation} needs a banded C (--mechanism="
          f"{' or '.join(n for n, e in MECHANISMS.items() if getattr(e, 'banded', False))}"
          f"); --mechanism={self.name}'s C is not banded. Use --participation=balls_in_bins "
          "for any C.")

  def load_or_build(self, config):
    """Loaded from the run directory when resuming (so a resumed run uses exactly the same
    C), else from `mechanism_params`, else optimized for (rounds, min_sep,
    max_participations). Writes nothing: the program saves it to the run directory once the
    whole configuration has been validated (`program.save_mechanism`), and refuses a
    mechanism.json that neither a config.json nor a checkpoint vouches for."""
    saved = os.path.join(config.root_dir, MECHANISM_FILE)
    source = saved if os.path.exists(saved) else config.mechanism_params
    build_args = dict(rounds=config.rounds, min_sep=config.min_sep,
                      max_participations=config.max_participations, buffers=config.blt_buffers,
                      bands=config.bands, optimize_for=None,  # The family's loss.
                      seed=config.seed)
    key = None if source else (self.name, tuple(sorted(build_args.items())))
    mechanism = _OPTIMIZED.get(key) if key else None
    if mechanism is None:
      mechanism = catalog.load_or_build(self.name, source, **build_args).mechanism
      if key:
        _OPTIMIZED.clear()  # Keep one: calibration's C, which the run then uses.
        _OPTIMIZED[key] = mechanism
    mechanism.check_rounds(config.rounds)
    return mechanism

  def aggregator(self, config, mechanism, num_clients, noise_seed=None):
    from dp_fl.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
    del num_clients
    return dp_ftrl.DPFTRLFactory(
        mechanism, clip_norm=config.clip_norm, noise_multiplier=config.noise_multiplier,
        clients_per_round=config.clients_per_round, rounds=config.rounds, seed=noise_seed)

  def accountant(self, config, mechanism, num_clients):
    amplification = amplified.AMPLIFICATIONS.get(config.participation)
    if amplification is not None:
      amplification.check(config, mechanism, num_clients)
      return amplification.accountant(config, mechanism, num_clients)
    return privacy_lib.MatrixMechanismAccountant(
        mechanism, config.noise_multiplier, config.clip_norm, config.clients_per_round,
        config.delta, scope=privacy_lib.release_scope(config, sampled=False))

  def calibrated_participation(self, config, num_clients):
    if config.participation in amplified.AMPLIFICATIONS:
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
    amplification = amplified.AMPLIFICATIONS.get(config.participation)
    if amplification is not None:
      if num_clients is None:
        raise ValueError(f"Calibrating σ under --participation={config.participation} needs "
                         "the task's population (its analysis depends on it).")
      amplification.check(config, mechanism, num_clients)
      return amplification.calibrate(config, mechanism, num_clients, target_epsilon)
    planned = planned_participation(config, num_clients)
    sens = mechanism.sensitivity(config.rounds, planned.min_sep,
                                 planned.max_participations).guaranteed
    sigma = zcdp.noise_multiplier_for_epsilon(sens, target_epsilon, config.delta)
    # The report computes ε from σ again: never a rounding above the target.
    while zcdp.matrix_mechanism_guarantee(sens, sigma, config.delta).epsilon > target_epsilon:
      sigma = math.nextafter(sigma, math.inf)
    return sigma


class DpFedAvgEntry(MechanismEntry):
  """DP-FedAvg with Poisson user sampling (paper 001, Alg. 1)."""

  name = "dpfedavg"
  description = "DP-FedAvg with Poisson user sampling (paper 001)"
  weighting = NUM_EXAMPLES
  participation = "poisson"  # Its accountant is the Poisson-subsampled Gaussian.

  def check_config(self, config):
    if config.participation != self.participation:
      raise ValueError(
          "`mechanism`='dpfedavg' is DP-FedAvg with Poisson user sampling (paper 001); it "
          f"needs --participation=poisson, got {config.participation!r}. For a fixed cohort "
          "use --mechanism=dpsgd.")
    super().check_config(config)

  @staticmethod
  def sampling_rate(config, num_clients: int) -> float:
    return config.population_sampling_rate or config.clients_per_round / num_clients

  def aggregator(self, config, mechanism, num_clients, noise_seed=None):
    from dp_fl.aggregators import dp_fedavg  # pylint: disable=g-import-not-at-top
    del mechanism
    return dp_fedavg.DPFedAvgFactory(
        clip_norm=config.clip_norm, noise_multiplier=config.noise_multiplier,
        sampling_probability=self.sampling_rate(config, num_clients),
        total_weight=float(num_clients), seed=noise_seed)

  def accountant(self, config, mechanism, num_clients):
    del mechanism
    # C̃ = qK: the Poisson rate the scheduler and the aggregator use.
    return privacy_lib.PoissonAccountant(
        num_clients, self.sampling_rate(config, num_clients) * num_clients,
        config.noise_multiplier, config.clip_norm, config.delta,
        scope=privacy_lib.release_scope(config, sampled=True))

  def calibrate(self, config, target_epsilon, num_clients=None):
    """The smallest z reaching `target_epsilon` for T = rounds (RDP accountant), for the
    population `num_clients` (q = m / N) or the one `--population_sampling_rate` implies."""
    from dp_fl.accounting import dpfedavg  # pylint: disable=g-import-not-at-top
    if config.population_sampling_rate is not None:
      population = config.clients_per_round / config.population_sampling_rate
    elif num_clients is not None:
      population = num_clients
    else:
      raise ValueError("Calibrating DP-FedAvg needs --population_sampling_rate (q), or the "
                       "task's population, to know the sampling rate.")
    return _cached(dpfedavg.noise_multiplier_for_epsilon, population, config.clients_per_round,
                   config.rounds, target_epsilon, config.delta, method=dpfedavg.RDP)


class NoNoiseEntry(MechanismEntry):
  """Non-private FedAvg: the mean over the clients that reported (`none`), or the DP
  aggregators' estimator without the noise (`clip`); both zero for an empty round."""

  private = False

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


class CpSgdEntry(MechanismEntry):
  """cpSGD, Rot(s_k(Bin(m, p)), HA) with secure aggregation (paper 000, Sec. 4.3).

  Its noise is set by m, the trials of each client's Bin(m, p) share: `--cpsgd_trials`, or
  the smallest m whose noise in the sum has at least the std σζ of the Gaussian-equivalent
  `--noise_multiplier` σ (which `--calibrate_epsilon` calibrates). Its analysis depends on the
  model's dimension, which the program passes (`needs_model_dimension`).
  """

  name = "cpsgd"
  description = "cpSGD: Rot(s_k(Bin(m, p)), HA), distributed Binomial noise (paper 000)"
  needs_model_dimension = True
  client_randomness = True
  refused_participations = ("poisson", "cyclic_poisson", "balls_in_bins")
  settings = ("cpsgd_levels", "cpsgd_trials", "cpsgd_p", "cpsgd_x_max")

  @staticmethod
  def check_workers(config) -> None:
    """With --workers, each worker returns to this process the sum of its clients' messages
    (`dp_fl/remote_workers.py`): refuses a cohort that would leave a worker too few clients."""
    if config.workers is None:
      return
    from dp_fl import remote_workers  # pylint: disable=g-import-not-at-top
    from dp_fl import runtime as runtime_lib  # pylint: disable=g-import-not-at-top
    count = len(runtime_lib.parse_workers(config.workers))
    least = remote_workers.MIN_CLIENTS_PER_SECURE_PARTIAL
    if config.clients_per_round < least * count:
      raise ValueError(
          f"--mechanism=cpsgd with --workers={config.workers} ({count} workers) and "
          f"--clients_per_round={config.clients_per_round}: each worker returns to this "
          "process the sum of its clients' integer messages, which carries only their noise "
          f"shares, so a worker needs at least {least} clients of a round (over one client "
          f"the sum is that client's message). Use at most "
          f"{max(1, config.clients_per_round // least)} workers, or --clients_per_round >= "
          f"{least * count}.")

  def check_config(self, config):
    from dp_fl.accounting import cpsgd as cpsgd_accounting  # pylint: disable=g-import-not-at-top
    self.check_workers(config)
    cpsgd_accounting.check_symmetric(config.cpsgd_p)
    if config.participation in self.refused_participations:
      raise ValueError(
          f"--mechanism=cpsgd is accounted without amplification by sampling (paper 000 "
          f"composes its rounds); --participation={config.participation} would suggest a "
          "sampled guarantee it does not give. Use --participation=device_timer, "
          "min_sep_rounds, uniform or cyclic.")
    if config.on_nonfinite == "discard":
      raise ValueError(
          "--mechanism=cpsgd with --on_nonfinite=discard: the server sees every round's sum "
          "(distributed DP trusts it with nothing else), so a discarded round is still "
          "released and the ledger would not count it. Use --on_nonfinite=stop.")
    if config.cpsgd_trials == 0:
      raise ValueError("--cpsgd_trials=0 adds no noise (no privacy); use m >= 1, or "
                       "--mechanism=clip for the non-private baseline.")
    if config.cpsgd_trials is None:
      super().check_config(config)

  @staticmethod
  def protocol(config, model_dimension: int, num_trials: Optional[int] = None):
    """The run's `cpsgd.Protocol` for a model of `model_dimension` parameters."""
    from dp_fl.mechanisms import cpsgd  # pylint: disable=g-import-not-at-top
    if model_dimension is None:
      raise ValueError("--mechanism=cpsgd needs the model's dimension (its analysis and "
                       "X_max depend on it).")
    x_max = config.cpsgd_x_max or cpsgd.rotated_x_max(
        config.clip_norm, config.clients_per_round, model_dimension, config.delta)
    spacing = 2.0 * x_max / (config.cpsgd_levels - 1)
    if num_trials is None:
      num_trials = config.cpsgd_trials
    if num_trials is None:  # The smallest m with w √(n m p(1−p)) >= σζ.
      per_trial = (spacing ** 2 * config.clients_per_round * config.cpsgd_p
                   * (1.0 - config.cpsgd_p))
      num_trials = max(1, math.ceil(
          (config.noise_multiplier * config.clip_norm) ** 2 / per_trial * (1 - 1e-12)))
    return cpsgd.Protocol(num_levels=config.cpsgd_levels, num_trials=int(num_trials),
                          p=config.cpsgd_p, x_max=x_max, clip_norm=config.clip_norm)

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

  def planned(self, config, num_clients=None) -> tuple[int, int]:
    """(k, smallest cohort) of the participation the run's scheduler realizes
    (`calibration.py`: emulated, worst trial, with a margin; full cohorts of
    `clients_per_round` where the population is not known)."""
    planned = planned_participation(config, num_clients)
    cohort = planned.min_cohort or config.clients_per_round
    return planned.max_participations, min(cohort, config.clients_per_round)

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
    if config.cpsgd_trials is None:
      return target_epsilon, ""
    return (self._epsilon_of_trials(config, config.cpsgd_trials, num_clients, model_dimension),
            f"--cpsgd_trials={config.cpsgd_trials} sets the noise, not the target")

  def calibrated_participation(self, config, num_clients):
    return planned_participation(config, num_clients)

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
    if config.cpsgd_trials is not None:
      reached = self._epsilon_of_trials(config, config.cpsgd_trials, num_clients,
                                        model_dimension)
      if reached > target_epsilon:
        raise ValueError(
            f"--cpsgd_trials={config.cpsgd_trials} gives ε = {reached:.4g} > the target "
            f"{target_epsilon:g} for the planned schedule (k = {k}, cohorts of at least "
            f"{cohort}); drop --cpsgd_trials to calibrate m, or raise it.")
      trials = config.cpsgd_trials
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


def expected_cohort(config: "config_lib.TrainingConfig", num_clients: int) -> float:
  """The DP aggregators' fixed denominator: qN under Poisson sampling (DP-FedAvg, paper 001
  Alg. 1), else the report goal m (DP-FTRL, paper 004 Alg. 1)."""
  if config.participation == "poisson":
    return DpFedAvgEntry.sampling_rate(config, num_clients) * num_clients
  return float(config.clients_per_round)


MECHANISMS: dict[str, MechanismEntry] = {e.name: e for e in (
    DpFtrlEntry("blt", "BLT-DP-FTRL (paper 004, Alg. 1 and 3)", settings=("blt_buffers",)),
    DpFtrlEntry("bandmf", "BandMF DP-FTRL (paper 004, ref. [8])", banded=True,
                settings=("bands",)),
    DpFtrlEntry("tree", "online TreeAgg DP-FTRL (Kairouz et al. 2021)"),
    DpFtrlEntry("dpsgd", "DP-SGD with a fixed cohort (C = I)", banded=True),
    DpFtrlEntry(two_band.NAME, two_band.TwoBandMechanism.description),
    DpFtrlEntry(bsr.NAME, "BSR DP-FTRL, the p-banded square root of A (Kalinin and Lampert "
                "2024)", banded=True, settings=("bands",)),
    DpFtrlEntry(banded_inverse.BISR, "BISR DP-FTRL, C⁻¹ the p-banded inverse square root of A "
                "(Kalinin et al. 2025)", settings=("bands",)),
    DpFtrlEntry(banded_inverse.BANDINVMF, "BandInvMF DP-FTRL, banded C⁻¹ optimized for RmsLoss "
                "under (n, b, k) (Kalinin et al. 2025)", settings=("bands",)),
    DpFedAvgEntry(),
    CpSgdEntry(),
    NoNoiseEntry("none", "non-private FedAvg", clipped=False),
    NoNoiseEntry("clip", "non-private: the DP estimator (updates clipped to ζ, summed, / the "
                 "fixed cohort) without the noise", clipped=True),
)}


def mechanism(name: str) -> MechanismEntry:
  """The entry of `--mechanism=name`; unknown names fail with the known ones."""
  entry = MECHANISMS.get(name)
  if entry is None:
    raise ValueError(f"`mechanism` must be one of {tuple(MECHANISMS)}; got {name!r}.")
  return entry


def non_private_names() -> tuple[str, ...]:
  return tuple(name for name, entry in MECHANISMS.items() if not entry.private)


def ignored_flags(given: Mapping[str, Any], runs: Sequence[tuple[str, str]]) -> list[str]:
  """Why each flag in `given` (field -> value, what the user passed) would be ignored by
  every one of `runs` ((mechanism, participation) pairs): a setting that only some
  mechanisms (`MechanismEntry.settings`) or participations (`PARTICIPATION_SETTINGS`) read,
  none of which is run. Empty when every given flag is read by some run."""
  out = []
  for field, value in given.items():
    readers = [name for name, e in MECHANISMS.items() if field in e.settings]
    used = [m for m, _ in runs if m in readers]
    kind = "mechanism"
    if not readers:
      readers = list(PARTICIPATION_SETTINGS.get(field, ()))
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
# Participation.

SchedulerBuilder = Callable[["config_lib.TrainingConfig", int, int],
                            participation_base.Scheduler]


def _device_timer(config, num_clients, seed, by_hours: bool):
  # The simulated time zones are public: from `config.seed`, not the secret seed.
  availability = availability_lib.simulated(config.availability, num_clients, config.seed)
  timer = ({"min_separation_hours": config.timer_hours} if by_hours
           else {"min_separation_rounds": config.min_sep})
  return device_timer.DeviceTimerScheduler(
      num_clients, config.clients_per_round, config.rounds, seed, availability=availability,
      round_duration_hours=config.round_hours, **timer)


PARTICIPATION_SETTINGS: dict[str, tuple[str, ...]] = {
    "timer_hours": ("device_timer",),
    "round_hours": ("device_timer", "min_sep_rounds"),
    "availability": ("device_timer", "min_sep_rounds"),
    "population_sampling_rate": ("poisson",),
}
"""Config fields only some participations' schedulers read, and which (`ignored_flags`)."""

AVAILABILITIES = availability_lib.SIMULATED
"""`--availability`: how the device-timer emulation simulates device availability."""

PARTICIPATIONS: dict[str, SchedulerBuilder] = {
    "device_timer": lambda c, n, s: _device_timer(c, n, s, by_hours=True),
    "min_sep_rounds": lambda c, n, s: _device_timer(c, n, s, by_hours=False),
    "poisson": lambda c, n, s: sampling.PoissonScheduler(
        n, c.population_sampling_rate or c.clients_per_round / n, s),
    "balls_in_bins": lambda c, n, s: sampling.BallsInBinsScheduler(
        n, amplified.BallsInBins.num_bins(c, n), s, fixed_size=c.clients_per_round),
    "cyclic_poisson": lambda c, n, s: sampling.CyclicPoissonScheduler(
        n, c.min_sep, amplified.CyclicPoisson.sampling_probability(c, n), s),
    "uniform": lambda c, n, s: sampling.UniformScheduler(n, c.clients_per_round, s),
    "cyclic": lambda c, n, s: sampling.CyclicScheduler(n, c.clients_per_round, s),
}
"""`--participation`: the builder of the scheduler that picks each round's clients."""



ROUND_SEPARATED = ("min_sep_rounds",)
"""Participations whose rule keeps `--min_sep` rows of C between two participations of a
client, whatever the population."""


def planned_participation(config: "config_lib.TrainingConfig", num_clients: Optional[int]
                          ) -> calibration.PlannedParticipation:
  """The participation `--calibrate_epsilon` plans for: the run's scheduler emulated
  (`calibration.py`), or its rule alone where the population is not known."""
  return calibration.planned_participation(
      config, num_clients, scheduler,
      rule_min_sep=config.min_sep if config.participation in ROUND_SEPARATED else None)


def scheduler(config: "config_lib.TrainingConfig", num_clients: int,
              seed: int) -> participation_base.Scheduler:
  """The scheduler of `config.participation`; unknown names fail with the known ones."""
  builder = PARTICIPATIONS.get(config.participation)
  if builder is None:
    raise ValueError(f"`participation` must be one of {tuple(PARTICIPATIONS)}; got "
                     f"{config.participation!r}.")
  return builder(config, num_clients, seed)
