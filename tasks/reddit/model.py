"""The Reddit language model of paper 001 App. B, its loss, metric and embedding projection.

Word s_t -> embedding e_t in R^96 (a row of E, the [V + 4, 96] embedding matrix; the id
layout is `tasks.reddit.data.TokenIds`) -> LSTM with a 256-dim state -> dense projection to
the 96-dim output embedding o_t -> logits E o_t (inner products with the SAME, tied,
embedding matrix; no output bias) -> softmax. The rows of E are kept at unit L2 norm: they
are initialized so, and `project_weights` renormalizes them after each server update.

Trainable parameters at V = 10,000 (V + 4 = 10,004 rows: words, UNK, BOS, EOS and pad):

    embedding (tied)  10,004 x 96                 =   960,384
    LSTM              4 x 256 x (96 + 256 + 1)    =   361,472
    projection        256 x 96 + 96               =    24,672
    total                                         = 1,346,528

which is the paper's "1.35M trainable parameters" (0.26 % below 1.35M). The output layer
adds none, since it reuses E.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tensorflow as tf

from dp_fl import _checks
from tasks.reddit import data
from tasks.stackoverflow import model as so_model

PAPER_EMBEDDING_SIZE = 96
PAPER_LSTM_SIZE = 256
PAPER_NUM_TRAINABLE_PARAMETERS = 1_346_528  # At vocab_size 10,000.
EMBEDDING_INDEX = 0  # Position of E in `model.trainable_weights`.


def num_trainable_parameters(vocab_size: int = data.PAPER_VOCAB_SIZE, *,
                             embedding_size: int = PAPER_EMBEDDING_SIZE,
                             lstm_size: int = PAPER_LSTM_SIZE) -> int:
  """The trainable parameter count of `build_model`, in closed form (module docstring)."""
  classes = data.token_ids(vocab_size).num_classes
  d = _checks.check_positive_int("embedding_size", embedding_size)
  h = _checks.check_positive_int("lstm_size", lstm_size)
  return classes * d + 4 * h * (d + h + 1) + h * d + d


class TiedSoftmaxLogits(tf.keras.layers.Layer):
  """Logits o_t . E^T against the embedding matrix of an `Embedding` layer (no weights)."""

  def __init__(self, embedding: tf.keras.layers.Embedding, **kwargs):
    super().__init__(**kwargs)
    self._embedding = embedding

  def call(self, inputs):
    return tf.einsum("btd,vd->btv", inputs, self._embedding.embeddings)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
  norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
  return np.where(norms > 0, matrix / np.where(norms > 0, norms, 1), matrix)


class _UnitRows(tf.keras.initializers.Initializer):
  """Rows of `base`'s draw scaled to unit L2 norm (graph-safe: TFF traces the model)."""

  def __init__(self, base):
    self._base = base

  def __call__(self, shape, dtype=None, **kwargs):
    return tf.math.l2_normalize(self._base(shape, dtype=dtype), axis=-1)


def build_model(vocab_size: int = data.PAPER_VOCAB_SIZE, *, seed: int = 0,
                embedding_size: int = PAPER_EMBEDDING_SIZE,
                lstm_size: int = PAPER_LSTM_SIZE) -> tf.keras.Model:
  """The uncompiled Keras model: int ids [batch, time] -> logits [batch, time, V + 4].

  Weights are drawn from Keras initializers seeded by `seed` (so the same seed gives the
  same model), then the embedding rows are set to unit norm. The embedding is
  `trainable_weights[EMBEDDING_INDEX]`.
  """
  classes = data.token_ids(vocab_size).num_classes
  seed = _checks.check_nonnegative_int("seed", seed)
  d = _checks.check_positive_int("embedding_size", embedding_size)
  h = _checks.check_positive_int("lstm_size", lstm_size)
  inputs = tf.keras.Input(shape=(None,), dtype=tf.int64, name="ids")
  embedding = tf.keras.layers.Embedding(
      classes, d, embeddings_initializer=_UnitRows(tf.keras.initializers.RandomNormal(seed=seed)),
      name="embedding")
  x = embedding(inputs)
  x = tf.keras.layers.LSTM(
      h, return_sequences=True, name="lstm",
      kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + 1),
      recurrent_initializer=tf.keras.initializers.Orthogonal(seed=seed + 2))(x)
  x = tf.keras.layers.Dense(
      d, name="output_embedding",
      kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + 3))(x)
  logits = TiedSoftmaxLogits(embedding, name="tied_logits")(x)
  model = tf.keras.Model(inputs, logits, name="reddit_lstm")
  return model


def project_weights(trainable_weights: Sequence[np.ndarray], *,
                    embedding_index: int = EMBEDDING_INDEX) -> list[np.ndarray]:
  """The weights with every embedding row rescaled to unit L2 norm (App. B).

  The training program calls this on the server model after each round. All-zero rows
  stay zero. The other arrays are returned unchanged (as copies).

  Raises:
    ValueError: `embedding_index` out of range or not a 2-D matrix.
  """
  weights = [np.array(w, copy=True) for w in trainable_weights]
  if not 0 <= embedding_index < len(weights) or weights[embedding_index].ndim != 2:
    raise ValueError(
        f"`embedding_index` {embedding_index!r} must point at the 2-D embedding matrix in "
        f"`trainable_weights` (shapes {[w.shape for w in weights]}); pass the model's "
        "trainable weights in order, or the right index.")
  weights[embedding_index] = _unit_rows(weights[embedding_index])
  return weights


def loss_fn(pad_id: int = 0) -> tf.keras.losses.Loss:
  """Sparse cross-entropy from logits averaged over the non-pad targets."""
  # The StackOverflow task's loss is exactly this (pad-masked, from logits): shared.
  return so_model.MaskedSparseCategoricalCrossentropy(pad_token=pad_id)


class AccuracyTop1(tf.keras.metrics.Metric):
  """Paper 001 App. B AccuracyTop1: argmax == target over the non-pad targets, where a
  target outside the vocabulary (UNK) always counts as wrong, even if UNK is predicted."""

  def __init__(self, vocab_size: int = data.PAPER_VOCAB_SIZE, name: str = "accuracy_top1",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self._vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
    ids = data.token_ids(self._vocab_size)
    self._pad, self._unk = ids.pad, ids.unk
    self.correct = self.add_weight(name="correct", initializer="zeros", dtype=tf.float32)
    self.total = self.add_weight(name="total", initializer="zeros", dtype=tf.float32)

  def update_state(self, y_true, y_pred, sample_weight=None):
    y_true = tf.cast(y_true, tf.int64)
    pred = tf.argmax(y_pred, axis=-1, output_type=tf.int64)
    counted = tf.not_equal(y_true, self._pad)
    right = tf.logical_and(tf.equal(pred, y_true), tf.not_equal(y_true, self._unk))
    weight = tf.cast(counted, tf.float32)
    if sample_weight is not None:
      weight *= tf.broadcast_to(tf.cast(sample_weight, tf.float32), tf.shape(weight))
    self.correct.assign_add(tf.reduce_sum(weight * tf.cast(right, tf.float32)))
    self.total.assign_add(tf.reduce_sum(weight))

  def result(self):
    return tf.math.divide_no_nan(self.correct, self.total)

  def reset_state(self):
    self.correct.assign(0.0)
    self.total.assign(0.0)

  def get_config(self):
    return {**super().get_config(), "vocab_size": self._vocab_size}


def metrics_fn(vocab_size: int = data.PAPER_VOCAB_SIZE) -> list[tf.keras.metrics.Metric]:
  """New metric instances: AccuracyTop1."""
  return [AccuracyTop1(vocab_size)]
