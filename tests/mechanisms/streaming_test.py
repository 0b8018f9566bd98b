"""Streaming noise against dense C⁻¹ Z (paper 004, Eq. 1 and Alg. 3)."""

from __future__ import annotations

import pickle

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import streaming
from dp_fl.mechanisms import tree
from tests.mechanisms import oracles

_SETTINGS = hypothesis.settings(derandomize=True, deadline=None, max_examples=30)


def online_tree_dense(n):
  """Row t covers rounds (t + 1 − 2^v, t + 1] (1-based), v = trailing zeros of t + 1."""
  out = np.zeros((n, n))
  for t in range(n):
    count = t + 1
    v = 0
    while count % (2 ** (v + 1)) == 0:
      v += 1
    out[t, count - 2 ** v:count] = 1.0
  return out


def random_banded(rng, n, bands):
  c = np.zeros((n, n))
  for j in range(bands):
    c += np.diag(rng.uniform(-0.5, 0.5, n - j) if j else rng.uniform(0.5, 1.5, n), -j)
  return c


@_SETTINGS
@hypothesis.given(n=st.integers(1, 40), d=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_blt_stream_equals_dense_inverse_times_z(n, d, seed):
  rng = np.random.default_rng(seed)
  theta = rng.uniform(0.05, 1.0, d)
  omega = rng.uniform(0.0, 1.0 / d, d)
  noise = streaming.BltStreamingNoise(theta, omega)
  z = rng.standard_normal((n, 3, 2))
  dense = oracles.dense_toeplitz(oracles.blt_coefficients(theta, omega, n))
  expected = np.einsum("ts,sij->tij", np.linalg.inv(dense), z)
  np.testing.assert_allclose(noise.stream(z), expected, rtol=1e-12, atol=1e-12)
  assert noise.buffers == d


def test_blt_stream_with_decays_next_to_one_matches_blt_module():
  # The optimal BLTs have decays within 1e-11 of 1 (paper 004, App. A).
  params = blt.PUBLISHED_BLTS[400]
  n = 300
  noise = streaming.BltStreamingNoise(params.theta, params.omega)
  inverse = noise.materialize(n)
  np.testing.assert_allclose(inverse[:, 0], params.inverse_coef(n), rtol=1e-10, atol=1e-13)
  dense = oracles.dense_toeplitz(oracles.blt_coefficients(params.theta, params.omega, n))
  np.testing.assert_allclose(inverse @ dense, np.eye(n), atol=1e-12)


@_SETTINGS
@hypothesis.given(n=st.integers(1, 30), bands=st.integers(1, 6), seed=st.integers(0, 10**6))
def test_banded_stream_equals_dense(n, bands, seed):
  rng = np.random.default_rng(seed)
  bands = min(bands, n)
  c = random_banded(rng, n, bands)
  noise = streaming.BandedStreamingNoise(c)
  assert noise.buffers == bands - 1
  z = rng.standard_normal((n, 4))
  np.testing.assert_allclose(noise.stream(z), np.linalg.solve(c, z), rtol=1e-10, atol=1e-12)


def test_banded_constructors_agree():
  # (c_matrix, bands=None), extra (zero) bands, and from_band_array give one recurrence.
  c = random_banded(np.random.default_rng(3), 9, 3)
  noise = streaming.BandedStreamingNoise(c)
  assert noise.bands == 3 and noise.max_rounds == 9
  wider = streaming.BandedStreamingNoise(c, bands=5)
  assert wider.bands == 5 and wider.buffers == 4
  again = streaming.BandedStreamingNoise.from_band_array(noise.band)
  np.testing.assert_array_equal(again.band, noise.band)
  z = np.random.default_rng(4).standard_normal((9, 2))
  np.testing.assert_array_equal(again.stream(z), noise.stream(z))
  np.testing.assert_allclose(wider.stream(z), noise.stream(z), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 16, 33, 64])
def test_tree_stream_equals_dense_online_tree(n):
  c = online_tree_dense(n)
  np.testing.assert_array_equal(c, tree.online_tree_matrix(n))
  bounded = streaming.TreeStreamingNoise(n)
  unbounded = streaming.TreeStreamingNoise()
  np.testing.assert_allclose(bounded.materialize(n) @ c, np.eye(n), atol=1e-12)
  np.testing.assert_array_equal(bounded.materialize(n), unbounded.materialize(n))
  assert bounded.buffers == int(np.floor(np.log2(n)))
  # B = A C⁻¹ is the binary counter: popcount(t + 1) nodes per prefix.
  b = np.tril(np.ones((n, n))) @ bounded.materialize(n)
  np.testing.assert_allclose(np.sum(b * b, axis=1), [bin(t + 1).count("1") for t in range(n)])


