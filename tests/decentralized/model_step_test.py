"""The stacked, compiled worker step (paper 002) against a per-worker, per-example loop."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.decentralized import graphs
from dp_fl.decentralized import model_step
from dp_fl.decentralized import updates

M, L, INPUT = 4, 6, 16
SHAPES = model_step.mlp_shapes(INPUT, [12, 12, 12], 10)


def _setup(seed=0):
  params = model_step.init_mlp(SHAPES, M, seed, same_init=False)
  flat = np.concatenate([p.reshape(M, -1) for p in params], axis=1)
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(M, L, INPUT)).astype(np.float32)
  y = rng.integers(0, 10, size=(M, L)).astype(np.int32)
  return params, flat, x, y


def _reference_gradients(params, x, y, l2):
  """Per-example gradients one worker and one example at a time."""
  out = np.zeros((M, L, sum(int(np.prod(s)) for s in SHAPES)))
  for i in range(M):
    worker = [tf.constant(p[i]) for p in params]
    for j in range(L):
      with tf.GradientTape() as tape:
        tape.watch(worker)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
            y[i, j:j + 1], model_step.mlp_logits(worker, x[i, j:j + 1]))[0]
        loss += 0.5 * l2 * sum(tf.reduce_sum(p * p) for p in worker[0::2])
      out[i, j] = np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, worker)])
  return out


@pytest.mark.parametrize("jit_compile", [False, True])
def test_one_compiled_step_equals_the_per_worker_loop(jit_compile):
  params, flat, x, y = _setup()
  mixing = graphs.mixing_matrix("ring", M)
  step = model_step.make_train_step(SHAPES, clip_norm=0.5, noise_multiplier=0.0, l2=1e-3,
                                    jit_compile=jit_compile)
  new, losses = step(tf.constant(flat), tf.constant(x), tf.constant(y),
                     tf.constant(mixing, tf.float32), tf.constant(0.1), tf.constant([1, 2]))
  expected = updates.step(
      flat.astype(np.float64),
      updates.private_gradients(_reference_gradients(params, x, y, 1e-3), 0.5, 0.0, None),
      mixing, 0.1)
  np.testing.assert_allclose(new.numpy(), expected, atol=2e-6)
  assert losses.shape == (M,) and np.all(np.isfinite(losses.numpy()))


def test_noise_is_sigma_c_over_l_and_a_pure_function_of_the_seed():
  _, flat, x, y = _setup(1)
  step = model_step.make_train_step(SHAPES, clip_norm=1.0, noise_multiplier=3.0,
                                    jit_compile=False)
  args = (tf.constant(flat), tf.constant(x), tf.constant(y), tf.constant(np.eye(M), tf.float32),
          tf.constant(1.0))
  a, _ = step(*args, tf.constant([3, 4]))
  b, _ = step(*args, tf.constant([3, 4]))
  c, _ = step(*args, tf.constant([5, 6]))
  np.testing.assert_array_equal(a.numpy(), b.numpy())
  # Two draws differ by noise of std √2 σC / L per coordinate (the clipped part cancels).
  diff = (a - c).numpy()
  assert np.std(diff) == pytest.approx(np.sqrt(2) * 3.0 / L, rel=0.1)


def test_bad_settings_fail_clearly():
  with pytest.raises(ValueError, match="clip_norm"):
    model_step.make_train_step(SHAPES, clip_norm=0.0, noise_multiplier=1.0)
  with pytest.raises(ValueError, match="noise_multiplier"):
    model_step.make_train_step(SHAPES, clip_norm=1.0, noise_multiplier=-1.0)
