"""The noise guard's ratios (issue #42) against a simulation of the noise they describe."""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.mechanisms import signal_to_noise as snr
from dp_fl.mechanisms import streaming


def _simulate(inverse, rates, momentum, sigma, m, d, zeta, trials, rng):
  """Norms of (one round's averaged-update noise, the summed noise, the model's noise) of
  SGD with momentum run on noise alone."""
  n = inverse.shape[0]
  rounds, sums, models = [], [], []
  for _ in range(trials):
    z = rng.standard_normal((n, d))
    noise = sigma * zeta * (inverse @ z) / m
    rounds.append(np.sqrt(np.mean(np.sum(noise ** 2, axis=1))))
    sums.append(np.linalg.norm(noise.sum(axis=0)))
    velocity, model = np.zeros(d), np.zeros(d)
    for t in range(n):  # TFF's sgdm: v = β v + g; w -= η v.
      velocity = momentum * velocity + noise[t]
      model -= rates[t] * velocity
    models.append(np.linalg.norm(model))
  return np.mean(rounds), np.mean(sums), np.mean(models)


@pytest.mark.parametrize("spec", [
    streaming.IdentityStreamingNoise(), streaming.TreeStreamingNoise(8),
    streaming.BltStreamingNoise([0.9, 0.3], [0.4, 0.1])])
def test_ratios_match_a_simulation_of_the_noise(spec):
  rng = np.random.default_rng(0)
  n, d, m, sigma, zeta = 8, 4000, 5.0, 0.7, 0.3
  inverse = spec.materialize(n)
  rates = [1.0] * 5 + [0.7, 0.4, 0.1]
  ratios = snr.signal_to_noise(inverse, rounds=n, noise_multiplier=sigma, clients_per_round=m,
                               model_dimension=d, learning_rates=rates, momentum=0.9,
                               initial_model_norm=2.0, clip_norm=zeta)
  round_norm, sum_norm, model_norm = _simulate(inverse, rates, 0.9, sigma, m, d, zeta, 20, rng)
  assert ratios.round_noise == pytest.approx(round_norm / zeta, rel=0.02)
  assert ratios.prefix_noise == pytest.approx(sum_norm / (n * zeta), rel=0.03)
  assert ratios.model_noise_norm == pytest.approx(model_norm, rel=0.03)
  assert ratios.model_noise == pytest.approx(model_norm / 2.0, rel=0.03)


def test_momentum_weights_and_input_checks():
  np.testing.assert_allclose(snr.momentum_weights([1.0, 1.0, 1.0], 0.5), [1.75, 1.5, 1.0])
  np.testing.assert_allclose(snr.momentum_weights([2.0, 1.0], 0.0), [2.0, 1.0])
  with pytest.raises(ValueError, match="momentum"):
    snr.momentum_weights([1.0], 1.0)
  with pytest.raises(ValueError, match="inverse"):
    snr.signal_to_noise(np.eye(3), rounds=4, noise_multiplier=1.0, clients_per_round=2,
                        model_dimension=10)
  none = snr.signal_to_noise(None, rounds=4, noise_multiplier=1.0, clients_per_round=2,
                             model_dimension=100)
  assert none.round_noise == pytest.approx(5.0) and none.model_noise is None
  # Correlated noise that cancels in the sum: C⁻¹ = I − shift (each z once, then taken back).
  cancelling = np.eye(4) - np.eye(4, k=-1)
  assert snr.signal_to_noise(cancelling, rounds=4, noise_multiplier=1.0, clients_per_round=2,
                             model_dimension=100).prefix_noise == pytest.approx(5.0 / 4)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
