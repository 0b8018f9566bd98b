"""The decentralized workers' models as one stacked computation (paper 002, Sec. 4).

Every parameter tensor carries the m workers along its first axis; one call of `train_step`
computes all workers' per-example gradients, privatizes them (per-example clipping to C, the sum
plus N(0, σ²C²), / L — DP-SGD, Sec. 2.3), and applies W ← A W − η G̃ (`updates.step`) with the
iteration's mixing matrix A — one XLA-compiled step, no Python loop over workers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from dp_fl import _checks


def mlp_shapes(input_size: int, hidden: Sequence[int], num_classes: int) -> list[tuple]:
  """Parameter shapes of the MLP input → hidden… (ReLU) → num_classes (paper 000/002 use three
  hidden layers of 60)."""
  sizes = [input_size, *hidden, num_classes]
  shapes = []
  for a, b in zip(sizes[:-1], sizes[1:]):
    shapes += [(a, b), (b,)]
  return shapes


def init_mlp(shapes: Sequence[tuple], num_workers: int, seed: int,
             same_init: bool = True) -> list[np.ndarray]:
  """Glorot-uniform weights, zero biases, stacked for m workers (one shared initial model by
  default, as decentralized SGD starts from a common point)."""
  rng = np.random.default_rng(seed)
  params = []
  for shape in shapes:
    if len(shape) == 2:
      limit = np.sqrt(6.0 / (shape[0] + shape[1]))
      draw = lambda: rng.uniform(-limit, limit, size=shape)
    else:
      draw = lambda: np.zeros(shape)
    if same_init:
      one = draw()
      params.append(np.repeat(one[None], num_workers, axis=0).astype(np.float32))
    else:
      params.append(np.stack([draw() for _ in range(num_workers)]).astype(np.float32))
  return params


def mlp_logits(params: Sequence[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
  """Logits of one worker's MLP (unstacked params) on x (…, input)."""
  h = x
  for index in range(0, len(params), 2):
    h = tf.matmul(h, params[index]) + params[index + 1]
    if index + 2 < len(params):
      h = tf.nn.relu(h)
  return h


def per_example_gradients(params: Sequence[tf.Tensor], x: tf.Tensor, y: tf.Tensor,
                          l2: float) -> tuple[tf.Tensor, tf.Tensor]:
  """((m, L, d) flat per-example gradients of cross-entropy + l2/2 ‖w‖², (m,) mean losses)
  for stacked params (m, …), x (m, L, input), y (m, L)."""

  def one_example(worker_params, xi, yi):
    with tf.GradientTape() as tape:
      tape.watch(worker_params)
      logits = mlp_logits(worker_params, xi[None])
      loss = tf.nn.sparse_softmax_cross_entropy_with_logits(yi[None], logits)[0]
      loss += 0.5 * l2 * tf.add_n([tf.reduce_sum(p * p) for p in worker_params[0::2]])
    grads = tape.gradient(loss, worker_params)
    return tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0), loss

  def one_worker(args):
    worker_params, xw, yw = args[:-2], args[-2], args[-1]
    grads, losses = tf.vectorized_map(
        lambda e: one_example(list(worker_params), e[0], e[1]), (xw, yw))
    return grads, tf.reduce_mean(losses)

  return tf.vectorized_map(one_worker, (*params, x, y))


def unflatten(flat: tf.Tensor, shapes: Sequence[tuple]) -> list[tf.Tensor]:
  """Stacked params (m, …) from flat rows (m, d)."""
  out, offset = [], 0
  for shape in shapes:
    size = int(np.prod(shape))
    out.append(tf.reshape(flat[:, offset:offset + size], [-1, *shape]))
    offset += size
  return out


def make_train_step(shapes: Sequence[tuple], *, clip_norm: float, noise_multiplier: float,
                    l2: float = 0.0, jit_compile: bool = True):
  """`step(W, x, y, mixing, learning_rate, seed) -> (W', losses)` for flat stacked W (m, d):
  per-example gradients, DP-SGD privatization per worker, W' = A W − η G̃ — one compiled call."""
  clip_norm = _checks.check_positive("clip_norm", clip_norm)
  sigma = _checks.check_nonnegative("noise_multiplier", noise_multiplier)

  @tf.function(jit_compile=jit_compile, reduce_retracing=True)
  def step(weights, x, y, mixing, learning_rate, seed):
    grads, losses = per_example_gradients(unflatten(weights, shapes), x, y, l2)
    norms = tf.norm(grads, axis=-1, keepdims=True)
    clipped = grads * tf.minimum(1.0, clip_norm / tf.maximum(norms, 1e-30))
    summed = tf.reduce_sum(clipped, axis=1)
    if sigma:
      summed += sigma * clip_norm * tf.random.stateless_normal(tf.shape(summed), seed,
                                                               dtype=summed.dtype)
    private = summed / tf.cast(tf.shape(x)[1], summed.dtype)
    return tf.matmul(mixing, weights) - learning_rate * private, losses

  return step
