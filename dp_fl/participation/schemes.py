"""What a `--participation` name means: one registry entry per participation scheme.

An entry of `SCHEMES` owns every fact the rest of the code needs about its scheme — no other
module compares participation names:

    scheme = schemes.scheme(config.participation)   # unknown names fail with the known ones
    scheme.settings_type                            # its flags: config.participation_settings
    scheduler = scheme.scheduler(config, num_clients, seed)   # the run's Scheduler
    scheme.variable_cohorts                         # cohorts of random size (may exceed m)
    scheme.expected_cohort(config, num_clients)     # the DP aggregators' fixed denominator
    scheme.rule_separation(config)                  # min-sep in rows of C its rule keeps
    scheme.check_mechanism(mechanism_entry, ...)    # the mechanisms it refuses, and why
    scheme.amplification                            # its amplification of DP-FTRL, or None
    scheme.analysis                                 # `scripts/privacy --sampling` of it

`config` is the training run's `TrainingConfig` (read, never imported: this package sits
below the training tier): its `clients_per_round` (m), `rounds` (n), `min_sep` (b, G),
`seed` (public), `delta` and `participation_settings` (the entry's `settings_type`).

A scheme's own knobs are the fields of its settings dataclass; each field is the flag
`--<field>` (help text and privacy relevance in its metadata), which the training CLI
generates (`setting_fields`) and refuses when no scheme of the run reads it (`readers`).

The mechanisms' side: each training mechanism entry declares what its accounting needs of
the participation (`accounting`: one of `ACCOUNTINGS`), and a scheme serves the accountings
in its `accounts` (for correlated noise, only a banded C when `banded_only`).
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from dp_fl import _checks
from dp_fl import settings as settings_lib
from dp_fl.accounting import amplification
from dp_fl.accounting import b_min_sep
from dp_fl.participation import availability as availability_lib
from dp_fl.participation import base
from dp_fl.participation import checkpoint
from dp_fl.participation import device_timer
from dp_fl.participation import sampling

# What a mechanism's accounting needs of the participation (`MechanismEntry.accounting`).
CORRELATED = "correlated"  # DP-FTRL: C's sensitivity under the realized participation, or an
#                            amplified analysis (paper 004 Sec. 3.1; papers 003, cyclic Poisson)
POISSON_GAUSSIAN = "poisson_gaussian"  # DP-FedAvg: the Poisson-subsampled Gaussian (paper 001)
COMPOSED = "composed"  # Distributed DP (cpSGD, ddgauss, skellam): rounds composed, no amplification
NOT_PRIVATE = "not_private"  # none / clip: nothing to account
ACCOUNTINGS = (CORRELATED, POISSON_GAUSSIAN, COMPOSED, NOT_PRIVATE)

# `scripts/privacy --sampling`: the analysis of a schedule without a training run.
MIN_SEP = "min_sep"  # matrix mechanism under at most k participations b apart (paper 004)
POISSON = "poisson"  # DP-FedAvg with Poisson user sampling (paper 001)


_setting = settings_lib.setting


def _round_hours() -> Any:
  return _setting(1.0, "simulated duration of a round (device timer)")


def _availability() -> Any:
  return _setting("always", "device availability: always or diurnal")


def _check_simulated_devices(settings: Any) -> None:
  if settings.availability not in availability_lib.SIMULATED:
    raise ValueError(f"`availability` must be one of {availability_lib.SIMULATED}; got "
                     f"{settings.availability!r}.")
  for name in ("timer_hours", "round_hours"):
    if hasattr(settings, name):
      _checks.check_positive(name, getattr(settings, name))


NoSettings = settings_lib.NoSettings


@dataclasses.dataclass(frozen=True)
class DeviceTimerSettings:
  """The device-timer emulation (paper 004 Alg. 1, App. C): T, a round's simulated hours,
  and the simulated availability of the devices."""
  timer_hours: float = _setting(24.0, "device timer: hours before a device may take part "
                                "again")
  round_hours: float = _round_hours()
  availability: str = _availability()

  def __post_init__(self):
    _check_simulated_devices(self)


@dataclasses.dataclass(frozen=True)
class RoundTimerSettings:
  """A timer in rounds (`--min_sep`) on simulated devices: a round's simulated hours and
  their availability."""
  round_hours: float = _round_hours()
  availability: str = _availability()

  def __post_init__(self):
    _check_simulated_devices(self)


@dataclasses.dataclass(frozen=True)
class PoissonSettings:
  """Poisson user sampling (paper 001): the rate q."""
  population_sampling_rate: Optional[float] = _setting(
      None, "q for Poisson sampling (default clients_per_round / population)", privacy=True)

  def __post_init__(self):
    if self.population_sampling_rate is not None:
      _checks.check_half_open_unit("population_sampling_rate", self.population_sampling_rate)


@dataclasses.dataclass(frozen=True)
class BMinSepSettings:
  """b-min-sep sampling (Dong & Ganesh 2026): p, and whether the chain starts warm."""
  sampling_probability: Optional[float] = _setting(
      None, "b-min-sep: p, the chance an eligible client is sampled in a round (default: the "
      "p whose stationary expected cohort is --clients_per_round)", privacy=True)
  warm_start: bool = _setting(
      True, "b-min-sep: start each client's eligibility chain in its stationary law, so the "
      "expected cohort is the same from round 0 (False: everyone eligible at round 0)",
      privacy=True)
  round_hours: float = _round_hours()
  availability: str = _availability()

  def __post_init__(self):
    if self.sampling_probability is not None:
      _checks.check_half_open_unit("sampling_probability", self.sampling_probability)
    if not isinstance(self.warm_start, bool):
      raise ValueError(f"`warm_start` must be true or false; got {self.warm_start!r}.")
    _check_simulated_devices(self)


# ---------------------------------------------------------------------------------------
# The amplification analyses of DP-FTRL a scheme's sampling gives (functions of the
# mechanism in dp_fl/accounting/amplification.py; the training tier adds the run's
# calibration, caching and accountant, `dp_fl/training/amplified.py`).


class BallsInBinsAmplification:
  """Balls-in-bins batching (paper 003): b = ⌊N / m⌋ bins (a bin holds about m clients; the
  scheduler pads or truncates it to exactly m, Sec. 5.2.1), E = ⌈n / b⌉ epochs, any
  non-negative lower-triangular C (Lemma 3.2)."""

  name = amplification.BALLS_IN_BINS

  @staticmethod
  def num_bins(config: Any, num_clients: int) -> int:
    """b = ⌊N / m⌋ (at least 1)."""
    return max(1, num_clients // config.clients_per_round)

  def key(self, config: Any, num_clients: int) -> int:
    """What the Monte Carlo release depends on besides C, n and δ (its cache key)."""
    return self.num_bins(config, num_clients)

  def pair(self, config: Any, mechanism: Any, num_clients: int) -> Any:
    """The dominating pair of the run's C over its planned rounds."""
    return amplification.balls_in_bins_pair(
        mechanism, num_bins=self.num_bins(config, num_clients), rounds=config.rounds)

  def check(self, config: Any, mechanism: Any, num_clients: int) -> None:
    """Raises ValueError for a C Lemma 3.2 does not cover."""
    del config, num_clients
    mechanism.lower_triangular_input(1)


