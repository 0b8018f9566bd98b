"""The mechanism and participation registries: what each name means, and no silent fallback."""

from __future__ import annotations

import math
import os
import types

import numpy as np
import pytest

from dp_fl.accounting import dpfedavg
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog
from dp_fl.participation import ledger as ledger_lib
from dp_fl.training import config as config_lib
from dp_fl.training import registry


def _config(tmp_path, **changes):
  values = dict(task="toy", root_dir=str(tmp_path), rounds=6, clients_per_round=2,
                mechanism="dpsgd", participation="uniform", noise_multiplier=1.5, delta=1e-5)
  values.update(changes)
  return config_lib.TrainingConfig(**values)


def _realized(rounds, cohorts):
  ledger = ledger_lib.ParticipationLedger(10)
  for r, ids in zip(range(rounds), cohorts):
    ledger.record(r, np.asarray(ids))
  return ledger.realized()


def test_the_config_names_are_the_registry_names():
  assert config_lib.MECHANISMS == tuple(registry.MECHANISMS)
  assert config_lib.PARTICIPATIONS == tuple(registry.PARTICIPATIONS)
  assert config_lib.NONPRIVATE_MECHANISMS == ("none", "clip")
  for name, entry in registry.MECHANISMS.items():
    assert entry.name == name and entry.description


def test_unknown_names_fail_with_the_known_ones():
  with pytest.raises(ValueError, match=r"one of \('blt', 'bandmf'.*got 'bogus'"):
    registry.mechanism("bogus")
  fake = types.SimpleNamespace(participation="round_robin")
  with pytest.raises(ValueError, match=r"`participation` must be one of .*'cyclic'.*"
                                       r"got 'round_robin'"):
    registry.scheduler(fake, 10, 0)


@pytest.mark.parametrize("name,kind", [
    ("device_timer", "DeviceTimerScheduler"), ("min_sep_rounds", "DeviceTimerScheduler"),
    ("poisson", "PoissonScheduler"), ("balls_in_bins", "BallsInBinsScheduler"),
    ("uniform", "UniformScheduler"), ("cyclic", "CyclicScheduler")])
def test_each_participation_builds_its_scheduler(tmp_path, name, kind):
  mechanism = "dpfedavg" if name == "poisson" else "dpsgd"
  config = _config(tmp_path, participation=name, mechanism=mechanism, timer_hours=2.0,
                   min_sep=2)
  scheduler = registry.scheduler(config, 12, seed=7)
  assert scheduler.KIND == kind and scheduler.seed == 7


def test_weighting_privacy_and_participation_rules(tmp_path):
  assert registry.mechanism("dpfedavg").weighting == registry.NUM_EXAMPLES
  assert {registry.mechanism(n).weighting for n in ("blt", "bandmf", "tree", "dpsgd", "none",
                                                    "clip")} == {registry.UNIFORM}
  with pytest.raises(ValueError, match="needs --participation=poisson"):
    _config(tmp_path, mechanism="dpfedavg", participation="uniform")
  with pytest.raises(ValueError, match="fixed denominator"):
    _config(tmp_path, mechanism="blt", participation="poisson")
  with pytest.raises(ValueError, match="σ = 0 gives no privacy.*--mechanism=none or "
                                       "--mechanism=clip"):
    _config(tmp_path, noise_multiplier=0.0)
  assert not _config(tmp_path, mechanism="none", noise_multiplier=0.0).is_private
  with pytest.raises(ValueError, match="--mechanism=clip has no noise to calibrate"):
    registry.mechanism("clip").calibrate(_config(tmp_path, mechanism="clip"), 1.0)


def test_accountants(tmp_path):
  realized = _realized(4, [[0, 1], [2, 3], [0, 4], [1, 5]])  # k = 2, b = 2.
  none = registry.mechanism("none").accountant(_config(tmp_path, mechanism="none"), None, 10)
  assert none.report(realized) is None and math.isinf(none.epsilon(realized))

  config = _config(tmp_path)
  dpsgd = registry.mechanism("dpsgd").accountant(config, catalog.DpSgdMechanism(), 10)
  expected = zcdp.matrix_mechanism_guarantee(math.sqrt(2), 1.5, 1e-5).epsilon
  assert dpsgd.epsilon(realized) == pytest.approx(expected, rel=1e-12)
  assert dpsgd.epsilon(_realized(0, [])) == 0.0

  poisson = _config(tmp_path, mechanism="dpfedavg", participation="poisson",
                    population_sampling_rate=0.2)
  accountant = registry.mechanism("dpfedavg").accountant(poisson, None, 10)
  assert accountant.progress_accountant == "RDP" and accountant.report_accountant == "PLD"
  rdp = dpfedavg.dpfedavg_epsilon(10, 2.0, 1.5, 4, 1e-5, method=dpfedavg.RDP).epsilon
  assert accountant.epsilon(realized) == pytest.approx(rdp, rel=1e-12)
  assert accountant.report(realized).epsilon <= rdp * (1 + 1e-9)


def test_dp_ftrl_entries_build_save_and_reload_their_mechanism(tmp_path):
  config = _config(tmp_path, mechanism="blt", participation="min_sep_rounds", min_sep=2,
                   blt_buffers=1)
  entry = registry.mechanism("blt")
  built = entry.load_or_build(config)
  assert not os.path.exists(os.path.join(tmp_path, registry.MECHANISM_FILE))  # Writes nothing.
  catalog.save(built, os.path.join(tmp_path, registry.MECHANISM_FILE))  # As the program does.
  again = entry.load_or_build(config)  # From mechanism.json now.
  assert again.to_dict() == built.to_dict()
  other = _config(tmp_path, mechanism="dpsgd", participation="min_sep_rounds")
  with pytest.raises(ValueError, match="holds a 'blt' mechanism, but --mechanism=dpsgd"):
    registry.mechanism("dpsgd").load_or_build(other)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
