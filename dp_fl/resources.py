"""Memory and time of the expensive steps, checked BEFORE they run; progress while they run.

A job that cannot fit is refused up front with a `ValueError` naming the flag(s) that set its
size, the estimate, the budget and the fix, instead of being killed by the kernel's OOM killer
hours later with no message. Budgets are per process:

* memory: `--memory_budget_gb`, default `DEFAULT_MEMORY_FRACTION` of the machine's physical
  memory (`os.sysconf`);
* time: `--time_budget_hours`, default `DEFAULT_TIME_BUDGET_HOURS`; a step estimated to take
  longer than `ANNOUNCE_SECONDS` is announced on stderr with its estimate first.

Binaries set them once in `main` (`set_budgets`); libraries read them (`memory_budget`,
`time_budget`). The estimates themselves live next to the code that allocates: each mechanism
family's build cost (`catalog.Family.build_cost`), each mechanism's evaluation cost
(`catalog.Mechanism.evaluation_cost`), the balls-in-bins Monte Carlo
(`balls_in_bins.monte_carlo_cost`); `dp_fl.training.budget.check_training` adds up a
training job's.

How the estimates were checked (tracemalloc peak and wall time on the 2-core development
machine, NumPy/SciPy float64; the models are upper envelopes of these, so the estimate is at
or above the measured peak):

| step                              | measured                              | model               |
|-----------------------------------|---------------------------------------|---------------------|
| BLT optimization, d = 4 (closed form, since #25) | 0.36–0.55 MB for k <= 20 (n up to 1e6); 22.8 MB at k = 20000 | O(k d²): `catalog._blt_build_cost` |
|                                   | 0.07 s at n = 2000, 0.05 s at n = 1e6 (b = n/5); 8 s at k = 20000 |                     |
| BSR build                         | the (n, p) band                       | 40 n p B            |
| BISR / BandInvMF evaluation, build | c by its O(n p) recurrence; 2.7–4.3 s to optimize n = 2052, p = 342 | 96 n B; 2e-9 n p s per step |
| BLT evaluation                    | 8.8 MB at n = 1e5                     | 96 n B              |
| BandMF optimization               | 5.1/20/79 MB at n=256/512/1024; 5.1 s | 80 n² B, 5e-9 n³ s  |
| BandMF evaluation (dense C)       | 2.2/8.1/32 MB at n=256/512/1024       | 32 n² B             |
| TreeAgg-Full evaluation           | 1.6/25/101 MB at n=256/1024/2048; 0.8 s | 25 n² B, 1e-10 n³ s |
| two-band build / evaluation       | 56 MB at n = 1e6, 5.4 s               | 64 n B, 6e-6 n s    |
| DP-SGD evaluation                 | 8 MB at n = 1e6                       | 16 n B              |
| balls-in-bins calibration (m=65536) | 12/66/406 MB at b=32/128/512; 9 s at b=512 | 0.55 MB·b + 540 b² B |
| DP-FedAvg PLD accounting          | 8.6/11/20/58 MB at T=1e3..1e6, ~9 s   | (small; not checked)|

At `--rounds 1000000000` the training program's default mechanism (BLT) was once optimized
for n = 1e9 rounds with ~200 GB of length-n arrays (the coefficients and their powers for
each buffer), which is what the OOM killer stopped at 24 GB; `check_training` refused it
since, and the closed-form losses (#25) no longer hold length-n arrays while optimizing.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import sys
import tempfile
import time
from typing import Any, Callable, Mapping, Optional, TextIO

from dp_fl import _checks
from dp_fl import root_finding

GB = 1024 ** 3
DEFAULT_MEMORY_FRACTION = 0.5
DEFAULT_TIME_BUDGET_HOURS = 24.0
# A step estimated to run longer than this is announced with its estimate.
ANNOUNCE_SECONDS = 30.0
# Rounds are stored as int32 in the participation ledger (dp_fl/participation/ledger.py).
MAX_ROUNDS = 2 ** 31 - 1

_budgets: dict[str, Optional[float]] = {"memory": None, "seconds": None}


def physical_memory_bytes() -> int:
  """The machine's physical memory (os.sysconf); 8 GiB where the OS does not say."""
  try:
    pages = os.sysconf("SC_PHYS_PAGES")
    page_size = os.sysconf("SC_PAGE_SIZE")
  except (AttributeError, OSError, ValueError):
    return 8 * GB
  if pages <= 0 or page_size <= 0:
    return 8 * GB
  return int(pages) * int(page_size)


def default_memory_budget() -> int:
  """`DEFAULT_MEMORY_FRACTION` of physical memory, in bytes."""
  return int(DEFAULT_MEMORY_FRACTION * physical_memory_bytes())


