"""Amplified accounting of DP-FTRL runs: `--participation=balls_in_bins`, `b_min_sep` and
`cyclic_poisson`.

The registry (`registry.DpFtrlEntry`) hands σ calibration and the run's accountant to the
`Amplification` of the run's participation scheme, when its entry has an amplification
analysis (`of(scheme)`; the analyses, functions of the mechanism shared with
`scripts/privacy`, are dp_fl/participation/schemes.py's and dp_fl/accounting/amplification.py's):

* `BallsInBins` (paper 003): b = ⌊N / m⌋ bins (N clients, m per round, so a bin holds about
  m clients; the scheduler pads or truncates it to exactly m, Sec. 5.2.1), E = ⌈n / b⌉
  epochs. σ for a target ε, or ε for a given σ, by Monte Carlo on the dominating pair of the
  run's C (Lemma 3.2), released by Estimate-Verify-Release (Alg. 1-2) at
  δ_verify = δ / 2 with the sample size Thm 2.1 needs.
* `BMinSep` (Dong & Ganesh 2026): b = `--min_sep`, p = `--sampling_probability` or the p whose
  stationary expected cohort is m; the same Monte Carlo release on its dominating pair (both
  directions of adjacency; exact for a C whose rounds b apart share no row, a bound otherwise).
* `CyclicPoisson` (Choquette-Choo et al. 2023): G = `--min_sep` groups, rate q = mG / N in
  the round's group; for C with at most G bands (BandMF with bands <= min_sep; DP-SGD) ε is
  ⌈n / G⌉ compositions of the Poisson-subsampled Gaussian (PLD, RDP).

The expensive result (the Monte Carlo release) is cached in the run directory
(`amplification.json`, written once the run's configuration was validated) so a resumed run
reuses it bit for bit; calibration before a run writes nothing and keeps its release in
memory for the run that follows. Across runs (separate processes: each seed of a study
launched on its own), a private run's release is reused from the directory named by the
environment variable `DP_FL_AMPLIFICATION_CACHE` when it is set: keyed by everything the
release depends on (the scheme's schedule, n, δ, the mechanism's C, the σ or ε it was
released for, the cache's format), never by the data. The first outcome is kept whether it
verified or not (⊥): were failures dropped, every later run would retry a fresh
verification and the first false pass would stick — Thm 2.1 bounds one attempt, not many.
Research runs (`--reproducible_noise_seed`: public accounting seeds, which could be chosen
until one verifies) neither read nor write it.

Every run's report carries both the amplified ε and the unamplified ε of the realized
participation (`privacy.MatrixMechanismAccountant`), and reports the smaller of those that
hold: the amplified one is dropped (and the report says why) when its verification failed,
or when a discarded round shifted the bins or groups away from the analysed schedule.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Optional

from dp_fl import files
from dp_fl.accounting import amplification
from dp_fl.accounting import report as report_lib
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.participation import schemes
from dp_fl.training import privacy as privacy_lib

if TYPE_CHECKING:
  from dp_fl.training import config as config_lib

AMPLIFICATION_FILE = "amplification.json"

# Monte Carlo releases computed in this process and not yet written to a run directory, by
# their settings: `--calibrate_epsilon` runs before the run directory is validated.
_RELEASED: dict[tuple, amplification.MonteCarloRelease] = {}
# The (target ε, σ) of this process's last calibration, by the run's settings.
_CALIBRATED: dict[tuple, tuple[float, float]] = {}

CACHE_ENV = "DP_FL_AMPLIFICATION_CACHE"
"""The environment variable naming a directory of verified releases shared across runs."""


# Part of every cache key: bump it when what a release means or how it is made changes.
_CACHE_FORMAT = "b_min_sep-availability-1"


def _cache_path(key: tuple) -> Optional[str]:
  root = os.environ.get(CACHE_ENV)
  if not root:
    return None
  text = json.dumps([_CACHE_FORMAT, amplification.TRAINING_VERIFY_RATIO] + list(_jsonable(key)))
  digest = hashlib.sha256(text.encode()).hexdigest()[:32]
  return os.path.join(root, f"release-{digest}.json")


def cached_release(key: tuple) -> Optional[amplification.MonteCarloRelease]:
  """The release `$DP_FL_AMPLIFICATION_CACHE` holds for `key` (verified or ⊥), if any."""
  path = _cache_path(key)
  if path is None or not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      saved = json.load(f)
    release = amplification.MonteCarloRelease.from_dict(saved["release"])
    same = tuple(saved["key"]) == _jsonable(key)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(
        f"{path} (in ${CACHE_ENV}) is not a readable amplification release ({e}). Delete it "
        f"(it is recomputed), or unset {CACHE_ENV}.") from e
  return release if same else None


def cache_release(key: tuple, release: amplification.MonteCarloRelease) -> None:
  """Keeps a release — verified or ⊥ — in `$DP_FL_AMPLIFICATION_CACHE` (when set)."""
  path = _cache_path(key)
  if path is None or os.path.exists(path):
    return
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    files.atomic_write_json(path, {"key": list(key), "release": release.to_dict()}, indent=1)
  except OSError as e:
    raise ValueError(f"${CACHE_ENV} = {os.environ.get(CACHE_ENV)!r} cannot hold the "
                     f"amplification release ({e}); point it at a writable directory or "
                     "unset it.") from e


def _released(key: tuple, compute, private: bool) -> amplification.MonteCarloRelease:
  """This process's release for `key`, else (a private run) the cross-run cache's, else
  `compute()` (kept in the cache by a private run)."""
  release = _RELEASED.get(key) or (cached_release(key) if private else None)
  if release is None:
    release = compute()
    if private:
      cache_release(key, release)
  return release
# Cyclic Poisson's σ by (target ε, the analysis' settings) (a pure function of them).
_CYCLIC_CALIBRATED: dict[tuple, float] = {}


def _assumption_caveat(config: "config_lib.TrainingConfig") -> tuple[str, ...]:
  if config.noise_seed_is_public:
    return ("the amplified ε assumes the sampling is secret, but it derives from "
            f"reproducible_noise_seed={config.reproducible_noise_seed} (config.json): against "
            "anyone who knows it no amplification holds.",)
  return ()


class Amplification(abc.ABC):
  """How one participation scheme amplifies DP-FTRL in a training run: its analysis (the
  scheme entry's), with the run's calibration, caching and accountant."""

  def __init__(self, analysis: Any):
    self.analysis = analysis
    self.name = analysis.name

  def check(self, config: "config_lib.TrainingConfig", mechanism: catalog.Mechanism,
            num_clients: int) -> None:
    """Raises ValueError when the scheme's analysis does not apply to this run."""
    self.analysis.check(config, mechanism, num_clients)

  @abc.abstractmethod
  def calibrate(self, config: "config_lib.TrainingConfig", mechanism: catalog.Mechanism,
                num_clients: int, target_epsilon: float) -> float:
    """σ for which the planned run reaches `target_epsilon` at δ with amplification."""

  @abc.abstractmethod
  def accountant(self, config: "config_lib.TrainingConfig", mechanism: catalog.Mechanism,
                 num_clients: int) -> privacy_lib.Accountant:
    """The run's accountant (amplified and unamplified ε; see the module doc)."""


def _unamplified(config, mechanism) -> privacy_lib.MatrixMechanismAccountant:
  return privacy_lib.MatrixMechanismAccountant(
      mechanism, config.noise_multiplier, config.clip_norm, config.clients_per_round,
      config.delta, scope=privacy_lib.release_scope(config, sampled=True))


class AmplifiedAccountant(privacy_lib.Accountant):
  """ε of a run under an amplifying scheme: the smaller of the bounds that hold."""

  def __init__(self, scheme: str, config, mechanism, amplified_epsilon, details: dict,
               method: str, assumption: str, verified: bool = True,
               not_verified: str = "", progress_epsilon=None):
    """Args: amplified_epsilon(rounds) -> ε amplified for the first `rounds` rounds (the
    reports'); progress_epsilon(rounds) -> a faster bound never below it, for the progress
    lines and --target_epsilon (None: the reports' ε everywhere)."""
    self._progress_epsilon = progress_epsilon
    if progress_epsilon is not None:
      self.progress_accountant, self.report_accountant = "RDP", "PLD"
    self._scheme = scheme
    self._unamplified = _unamplified(config, mechanism)
    self._amplified_epsilon = amplified_epsilon
    self._details = details
    self._method = method
    self._assumption = assumption
    self._verified = verified
    self._not_verified = not_verified
    self._mechanism = mechanism
    self._sigma = config.noise_multiplier
    self._delta = config.delta
    self._caveats = _assumption_caveat(config)

  def _amplified(self, realized, epsilon_for=None) -> tuple[Optional[float], str]:
    """(the amplified ε if it holds else None, why not)."""
    if not self._verified:
      return None, self._not_verified
    if realized.discarded_draws:
      return None, (f"{realized.discarded_draws} discarded round(s) shifted the later rounds' "
                    f"{self._scheme} schedule away from the one analysed")
    return (epsilon_for or self._amplified_epsilon)(realized.num_rounds), ""

  def report(self, realized):
    base = self._unamplified.report(realized)
    if base is None:
      return None
    amplified, why_not = self._amplified(realized)
    holds = amplified is not None
    epsilon = min(base.epsilon, amplified) if holds else base.epsilon
    notes = ()
    if holds and amplified >= base.epsilon:
      notes = ("Amplification does not help here: the unamplified bound is at least as "
               "small, and is the one reported.",)
    return report_lib.AmplifiedPrivacyReport(
        scheme=self._scheme, mechanism=self._mechanism.name,
        noise_multiplier=self._sigma, delta=self._delta, epsilon=epsilon,
        epsilon_amplified=amplified, amplified_holds=holds, why_not_amplified=why_not,
        amplified_method=self._method, sampling_assumption=self._assumption,
        amplified=dict(self._details), unamplified=base, notes=notes,
        scope=base.scope, caveats=base.caveats + self._caveats)

  def epsilon(self, realized):
    if self._progress_epsilon is None:
      report = self.report(realized)
      return 0.0 if report is None else report.epsilon
    unamplified = self._unamplified.epsilon(realized)
    if realized.num_rounds == 0 or unamplified == 0.0:
      return unamplified
    amplified, _ = self._amplified(realized, self._progress_epsilon)
    return unamplified if amplified is None else min(unamplified, amplified)


# ---------------------------------------------------------------------------------------
# Balls-in-bins (paper 003).


class MonteCarlo(Amplification):
  """A scheme accounted by a Monte Carlo release (paper 003, Alg. 1-2) on its dominating
  pair: balls-in-bins, b-min-sep. Subclasses say what the report states of the sampling."""

  def pair(self, config, mechanism, num_clients) -> amplification.MonteCarloPair:
    return self.analysis.pair(config, mechanism, num_clients)

  def _key(self, config, mechanism, num_clients, solved_for, value) -> tuple:
    return (self.analysis.key(config, num_clients), config.rounds, config.delta,
            catalog.mechanism_digest(mechanism), solved_for, float(value))

  @abc.abstractmethod
  def _assumption(self, config, release: amplification.MonteCarloRelease) -> str:
    """What the guarantee assumes of the sampling (the report's words)."""

  @abc.abstractmethod
  def _schedule_details(self, release: amplification.MonteCarloRelease) -> dict[str, Any]:
    """The analysed schedule's parameters for the report."""

  @staticmethod
  def _seed(config) -> Optional[int]:
    # Research runs: reproducible; private runs: OS entropy (amplification.accounting_seeds).
    return (None if config.reproducible_noise_seed is None
            else config.reproducible_noise_seed + 7919)

  @staticmethod
  def _saved(config) -> Optional[tuple[tuple, amplification.MonteCarloRelease,
                                       Optional[float]]]:
    """(key, release, the target ε a calibration chose its σ for) saved in the run
    directory, or None."""
    path = os.path.join(config.root_dir, AMPLIFICATION_FILE)
    if not os.path.exists(path):
      return None
    try:
      with open(path, encoding="utf-8") as f:
        saved = json.load(f)
      return (tuple(saved["key"]),
              amplification.MonteCarloRelease.from_dict(saved["release"]),
              saved.get("calibrated_for"))
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise ValueError(
          f"{path} is not a readable {self.name} release ({e}); it is this run directory's "
          "privacy accounting. Restore it, or start a new run in another --root_dir.") from e

  def _settings(self, config, mechanism, num_clients) -> tuple:
    return _jsonable(self._key(config, mechanism, num_clients, "", 0))[:4]

  def calibrate(self, config, mechanism, num_clients, target_epsilon):
    """σ for the target: the run directory's own (a resumed run calibrated for the same
    target), else Alg. 2 + Estimate-Verify-Release; a verification that fails (⊥) falls
    back on the σ that needs no amplification."""
    settings = self._settings(config, mechanism, num_clients)
    saved = self._saved(config)
    if saved is not None and saved[0][:4] == settings and saved[2] == float(target_epsilon):
      # The runs that follow in this process reuse this very release (issue #39: a fresh
      # Monte Carlo estimate of ε for them landed above the target).
      _RELEASED.clear()
      _RELEASED[saved[0]] = saved[1]
      _CALIBRATED[settings] = (float(target_epsilon), saved[1].noise_multiplier)
      return saved[1].noise_multiplier
    key = self._key(config, mechanism, num_clients, "noise_multiplier", target_epsilon)
    release = _released(key, lambda: amplification.release_noise_multiplier(
        self.pair(config, mechanism, num_clients), epsilon=target_epsilon,
        delta=config.delta, seed=self._seed(config),
        verify_ratio=amplification.TRAINING_VERIFY_RATIO), self._seed(config) is None)
    if key not in _RELEASED:
      _RELEASED.clear()
      _RELEASED[key] = release
    sigma = (release.noise_multiplier if release.verified else
             amplification.round_up(release.noise_multiplier_without_amplification))
    _CALIBRATED[settings] = (float(target_epsilon), sigma)
    return sigma

  def _release_for_run(self, config, mechanism, num_clients
                       ) -> tuple[tuple, amplification.MonteCarloRelease, Optional[float]]:
    """(key, release, calibrated_for) for the run's σ: saved in the run directory (a resumed
    run), else that of this process's calibration when it gave this σ, else — σ at least
    what this process calibrated for a target ε — that target verified at σ on a fresh
    sample (Alg. 1), else computed for σ (ε by Monte Carlo). A calibrated run so reports
    its target, never a re-estimate above it (issue #39); should the verification fail (⊥),
    ε is estimated and the run's budget stop (`calibration.with_budget`) keeps the report
    at most the target."""
    settings = self._settings(config, mechanism, num_clients)
    saved = self._saved(config)
    if saved is not None:
      key, release, calibrated_for = saved
      if key[:4] != settings or release.noise_multiplier != config.noise_multiplier:
        raise ValueError(
            f"{os.path.join(config.root_dir, AMPLIFICATION_FILE)} holds the {self.name} "
            f"release of other settings (σ {release.noise_multiplier}, key {list(key)}) than "
            f"this run's (σ {config.noise_multiplier}, {list(settings)}). Resume with the "
            "run's own settings, or start a new run in another --root_dir.")
      return key, release, calibrated_for
    target, sigma = _CALIBRATED.get(settings, (None, None))
    calibrated_for = (target if sigma is not None and sigma <= config.noise_multiplier
                      else None)
    for key, release in _RELEASED.items():
      if (_jsonable(key)[:4] == settings and release.verified
          and release.noise_multiplier == config.noise_multiplier):
        return key, release, calibrated_for
    if calibrated_for is not None:
      key = self._key(config, mechanism, num_clients, "verified", calibrated_for)
      release = _released(key, lambda: amplification.release_verified(
          self.pair(config, mechanism, num_clients), noise_multiplier=config.noise_multiplier,
          epsilon=calibrated_for, delta=config.delta, seed=self._seed(config),
          verify_ratio=amplification.TRAINING_VERIFY_RATIO), self._seed(config) is None)
      if release.verified:
        return key, release, calibrated_for
    key = self._key(config, mechanism, num_clients, "epsilon", config.noise_multiplier)
    release = _released(key, lambda: amplification.release_epsilon(
        self.pair(config, mechanism, num_clients), noise_multiplier=config.noise_multiplier,
        delta=config.delta, seed=self._seed(config),
        verify_ratio=amplification.TRAINING_VERIFY_RATIO), self._seed(config) is None)
    return key, release, calibrated_for

  def accountant(self, config, mechanism, num_clients):
    key, release, calibrated_for = self._release_for_run(config, mechanism, num_clients)
    save_release(config.root_dir, key, release, calibrated_for)
    details = dict(self._schedule_details(release))
    details.update({
        "rounds_analysed": release.rounds,
        "monte_carlo_samples": release.num_samples,
        "delta_verify": release.delta_verify,
        "verification_delta_hat": release.verification_delta_hat,
        "verification_delta_standard_error": release.verification_delta_standard_error,
        "failure_probability": release.failure_probability,
        "solved_for": release.solved_for, "verified": release.verified,
        "cached_in": AMPLIFICATION_FILE,
    })
    method = (f"Monte Carlo on the dominating pair ({self._pair_reference}), Estimate-Verify-"
              f"Release at {release.num_samples} samples, failure probability <= "
              f"{release.failure_probability:.2g} inside δ")
    # The release covers the planned rounds; a prefix releases less (post-processing).
    return AmplifiedAccountant(
        self.name, config, mechanism, lambda rounds: release.epsilon, details, method,
        self._assumption(config, release), verified=release.verified,
        not_verified=("Estimate-Verify-Release returned ⊥ (the verification sample's δ̂ "
                      f"{release.verification_delta_hat:.3g} exceeded δ_verify "
                      f"{release.delta_verify:.3g})"))


class BallsInBins(MonteCarlo):
  """Balls-in-bins batching with Monte Carlo accounting (paper 003, Alg. 1-2)."""

  _pair_reference = "paper 003, Lemma 3.2"

  def _assumption(self, config, release):
    b = release.num_bins
    return (
        f"each client was put into one of b = {b} bins uniformly at random, once, secretly; "
        f"round t used bin t mod {b} ({release.rounds} rounds = {release.num_epochs} "
        f"epoch(s); bins padded or truncated to {config.clients_per_round} clients, paper "
        "003 Sec. 5.2.1). The guarantee holds for a production system only if it batches "
        "the same way, with randomness nobody else knows.")

  def _schedule_details(self, release):
    return {"bins": release.num_bins, "epochs": release.num_epochs}


class BMinSep(MonteCarlo):
  """b-min-sep sampling with Monte Carlo accounting (Dong & Ganesh 2026; both directions of
  adjacency, `dp_fl/accounting/b_min_sep.py`)."""

  _pair_reference = ("b-min-sep, Dong & Ganesh 2026: the eligibility chain's dynamic "
                     "program, both directions of adjacency")

  def _assumption(self, config, release):
    s = release.schedule
    start = ("each client's first eligible round drawn once from the stationary law of the "
             "chain without availability" if s["warm_start"]
             else "every client eligible at round 0")
    availability = s.get("availability")
    if availability is None:
      there = "every eligible client could be sampled (no availability filter)"
    else:
      settings = config.participation_settings
      there = (
          f"only clients available at the round's simulated time could be sampled "
          f"(--availability={settings.availability}, a round every {settings.round_hours:g} "
          f"h while any device could be there). This adds an assumption: a client's availability is independent of its data; "
          f"its time zone (hence which rounds fall in its daily window) is treated as public, "
          f"and whether it checks in during a window as a secret coin of probability "
          f"{availability['window_probability']:.6g}, independent across clients and days. "
          f"The population falls into {availability['num_classes']} classes of distinct "
          f"windows; each was accounted and verified on its own and the ε is the largest. "
          f"The population itself — how many devices, and each one's time zone — is treated "
          f"as public and the same with or without any one client's data (it sets the round "
          f"times, the classes, p and the denominator): neighbouring datasets differ in one "
          f"client's data, not in which devices exist. The check-ins covered are this "
          f"emulation's (coins of exactly that probability); a production system's real "
          f"check-ins are device behaviour, correlated across days, and not covered unless "
          f"they are independent coins of that probability. An adversary who learns a "
          f"client's check-ins, or availability that depends on what the client types, voids "
          f"the amplification")
    return (
        f"after taking part in a round a client was ineligible for the next "
        f"{s['min_sep'] - 1} round(s) (b = {s['min_sep']}); in every round it was eligible "
        f"for it was sampled independently with probability p = "
        f"{s['sampling_probability']:.6g}, secretly ({start}); {there}; and a round with no "
        "client still released its noise. The guarantee holds for a production system only "
        "if it samples the same way, with randomness nobody else knows.")

  def _schedule_details(self, release):
    s = release.schedule
    rate = ("stationary_participation_rate" if s.get("availability") is None
            else "mean_participation_rate")
    extra = ({} if s.get("availability") is None
             else {"peak_participation_rate": s.get("peak_participation_rate")})
    return {"min_sep": s["min_sep"], "sampling_probability": s["sampling_probability"],
            "warm_start": s["warm_start"], rate: s["participation_rate"], **extra,
            "availability": s.get("availability"),
            "exact_likelihood_ratio": s.get("exact_likelihood_ratio")}


def _jsonable(key: tuple) -> tuple:
  return tuple(json.loads(json.dumps(list(key))))


def save_release(root_dir: str, key: tuple, release: amplification.MonteCarloRelease,
                 calibrated_for: Optional[float] = None) -> None:
  """Writes `amplification.json` (the run's Monte Carlo release, and the target ε its σ was
  calibrated for, if any) unless it is there already."""
  path = os.path.join(root_dir, AMPLIFICATION_FILE)
  if os.path.exists(path):
    return
  files.atomic_write_json(path, {"key": list(key), "release": release.to_dict(),
                                 "calibrated_for": calibrated_for}, indent=1)


# ---------------------------------------------------------------------------------------
# Cyclic Poisson (banded C).


class CyclicPoisson(Amplification):
  """Cyclic Poisson sampling of a banded C (Choquette-Choo et al. 2023)."""

  def _args(self, config, mechanism, num_clients) -> dict[str, Any]:
    """The analysis' settings for the planned rounds (the registry checked them)."""
    return self.analysis.args(config, mechanism, num_clients)

  def calibrate(self, config, mechanism, num_clients, target_epsilon):
    """σ whose report — the PLD of the run's accountant for the planned rounds — is at most
    `target_epsilon` (the calibration's faster PLD grid can land a hair below the report's)."""
    args = self._args(config, mechanism, num_clients)
    key = (float(target_epsilon), tuple(sorted(args.items())))
    if key not in _CYCLIC_CALIBRATED:  # Compare calibrates a row for each of its seeds.
      sigma = amplification.cyclic_poisson_noise_multiplier(target_epsilon, accountant="pld",
                                                            **args)
      while amplification.cyclic_poisson_epsilon(sigma, **args).epsilon > target_epsilon:
        sigma = amplification.round_up(sigma * (1.0 + 1e-4))
      _CYCLIC_CALIBRATED[key] = sigma
    return _CYCLIC_CALIBRATED[key]

  def accountant(self, config, mechanism, num_clients):
    args = self._args(config, mechanism, num_clients)
    planned = amplification.cyclic_poisson_epsilon(config.noise_multiplier, **args)
    details = planned.to_dict()
    details.pop("epsilon")  # That of the planned rounds; the report's is for those run.
    assumption = (
        f"each client was put into one of G = {config.min_sep} groups uniformly at random, "
        f"once, secretly; round t sampled each member of group t mod G independently with "
        f"probability q = {planned.sampling_probability:.4g}; C has at most G bands, so one "
        "client's rounds touch disjoint rows of C. The guarantee holds for a production "
        "system only if it samples the same way, with randomness nobody else knows.")
    method = (f"⌈n/G⌉ compositions of the Poisson-subsampled Gaussian with noise multiplier "
              f"σ / {planned.column_norm:.4g} (max column norm), PLD and RDP (dp_accounting)")

    def epsilon_for(rounds: int) -> float:
      return amplification.cyclic_poisson_epsilon(
          config.noise_multiplier, **dict(args, rounds=rounds)).epsilon

    def compositions(rounds: int) -> int:  # ε depends on the rounds through ⌈n/G⌉ only.
      return sensitivity_lib.participation_cap(rounds, config.min_sep)

    def rdp_epsilon_for(rounds: int) -> float:
      return amplification.cyclic_poisson_rdp_epsilon(
          config.noise_multiplier, **dict(args, rounds=rounds))

    return AmplifiedAccountant(
        self.name, config, mechanism,
        _memo(epsilon_for, {config.rounds: planned.epsilon}, key=compositions),
        details, method, assumption, progress_epsilon=_memo(rdp_epsilon_for, key=compositions))


def _memo(fn, known: Optional[dict[int, float]] = None, key=lambda rounds: rounds):
  """`fn(rounds)` computed once per `key(rounds)` (`known`: values already computed; `key`:
  what the value depends on)."""
  cache: dict[int, float] = {key(r): v for r, v in (known or {}).items()}

  def wrapped(rounds: int) -> float:
    k = key(rounds)
    if k not in cache:
      cache[k] = fn(rounds)
    return cache[k]
  return wrapped


_TRAINING = {schemes.BallsInBinsAmplification: BallsInBins,
             schemes.BMinSepAmplification: BMinSep,
             schemes.CyclicPoissonAmplification: CyclicPoisson}


def of(scheme: schemes.Scheme) -> Optional[Amplification]:
  """How a run amplifies DP-FTRL under `scheme` (None: its entry has no amplification)."""
  if scheme.amplification is None:
    return None
  return _TRAINING[type(scheme.amplification)](scheme.amplification)
