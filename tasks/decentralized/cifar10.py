"""CIFAR-10 in its own "python version" on-disk format: a reader, a writer and a loader.

Source: Krizhevsky's CIFAR page (https://www.cs.toronto.edu/~kriz/cifar.html), the archive
`cifar-10-python.tar.gz` ("CIFAR-10 python version"). Extracted, it is a directory
`cifar-10-batches-py/` holding

* `data_batch_1` … `data_batch_5` (10,000 training images each) and `test_batch` (10,000
  test images): each a Python pickle (written by Python 2, protocol 2; read with
  `pickle.load(f, encoding="bytes")`) of a dict with byte-string keys —
  `b"data"`: a uint8 NumPy array of shape (N, 3072), each row one 32 × 32 colour image as
  1024 red, then 1024 green, then 1024 blue values, each plane row-major (CHW);
  `b"labels"`: a list of N ints in 0–9; `b"batch_label"`: a byte string; `b"filenames"`: N
  byte strings;
* `batches.meta`: `b"label_names"` (the 10 class names), `b"num_cases_per_batch"`
  (10,000) and `b"num_vis"` (3072). Not needed to read the images, so `load` ignores it.

`read_batch` parses one batch file into images of shape (N, 32, 32, 3) (HWC) as float32 in
[0, 1] and int64 labels, and names the file and the fault when it is not well-formed (not a
pickle or truncated, not a dict, a missing key, data of the wrong shape or type, labels that
do not match). Some re-pickled copies use str keys ("data", "labels"); those are accepted.
`write_batch` writes a file in the real format (used for small test files); `load` reads the
five training batches (in order) and the test batch from `--data_dir`.

Security: unpickling can run arbitrary code, and a batch file is data from elsewhere. The
files are therefore read with a restricted `pickle.Unpickler` whose `find_class` resolves
only what a pickled NumPy array needs (`numpy.core.multiarray._reconstruct`,
`numpy.ndarray`, `numpy.dtype`, `numpy.core.numeric._frombuffer` for protocol-5 pickles,
`numpy.core.multiarray.scalar` for labels re-pickled as NumPy integers, their
`numpy._core…` names as NumPy 2 writes them, and `_codecs.encode`, which protocol-2 pickles
written by Python 3 use for bytes); any other global is refused with a ValueError before
anything is called.

    train_x, train_y, test_x, test_y = load(DIR)     # DIR: cifar-10-batches-py or its parent
    train_x.shape, train_x.dtype, train_y.dtype      # (50000, 32, 32, 3) float32, int64
"""

from __future__ import annotations

import codecs
import importlib
import os
import pickle
import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np

from dp_fl import _checks

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
BATCHES_DIR = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
NUM_VIS = 32 * 32 * 3  # Values per row of b"data": 1024 red, 1024 green, 1024 blue.
# Class names, in label order (`b"label_names"` of batches.meta).
LABEL_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
               "ship", "truck")

_WHERE = (f"the CIFAR-10 python version ({ARCHIVE} from "
          "https://www.cs.toronto.edu/~kriz/cifar.html), extracted")


def _numpy_attribute(submodule: str, name: str) -> Callable[[], Any]:
  """Resolves numpy.<_core|core>.<submodule>.<name>, whichever this NumPy has."""
  def resolve() -> Any:
    for package in ("numpy._core", "numpy.core"):
      try:
        with warnings.catch_warnings():  # NumPy 2 warns on numpy.core.
          warnings.simplefilter("ignore", DeprecationWarning)
          module = importlib.import_module(f"{package}.{submodule}")
        return getattr(module, name)
      except (ImportError, AttributeError):
        continue
    raise ImportError(f"this NumPy has no {submodule}.{name}")
  return resolve


# (module, name) as written in the pickle -> the object it may resolve to. Nothing else.
_ALLOWED_GLOBALS: dict[tuple[str, str], Callable[[], Any]] = {
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
    ("_codecs", "encode"): lambda: codecs.encode,
}
for _package in ("numpy.core", "numpy._core"):
  _ALLOWED_GLOBALS[(f"{_package}.multiarray", "_reconstruct")] = _numpy_attribute(
      "multiarray", "_reconstruct")
  _ALLOWED_GLOBALS[(f"{_package}.numeric", "_frombuffer")] = _numpy_attribute(
      "numeric", "_frombuffer")
  _ALLOWED_GLOBALS[(f"{_package}.multiarray", "scalar")] = _numpy_attribute(
      "multiarray", "scalar")


