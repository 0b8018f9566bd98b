"""tasks.decentralized.cifar10: the CIFAR-10 python-version reader on files in the real
format (built here, by hand and by write_batch), its errors, its pickle guard, the loader."""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytest

if __name__ == "__main__":  # `python tests/decentralized/cifar10_test.py` from the repo root.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
      __file__)))))

from tasks.decentralized import cifar10  # pylint: disable=g-import-not-at-top


def _random_batch(rng, count):
  images = rng.integers(0, 256, size=(count,) + cifar10.IMAGE_SHAPE, dtype=np.uint8)
  labels = rng.integers(0, cifar10.NUM_CLASSES, size=count)
  return images, labels


def _dump(path, obj, protocol=2):
  with open(path, "wb") as f:
    pickle.dump(obj, f, protocol=protocol)
  return str(path)


def _real_layout(data, labels, str_keys=False):
  """A batch dict laid out as Krizhevsky's files are (byte keys unless `str_keys`)."""
  batch = {"batch_label": b"training batch 1 of 5", "labels": [int(y) for y in labels],
           "data": data,
           "filenames": [b"img_%d.png" % i for i in range(len(labels))]}
  return batch if str_keys else {k.encode("ascii"): v for k, v in batch.items()}


def test_constants():
  assert cifar10.TRAIN_FILES == ("data_batch_1", "data_batch_2", "data_batch_3",
                                 "data_batch_4", "data_batch_5")
  assert cifar10.TEST_FILE == "test_batch"
  assert cifar10.IMAGE_SHAPE == (32, 32, 3)
  assert cifar10.NUM_CLASSES == 10


def test_round_trip_preserves_every_pixel_exactly(tmp_path):
  images, labels = _random_batch(np.random.default_rng(0), 7)
  path = cifar10.write_batch(str(tmp_path / "data_batch_1"), images, labels)
  x, y = cifar10.read_batch(path)
  assert x.dtype == np.float32 and x.shape == (7, 32, 32, 3)
  assert y.dtype == np.int64 and y.shape == (7,)
  np.testing.assert_array_equal(x, images.astype(np.float32) / np.float32(255))
  np.testing.assert_array_equal(np.round(x * 255).astype(np.uint8), images)
  np.testing.assert_array_equal(y, labels)
  assert 0.0 <= x.min() and x.max() <= 1.0


def test_write_batch_writes_the_real_layout(tmp_path):
  images = np.zeros((2, 32, 32, 3), np.uint8)
  images[1, 2, 3, 0], images[1, 2, 3, 1], images[1, 2, 3, 2] = 10, 20, 30
  path = cifar10.write_batch(str(tmp_path / "b"), images, [4, 9], batch_label="x")
  with open(path, "rb") as f:
    batch = pickle.load(f, encoding="bytes")
  assert set(batch) == {b"data", b"labels", b"batch_label", b"filenames"}
  assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape == (2, 3072)
  assert batch[b"labels"] == [4, 9] and isinstance(batch[b"labels"], list)
  assert batch[b"batch_label"] == b"x" and len(batch[b"filenames"]) == 2
  row = batch[b"data"][1]  # Pixel (row 2, column 3) is element 2·32 + 3 of each plane.
  assert (row[0 * 1024 + 67], row[1 * 1024 + 67], row[2 * 1024 + 67]) == (10, 20, 30)
  assert np.count_nonzero(row) == 3


def _px(value):
  """Pixel `value` as read_batch gives it: float32 value / 255."""
  return np.float32(value) / np.float32(255)


