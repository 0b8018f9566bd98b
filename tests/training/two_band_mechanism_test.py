"""The two-band Toeplitz mechanism, added by the README recipe: noise, training, ε, resume.

The recipe's promise is that a mechanism added in its own module plus one registry entry
trains, reports ε and resumes bitwise with nothing else changed; this file checks all three
on the toy task (its math against dense brute force: tests/mechanisms/two_band_test.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.aggregators import noise as noise_lib
from dp_fl.execution import runtime
from dp_fl.mechanisms import two_band
from dp_fl.training import registry
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task


def _dense(c: float, n: int) -> np.ndarray:
  return np.eye(n) + c * np.eye(n, k=-1)


def test_the_registry_knows_it():
  assert two_band.NAME in registry.MECHANISMS


# ---------------------------------------------------------------------------------------
# Its noise: the NumPy and TF streams against the dense C⁻¹Z.


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