class UnsafePickleError(ValueError):
  """A batch file's pickle names a global that a NumPy array does not need."""


class _RestrictedUnpickler(pickle.Unpickler):
  """An Unpickler that resolves only the globals in `_ALLOWED_GLOBALS`."""

  def __init__(self, file: Any, path: str):
    super().__init__(file, encoding="bytes")
    self._path = path

  def find_class(self, module: str, name: str) -> Any:
    resolve = _ALLOWED_GLOBALS.get((module, name))
    if resolve is None:
      raise UnsafePickleError(
          f"{self._path}: refused to unpickle: it names the global {module}.{name}, which a "
          "CIFAR-10 batch (a dict of a NumPy uint8 array and lists) never needs and which "
          f"could run code. Allowed: {', '.join(sorted(f'{m}.{n}' for m, n in _ALLOWED_GLOBALS))}."
          f" Use the files of {_WHERE}.")
    try:
      return resolve()
    except ImportError as e:
      raise ValueError(f"{self._path}: cannot resolve {module}.{name} ({e}); the file was "
                       "pickled by an incompatible NumPy.") from e


def _missing_file_message(path: str) -> str:
  return (f"{path}: no such file. The CIFAR-10 batch files come from {_WHERE}; point "
          f"--data_dir at the {BATCHES_DIR} directory (or its parent).")


def _unpickle(path: str) -> Any:
  """The object pickled in `path`, read with `_RestrictedUnpickler` (ValueError if not one)."""
  if os.path.isdir(path):
    raise ValueError(f"{path}: is a directory, not a CIFAR-10 batch file; point --data_dir "
                     f"at the {BATCHES_DIR} directory, which holds the batch files.")
  if not os.path.exists(path):
    raise ValueError(_missing_file_message(path))
  with open(path, "rb") as f:
    try:
      obj = _RestrictedUnpickler(f, path).load()
    except UnsafePickleError:
      raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError, ImportError, OverflowError, UnicodeDecodeError) as e:
      size = os.path.getsize(path)
      raise ValueError(
          f"{path}: not a readable pickle ({type(e).__name__}: {e}); the file ({size} bytes) "
          "is truncated or not a CIFAR-10 python-version batch (is it the binary version, "
          f"or the .tar.gz itself?). Download and extract {ARCHIVE} again.") from e
    trailing = f.read(1)
  if trailing:
    raise ValueError(f"{path}: bytes after the end of the pickle (corrupt or concatenated); "
                     f"download and extract {ARCHIVE} again.")
  return obj


def _get(batch: dict, key: str, path: str) -> Any:
  """batch[b"key"] or batch["key"], or a ValueError naming the keys there are."""
  for candidate in (key.encode("ascii"), key):
    if candidate in batch:
      return batch[candidate]
  found = ", ".join(repr(k) for k in list(batch)[:10]) or "none"
  hint = ""
  if key == "labels" and (b"fine_labels" in batch or "fine_labels" in batch):
    hint = " It has fine_labels: that is a CIFAR-100 file, not CIFAR-10."
  raise ValueError(f"{path}: the batch dict has no {key.encode('ascii')!r} key (keys: "
                   f"{found}); a CIFAR-10 batch has b'data' and b'labels'.{hint} Use the "
                   f"files of {_WHERE}.")


