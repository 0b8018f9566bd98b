"""The typed, validated configuration of one training run, saved with the run.

Binaries read flags only in `main` and turn them into a `TrainingConfig`
(`registry.make_config`); everything below `main` takes the config. It holds the fields every
run reads, and three typed settings objects owned by the registry entry of its names:

    config.mechanism_settings       # --mechanism's own knobs (registry.py: e.g. BltSettings)
    config.participation_settings   # --participation's (dp_fl/participation/schemes.py)
    config.runtime_settings         # --runtime's (runtimes.py: e.g. WorkersSettings)

A settings object is a frozen dataclass that validates itself; each field is a flag of the
same name (`setting`: its help text, whether a resumed run may change it, earlier names).
This module is a leaf: which settings type a name takes, and the checks that span the
config and its entries, are the registry's (`registry.make_config`, `registry.validate`).

The config is saved as `config.json` in the run directory; a resumed run must have the same
task and the same privacy-relevant values (`privacy_record`), or it is refused: changing the
mechanism, the noise, the clip norm, the cohort size or the seed halfway through would make
the privacy report of the run meaningless.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Iterator, Mapping, Optional

from dp_fl import _checks
from dp_fl import files
from dp_fl import settings as settings_lib
from dp_fl.training import noise_guard
from dp_fl.training import policies

ON_NONFINITE = policies.ON_NONFINITE
"""What a round with a non-finite training loss does: stop the run, or discard the round."""

CLIENT_OPTIMIZERS = ("sgd", "adam")
"""`--client_optimizer`: local SGD, or local Adam (restarted every round)."""

SERVER_OPTIMIZERS = ("sgdm", "adam")
"""`--server_optimizer`: SGD with momentum, or Adam (both applied to the noised update)."""

SETTINGS = ("mechanism_settings", "participation_settings", "runtime_settings")
"""The config's typed settings, in the order of the names that choose their type."""

NAMES = ("mechanism", "participation", "runtime")
"""The fields whose value chooses the type of the settings of the same position."""

# Fields whose change would give the learning process another state than the checkpoint's.
STATE_FIELDS = ("server_optimizer",)

# Common fields whose change would alter the privacy guarantee of a resumed run; with the
# settings' fields marked `privacy` they form `privacy_record()`, saved in config.json and
# in every checkpoint, and checked against both on resume.
PRIVACY_FIELDS = ("task", "mechanism", "noise_multiplier", "clip_norm", "clients_per_round",
                  "seed", "participation", "min_sep", "delta", "reproducible_noise_seed",
                  "audit_canaries")

# Magnitudes a float32 training job and its accountants can represent (issue #18: σ = 1e-300
# crashed the accountant after a round, σ = 1e300 made every update non-finite).
NOISE_MULTIPLIER_RANGE = (1e-4, 1e6)
CLIP_NORM_RANGE = (1e-8, 1e8)

_POSITIVE_INTS = ("rounds", "clients_per_round", "min_sep", "client_epochs", "eval_every",
                  "checkpoint_every", "keep_checkpoints")
_POSITIVE = ("server_adam_epsilon", "client_learning_rate", "server_learning_rate")
_CHOICES = {"on_nonfinite": ON_NONFINITE, "server_optimizer": SERVER_OPTIMIZERS,
            "client_optimizer": CLIENT_OPTIMIZERS, "noise_guard": noise_guard.GUARDS}


