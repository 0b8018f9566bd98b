"""cpSGD's TFF aggregator (paper 000, Sec. 4.3): types, decoding, private shares, secure sum."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl.aggregators import cpsgd
from dp_fl.mechanisms import cpsgd as cpsgd_math

VALUE_TYPE = tff.to_type(collections.OrderedDict(
    w=tff.TensorType(np.float32, [6, 5]), b=tff.TensorType(np.float32, [7])))
DIMENSION = 37  # Padded to 64.


def _protocol(k=16, m=0, p=0.5, n=8, clip=1.0, x_max=None):
  return cpsgd_math.Protocol(
      num_levels=k, num_trials=m, p=p, clip_norm=clip,
      x_max=x_max or cpsgd_math.rotated_x_max(clip, n, DIMENSION, 1e-6))


def _values(n, seed=0, scale=0.1):
  rng = np.random.default_rng(seed)
  return [collections.OrderedDict(w=(scale * rng.normal(size=(6, 5))).astype(np.float32),
                                  b=(scale * rng.normal(size=7)).astype(np.float32))
          for _ in range(n)]


def _flat(value):
  return np.concatenate([np.asarray(value["w"]).ravel(), np.asarray(value["b"])])


def test_type_signatures():
  process = cpsgd.CpSgdFactory(_protocol(), clients_per_round=8, seed=1).create(VALUE_TYPE)
  next_type = process.next.type_signature
  assert next_type.result.result.member == VALUE_TYPE
  assert next_type.result.result.placement == tff.SERVER
  measurements = next_type.result.measurements.member
  assert [name for name, _ in tff.structure.iter_elements(measurements)] == [
      "clients", "clipped_count", "zeroed_count", "nonfinite_count", "secure_sum"]
  secure = measurements.secure_sum
  assert secure.bits_per_coordinate == tff.TensorType(np.int32)
  assert secure.noise_stddev == tff.TensorType(np.float32)
  state = process.initialize.type_signature.result.member
  assert "int64[2]" in str(state)  # The public rotation seed, with the round.


def test_without_noise_decoding_is_the_clipped_mean_up_to_quantization():
  n = 8
  values = _values(n)
  values[0] = collections.OrderedDict(w=np.full((6, 5), 3.0, np.float32),
                                      b=np.zeros(7, np.float32))  # Clipped to norm 1.
  protocol = _protocol(k=2 ** 20, n=n)
  process = cpsgd.CpSgdFactory(protocol, clients_per_round=10, seed=2).create(VALUE_TYPE)
  out = process.next(process.initialize(), values)
  expected = cpsgd_math.clip_l2(np.stack([_flat(v) for v in values]), 1.0).sum(axis=0) / 10
  np.testing.assert_allclose(_flat(out.result), expected, atol=1e-5)
  assert out.measurements["clipped_count"] == 1 and out.measurements["clients"] == n
  assert out.measurements["secure_sum"]["noise_stddev"] == 0.0
  assert out.measurements["secure_sum"]["secure_sum_bits"] == cpsgd_math.secure_sum_bits(
      10, 2 ** 20, 0)


def test_each_client_draws_its_own_noise_share():
  # Identical inputs: independent shares give a sum with variance n·m·p(1−p) levels² per
  # coordinate; a shared stream (e.g. from TensorFlow's global seed) would give n² m p(1−p).
  n, m = 16, 400
  protocol = _protocol(k=4, m=m, n=n)
  process = cpsgd.CpSgdFactory(protocol, clients_per_round=n, seed=3).create(VALUE_TYPE)
  tf.keras.utils.set_random_seed(0)
  value = _values(1)[0]
  out = process.next(process.initialize(), [value] * n)
  # The decoded sum's error, rotated back: per coordinate variance (w √(n m p(1−p)))² / n².
  error = (_flat(out.result) - _flat(value)) * n
  expected_std = protocol.noise_std_of_sum(n)
  assert out.measurements["secure_sum"]["noise_stddev"] == pytest.approx(expected_std, 1e-6)
  # 37 coordinates: the sample std is within ±35 % of the truth with overwhelming probability
  # (quantization adds < 1 % here); a shared stream would be 4× larger.
  assert 0.65 * expected_std < np.std(error) < 1.35 * expected_std


def test_the_secure_sum_does_not_wrap_at_its_largest_sums():
  # p close to 1: every share is ≈ m, so the sum sits just below the modulus 2^b.
  n, k, m = 8, 16, 1000
  protocol = _protocol(k=k, m=m, p=0.999, n=n)
  factory = cpsgd.CpSgdFactory(protocol, clients_per_round=n, seed=4)
  assert n * (k - 1 + m) < 2 ** factory.secure_sum_bits <= 2 * n * (k - 1 + m)
  values = _values(n, seed=5)
  process = factory.create(VALUE_TYPE)
  out = process.next(process.initialize(), values)
  expected = np.mean([_flat(v) for v in values], axis=0)
  # A wrap would be off by 2^b levels (w 2^b / n ≫ 1); the noise std is w √(8 m p(1−p)) / n.
  tolerance = 6 * protocol.noise_std_of_sum(n) / n + 2 * protocol.level_spacing
  assert np.max(np.abs(_flat(out.result) - expected)) < tolerance


def test_more_clients_than_the_modulus_holds_fail_loudly():
  process = cpsgd.CpSgdFactory(_protocol(m=3), clients_per_round=2, seed=5).create(VALUE_TYPE)
  with pytest.raises(Exception, match="more clients than the 2"):
    process.next(process.initialize(), _values(3))


def test_compiles_to_mapreduce_form_with_a_secure_modular_sum():
  protocol = _protocol(k=2 ** 20, n=4)
  process = cpsgd.CpSgdFactory(protocol, clients_per_round=4, seed=6).create(VALUE_TYPE)

  @tff.federated_computation(process.initialize.type_signature.result,
                             tff.FederatedType(VALUE_TYPE, tff.CLIENTS))
  def next_fn(state, value):
    output = process.next(state, value)
    return output.state, output.result

  form = tff.backends.mapreduce.get_map_reduce_form_for_computation(next_fn)
  assert isinstance(form, tff.backends.mapreduce.MapReduceForm)
  assert form.securely_aggregates_tensors
  assert "int64[64]" in str(form.work.type_signature.result)  # d' integers per client.


class _SumInsteadOfSecureSum(tff.aggregators.UnweightedAggregationFactory):
  """Stands in for `BinomialSecureSumFactory`: passes on the exact clipped sum it is given."""

  secure_sum_bits = 1

  def __init__(self, protocol, max_clients, seed=None):
    del protocol, max_clients, seed

  def create(self, value_type):
    return tff.aggregators.SumFactory().create(value_type)


def _float32_norm_as_tff_computes_it(leaves):
  """`tff.aggregators.clipping_factory`'s global norm: per-tensor norms squared and summed in
  float32 (tensorflow_federated/python/aggregators/robust.py, `_global_l2_norm`)."""
  return float(tf.sqrt(tf.reduce_sum(tf.stack(
      [tf.norm(tf.constant(x), ord=2) ** 2 for x in leaves]))))


def _crafted_update():
  """The worst found of updates whose float32 norm under-estimates the true one: per tensor,
  one entry of 1 and many whose squares fall below half an ulp of the running float32 sum, so
  the accumulation drops them. Searched over tensor counts, sizes and magnitudes."""
  worst = (0.0, None)
  for tensors in (1, 4, 16):
    for size in (2 ** 10, 2 ** 12, 2 ** 14):
      for fraction in (0.3, 0.49, 0.75, 0.99):
        x = np.full(size // tensors, np.sqrt(fraction * 2.0 ** -24), np.float32)
        x[0] = 1.0
        leaves = [x] * tensors
        true_norm = math.sqrt(sum(float(np.sum(np.square(v, dtype=np.float64)))
                                  for v in leaves))
        ratio = true_norm / _float32_norm_as_tff_computes_it(leaves)
        if ratio > worst[0]:
          worst = (ratio, leaves)
  return worst


def test_the_clip_bound_holds_for_a_crafted_float32_update(monkeypatch):
  # cpSGD's sensitivities assume ‖X‖₂ <= D for every client. TFF's float32 clipping, even at
  # D(1 − 1e-6), lets through an update whose float32 norm under-estimates its true one.
  ratio, leaves = _crafted_update()
  assert ratio - 1 > 2e-6  # float32 alone would leave it above D(1 − 1e-6) by that much.
  value_type = tff.to_type(collections.OrderedDict(
      (f"t{i}", tff.TensorType(np.float32, x.shape)) for i, x in enumerate(leaves)))
  monkeypatch.setattr(cpsgd, "BinomialSecureSumFactory", _SumInsteadOfSecureSum)
  clip = 0.5
  for scale in (clip, clip * 3.0):  # The crafted norm just above D, and far above it.
    process = cpsgd.CpSgdFactory(_protocol(clip=clip), clients_per_round=1).create(value_type)
    value = collections.OrderedDict((f"t{i}", (x * np.float32(scale)).astype(np.float32))
                                    for i, x in enumerate(leaves))
    out = process.next(process.initialize(), [value])
    norm = math.sqrt(sum(float(np.sum(np.square(np.asarray(v, np.float64))))
                         for v in out.result.values()))
    assert norm <= clip, (scale, norm / clip - 1)
    assert out.measurements["clipped_count"] == 1


def test_bad_value_types_and_settings_fail_clearly():
  factory = cpsgd.CpSgdFactory(_protocol(), clients_per_round=4)
  with pytest.raises(ValueError, match="float32 or float64"):
    factory.create(tff.TensorType(np.int32, [3]))
  with pytest.raises(ValueError, match="bits"):
    cpsgd.CpSgdFactory(_protocol(k=2 ** 30, m=2 ** 60), clients_per_round=1000)
  with pytest.raises(ValueError, match="zeroing_norm"):
    cpsgd.CpSgdFactory(_protocol(), clients_per_round=4, zeroing_norm=0.5)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
