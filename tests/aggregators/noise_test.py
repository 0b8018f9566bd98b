"""The TF streaming noise generators against dense C^{-1} Z (paper 004, Eq. 1) and their specs."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.aggregators import dp_ftrl
from dp_fl.aggregators import noise
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import streaming
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


def _blt_spec(theta=reference.BLT_THETA, omega=reference.BLT_OMEGA):
  return streaming.BltStreamingNoise(theta, omega)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_blt_matches_dense_inverse(n):
  z, x = _stream(noise.BltNoise(_blt_spec()), n)
  c = reference.blt_dense(reference.BLT_THETA, reference.BLT_OMEGA, n)
  np.testing.assert_allclose(x, reference.dense_inverse_noise(c, z), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n,bands", [(1, 1), (6, 1), (6, 2), (9, 3), (5, 5)])
def test_banded_matches_dense_inverse(n, bands):
  c = reference.banded_dense(n, bands)
  generator = noise.BandedNoise(streaming.BandedStreamingNoise(c))
  assert generator.buffers == bands - 1 and generator.max_rounds == n
  z, x = _stream(generator, n)
  np.testing.assert_allclose(x, reference.dense_inverse_noise(c, z), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 11, 16])
def test_tree_matches_dense_inverse(n):
  generator = noise.TreeNoise(streaming.TreeStreamingNoise(n))
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
  z, x = _stream(noise.IdentityNoise(streaming.IdentityStreamingNoise()), 4)
  np.testing.assert_array_equal(x, z)


def test_standard_normal_depends_on_seed_and_round_only():
  seed = tf.constant([1, 2], tf.int64)
  a = noise.standard_normal(seed, tf.constant(3, tf.int64), [SPEC, SPEC])
  b = noise.standard_normal(seed, tf.constant(3, tf.int64), [SPEC, SPEC])
  c = noise.standard_normal(seed, tf.constant(4, tf.int64), [SPEC, SPEC])
  np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())
  assert not np.allclose(a[0].numpy(), a[1].numpy())  # Tensors get independent noise.
  assert not np.allclose(a[0].numpy(), c[0].numpy())  # Rounds get independent noise.


@pytest.mark.parametrize("spec", [
    streaming.BandedStreamingNoise(reference.banded_dense(3, 2)),
    streaming.TreeStreamingNoise(4),
])
def test_refuses_rounds_beyond_n(spec):
  generator = noise.from_spec(spec)
  buffer = generator.initial_buffer(SPEC)
  z = tf.zeros(SHAPE, tf.float64)
  with pytest.raises(tf.errors.InvalidArgumentError, match="not defined beyond"):
    generator.step(z, buffer, tf.constant(generator.max_rounds, tf.int64))


# ---------------------------------------------------------------------------
# The NumPy specs of dp_fl.mechanisms.streaming are the reference: the TF generator built
# from a spec streams the same rows of C^{-1} Z from the same Z (float64, to rounding).

_REFERENCE_SPECS = {
    "blt": lambda: _blt_spec(),
    # Decays within 1e-11 of 1, as optimized BLTs have (paper 004, App. A).
    "blt_published": lambda: streaming.BltStreamingNoise(blt.PUBLISHED_BLTS[400].theta,
                                                         blt.PUBLISHED_BLTS[400].omega),
    "banded": lambda: streaming.BandedStreamingNoise(reference.banded_dense(24, 4)),
    "banded_one_band": lambda: streaming.BandedStreamingNoise(reference.banded_dense(24, 1)),
    "banded_from_band_array": lambda: streaming.BandedStreamingNoise.from_band_array(
        streaming.BandedStreamingNoise(reference.banded_dense(24, 3), bands=5).band),
    "tree": lambda: streaming.TreeStreamingNoise(24),
    "tree_power_of_two": lambda: streaming.TreeStreamingNoise(16),
    "dpsgd": streaming.IdentityStreamingNoise,
    "banded_inverse": lambda: streaming.BandedInverseStreamingNoise(
        [1.0, -0.5, -0.125, -0.0625]),
    "banded_inverse_one_band": lambda: streaming.BandedInverseStreamingNoise([0.7]),
}


@pytest.mark.parametrize("family", sorted(_REFERENCE_SPECS))
def test_tf_generator_equals_its_numpy_spec(family):
  spec = _REFERENCE_SPECS[family]()
  generator = noise.from_spec(spec)
  assert type(generator).spec_type is type(spec) and generator.spec is spec
  assert (generator.name, generator.buffers, generator.max_rounds) == (
      spec.name, spec.buffers, spec.max_rounds)
  n = spec.max_rounds or 24
  z, x = _stream(generator, n)
  np.testing.assert_allclose(x, spec.stream(z), rtol=1e-12, atol=1e-12)


def _error(make) -> str:
  with pytest.raises(ValueError) as info:
    make()
  return str(info.value)


_COMMON = dict(clip_norm=1.0, noise_multiplier=1.0, clients_per_round=1)
_LOWER = np.array([[1.0, 0.0], [0.5, 1.0]])


@pytest.mark.parametrize("numpy_path,tf_path,match", [
    (lambda: streaming.BltStreamingNoise([0.5, 0.9], [0.1, -0.2]),
     lambda: dp_ftrl.DPFTRLFactory.blt([0.5, 0.9], [0.1, -0.2], **_COMMON),
     r"`omega\[1\]` must be a finite number >= 0"),
    (lambda: streaming.BltStreamingNoise([1.2], [0.1]),
     lambda: dp_ftrl.DPFTRLFactory.blt([1.2], [0.1], **_COMMON),
     r"`theta\[0\]` must be in \(0, 1\]"),
    (lambda: streaming.BltStreamingNoise([0.0], [0.1]),
     lambda: dp_ftrl.DPFTRLFactory.blt([0.0], [0.1], **_COMMON),
     r"`theta\[0\]` must be in \(0, 1\]"),
    (lambda: streaming.BltStreamingNoise([0.5, 0.4], [0.1]),
     lambda: dp_ftrl.DPFTRLFactory.blt([0.5, 0.4], [0.1], **_COMMON),
     "same length"),
    (lambda: streaming.BandedStreamingNoise(_LOWER.T),
     lambda: dp_ftrl.DPFTRLFactory.banded(_LOWER.T, **_COMMON),
     "lower-triangular"),
    (lambda: streaming.BandedStreamingNoise(np.diag([1.0, 0.0])),
     lambda: dp_ftrl.DPFTRLFactory.banded(np.diag([1.0, 0.0]), **_COMMON),
     "non-zero diagonal"),
    (lambda: streaming.TreeStreamingNoise(0),
     lambda: dp_ftrl.DPFTRLFactory.tree(rounds=0, **_COMMON),
     "`rounds` must be a positive integer"),
])
def test_invalid_parameters_raise_the_same_error_through_numpy_and_tf(numpy_path, tf_path,
                                                                      match):
  # One validation: the spec's. The TF path only ever builds a spec.
  message = _error(numpy_path)
  assert re.search(match, message)
  assert _error(tf_path) == message


def test_tf_generators_take_only_their_spec():
  with pytest.raises(ValueError, match=r"streaming\.BltStreamingNoise.*got tuple"):
    noise.BltNoise(reference.BLT_THETA)
  with pytest.raises(ValueError, match=r"streaming\.BandedStreamingNoise.*got ndarray"):
    noise.BandedNoise(reference.banded_dense(3, 2))
  with pytest.raises(ValueError, match=r"streaming\.BltStreamingNoise.*IdentityStreamingNoise"):
    noise.BltNoise(streaming.IdentityStreamingNoise())
  with pytest.raises(ValueError, match="TreeStreamingNoise\\(rounds=n\\)"):
    noise.TreeNoise(streaming.TreeStreamingNoise())  # TF needs a fixed state size.


def test_from_spec_maps_each_spec_type_to_its_generator():
  expected = {streaming.BltStreamingNoise: noise.BltNoise,
              streaming.BandedStreamingNoise: noise.BandedNoise,
              streaming.TreeStreamingNoise: noise.TreeNoise,
              streaming.IdentityStreamingNoise: noise.IdentityNoise,
              streaming.BandedInverseStreamingNoise: noise.BandedInverseNoise}
  for family, make in _REFERENCE_SPECS.items():
    spec = make()
    assert type(noise.from_spec(spec)) is expected[type(spec)], family

  class _Unknown(streaming.StreamingNoise):
    buffers = 0

    def _step(self, z, state_buffers, t):
      return z, state_buffers

  with pytest.raises(ValueError, match=r"noise specs.*BltStreamingNoise.*got _Unknown"):
    noise.from_spec(_Unknown())


def test_from_mechanism_accepts_tf_generators_specs_and_catalog_mechanisms():
  generator = noise.BltNoise(_blt_spec())
  assert noise.from_mechanism(generator) is generator
  spec = _blt_spec()
  assert noise.from_mechanism(spec).spec is spec
  params = blt.Blt(reference.BLT_THETA, reference.BLT_OMEGA)
  from_catalog = noise.from_mechanism(catalog.BltMechanism(params))
  assert isinstance(from_catalog, noise.BltNoise) and from_catalog.buffers == 2
  np.testing.assert_array_equal(from_catalog.spec.theta, reference.BLT_THETA)
  # The catalog reports the same state size (model copies) as the generator holds.
  assert catalog.BltMechanism(params).buffers(16) == from_catalog.buffers
  assert isinstance(noise.from_mechanism(catalog.DpSgdMechanism()), noise.IdentityNoise)
  tree = noise.from_mechanism(catalog.TreeMechanism(full=False), rounds=16)
  assert tree.buffers == 4 and tree.max_rounds == 16
  with pytest.raises(ValueError, match="rounds"):
    noise.from_mechanism(catalog.TreeMechanism(full=False))
  with pytest.raises(ValueError, match="tree_full"):
    noise.from_mechanism(catalog.TreeMechanism(full=True), rounds=16)
  # The BLT module's own coefficients agree with the reference C used throughout these tests.
  np.testing.assert_allclose(params.coef(6),
                             reference.blt_dense(params.theta, params.omega, 6)[:, 0], rtol=1e-12)


@pytest.mark.parametrize("other", [
    blt.Blt(reference.BLT_THETA, reference.BLT_OMEGA),  # Use catalog.BltMechanism(...).
    reference.banded_dense(4, 2),  # Use streaming.BandedStreamingNoise(c).
    "tree",  # No dispatch on names: use catalog.TreeMechanism or a spec.
    3.5,
])
def test_from_mechanism_refuses_anything_else_and_lists_what_it_accepts(other):
  with pytest.raises(ValueError, match=(r"catalog\.Mechanism.*streaming\.StreamingNoise spec"
                                        r".*noise\.StreamingNoise")):
    noise.from_mechanism(other)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
