"""The StackOverflow next-word prediction model, loss and metrics.

The model is the recurrent model of TFF's StackOverflow baseline, used by paper 004
Sec. 4.1 (Table 3) after its ref. [8]: token embedding (96) -> one LSTM (670 units) ->
dense projection (96) -> dense layer to logits over the extended vocabulary (V + B + 3
classes, see `tasks.stackoverflow.vocab`). At V = 10,000 words and B = 1 OOV bucket it has
4,050,748 trainable parameters:

    embedding   10,004 x 96                       =   960,384
    LSTM        4 x 670 x (96 + 670 + 1)          = 2,055,560
    projection  670 x 96 + 96                     =    64,416
    output      96 x 10,004 + 10,004              =   970,388

The sizes are parameters, so tests and quick jobs can use a smaller model.
"""

from __future__ import annotations

from typing import Any, Optional

import tensorflow as tf
# TFF 0.87 does not re-export these modules from `tff.simulation.baselines`; they are the
# implementation of its public `tff.simulation.baselines.stackoverflow` word-prediction task.
from tensorflow_federated.python.simulation.baselines import keras_metrics
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_models

from dp_fl import _checks
from tasks.stackoverflow import vocab as vocab_lib

PAPER_EMBEDDING_SIZE = 96
PAPER_LSTM_SIZE = 670
PAPER_NUM_LSTM_LAYERS = 1
PAPER_NUM_TRAINABLE_PARAMETERS = 4_050_748  # At vocab_size 10,000 and 1 OOV bucket.


def num_trainable_parameters(vocab_size: int = vocab_lib.DEFAULT_VOCAB_SIZE,
                             num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS, *,
                             embedding_size: int = PAPER_EMBEDDING_SIZE,
                             lstm_size: int = PAPER_LSTM_SIZE,
                             num_lstm_layers: int = PAPER_NUM_LSTM_LAYERS) -> int:
  """The trainable parameter count of `build_model` with these sizes, in closed form."""
  classes = vocab_lib.token_ids(vocab_size, num_oov_buckets).extended_vocab_size
  embedding_size = _checks.check_positive_int("embedding_size", embedding_size)
  lstm_size = _checks.check_positive_int("lstm_size", lstm_size)
  num_lstm_layers = _checks.check_positive_int("num_lstm_layers", num_lstm_layers)
  per_layer = (4 * lstm_size * (embedding_size + lstm_size + 1)  # LSTM kernels and bias.
               + lstm_size * embedding_size + embedding_size)  # Projection to embedding_size.
  return (classes * embedding_size + num_lstm_layers * per_layer
          + embedding_size * classes + classes)


def build_model(vocab_size: int = vocab_lib.DEFAULT_VOCAB_SIZE,
                num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS, *,
                embedding_size: int = PAPER_EMBEDDING_SIZE, lstm_size: int = PAPER_LSTM_SIZE,
                num_lstm_layers: int = PAPER_NUM_LSTM_LAYERS) -> tf.keras.Model:
  """The uncompiled Keras model (TFF's `create_recurrent_model`), logits out.

  Input: int token ids [batch, time] (0 = padding, masked by the embedding); output: logits
  [batch, time, V + B + 3]. Weights are initialized from the global Keras/TF seed.

  Args:
    vocab_size: V, the number of vocabulary words (`len(vocab)`).
    num_oov_buckets: B.
    embedding_size: embedding and projection width (96 in the paper's setting).
    lstm_size: LSTM units (670).
    num_lstm_layers: LSTM layers, each followed by a projection (1).

  Returns:
    The model.
  """
  classes = vocab_lib.token_ids(vocab_size, num_oov_buckets).extended_vocab_size
  return word_prediction_models.create_recurrent_model(
      vocab_size=classes,
      embedding_size=_checks.check_positive_int("embedding_size", embedding_size),
      num_lstm_layers=_checks.check_positive_int("num_lstm_layers", num_lstm_layers),
      lstm_size=_checks.check_positive_int("lstm_size", lstm_size),
      shared_embedding=False)


class MaskedSparseCategoricalCrossentropy(tf.keras.losses.Loss):
  """Mean softmax cross-entropy from logits over the target tokens that are not padding.

  The loss of a batch is sum_i w_i CE(y_i, logits_i) / sum_i w_i with w_i = [y_i != pad]
  (times `sample_weight` when given, e.g. the Keras mask of the model output), so padding
  never counts and sentences of any length weigh by their tokens. An all-padding batch has
  loss 0.
  """

  def __init__(self, pad_token: int = 0,
               name: str = "masked_sparse_categorical_crossentropy"):
    super().__init__(name=name, reduction=tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE)
    self._pad_token = _checks.check_nonnegative_int("pad_token", pad_token)

  def call(self, y_true, y_pred):
    """Per-token cross-entropy, 0 at padding (Keras' reduction would divide by all tokens)."""
    y_true = tf.cast(y_true, tf.int64)
    per_token = tf.keras.losses.sparse_categorical_crossentropy(y_true, y_pred,
                                                                from_logits=True)
    return per_token * tf.cast(tf.not_equal(y_true, self._pad_token), per_token.dtype)

  def __call__(self, y_true, y_pred, sample_weight: Optional[Any] = None):
    y_true = tf.cast(y_true, tf.int64)
    y_pred = tf.convert_to_tensor(y_pred)
    per_token = tf.keras.losses.sparse_categorical_crossentropy(y_true, y_pred,
                                                                from_logits=True)
    weights = tf.cast(tf.not_equal(y_true, self._pad_token), per_token.dtype)
    if sample_weight is not None:
      sample_weight = tf.cast(sample_weight, per_token.dtype)
      weights *= tf.broadcast_to(
          tf.reshape(sample_weight, tf.concat(
              [tf.shape(sample_weight), tf.ones(tf.rank(weights) - tf.rank(sample_weight),
                                                tf.int32)], 0)), tf.shape(weights))
    return tf.math.divide_no_nan(tf.reduce_sum(per_token * weights), tf.reduce_sum(weights))

  def get_config(self):
    return {**super().get_config(), "pad_token": self._pad_token}


def loss_fn(pad_token: int = 0) -> tf.keras.losses.Loss:
  """The training loss: sparse cross-entropy from logits, averaged over non-pad targets."""
  return MaskedSparseCategoricalCrossentropy(pad_token=pad_token)


def metrics_fn(vocab_size: int = vocab_lib.DEFAULT_VOCAB_SIZE,
               num_oov_buckets: int = vocab_lib.DEFAULT_NUM_OOV_BUCKETS
               ) -> list[tf.keras.metrics.Metric]:
  """New instances of the task's metrics (TFF's baseline word-prediction metrics).

  * `num_tokens`: target tokens that are not padding;
  * `accuracy`: top-1 accuracy over non-pad targets;
  * `accuracy_without_out_of_vocab`: ... also leaving out OOV targets;
  * `accuracy_without_out_of_vocab_or_end_of_sentence`: ... also leaving out BOS and EOS.

  Args:
    vocab_size: V = len(vocab).
    num_oov_buckets: B.

  Returns:
    The metrics (Keras metrics, usable with `tff.learning.models.from_keras_model` and
    `tf.keras.Model.compile`).
  """
  ids = vocab_lib.token_ids(vocab_size, num_oov_buckets)
  masks = vocab_lib.accuracy_masks(ids)
  return [keras_metrics.NumTokensCounter(masked_tokens=[ids.pad], name=vocab_lib.NUM_TOKENS)] + [
      keras_metrics.MaskedCategoricalAccuracy(masked_tokens=list(masked), name=name)
      for name, masked in masks.items()]
