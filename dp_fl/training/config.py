"""The typed, validated configuration of one training run, saved with the run.

Binaries read flags only in `main` and turn them into a `TrainingConfig`; everything below
`main` takes the config. The config is saved as `config.json` in the run directory; a resumed
run must have the same task and the same privacy-relevant fields (`PRIVACY_FIELDS`), or it is
refused: changing the mechanism, the noise, the clip norm, the cohort size or the seed halfway
through would make the privacy report of the run meaningless.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, Optional

from dp_fl import _checks
from dp_fl import files
from dp_fl import runtime as runtime_lib
from dp_fl.training import learners
from dp_fl.training import policies
from dp_fl.training import registry

MECHANISMS = tuple(registry.MECHANISMS)
"""`--mechanism` (dp_fl.training.registry): DP-FTRL with BLT / BandMF / online TreeAgg / C = I
(paper 004, Alg. 1), DP-FedAvg with Poisson user sampling (paper 001, Alg. 1), or no privacy:
`none` (plain FedAvg) or `clip` (the DP estimator without noise: client updates clipped to ζ,
summed, divided by the fixed cohort; the non-private run that isolates what the noise
costs)."""

NONPRIVATE_MECHANISMS = registry.non_private_names()

PARTICIPATIONS = tuple(registry.PARTICIPATIONS)
"""`--participation`: the scheduler that picks each round's clients (dp_fl.participation)."""

ON_NONFINITE = policies.ON_NONFINITE
"""What a round with a non-finite training loss does: stop the run, or discard the round."""

CLIENT_OPTIMIZERS = ("sgd", "adam")
"""`--client_optimizer`: local SGD, or local Adam (restarted every round)."""

SERVER_OPTIMIZERS = ("sgdm", "adam")
"""`--server_optimizer`: SGD with momentum, or Adam (both applied to the noised update)."""

# Fields whose change would give the learning process another state than the checkpoint's.
STATE_FIELDS = ("server_optimizer",)

# Fields whose change would alter the privacy guarantee of a resumed run. They are saved in
# config.json and in every checkpoint, and checked against both on resume.
PRIVACY_FIELDS = ("task", "mechanism", "noise_multiplier", "clip_norm", "clients_per_round",
                  "seed", "participation", "min_sep", "max_participations", "blt_buffers",
                  "bands", "mechanism_params", "population_sampling_rate", "delta",
                  "reproducible_noise_seed", "cpsgd_levels", "cpsgd_trials", "cpsgd_p",
                  "cpsgd_x_max")


