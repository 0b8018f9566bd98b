"""Tests of the TF streaming noise generators against dense C^{-1} Z (paper 004, Eq. 1)."""

from __future__ import annotations


import numpy as np
import pytest
import tensorflow as tf

from dp_fl.aggregators import noise
from tests.aggregators import reference

SHAPE = (3, 2)
SPEC = tf.TensorSpec(SHAPE, tf.float64)


def _stream(generator: noise.StreamingNoise, n: int, seed=(7, 11)):
  """Runs `generator` for n rounds; returns (Z, noise), both (n, *SHAPE) float64."""
  buffer = generator.initial_buffer(SPEC)
  zs, out = [], []
  for t in range(n):
    (z,) = noise.standard_normal(tf.constant(seed, tf.int64), tf.constant(t, tf.int64), [SPEC])
    x, buffer = generator.step(z, buffer, tf.constant(t, tf.int64))
    zs.append(z.numpy())
    out.append(x.numpy())
  return np.array(zs), np.array(out)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_blt_matches_dense_inverse(n):
  z, x = _stream(noise.BltNoise(reference.BLT_THETA, reference.BLT_OMEGA), n)
  c = reference.blt_dense(reference.BLT_THETA, reference.BLT_OMEGA, n)
  np.testing.assert_allclose(x, reference.dense_inverse_noise(c, z), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n,bands", [(1, 1), (6, 1), (6, 2), (9, 3), (5, 5)])
def test_banded_matches_dense_inverse(n, bands):
  c = reference.banded_dense(n, bands)
  generator = noise.BandedNoise(c)
  assert generator.bands == bands and generator.buffers == bands - 1
  z, x = _stream(generator, n)
  np.testing.assert_allclose(x, reference.dense_inverse_noise(c, z), rtol=1e-10, atol=1e-12)


def test_banded_from_band_array_roundtrip():
  c = reference.banded_dense(7, 3)
  generator = noise.BandedNoise(c)
  again = noise.BandedNoise.from_band_array(generator.band)
  np.testing.assert_array_equal(again.band, generator.band)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 11, 16])
def test_tree_matches_dense_inverse(n):
  generator = noise.TreeNoise(n)
  assert generator.buffers == int(np.floor(np.log2(n))) <= int(np.ceil(np.log2(n)))
  z, x = _stream(generator, n)
  c = reference.tree_dense(n)
  np.testing.assert_allclose(x, reference.dense_inverse_noise(c, z), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [5, 8, 13])
def test_tree_decoder_is_the_binary_counter(n):
  # B = A C^{-1} must select, for each prefix [1, t], exactly the dyadic nodes of t's bits.
  c = reference.tree_dense(n)
  b = np.tril(np.ones((n, n))) @ np.linalg.inv(c)
  np.testing.assert_allclose(b, np.round(b), atol=1e-12)
  for t in range(1, n + 1):
    assert int(np.round(b[t - 1].sum())) == bin(t).count("1")


def test_identity_is_z():
  z, x = _stream(noise.IdentityNoise(), 4)
  np.testing.assert_array_equal(x, z)


def test_standard_normal_depends_on_seed_and_round_only():
  seed = tf.constant([1, 2], tf.int64)
  a = noise.standard_normal(seed, tf.constant(3, tf.int64), [SPEC, SPEC])
  b = noise.standard_normal(seed, tf.constant(3, tf.int64), [SPEC, SPEC])
  c = noise.standard_normal(seed, tf.constant(4, tf.int64), [SPEC, SPEC])
  np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())
  assert not np.allclose(a[0].numpy(), a[1].numpy())  # Tensors get independent noise.
  assert not np.allclose(a[0].numpy(), c[0].numpy())  # Rounds get independent noise.


@pytest.mark.parametrize("generator", [noise.BandedNoise(reference.banded_dense(3, 2)),
                                       noise.TreeNoise(4)])
def test_refuses_rounds_beyond_n(generator):
  buffer = generator.initial_buffer(SPEC)
  z = tf.zeros(SHAPE, tf.float64)
  with pytest.raises(tf.errors.InvalidArgumentError, match="not defined beyond"):
    generator.step(z, buffer, tf.constant(generator.max_rounds, tf.int64))


@pytest.mark.parametrize("kwargs,match", [
    (dict(theta=[1.2], omega=[0.1]), "theta"),
    (dict(theta=[0.5, 0.4], omega=[0.1]), "same length"),
    (dict(theta=[np.nan], omega=[0.1]), "theta"),
])
def test_blt_bad_input(kwargs, match):
  with pytest.raises(ValueError, match=match):
    noise.BltNoise(**kwargs)


