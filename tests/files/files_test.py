"""dp_fl.files: atomic writes leave either the old file or the new one, never a partial one."""

from __future__ import annotations

import json
import os

import pytest

from dp_fl import files


def test_writes_and_replaces(tmp_path):
  path = tmp_path / "a.json"
  files.atomic_write_text(str(path), "old")
  files.atomic_write_json(str(path), {"x": [1, 2]}, indent=1)
  assert json.loads(path.read_text(encoding="utf-8")) == {"x": [1, 2]}
  assert os.listdir(tmp_path) == ["a.json"]  # No temporary file left.
  assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
  path = tmp_path / "a.json"
  files.atomic_write_text(str(path), "old")
  with pytest.raises(TypeError):
    files.atomic_write_json(str(path), {"x": object()})  # Fails while serializing.
  with pytest.raises(TypeError):
    files.atomic_write_text(str(path), b"not text")  # Fails while writing.
  assert path.read_text(encoding="utf-8") == "old"
  assert os.listdir(tmp_path) == ["a.json"]


def test_a_missing_directory_is_an_error(tmp_path):
  with pytest.raises(FileNotFoundError):
    files.atomic_write_text(str(tmp_path / "missing" / "a.txt"), "x")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