# Magnitudes a float32 training job and its accountants can represent (issue #18: σ = 1e-300
# crashed the accountant after a round, σ = 1e300 made every update non-finite).
NOISE_MULTIPLIER_RANGE = (1e-4, 1e6)
CLIP_NORM_RANGE = (1e-8, 1e8)


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """Everything a training run depends on. Validated at construction.

  Attributes:
    task: the task's name (a run directory belongs to one task).
    root_dir: run directory (checkpoints, metrics, privacy reports, config).
    rounds: n, training rounds.
    clients_per_round: m, the report goal (fixed denominator of DP-FTRL; expected cohort for
      Poisson sampling).
    mechanism: one of MECHANISMS.
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
    min_sep: b the mechanism is optimized for and the round-based scheduler enforces.
    max_participations: k the mechanism is optimized for (None: ⌈n/b⌉).
    blt_buffers: d for BLT.
    bands: p, the bands of the banded matrix: C for bandmf and bsr, C⁻¹ for bisr and
      bandinvmf (None: min(b, n)). Was `bandmf_bands` (still read from older run directories).
    mechanism_params: optional JSON file with the mechanism's parameters (scripts/mechanism).
    cpsgd_levels: k, cpSGD's quantization levels (paper 000, Eq. 8).
    cpsgd_trials: m, the Binomial trials of each client's noise share; None: the smallest m
      whose noise is at least `noise_multiplier` × clip norm in the sum (what
      `--calibrate_epsilon` sets).
    cpsgd_p: p, each trial's success probability.
    cpsgd_x_max: X_max, the bound rotated coordinates are clipped to; None: Thm. 4's
      D √(2 log(2nd/δ)/d).
    participation: one of PARTICIPATIONS.
    timer_hours: device timer T (device_timer).
    round_hours: simulated duration of a round (device_timer).
    availability: "always" or "diurnal" (device_timer).
    population_sampling_rate: q for Poisson sampling (None: clients_per_round / population).
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
    jit_compile: compile the client training step with XLA (runtime `xla` only: TFF 0.87's
      C++ worker has no XLA device; see dp_fl/training/client_work.py).
    runtime: how rounds execute, one of `learners.RUNTIMES` (dp_fl/training/learners.py);
      checkpoints resume in either.
    device: where the `xla` runtime runs, one of `learners.DEVICES`.
    workers: "HOST:PORT,..." of remote TFF workers (`scripts/worker`): the round's clients are
      split over them and the DP aggregation runs here (runtime `workers`, which giving
      `workers` selects); None: no remote workers.
    worker_timeout_seconds: deadline of every call to a remote worker; a worker that does not
      answer within it stops the job with an error naming it (checkpoint intact).
    worker_tls_ca_cert: PEM file of the CA of the workers' TLS front ends: the channels to
      the workers use TLS (`runtime.TlsFiles`); None: plaintext gRPC (private networks only).
    worker_tls_client_cert, worker_tls_client_key: this process's certificate and key for
      mutual TLS (both or neither; need `worker_tls_ca_cert`).
  """
  task: str
  root_dir: str
  rounds: int
  clients_per_round: int
  mechanism: str = "blt"
  noise_multiplier: float = 1.0
  clip_norm: float = 1.0
  seed: int = 0
  reproducible_noise_seed: Optional[int] = None
  min_sep: int = 1
  max_participations: Optional[int] = None
  blt_buffers: int = 4
  bands: Optional[int] = None
  mechanism_params: Optional[str] = None
  cpsgd_levels: int = 16
  cpsgd_trials: Optional[int] = None
  cpsgd_p: float = 0.5
  cpsgd_x_max: Optional[float] = None
  participation: str = "device_timer"
  timer_hours: float = 24.0
  round_hours: float = 1.0
  availability: str = "always"
  population_sampling_rate: Optional[float] = None
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
  jit_compile: bool = False
  runtime: str = "tff_worker"
  device: str = "auto"
  workers: Optional[str] = None
  worker_timeout_seconds: float = runtime_lib.DEFAULT_WORKER_TIMEOUT_SECONDS
  worker_tls_ca_cert: Optional[str] = None
  worker_tls_client_cert: Optional[str] = None
  worker_tls_client_key: Optional[str] = None

  def __post_init__(self):
    if not isinstance(self.task, str) or not self.task:
      raise ValueError(f"`task` must be a non-empty string; got {self.task!r}.")
    if not isinstance(self.root_dir, str) or not self.root_dir:
      raise ValueError(f"`root_dir` must be a non-empty path; got {self.root_dir!r}.")
    for name in ("rounds", "clients_per_round", "min_sep", "blt_buffers", "client_epochs",
                 "eval_every", "checkpoint_every", "keep_checkpoints"):
      _checks.check_positive_int(name, getattr(self, name))
    for name in ("seed", "cooldown_rounds"):
      _checks.check_nonnegative_int(name, getattr(self, name))
    _checks.check_in_range("cpsgd_levels", self.cpsgd_levels, 2, 2 ** 30, integer=True,
                           why="cpSGD quantizes each coordinate to k >= 2 levels; typical 2–256")
    if self.cpsgd_trials is not None:
      _checks.check_nonnegative_int("cpsgd_trials", self.cpsgd_trials)
    _checks.check_open_unit("cpsgd_p", self.cpsgd_p)
    if self.cpsgd_x_max is not None:
      _checks.check_positive("cpsgd_x_max", self.cpsgd_x_max)
    for name in ("max_participations", "bands"):
      if getattr(self, name) is not None:
        _checks.check_positive_int(name, getattr(self, name))
    if self.reproducible_noise_seed is not None:
      _checks.check_nonnegative_int("reproducible_noise_seed", self.reproducible_noise_seed)
    _one_of("mechanism", self.mechanism, MECHANISMS)
    _one_of("participation", self.participation, PARTICIPATIONS)
    _one_of("on_nonfinite", self.on_nonfinite, ON_NONFINITE)
    _one_of("server_optimizer", self.server_optimizer, SERVER_OPTIMIZERS)
    _one_of("client_optimizer", self.client_optimizer, CLIENT_OPTIMIZERS)
    _checks.check_positive("server_adam_epsilon", self.server_adam_epsilon)
    _one_of("availability", self.availability, registry.AVAILABILITIES)
    _checks.check_positive("clip_norm", self.clip_norm)
    _checks.check_nonnegative("noise_multiplier", self.noise_multiplier)
    if self.noise_multiplier != 0:
      _checks.check_in_range(
          "noise_multiplier", self.noise_multiplier, *NOISE_MULTIPLIER_RANGE,
          why="or 0 with a non-private --mechanism; below it ε is astronomically large and "
          "σ² underflows in the accountants, above it the noise overflows float32; typical "
          "0.3–20")
    _checks.check_in_range(
        "clip_norm", self.clip_norm, *CLIP_NORM_RANGE,
        why="clipped updates and their noise must stay representable in float32; typical "
        "0.01–10")
    for name in ("timer_hours", "round_hours", "client_learning_rate", "server_learning_rate"):
      _checks.check_positive(name, getattr(self, name))
    if not 0 <= self.server_momentum < 1:
      raise ValueError(f"`server_momentum` must be in [0, 1); got {self.server_momentum!r}.")
    if not 0 < self.cooldown_final_fraction <= 1:
      raise ValueError("`cooldown_final_fraction` must be in (0, 1]; got "
                       f"{self.cooldown_final_fraction!r}.")
    if self.cooldown_rounds > self.rounds:
      raise ValueError(f"`cooldown_rounds`={self.cooldown_rounds} exceeds `rounds`="
                       f"{self.rounds}; use at most the number of rounds.")
    _checks.check_open_unit("delta", self.delta)
    if self.target_epsilon is not None:
      _checks.check_positive("target_epsilon", self.target_epsilon)
    if self.population_sampling_rate is not None:
      _checks.check_half_open_unit("population_sampling_rate", self.population_sampling_rate)
    if not isinstance(self.jit_compile, bool):
      raise ValueError(f"`jit_compile` must be a bool; got {self.jit_compile!r}.")
    _one_of("runtime", self.runtime, tuple(learners.RUNTIMES))
    self._check_workers()
    _one_of("device", self.device, learners.DEVICES)
    if self.jit_compile and not learners.runtime(self.runtime).jit_compile:
      raise ValueError(
          f"`jit_compile`=True cannot take effect with --runtime={self.runtime}: TFF 0.87 runs "
          "client training in its C++ worker_binary, which has no XLA device, so "
          "tf.function(jit_compile=True) there is silently not compiled "
          "(dp_fl/training/client_work.py, docs/BENCHMARKS.md). Use --runtime=xla, or drop "
          "--jit_compile.")
    registry.mechanism(self.mechanism).check_config(self)

  def _check_workers(self) -> None:
    """`workers` selects runtime `workers` (from the default); other runtimes refuse it."""
    _checks.check_in_range("worker_timeout_seconds", self.worker_timeout_seconds, 0.1, 86400.0,
                           why="a deadline per call to a remote worker; typical 60–1800 s")
    tls_flags = [f"--{name}" for name in ("worker_tls_ca_cert", "worker_tls_client_cert",
                                          "worker_tls_client_key") if getattr(self, name)]
    if self.workers is None:
      if self.runtime == "workers":
        raise ValueError("--runtime=workers needs --workers=HOST:PORT[,HOST:PORT...] (remote "
                         "TFF workers started with `./bazelw run //scripts:worker`).")
      if tls_flags:
        raise ValueError(f"{', '.join(tls_flags)} secure the channels to remote workers; give "
                         "--workers too, or drop them.")
      return
    if tls_flags and self.worker_tls_ca_cert is None:
      raise ValueError(f"{', '.join(tls_flags)} need --worker_tls_ca_cert (the PEM file of "
                       "the CA that signed the workers' TLS certificates).")
    self.worker_tls()  # Checks the files now, naming the flag.
    if not isinstance(self.workers, str):
      raise ValueError(f"`workers` must be a 'HOST:PORT,...' string; got {self.workers!r}.")
    runtime_lib.parse_workers(self.workers)
    if self.runtime == "tff_worker":
      object.__setattr__(self, "runtime", "workers")
    elif self.runtime != "workers":
      raise ValueError(f"--workers runs the clients on remote TFF workers (runtime 'workers'); "
                       f"--runtime={self.runtime} cannot take it. Drop --runtime or --workers.")

  def worker_tls(self) -> Optional[runtime_lib.TlsFiles]:
    """The TLS files of the channels to the workers (None: plaintext)."""
    if self.worker_tls_ca_cert is None:
      return None
    return runtime_lib.TlsFiles(self.worker_tls_ca_cert, self.worker_tls_client_cert,
                                self.worker_tls_client_key)

  # -- serialization -------------------------------------------------------------------

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=1, sort_keys=True)

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> "TrainingConfig":
    if not isinstance(data, Mapping):
      raise ValueError(f"A training config must be a JSON object; got {type(data).__name__}.")
    fields = {f.name for f in dataclasses.fields(cls)}
    data = _renamed(data)
    unknown = sorted(set(data) - fields)
    if unknown:
      raise ValueError(f"Unknown training config fields {unknown}; known: {sorted(fields)}.")
    return cls(**dict(data))

  def replace(self, **changes: Any) -> "TrainingConfig":
    return dataclasses.replace(self, **changes)

  # -- derived -------------------------------------------------------------------------

  @property
  def is_private(self) -> bool:
    return registry.mechanism(self.mechanism).private

  @property
  def noise_seed_is_public(self) -> bool:
    """Whether the noise and sampling derive from a seed written in the config."""
    return self.reproducible_noise_seed is not None

  def privacy_record(self) -> dict[str, Any]:
    """The privacy-relevant fields, as saved with every checkpoint."""
    return {name: getattr(self, name) for name in PRIVACY_FIELDS}

  def server_learning_rate_at(self, round_index: int) -> float:
    """Server lr of round t (0-based): constant, then a linear cooldown (paper 004, ref. [8])."""
    start = self.rounds - self.cooldown_rounds
    if self.cooldown_rounds == 0 or round_index < start:
      return self.server_learning_rate
    progress = (round_index - start + 1) / self.cooldown_rounds
    return self.server_learning_rate * (1.0 - (1.0 - self.cooldown_final_fraction) * progress)


