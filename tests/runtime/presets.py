"""One preset per distinct TFF computation: what the runtime-equivalence tests iterate over.

The computation a runtime executes depends on a DP-FTRL `--mechanism` preset only through its
noise recurrence (BLT, banded, banded inverse, tree, identity): the other differences are numbers
in the noise state. Every other entry (DP-FedAvg, cpSGD, `none`, `clip`) is its own computation.
Testing the first preset (by name) of each pair covers every computation, and a preset that
brings a new recurrence is picked up without editing the tests.
"""

from __future__ import annotations

import functools
import tempfile

from dp_fl.training import program
from dp_fl.training import registry
from tests.training import toy_program


def config(root: str, rounds: int, mechanism: str, **overrides):
  """A toy preset run: uniform cohorts, Poisson sampling for DP-FedAvg (its only scheme)."""
  extra = ({"participation": "poisson", "population_sampling_rate": 0.5}
           if mechanism == "dpfedavg" else {"participation": "uniform"})
  return toy_program.toy_config(root, rounds, mechanism, reproducible_noise_seed=7,
                                **{**extra, **overrides})


def computation_kind(name: str, rounds: int = 3) -> tuple[str, str]:
  """(registry entry kind, noise recurrence — or the name for an entry that is not DP-FTRL)."""
  entry = registry.MECHANISMS[name]
  with tempfile.TemporaryDirectory() as root:
    mechanism = program.build_mechanism(config(root, rounds, name))
  if mechanism is None:  # Not DP-FTRL: each such entry builds its own aggregator.
    return type(entry).__name__, name
  return type(entry).__name__, type(mechanism.streaming_noise(rounds)).__name__


@functools.lru_cache(maxsize=None)
def one_per_computation() -> tuple[str, ...]:
  """The first preset (by name) of each `computation_kind`, sorted."""
  chosen: dict[tuple[str, str], str] = {}
  for name in sorted(registry.MECHANISMS):
    chosen.setdefault(computation_kind(name), name)
  return tuple(sorted(chosen.values()))