# The most availability classes a b-min-sep run accounts (each costs a Monte Carlo
# calibration and verification of its own).
MAX_AVAILABILITY_CLASSES = 24


class BMinSepAmplification:
  """b-min-sep sampling (Dong & Ganesh 2026): b = `--min_sep`, p = `--sampling_probability`
  or the p whose stationary expected cohort p N / (1 + (b − 1) p) is m; any non-negative
  lower-triangular C (`dp_fl/accounting/b_min_sep.py`). With `--availability` other than
  always (the device-availability variant), only devices available at the round's simulated
  time can be drawn; the devices' public time zones put them in classes accounted
  separately, their daily check-in coin is part of the secret sampling, and p defaults to
  the one whose busiest round's expected cohort is m (rounds are held only at times some
  device can be there; cohorts swing with the time zones in their windows)."""

  name = amplification.B_MIN_SEP

  @staticmethod
  def availability_model(config: Any, num_clients: int
                         ) -> Optional[availability_lib.AvailabilityModel]:
    """The run's simulated availability (time zones from the public --seed, as the device
    timer's), or None when every device is always there."""
    settings = config.participation_settings
    if settings.availability == "always":
      return None
    return availability_lib.simulated(settings.availability, num_clients, config.seed)

  def availability(self, config: Any, num_clients: int) -> Optional[b_min_sep.Availability]:
    """The accounting's availability classes (`b_min_sep.Availability`), or None."""
    settings = config.participation_settings
    return b_min_sep_availability(settings.availability, num_clients, config.seed,
                                  config.rounds, settings.round_hours)

  def sampling_probability(self, config: Any, num_clients: int) -> float:
    p = config.participation_settings.sampling_probability
    if p is not None:
      return float(p)
    return b_min_sep_probability(config.clients_per_round / num_clients, config.rounds,
                                 config.min_sep, config.participation_settings.warm_start,
                                 self.availability(config, num_clients))

  def sampling(self, config: Any, num_clients: int) -> b_min_sep.BMinSepSampling:
    return b_min_sep.BMinSepSampling(
        config.rounds, config.min_sep, self.sampling_probability(config, num_clients),
        warm_start=config.participation_settings.warm_start,
        availability=self.availability(config, num_clients))

  def key(self, config: Any, num_clients: int) -> str:
    """What the Monte Carlo release depends on besides C, n and δ (its cache key)."""
    s = self.sampling(config, num_clients)
    out = f"b_min_sep:b={s.min_sep}:p={s.sampling_probability!r}:warm={s.warm_start}"
    if s.availability is not None:
      out += f":availability={s.availability.digest()}"
    return out

  def pair(self, config: Any, mechanism: Any, num_clients: int) -> Any:
    """The dominating pair of the run's C over its planned rounds."""
    return amplification.b_min_sep_pair(mechanism, self.sampling(config, num_clients))

  def check(self, config: Any, mechanism: Any, num_clients: int) -> None:
    """Raises ValueError for a C or settings the analysis does not cover."""
    mechanism.lower_triangular_input(1)
    self.sampling(config, num_clients)
    if config.rounds > b_min_sep.MAX_ROUNDS:
      raise ValueError(
          f"--participation=b_min_sep accounts at most {b_min_sep.MAX_ROUNDS} rounds (its "
          f"Monte Carlo builds the n x n Gram matrix of C); got --rounds={config.rounds}.")


