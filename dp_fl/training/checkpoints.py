"""Atomic, verified checkpoints of a training run; keep the last N; fall back on corruption.

A checkpoint holds everything the next rounds depend on, as the training program hands it
over: the flattened learning-process state (model, server optimizer, aggregator state with the
noise seed, round and buffers), byte blobs (scheduler state with its ledger), and a small JSON
record (rounds completed, metrics position, RNG positions). Layout of `<root>/checkpoints/`:

    ckpt-00000040/
      arrays.npz      the state's arrays, in tf.nest.flatten order (uncompressed, no pickle)
      blobs.npz       named byte blobs (uint8 arrays)
      meta.json       {"round": 40, ...}
      MANIFEST.json   SHA-256 and size of the three files above

A checkpoint is written to a temporary directory and renamed into place, so a crash leaves
either the complete checkpoint or none. `restore_latest` verifies the manifest and, if the
newest checkpoint is damaged (a disk error, a truncated copy), warns and falls back to the one
before. TFF's `FileProgramStateManager` writes in place without integrity checks, hence this
small module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
import warnings
import zipfile
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from dp_fl import _checks

_NAME = re.compile(r"^ckpt-(\d{8})$")
_FILES = ("arrays.npz", "blobs.npz", "meta.json")


class CorruptCheckpointWarning(UserWarning):
  """The newest checkpoint failed verification; an older one is used."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  """A restored checkpoint."""
  round: int
  arrays: list[np.ndarray]
  blobs: dict[str, bytes]
  meta: dict[str, Any]
  path: str


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 22), b""):
      digest.update(chunk)
  return digest.hexdigest()


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
  """`np.savez(path, **arrays)`'s format (a zip of .npy members, read by `np.load`), with
  the zip closed on every path: `np.savez` leaves its ZipFile open when a write fails (a
  full disk), and its finalizer then prints "Exception ignored in ZipFile.__del__"
  tracebacks after the error has been reported."""
  archive = zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True)
  try:
    for name, array in arrays.items():
      with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
        np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
  except BaseException:
    with contextlib.suppress(Exception):
      archive.close()  # Fails again on a full disk; the archive is closed all the same.
    raise
  archive.close()


class CheckpointManager:
  """Saves and restores checkpoints under `directory`, keeping the `keep` newest."""

  def __init__(self, directory: str, keep: int = 3):
    self._dir = directory
    self._keep = _checks.check_positive_int("keep_checkpoints", keep)
    # Created by the first save: a run refused before training leaves no directory behind.
    for name in os.listdir(directory) if os.path.isdir(directory) else ():
      if ".tmp-" in name:  # Leftovers of a save that was killed midway.
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)

  @property
  def directory(self) -> str:
    return self._dir

  def rounds(self) -> list[int]:
    """Rounds of the complete checkpoints present, oldest first (not verified)."""
    out = []
    for name in os.listdir(self._dir) if os.path.isdir(self._dir) else ():
      match = _NAME.match(name)
      if match and os.path.exists(os.path.join(self._dir, name, "MANIFEST.json")):
        out.append(int(match.group(1)))
    return sorted(out)

  def _path(self, round_index: int) -> str:
    return os.path.join(self._dir, f"ckpt-{round_index:08d}")

  def save(self, round_index: int, arrays: Sequence[Any], blobs: Mapping[str, bytes],
           meta: Mapping[str, Any]) -> dict[str, float]:
    """Writes the checkpoint of `round_index` completed rounds; returns seconds and bytes."""
    round_index = _checks.check_nonnegative_int("round_index", round_index)
    start = time.perf_counter()
    final = self._path(round_index)
    tmp = f"{final}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)  # With the checkpoint directory on the first save.
    numeric = {}
    for i, value in enumerate(arrays):
      array = np.asarray(value)
      if array.dtype == object and all(isinstance(v, (bytes, str)) for v in array.flat):
        # A TF string tensor read back by the in-process runtime (TFF's distributed DP
        # state names its DP event): stored as bytes, as TFF's own runtime returns them.
        array = np.asarray([v.encode() if isinstance(v, str) else v for v in array.flat],
                           dtype=np.bytes_).reshape(array.shape)
      if array.dtype == object:
        raise ValueError(f"checkpoint array {i} has dtype object ({type(value).__name__}); "
                         "only numeric and string arrays can be checkpointed.")
      numeric[f"a{i:06d}"] = array
    try:
      write_npz(os.path.join(tmp, "arrays.npz"), numeric)
      write_npz(os.path.join(tmp, "blobs.npz"),
                {k: np.frombuffer(bytes(v), dtype=np.uint8) for k, v in blobs.items()})
      with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(dict(meta, round=round_index, num_arrays=len(numeric)), f, sort_keys=True)
      manifest = {name: {"sha256": _sha256(os.path.join(tmp, name)),
                         "bytes": os.path.getsize(os.path.join(tmp, name))} for name in _FILES}
      with open(os.path.join(tmp, "MANIFEST.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)  # A full disk leaves no partial checkpoint.
      raise
    if os.path.exists(final):  # Re-saving a round (e.g. after a discarded round): replace.
      shutil.rmtree(final)
    os.rename(tmp, final)
    self._prune()
    return {"seconds": time.perf_counter() - start,
            "bytes": float(sum(m["bytes"] for m in manifest.values()))}

  def _prune(self) -> None:
    for round_index in self.rounds()[:-self._keep]:
      shutil.rmtree(self._path(round_index), ignore_errors=True)

  def _load(self, round_index: int) -> Checkpoint:
    path = self._path(round_index)
    with open(os.path.join(path, "MANIFEST.json"), encoding="utf-8") as f:
      manifest = json.load(f)
    for name in _FILES:
      file = os.path.join(path, name)
      if (not os.path.exists(file) or os.path.getsize(file) != manifest[name]["bytes"]
          or _sha256(file) != manifest[name]["sha256"]):
        raise ValueError(f"{file} does not match its manifest (damaged or incomplete).")
    with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
      meta = json.load(f)
    with np.load(os.path.join(path, "arrays.npz"), allow_pickle=False) as data:
      arrays = [data[f"a{i:06d}"] for i in range(meta["num_arrays"])]
    with np.load(os.path.join(path, "blobs.npz"), allow_pickle=False) as data:
      blobs = {k: data[k].tobytes() for k in data.files}
    return Checkpoint(int(meta["round"]), arrays, blobs, meta, path)

  def restore_latest(self) -> Optional[Checkpoint]:
    """The newest checkpoint that verifies; warns about each damaged one skipped."""
    for round_index in reversed(self.rounds()):
      try:
        return self._load(round_index)
      except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        warnings.warn(
            f"Checkpoint of round {round_index} in {self._dir} is unusable ({e}); falling back "
            "to the previous checkpoint.", CorruptCheckpointWarning, stacklevel=2)
    return None