def set_budgets(memory_bytes: Optional[float] = None,
                seconds: Optional[float] = None) -> None:
  """Sets this process's budgets (None: the default). Binaries call it once, in `main`."""
  _budgets["memory"] = (None if memory_bytes is None
                        else _checks.check_positive("memory_bytes", memory_bytes))
  _budgets["seconds"] = (None if seconds is None
                         else _checks.check_positive("seconds", seconds))


def memory_budget() -> int:
  """This process's memory budget in bytes."""
  value = _budgets["memory"]
  return default_memory_budget() if value is None else int(value)


def time_budget() -> float:
  """This process's time budget for one step, in seconds."""
  value = _budgets["seconds"]
  return DEFAULT_TIME_BUDGET_HOURS * 3600.0 if value is None else float(value)


def add_budget_flags(parser) -> None:
  """Adds --memory_budget_gb and --time_budget_hours to an argparse parser."""
  parser.add_argument(
      "--memory_budget_gb", type=float, default=None,
      help="refuse a step estimated to need more memory than this (default: "
           f"{DEFAULT_MEMORY_FRACTION:g} of physical memory)")
  parser.add_argument(
      "--time_budget_hours", type=float, default=None,
      help="refuse a step estimated to take longer than this (default "
           f"{DEFAULT_TIME_BUDGET_HOURS:g})")


def set_budgets_from_flags(memory_budget_gb: Optional[float],
                           time_budget_hours: Optional[float]) -> None:
  """Validates the two budget flags and sets the process's budgets from them."""
  memory = None
  if memory_budget_gb is not None:
    memory = _checks.check_positive("--memory_budget_gb", memory_budget_gb) * GB
  seconds = None
  if time_budget_hours is not None:
    seconds = _checks.check_positive("--time_budget_hours", time_budget_hours) * 3600.0
  set_budgets(memory, seconds)


def with_budget_flags(args: Any, body: Callable[[], Any]) -> Callable[[], Any]:
  """`body` run under the --memory_budget_gb / --time_budget_hours of `args` (flags added by
  `add_budget_flags`), the default budgets restored after (in-process callers: tests)."""
  def run() -> Any:
    try:
      set_budgets_from_flags(args.memory_budget_gb, args.time_budget_hours)
      return body()
    finally:
      set_budgets()
  return run


def format_bytes(num_bytes: float) -> str:
  """`num_bytes` as e.g. '1.5 GB' (binary units)."""
  value = float(num_bytes)
  for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
    if value < 1024.0 or unit == "PB":
      return f"{value:.3g} {unit}" if unit != "B" else f"{int(value)} B"
    value /= 1024.0
  raise AssertionError("unreachable")


def format_seconds(seconds: float) -> str:
  """`seconds` as e.g. '45 s', '12 min', '3.2 h', '5.1 days'."""
  if not math.isfinite(seconds):
    return "forever"
  if seconds < 120:
    return f"{seconds:.0f} s"
  if seconds < 7200:
    return f"{seconds / 60:.0f} min"
  if seconds < 172800:
    return f"{seconds / 3600:.1f} h"
  return f"{seconds / 86400:.3g} days"


@dataclasses.dataclass(frozen=True)
class Estimate:
  """Peak memory and wall time of one step, and the model they come from.

  `what` names the step ("optimizing bandmf for n=100000 rounds"); `basis` the model
  ("dense n x n work arrays, ~80 n² bytes, ~5e-9 n³ s").
  """
  what: str
  bytes: float
  seconds: float = 0.0
  basis: str = ""

  def __add__(self, other: "Estimate") -> "Estimate":
    """Two steps, one after the other: the larger peak, the summed time."""
    return Estimate(f"{self.what}; {other.what}", max(self.bytes, other.bytes),
                    self.seconds + other.seconds,
                    "; ".join(x for x in (self.basis, other.basis) if x))


def _flags_text(flags: Mapping[str, Any]) -> str:
  return ", ".join(f"--{name}={value}" for name, value in flags.items())


def largest_fitting(estimate_at: Callable[[int], Estimate], low: int, high: int,
                    budget: float, seconds: float) -> int:
  """The largest size in [low, high] whose estimate fits both budgets (low - 1 if none)."""
  fits = lambda s: (estimate_at(s).bytes <= budget and estimate_at(s).seconds <= seconds)
  if not fits(low):
    return low - 1
  # Estimates grow with the size: the first size past `low` that does not fit, less one
  # (high + 1 stands for "none up to high"; it is never estimated).
  return root_finding.first_integer(lambda s: not fits(s), low, max(low, high) + 1) - 1


