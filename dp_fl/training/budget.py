"""The resources a training job needs, checked before anything is written (issue #18).

`check_training` adds up what scales with `--rounds` and the population: building the mechanism
(`catalog.Family.build_cost`), its evaluation for n rounds (`catalog.evaluation_cost`) and the
participation ledger, and refuses the job beyond `--memory_budget_gb` / `--time_budget_hours`
(`dp_fl.resources`, which holds the estimates and budgets of every tier) naming the rounds that
would fit. `check_model_state` adds what scales with the model: the model-sized arrays the
round holds (`MODEL_COPIES`) and the mechanism's noise buffers (BandMF with p bands: p − 1;
paper 004's Table 1), in memory and in every checkpoint, naming the bands or buffers that
would fit. `program.run` calls both before the run directory becomes the run's.
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Any, Mapping, Optional, Sequence

from dp_fl import _checks
from dp_fl import resources
from dp_fl.mechanisms import catalog


def check_training(config: Any, num_clients: int,
                   memory_bytes: Optional[float] = None,
                   seconds: Optional[float] = None) -> resources.Estimate:
  """Refuses a training job whose mechanism, accounting or participation state cannot fit.

  Covers what scales with `config.rounds` and the population before anything is written:
  building (optimizing) the mechanism (skipped when `--mechanism_params` gives it) and
  its evaluation for n rounds (sensitivity, as the accountant and calibration need), and the
  participation ledger (per-client int32 arrays, a separation histogram up to n entries, and
  the int32 round index, so n <= 2**31 - 1).

  Args:
    config: a `dp_fl.training.config.TrainingConfig`.
    num_clients: the population N the scheduler draws from.
    memory_bytes, seconds: budgets (None: this process's, `resources.memory_budget` /
      `resources.time_budget`).

  Returns:
    The job's estimate (the largest step's peak memory and the summed time).

  Raises:
    ValueError: naming --rounds (or --num_clients), the estimate, the budget and the fix.
  """
  n = resources.check_rounds_limit("rounds",
                                   _checks.check_positive_int("rounds", config.rounds))
  clients = _checks.check_positive_int("num_clients", num_clients)
  memory = resources.memory_budget() if memory_bytes is None else memory_bytes
  limit = resources.time_budget() if seconds is None else seconds

  def estimate_at(rounds: int) -> resources.Estimate:
    # Per round: the separation histogram and the participation record (an array of the
    # round's cohort: ~160 B of Python objects and 4 B per participant; #43 measured 220 B
    # per round at 10 clients a round, where 16 B had been assumed).
    per_round = 16.0 + 160.0 + 4.0 * float(config.clients_per_round)
    ledger = resources.Estimate(
        f"the participation ledger of {clients} clients over {rounds} rounds",
        32.0 * clients + per_round * rounds,
        basis=f"~32 B per client, {per_round:g} B per round")
    if config.mechanism not in catalog.names():
      return ledger  # No matrix mechanism (DP-FedAvg, non-private).
    settings = config.mechanism_settings  # A DP-FTRL C's: registry.DpFtrlSettings.
    options, _ = catalog.build_options(config.mechanism, rounds=rounds, min_sep=config.min_sep,
                                       **settings.build_args())
    total = ledger + catalog.evaluation_cost(config.mechanism, rounds)
    if not settings.mechanism_params:
      total = catalog.family(config.mechanism).build_cost(options) + total
    return total

  estimate = estimate_at(n)
  fits = None
  if estimate.bytes > memory or estimate.seconds > limit:
    fits = resources.largest_fitting(estimate_at, 1, n, memory, limit)
  resources.require(estimate, {"rounds": n}, memory_bytes=memory, seconds=limit,
                    fits_up_to=fits if fits and fits >= 1 else None)
  return estimate


# Model-sized float32 arrays a round holds besides the mechanism's noise buffers, counted
# generously: the server model and its momentum, the aggregator's sum, the noise row and the
# released update, a client's model, gradient, update and optimizer slots (Adam: two), and
# TFF's copies when it serializes the state to and from its worker.
MODEL_COPIES = 16
# What a checkpoint holds besides the noise buffers: the model, momentum, optimizer state.
CHECKPOINT_MODEL_COPIES = 3


def model_state_estimate(dimension: int, noise_buffers: int) -> resources.Estimate:
  """Memory of the model-sized arrays of a round with `noise_buffers` streaming buffers."""
  return resources.Estimate(
      f"the model-sized arrays of a round ({MODEL_COPIES} copies of the {dimension:,}-"
      f"parameter model and {noise_buffers} noise buffers)",
      4.0 * dimension * (MODEL_COPIES + noise_buffers),
      basis=f"4 bytes × d × ({MODEL_COPIES} + buffers)")


def checkpoint_bytes(dimension: int, noise_buffers: int) -> float:
  """The size of one checkpoint (float32 state), e.g. for `scripts/plan` and the report."""
  return 4.0 * dimension * (CHECKPOINT_MODEL_COPIES + noise_buffers)


def check_model_state(config: Any, dimension: int, noise_buffers: Optional[int],
                      memory_bytes: Optional[float] = None) -> resources.Estimate:
  """Refuses a run whose model-sized arrays cannot fit the memory budget.

  Names `--bands` (BandMF, BSR, BISR, BandInvMF: the buffers are the bands) or
  `--blt_buffers` with the largest value that fits, or the model when even no buffers fit.
  `noise_buffers` None (a C that cannot stream) counts as 0.
  """
  buffers = int(noise_buffers or 0)
  memory = resources.memory_budget() if memory_bytes is None else memory_bytes
  estimate = model_state_estimate(dimension, buffers)
  if estimate.bytes <= memory:
    return estimate
  # The most buffers that fit (a C with p bands holds at most p of them).
  fitting = int(memory // (4.0 * dimension)) - MODEL_COPIES
  knobs = (catalog.family(config.mechanism).knobs if config.mechanism in catalog.names()
           else "")
  if buffers and knobs == "bands":
    flags: dict[str, Any] = {"bands": getattr(config.mechanism_settings, "bands", None)
                             or buffers + 1}
  elif buffers and knobs == "blt":
    flags = {"blt_buffers": buffers}
  else:
    flags = {"mechanism": config.mechanism}
  fits = fitting if buffers and knobs and fitting >= 1 else None
  resources.require(estimate, flags, memory_bytes=memory, seconds=math.inf,
                    fits_up_to=fits)
  return estimate


@dataclasses.dataclass(frozen=True)
class SizePart:
  """One part of a task's memory: its bytes and the flags (with values) that set them, the
  one to lower first."""
  what: str
  bytes: float
  flags: Mapping[str, Any]


def activation_bytes(batch_size: int, sequence_length: int, floats_per_token: float) -> float:
  """Forward values kept for the backward pass of one batch (float32), counted twice (the
  gradients of the same shapes)."""
  return 2.0 * 4.0 * batch_size * sequence_length * floats_per_token


def check_task_sizes(parameters: int, model_flags: Mapping[str, Any],
                     parts: Sequence[SizePart] = (),
                     memory_bytes: Optional[float] = None) -> resources.Estimate:
  """Refuses model and data sizes that cannot fit, before any of it is allocated.

  The model's `MODEL_COPIES` float32 copies plus `parts` (a batch's activations, data held
  in memory) against the memory budget; the refusal names the flags of the largest part
  (the model's: `model_flags`) and their values, so `--lstm_size 1e6` or
  `--sequence_length 1e8` is a refusal naming them instead of an out-of-memory error.
  """
  model = SizePart(f"the {parameters:,}-parameter model ({MODEL_COPIES} copies)",
                   4.0 * MODEL_COPIES * parameters, model_flags)
  everything = [model, *parts]
  total = resources.Estimate("; ".join(p.what for p in everything),
                             sum(p.bytes for p in everything),
                             basis=", ".join(f"{p.what.split(' (')[0]}: "
                                             f"{resources.format_bytes(p.bytes)}"
                                             for p in everything))
  memory = resources.memory_budget() if memory_bytes is None else memory_bytes
  largest = max(everything, key=lambda p: p.bytes)
  resources.require(total, largest.flags, memory_bytes=memory, seconds=math.inf)
  return total


# TFF's C++ worker holds every client's results (its update, and the copies its executor makes
# of it) until the round's `federated_aggregate`: its peak grew by 54 MB a client of the
# 4.05M-parameter LSTM (docs/BENCHMARKS.md "Runtimes": 3.1 GB at 10 clients of one batch,
# 4.6 GB at 50, 8.0 GB at 100), 3.4 model-sized float32 arrays. The in-process runtime folds
# each client into the accumulator as it completes: flat in the cohort.
WORKER_MODEL_COPIES_PER_CLIENT = 3.4
# Above this much cohort-held memory the default runtime is the in-process one
# (`program.runtime_for_cohort`): from 20 clients of the paper-size model, 217 of the
# quick StackOverflow preset's 365k-parameter one.
IN_PROCESS_ABOVE_BYTES = 1.0 * resources.GB


def worker_cohort_estimate(dimension: int, clients: int) -> resources.Estimate:
  """What TFF's C++ worker holds for a round's clients (`WORKER_MODEL_COPIES_PER_CLIENT`)."""
  return resources.Estimate(
      f"TFF's C++ worker holding the results of {clients} clients of the {dimension:,}-"
      "parameter model until the round's aggregate",
      4.0 * dimension * WORKER_MODEL_COPIES_PER_CLIENT * clients,
      basis=f"{WORKER_MODEL_COPIES_PER_CLIENT:g} model-sized float32 arrays a client, "
            "measured")


# What one call to a remote worker (`--workers`) may make it hold: its clients are sent in
# calls of at most `clients_per_worker_call` clients, each folded there into one partial.
WORKER_CALL_BYTES = 2.0 * resources.GB


def clients_per_worker_call(dimension: int) -> int:
  """The most clients one call to a remote TFF worker folds, so that it holds at most
  `WORKER_CALL_BYTES` for them (39 clients of the paper-size model): a worker's memory is
  then bounded whatever the cohort and the number of workers; each further call costs one
  model-sized message each way."""
  return max(1, int(WORKER_CALL_BYTES // worker_cohort_estimate(dimension, 1).bytes))


def check_worker_cohort(config: Any, dimension: int,
                        memory_bytes: Optional[float] = None) -> resources.Estimate:
  """Refuses `--runtime=tff_worker` for a cohort whose results cannot fit the memory budget
  in TFF's worker, naming --runtime (the in-process runtime folds clients, flat in the
  cohort) and --clients_per_round with the largest cohort that fits."""
  memory = resources.memory_budget() if memory_bytes is None else memory_bytes
  estimate = worker_cohort_estimate(dimension, config.clients_per_round)
  if estimate.bytes <= memory:
    return estimate
  per_client = worker_cohort_estimate(dimension, 1).bytes
  fits = int(memory // per_client)
  raise ValueError(
      f"--runtime={config.runtime}, --clients_per_round={config.clients_per_round}: "
      f"{estimate.what} needs an estimated {resources.format_bytes(estimate.bytes)} "
      f"({estimate.basis}), more than the memory budget of {resources.format_bytes(memory)} "
      "(--memory_budget_gb). Fix: --runtime=xla (in process: each client is folded into the "
      "round's sum as it completes, memory flat in the cohort), or lower --clients_per_round"
      + (f" (at most {fits} fit)" if fits >= 1 else "") + ".")


def evaluations(rounds: int, eval_every: int) -> int:
  """How many evaluations a job of `rounds` runs: every `eval_every` rounds and at the end."""
  return -(-rounds // eval_every)


def job_estimate(config: Any, dimension: int, client_tokens: float, hosts: int = 1,
                 eval_tokens: Optional[float] = None,
                 rounds: Optional[int] = None) -> resources.Estimate:
  """The job's wall time on this machine (`resources.training_job_estimate`): its rounds
  (`config.rounds`, or `rounds`), the clients' work split over `hosts` machines with
  `--workers`, and, given `eval_tokens` (the tokens one evaluation scores), its evaluations."""
  rounds = config.rounds if rounds is None else rounds
  return resources.training_job_estimate(
      rounds, config.clients_per_round, dimension, client_tokens,
      client_epochs=config.client_epochs, hosts=hosts, eval_tokens=eval_tokens,
      evaluations=evaluations(rounds, config.eval_every) if eval_tokens else 0)


def check_job_time(config: Any, dimension: int, client_tokens: Optional[float],
                   hosts: int = 1, seconds: Optional[float] = None,
                   announce: bool = True, eval_tokens: Optional[float] = None
                   ) -> Optional[resources.Estimate]:
  """Refuses, before anything is written, a job whose rounds would take longer than
  `--time_budget_hours`, naming --rounds (and the rounds that fit); with `announce`, states
  a long one's estimate on stderr (`resources.require`). None when the task gives no
  `client_tokens`."""
  if client_tokens is None:
    return None
  limit = resources.time_budget() if seconds is None else seconds
  estimate = job_estimate(config, dimension, client_tokens, hosts, eval_tokens)
  fits = None
  if estimate.seconds > limit:
    fits = _rounds_that_fit(config, dimension, client_tokens, hosts, eval_tokens, limit)
  flags = {"rounds": config.rounds, "clients_per_round": config.clients_per_round}
  if eval_tokens:
    flags["eval_every"] = config.eval_every  # Evaluations are part of the estimate.
  resources.require(estimate, flags, memory_bytes=math.inf, seconds=limit,
                    fits_up_to=fits, stream=None if announce else io.StringIO())
  return estimate


def _rounds_that_fit(config: Any, dimension: int, client_tokens: float, hosts: int,
                     eval_tokens: Optional[float], limit: float) -> Optional[int]:
  """The most rounds whose job (with its evaluations) fits `limit` seconds, or None when not
  even one does (the cost grows with the rounds: bisection)."""
  low, high = 0, config.rounds  # A job of `low` rounds fits (or low = 0), of `high` not.
  while high - low > 1:
    middle = (low + high) // 2
    fits = job_estimate(config, dimension, client_tokens, hosts, eval_tokens,
                        rounds=middle).seconds <= limit
    low, high = (middle, high) if fits else (low, middle)
  return low or None
