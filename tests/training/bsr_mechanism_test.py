"""BSR (the banded square root of A), added by the README recipe: the TF stream against C⁻¹Z
and a toy run that trains, reports ε (audited from the checkpoint) and resumes bitwise (the
math against dense brute force: tests/mechanisms/bsr_test.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.aggregators import noise as noise_lib
from dp_fl.execution import runtime
from dp_fl.mechanisms import bsr
from dp_fl.training import registry
from tests.mechanisms import oracles
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task


@pytest.mark.parametrize("n,p", [(1, 1), (5, 2), (9, 4)])
def test_tf_stream_equals_the_dense_inverse(n, p):
  mechanism = bsr.BsrMechanism(n, p)
  inverse = np.linalg.inv(oracles.dense_bsr(n, p))
  generator = noise_lib.from_mechanism(mechanism, rounds=n)
  buffer = generator.initial_buffer(tf.TensorSpec((3,), tf.float64))
  z = np.random.default_rng(n).normal(size=(n, 3))
  rows = []
  for t in range(n):
    row, buffer = generator.step(tf.constant(z[t]), buffer, tf.constant(t, tf.int64))
    rows.append(row.numpy())
  np.testing.assert_allclose(np.array(rows), inverse @ z, atol=1e-12)


# ---------------------------------------------------------------------------------------
# Training through the registry: trains, reports ε, resumes bitwise.


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _config(root_dir, rounds=6, **overrides):
  return toy_program.toy_config(str(root_dir), rounds, bsr.NAME, min_sep=2,
                                reproducible_noise_seed=5, **overrides)


@pytest.mark.parametrize("bands", [None, 3])  # p = b (column norms) and p > b (overlaps).
def test_trains_reports_epsilon_and_resumes_bitwise(tmp_path, bands):
  assert bsr.NAME in registry.MECHANISMS
  privacy_audit.check_recipe_run(toy_task.make_task(),
                                 lambda name: _config(tmp_path / name, bands=bands),
                                 pauses=(3,))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
