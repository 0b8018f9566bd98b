"""Tests of dp_fl.mechanisms.bsr (BSR, the banded square root of A; Kalinin & Lampert 2024)
against dense brute force: C, its sensitivity, errors, the NumPy stream, JSON and validation.
The TF stream and a toy training run: tests/training/bsr_mechanism_test.py."""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.mechanisms import bsr
from dp_fl.mechanisms import catalog
from tests.mechanisms import oracles


def test_the_square_root_is_one():
  root = oracles.dense_sqrt_a(9)
  np.testing.assert_allclose(root @ root, np.tril(np.ones((9, 9))), atol=1e-13)


@pytest.mark.parametrize("n,p", [(1, 1), (6, 1), (7, 3), (9, 9), (10, 4)])
def test_c_is_the_normalized_banded_square_root(n, p):
  mechanism = bsr.BsrMechanism(n, p)
  np.testing.assert_allclose(mechanism.banded.dense(), oracles.dense_bsr(n, p), atol=1e-14)
  np.testing.assert_allclose(np.linalg.norm(mechanism.banded.dense(), axis=0), 1.0, atol=1e-14)


@pytest.mark.parametrize("n,p,b,k", [(8, 3, 3, 3), (8, 3, 2, 4), (9, 4, 1, 9), (10, 5, 2, 3),
                                     (10, 2, 4, 2), (7, 7, 3, 3)])
def test_sensitivity_is_the_brute_force_maximum(n, p, b, k):
  sens = bsr.BsrMechanism(n, p).sensitivity(n, b, k)
  truth = oracles.brute_force_sensitivity(oracles.dense_bsr(n, p), b, k)
  if sens.is_exact:
    assert sens.value == pytest.approx(truth, rel=1e-12)
  else:
    assert sens.value <= truth * (1 + 1e-12) <= sens.guaranteed * (1 + 1e-12)
  if b >= p:  # Disjoint rows: k unit columns.
    assert sens.is_exact and sens.value == pytest.approx(np.sqrt(k), rel=1e-12)


@pytest.mark.parametrize("n,p", [(6, 2), (9, 4)])
def test_errors_are_those_of_b_equals_a_c_inverse(n, p):
  decoder = np.tril(np.ones((n, n))) @ np.linalg.inv(oracles.dense_bsr(n, p))
  np.testing.assert_allclose(bsr.BsrMechanism(n, p).per_query_squared_error(n),
                             np.sum(decoder ** 2, axis=1), rtol=1e-11)


@pytest.mark.parametrize("n,p", [(1, 1), (5, 2), (9, 4)])
def test_numpy_stream_equals_the_dense_inverse(n, p):
  mechanism = bsr.BsrMechanism(n, p)
  spec = mechanism.streaming_noise(n)
  assert spec.buffers == p - 1 == mechanism.buffers(n)
  np.testing.assert_allclose(spec.materialize(n), np.linalg.inv(oracles.dense_bsr(n, p)),
                             atol=1e-12)


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
  assert bsr.NAME in catalog.names()
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


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