_AVAILABILITY_CLASSES: dict[tuple, Optional[b_min_sep.Availability]] = {}
_PEAK_RATE_PROBABILITY: dict[tuple, float] = {}


def b_min_sep_availability(kind: str, num_clients: int, public_seed: int, rounds: int,
                           round_hours: float) -> Optional[b_min_sep.Availability]:
  """The availability classes of `--availability=kind` for b-min-sep (time zones from the
  public seed, as the device timer's; a round every `round_hours` hours), or None for
  "always". Refuses more than `MAX_AVAILABILITY_CLASSES` classes."""
  key = (kind, num_clients, public_seed, rounds, round_hours)
  if key not in _AVAILABILITY_CLASSES:
    model = availability_lib.simulated(kind, num_clients, public_seed)
    found = model.round_windows(rounds, round_hours)
    if found is None:
      _AVAILABILITY_CLASSES[key] = None
    else:
      windows, klass = found
      if windows.shape[0] > MAX_AVAILABILITY_CLASSES:
        raise ValueError(
            f"--availability={kind} with --round_hours={round_hours!r} puts the devices "
            f"into {windows.shape[0]} availability classes (distinct public patterns of "
            f"rounds), more than the {MAX_AVAILABILITY_CLASSES} b-min-sep accounts (each "
            "needs its own Monte Carlo release). Use a --round_hours that divides 24 "
            "(e.g. 1 or 2).")
      _AVAILABILITY_CLASSES[key] = b_min_sep.Availability(
          windows, tuple(np.bincount(klass, minlength=windows.shape[0]).tolist()),
          model.window_probability)
  return _AVAILABILITY_CLASSES[key]


