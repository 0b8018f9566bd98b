"""cpSGD's protocol in NumPy (paper 000, Sec. 4.2–4.3) against dense brute force and theory."""

from __future__ import annotations

import fractions
import math

import numpy as np
import pytest
from scipy import linalg
from scipy import stats

from dp_fl.mechanisms import cpsgd


def test_walsh_hadamard_is_the_dense_sylvester_matrix():
  for d in (1, 2, 8, 64):
    x = np.random.default_rng(d).normal(size=(3, d))
    np.testing.assert_allclose(cpsgd.walsh_hadamard(x), x @ linalg.hadamard(d).T, atol=1e-9)
  with pytest.raises(ValueError, match="power-of-2"):
    cpsgd.walsh_hadamard(np.ones(6))


@pytest.mark.parametrize("d", [1, 5, 16, 1000])
def test_rotation_is_exactly_invertible_and_an_isometry(d):
  rng = np.random.default_rng(d)
  x = rng.normal(size=(4, d))
  signs = cpsgd.rademacher_signs(rng, d)
  assert signs.shape == (cpsgd.padded_dimension(d),) and set(np.unique(signs)) <= {-1.0, 1.0}
  y = cpsgd.rotate(x, signs)
  np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-12)
  np.testing.assert_allclose(cpsgd.unrotate(y, signs, d), x, atol=1e-12)
  dense = linalg.hadamard(signs.size) * signs / math.sqrt(signs.size)  # H A / √d'
  padded = np.pad(x, ((0, 0), (0, signs.size - d)))
  np.testing.assert_allclose(y, padded @ dense.T, atol=1e-10)


def test_quantization_is_unbiased():
  # Flake rate: each of the 3 coordinates' z-test fails with probability 1e-6 under the null
  # (|z| > 4.89), so the test flakes with probability < 3e-6.
  k, x_max, trials = 5, 1.0, 200_000
  x = np.array([-0.93, 0.1234, 0.71])
  rng = np.random.default_rng(0)
  levels = cpsgd.quantize(np.tile(x, (trials, 1)), k, x_max, rng)
  assert levels.min() >= 0 and levels.max() <= k - 1
  values = -x_max + levels * (2 * x_max / (k - 1))
  z = (values.mean(axis=0) - x) / (values.std(axis=0) / math.sqrt(trials))
  assert np.all(np.abs(z) < stats.norm.isf(0.5e-6))
  # Only the two neighbouring levels are used (Eq. 8).
  for j, v in enumerate(x):
    used = np.unique(values[:, j])
    assert used.size <= 2 and used.min() <= v <= used.max()


def test_quantization_clips_to_x_max_and_is_exact_on_levels():
  rng = np.random.default_rng(1)
  levels = cpsgd.quantize(np.array([-5.0, -1.0, 0.0, 1.0, 5.0]), 3, 1.0, rng)
  np.testing.assert_array_equal(levels, [0, 0, 1, 2, 2])


def test_zero_noise_decoding_is_exact_up_to_quantization():
  rng = np.random.default_rng(2)
  n, d = 50, 37
  x = cpsgd.clip_l2(rng.normal(size=(n, d)), 1.0)
  for k in (2, 16, 2 ** 20):
    protocol = cpsgd.Protocol(num_levels=k, num_trials=0, p=0.5,
                              x_max=cpsgd.rotated_x_max(1.0, n, d, 1e-9), clip_norm=1.0)
    err = np.sum((protocol.mean_estimate(x, rng) - x.mean(axis=0)) ** 2)
    assert err <= 4 * protocol.mse_bound(n, d)  # A generous multiple: one draw.
  assert err < 1e-11  # 2^20 levels: the mean to ~6 digits.


@pytest.mark.parametrize("rotate", [True, False])
def test_mean_squared_error_is_within_the_bound(rotate):
  rng = np.random.default_rng(3)
  n, d, k, m = 40, 64, 8, 30
  x = cpsgd.clip_l2(rng.normal(size=(n, d)), 1.0)
  x_max = cpsgd.rotated_x_max(1.0, n, d, 1e-6) if rotate else 1.0
  protocol = cpsgd.Protocol(k, m, 0.5, x_max, 1.0, rotate=rotate)
  errors = [np.sum((protocol.mean_estimate(x, rng) - x.mean(axis=0)) ** 2) for _ in range(200)]
  bound = protocol.mse_bound(n, d, 1e-6)
  assert np.mean(errors) <= bound
  # ... and the bound is not vacuous: the noise term alone is within a factor 2 of it.
  noise_only = d * x_max ** 2 * 4 * m * 0.25 / (n * (k - 1) ** 2)
  assert np.mean(errors) > 0.5 * noise_only


