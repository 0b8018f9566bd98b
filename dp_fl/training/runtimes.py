"""What a `--runtime` name means for a training run: its settings, its checks, its learner.

| `--runtime`  | settings (`config.runtime_settings`)                   | rounds run in          |
|--------------|--------------------------------------------------------|------------------------|
| `tff_worker` | `TffWorkerSettings` (none)                             | TFF's C++ worker       |
| `xla`        | `XlaSettings`: --device, --jit_compile                 | this process, on device|
| `workers`    | `WorkersSettings`: --device, --workers, its deadline   | remote TFF workers     |
|              | and TLS files                                          | (aggregation here)     |

The learners themselves, and which of them compile client work with XLA, are
dp_fl/execution/learners.py's (`learners.RUNTIMES`); this module adds what a training run
configures for each. `--workers` selects the runtime `workers` from the default one.

The default is the C++ worker, except where its memory would grow with the cohort
(`program.runtime_for_cohort`): TFF's worker holds every client's results until the round's aggregate (≈ 3.4
model-sized arrays a client, `budget.worker_cohort_estimate`), the in-process runtime folds
each client into the accumulator as it completes (flat in the cohort, at the worker's speed:
docs/BENCHMARKS.md "Runtimes"). So a run whose cohort would make the worker hold more than
`budget.IN_PROCESS_ABOVE_BYTES` runs in process unless `--runtime` was given, and an explicit
`--runtime=tff_worker` beyond the memory budget is refused naming the flag.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from dp_fl import _checks
from dp_fl.execution import learners
from dp_fl.execution import runtime as runtime_lib
from dp_fl.training import config as config_lib

_setting = config_lib.setting


@dataclasses.dataclass(frozen=True)
class TffWorkerSettings:
  """`--runtime=tff_worker`: TFF's C++ worker has no device choice and no XLA."""

  jit_compile = False  # Not a field: client work is never XLA-compiled there.

  def learner_kwargs(self) -> dict[str, Any]:
    return {"device": "auto"}


@dataclasses.dataclass(frozen=True)
class DeviceSettings:
  """Where the in-process MapReduceForm runs (`dp_fl/execution/xla.py`)."""
  device: str = _setting("auto", "where --runtime=xla runs: " + ", ".join(learners.DEVICES)
                         + " (auto: a GPU, else a TPU, else the CPU)")

  def __post_init__(self):
    config_lib.one_of("device", self.device, learners.DEVICES)

  def learner_kwargs(self) -> dict[str, Any]:
    return {"device": self.device}


@dataclasses.dataclass(frozen=True)
class XlaSettings(DeviceSettings):
  """`--runtime=xla`: the device, and whether the client step is XLA-compiled."""
  jit_compile: bool = _setting(False, "XLA-compile the client step (--runtime=xla only: TFF "
                               "0.87's C++ worker has no XLA)")

  def __post_init__(self):
    super().__post_init__()
    _check_bool("jit_compile", self.jit_compile)


@dataclasses.dataclass(frozen=True)
class WorkersSettings(DeviceSettings):
  """`--runtime=workers`: the remote TFF workers (`scripts/worker`) the round's clients are
  split over, the deadline of every call to them, and the TLS files of the channels."""

  jit_compile = False  # Not a field: the workers run TFF's C++ worker (no XLA).
  workers: Optional[str] = _setting(
      None, "HOST:PORT,... of remote TFF workers (scripts/worker): each round's clients are "
      "split over them, the DP aggregation and its noise stay here (docs/DISTRIBUTED.md)")
  worker_timeout_seconds: float = _setting(
      runtime_lib.DEFAULT_WORKER_TIMEOUT_SECONDS, "deadline of every call to a remote worker; "
      "past it the job stops naming the worker (checkpoint intact)")
  worker_tls_ca_cert: Optional[str] = _setting(
      None, "PEM CA of the workers' TLS front ends: TLS to the workers (default: plaintext "
      "gRPC, private networks only)")
  worker_tls_client_cert: Optional[str] = _setting(
      None, "PEM certificate of this process for mutual TLS")
  worker_tls_client_key: Optional[str] = _setting(None, "PEM key of this process for mutual TLS")

  def __post_init__(self):
    super().__post_init__()
    _check_worker_timeout(self.worker_timeout_seconds)
    if self.workers is None:
      raise ValueError("--runtime=workers needs --workers=HOST:PORT[,HOST:PORT...] (remote "
                       "TFF workers started with `./bazelw run //scripts:worker`).")
    tls_flags = _tls_flags(dataclasses.asdict(self))
    if tls_flags and self.worker_tls_ca_cert is None:
      raise ValueError(f"{', '.join(tls_flags)} need --worker_tls_ca_cert (the PEM file of "
                       "the CA that signed the workers' TLS certificates).")
    self.worker_tls()  # Checks the files now, naming the flag.
    if not isinstance(self.workers, str):
      raise ValueError(f"`workers` must be a 'HOST:PORT,...' string; got {self.workers!r}.")
    runtime_lib.parse_workers(self.workers)

  def worker_tls(self) -> Optional[runtime_lib.TlsFiles]:
    """The TLS files of the channels to the workers (None: plaintext)."""
    if self.worker_tls_ca_cert is None:
      return None
    return runtime_lib.TlsFiles(self.worker_tls_ca_cert, self.worker_tls_client_cert,
                                self.worker_tls_client_key)

  def learner_kwargs(self) -> dict[str, Any]:
    return {"device": self.device, "workers": self.workers,
            "worker_timeout_seconds": self.worker_timeout_seconds,
            "worker_tls": self.worker_tls()}