def b_min_sep_probability(rate: float, rounds: int, min_sep: int, warm_start: bool,
                          availability: Optional[b_min_sep.Availability]) -> float:
  """p whose expected cohort is `rate` of the population a round: stationary, or with
  availability that of the busiest round."""
  if availability is None:
    return b_min_sep.BMinSepSampling.probability_for_rate(rate, min_sep)
  key = (rate, rounds, min_sep, warm_start, availability.digest())
  if key not in _PEAK_RATE_PROBABILITY:
    _PEAK_RATE_PROBABILITY[key] = b_min_sep.probability_for_peak_rate(
        rate, rounds, min_sep, warm_start=warm_start, availability=availability)
  return _PEAK_RATE_PROBABILITY[key]


class CyclicPoissonAmplification:
  """Cyclic Poisson sampling of a banded C (Choquette-Choo et al. 2023): G = `--min_sep`
  groups, rate q = mG / N in the round's group; ⌈n / G⌉ compositions of the
  Poisson-subsampled Gaussian when C has at most G bands."""

  name = amplification.CYCLIC_POISSON

  @staticmethod
  def sampling_probability(config: Any, num_clients: int) -> float:
    """q = m G / N: the expected cohort of a group of N / G clients is m."""
    q = config.clients_per_round * config.min_sep / num_clients
    if q > 1.0:
      raise ValueError(
          f"--participation=cyclic_poisson samples each of --min_sep={config.min_sep} groups "
          f"of about {num_clients / config.min_sep:.0f} clients with probability q = m·G/N "
          f"= {config.clients_per_round}·{config.min_sep}/{num_clients} = {q:.3g} > 1. Lower "
          "--clients_per_round or --min_sep, or use more clients.")
    return q

  def check(self, config: Any, mechanism: Any, num_clients: int) -> None:
    """Raises ValueError unless C has at most G bands and q <= 1."""
    bands = amplification.banded_bands(mechanism)
    if bands > config.min_sep:
      raise ValueError(
          f"--participation=cyclic_poisson with --min_sep={config.min_sep} groups needs C "
          f"with at most {config.min_sep} bands; the {mechanism.name} mechanism has {bands}. "
          "Set --bands <= --min_sep (or raise --min_sep).")
    self.sampling_probability(config, num_clients)

  def args(self, config: Any, mechanism: Any, num_clients: int) -> dict[str, Any]:
    """The analysis' settings for the planned rounds (`check` passed)."""
    return amplification.cyclic_poisson_args(
        mechanism, sampling_probability=self.sampling_probability(config, num_clients),
        num_groups=config.min_sep, rounds=config.rounds, delta=config.delta)


# ---------------------------------------------------------------------------------------
# The entries.


def _either(names: Sequence[str]) -> str:
  return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


