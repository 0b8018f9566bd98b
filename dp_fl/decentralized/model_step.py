"""The decentralized workers' models as one stacked computation (paper 002, Sec. 4).

Every parameter tensor carries the m workers along its first axis; one call of `train_step`
computes all workers' per-example gradients, privatizes them (DP-SGD, Sec. 2.3: per-example
clipping to C, the masked sum over the worker's Poisson batch plus N(0, σ²C²), divided by the
expected batch size L), adds the weight decay λw (L2 regularization, Sec. 2.2 — data
independent, so outside the clipped part) and applies W ← A W − η (G̃ + λW) with the
iteration's mixing matrix A (`updates.step`) — one XLA-compiled step, no Python loop over
workers.

Two architectures (Sec. 4: "a 3-layer MLP and 3-layer CNN"):

* `mlp`: input → 60 → 60 (ReLU) → classes (three weight layers);
* `cnn`: conv 3×3 (16) → ReLU → max-pool 2 → conv 3×3 (32) → ReLU → max-pool 2 → dense.
  The convolutions are written as nine shifted slices and one einsum (im2col), so per-example
  gradients of all workers vectorize (`tf.vectorized_map`) with each worker's own kernels and
  compile with XLA on any device.

The step also returns each worker's sum of per-example losses clipped to [0, B] over its
batch: LEASGD ranks workers by training loss (Sec. 2.2), and that ranking is a release about
the workers' data — the caller adds N(0, σ_ℓ²B²) before using it (`training.py`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from dp_fl import _checks

# Paper 002 does not give the layer widths; these are small enough for 2 CPU cores.
MLP_HIDDEN = (60, 60)
CNN_CHANNELS = (16, 32)


@dataclasses.dataclass(frozen=True)
class Architecture:
  """A model as its parameter shapes and the logits of one worker's (unstacked) parameters.

  Attributes:
    name: "mlp" or "cnn".
    shapes: parameter shapes, kernels and biases alternating (kernels at even positions).
    logits: (params, x (B, input_size)) -> (B, num_classes).
    input_size: features per example (flattened image, height·width·channels, HWC order).
  """
  name: str
  shapes: tuple[tuple[int, ...], ...]
  logits: Callable[[Sequence[tf.Tensor], tf.Tensor], tf.Tensor]
  input_size: int

  @property
  def dimension(self) -> int:
    return sum(int(np.prod(s)) for s in self.shapes)

  def decay_mask(self) -> np.ndarray:
    """(d,) 1 on kernel coordinates, 0 on biases: what L2 regularization decays."""
    return np.concatenate([np.full(int(np.prod(s)), 1.0 - index % 2, np.float32)
                           for index, s in enumerate(self.shapes)])


def mlp_shapes(input_size: int, hidden: Sequence[int], num_classes: int) -> list[tuple]:
  """Parameter shapes of the MLP input → hidden… (ReLU) → num_classes."""
  sizes = [input_size, *hidden, num_classes]
  shapes = []
  for a, b in zip(sizes[:-1], sizes[1:]):
    shapes += [(a, b), (b,)]
  return shapes


def mlp_logits(params: Sequence[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
  """Logits of one worker's MLP (unstacked params) on x (…, input)."""
  h = x
  for index in range(0, len(params), 2):
    h = tf.matmul(h, params[index]) + params[index + 1]
    if index + 2 < len(params):
      h = tf.nn.relu(h)
  return h


def mlp(input_size: int, num_classes: int, hidden: Sequence[int] = MLP_HIDDEN) -> Architecture:
  return Architecture("mlp", tuple(mlp_shapes(input_size, hidden, num_classes)), mlp_logits,
                      input_size)


