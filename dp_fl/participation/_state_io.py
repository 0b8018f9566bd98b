"""Byte (de)serialization of participation state for training checkpoints.

A state blob is an uncompressed NumPy ``.npz`` archive (no pickling, so loading
untrusted bytes cannot execute code) holding named arrays plus one ``uint8``
array with a UTF-8 JSON header: ``{"format": ..., "kind": ..., "version": ...,
"meta": {...}}``. JSON round-trips Python floats exactly (``repr`` precision),
so a restored simulated clock equals the saved one bit for bit.
"""

from __future__ import annotations

import io
import json
from typing import Any, Mapping

import numpy as np

_FORMAT = "dp_fl.participation.state"
_HEADER_KEY = "__header__"


def pack(kind: str, version: int, meta: Mapping[str, Any],
         arrays: Mapping[str, np.ndarray]) -> bytes:
  """Serializes `meta` (JSON-able) and `arrays` into bytes tagged with `kind`."""
  if _HEADER_KEY in arrays:
    raise ValueError(f"`arrays` must not use the reserved key {_HEADER_KEY!r}.")
  header = json.dumps({"format": _FORMAT, "kind": kind, "version": int(version),
                       "meta": dict(meta)}, sort_keys=True, allow_nan=False)
  payload = {name: np.ascontiguousarray(value) for name, value in arrays.items()}
  payload[_HEADER_KEY] = np.frombuffer(header.encode("utf-8"), dtype=np.uint8)
  buffer = io.BytesIO()
  np.savez(buffer, **payload)
  return buffer.getvalue()


def unpack(blob: bytes, expected_kind: str | None = None,
           expected_version: int | None = None
           ) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
  """Inverse of `pack`: returns (kind, meta, arrays); checks kind and version."""
  if not isinstance(blob, (bytes, bytearray, memoryview)):
    raise ValueError(f"`state` must be bytes produced by `to_bytes()`; got {type(blob).__name__}.")
  try:
    with np.load(io.BytesIO(bytes(blob)), allow_pickle=False) as archive:
      arrays = {name: archive[name] for name in archive.files}
  except (OSError, ValueError) as e:
    raise ValueError(
        "`state` is not a participation state blob (expected the bytes returned by "
        f"`to_bytes()`): {e}") from e
  if _HEADER_KEY not in arrays:
    raise ValueError("`state` has no header; pass the bytes returned by `to_bytes()`.")
  header = json.loads(arrays.pop(_HEADER_KEY).tobytes().decode("utf-8"))
  if header.get("format") != _FORMAT:
    raise ValueError(f"`state` has format {header.get('format')!r}; expected {_FORMAT!r}.")
  kind = header["kind"]
  if expected_kind is not None and kind != expected_kind:
    raise ValueError(
        f"`state` holds a {kind!r} state but a {expected_kind!r} state was expected; restore it "
        "with `dp_fl.participation.checkpoint.restore_scheduler` or the matching class.")
  if expected_version is not None and header["version"] != expected_version:
    raise ValueError(
        f"`state` has version {header['version']} but this code reads version "
        f"{expected_version}; restore it with the dp_fl release that wrote it.")
  return kind, header["meta"], arrays
