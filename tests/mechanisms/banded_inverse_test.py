"""Tests of dp_fl.mechanisms.banded_inverse (BISR and BandInvMF, C⁻¹ banded Toeplitz; Kalinin,
McKenna, Upadhyay & Lampert 2025): C·C⁻¹ = I and the NumPy stream, sensitivity against the
exhaustive maximum (exact where Thm 3.1's conditions hold, bracketed where they fail), errors,
the optimizer's gradient and result, JSON and validation. The TF stream and toy training runs:
tests/training/banded_inverse_mechanism_test.py."""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.mechanisms import banded_inverse
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from tests.mechanisms import oracles


def _mechanism(name, inverse_coef):
  return banded_inverse.BandedInverseMechanism(name, np.asarray(inverse_coef, np.float64))


# A catalogue: BISR bands, an optimized band, and hand-made bands whose C breaks Thm 3.1
# (oscillating, or with a negative coefficient).
_BANDS = {
    "bisr_1": banded_inverse.inverse_sqrt_a_coefficients(1),
    "bisr_2": banded_inverse.inverse_sqrt_a_coefficients(2),
    "bisr_5": banded_inverse.inverse_sqrt_a_coefficients(5),
    "last_band_heavy": np.array([1.0, -0.05, -0.1, -0.6]),  # c oscillates, stays >= 0.
    "signed": np.array([1.0, 0.4, -0.3]),  # c has negative entries.
    "scaled": np.array([2.0, -0.5]),
}


def test_inverse_square_root_is_a_to_the_minus_half():
  q = banded_inverse.inverse_sqrt_a_coefficients(12)
  root = oracles.dense_toeplitz(q, 12)
  np.testing.assert_allclose(np.linalg.inv(root @ root), np.tril(np.ones((12, 12))), atol=1e-12)
  assert q[0] == 1 and np.all(q[1:] < 0)


@pytest.mark.parametrize("family", sorted(_BANDS))
@pytest.mark.parametrize("n", [1, 4, 11])
def test_c_times_its_inverse_is_the_identity_and_the_stream_is_c_inverse(family, n):
  mechanism = _mechanism("bisr", _BANDS[family])
  c = oracles.dense_toeplitz(mechanism.coef(n), n)
  c_inverse = oracles.dense_toeplitz(mechanism.inverse_coef, n)
  np.testing.assert_allclose(c @ c_inverse, np.eye(n), atol=1e-12)
  spec = mechanism.streaming_noise(n)
  assert spec.buffers == mechanism.bands - 1 and spec.max_rounds is None
  np.testing.assert_allclose(spec.materialize(n), c_inverse, atol=1e-14)


@pytest.mark.parametrize("dense", [True, False])  # Long runs: the O(n log n) bound alone.
@pytest.mark.parametrize("family", sorted(_BANDS))
@pytest.mark.parametrize("n,b,k", [(7, 1, 7), (8, 2, 4), (9, 3, 3), (10, 4, 2), (6, 7, 1)])
def test_sensitivity_against_the_exhaustive_maximum(family, n, b, k, dense, monkeypatch):
  if not dense:
    monkeypatch.setattr(banded_inverse, "DENSE_SENSITIVITY_MAX_ROUNDS", 0)
  mechanism = _mechanism("bisr", _BANDS[family])
  sens = mechanism.sensitivity(n, b, k)
  dense = oracles.dense_toeplitz(mechanism.coef(n), n)
  truth = oracles.brute_force_sensitivity(dense, b, k)
  if sens.is_exact:
    assert sens.value == pytest.approx(truth, rel=1e-12)
  else:  # Remark 3.2 below (one pattern), the autocorrelation bound above.
    assert "Thm 3.1 does not apply" in sens.method
    assert sens.value <= truth * (1 + 1e-12)
  # The brute force searches signs only for short patterns: its value is a lower bound where
  # C's Gram has negative entries, so the guarantee must dominate it either way.
  assert sens.guaranteed >= truth * (1 - 1e-12)
  if family.startswith("bisr"):  # Renewal sequences of log-convex weights: Thm 3.1 holds.
    assert sens.is_exact


def test_the_upper_bound_is_never_below_the_truth_for_random_signed_c():
  rng = np.random.default_rng(7)
  for _ in range(40):
    n = int(rng.integers(2, 10))
    c = rng.normal(size=n)
    b = int(rng.integers(1, n + 1))
    k = int(rng.integers(1, 5))
    lower, upper = sensitivity_lib.toeplitz_sensitivity_bounds(c, b, k)
    dense = oracles.dense_toeplitz(c, n)
    exact = sensitivity_lib.upper_bound_sensitivity(dense, b, k)  # Any signs, valid above.
    pattern_max = oracles.brute_force_sensitivity(dense, b, k)
    assert lower <= pattern_max * (1 + 1e-12) and pattern_max <= upper * (1 + 1e-12)
    assert upper >= min(exact, pattern_max) * (1 - 1e-12)