def require(estimate: Estimate, flags: Mapping[str, Any], *,
            memory_bytes: Optional[float] = None, seconds: Optional[float] = None,
            fits_up_to: Optional[int] = None,
            stream: Optional[TextIO] = None) -> None:
  """Refuses `estimate` if it exceeds a budget; announces it if it is long.

  Args:
    estimate: the step's estimate.
    flags: the flags that set its size and their values (first: the one to lower).
    memory_bytes: the memory budget (None: `memory_budget()`).
    seconds: the time budget (None: `time_budget()`).
    fits_up_to: the largest value of the first flag that fits (for the message), if known.
    stream: where the announcement goes (default stderr).

  Raises:
    ValueError: naming the flags, the estimate, the budget and the fix.
  """
  memory = memory_budget() if memory_bytes is None else memory_bytes
  limit = time_budget() if seconds is None else seconds
  first = next(iter(flags), None)
  lower = (f"lower --{first}" + (f" (at most {fits_up_to} fits)" if fits_up_to else "")
           if first else "reduce the job")
  basis = f" ({estimate.basis})" if estimate.basis else ""
  if estimate.bytes > memory:
    raise ValueError(
        f"{_flags_text(flags)}: {estimate.what} needs an estimated "
        f"{format_bytes(estimate.bytes)} of memory{basis}, more than the memory budget of "
        f"{format_bytes(memory)} (--memory_budget_gb; default "
        f"{DEFAULT_MEMORY_FRACTION:g} of this machine's {format_bytes(physical_memory_bytes())}"
        f"). Fix: {lower}, or raise --memory_budget_gb on a machine with more memory.")
  if estimate.seconds > limit:
    raise ValueError(
        f"{_flags_text(flags)}: {estimate.what} would take an estimated "
        f"{format_seconds(estimate.seconds)}{basis}, more than the time budget of "
        f"{format_seconds(limit)} (--time_budget_hours, default "
        f"{DEFAULT_TIME_BUDGET_HOURS:g}). Fix: {lower}, or raise --time_budget_hours.")
  if estimate.seconds > ANNOUNCE_SECONDS:
    print(f"note: {estimate.what} will take about {format_seconds(estimate.seconds)} and "
          f"{format_bytes(estimate.bytes)} (estimate{basis}).",
          file=stream if stream is not None else sys.stderr, flush=True)


class Progress:
  """One progress line with ETA to stderr every `interval` s, once a step passes `delay` s.

      progress = resources.Progress("optimizing BLT", total=12)
      for i, job in enumerate(jobs):
        run(job)
        progress.update(i + 1)
      progress.finish()

  `total` may be approximate (then so is the ETA); nothing is printed for a step that ends
  within `delay` seconds.
  """

  def __init__(self, what: str, total: float, *, stream: Optional[TextIO] = None,
               interval: float = 5.0, delay: float = 3.0,
               clock: Callable[[], float] = time.monotonic):
    self.what = what
    self.total = max(float(total), 1e-12)
    self._stream = stream
    self._interval = interval
    self._delay = delay
    self._clock = clock
    self._start = clock()
    self._last = -math.inf
    self.done = 0.0
    self.lines = 0

  def _write(self, text: str) -> None:
    print(text, file=self._stream if self._stream is not None else sys.stderr, flush=True)
    self.lines += 1

  def update(self, done: float) -> None:
    """Records that `done` of `total` is finished; prints a line if one is due."""
    self.done = float(done)
    now = self._clock()
    elapsed = now - self._start
    if elapsed < self._delay or now - self._last < self._interval:
      return
    self._last = now
    fraction = min(self.done / self.total, 1.0)
    eta = elapsed * (1.0 - fraction) / fraction if fraction > 0 else math.inf
    self._write(f"{self.what}: {100.0 * fraction:.0f}% after {format_seconds(elapsed)}, "
                f"about {format_seconds(eta)} left")

  def advance(self, amount: float) -> None:
    """Records `amount` more finished."""
    self.update(self.done + amount)

  def finish(self) -> None:
    """Prints the total time if any progress line was printed."""
    if self.lines:
      self._write(f"{self.what}: done in {format_seconds(self._clock() - self._start)}")