class Scheme(abc.ABC):
  """One `--participation` value (the module doc lists what it owns)."""

  name: str = ""
  description: str = ""
  settings_type: type = NoSettings
  variable_cohorts: bool = False  # The cohort size is random (it may exceed m).
  analysis: str = MIN_SEP  # `scripts/privacy --sampling` of this scheme.
  amplification: Any = None  # An analysis above, for a scheme that amplifies DP-FTRL.
  accounts: frozenset = frozenset({CORRELATED, COMPOSED, NOT_PRIVATE})
  banded_only: bool = False  # Correlated noise only with a banded C.
  # Why correlated noise is refused (`{mechanism}`: its name); empty: a generic message.
  correlated_refusal: str = ""

  @abc.abstractmethod
  def build(self, config: Any, settings: Any, num_clients: int,
            seed: int) -> base.Scheduler:
    """The scheduler over `num_clients` clients; `seed` is the secret seed of the sampling."""

  def scheduler(self, config: Any, num_clients: int, seed: int) -> base.Scheduler:
    """The run's scheduler (`config.participation_settings` are this scheme's settings)."""
    return self.build(config, config.participation_settings, num_clients, seed)

  def settings_from(self, values: Mapping[str, Any]) -> Any:
    """`settings_type` from flat flag values (its own fields; the others ignored)."""
    own = {f.name for f in dataclasses.fields(self.settings_type)}
    return self.settings_type(**{k: v for k, v in values.items() if k in own})

  def expected_cohort(self, config: Any, num_clients: int) -> float:
    """The DP aggregators' fixed denominator: the report goal m (paper 004 Alg. 1)."""
    del num_clients
    return float(config.clients_per_round)

  def rule_separation(self, config: Any) -> Optional[int]:
    """The min-sep in rows of C the scheme's rule keeps whatever the population and the
    draws (asked of its scheduler); None where only an emulation can tell."""
    del config
    return None

  def check_mechanism(self, mechanism: Any, banded_mechanisms: Sequence[str] = ()) -> None:
    """Raises ValueError when this scheme refuses `mechanism` (a training mechanism entry:
    `name`, `accounting`, `banded`); `banded_mechanisms` names the banded ones for the fix."""
    kind = mechanism.accounting
    if kind not in ACCOUNTINGS:
      raise ValueError(f"`accounting` of --mechanism={mechanism.name} must be one of "
                       f"{ACCOUNTINGS}; got {kind!r}.")
    if kind == CORRELATED and kind in self.accounts:
      if self.banded_only and not getattr(mechanism, "banded", False):
        raise ValueError(
            f"--participation={self.name} needs a banded C (--mechanism="
            f"{' or '.join(banded_mechanisms)}); --mechanism={mechanism.name}'s C is not "
            "banded. Use --participation=balls_in_bins for any C.")
      return
    if kind in self.accounts:
      return
    if kind == CORRELATED:
      raise ValueError(self.correlated_refusal.format(mechanism=mechanism.name)
                       if self.correlated_refusal else
                       f"--participation={self.name} has no analysis for correlated noise "
                       f"(--mechanism={mechanism.name}); use a scheme that accounts "
                       f"DP-FTRL: --participation={_either(accepting(CORRELATED))}.")
    if kind == POISSON_GAUSSIAN:
      raise ValueError(
          f"`mechanism`={mechanism.name!r} is DP-FedAvg with Poisson user sampling (paper "
          f"001); it needs --participation={_either(accepting(POISSON_GAUSSIAN))}, got "
          f"{self.name!r}. For a fixed cohort use --mechanism=dpsgd.")
    raise ValueError(
        f"--mechanism={mechanism.name} is accounted without amplification by sampling (its "
        f"rounds are composed); --participation={self.name} would suggest a sampled "
        f"guarantee it does not give. Use --participation="
        f"{_either(accepting(COMPOSED))}.")