def test_fft_autocorrelation_matches_the_direct_sum_and_never_undercuts_it(monkeypatch):
  c = np.random.default_rng(3).normal(size=300) * np.exp(-np.arange(300) / 40)
  direct = sensitivity_lib._abs_autocorrelation(c)  # pylint: disable=protected-access
  monkeypatch.setattr(sensitivity_lib, "_DIRECT_CORRELATION_MAX", 10)
  fft = sensitivity_lib._abs_autocorrelation(c)  # pylint: disable=protected-access
  assert np.all(fft >= direct) and np.allclose(fft, direct, rtol=0, atol=1e-9 * direct[0])


@pytest.mark.parametrize("family", ["bisr_5", "last_band_heavy", "signed"])
def test_errors_are_those_of_b_equals_a_c_inverse(family):
  n = 9
  mechanism = _mechanism("bisr", _BANDS[family])
  decoder = np.tril(np.ones((n, n))) @ oracles.dense_toeplitz(mechanism.inverse_coef, n)
  np.testing.assert_allclose(mechanism.per_query_squared_error(n), np.sum(decoder ** 2, axis=1),
                             rtol=1e-12)


@pytest.mark.parametrize("loss", ["max", "rms"])
def test_optimizer_gradient_matches_finite_differences(loss):
  params = np.array([0.3, 0.2, -0.4, 0.9])
  args = (40, 6, 5, loss)
  objective = banded_inverse._objective  # pylint: disable=protected-access
  value, gradient = objective(params, *args)
  assert np.isfinite(value)
  for i in range(params.size):
    step = np.zeros_like(params)
    step[i] = 1e-6
    numeric = (objective(params + step, *args)[0] - objective(params - step, *args)[0]) / 2e-6
    assert gradient[i] == pytest.approx(numeric, rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("loss", ["max", "rms"])
def test_bandinvmf_beats_bisr_and_reports_its_guarantee(loss):
  n, b, k, p = 240, 40, 6, 6
  bisr = catalog.evaluate(_mechanism("bisr", banded_inverse.inverse_sqrt_a_coefficients(p)),
                          n, b, k)
  optimized = banded_inverse.optimize_banded_inverse(n, b, k, p, loss)
  evaluation = catalog.evaluate(optimized, n, b, k)
  key = "max_loss" if loss == "max" else "rms_loss"
  assert getattr(evaluation, key) < 0.8 * getattr(bisr, key)
  assert optimized.setting == banded_inverse.BandedInverseSetting(n, b, k, loss)
  assert np.all(optimized.coef(n) >= 0)  # The search keeps C non-negative.
  sens = optimized.sensitivity(n, b, k)
  assert sens.guaranteed <= 1.01 * sens.value  # Where bracketed, tightly.
  restored = catalog.from_dict(optimized.to_dict())
  assert restored.to_dict() == optimized.to_dict()


def test_table3_setting():
  """Paper 004's Table 3 setting (n = 2052, b = 342, k = 6): BISR with p = b bands and a
  4-buffer BandInvMF (p = 5) against BLT d = 4 (10.73 / 9.63) and BandMF (10.21 / 8.60)."""
  bisr = catalog.build("bisr", rounds=2052, min_sep=342, max_participations=6).mechanism
  assert bisr.bands == 342
  evaluation = catalog.evaluate(bisr, 2052, 342, 6)
  assert evaluation.sensitivity_kind == "exact"
  assert 10.5 < evaluation.max_loss < 11.4 and 9.0 < evaluation.rms_loss < 10.2
  optimized = catalog.build("bandinvmf", rounds=2052, min_sep=342, max_participations=6,
                            bands=5, optimize_for="max").mechanism
  assert optimized.buffers(2052) == 4
  assert catalog.evaluate(optimized, 2052, 342, 6).max_loss < 13.5


@pytest.mark.parametrize("bad,match", [
    ({}, "'inverse_coef'"), ({"inverse_coef": []}, r"p >= 1"),
    ({"inverse_coef": [0.0, 1.0]}, "must be non-zero"),
    ({"inverse_coef": [1.0, float("nan")]}, "inverse_coef"),
    ({"inverse_coef": [1.0], "setting": {"rounds": 3}}, "exactly the keys"),
])
def test_bad_parameters_fail_clearly(bad, match):
  with pytest.raises(ValueError, match=match):
    catalog.from_dict({"mechanism": "bandinvmf", **bad})


def test_a_band_whose_inverse_overflows_is_refused_naming_the_file(tmp_path):
  path = tmp_path / "params.json"
  path.write_text('{"mechanism": "bisr", "inverse_coef": [1.0, -3.0]}')
  mechanism = catalog.load(str(path), "bisr")  # The band itself is valid...
  with pytest.raises(ValueError, match=r"overflows within n=2000 rounds.*root inside the unit"):
    mechanism.sensitivity(2000, 10, 3)  # ... but C = 1/(1 − 3x) grows as 3^t.
  path.write_text('{"mechanism": "bisr", "inverse_coef": [0.0, 1.0]}')
  with pytest.raises(ValueError, match=f"{path}.*must be non-zero"):
    catalog.load(str(path), "bisr")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