def test_rotation_helps_on_a_spiky_input():
  # Thm. 3 vs Thm. 4: one large coordinate forces X_max = D without rotation.
  rng = np.random.default_rng(4)
  n, d, k = 64, 256, 4
  x = np.zeros((n, d))
  x[:, 0] = 1.0
  plain = cpsgd.Protocol(k, 0, 0.5, 1.0, 1.0, rotate=False)
  rotated = cpsgd.Protocol(k, 0, 0.5, cpsgd.rotated_x_max(1.0, n, d, 1e-6), 1.0)
  err = {name: np.mean([np.sum((p.mean_estimate(x, rng) - x.mean(axis=0)) ** 2)
                        for _ in range(20)]) for name, p in (("plain", plain),
                                                             ("rotated", rotated))}
  assert err["rotated"] < 0.3 * err["plain"]


@pytest.mark.parametrize("n,k,m", [(1, 2, 0), (3, 16, 7), (1000, 64, 12345), (7, 2, 1)])
def test_the_secure_sum_never_wraps(n, k, m):
  bits = cpsgd.secure_sum_bits(n, k, m)
  assert n * (k - 1 + m) < 2 ** bits  # The largest possible sum fits ...
  assert bits == 1 or n * (k - 1 + m) >= 2 ** (bits - 1)  # ... with no bit to spare.
  # The protocol's decoded sum at the largest messages equals the exact one.
  protocol = cpsgd.Protocol(k, m, 0.999999, 1.0, 1.0, rotate=False)
  messages = np.full((n, 3), k - 1 + m)  # Every coordinate at its maximum.
  total = messages.sum(axis=0) % (2 ** bits)
  np.testing.assert_array_equal(total, messages.sum(axis=0))
  assert protocol.bits_per_coordinate == max(1, math.ceil(math.log2(k + m)))


def test_bits_per_coordinate_hold_every_message():
  assert cpsgd.bits_per_coordinate(2, 254) == 8      # values 0..255
  assert cpsgd.bits_per_coordinate(2, 255) == 9


def test_protocol_rejects_bad_parameters():
  with pytest.raises(ValueError, match="num_levels"):
    cpsgd.Protocol(1, 0, 0.5, 1.0, 1.0)
  with pytest.raises(ValueError, match="num_trials"):
    cpsgd.Protocol(2, -1, 0.5, 1.0, 1.0)
  with pytest.raises(ValueError, match="`p`"):
    cpsgd.Protocol(2, 1, 1.0, 1.0, 1.0)
  with pytest.raises(ValueError, match="x_max"):
    cpsgd.Protocol(2, 1, 0.5, 0.0, 1.0)


def _exact_squared_norm(vector) -> fractions.Fraction:
  return sum((fractions.Fraction(float(v)) ** 2 for v in np.ravel(vector)), fractions.Fraction(0))


def test_clip_l2_bound_holds_in_exact_arithmetic():
  # The sensitivities assume ‖X‖₂ <= D exactly. Scaling by D / (the rounded norm) leaves about
  # half of all clipped vectors a few ulps above D; a float32 norm, far more for crafted input
  # (one entry of 1 and many whose squares the float32 sum drops).
  rng = np.random.default_rng(0)
  cases = []
  for dtype in (np.float64, np.float32):
    for _ in range(60):
      d = int(rng.integers(1, 40))
      cases.append((rng.normal(size=d) * rng.uniform(1.0, 1e3), float(rng.uniform(0.1, 3.0)),
                    dtype))
    for size in (2 ** 10, 2 ** 12):
      crafted = np.full(size, math.sqrt(0.99 * 2.0 ** -24))
      crafted[0] = 1.0
      cases.append((crafted, 1.0, dtype))
  for vector, clip, dtype in cases:
    clipped = cpsgd.clip_l2(vector.astype(dtype)[None, :], clip)
    assert clipped.dtype == dtype
    assert _exact_squared_norm(clipped) <= fractions.Fraction(clip) ** 2, (len(vector), dtype)
  small = rng.normal(size=(3, 7)) * 0.01
  np.testing.assert_array_equal(cpsgd.clip_l2(small, 1.0), small)  # Below D: untouched.


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