def test_hand_built_pickle_in_the_real_layout_reads_as_hwc(tmp_path):
  # Two images of 3072 values each, as in the real files: 1024 red, 1024 green, 1024 blue,
  # each plane row-major. Red differs from green and blue everywhere.
  n = 2
  data = np.zeros((n, 3072), np.uint8)
  for i in range(n):
    for r in range(32):
      for c in range(32):
        data[i, 0 * 1024 + 32 * r + c] = (r + 2 * c + 50 * i) % 256  # Red.
        data[i, 1 * 1024 + 32 * r + c] = 200  # Green.
        data[i, 2 * 1024 + 32 * r + c] = 7 + i  # Blue.
  path = _dump(tmp_path / "data_batch_1", _real_layout(data, [3, 8]))
  x, y = cifar10.read_batch(path)
  assert x.shape == (2, 32, 32, 3)
  np.testing.assert_array_equal(y, [3, 8])
  # Hand-computed expectations for x[i, r, c, channel].
  assert x[0, 0, 0, 0] == _px(0)
  assert x[0, 0, 1, 0] == _px(2)  # Column 1: r + 2c = 2.
  assert x[0, 1, 0, 0] == _px(1)  # Row 1: r + 2c = 1.
  assert x[0, 5, 9, 0] == _px(23)
  assert x[1, 31, 30, 0] == _px((31 + 60 + 50) % 256)
  assert x[0, 5, 9, 1] == _px(200) and x[1, 17, 4, 1] == _px(200)
  assert x[0, 5, 9, 2] == _px(7) and x[1, 17, 4, 2] == _px(8)
  np.testing.assert_array_equal(x[:, :, :, 1], _px(200))
  # And in bulk: the red plane of image 1.
  rows, cols = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
  np.testing.assert_array_equal(x[1, :, :, 0], _px((rows + 2 * cols + 50) % 256))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_str_keys_and_every_pickle_protocol_are_accepted(tmp_path, protocol):
  images, labels = _random_batch(np.random.default_rng(1), 3)
  data = images.transpose(0, 3, 1, 2).reshape(3, 3072)
  for str_keys in (False, True):
    path = _dump(tmp_path / f"b{str_keys}", _real_layout(data, labels, str_keys), protocol)
    x, y = cifar10.read_batch(path)
    np.testing.assert_array_equal(np.round(x * 255).astype(np.uint8), images)
    np.testing.assert_array_equal(y, labels)


def test_labels_as_numpy_scalars_or_an_array_are_accepted(tmp_path):
  data = np.zeros((3, 3072), np.uint8)
  labels = np.array([0, 9, 4])
  for protocol in (2, 5):
    for stored in (list(labels), labels, labels.astype(np.uint8)):
      path = _dump(tmp_path / "b", {b"data": data, b"labels": stored}, protocol)
      np.testing.assert_array_equal(cifar10.read_batch(path)[1], labels)


def test_numpy_2_module_names_are_accepted(tmp_path):
  # NumPy 2 pickles name numpy._core.multiarray._reconstruct instead of numpy.core….
  images, labels = _random_batch(np.random.default_rng(5), 2)
  raw = pickle.dumps(_real_layout(images.transpose(0, 3, 1, 2).reshape(2, 3072), labels),
                     protocol=2)
  assert b"cnumpy.core.multiarray\n_reconstruct\n" in raw
  path = tmp_path / "numpy2"
  path.write_bytes(raw.replace(b"cnumpy.core.multiarray\n", b"cnumpy._core.multiarray\n"))
  x, y = cifar10.read_batch(str(path))
  np.testing.assert_array_equal(np.round(x * 255).astype(np.uint8), images)
  np.testing.assert_array_equal(y, labels)


def test_integer_data_in_range_is_accepted(tmp_path):
  data = np.full((1, 3072), 255, np.int64)
  x, _ = cifar10.read_batch(_dump(tmp_path / "b", _real_layout(data, [0])))
  np.testing.assert_array_equal(x, 1.0)


def _good_data(count=2):
  return np.zeros((count, 3072), np.uint8)