# A settings field / a name without settings (dp_fl/settings.py, shared with participation).
setting = settings_lib.setting
NoSettings = settings_lib.NoSettings


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """Everything a training run depends on. Validated at construction (the common fields; the
  settings validate themselves, and `registry.validate` checks the whole).

  Attributes:
    task: the task's name (a run directory belongs to one task).
    root_dir: run directory (checkpoints, metrics, privacy reports, config).
    rounds: n, training rounds.
    clients_per_round: m, the report goal (fixed denominator of DP-FTRL; expected cohort for
      Poisson sampling).
    mechanism_settings, participation_settings, runtime_settings: the typed settings of
      `mechanism`, `participation` and `runtime` (see the module docstring).
    mechanism: a `--mechanism` of dp_fl.training.registry: DP-FTRL with BLT / BandMF / online
      TreeAgg / C = I ... (paper 004, Alg. 1), DP-FedAvg with Poisson user sampling (paper
      001, Alg. 1), cpSGD (paper 000), or no privacy: `none` (plain FedAvg) or `clip` (the
      DP estimator without noise).
    noise_multiplier: σ (noise std / clip norm); for DP-FedAvg the z of paper 001.
    clip_norm: ζ, L2 clip norm of each client update.
    seed: the seed of the public parts of the run: model initialization, the mechanism's
      optimization, the simulated device availability. The noise and the sampling of clients
      never derive from it (see `reproducible_noise_seed`).
    reproducible_noise_seed: None (the default and the only private choice): the noise seed
      of the aggregator and the seed of the participation scheduler are drawn from OS entropy
      and kept only in the checkpointed state. An integer makes both derive from it, so runs
      can be repeated exactly for research; the run is then NOT private against anyone who
      knows that number (it is in config.json), and the privacy report says so.
    min_sep: b the mechanism is optimized for and the round-based schedulers enforce.
    participation: a `--participation` of dp_fl/participation/schemes.py.
    client_optimizer: one of CLIENT_OPTIMIZERS: "sgd" (paper 001 Alg. 1, paper 004) or "adam"
      (local Adam, its moments restarted every round; the clipped model delta is what the
      aggregator privatizes, so privacy is unchanged).
    client_learning_rate, client_epochs: the local optimizer's rate and epochs.
    server_optimizer: one of SERVER_OPTIMIZERS: "sgdm", SGD with momentum (paper 004: 0.9;
      paper 001: plain SGD, momentum 0), or "adam", Adam on the noised average update
      (FedAdam, Reddi et al. 2021; post-processing, so privacy is unchanged) with β1 =
      `server_momentum`, β2 = 0.999 and ε = `server_adam_epsilon`.
    server_learning_rate, server_momentum: the server optimizer's rate and momentum.
    server_adam_epsilon: Adam's ε; large values (1e-3) keep the DP noise in the update from
      being divided by a tiny second moment.
    cooldown_rounds: the server learning rate decays linearly to
      `cooldown_final_fraction` × lr over the last `cooldown_rounds` rounds.
    cooldown_final_fraction: see above.
    eval_every: evaluate every E rounds (and at the end).
    checkpoint_every: checkpoint every K rounds (and on SIGTERM/SIGINT and at the end).
    keep_checkpoints: how many recent checkpoints to keep.
    delta: δ of the privacy report.
    target_epsilon: stop before the round that would exceed it (None: no budget).
    on_nonfinite: one of ON_NONFINITE.
    runtime: how rounds execute, a `--runtime` of dp_fl/training/runtimes.py; checkpoints
      resume in any.
    audit_canaries: K canary clients for the empirical privacy audit
      (dp_fl/training/canaries.py; 0: none). They join the population, so K is
      privacy-relevant (a resumed run keeps its canaries).
    audit_strict: exit non-zero when the audit's lower bound exceeds the accounted ε.
    noise_guard: one of noise_guard.GUARDS: state the noise-to-signal ratios and warn when
      the noise is beyond what learns ("warn"), also scale the server learning rate down to
      the limit ("scale", the task presets'), or neither ("off"); dp_fl/training/noise_guard.py.
  """
  task: str
  root_dir: str
  rounds: int
  clients_per_round: int
  mechanism_settings: Any
  participation_settings: Any
  runtime_settings: Any
  mechanism: str = "blt"
  noise_multiplier: float = 1.0
  clip_norm: float = 1.0
  seed: int = 0
  reproducible_noise_seed: Optional[int] = None
  min_sep: int = 1
  participation: str = "device_timer"
  client_optimizer: str = "sgd"
  client_learning_rate: float = 0.5
  client_epochs: int = 1
  server_learning_rate: float = 1.0
  server_momentum: float = 0.9
  server_optimizer: str = "sgdm"
  server_adam_epsilon: float = 1e-3
  cooldown_rounds: int = 0
  cooldown_final_fraction: float = 0.1
  eval_every: int = 10
  checkpoint_every: int = 10
  keep_checkpoints: int = 3
  delta: float = 1e-6
  target_epsilon: Optional[float] = None
  on_nonfinite: str = "stop"
  runtime: str = "tff_worker"
  audit_canaries: int = 0
  audit_strict: bool = False
  noise_guard: str = "warn"

  def __post_init__(self):
    if not isinstance(self.task, str) or not self.task:
      raise ValueError(f"`task` must be a non-empty string; got {self.task!r}.")
    if not isinstance(self.root_dir, str) or not self.root_dir:
      raise ValueError(f"`root_dir` must be a non-empty path; got {self.root_dir!r}.")
    for name in _POSITIVE_INTS:
      _checks.check_positive_int(name, getattr(self, name))
    for name in ("seed", "cooldown_rounds"):
      _checks.check_nonnegative_int(name, getattr(self, name))
    if self.reproducible_noise_seed is not None:
      _checks.check_nonnegative_int("reproducible_noise_seed", self.reproducible_noise_seed)
    for name, allowed in _CHOICES.items():
      one_of(name, getattr(self, name), allowed)
    for name in _POSITIVE:
      _checks.check_positive(name, getattr(self, name))
    _check_noise_and_clip(self.noise_multiplier, self.clip_norm)
    self._check_audit()
    self._check_server_schedule()
    _checks.check_open_unit("delta", self.delta)
    if self.target_epsilon is not None:
      _checks.check_positive("target_epsilon", self.target_epsilon)
    for name in SETTINGS:
      if not dataclasses.is_dataclass(getattr(self, name)):
        raise ValueError(f"`{name}` must be a settings dataclass (registry.make_config builds "
                         f"them); got {getattr(self, name)!r}.")

  def _check_server_schedule(self) -> None:
    """The server momentum, and the cooldown of its learning rate."""
    if not 0 <= self.server_momentum < 1:
      raise ValueError(f"`server_momentum` must be in [0, 1); got {self.server_momentum!r}.")
    if not 0 < self.cooldown_final_fraction <= 1:
      raise ValueError("`cooldown_final_fraction` must be in (0, 1]; got "
                       f"{self.cooldown_final_fraction!r}.")
    if self.cooldown_rounds > self.rounds:
      raise ValueError(f"`cooldown_rounds`={self.cooldown_rounds} exceeds `rounds`="
                       f"{self.rounds}; use at most the number of rounds.")

  def _check_audit(self) -> None:
    """The empirical audit's canaries (dp_fl/training/canaries.py)."""
    _checks.check_nonnegative_int("audit_canaries", self.audit_canaries)
    if self.audit_canaries == 1:
      raise ValueError("`audit_canaries` = 1: the audit compares inserted with held-out "
                       "canaries and needs at least 2 (typically 100 or more); or 0 for none.")
    if not isinstance(self.audit_strict, bool):
      raise ValueError(f"`audit_strict` must be a bool; got {self.audit_strict!r}.")
    if self.audit_strict and not self.audit_canaries:
      raise ValueError("`audit_strict` is set but `audit_canaries` is 0: there is no audit "
                       "to be strict about; add --audit_canaries=K (e.g. 200).")

  # -- the settings --------------------------------------------------------------------

  def settings(self) -> Iterator[Any]:
    """The mechanism's, the participation's and the runtime's settings."""
    return (getattr(self, name) for name in SETTINGS)

  def flags(self) -> dict[str, Any]:
    """The config by flag names: the common fields, then every field of its settings."""
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
           if f.name not in SETTINGS}
    for settings in self.settings():
      out.update((f.name, getattr(settings, f.name)) for f in dataclasses.fields(settings))
    return out

  # -- serialization -------------------------------------------------------------------

  def to_dict(self) -> dict[str, Any]:
    """The config as JSON values: common fields, and each settings object as an object."""
    return dataclasses.asdict(self)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=1, sort_keys=True)

  def replace(self, **changes: Any) -> "TrainingConfig":
    """The config with `changes`, by flag name: common fields, or fields of its settings
    (checked by the settings' own validation). Another mechanism, participation or runtime
    takes other settings: build that config with `registry.make_config`."""
    renamed = [name for name in NAMES if name in changes and changes[name] != getattr(self, name)]
    if renamed:
      raise ValueError(f"Changing {', '.join('`' + n + '`' for n in renamed)} changes the "
                       "settings a config holds; build it with registry.make_config(**{"
                       "**config.flags(), ...}).")
    fields = {f.name for f in dataclasses.fields(self)}
    direct = {k: v for k, v in changes.items() if k in fields}
    for name in SETTINGS:
      settings = getattr(self, name)
      own = {f.name: changes[f.name] for f in dataclasses.fields(settings) if f.name in changes}
      if own:
        direct[name] = dataclasses.replace(settings, **own)
    unknown = sorted(set(changes) - fields - set(self.flags()))
    if unknown:
      raise ValueError(f"{unknown} are no settings of this config (--mechanism="
                       f"{self.mechanism}, --participation={self.participation}, --runtime="
                       f"{self.runtime}).")
    return dataclasses.replace(self, **direct)

  # -- derived -------------------------------------------------------------------------

  @property
  def noise_seed_is_public(self) -> bool:
    """Whether the noise and sampling derive from a seed written in the config."""
    return self.reproducible_noise_seed is not None

  def privacy_record(self) -> dict[str, Any]:
    """The privacy-relevant values by flag name, as saved with every checkpoint."""
    return {name: value for name, value, _, _ in self._privacy_items()}

  def _privacy_items(self) -> Iterator[tuple[str, Any, Any, tuple[str, ...]]]:
    """(flag name, value, value of a record lacking it, earlier names) of every
    privacy-relevant value."""
    defaults = {f.name: f.default for f in dataclasses.fields(self)}
    for name in PRIVACY_FIELDS:
      yield name, getattr(self, name), defaults[name], ()
    for settings in self.settings():
      for f in dataclasses.fields(settings):
        if f.metadata.get("privacy"):
          yield (f.name, getattr(settings, f.name), settings_lib.absent_value(f),
                 f.metadata.get("aliases", ()))

  def server_learning_rate_at(self, round_index: int) -> float:
    """Server lr of round t (0-based): constant, then a linear cooldown (paper 004, ref. [8])."""
    start = self.rounds - self.cooldown_rounds
    if self.cooldown_rounds == 0 or round_index < start:
      return self.server_learning_rate
    progress = (round_index - start + 1) / self.cooldown_rounds
    return self.server_learning_rate * (1.0 - (1.0 - self.cooldown_final_fraction) * progress)


