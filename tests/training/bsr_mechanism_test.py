"""BSR (the banded square root of A), added by the README recipe: math against dense brute
force, the NumPy and TF streams against C⁻¹Z, and a toy run that trains, reports ε (audited
from the checkpoint) and resumes bitwise."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dp_fl import runtime
from dp_fl.aggregators import noise as noise_lib
from dp_fl.mechanisms import bsr
from dp_fl.mechanisms import catalog
from dp_fl.training import config as config_lib
from dp_fl.training import registry
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task


def _sqrt_a(n: int) -> np.ndarray:
  """A^(1/2) by eigendecomposition-free brute force: the lower-triangular C with C² = A,
  from C = LtToep(r) solved coefficient by coefficient (r_0 = 1, 2 r_0 r_t = 1 − Σ_{0<j<t}
  r_j r_{t−j})."""
  r = np.zeros(n)
  r[0] = 1.0
  for t in range(1, n):
    r[t] = (1.0 - np.dot(r[1:t], r[1:t][::-1])) / 2.0
  i, j = np.indices((n, n))
  return np.where(i >= j, r[np.clip(i - j, 0, None)], 0.0)


def _dense_bsr(n: int, p: int) -> np.ndarray:
  """Band p of A^(1/2), every column scaled to unit norm (the module docstring's C)."""
  root = _sqrt_a(n)
  i, j = np.indices((n, n))
  c = np.where(i - j < p, root, 0.0)
  return c / np.linalg.norm(c, axis=0)


def test_the_square_root_is_one():
  root = _sqrt_a(9)
  np.testing.assert_allclose(root @ root, np.tril(np.ones((9, 9))), atol=1e-13)


@pytest.mark.parametrize("n,p", [(1, 1), (6, 1), (7, 3), (9, 9), (10, 4)])
def test_c_is_the_normalized_banded_square_root(n, p):
  mechanism = bsr.BsrMechanism(n, p)
  np.testing.assert_allclose(mechanism.banded.dense(), _dense_bsr(n, p), atol=1e-14)
  np.testing.assert_allclose(np.linalg.norm(mechanism.banded.dense(), axis=0), 1.0, atol=1e-14)


@pytest.mark.parametrize("n,p,b,k", [(8, 3, 3, 3), (8, 3, 2, 4), (9, 4, 1, 9), (10, 5, 2, 3),
                                     (10, 2, 4, 2), (7, 7, 3, 3)])
def test_sensitivity_is_the_brute_force_maximum(n, p, b, k):
  sens = bsr.BsrMechanism(n, p).sensitivity(n, b, k)
  truth = privacy_audit.brute_force_sensitivity(_dense_bsr(n, p), b, k)
  if sens.is_exact:
    assert sens.value == pytest.approx(truth, rel=1e-12)
  else:
    assert sens.value <= truth * (1 + 1e-12) <= sens.guaranteed * (1 + 1e-12)
  if b >= p:  # Disjoint rows: k unit columns.
    assert sens.is_exact and sens.value == pytest.approx(np.sqrt(k), rel=1e-12)


@pytest.mark.parametrize("n,p", [(6, 2), (9, 4)])
def test_errors_are_those_of_b_equals_a_c_inverse(n, p):
  decoder = np.tril(np.ones((n, n))) @ np.linalg.inv(_dense_bsr(n, p))
  np.testing.assert_allclose(bsr.BsrMechanism(n, p).per_query_squared_error(n),
                             np.sum(decoder ** 2, axis=1), rtol=1e-11)


@pytest.mark.parametrize("n,p", [(1, 1), (5, 2), (9, 4)])
def test_numpy_and_tf_streams_equal_the_dense_inverse(n, p):
  mechanism = bsr.BsrMechanism(n, p)
  spec = mechanism.streaming_noise(n)
  assert spec.buffers == p - 1 == mechanism.buffers(n)
  inverse = np.linalg.inv(_dense_bsr(n, p))
  np.testing.assert_allclose(spec.materialize(n), inverse, atol=1e-12)
  generator = noise_lib.from_mechanism(mechanism, rounds=n)
  buffer = generator.initial_buffer(tf.TensorSpec((3,), tf.float64))
  z = np.random.default_rng(n).normal(size=(n, 3))
  rows = []
  for t in range(n):
    row, buffer = generator.step(tf.constant(z[t]), buffer, tf.constant(t, tf.int64))
    rows.append(row.numpy())
  np.testing.assert_allclose(np.array(rows), inverse @ z, atol=1e-12)


def test_build_defaults_json_and_table3_losses():
  built = catalog.build(bsr.NAME, rounds=40, min_sep=8, max_participations=5)
  assert built.mechanism.banded.bands == 8 and built.mechanism.max_rounds == 40
  assert catalog.build(bsr.NAME, rounds=40, min_sep=8, bands=3).mechanism.banded.bands == 3
  saved = built.mechanism.to_dict()
  restored = catalog.from_dict(saved)
  assert restored.to_dict() == saved and (saved["rounds"], saved["bands"]) == (40, 8)
  np.testing.assert_array_equal(restored.banded.band, built.mechanism.banded.band)
  # The checksum pins C: parameters saved with another construction are refused.
  changed = dict(saved, band_checksum=[x * (1 + 1e-6) for x in saved["band_checksum"]])
  with pytest.raises(ValueError, match="construction changed"):
    catalog.from_dict(changed)
  assert bsr.NAME in catalog.names() and bsr.NAME in registry.MECHANISMS
  # Paper 004's Table 3 setting (n = 2052, b = 342, k = 6): BSR with p = b is a strong
  # closed-form baseline, between BandMF (10.21 / 8.60) and the k = 1 BLTs (11.4 / 10.87).
  evaluation = catalog.evaluate(bsr.BsrMechanism(2052, 342), 2052, 342, 6)
  assert evaluation.sensitivity_kind == "exact" and evaluation.sensitivity == pytest.approx(
      np.sqrt(6))
  assert 10.2 < evaluation.max_loss < 11.0 and 8.6 < evaluation.rms_loss < 9.4


@pytest.mark.parametrize("bad,match", [({"rounds": 5, "bands": 6}, "must be <= the rounds"),
                                       ({"rounds": 5}, "'bands'"),
                                       ({"rounds": 0, "bands": 1}, "`rounds`"),
                                       ({"rounds": 5, "bands": 2}, "'band_checksum'")])
def test_bad_parameters_fail_clearly(bad, match):
  with pytest.raises(ValueError, match=match):
    catalog.from_dict({"mechanism": bsr.NAME, **bad})


def test_bsr_is_not_defined_beyond_its_rounds():
  with pytest.raises(ValueError, match="beyond|<= 6"):
    bsr.BsrMechanism(6, 2).sensitivity(7, 2, 2)


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
  assert bsr.NAME in config_lib.MECHANISMS
  privacy_audit.check_recipe_run(toy_task.make_task(),
                                 lambda name: _config(tmp_path / name, bands=bands),
                                 pauses=(3,))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