def test_banded_bad_input():
  with pytest.raises(ValueError, match="lower-triangular"):
    noise.BandedNoise(np.ones((3, 3)))
  with pytest.raises(ValueError, match="non-zero diagonal"):
    noise.BandedNoise(np.zeros((3, 3)))
  with pytest.raises(ValueError, match="bands"):
    noise.BandedNoise(reference.banded_dense(5, 3), bands=2)


class _FakeBlt:
  theta = reference.BLT_THETA
  omega = reference.BLT_OMEGA


class _FakeBanded:
  bands = 2

  def dense(self):
    return reference.banded_dense(4, 2)


def test_from_mechanism_adapts_objects_and_names():
  assert isinstance(noise.from_mechanism(_FakeBlt()), noise.BltNoise)
  assert noise.from_mechanism(_FakeBanded()).buffers == 1
  assert isinstance(noise.from_mechanism(reference.banded_dense(4, 2)), noise.BandedNoise)
  assert noise.from_mechanism("tree", rounds=9).buffers == 3
  assert noise.from_mechanism("dpsgd").buffers == 0
  with pytest.raises(ValueError, match="rounds"):
    noise.from_mechanism("tree")
  with pytest.raises(ValueError, match="tree_full"):
    noise.from_mechanism("tree_full")
  with pytest.raises(ValueError, match="mechanism"):
    noise.from_mechanism(3.5)


def test_from_mechanism_accepts_blt_module_objects():
  from dp_fl.mechanisms import blt  # pylint: disable=g-import-not-at-top
  params = blt.Blt(reference.BLT_THETA, reference.BLT_OMEGA)
  generator = noise.from_mechanism(params)
  np.testing.assert_array_equal(generator.theta, reference.BLT_THETA)
  # The BLT module's own coefficients agree with the reference C used throughout these tests.
  np.testing.assert_allclose(params.coef(6), reference.blt_dense(params.theta, params.omega, 6)[:, 0],
                             rtol=1e-12)


def test_from_mechanism_accepts_catalog_mechanisms():
  from dp_fl.mechanisms import blt  # pylint: disable=g-import-not-at-top
  from dp_fl.mechanisms import catalog  # pylint: disable=g-import-not-at-top
  params = blt.Blt(reference.BLT_THETA, reference.BLT_OMEGA)
  generator = noise.from_mechanism(catalog.BltMechanism(params))
  assert isinstance(generator, noise.BltNoise) and generator.buffers == 2
  assert isinstance(noise.from_mechanism(catalog.DpSgdMechanism()), noise.IdentityNoise)
  assert noise.from_mechanism(catalog.TreeMechanism(full=False), rounds=16).buffers == 4
  with pytest.raises(ValueError, match="tree_full"):
    noise.from_mechanism(catalog.TreeMechanism(full=True), rounds=16)
  # The streaming state size agrees with what the catalog reports (model copies).
  assert catalog.BltMechanism(params).state_model_copies(16) == generator.buffers


@pytest.mark.parametrize("preset", ["blt", "banded", "tree", "dpsgd"])
def test_agrees_with_mechanisms_streaming_reference(preset):
  # The NumPy streaming generators of dp_fl.mechanisms (the accounting's view of each
  # mechanism) and these TF ones must produce the same rows of C^{-1} Z from the same Z.
  from dp_fl.mechanisms import streaming  # pylint: disable=g-import-not-at-top
  n = 8
  c_banded = reference.banded_dense(n, 3)
  numpy_noise, tf_noise = {
      "blt": lambda: (streaming.BltStreamingNoise(reference.BLT_THETA, reference.BLT_OMEGA),
                      noise.BltNoise(reference.BLT_THETA, reference.BLT_OMEGA)),
      "banded": lambda: (streaming.BandedStreamingNoise(c_banded), noise.BandedNoise(c_banded)),
      "tree": lambda: (streaming.TreeStreamingNoise(), noise.TreeNoise(n)),
      "dpsgd": lambda: (streaming.IdentityStreamingNoise(), noise.IdentityNoise()),
  }[preset]()
  z, x = _stream(tf_noise, n)
  state = numpy_noise.init(SHAPE)
  for t in range(n):
    expected, state = numpy_noise.next(z[t], state)
    np.testing.assert_allclose(x[t], expected, rtol=1e-10, atol=1e-12, err_msg=f"round {t}")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