class DeviceTimerScheme(Scheme):
  """The device-timer scheduler (paper 004 Alg. 1): a timer in hours (`device_timer`) or in
  rounds (`min_sep_rounds`, = `--min_sep`) on simulated devices."""

  def __init__(self, name: str, description: str, by_hours: bool):
    self.name = name
    self.description = description
    self.by_hours = by_hours
    self.settings_type = DeviceTimerSettings if by_hours else RoundTimerSettings

  def _timer(self, config: Any, settings: Any) -> dict[str, Any]:
    if self.by_hours:
      return {"min_separation_hours": settings.timer_hours}
    return {"min_separation_rounds": config.min_sep}

  def build(self, config, settings, num_clients, seed):
    # The simulated time zones are public: from `config.seed`, not the secret seed.
    availability = availability_lib.simulated(settings.availability, num_clients, config.seed)
    return device_timer.DeviceTimerScheduler(
        num_clients, config.clients_per_round, config.rounds, seed, availability=availability,
        round_duration_hours=settings.round_hours, **self._timer(config, settings))

  def rule_separation(self, config):
    if self.by_hours:  # Skipped empty rounds use no row of C: only an emulation can tell.
      return None
    return device_timer.DeviceTimerScheduler.separation_rule(config.min_sep, None, math.inf)


class PoissonScheme(Scheme):
  """Poisson user sampling with rate q (paper 001), DP-FedAvg's."""

  name = "poisson"
  description = "Poisson user sampling with rate q (paper 001)"
  settings_type = PoissonSettings
  variable_cohorts = True
  analysis = POISSON
  accounts = frozenset({POISSON_GAUSSIAN, NOT_PRIVATE})
  correlated_refusal = (
      "`mechanism`={mechanism!r} is DP-FTRL; its correlated noise is accounted under Poisson "
      "sampling only group by group: use --participation=cyclic_poisson (with "
      "--mechanism=bandmf or dpsgd; --min_sep=1 is plain Poisson for dpsgd), "
      "--participation=balls_in_bins (any C), --mechanism=dpfedavg with Poisson, or a "
      "min-sep/device-timer participation.")

  @staticmethod
  def sampling_rate(config: Any, num_clients: int) -> float:
    """q: `--population_sampling_rate`, else m / N."""
    return config.participation_settings.population_sampling_rate or (
        config.clients_per_round / num_clients)

  def build(self, config, settings, num_clients, seed):
    del settings
    return sampling.PoissonScheduler(num_clients, self.sampling_rate(config, num_clients),
                                     seed)

  def expected_cohort(self, config, num_clients):
    """qN: paper 001 Alg. 1's fixed denominator."""
    return self.sampling_rate(config, num_clients) * num_clients


class BallsInBinsScheme(Scheme):
  name = "balls_in_bins"
  description = "balls-in-bins batching (paper 003 Def. 3.1, bins of exactly m)"
  analysis = amplification.BALLS_IN_BINS
  amplification = BallsInBinsAmplification()
  accounts = frozenset({CORRELATED, NOT_PRIVATE})

  def build(self, config, settings, num_clients, seed):
    del settings
    return sampling.BallsInBinsScheduler(
        num_clients, self.amplification.num_bins(config, num_clients), seed,
        fixed_size=config.clients_per_round)


class CyclicPoissonScheme(Scheme):
  name = "cyclic_poisson"
  description = "cyclic Poisson sampling of --min_sep groups (banded C)"
  variable_cohorts = True
  analysis = amplification.CYCLIC_POISSON
  amplification = CyclicPoissonAmplification()
  accounts = frozenset({CORRELATED, NOT_PRIVATE})
  banded_only = True

  def build(self, config, settings, num_clients, seed):
    del settings
    return sampling.CyclicPoissonScheduler(
        num_clients, config.min_sep,
        self.amplification.sampling_probability(config, num_clients), seed)


