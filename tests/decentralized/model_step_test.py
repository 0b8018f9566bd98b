"""The stacked, compiled worker step (paper 002) against a per-worker, per-example loop."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.decentralized import graphs
from dp_fl.decentralized import model_step
from dp_fl.decentralized import updates

M, K = 3, 5
ARCHITECTURES = {
    "mlp": model_step.mlp(16, 10, hidden=(12, 12)),
    "cnn": model_step.cnn((8, 8, 2), 10, channels=(3, 4)),
}


def _setup(architecture, seed=0):
  rng = np.random.default_rng(seed)
  # Distinct workers: the common initial model plus a per-worker perturbation.
  flat = model_step.init_params(architecture, M, seed)
  flat = (flat + 0.1 * rng.normal(size=flat.shape)).astype(np.float32)
  x = rng.normal(size=(M, K, architecture.input_size)).astype(np.float32)
  y = rng.integers(0, 10, size=(M, K)).astype(np.int32)
  mask = (rng.random((M, K)) < 0.7).astype(np.float32)
  return flat, x, y, mask


def _conv_reference(x, kernel, bias):
  """'same' 3×3 convolution by tf.nn.conv2d (the im2col version must equal it)."""
  return tf.nn.conv2d(x, kernel, strides=1, padding="SAME") + bias


def _reference_gradients(architecture, flat, x, y):
  """Per-example gradients one worker and one example at a time."""
  out = np.zeros((M, K, architecture.dimension))
  losses = np.zeros((M, K))
  for i in range(M):
    worker = [p[0] for p in model_step.unflatten(tf.constant(flat[i:i + 1]),
                                                 architecture.shapes)]
    for j in range(K):
      with tf.GradientTape() as tape:
        tape.watch(worker)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
            y[i, j:j + 1], architecture.logits(worker, x[i, j:j + 1]))[0]
      out[i, j] = np.concatenate([g.numpy().ravel() for g in tape.gradient(loss, worker)])
      losses[i, j] = loss.numpy()
  return out, losses


def test_im2col_convolution_and_pooling_equal_tensorflow_ops():
  rng = np.random.default_rng(3)
  x = tf.constant(rng.normal(size=(2, 8, 8, 3)), tf.float32)
  kernel = tf.constant(rng.normal(size=(3, 3, 3, 5)), tf.float32)
  bias = tf.constant(rng.normal(size=(5,)), tf.float32)
  np.testing.assert_allclose(model_step.conv3x3_same(x, kernel, bias).numpy(),
                             _conv_reference(x, kernel, bias).numpy(), atol=1e-5)
  np.testing.assert_allclose(model_step.max_pool_2x2(x).numpy(),
                             tf.nn.max_pool2d(x, 2, 2, "VALID").numpy())


@pytest.mark.parametrize("name,jit_compile", [("mlp", False), ("mlp", True), ("cnn", True)])
def test_one_compiled_step_equals_the_per_worker_loop(name, jit_compile):
  architecture = ARCHITECTURES[name]
  flat, x, y, mask = _setup(architecture)
  mixing = graphs.mixing_matrix("ring", M)
  l2, lr, clip, batch = 1e-2, 0.1, 0.5, 3.5
  step = model_step.make_train_step(architecture, clip_norm=clip, noise_multiplier=0.0,
                                    expected_batch_size=batch, loss_clip=2.0, l2=l2,
                                    jit_compile=jit_compile)
  new, clipped_losses, mean_losses = step(
      tf.constant(flat), tf.constant(x), tf.constant(y), tf.constant(mask),
      tf.constant(mixing, tf.float32), tf.constant(lr), tf.constant([1, 2]))
  grads, losses = _reference_gradients(architecture, flat, x, y)
  grads *= mask[..., None]  # examples the Poisson sample did not draw contribute nothing
  private = updates.private_gradients(grads, clip, 0.0, None, denominator=batch)
  decay = l2 * flat.astype(np.float64) * architecture.decay_mask()
  expected = updates.step(flat.astype(np.float64), private + decay, mixing, lr)
  np.testing.assert_allclose(new.numpy(), expected, atol=3e-6)
  np.testing.assert_allclose(clipped_losses.numpy(),
                             (np.clip(losses, 0, 2.0) * mask).sum(axis=1), rtol=1e-5)
  np.testing.assert_allclose(mean_losses.numpy(),
                             (losses * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1),
                             rtol=1e-5)


def test_noise_is_sigma_c_over_l_and_a_pure_function_of_the_seed():
  architecture = ARCHITECTURES["mlp"]
  flat, x, y, mask = _setup(architecture, 1)
  step = model_step.make_train_step(architecture, clip_norm=1.0, noise_multiplier=3.0,
                                    expected_batch_size=4.0, loss_clip=1.0, jit_compile=False)
  args = (tf.constant(flat), tf.constant(x), tf.constant(y), tf.constant(mask),
          tf.constant(np.eye(M), tf.float32), tf.constant(1.0))
  a = step(*args, tf.constant([3, 4]))[0]
  b = step(*args, tf.constant([3, 4]))[0]
  c = step(*args, tf.constant([5, 6]))[0]
  np.testing.assert_array_equal(a.numpy(), b.numpy())
  # Two draws differ by noise of std √2 σC / L per coordinate (the clipped part cancels).
  diff = (a - c).numpy()
  assert np.std(diff) == pytest.approx(np.sqrt(2) * 3.0 / 4.0, rel=0.1)


def test_evaluate_counts_each_workers_correct_predictions():
  architecture = ARCHITECTURES["cnn"]
  flat, x, y, _ = _setup(architecture, 2)
  losses, correct = model_step.make_evaluate(architecture)(
      tf.constant(flat), tf.constant(x[0]), tf.constant(y[0]))
  for i in range(M):
    params = [p[0] for p in model_step.unflatten(tf.constant(flat[i:i + 1]),
                                                 architecture.shapes)]
    logits = architecture.logits(params, x[0]).numpy()
    assert correct.numpy()[i] == np.sum(np.argmax(logits, axis=1) == y[0])
    expected = tf.nn.sparse_softmax_cross_entropy_with_logits(y[0], logits).numpy().sum()
    assert losses.numpy()[i] == pytest.approx(expected, rel=1e-5)


def test_bad_settings_fail_clearly():
  architecture = ARCHITECTURES["mlp"]
  common = dict(expected_batch_size=4.0, loss_clip=1.0)
  with pytest.raises(ValueError, match="clip_norm"):
    model_step.make_train_step(architecture, clip_norm=0.0, noise_multiplier=1.0, **common)
  with pytest.raises(ValueError, match="noise_multiplier"):
    model_step.make_train_step(architecture, clip_norm=1.0, noise_multiplier=-1.0, **common)
  with pytest.raises(ValueError, match="divisible by 4"):
    model_step.cnn((6, 6, 1), 10)


def test_evaluate_on_each_workers_own_chunk_equals_the_shared_evaluation_row_by_row():
  architecture = ARCHITECTURES["mlp"]
  flat, x, y, _ = _setup(architecture, 4)
  evaluate = model_step.make_evaluate(architecture)
  own_losses, own_correct = evaluate(tf.constant(flat), tf.constant(x), tf.constant(y))
  for i in range(M):
    losses, correct = evaluate(tf.constant(flat), tf.constant(x[i]), tf.constant(y[i]))
    assert own_losses.numpy()[i] == pytest.approx(losses.numpy()[i], rel=1e-6)
    assert own_correct.numpy()[i] == correct.numpy()[i]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