def test_identity_stream_is_z():
  z = np.random.default_rng(0).standard_normal((5, 3))
  noise = streaming.IdentityStreamingNoise()
  np.testing.assert_array_equal(noise.stream(z), z)
  assert noise.buffers == 0


@pytest.mark.parametrize("make", [
    lambda: streaming.BltStreamingNoise([0.9, 0.5], [0.3, 0.2]),
    lambda: streaming.BandedStreamingNoise(random_banded(np.random.default_rng(1), 12, 3)),
    lambda: streaming.TreeStreamingNoise(12),
    streaming.IdentityStreamingNoise,
])
def test_saved_state_resumes_the_exact_stream(make):
  noise = make()
  z = np.random.default_rng(2).standard_normal((12, 5))
  uninterrupted = noise.stream(z)
  state = noise.init((5,))
  for t in range(7):
    _, state = noise.next(z[t], state)
  state = pickle.loads(pickle.dumps(state))  # A checkpoint in a fresh process.
  resumed = make()
  for t in range(7, 12):
    row, state = resumed.next(z[t], state)
    np.testing.assert_array_equal(row, uninterrupted[t])


def test_next_does_not_modify_the_state_it_is_given():
  noise = streaming.TreeStreamingNoise(8)
  state = noise.init((2,))
  for t in range(3):
    _, state = noise.next(np.full(2, t + 1.0), state)
  before = state[1].copy()
  noise.next(np.ones(2), state)
  np.testing.assert_array_equal(state[1], before)


def test_bounded_generators_refuse_rounds_beyond_n():
  for noise in (streaming.BandedStreamingNoise(np.eye(3)), streaming.TreeStreamingNoise(3)):
    state = noise.init(())
    for _ in range(3):
      _, state = noise.next(np.float64(1.0), state)
    with pytest.raises(ValueError, match="beyond the 3 rounds"):
      noise.next(np.float64(1.0), state)


@pytest.mark.parametrize("args, match", [
    (([1.5], [0.1]), r"theta\[0\]"),
    (([0.0], [0.1]), r"theta\[0\]"),
    (([0.5], [-0.1]), r"omega\[0\]"),
    (([0.5, 0.4], [0.1]), "same length"),
    (([np.nan], [0.1]), "theta"),
])
def test_blt_bad_parameters(args, match):
  with pytest.raises(ValueError, match=match):
    streaming.BltStreamingNoise(*args)


def test_banded_bad_matrices_and_shapes():
  with pytest.raises(ValueError, match=r"lower-triangular.*c_matrix\[0, 1\]=1.0"):
    streaming.BandedStreamingNoise(np.ones((3, 3)))
  with pytest.raises(ValueError, match=r"non-zero diagonal.*c_matrix\[1, 1\]=0.0"):
    streaming.BandedStreamingNoise(np.diag([1.0, 0.0]))
  with pytest.raises(ValueError, match="square"):
    streaming.BandedStreamingNoise(np.ones((2, 3)))
  with pytest.raises(ValueError, match="needs bands >= 3; got bands=2"):
    streaming.BandedStreamingNoise(np.tril(np.ones((4, 4))) - np.tril(np.ones((4, 4)), -3),
                                   bands=2)
  with pytest.raises(ValueError, match="`bands` must be <= n=2"):
    streaming.BandedStreamingNoise(np.eye(2), bands=3)
  with pytest.raises(ValueError, match=r"`band\[t, j\]` must be 0 for t < j"):
    streaming.BandedStreamingNoise.from_band_array([[1.0, 0.5], [1.0, 0.2]])
  with pytest.raises(ValueError, match=r"`band\[:, 0\]`.*non-zero.*band\[1, 0\]=0.0"):
    streaming.BandedStreamingNoise.from_band_array([[1.0, 0.0], [0.0, 0.2]])
  noise = streaming.IdentityStreamingNoise()
  with pytest.raises(ValueError, match="shape"):
    noise.next(np.zeros(3), noise.init((2,)))
  with pytest.raises(ValueError, match="rounds"):
    _ = streaming.TreeStreamingNoise().buffers


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