def one_of(name: str, value: Any, allowed: tuple[str, ...]) -> None:
  if value not in allowed:
    raise ValueError(f"`{name}` must be one of {allowed}; got {value!r}.")


def _check_noise_and_clip(noise_multiplier: float, clip_norm: float) -> None:
  """σ >= 0 and ζ > 0 within what float32 training and the accountants represent."""
  _checks.check_positive("clip_norm", clip_norm)
  _checks.check_nonnegative("noise_multiplier", noise_multiplier)
  if noise_multiplier != 0:
    _checks.check_in_range(
        "noise_multiplier", noise_multiplier, *NOISE_MULTIPLIER_RANGE,
        why="or 0 with a non-private --mechanism; below it ε is astronomically large and "
        "σ² underflows in the accountants, above it the noise overflows float32; typical "
        "0.3–20")
  _checks.check_in_range(
      "clip_norm", clip_norm, *CLIP_NORM_RANGE,
      why="clipped updates and their noise must stay representable in float32; typical "
      "0.01–10")


CONFIG_FILE = "config.json"


def privacy_differences(saved: TrainingConfig | Mapping[str, Any],
                        new: TrainingConfig) -> list[str]:
  """The privacy-relevant values of `new` that differ from `saved`, as 'name: saved -> new'.

  `saved` is a config or a `privacy_record()` — of any version: a value an older record
  holds under an earlier name is read under it, one it lacks is compared with the value it
  had then (`settings.setting`'s `absent`, else the default), and values `new`'s mechanism
  and participation do not read are not compared.
  """
  record = saved.privacy_record() if isinstance(saved, TrainingConfig) else dict(saved)
  out = []
  for name, value, default, aliases in new._privacy_items():  # pylint: disable=protected-access
    old = next((record[key] for key in (name,) + tuple(aliases) if key in record), default)
    if old != value:
      out.append(f"{name}: {old!r} -> {value!r}")
  return out


