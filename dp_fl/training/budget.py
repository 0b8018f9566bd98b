"""The resources a training job needs, checked before anything is written (issue #18).

`check_training` adds up what scales with `--rounds` and the population: building the mechanism
(`catalog.Family.build_cost`), its evaluation for n rounds (`catalog.evaluation_cost`) and the
participation ledger, and refuses the job beyond `--memory_budget_gb` / `--time_budget_hours`
(`dp_fl.resources`, which holds the estimates and budgets of every tier) naming the rounds that
would fit. `program.run` calls it before the run directory becomes the run's.
"""

from __future__ import annotations

from typing import Any, Optional

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
    ledger = resources.Estimate(
        f"the participation ledger of {clients} clients over {rounds} rounds",
        32.0 * clients + 16.0 * rounds, basis="~32 B per client, 16 B per round")
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
