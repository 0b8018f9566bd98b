"""tasks.digits.data: the IDX parser on files in the real format, its errors, the loaders."""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np
import pytest

from tasks.digits import data


def _mnist_like(rng, count, rows=5, cols=4):
  images = rng.integers(0, 256, size=(count, rows, cols), dtype=np.uint8)
  labels = rng.integers(0, 10, size=count, dtype=np.uint8)
  return images, labels


def _write_mnist_dir(directory, rng, gz=False, train=12, test=5):
  suffix = ".gz" if gz else ""
  arrays = {}
  for split, count in (("train", train), ("test", test)):
    images, labels = _mnist_like(rng, count)
    images_name, labels_name = data.MNIST_FILES[split]
    data.write_idx(os.path.join(directory, images_name + suffix), images)
    data.write_idx(os.path.join(directory, labels_name + suffix), labels)
    arrays[split] = (images, labels)
  return arrays


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32,
                                   np.float64])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip_every_type(tmp_path, dtype, suffix):
  array = (np.arange(2 * 3 * 4) - 5).astype(dtype).reshape(2, 3, 4)
  if dtype == np.uint8:
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
  path = data.write_idx(str(tmp_path / f"a.idx{suffix}"), array)
  back = data.read_idx(path)
  assert back.dtype == np.dtype(dtype) and back.shape == (2, 3, 4)
  np.testing.assert_array_equal(back, array)


def test_idx_bytes_are_the_documented_format(tmp_path):
  """Magic 0x00000803, big-endian uint32 sizes, then the bytes: as on LeCun's page."""
  images = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 3)
  path = data.write_idx(str(tmp_path / "x-idx3-ubyte"), images)
  raw = open(path, "rb").read()
  assert raw[:4] == b"\x00\x00\x08\x03"
  assert struct.unpack(">3I", raw[4:16]) == (2, 2, 3)
  assert raw[16:] == bytes(range(12))
  labels = data.write_idx(str(tmp_path / "y-idx1-ubyte"), np.array([7, 1], np.uint8))
  assert open(labels, "rb").read() == b"\x00\x00\x08\x01\x00\x00\x00\x02\x07\x01"


def _write(path, payload):
  with open(path, "wb") as f:
    f.write(payload)
  return str(path)


GOOD_HEADER = b"\x00\x00\x08\x01" + struct.pack(">I", 4)