ConfigLoader = Callable[[Mapping[str, Any]], TrainingConfig]
"""Builds a validated config from saved JSON (`registry.config_from_dict`)."""


def save_or_check(config: TrainingConfig, load: ConfigLoader) -> Optional[TrainingConfig]:
  """Writes `config.json` in a new run directory, or checks it against a saved one.

  Returns the saved config when the directory already held one (a resumed run), else None.
  Raises ValueError if the directory belongs to another task or the privacy-relevant fields
  changed; the other fields (e.g. more rounds, another eval cadence) may change on resume and
  the new config is saved.
  """
  saved = check_saved(config, load)
  save(config)
  return saved


def save(config: TrainingConfig) -> None:
  """Writes `config.json` in the run directory (atomically)."""
  files.atomic_write_text(os.path.join(config.root_dir, CONFIG_FILE), config.to_json())


def check_saved(config: TrainingConfig, load: ConfigLoader) -> Optional[TrainingConfig]:
  """The saved `config.json` of the run directory (None if there is none), read by `load`
  and checked against `config` as `save_or_check` does; writes nothing."""
  path = os.path.join(config.root_dir, CONFIG_FILE)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      saved = load(json.load(f))
  except (OSError, ValueError) as e:
    raise ValueError(
        f"`root_dir` {config.root_dir!r} holds an unreadable {CONFIG_FILE} ({e}); it is not "
        "a dp_fl run directory of this version. Use another --root_dir.") from e
  if saved.task != config.task:
    raise ValueError(
        f"`root_dir` {config.root_dir!r} belongs to a run of task {saved.task!r}, not "
        f"{config.task!r}; use another --root_dir.")
  changed = privacy_differences(saved, config)
  if changed:
    raise ValueError(
        f"Refusing to resume the run in {config.root_dir!r}: these settings change its "
        f"privacy guarantee: {'; '.join(changed)}. Resume with the saved settings, or start "
        "a new run in another --root_dir.")
  restructured = [f"{name}: {getattr(saved, name)!r} -> {getattr(config, name)!r}"
                  for name in STATE_FIELDS if getattr(saved, name) != getattr(config, name)]
  if restructured:
    raise ValueError(
        f"Refusing to resume the run in {config.root_dir!r}: its checkpoints hold the state "
        f"of another server optimizer ({'; '.join(restructured)}). Resume with the saved "
        "setting, or start a new run in another --root_dir.")
  return saved