def _one_of(name: str, value: Any, allowed: tuple[str, ...]) -> None:
  if value not in allowed:
    raise ValueError(f"`{name}` must be one of {allowed}; got {value!r}.")


CONFIG_FILE = "config.json"


# Fields renamed since a run directory may have been written: old name -> new name.
_RENAMED_FIELDS = {"bandmf_bands": "bands"}


def _renamed(data: Mapping[str, Any]) -> dict[str, Any]:
  """`data` (a saved config or privacy record) with renamed fields under their new names."""
  out = dict(data)
  for old, new in _RENAMED_FIELDS.items():
    if old in out and new not in out:
      out[new] = out.pop(old)
  return out


def privacy_differences(saved: TrainingConfig | Mapping[str, Any],
                        new: TrainingConfig) -> list[str]:
  """The privacy-relevant fields that differ, as 'field: saved -> new' lines.

  `saved` is a config or a `privacy_record()` (a field missing from an older record is
  compared with the field's default).
  """
  record = saved.privacy_record() if isinstance(saved, TrainingConfig) else _renamed(saved)
  defaults = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}
  out = []
  for name in PRIVACY_FIELDS:
    old = record.get(name, defaults.get(name))
    if old != getattr(new, name):
      out.append(f"{name}: {old!r} -> {getattr(new, name)!r}")
  return out


def save_or_check(config: TrainingConfig) -> Optional[TrainingConfig]:
  """Writes `config.json` in a new run directory, or checks it against a saved one.

  Returns the saved config when the directory already held one (a resumed run), else None.
  Raises ValueError if the directory belongs to another task or the privacy-relevant fields
  changed; the other fields (e.g. more rounds, another eval cadence) may change on resume and
  the new config is saved.
  """
  saved = check_saved(config)
  save(config)
  return saved


def save(config: TrainingConfig) -> None:
  """Writes `config.json` in the run directory (atomically)."""
  files.atomic_write_text(os.path.join(config.root_dir, CONFIG_FILE), config.to_json())


def check_saved(config: TrainingConfig) -> Optional[TrainingConfig]:
  """The saved `config.json` of the run directory (None if there is none), checked against
  `config` as `save_or_check` does; writes nothing."""
  path = os.path.join(config.root_dir, CONFIG_FILE)
  saved = None
  if os.path.exists(path):
    try:
      with open(path, encoding="utf-8") as f:
        saved = TrainingConfig.from_dict(json.load(f))
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