def check_writable_output(flag: str, path: Optional[str]) -> None:
  """Refuses an output path whose directory cannot be written, before any long work.

  Raises ValueError naming the flag, the path and the fix (nothing is created).
  """
  if not path:
    return
  directory = os.path.dirname(os.path.abspath(path)) or "."
  if os.path.isdir(path):
    raise ValueError(f"--{flag}={path!r} is a directory; give a file path.")
  if not os.path.isdir(directory):
    raise ValueError(f"--{flag}={path!r}: its directory {directory!r} does not exist; "
                     "create it first or choose another path.")
  if not os.access(directory, os.W_OK | os.X_OK) or (
      os.path.exists(path) and not os.access(path, os.W_OK)):
    raise ValueError(f"--{flag}={path!r} cannot be written (permission denied on "
                     f"{directory!r} or the file); choose a writable location.")
  # Permissions do not tell everything (root passes every check; /proc, /sys and read-only
  # mounts refuse anyway): create and remove a file there, as the final write will.
  try:
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-probe-"):
      pass
  except OSError as e:
    raise ValueError(f"--{flag}={path!r} cannot be written: a file cannot be created in "
                     f"{directory!r} ({e.strerror or e}); choose a writable location.") from e


def ensure_writable_dir(what: str, path: str) -> None:
  """Creates directory `path` and proves it writable, before anything expensive.

  Raises ValueError naming `what` (e.g. "--out_dir"), the path and the fix.
  """
  try:
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, f".write-probe-{os.getpid()}")
    with open(probe, "w", encoding="utf-8") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    raise ValueError(f"{what} {path!r} is not a writable directory ({e}); choose a "
                     "directory you can write to.") from e


def check_rounds_limit(flag: str, rounds: int) -> int:
  """Refuses more rounds than the participation ledger's int32 round index holds."""
  if rounds > MAX_ROUNDS:
    raise ValueError(f"--{flag}={rounds} exceeds {MAX_ROUNDS} (2**31 - 1), the most rounds "
                     "the participation ledger records; lower it.")
  return rounds


# A client's local training: per client call `CLIENT_SECONDS`, and `SECONDS_PER_TOKEN_PARAMETER`
# per token and model parameter (forward, backward, update). Read off docs/BENCHMARKS.md
# ("Training: one round on the 4.05M-parameter LSTM"): 15.3 s for 10 clients of 16 batches of
# 16 sentences of 21 tokens → 1.53 s a client = 5376 tokens × 4.05M parameters × 7.0e-11 s;
# the quick StackOverflow job (50 clients of 672 tokens, 365k parameters) predicts 1.9 s a
# round against ≈ 2 s measured.
CLIENT_SECONDS = 0.02
SECONDS_PER_TOKEN_PARAMETER = 7.0e-11
# An evaluation scores its tokens forward only: 0.3 of a trained token's cost (read off the
# paper-scale benchmark, docs/BENCHMARKS.md: 100 held-out clients, 766k tokens, 529 s beside
# 7.1 s a training client of 2,940 tokens, both on the same loaded machine).
EVAL_COST_FRACTION = 0.3


def training_job_estimate(rounds: int, clients_per_round: int, dimension: int,
                          client_tokens: float, client_epochs: int = 1, hosts: int = 1,
                          eval_tokens: Optional[float] = None,
                          evaluations: int = 0) -> Estimate:
  """The wall time of a training job on this machine: `rounds` of `clients_per_round`
  clients, each training `client_epochs` passes over `client_tokens` tokens of a model of
  `dimension` parameters (their work split over `hosts` machines), and `evaluations`
  evaluations of `eval_tokens` tokens each, run here (≈ 5 % of paper 004's Table 3 job: 21
  evaluations of 10,000 held-out clients beside 2052 rounds of 1000 clients). Accounting and
  checkpoints are small beside them at the presets' cadence (docs/BENCHMARKS.md)."""
  for name, value in (("rounds", rounds), ("clients_per_round", clients_per_round),
                      ("dimension", dimension), ("client_epochs", client_epochs)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
      raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")
  per_client = CLIENT_SECONDS + (client_epochs * client_tokens * dimension
                                 * SECONDS_PER_TOKEN_PARAMETER)
  training = rounds * clients_per_round * per_client / max(1, hosts)
  evaluation, note = 0.0, ""
  if eval_tokens and evaluations:
    per_evaluation = eval_tokens * dimension * SECONDS_PER_TOKEN_PARAMETER * EVAL_COST_FRACTION
    evaluation = evaluations * per_evaluation
    note = (f" + {evaluations} evaluations of {eval_tokens:,.0f} tokens "
            f"({format_seconds(per_evaluation)} each)")
  return Estimate(
      f"training {rounds} rounds of {clients_per_round} clients "
      f"({format_seconds(training / rounds)} a round"
      + (f" over {hosts} hosts" if hosts > 1 else "") + ")"
      + (f" and evaluating {evaluations} times" if evaluation else ""),
      0.0, training + evaluation,
      f"~{per_client:.3g} s a client: {CLIENT_SECONDS:g} s + {client_tokens:g} tokens × "
      f"{dimension:,} parameters × {SECONDS_PER_TOKEN_PARAMETER:g} s" + note)