def _check_data(data: Any, path: str) -> np.ndarray:
  """`data` as a (N, 3072) uint8 array, or a ValueError saying what is wrong with it."""
  if not isinstance(data, np.ndarray):
    raise ValueError(f"{path}: b'data' is a {type(data).__name__}, not a NumPy array of "
                     f"shape (N, {NUM_VIS}); not a CIFAR-10 python-version batch.")
  if data.ndim != 2 or data.shape[1] != NUM_VIS:
    raise ValueError(
        f"{path}: b'data' has shape {data.shape}; a CIFAR-10 batch holds one image per row, "
        f"shape (N, {NUM_VIS}) (1024 red, 1024 green, 1024 blue values of a 32x32 image). "
        "Is it CIFAR-10 (not another data set or a reshaped copy)?")
  if data.dtype == np.uint8:
    return data
  if not np.issubdtype(data.dtype, np.integer):
    raise ValueError(f"{path}: b'data' has dtype {data.dtype}; CIFAR-10 pixels are uint8 "
                     "(0-255). Write the batch again from the uint8 pixels.")
  if data.size and (int(data.min()) < 0 or int(data.max()) > 255):
    raise ValueError(f"{path}: b'data' ({data.dtype}) has values in [{int(data.min())}, "
                     f"{int(data.max())}]; CIFAR-10 pixels are uint8 (0-255).")
  return data.astype(np.uint8)


def _check_labels(labels: Any, num_rows: int, path: str) -> np.ndarray:
  """`labels` as an int64 (num_rows,) array in 0–9, or a ValueError saying what is wrong."""
  try:
    array = np.asarray(labels)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: b'labels' is not a list of ints ({e}).") from e
  if array.ndim != 1 or not (array.size == 0 or np.issubdtype(array.dtype, np.integer)):
    raise ValueError(f"{path}: b'labels' must be a list of ints in 0-{NUM_CLASSES - 1}; got "
                     f"{type(labels).__name__} of dtype {array.dtype} and shape {array.shape}.")
  if array.size != num_rows:
    raise ValueError(f"{path}: {array.size} labels for {num_rows} images (rows of b'data'); "
                     f"a batch has one label per image. Download and extract {ARCHIVE} "
                     "again.")
  if array.size and (int(array.min()) < 0 or int(array.max()) >= NUM_CLASSES):
    bad = array[(array < 0) | (array >= NUM_CLASSES)]
    raise ValueError(f"{path}: label {int(bad[0])} is outside 0-{NUM_CLASSES - 1} "
                     f"({bad.size} such); CIFAR-10 has {NUM_CLASSES} classes (is this "
                     "CIFAR-100?).")
  return array.astype(np.int64)


def read_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
  """The images and labels of one CIFAR-10 python-version batch file.

  Args:
    path: a batch file, e.g. `cifar-10-batches-py/data_batch_1`.

  Returns:
    (images, labels): images (N, 32, 32, 3) float32 in [0, 1] (pixel value / 255, HWC:
    `images[n, r, c, k]` is channel k (0 red, 1 green, 2 blue) of row r, column c), labels
    (N,) int64 in 0–9.

  Raises:
    ValueError: naming `path` and what is wrong — a missing file, not a pickle or truncated,
      a global a NumPy array does not need (refused unexecuted), not a dict, no data or
      labels key, data not (N, 3072) or not 0–255 integers, as many labels as rows, labels
      outside 0–9.
    OSError: the file exists but cannot be read.
  """
  path = os.fspath(path)
  batch = _unpickle(path)
  if not isinstance(batch, dict):
    raise ValueError(f"{path}: the pickle holds a {type(batch).__name__}, not the dict of a "
                     f"CIFAR-10 batch (b'data', b'labels', …). Use the files of {_WHERE}.")
  data = _check_data(_get(batch, "data", path), path)
  labels = _check_labels(_get(batch, "labels", path), data.shape[0], path)
  height, width, channels = IMAGE_SHAPE
  chw = data.reshape(data.shape[0], channels, height, width)
  images = chw.transpose(0, 2, 3, 1).astype(np.float32) / np.float32(255.0)
  return np.ascontiguousarray(images), labels


