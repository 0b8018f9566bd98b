"""The two-band Toeplitz mechanism, added by the README recipe: math, noise, training, ε, resume.

The recipe's promise is that a mechanism added in its own module plus one registry entry
trains, reports ε and resumes bitwise with nothing else changed; this file checks all three
on the toy task, and the mechanism's math against dense brute force.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.aggregators import noise as noise_lib
from dp_fl.execution import runtime
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import two_band
from dp_fl.training import registry
from tests.mechanisms import oracles
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task


def _dense(c: float, n: int) -> np.ndarray:
  return np.eye(n) + c * np.eye(n, k=-1)


# ---------------------------------------------------------------------------------------
# The math, against dense brute force.


@pytest.mark.parametrize("c,n,b,k", [(0.0, 6, 2, 3), (0.4, 7, 2, 4), (0.9, 8, 3, 3),
                                     (1.0, 6, 1, 6), (0.7, 9, 4, 2)])
def test_sensitivity_is_the_brute_force_maximum(c, n, b, k):
  sens = two_band.TwoBandMechanism(c).sensitivity(n, b, k)
  assert sens.is_exact
  truth = oracles.brute_force_sensitivity(_dense(c, n), b, k)
  assert sens.value == pytest.approx(truth, rel=1e-12)


@pytest.mark.parametrize("c,n", [(0.3, 5), (0.95, 9)])
def test_errors_are_those_of_b_equals_a_c_inverse(c, n):
  b_matrix = np.tril(np.ones((n, n))) @ np.linalg.inv(_dense(c, n))
  expected = np.sum(b_matrix ** 2, axis=1)
  np.testing.assert_allclose(two_band.TwoBandMechanism(c).per_query_squared_error(n),
                             expected, rtol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_numpy_and_tf_streams_equal_the_dense_inverse(n):
  mechanism = two_band.TwoBandMechanism(0.6)
  spec = mechanism.streaming_noise(n)
  assert spec.buffers == (1 if n > 1 else 0)
  np.testing.assert_allclose(spec.materialize(n), np.linalg.inv(_dense(0.6, n)), atol=1e-12)
  generator = noise_lib.from_mechanism(mechanism, rounds=n)
  tensor = tf.TensorSpec((3,), tf.float64)
  buffer = generator.initial_buffer(tensor)
  z = np.random.default_rng(n).normal(size=(n, 3))
  rows = []
  for t in range(n):
    row, buffer = generator.step(tf.constant(z[t]), buffer, tf.constant(t, tf.int64))
    rows.append(row.numpy())
  np.testing.assert_allclose(np.array(rows), np.linalg.solve(_dense(0.6, n), z), atol=1e-12)


def test_build_beats_dpsgd_and_a_grid_and_round_trips_through_json():
  built = catalog.build(two_band.NAME, rounds=60, min_sep=6, max_participations=10)
  mechanism = built.mechanism
  options = catalog.BuildOptions(60, 6, 10)
  grid = min(two_band.loss(c, options) for c in np.linspace(0.0, 1.0, 201))
  assert two_band.loss(mechanism.c, options) <= grid * (1 + 1e-6)
  assert two_band.loss(mechanism.c, options) < 0.8 * two_band.loss(0.0, options)
  assert catalog.from_dict(mechanism.to_dict()).to_dict() == mechanism.to_dict()
  assert two_band.NAME in catalog.names() and two_band.NAME in registry.MECHANISMS


@pytest.mark.parametrize("bad,match", [({"c": 1.5}, "must lie in"), ({"c": -0.1}, "`c`"),
                                       ({}, "subdiagonal")])
def test_bad_parameters_fail_clearly(bad, match):
  with pytest.raises(ValueError, match=match):
    catalog.from_dict({"mechanism": two_band.NAME, **bad})


# ---------------------------------------------------------------------------------------
# Training through the registry: trains, reports ε, resumes bitwise.


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _config(root_dir, rounds=6):
  return toy_program.toy_config(str(root_dir), rounds, two_band.NAME, min_sep=2,
                                reproducible_noise_seed=5)


def test_trains_reports_epsilon_and_resumes_bitwise(tmp_path):
  assert two_band.NAME in registry.MECHANISMS
  # ε: the report's, against the audit from the checkpoint (participation record, the
  # aggregator's row counter, dense C, brute-force sensitivity); paused after 2 and 3 more
  # rounds, then resumed: bitwise the uninterrupted run.
  whole, _ = privacy_audit.check_recipe_run(
      toy_task.make_task(), lambda name: _config(tmp_path / name), pauses=(2, 3))
  assert whole.privacy_report.sensitivity_kind == "exact"


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