SETTINGS: dict[str, type] = {
    "tff_worker": TffWorkerSettings, "xla": XlaSettings, "workers": WorkersSettings}
"""`--runtime` -> the type of its `config.runtime_settings` (names: `learners.RUNTIMES`)."""

IN_PROCESS = "xla"  # The in-process runtime a large cohort's default moves to (no XLA
                    # compilation unless --jit_compile).
DEFAULT = next(f.default for f in dataclasses.fields(config_lib.TrainingConfig)
               if f.name == "runtime")
SELECTED_BY_WORKERS = "workers"  # The runtime that giving --workers selects from the default.


def settings_type(name: str) -> type:
  """The settings type of `--runtime=name`; unknown names fail with the known ones."""
  learners.runtime(name)
  return SETTINGS[name]


def setting_fields() -> dict[str, dataclasses.Field]:
  """Every runtime flag once, by name, in the order of `SETTINGS`."""
  out: dict[str, dataclasses.Field] = {}
  for chosen in SETTINGS.values():
    for field in dataclasses.fields(chosen):
      out.setdefault(field.name, field)
  return out


def settings_from(values: Mapping[str, Any], name: str) -> tuple[str, Any]:
  """(the runtime, its settings) of flag values: `name`, or `workers` when `--workers` is
  given with the default. Every runtime flag given is checked, and one the runtime would
  silently not apply is refused, naming it: --jit_compile where client work is not
  XLA-compiled, --workers or its TLS files without the `workers` runtime (--device is only
  read by `xla` and `workers`, and ignored by `tff_worker`, as before settings existed)."""
  values = {k: v for k, v in values.items() if v is not None}
  learners.runtime(name)
  _check_bool("jit_compile", values.get("jit_compile", False))
  DeviceSettings(**{k: v for k, v in values.items() if k == "device"})
  fields = {f.name for f in dataclasses.fields(WorkersSettings)} - {"device"}
  remote = {k: v for k, v in values.items() if k in fields}
  if "worker_timeout_seconds" in remote:
    _check_worker_timeout(remote["worker_timeout_seconds"])
  if "workers" in remote:
    if name == DEFAULT:
      name = SELECTED_BY_WORKERS
    elif name != SELECTED_BY_WORKERS:
      WorkersSettings(**remote)  # The flags' own errors first.
      raise ValueError(f"--workers runs the clients on remote TFF workers (runtime 'workers'); "
                       f"--runtime={name} cannot take it. Drop --runtime or --workers.")
  elif name != SELECTED_BY_WORKERS and _tls_flags(remote):
    raise ValueError(f"{', '.join(_tls_flags(remote))} secure the channels to remote workers; "
                     "give --workers too, or drop them.")
  if values.get("jit_compile") and not learners.runtime(name).jit_compile:
    raise ValueError(
        f"`jit_compile`=True cannot take effect with --runtime={name}: TFF 0.87 runs "
        "client training in its C++ worker_binary, which has no XLA device, so "
        "tf.function(jit_compile=True) there is silently not compiled "
        "(dp_fl/training/client_work.py, docs/BENCHMARKS.md). Use --runtime=xla, or drop "
        "--jit_compile.")
  chosen = SETTINGS[name]
  own = {f.name for f in dataclasses.fields(chosen)}
  return name, chosen(**{k: v for k, v in values.items() if k in own})


def remote_workers(config: config_lib.TrainingConfig) -> Optional[str]:
  """The `--workers` the run's clients are split over (None: no remote workers)."""
  return getattr(config.runtime_settings, "workers", None)


def _tls_flags(values: Mapping[str, Any]) -> list[str]:
  return [f"--{name}" for name in ("worker_tls_ca_cert", "worker_tls_client_cert",
                                   "worker_tls_client_key") if values.get(name)]


def _check_worker_timeout(seconds: Any) -> None:
  _checks.check_in_range("worker_timeout_seconds", seconds, 0.1, 86400.0,
                         why="a deadline per call to a remote worker; typical 60–1800 s")


def _check_bool(name: str, value: Any) -> None:
  if not isinstance(value, bool):
    raise ValueError(f"`{name}` must be a bool; got {value!r}.")
