"""The data sets of paper 002's experiments (Sec. 4), split into the workers' shards.

* `sklearn_digits` (default): scikit-learn's bundled 8 × 8 handwritten digits (1,797 images,
  offline), the MNIST stand-in that runs in minutes on 2 cores;
* `mnist`: MNIST from its IDX files in --data_dir (`tasks/digits/data.py` reads them);
* `cifar10`: CIFAR-10's python batches in --data_dir (`cifar10.py` reads them).

Images are flattened in HWC order (the CNN reshapes them back). The training set is split
into m near-equal IID shards by a public permutation (`training.make_shards`); the test set is
shared and not protected.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from dp_fl.decentralized import training
from tasks.decentralized import cifar10
from tasks.digits import data as digits_data

DATASETS = ("sklearn_digits", "mnist", "cifar10")


def load(dataset: str, num_workers: int, data_dir: Optional[str] = None,
         max_train: Optional[int] = None, split_seed: int = 0) -> training.Shards:
  """`dataset`'s training set in `num_workers` shards, and its test set.

  Args:
    dataset: one of `DATASETS`.
    num_workers: m.
    data_dir: MNIST's IDX files or CIFAR-10's batches (not used for sklearn_digits).
    max_train: keep only the first this many training examples (quick runs on big sets).
    split_seed: the public permutation of the train/test split (digits) and of the shards.
  """
  if dataset in ("mnist", "cifar10") and not data_dir:
    raise ValueError(f"--dataset={dataset} reads its files from --data_dir; none given. "
                     "Point --data_dir at the directory holding "
                     + ("MNIST's four IDX files." if dataset == "mnist" else
                        f"{cifar10.BATCHES_DIR} (the extracted {cifar10.ARCHIVE})."))
  if dataset == "cifar10":
    train_x, train_y, test_x, test_y = cifar10.load(data_dir, max_train)
    image_shape, source = cifar10.IMAGE_SHAPE, f"CIFAR-10 python batches in {data_dir}"
    num_classes = cifar10.NUM_CLASSES
  elif dataset in digits_data.DATASETS:
    images = digits_data.load(dataset, data_dir, split_seed=split_seed)
    train_x, train_y = images.train_images, images.train_labels
    test_x, test_y = images.test_images, images.test_labels
    image_shape, source = (*images.image_shape, 1), images.source
    num_classes = digits_data.NUM_CLASSES
  else:
    raise ValueError(f"--dataset={dataset!r} is not known; use one of {', '.join(DATASETS)}.")
  if max_train is not None:
    train_x, train_y = train_x[:max_train], train_y[:max_train]
  return training.make_shards(np.reshape(train_x, (len(train_y), -1)), train_y,
                              np.reshape(test_x, (len(test_y), -1)), test_y, image_shape,
                              num_classes, num_workers, source, split_seed)