@pytest.mark.parametrize("name,content,match", [
    ("not_a_pickle", b"this is not a pickle", "not a readable pickle"),
    ("empty", b"", "not a readable pickle"),
    ("truncated", pickle.dumps(_real_layout(_good_data(), [1, 2]), protocol=2)[:-40],
     "not a readable pickle"),
    ("trailing", pickle.dumps(_real_layout(_good_data(), [1, 2]), protocol=2) + b"xx",
     "bytes after"),
    ("list", pickle.dumps([1, 2, 3], protocol=2), "not the dict"),
    ("no_data", pickle.dumps({b"labels": [1]}, protocol=2), "no b'data'"),
    ("no_labels", pickle.dumps({b"data": _good_data(1)}, protocol=2), "no b'labels'"),
    ("cifar100", pickle.dumps({b"data": _good_data(1), b"fine_labels": [1]}, protocol=2),
     "CIFAR-100"),
    ("data_list", pickle.dumps({b"data": [[0] * 3072], b"labels": [1]}), "not a NumPy array"),
    ("data_1d", pickle.dumps({b"data": np.zeros(3072, np.uint8), b"labels": [1]}),
     r"shape \(3072,\)"),
    ("data_columns", pickle.dumps({b"data": np.zeros((1, 1024), np.uint8), b"labels": [1]}),
     r"shape \(1, 1024\)"),
    ("data_4d", pickle.dumps({b"data": np.zeros((1, 3, 32, 32), np.uint8), b"labels": [1]}),
     "shape"),
    ("data_float", pickle.dumps({b"data": np.zeros((1, 3072), np.float32), b"labels": [1]}),
     "dtype float32"),
    ("data_range", pickle.dumps({b"data": np.full((1, 3072), 256, np.int32), b"labels": [1]}),
     "0-255"),
    ("data_negative", pickle.dumps({b"data": np.full((1, 3072), -1, np.int16),
                                    b"labels": [1]}), "0-255"),
    ("labels_count", pickle.dumps(_real_layout(_good_data(3), [1, 2])), "2 labels for 3"),
    ("labels_high", pickle.dumps(_real_layout(_good_data(2), [1, 10])), "label 10"),
    ("labels_negative", pickle.dumps(_real_layout(_good_data(2), [-1, 0])), "label -1"),
    ("labels_float", pickle.dumps({b"data": _good_data(1), b"labels": [0.5]}), "list of ints"),
])
def test_malformed_files_raise_value_errors_naming_the_file(tmp_path, name, content, match):
  path = tmp_path / name
  path.write_bytes(content)
  with pytest.raises(ValueError, match=match) as info:
    cifar10.read_batch(str(path))
  assert str(path) in str(info.value)


def test_missing_file_and_directory_say_where_the_files_come_from(tmp_path):
  path = str(tmp_path / "data_batch_9")
  with pytest.raises(ValueError) as info:
    cifar10.read_batch(path)
  message = str(info.value)
  assert path in message and "cifar-10-python.tar.gz" in message
  assert "--data_dir" in message and "cifar-10-batches-py" in message
  with pytest.raises(ValueError, match="directory") as info:
    cifar10.read_batch(str(tmp_path))
  assert str(tmp_path) in str(info.value)


class _RunsCode:

  def __reduce__(self):
    return (os.system, ("echo pwned > " + self.target,))

  def __init__(self, target):
    self.target = target


class _Touch:
  """Unpickling calls `open(target, "w")`: a global a batch must never be allowed."""

  def __init__(self, target):
    self.target = target

  def __reduce__(self):
    return (open, (self.target, "w"))


@pytest.mark.parametrize("protocol", [2, 4])
def test_disallowed_globals_are_refused_without_running_them(tmp_path, protocol):
  for i, payload_type in enumerate((_RunsCode, _Touch)):
    target = str(tmp_path / f"pwned_{protocol}_{i}")
    batch = _real_layout(_good_data(1), [0])
    batch[b"filenames"] = payload_type(target)
    path = _dump(tmp_path / f"evil_{protocol}_{i}", batch, protocol)
    with pytest.raises(ValueError, match="refused to unpickle") as info:
      cifar10.read_batch(path)
    assert path in str(info.value)
    assert "system" in str(info.value) or "open" in str(info.value)
    assert not os.path.exists(target)


