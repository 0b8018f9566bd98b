"""tasks.stackoverflow.model: the paper's parameter count, the masked loss and the metrics."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks.stackoverflow import data
from tasks.stackoverflow import model

# A small vocabulary: V = 4 words (ids 1..4), OOV 5, BOS 6, EOS 7; 8 classes.
_V = 4
_PAD, _OOV, _BOS, _EOS = 0, 5, 6, 7


def _count(keras_model) -> int:
  return sum(int(np.prod(v.shape)) for v in keras_model.trainable_variables)


def test_paper_model_has_4050748_trainable_parameters():
  keras_model = model.build_model(10_000, 1)
  assert _count(keras_model) == model.PAPER_NUM_TRAINABLE_PARAMETERS == 4_050_748
  assert model.num_trainable_parameters(10_000, 1) == 4_050_748
  shapes = sorted(tuple(v.shape) for v in keras_model.trainable_variables)
  assert shapes == sorted([(10_004, 96), (96, 4 * 670), (670, 4 * 670), (4 * 670,),
                           (670, 96), (96,), (96, 10_004), (10_004,)])


@pytest.mark.parametrize("sizes", [
    dict(vocab_size=_V, num_oov_buckets=1, embedding_size=8, lstm_size=16),
    dict(vocab_size=30, num_oov_buckets=2, embedding_size=5, lstm_size=7, num_lstm_layers=2),
])
def test_small_models_match_the_formula(sizes):
  assert _count(model.build_model(**sizes)) == model.num_trainable_parameters(**sizes)


def test_model_output_and_mask():
  tf.keras.utils.set_random_seed(0)
  keras_model = model.build_model(_V, embedding_size=8, lstm_size=16)
  x = np.array([[_BOS, 1, 2, _EOS, _PAD], [_BOS, 3, _OOV, 4, 1]])
  logits = keras_model(x)
  assert logits.shape == (2, 5, _V + 4)
  assert logits._keras_mask.numpy().tolist() == (x != _PAD).tolist()


def test_loss_is_mean_over_non_pad_targets():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 5, _V + 4)).astype(np.float32)
  y = np.array([[1, 2, _EOS, _PAD, _PAD], [3, _OOV, 4, 1, 2]])
  log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  per_token = -np.take_along_axis(log_softmax, y[..., None], axis=-1)[..., 0]
  loss = model.loss_fn()
  assert float(loss(y, logits)) == pytest.approx(per_token[y != _PAD].mean(), rel=1e-5)
  # Keyword call (as TFF's from_keras_model makes it) and sample weights per sentence.
  weighted = loss(y_true=y, y_pred=logits, sample_weight=np.array([1.0, 0.0]))
  assert float(weighted) == pytest.approx(per_token[0][y[0] != _PAD].mean(), rel=1e-5)
  # Changing the logits at padded targets does not change the loss.
  changed = logits.copy()
  changed[y == _PAD] += 100.0
  assert float(loss(y, changed)) == pytest.approx(float(loss(y, logits)), rel=1e-6)
  assert float(loss(np.zeros_like(y), logits)) == 0.0  # All padding.


def test_metrics_mask_pad_oov_and_eos():
  metrics = model.metrics_fn(_V, 1)
  assert [m.name for m in metrics] == [data.NUM_TOKENS, data.ACCURACY,
                                       data.ACCURACY_WITHOUT_OOV,
                                       data.ACCURACY_WITHOUT_OOV_OR_EOS]
  y = np.array([[1, _OOV, _EOS, 2, _PAD]])
  predicted = np.array([[1, _OOV, 3, 1, 1]])  # Right on 1 and OOV; wrong on EOS and 2.
  logits = tf.one_hot(predicted, _V + 4)
  for metric in metrics:
    metric.update_state(y, logits)
  results = {m.name: float(m.result()) for m in metrics}
  assert results == pytest.approx({data.NUM_TOKENS: 4, data.ACCURACY: 2 / 4,
                                   data.ACCURACY_WITHOUT_OOV: 1 / 3,
                                   data.ACCURACY_WITHOUT_OOV_OR_EOS: 1 / 2})
  assert all(a is not b for a, b in zip(metrics, model.metrics_fn(_V, 1)))  # New objects.


def test_keras_and_tff_use_the_same_loss_and_metrics():
  tf.keras.utils.set_random_seed(1)
  x = np.array([[_BOS, 1, 2, _EOS, _PAD, _PAD], [_BOS, 3, _OOV, 4, 1, 2]])
  y = np.array([[1, 2, _EOS, _PAD, _PAD, _PAD], [3, _OOV, 4, 1, 2, _EOS]])
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
  keras_model = model.build_model(_V, embedding_size=8, lstm_size=16)
  expected = float(model.loss_fn()(y, keras_model(x)))
  keras_model.compile(loss=model.loss_fn(), metrics=model.metrics_fn(_V))
  results = keras_model.evaluate(dataset, verbose=0, return_dict=True)
  assert results["loss"] == pytest.approx(expected, rel=1e-5)
  assert results[data.NUM_TOKENS] == 9
  uncompiled = model.build_model(_V, embedding_size=8, lstm_size=16)
  uncompiled.set_weights(keras_model.get_weights())
  tff_model = tff.learning.models.from_keras_model(
      uncompiled, loss=model.loss_fn(), input_spec=dataset.element_spec,
      metrics=model.metrics_fn(_V))
  output = tff_model.forward_pass(next(iter(dataset)), training=False)
  assert float(output.loss) == pytest.approx(expected, rel=1e-5)


def test_argument_errors():
  with pytest.raises(ValueError, match="`lstm_size` must be a positive integer"):
    model.build_model(_V, lstm_size=0)
  with pytest.raises(ValueError, match="`vocab_size` must be a positive integer"):
    model.metrics_fn(0)
  with pytest.raises(ValueError, match="`pad_token`"):
    model.loss_fn(pad_token=-1)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
