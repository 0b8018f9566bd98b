"""The README recipe "Adding a participation scheme", followed in this one file: a scheduler,
its registry entry and the registration — then a toy run through the registry that trains,
reports ε (checked by the checkpoint privacy audit) and resumes bitwise.

A real scheme puts the scheduler in dp_fl/participation/ (`sampling.py` or its own module) and
the entry with its `register` line in dp_fl/participation/schemes.py: 3 files with this test.
"""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.execution import runtime
from dp_fl.participation import base
from dp_fl.participation import checkpoint
from dp_fl.participation import schemes
from dp_fl.training import registry
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task

NAME = "toy_round_robin"


class RoundRobinScheduler(base.Scheduler):
  """The population in ⌈N / m⌉ consecutive groups of m clients (the last possibly smaller),
  taken in turn: the t-th selection is group t mod ⌈N / m⌉. Deterministic, so the seed only
  round-trips."""

  KIND = "ToyRoundRobinScheduler"

  def __init__(self, num_clients: int, clients_per_round: int, seed: int):
    super().__init__(num_clients, seed)
    self._m = clients_per_round
    self._groups = -(-num_clients // clients_per_round)

  def _select(self, round_index, draw_index):
    start = (draw_index % self._groups) * self._m
    ids = np.arange(start, min(start + self._m, self._num_clients), dtype=np.int64)
    return base.RoundSelection(round_index=round_index, client_ids=ids,
                               denominator=float(self._m), num_candidates=ids.size)

  def _config(self):
    return {"num_clients": self._num_clients, "clients_per_round": self._m,
            "seed": self._seed}, {}

  @classmethod
  def _from_config(cls, config, arrays):
    del arrays
    return cls(config["num_clients"], config["clients_per_round"], config["seed"])


class RoundRobinScheme(schemes.Scheme):
  """Its entry: the builder; every other fact is the `Scheme` default (fixed cohorts of m,
  no amplification, the min-sep analysis of the realized participation, refuses DP-FedAvg's
  Poisson accountant)."""

  name = NAME
  description = "consecutive groups of m clients, in turn"

  def build(self, config, settings, num_clients, seed):
    del settings
    return RoundRobinScheduler(num_clients, config.clients_per_round, seed)


@pytest.fixture(scope="module", autouse=True)
def registered():
  """The recipe's registration line — in the schemes module a real scheme has it at import:
  `schemes.register(RoundRobinScheme(), RoundRobinScheduler)`. Here for this module's tests
  only: other test modules run in the same process must not see a toy choice."""
  schemes.register(RoundRobinScheme(), RoundRobinScheduler)
  try:
    with runtime.execution_context():
      yield
  finally:
    del schemes.SCHEMES[NAME]
    del checkpoint._SCHEDULERS[RoundRobinScheduler.KIND]  # pylint: disable=protected-access


def _config(root_dir, mechanism="blt", **overrides):
  return toy_program.toy_config(str(root_dir), 8, mechanism,
                                **{"participation": NAME, "reproducible_noise_seed": 5,
                                   **overrides})


def test_the_entry_is_every_part_of_the_code_that_knows_the_name(tmp_path):
  assert NAME in registry.PARTICIPATIONS and NAME in schemes.names()
  config = _config(tmp_path)
  scheduler = registry.scheduler(config, toy_task.NUM_CLIENTS, seed=1)
  assert isinstance(scheduler, RoundRobinScheduler)
  assert scheduler.enforced_min_separation == 1  # It guarantees nothing it has not said.
  assert registry.expected_cohort(config, toy_task.NUM_CLIENTS) == config.clients_per_round
  assert not registry.PARTICIPATIONS[NAME].variable_cohorts
  for _ in range(3):
    scheduler.next_round()
  again = checkpoint.restore_scheduler(scheduler.to_bytes())
  assert again.to_bytes() == scheduler.to_bytes()
  with pytest.raises(ValueError, match=f"needs --participation=poisson, got '{NAME}'"):
    _config(tmp_path, "dpfedavg")
  with pytest.raises(ValueError, match=r"`participation` must be one of \(.*'toy_round_robin'"):
    _config(tmp_path, participation="round_robin")


def test_trains_reports_epsilon_and_resumes_bitwise(tmp_path):
  # 24 clients in 6 groups of 4: in 8 rounds the first two groups take part twice, 6 apart.
  whole, _ = privacy_audit.check_recipe_run(
      toy_task.make_task(), lambda name: _config(tmp_path / name), pauses=(3,))
  participation = whole.privacy_report.participation
  assert (participation.min_sep, participation.max_participations) == (6, 2)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