def _write_dir(directory, rng, sizes=(3, 2, 4, 1, 2), test=5):
  os.makedirs(directory, exist_ok=True)
  train = [_random_batch(rng, n) for n in sizes]
  for name, (images, labels) in zip(cifar10.TRAIN_FILES, train):
    cifar10.write_batch(os.path.join(directory, name), images, labels, batch_label=name)
  test_images, test_labels = _random_batch(rng, test)
  cifar10.write_batch(os.path.join(directory, cifar10.TEST_FILE), test_images, test_labels)
  return (np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]),
          test_images, test_labels)


def test_load_reads_the_batches_in_order_from_the_dir_or_its_parent(tmp_path):
  batches = str(tmp_path / "cifar-10-batches-py")
  train_images, train_labels, test_images, test_labels = _write_dir(
      batches, np.random.default_rng(2))
  for data_dir in (batches, str(tmp_path)):
    train_x, train_y, test_x, test_y = cifar10.load(data_dir)
    assert train_x.shape == (12, 32, 32, 3) and test_x.shape == (5, 32, 32, 3)
    assert train_x.dtype == test_x.dtype == np.float32
    assert train_y.dtype == test_y.dtype == np.int64
    np.testing.assert_array_equal(np.round(train_x * 255).astype(np.uint8), train_images)
    np.testing.assert_array_equal(train_y, train_labels)
    np.testing.assert_array_equal(np.round(test_x * 255).astype(np.uint8), test_images)
    np.testing.assert_array_equal(test_y, test_labels)
  train_x, train_y, test_x, _ = cifar10.load(batches, max_train=4)
  np.testing.assert_array_equal(train_y, train_labels[:4])
  assert train_x.shape == (4, 32, 32, 3) and test_x.shape == (5, 32, 32, 3)
  with pytest.raises(ValueError, match="max_train"):
    cifar10.load(batches, max_train=0)


def test_load_names_the_missing_files(tmp_path):
  batches = tmp_path / "cifar-10-batches-py"
  _write_dir(str(batches), np.random.default_rng(3))
  os.remove(batches / "data_batch_3")
  os.remove(batches / "test_batch")
  for data_dir in (str(batches), str(tmp_path)):
    with pytest.raises(ValueError) as info:
      cifar10.load(data_dir)
    message = str(info.value)
    assert data_dir in message and "data_batch_3" in message and "test_batch" in message
    assert "data_batch_1" not in message.split("lacks")[1].split("(")[0]
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(ValueError, match="data_batch_1, data_batch_2") as info:
    cifar10.load(str(empty))
  assert str(empty) in str(info.value)
  (empty / "cifar-10-python.tar.gz").write_bytes(b"")
  with pytest.raises(ValueError, match="extract"):
    cifar10.load(str(empty))
  with pytest.raises(ValueError, match="not a directory"):
    cifar10.load(str(tmp_path / "nowhere"))
  with pytest.raises(ValueError, match="--data_dir"):
    cifar10.load("")


def test_load_reports_a_malformed_batch_by_its_path(tmp_path):
  batches = tmp_path / "cifar-10-batches-py"
  _write_dir(str(batches), np.random.default_rng(4))
  (batches / "data_batch_4").write_bytes(b"\x80\x02}q\x00")  # Truncated pickle.
  with pytest.raises(ValueError, match="data_batch_4"):
    cifar10.load(str(tmp_path))


def test_write_batch_rejects_bad_inputs(tmp_path):
  with pytest.raises(ValueError, match="uint8"):
    cifar10.write_batch(str(tmp_path / "b"), np.zeros((1, 32, 32, 3)), [0])
  with pytest.raises(ValueError, match="uint8"):
    cifar10.write_batch(str(tmp_path / "b"), np.zeros((1, 3, 32, 32), np.uint8), [0])
  with pytest.raises(ValueError, match="labels"):
    cifar10.write_batch(str(tmp_path / "b"), np.zeros((1, 32, 32, 3), np.uint8), [0, 1])
  with pytest.raises(ValueError, match="labels"):
    cifar10.write_batch(str(tmp_path / "b"), np.zeros((1, 32, 32, 3), np.uint8), [10])


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