def write_batch(path: str, images_uint8_hwc: np.ndarray, labels: Sequence[int],
                batch_label: str = "fixture batch 1 of 1") -> str:
  """Writes a CIFAR-10 python-version batch file (for tests and small fixtures).

  The file is what the real ones are: a protocol-2 pickle of a dict with byte-string keys,
  `b"data"` (N, 3072) uint8 in CHW row layout, `b"labels"` a list of ints, `b"batch_label"`
  and `b"filenames"` byte strings.

  Args:
    path: the file to write.
    images_uint8_hwc: (N, 32, 32, 3) uint8 images, HWC.
    labels: N ints in 0–9.
    batch_label: stored as `b"batch_label"`.

  Returns:
    `path`.
  """
  images = np.asarray(images_uint8_hwc)
  if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
    raise ValueError(f"write_batch: `images_uint8_hwc` must be uint8 of shape (N, 32, 32, 3); "
                     f"got {images.dtype} of shape {images.shape} (for floats in [0, 1] pass "
                     "np.round(x * 255).astype(np.uint8)).")
  label_list = [_checks.check_nonnegative_int("labels[i]", y) for y in labels]
  if len(label_list) != images.shape[0] or any(y >= NUM_CLASSES for y in label_list):
    raise ValueError(f"write_batch: `labels` must be {images.shape[0]} ints in "
                     f"0-{NUM_CLASSES - 1}; got {len(label_list)} with maximum "
                     f"{max(label_list, default=None)}.")
  data = np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(images.shape[0], NUM_VIS))
  batch = {
      b"batch_label": batch_label.encode("utf-8"),
      b"labels": label_list,
      b"data": data,
      b"filenames": [f"fixture_{i:05d}.png".encode("ascii") for i in range(len(label_list))],
  }
  with open(path, "wb") as f:
    pickle.dump(batch, f, protocol=2)
  return path


def batches_dir(data_dir: str) -> str:
  """The directory holding the batch files: `data_dir` itself or `data_dir/cifar-10-batches-py`.

  Raises:
    ValueError: naming `data_dir` and the missing files when neither holds them all.
  """
  if not data_dir:
    raise ValueError(f"CIFAR-10 needs --data_dir: the {BATCHES_DIR} directory of {_WHERE} "
                     "(or its parent).")
  data_dir = os.fspath(data_dir)
  if not os.path.isdir(data_dir):
    raise ValueError(f"--data_dir={data_dir!r} is not a directory; point it at the "
                     f"{BATCHES_DIR} directory of {_WHERE}.")
  needed = TRAIN_FILES + (TEST_FILE,)
  candidates = [data_dir, os.path.join(data_dir, BATCHES_DIR)]
  for candidate in candidates:
    if all(os.path.isfile(os.path.join(candidate, name)) for name in needed):
      return candidate
  where = candidates[1] if os.path.isdir(candidates[1]) else data_dir
  missing = [name for name in needed if not os.path.isfile(os.path.join(where, name))]
  hint = ""
  if os.path.exists(os.path.join(data_dir, ARCHIVE)):
    hint = f" {ARCHIVE} is there: extract it (tar xzf {ARCHIVE})."
  raise ValueError(f"--data_dir={data_dir!r}: {where} lacks {', '.join(missing)} (neither "
                   f"{data_dir} nor {candidates[1]} holds all of {', '.join(needed)}). "
                   f"Point --data_dir at the {BATCHES_DIR} directory of {_WHERE}.{hint}")


def load(data_dir: str, max_train: Optional[int] = None
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """CIFAR-10's training set (the five batches, in order) and test set from `data_dir`.

  Args:
    data_dir: the `cifar-10-batches-py` directory or its parent.
    max_train: keep only the first `max_train` training images (file order); batches past
      them are not read (they must still exist). None keeps all 50,000.

  Returns:
    (train_x, train_y, test_x, test_y): images (N, 32, 32, 3) float32 in [0, 1], labels (N,)
    int64 in 0–9, as from `read_batch`.
  """
  if max_train is not None:
    max_train = _checks.check_positive_int("max_train", max_train)
  directory = batches_dir(data_dir)
  xs, ys = [], []
  count = 0
  for name in TRAIN_FILES:
    if max_train is not None and count >= max_train:
      break
    x, y = read_batch(os.path.join(directory, name))
    xs.append(x)
    ys.append(y)
    count += y.size
  train_x, train_y = np.concatenate(xs), np.concatenate(ys)
  if max_train is not None:
    train_x, train_y = train_x[:max_train], train_y[:max_train]
  test_x, test_y = read_batch(os.path.join(directory, TEST_FILE))
  return train_x, train_y, test_x, test_y