class BMinSepScheme(Scheme):
  name = "b_min_sep"
  description = ("b-min-sep sampling: ineligible for --min_sep - 1 rounds after taking part, "
                 "then sampled with probability p (Dong & Ganesh 2026)")
  settings_type = BMinSepSettings
  variable_cohorts = True
  analysis = amplification.B_MIN_SEP
  amplification = BMinSepAmplification()
  accounts = frozenset({CORRELATED, NOT_PRIVATE})

  def build(self, config, settings, num_clients, seed):
    return sampling.BMinSepScheduler(
        num_clients, config.min_sep, self.amplification.sampling_probability(
            config, num_clients), seed, warm_start=settings.warm_start,
        availability=self.amplification.availability_model(config, num_clients),
        round_hours=settings.round_hours,
        denominator=self.expected_cohort(config, num_clients))

  def expected_cohort(self, config, num_clients):
    """p N / (1 + (b − 1) p): the stationary expected cohort; with availability, the busiest
    round's expected cohort (m unless p is given) — the aggregators' denominator."""
    return (self.amplification.sampling(config, num_clients).peak_participation_rate
            * num_clients)

  def rule_separation(self, config):
    return config.min_sep


class UniformScheme(Scheme):
  name = "uniform"
  description = "m distinct clients uniformly at random, independently every round"

  def build(self, config, settings, num_clients, seed):
    del settings
    return sampling.UniformScheduler(num_clients, config.clients_per_round, seed)


class CyclicScheme(Scheme):
  name = "cyclic"
  description = "deterministic epochs: ⌈N / m⌉ groups of m, in turn"

  def build(self, config, settings, num_clients, seed):
    del settings
    return sampling.CyclicScheduler(num_clients, config.clients_per_round, seed)


SCHEMES: dict[str, Scheme] = {}
"""`--participation`: every scheme, in the order of the flag's choices."""


def register(entry: Scheme, *scheduler_types: type[base.Scheduler]) -> Scheme:
  """Adds `entry` (and the scheduler classes it builds, to the `KIND` registry that restores
  them from checkpoints); returns it."""
  if not entry.name or entry.name in SCHEMES:
    raise ValueError(f"A participation scheme needs a new name; got {entry.name!r} (known: "
                     f"{tuple(SCHEMES)}).")
  for scheduler_type in scheduler_types:
    checkpoint.register(scheduler_type)
  SCHEMES[entry.name] = entry
  return entry


for _entry in (
    DeviceTimerScheme("device_timer", "device timer in hours (paper 004 Alg. 1, App. C)",
                      by_hours=True),
    DeviceTimerScheme("min_sep_rounds", "round-based separation of --min_sep rows of C "
                      "(paper 004 Sec. 3.1)", by_hours=False),
    PoissonScheme(), BallsInBinsScheme(), CyclicPoissonScheme(), UniformScheme(),
    CyclicScheme()):
  register(_entry)
register(BMinSepScheme(), sampling.BMinSepScheduler)


def names() -> tuple[str, ...]:
  return tuple(SCHEMES)


def scheme(name: str) -> Scheme:
  """The entry of `--participation=name`; unknown names fail with the known ones."""
  entry = SCHEMES.get(name)
  if entry is None:
    raise ValueError(f"`participation` must be one of {names()}; got {name!r}.")
  return entry


def accepting(accounting: str) -> list[str]:
  """The schemes that serve a mechanism of `accounting`, in flag order."""
  return [name for name, s in SCHEMES.items() if accounting in s.accounts]


def analyses(accounting: Optional[str] = None) -> tuple[str, ...]:
  """The `scripts/privacy --sampling` analyses of the schemes (those that serve
  `accounting`, if given), each once, in flag order."""
  return tuple(dict.fromkeys(s.analysis for s in SCHEMES.values()
                             if accounting is None or accounting in s.accounts))


def setting_fields() -> dict[str, dataclasses.Field]:
  """Every participation setting once (its flag `--<name>`), in scheme order."""
  out: dict[str, dataclasses.Field] = {}
  for entry in SCHEMES.values():
    for field in dataclasses.fields(entry.settings_type):
      out.setdefault(field.name, field)
  return out


def readers(field: str) -> tuple[str, ...]:
  """The schemes whose settings have `field` (none: not a participation setting)."""
  return tuple(name for name, s in SCHEMES.items()
               if field in {f.name for f in dataclasses.fields(s.settings_type)})
