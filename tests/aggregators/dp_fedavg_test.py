"""Tests of DPFedAvgFactory: paper 001's estimators f~_f, f~_c, flat/per-layer clipping."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import tensorflow_federated as tff

from dp_fl.accounting import dpfedavg as dpfedavg_accounting
from dp_fl.aggregators import dp_fedavg

VALUE_TYPE = tff.types.to_type(collections.OrderedDict(
    a=tff.TensorType(np.float32, [2]), b=tff.TensorType(np.float32, [2])))
WEIGHT_TYPE = tff.TensorType(np.float32)


def _client(a, b):
  return collections.OrderedDict(a=np.asarray(a, np.float32), b=np.asarray(b, np.float32))


def _factory(**kwargs):
  kwargs.setdefault("clip_norm", 1.0)
  kwargs.setdefault("noise_multiplier", 0.0)
  kwargs.setdefault("sampling_probability", 0.5)
  kwargs.setdefault("total_weight", 8.0)
  kwargs.setdefault("seed", 3)
  return dp_fedavg.DPFedAvgFactory(**kwargs)


CLIENTS = [_client([3, 4], [0, 0]),      # flat norm 5
           _client([0.3, 0], [0, 0.4]),  # flat norm 0.5; per-layer norms 0.3, 0.4
           _client([0, 0], [0, 2])]      # flat norm 2
COUNTS = [np.float32(10), np.float32(5), np.float32(40)]  # n_k
CAP = 20.0  # w_k = min(n_k / 20, 1) = 0.5, 0.25, 1


def _flat_clipped_weighted():
  w = np.array([0.5, 0.25, 1.0])
  deltas = [np.array([3, 4, 0, 0.]) / 5, np.array([0.3, 0, 0, 0.4]), np.array([0, 0, 0, 2.]) / 2]
  return sum(wi * d for wi, d in zip(w, deltas)), w.sum()


def test_type_signature():
  process = _factory(example_cap=CAP).create(VALUE_TYPE, WEIGHT_TYPE)
  next_type = process.next.type_signature
  next_type.parameter[1].check_equivalent_to(tff.FederatedType(VALUE_TYPE, tff.CLIENTS))
  next_type.parameter[2].check_equivalent_to(tff.FederatedType(WEIGHT_TYPE, tff.CLIENTS))
  next_type.result.result.check_equivalent_to(tff.FederatedType(VALUE_TYPE, tff.SERVER))
  m = next_type.result.measurements.member
  for name in ("total_weight", "denominator", "sensitivity", "noise_stddev"):
    m[name].check_equivalent_to(tff.TensorType(np.float32))


def test_fixed_denominator_estimator_flat():
  process = _factory(example_cap=CAP).create(VALUE_TYPE, WEIGHT_TYPE)
  output = process.next(process.initialize(), CLIENTS, COUNTS)
  numerator, weight = _flat_clipped_weighted()
  expected = numerator / (0.5 * 8.0)  # q W
  got = np.concatenate([output.result["a"], output.result["b"]])
  np.testing.assert_allclose(got, expected, rtol=1e-6)
  m = output.measurements
  assert m["total_weight"] == pytest.approx(weight)
  assert m["denominator"] == pytest.approx(4.0)
  assert (m["clients"], m["clipped_count"], m["nonfinite_count"]) == (3, 2, 0)
  assert m["sensitivity"] == pytest.approx(1.0 / 4.0)  # S / (q W), Lemma 1


@pytest.mark.parametrize("min_weight,expected_den", [(2.0, 1.75), (6.0, 3.0)])
def test_clipped_denominator_estimator(min_weight, expected_den):
  # Sum of weights is 1.75: max(q W_min, 1.75) is 1.75 for W_min=2 (qW_min=1), 3 for W_min=6.
  process = _factory(example_cap=CAP, estimator="clipped",
                     min_weight=min_weight).create(VALUE_TYPE, WEIGHT_TYPE)
  output = process.next(process.initialize(), CLIENTS, COUNTS)
  numerator, _ = _flat_clipped_weighted()
  got = np.concatenate([output.result["a"], output.result["b"]])
  np.testing.assert_allclose(got, numerator / expected_den, rtol=1e-6)
  assert output.measurements["sensitivity"] == pytest.approx(2 * 1.0 / (0.5 * min_weight))


def test_per_layer_clipping_default_budget():
  # m = 2 tensors -> S_j = S / sqrt(2); with S = 1 that is 0.7071 per tensor.
  process = _factory(clipping="per_layer").create(VALUE_TYPE, WEIGHT_TYPE)
  output = process.next(process.initialize(), CLIENTS, COUNTS)
  s_j = 1 / math.sqrt(2)
  a = np.array([3, 4.]) / 5 * s_j + np.array([0.3, 0])
  b = np.array([0, 0.4]) + np.array([0, s_j])
  np.testing.assert_allclose(output.result["a"], a / 4, rtol=1e-6)
  np.testing.assert_allclose(output.result["b"], b / 4, rtol=1e-6)
  assert output.measurements["clipped_count"] == 2


def test_per_layer_clipping_explicit_norms():
  process = _factory(clipping="per_layer", layer_clip_norms=[0.6, 0.8]).create(
      VALUE_TYPE, WEIGHT_TYPE)
  output = process.next(process.initialize(), [_client([3, 4], [0, 3])], [np.float32(1)])
  np.testing.assert_allclose(output.result["a"], np.array([0.36, 0.48]) / 4, rtol=1e-6)
  np.testing.assert_allclose(output.result["b"], np.array([0, 0.8]) / 4, rtol=1e-6)


def test_variable_cohort_sizes_and_nonfinite():
  # Poisson sampling gives different cohort sizes; the same process handles any size.
  process = _factory().create(VALUE_TYPE, WEIGHT_TYPE)
  state = process.initialize()
  for size in (1, 4, 2):
    clients = [_client([0.1, 0], [0, 0])] * size
    output = process.next(state, clients, [np.float32(1)] * size)
    np.testing.assert_allclose(output.result["a"], [0.1 * size / 4, 0], rtol=1e-6)
    state = output.state
  output = process.next(state, [_client([np.inf, 0], [0, 0]), _client([0.1, 0], [0, 0])],
                        [np.float32(1)] * 2)
  np.testing.assert_allclose(output.result["a"], [0.1 / 4, 0], rtol=1e-6)
  assert output.measurements["nonfinite_count"] == 1
  assert output.measurements["total_weight"] == pytest.approx(1.0)


# Noise std sigma = z * S/(qW). D = 8000 entries over 1 round: the sample variance has
# relative std sqrt(2/D) = 1.6%; tolerance 5 of those (7.9%), flake rate ~6e-7 per seed.
def test_noise_stddev_matches_sensitivity():
  dim = 8000
  z = 1.7
  factory = _factory(noise_multiplier=z, total_weight=10.0, sampling_probability=0.2,
                     clip_norm=0.5)
  sens = dpfedavg_accounting.sensitivity_fixed_denominator(0.5, 0.2, 10.0)
  assert factory.noise_stddev == pytest.approx(z * sens)
  process = factory.create(tff.TensorType(np.float32, [dim]), WEIGHT_TYPE)
  output = process.next(process.initialize(), [np.zeros(dim, np.float32)], [np.float32(1)])
  empirical = np.mean(output.result.astype(np.float64) ** 2)
  assert abs(empirical / (z * sens) ** 2 - 1) < 5 * math.sqrt(2 / dim)


@pytest.mark.parametrize("kwargs,match", [
    (dict(clip_norm=0), "clip_norm"),
    (dict(noise_multiplier=-1), "noise_multiplier"),
    (dict(sampling_probability=0), "sampling_probability"),
    (dict(sampling_probability=1.5), "sampling_probability"),
    (dict(total_weight=0), "total_weight"),
    (dict(estimator="exact"), "estimator"),
    (dict(estimator="clipped"), "min_weight"),
    (dict(min_weight=3.0), "min_weight"),
    (dict(example_cap=0), "example_cap"),
    (dict(clipping="global"), "clipping"),
    (dict(layer_clip_norms=[0.5]), "per_layer"),
    (dict(clipping="per_layer", layer_clip_norms=[0.5, 0.5]), "clip_norm"),
])
def test_bad_input(kwargs, match):
  with pytest.raises(ValueError, match=match):
    _factory(**kwargs)


def test_bad_types_at_create():
  with pytest.raises(ValueError, match="one S_j per tensor"):
    _factory(clipping="per_layer", layer_clip_norms=[0.6, 0.8], clip_norm=1.0).create(
        tff.TensorType(np.float32, [3]), WEIGHT_TYPE)
  with pytest.raises(ValueError, match="weight_type"):
    _factory().create(VALUE_TYPE, tff.TensorType(np.float32, [2]))
  with pytest.raises(ValueError, match="float32 or float64"):
    _factory().create(tff.TensorType(np.int64, [2]), WEIGHT_TYPE)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