@pytest.mark.parametrize("payload, message", [
    (b"\x00\x00", "shorter than the 4-byte magic number"),
    (b"\x1f\x8b\x08\x01" + b"\x00" * 8, "bad magic number 0x1f8b0801"),
    (b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00", "unknown element type 0x07"),
    (b"\x00\x00\x08\x03" + struct.pack(">I", 2), "truncated IDX header"),
    (GOOD_HEADER + b"\x01\x02\x03", "truncated IDX file"),
    (GOOD_HEADER + b"\x01\x02\x03\x04\x05", "1 bytes after the data"),
])
def test_corrupt_idx_errors_name_file_and_fault(tmp_path, payload, message):
  path = _write(tmp_path / "bad-idx1-ubyte", payload)
  with pytest.raises(ValueError, match=message) as info:
    data.read_idx(path)
  assert path in str(info.value)


def test_truncated_idx_says_how_much_is_missing(tmp_path):
  images = np.zeros((3, 4, 4), np.uint8)
  path = data.write_idx(str(tmp_path / "t-idx3-ubyte"), images)
  raw = open(path, "rb").read()
  _write(path, raw[:-10])
  with pytest.raises(ValueError, match=r"needs 48 bytes of data, the file has 38"):
    data.read_idx(path)


def test_broken_gzip_is_a_value_error_naming_the_file(tmp_path):
  path = str(tmp_path / "x-idx1-ubyte.gz")
  blob = gzip.compress(GOOD_HEADER + b"\x01\x02\x03\x04")
  _write(path, blob[:len(blob) // 2])
  with pytest.raises(ValueError, match="not a readable gzip file") as info:
    data.read_idx(path)
  assert path in str(info.value)


def test_mnist_pair_checks_count_dtype_shape_and_labels(tmp_path):
  rng = np.random.default_rng(0)
  images, labels = _mnist_like(rng, 6)
  img = data.write_idx(str(tmp_path / "i"), images)
  lab = data.write_idx(str(tmp_path / "l"), labels)
  flat, y, shape = data.read_mnist_pair(img, lab)
  assert flat.shape == (6, 20) and shape == (5, 4) and y.dtype == np.int64
  np.testing.assert_allclose(flat * 255.0, images.reshape(6, -1))
  short = data.write_idx(str(tmp_path / "l5"), labels[:5])
  with pytest.raises(ValueError, match="count mismatch: .* 6 images but .* 5 labels"):
    data.read_mnist_pair(img, short)
  with pytest.raises(ValueError, match="expected uint8 images"):
    data.read_mnist_pair(lab, lab)
  with pytest.raises(ValueError, match="expected uint8 labels"):
    data.read_mnist_pair(img, img)
  wide = data.write_idx(str(tmp_path / "f"), images.astype(np.float32))
  with pytest.raises(ValueError, match="expected uint8 images"):
    data.read_mnist_pair(wide, lab)
  bad = data.write_idx(str(tmp_path / "b"), np.array([1, 2, 3, 4, 5, 12], np.uint8))
  with pytest.raises(ValueError, match="label 12 is not a digit"):
    data.read_mnist_pair(img, bad)


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_directory(tmp_path, gz):
  arrays = _write_mnist_dir(str(tmp_path), np.random.default_rng(1), gz=gz)
  digits = data.load("mnist", str(tmp_path))
  assert digits.image_shape == (5, 4)
  assert digits.train_images.shape == (12, 20) and digits.test_images.shape == (5, 20)
  np.testing.assert_array_equal(digits.train_labels, arrays["train"][1])
  np.testing.assert_array_equal(digits.test_labels, arrays["test"][1])
  assert 0.0 <= digits.train_images.min() and digits.train_images.max() <= 1.0


def test_load_mnist_missing_file_and_directory(tmp_path):
  _write_mnist_dir(str(tmp_path), np.random.default_rng(2))
  os.remove(tmp_path / "t10k-labels-idx1-ubyte")
  with pytest.raises(ValueError, match="neither t10k-labels-idx1-ubyte nor "
                                       "t10k-labels-idx1-ubyte.gz"):
    data.load("mnist", str(tmp_path))
  with pytest.raises(ValueError, match="needs --data_dir"):
    data.load("mnist")
  with pytest.raises(ValueError, match="is not a directory"):
    data.load("mnist", str(tmp_path / "nope"))
  with pytest.raises(ValueError, match="--dataset='emnist' is not known"):
    data.load("emnist")


def test_sklearn_digits_shapes_and_public_split():
  digits = data.load("sklearn_digits")
  assert digits.train_images.shape == (1438, 64) and digits.test_images.shape == (359, 64)
  assert digits.image_shape == (8, 8)
  assert digits.train_images.min() == 0.0 and digits.train_images.max() == 1.0
  assert set(np.unique(digits.train_labels)) == set(range(10))
  again = data.load_sklearn_digits(0.2, 0)
  np.testing.assert_array_equal(again.test_labels, digits.test_labels)
  other = data.load_sklearn_digits(0.2, 1)
  assert not np.array_equal(other.test_images, digits.test_images)
  # Train and test split the 1,797 images: together they are all of them, each once.
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  full = datasets.load_digits().data / 16.0
  both = np.concatenate([digits.train_images, digits.test_images])
  np.testing.assert_array_equal(np.sort(both.view([("", float)] * 64), axis=0),
                                np.sort(full.view([("", float)] * 64), axis=0))
  with pytest.raises(ValueError, match="test_fraction"):
    data.load_sklearn_digits(1.5)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