def conv3x3_same(x: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
  """Stride-1 'same' 3×3 convolution of x (B, H, W, C) as im2col: nine shifted slices of the
  zero-padded input and one einsum with the kernel (3, 3, C, F)."""
  height, width = x.shape[1], x.shape[2]
  padded = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
  patches = tf.stack([padded[:, i:i + height, j:j + width, :]
                      for i in range(3) for j in range(3)], axis=3)
  flat_kernel = tf.reshape(kernel, [9, kernel.shape[2], kernel.shape[3]])
  return tf.einsum("bhwkc,kcf->bhwf", patches, flat_kernel) + bias


def max_pool_2x2(x: tf.Tensor) -> tf.Tensor:
  """2×2 max-pooling with stride 2 of x (B, H, W, F), H and W even."""
  _, height, width, channels = x.shape
  blocks = tf.reshape(x, [-1, height // 2, 2, width // 2, 2, channels])
  return tf.reduce_max(blocks, axis=[2, 4])


def cnn(image_shape: Sequence[int], num_classes: int,
        channels: Sequence[int] = CNN_CHANNELS) -> Architecture:
  """conv 3×3 → ReLU → pool 2 → conv 3×3 → ReLU → pool 2 → dense (image_shape (H, W, C))."""
  height, width, depth = (int(v) for v in image_shape)
  if height % 4 or width % 4:
    raise ValueError(f"the CNN pools twice by 2, so images must have height and width "
                     f"divisible by 4; got {height}x{width}. Use --model=mlp.")
  c1, c2 = (int(c) for c in channels)
  flat = (height // 4) * (width // 4) * c2
  shapes = ((3, 3, depth, c1), (c1,), (3, 3, c1, c2), (c2,), (flat, num_classes),
            (num_classes,))

  def logits(params, x):
    h = tf.reshape(x, [-1, height, width, depth])
    h = max_pool_2x2(tf.nn.relu(conv3x3_same(h, params[0], params[1])))
    h = max_pool_2x2(tf.nn.relu(conv3x3_same(h, params[2], params[3])))
    return tf.matmul(tf.reshape(h, [-1, flat]), params[4]) + params[5]

  return Architecture("cnn", shapes, logits, height * width * depth)


def init_params(architecture: Architecture, num_workers: int, seed: int) -> np.ndarray:
  """Flat stacked parameters (m, d): Glorot-uniform kernels, zero biases, one common initial
  model for all workers (decentralized SGD starts from a shared point)."""
  rng = np.random.default_rng(seed)
  parts = []
  for index, shape in enumerate(architecture.shapes):
    if index % 2:
      parts.append(np.zeros(int(np.prod(shape))))
      continue
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    limit = math.sqrt(6.0 / (receptive * (shape[-2] + shape[-1])))
    parts.append(rng.uniform(-limit, limit, size=int(np.prod(shape))))
  one = np.concatenate(parts).astype(np.float32)
  return np.repeat(one[None], _checks.check_positive_int("num_workers", num_workers), axis=0)


def unflatten(flat: tf.Tensor, shapes: Sequence[tuple]) -> list[tf.Tensor]:
  """Stacked params (m, …) from flat rows (m, d)."""
  out, offset = [], 0
  for shape in shapes:
    size = int(np.prod(shape))
    out.append(tf.reshape(flat[:, offset:offset + size], [-1, *shape]))
    offset += size
  return out


def per_example_gradients(architecture: Architecture, params: Sequence[tf.Tensor],
                          x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """((m, K, d) flat per-example gradients of the cross-entropy, (m, K) per-example losses)
  for stacked params (m, …), x (m, K, input), y (m, K)."""

  def one_example(worker_params, xi, yi):
    with tf.GradientTape() as tape:
      tape.watch(worker_params)
      logits = architecture.logits(worker_params, xi[None])
      loss = tf.nn.sparse_softmax_cross_entropy_with_logits(yi[None], logits)[0]
    grads = tape.gradient(loss, worker_params)
    return tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0), loss

  def one_worker(args):
    worker_params, xw, yw = list(args[:-2]), args[-2], args[-1]
    return tf.vectorized_map(lambda e: one_example(worker_params, e[0], e[1]), (xw, yw))

  return tf.vectorized_map(one_worker, (*params, x, y))


def make_train_step(architecture: Architecture, *, clip_norm: Optional[float],
                    noise_multiplier: float,
                    expected_batch_size: float, loss_clip: float, l2: float = 0.0,
                    jit_compile: bool = True):
  """`step(W, x, y, mask, mixing, learning_rate, seed) -> (W', clipped_loss_sums, losses)`.

  W (m, d) flat stacked parameters; x (m, K, input), y (m, K) each worker's batch padded to a
  capacity K, `mask` (m, K) 1 on the examples the worker's Poisson sample drew; `mixing` A
  (m, m); `seed` the iteration's stateless noise seed (2,). Per worker: g̃ = (Σ_j mask_j
  clip_C(∇ℓ_j) + N(0, σ²C²)) / L, then W' = A W − η (G̃ + λ W ⊙ kernels). Returns W', the
  masked sums of per-example losses clipped to [0, `loss_clip`] (m,), and the masked mean
  losses (m,) — the latter a diagnostic of the simulation, never given to the workers.
  `clip_norm` None: no clipping (the non-private setting; σ must be 0).
  """
  sigma = _checks.check_nonnegative("noise_multiplier", noise_multiplier)
  if clip_norm is None:
    if sigma:
      raise ValueError("noise without clipping has no sensitivity to calibrate to; give "
                       "clip_norm with noise_multiplier > 0.")
  else:
    clip_norm = _checks.check_positive("clip_norm", clip_norm)
  denominator = _checks.check_positive("expected_batch_size", expected_batch_size)
  loss_clip = _checks.check_positive("loss_clip", loss_clip)
  l2 = _checks.check_nonnegative("l2", l2)
  decay = tf.constant(architecture.decay_mask())

  @tf.function(jit_compile=jit_compile, reduce_retracing=True)
  def step(weights, x, y, mask, mixing, learning_rate, seed):
    grads, losses = per_example_gradients(
        architecture, unflatten(weights, architecture.shapes), x, y)
    scale = mask[..., None]
    if clip_norm is not None:
      norms = tf.norm(grads, axis=-1, keepdims=True)
      scale *= tf.minimum(1.0, clip_norm / tf.maximum(norms, 1e-30))
    summed = tf.reduce_sum(grads * scale, axis=1)
    if sigma:
      summed += sigma * clip_norm * tf.random.stateless_normal(tf.shape(summed), seed,
                                                               dtype=summed.dtype)
    update = summed / denominator + l2 * weights * decay
    clipped_losses = tf.reduce_sum(tf.clip_by_value(losses, 0.0, loss_clip) * mask, axis=1)
    mean_losses = (tf.reduce_sum(losses * mask, axis=1)
                   / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0))
    return tf.matmul(mixing, weights) - learning_rate * update, clipped_losses, mean_losses

  return step


def make_evaluate(architecture: Architecture, jit_compile: bool = True):
  """`evaluate(W, x, y) -> (loss sums (m,), correct counts (m,))` of every worker's model on
  one chunk of examples: x (N, input), y (N,) shared by all workers, or x (m, N, input),
  y (m, N) one chunk per worker (each worker on its own shard)."""

  def one_worker(flat, x, y):
    params = [p[0] for p in unflatten(flat[None], architecture.shapes)]
    logits = architecture.logits(params, x)
    loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    predicted = tf.argmax(logits, axis=-1, output_type=y.dtype)
    return loss, tf.reduce_sum(tf.cast(tf.equal(predicted, y), tf.float32))

  signature = (tf.float32, tf.float32)

  @tf.function(jit_compile=jit_compile, reduce_retracing=True)
  def shared(weights, x, y):
    return tf.map_fn(lambda w: one_worker(w, x, y), weights, fn_output_signature=signature)

  @tf.function(jit_compile=jit_compile, reduce_retracing=True)
  def own(weights, x, y):
    return tf.map_fn(lambda e: one_worker(*e), (weights, x, y), fn_output_signature=signature)

  def evaluate(weights, x, y):
    return (shared if len(x.shape) == 2 else own)(weights, x, y)

  return evaluate
