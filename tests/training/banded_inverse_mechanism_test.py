"""BISR and BandInvMF (C⁻¹ banded Toeplitz), added by the README recipe: the TF stream against
C⁻¹Z and toy runs that train, report ε (audited from the checkpoint) and resume bitwise (the
math, against dense brute force: tests/mechanisms/banded_inverse_test.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.aggregators import noise as noise_lib
from dp_fl.execution import runtime
from dp_fl.mechanisms import banded_inverse
from dp_fl.training import registry
from tests.mechanisms import oracles
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task


# BISR's band, one whose C has negative entries, one with ĉ_0 != 1.
@pytest.mark.parametrize("inverse_coef", [banded_inverse.inverse_sqrt_a_coefficients(5),
                                          [1.0, 0.4, -0.3], [2.0, -0.5]])
@pytest.mark.parametrize("n", [1, 4, 11])
def test_tf_stream_equals_c_inverse_z(inverse_coef, n):
  mechanism = banded_inverse.BandedInverseMechanism("bisr", np.asarray(inverse_coef, np.float64))
  c_inverse = oracles.dense_toeplitz(mechanism.inverse_coef, n)
  generator = noise_lib.from_mechanism(mechanism, rounds=n)
  buffer = generator.initial_buffer(tf.TensorSpec((2, 3), tf.float64))
  z = np.random.default_rng(n).normal(size=(n, 2, 3))
  rows = []
  for t in range(n):
    row, buffer = generator.step(tf.constant(z[t]), buffer, tf.constant(t, tf.int64))
    rows.append(row.numpy())
  np.testing.assert_allclose(np.array(rows), np.einsum("ts,sij->tij", c_inverse, z),
                             atol=1e-12)


# ---------------------------------------------------------------------------------------
# Training through the registry: trains, reports ε, resumes bitwise.


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _config(root_dir, name, rounds=6, **overrides):
  return toy_program.toy_config(str(root_dir), rounds, name, min_sep=2,
                                reproducible_noise_seed=5, **overrides)


@pytest.mark.parametrize("name,bands", [("bisr", None), ("bandinvmf", 3)])
def test_trains_reports_epsilon_and_resumes_bitwise(tmp_path, name, bands):
  assert name in registry.MECHANISMS
  privacy_audit.check_recipe_run(toy_task.make_task(),
                                 lambda run: _config(tmp_path / run, name, bands=bands))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
