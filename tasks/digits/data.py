"""Digit images for paper 000's learning experiment (cpSGD, Sec. 5): one example per client.

Two sources, one result type (`Digits`: flat images in [0, 1], integer labels 0–9):

* `load_sklearn_digits` — scikit-learn's bundled 8 × 8 digits (1,797 images, 64 features,
  pixel values 0–16; offline), split into train and test by a public seed (`split_seed`).
* `load_mnist` — MNIST in its own IDX format (`train-images-idx3-ubyte`,
  `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, each
  optionally `.gz`), with MNIST's own train/test split. Paper 000 trains on infinite MNIST
  (Bottou's deformations of MNIST; not bundled anywhere offline).

The IDX format (LeCun's MNIST page): a 4-byte magic number 0x00 0x00 T N, where T is the
element type (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64)
and N the number of dimensions, then N big-endian uint32 sizes, then the elements in C order,
big-endian. `read_idx` parses it and names the file and the fault when it is not
well-formed (bad magic number, unknown type, truncated header or data, bytes after the data,
a broken .gz); `write_idx` writes it (used for small test files in the real format).

    digits = load("sklearn_digits")                  # or load("mnist", data_dir=DIR)
    digits.train_images.shape, digits.train_labels   # (1437, 64) float64, int64
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import struct
import zlib
from typing import Any, Callable, Optional

import numpy as np

from dp_fl import _checks

NUM_CLASSES = 10

# IDX element type code -> big-endian NumPy dtype.
IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

# MNIST's file names (LeCun's page), each also accepted with ".gz".
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


@dataclasses.dataclass(frozen=True)
class Digits:
  """Flattened digit images in [0, 1] and their labels, split into train and test.

  Attributes:
    train_images: (num_train, height·width) float64 in [0, 1]; one client each.
    train_labels: (num_train,) int64 in {0, …, 9}.
    test_images, test_labels: the held-out split, same layout.
    image_shape: (height, width).
    source: where the images came from (a description, for the results).
  """
  train_images: np.ndarray
  train_labels: np.ndarray
  test_images: np.ndarray
  test_labels: np.ndarray
  image_shape: tuple[int, int]
  source: str

  @property
  def num_features(self) -> int:
    return int(self.train_images.shape[1])

  def describe(self) -> dict[str, Any]:
    return {"source": self.source, "image_shape": list(self.image_shape),
            "num_features": self.num_features,
            "num_train": int(self.train_labels.size), "num_test": int(self.test_labels.size)}


def load_sklearn_digits(test_fraction: float = 0.2, split_seed: int = 0) -> Digits:
  """scikit-learn's 8 × 8 digits, pixels / 16, split by a fixed public permutation.

  The split is a permutation drawn from `np.random.default_rng(split_seed)`: the first
  round(test_fraction · 1797) images are the test set. Nothing secret rests on this seed.
  """
  fraction = _checks.check_open_unit("test_fraction", test_fraction)
  seed = _checks.check_nonnegative_int("split_seed", split_seed)
  try:
    from sklearn import datasets  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ValueError("--dataset=sklearn_digits needs scikit-learn (in requirements.lock); "
                     "reinstall the environment (`./bazelw` does) or use --dataset=mnist "
                     "with --data_dir.") from e
  bunch = datasets.load_digits()
  images = np.asarray(bunch.data, dtype=np.float64) / 16.0
  labels = np.asarray(bunch.target, dtype=np.int64)
  order = np.random.default_rng(seed).permutation(labels.size)
  num_test = int(round(fraction * labels.size))
  if not 0 < num_test < labels.size:
    raise ValueError(f"`test_fraction`={test_fraction!r} leaves {num_test} of {labels.size} "
                     "images for testing; use e.g. 0.2.")
  test, train = order[:num_test], order[num_test:]
  return Digits(images[train], labels[train], images[test], labels[test], (8, 8),
                f"scikit-learn 8x8 digits (split seed {seed}, test fraction {fraction:g})")


def _open_bytes(path: str) -> bytes:
  """The file's bytes, gunzipped if it ends in .gz (a broken archive is a ValueError)."""
  if not path.endswith(".gz"):
    with open(path, "rb") as f:
      return f.read()
  try:
    with gzip.open(path, "rb") as f:
      return f.read()
  except (gzip.BadGzipFile, EOFError, zlib.error) as e:
    raise ValueError(f"{path}: not a readable gzip file ({e}); download it again or "
                     "gunzip it by hand to see what is wrong.") from e


