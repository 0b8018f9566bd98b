"""Noise calibration for a target ε from the planned schedule (DP-FTRL and DP-FedAvg)."""

from __future__ import annotations

import math

import pytest

from dp_fl.accounting import dpfedavg
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog
from dp_fl.training import program
from dp_fl.training import registry


def _config(tmp_path, **kw):
  values = dict(task="toy", root_dir=str(tmp_path), rounds=40, clients_per_round=10,
                min_sep=10, participation="min_sep_rounds", delta=1e-6)
  values.update(kw)
  return registry.make_config(**values)


def test_dpftrl_calibration_inverts_the_accounting(tmp_path):
  params = tmp_path / "blt.json"
  params.write_text(blt.PUBLISHED_BLTS[400].to_json())
  config = _config(tmp_path / "run", mechanism="blt", mechanism_params=str(params))
  sigma = program.calibrate_noise_multiplier(config, 4.0)
  sens = catalog.BltMechanism(blt.PUBLISHED_BLTS[400]).sensitivity(40, 10, 4).value
  assert zcdp.matrix_mechanism_guarantee(sens, sigma, 1e-6).epsilon == pytest.approx(4.0)
  # Calibration writes nothing to the run directory (issue #18): the run saves C once it
  # has validated everything.
  assert not (tmp_path / "run").exists() or not (
      tmp_path / "run" / program.MECHANISM_FILE).exists()


def test_the_run_uses_the_very_mechanism_calibration_optimized(tmp_path):
  config = _config(tmp_path / "run", mechanism="blt", rounds=12, min_sep=4, blt_buffers=2)
  program.calibrate_noise_multiplier(config, 4.0)
  first = program.build_mechanism(config)
  assert program.build_mechanism(config.replace(noise_multiplier=3.0)) is first
  assert program.build_mechanism(config.replace(min_sep=3)) is not first


def test_dpfedavg_calibration_meets_the_target_with_rdp(tmp_path):
  config = _config(tmp_path, mechanism="dpfedavg", participation="poisson",
                   population_sampling_rate=0.01, clients_per_round=100)
  z = program.calibrate_noise_multiplier(config, 2.0)
  eps = dpfedavg.dpfedavg_epsilon(10000, 100, z, 40, 1e-6, method=dpfedavg.RDP).epsilon
  assert eps <= 2.0 and eps == pytest.approx(2.0, rel=1e-3)


def test_calibration_needs_a_private_mechanism_and_a_known_population(tmp_path):
  with pytest.raises(ValueError, match="no noise to calibrate"):
    program.calibrate_noise_multiplier(_config(tmp_path, mechanism="none"), 1.0)
  with pytest.raises(ValueError, match="--population_sampling_rate"):
    program.calibrate_noise_multiplier(
        _config(tmp_path, mechanism="dpfedavg", participation="poisson"), 1.0)
  # The task's population gives the sampling rate q = m / N the run will use.
  config = _config(tmp_path, mechanism="dpfedavg", participation="poisson",
                   clients_per_round=100)
  z = program.calibrate_noise_multiplier(config, 2.0, num_clients=10000)
  assert z == program.calibrate_noise_multiplier(
      config.replace(population_sampling_rate=0.01), 2.0)
  assert math.isfinite(program.calibrate_noise_multiplier(
      _config(tmp_path / "d", mechanism="dpsgd"), 1.0))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
