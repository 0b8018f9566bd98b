"""tasks.reddit.model: the App. B parameter count, unit-norm projection, AccuracyTop1, loss."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tasks.reddit import data
from tasks.reddit import model


def _count(keras_model) -> int:
  return sum(int(np.prod(v.shape)) for v in keras_model.trainable_variables)


def test_paper_model_has_about_1_35m_trainable_parameters():
  keras_model = model.build_model(10_000)
  n = _count(keras_model)
  assert n == model.num_trainable_parameters(10_000) == model.PAPER_NUM_TRAINABLE_PARAMETERS
  assert abs(n - 1_350_000) <= 0.01 * 1_350_000
  shapes = sorted(tuple(v.shape) for v in keras_model.trainable_variables)
  assert shapes == sorted([(10_004, 96), (96, 1024), (256, 1024), (1024,), (256, 96),
                           (96,)])  # One embedding matrix: input and output are tied.
  assert tuple(keras_model.trainable_weights[model.EMBEDDING_INDEX].shape) == (10_004, 96)
  logits = keras_model(tf.constant([[1, 2, 3]], tf.int64))
  assert logits.shape == (1, 3, 10_004)


def test_output_is_inner_product_with_the_embedding():
  keras_model = model.build_model(6, embedding_size=4, lstm_size=5, seed=1)
  x = tf.constant([[7, 1, 2]], tf.int64)
  output_embedding = tf.keras.Model(keras_model.input,
                                    keras_model.get_layer("output_embedding").output)(x)
  e = keras_model.trainable_weights[model.EMBEDDING_INDEX].numpy()
  np.testing.assert_allclose(keras_model(x).numpy(), output_embedding.numpy() @ e.T,
                             rtol=1e-5, atol=1e-6)
  again = model.build_model(6, embedding_size=4, lstm_size=5, seed=1)
  for a, b in zip(keras_model.get_weights(), again.get_weights()):
    np.testing.assert_array_equal(a, b)


def test_embedding_rows_unit_norm_after_projection_of_an_updated_model():
  keras_model = model.build_model(20, embedding_size=8, lstm_size=6)
  weights = [w.numpy() for w in keras_model.trainable_weights]
  np.testing.assert_allclose(np.linalg.norm(weights[0], axis=1), 1.0, rtol=1e-6)
  # One SGD step changes the embedding norms; the projection restores them.
  x = tf.constant([[22, 1, 2, 3]], tf.int64)
  y = tf.constant([[1, 2, 3, 23]], tf.int64)
  with tf.GradientTape() as tape:
    loss = model.loss_fn()(y, keras_model(x))
  grads = tape.gradient(loss, keras_model.trainable_weights)
  updated = [w - 5.0 * tf.convert_to_tensor(g).numpy() for w, g in zip(weights, grads)]
  assert np.max(np.abs(np.linalg.norm(updated[0], axis=1) - 1)) > 1e-3
  projected = model.project_weights(updated)
  np.testing.assert_allclose(np.linalg.norm(projected[0], axis=1), 1.0, rtol=1e-6)
  for a, b in zip(projected[1:], updated[1:]):
    np.testing.assert_array_equal(a, b)
  keras_model.set_weights(projected)
  with pytest.raises(ValueError, match="embedding_index"):
    model.project_weights(updated, embedding_index=3)  # The LSTM bias.


def test_accuracy_top1_counts_unk_targets_wrong_and_ignores_pad():
  ids = data.token_ids(3)  # pad 0, words 1..3, UNK 4, BOS 5, EOS 6.
  y = tf.constant([[1, 2, ids.unk, ids.unk, ids.eos, 0, 0]])
  predicted = [1, 3, ids.unk, 1, ids.eos, 0, 2]  # Right, wrong, UNK==UNK, wrong, right, pad.
  logits = tf.one_hot([predicted], ids.num_classes)
  metric = model.AccuracyTop1(3)
  metric.update_state(y, logits)
  assert metric.result().numpy() == pytest.approx(2 / 5)
  metric.reset_state()
  assert metric.result().numpy() == 0.0
  assert model.AccuracyTop1.from_config(metric.get_config())._unk == ids.unk


def test_loss_ignores_pad():
  logits = tf.random.stateless_normal([1, 3, 7], seed=[1, 2])
  full = model.loss_fn()(tf.constant([[1, 2, 0]]), logits)
  expected = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
      tf.constant([[1, 2]]), logits[:, :2], from_logits=True))
  assert full.numpy() == pytest.approx(expected.numpy(), rel=1e-6)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