def read_idx(path: str) -> np.ndarray:
  """The array stored in IDX file `path` (optionally .gz), in native byte order.

  Raises:
    ValueError: naming `path` and what is wrong — the magic number, an unknown element
      type, a header or data shorter than the sizes it declares, or bytes after the data.
    OSError: the file cannot be read.
  """
  raw = _open_bytes(path)
  if len(raw) < 4:
    raise ValueError(f"{path}: truncated IDX file: {len(raw)} bytes, shorter than the "
                     "4-byte magic number.")
  zero0, zero1, type_code, ndim = raw[0], raw[1], raw[2], raw[3]
  if zero0 or zero1:
    raise ValueError(
        f"{path}: bad magic number 0x{raw[:4].hex()}: an IDX file starts with two zero "
        "bytes, then the element type and the number of dimensions (0x00000803 for images, "
        "0x00000801 for labels). Is it an IDX file (a .gz not named .gz)?")
  if type_code not in IDX_DTYPES:
    raise ValueError(
        f"{path}: bad magic number 0x{raw[:4].hex()}: unknown element type 0x{type_code:02x} "
        f"(IDX knows {', '.join(f'0x{c:02x}' for c in IDX_DTYPES)}).")
  header_size = 4 + 4 * ndim
  if len(raw) < header_size:
    raise ValueError(f"{path}: truncated IDX header: {ndim} dimensions need {header_size} "
                     f"bytes of header, the file has {len(raw)}.")
  shape = struct.unpack(f">{ndim}I", raw[4:header_size])
  dtype = IDX_DTYPES[type_code]
  expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  available = len(raw) - header_size
  if available < expected:
    raise ValueError(
        f"{path}: truncated IDX file: shape {tuple(shape)} of {dtype.name} needs {expected} "
        f"bytes of data, the file has {available} (an interrupted download?).")
  if available > expected:
    raise ValueError(
        f"{path}: {available - expected} bytes after the data of shape {tuple(shape)}: the "
        "header's sizes do not match the file (corrupt or concatenated).")
  array = np.frombuffer(raw, dtype=dtype, count=expected // dtype.itemsize,
                        offset=header_size)
  return array.reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str, array: np.ndarray) -> str:
  """Writes `array` (a dtype of `IDX_DTYPES`) to `path` in IDX format; gzipped if `.gz`."""
  array = np.asarray(array)
  codes = {dtype.newbyteorder("="): code for code, dtype in IDX_DTYPES.items()}
  code = codes.get(array.dtype.newbyteorder("="))
  if code is None:
    raise ValueError(f"write_idx: dtype {array.dtype} has no IDX type; use one of "
                     f"{sorted(str(d) for d in codes)}.")
  payload = (bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
             + array.astype(IDX_DTYPES[code]).tobytes())
  opener: Callable[..., Any] = gzip.open if path.endswith(".gz") else open
  with opener(path, "wb") as f:
    f.write(payload)
  return path


def read_mnist_pair(images_path: str, labels_path: str
                    ) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
  """(images (count, rows·cols) float64 in [0, 1], labels (count,) int64, (rows, cols)) from
  two IDX files.

  Checks what MNIST promises: uint8 images of 3 dimensions, uint8 labels of 1, as many labels
  as images, labels in 0–9.
  """
  images = read_idx(images_path)
  labels = read_idx(labels_path)
  if images.ndim != 3 or images.dtype != np.uint8:
    raise ValueError(f"{images_path}: expected uint8 images of shape (count, rows, columns) "
                     f"(magic 0x00000803); got {images.dtype} of shape {images.shape}.")
  if labels.ndim != 1 or labels.dtype != np.uint8:
    raise ValueError(f"{labels_path}: expected uint8 labels of shape (count,) (magic "
                     f"0x00000801); got {labels.dtype} of shape {labels.shape}.")
  if images.shape[0] != labels.shape[0]:
    raise ValueError(
        f"count mismatch: {images_path} holds {images.shape[0]} images but {labels_path} "
        f"holds {labels.shape[0]} labels; pair the images with their own labels file.")
  if labels.size and int(labels.max()) >= NUM_CLASSES:
    raise ValueError(f"{labels_path}: label {int(labels.max())} is not a digit (0–9).")
  flat = images.reshape(images.shape[0], -1).astype(np.float64) / 255.0
  return flat, labels.astype(np.int64), (int(images.shape[1]), int(images.shape[2]))


def mnist_path(data_dir: str, name: str) -> str:
  """`data_dir/name` or `data_dir/name.gz`, whichever exists (a ValueError naming both if
  neither does)."""
  for candidate in (os.path.join(data_dir, name), os.path.join(data_dir, name + ".gz")):
    if os.path.exists(candidate):
      return candidate
  raise ValueError(f"--data_dir={data_dir!r} has neither {name} nor {name}.gz; put MNIST's "
                   "four IDX files there (names as on LeCun's page).")


def load_mnist(data_dir: str) -> Digits:
  """MNIST from `data_dir` (its four IDX files, each optionally .gz); MNIST's own split."""
  if not data_dir:
    raise ValueError("--dataset=mnist needs --data_dir, a directory holding MNIST's IDX files "
                     f"({', '.join(n for pair in MNIST_FILES.values() for n in pair)}).")
  if not os.path.isdir(data_dir):
    raise ValueError(f"--data_dir={data_dir!r} is not a directory.")
  splits = {}
  for split, (images_name, labels_name) in MNIST_FILES.items():
    splits[split] = read_mnist_pair(mnist_path(data_dir, images_name),
                                    mnist_path(data_dir, labels_name))
  (train_images, train_labels, shape), (test_images, test_labels, test_shape) = (
      splits["train"], splits["test"])
  if shape != test_shape:
    raise ValueError(f"{data_dir}: the train images are {shape[0]}x{shape[1]} but the test "
                     f"images {test_shape[0]}x{test_shape[1]}; use MNIST's own four files.")
  return Digits(train_images, train_labels, test_images, test_labels, shape,
                f"MNIST IDX files in {data_dir}")


DATASETS = ("sklearn_digits", "mnist")


def load(dataset: str, data_dir: Optional[str] = None, test_fraction: float = 0.2,
         split_seed: int = 0) -> Digits:
  """One of `DATASETS`: "sklearn_digits" (split by `split_seed`) or "mnist" (`data_dir`)."""
  if dataset == "sklearn_digits":
    return load_sklearn_digits(test_fraction, split_seed)
  if dataset == "mnist":
    return load_mnist(data_dir or "")
  raise ValueError(f"--dataset={dataset!r} is not known; use one of {', '.join(DATASETS)}.")
