"""tasks.digits.model: sizes of paper 000's MLP, per-example gradients against finite
differences."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.digits import model


def test_paper_sizes():
  mlp = model.Mlp((64, *model.PAPER_HIDDEN_LAYERS, 10))
  assert mlp.dimension == 64 * 60 + 60 + 2 * (60 * 60 + 60) + 60 * 10 + 10 == 11830
  theta = mlp.init(np.random.default_rng(0))
  assert theta.shape == (11830,)
  assert [p.shape for p in mlp.unflatten(theta)] == [
      (64, 60), (60,), (60, 60), (60,), (60, 60), (60,), (60, 10), (10,)]


def test_per_example_gradients_match_finite_differences():
  rng = np.random.default_rng(3)
  mlp = model.Mlp((5, 4, 3, 3))
  theta = mlp.init(rng) + rng.normal(0, 0.1, mlp.dimension)  # Non-zero biases too.
  x = rng.normal(size=(4, 5))
  y = np.array([0, 2, 1, 2])
  grads = mlp.per_example_gradients(theta, x, y)
  assert grads.shape == (4, mlp.dimension)
  eps = 1e-6
  for i in range(4):
    numeric = np.empty(mlp.dimension)
    for j in range(mlp.dimension):
      step = np.zeros(mlp.dimension)
      step[j] = eps
      numeric[j] = (mlp.loss(theta + step, x[i:i + 1], y[i:i + 1])
                    - mlp.loss(theta - step, x[i:i + 1], y[i:i + 1])) / (2 * eps)
    np.testing.assert_allclose(grads[i], numeric, atol=1e-6, rtol=1e-5)
  # The mean of the per-example gradients is the batch gradient.
  np.testing.assert_allclose(grads.mean(0)[:3], [
      (mlp.loss(theta + np.eye(mlp.dimension)[j] * eps, x, y)
       - mlp.loss(theta - np.eye(mlp.dimension)[j] * eps, x, y)) / (2 * eps)
      for j in range(3)], atol=1e-6)


def test_bad_layer_sizes():
  with pytest.raises(ValueError, match="layer_sizes"):
    model.Mlp((64,))
  with pytest.raises(ValueError, match=r"layer_sizes\[1\]"):
    model.Mlp((64, 0, 10))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
