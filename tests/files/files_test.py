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


def test_atomic_output_appears_whole_or_not_at_all(tmp_path):
  path = tmp_path / "b.bin"
  with files.atomic_output(str(path)) as f:
    f.write(b"first")
    assert not path.exists()  # Nothing visible before the block ends.
  assert path.read_bytes() == b"first"
  with pytest.raises(RuntimeError):
    with files.atomic_output(str(path)) as f:
      f.write(b"second, half")
      raise RuntimeError("writer failed")
  assert path.read_bytes() == b"first"
  assert os.listdir(tmp_path) == ["b.bin"]


def test_build_once_builds_only_when_missing(tmp_path):
  path = tmp_path / "cache" / "corpus.txt"
  calls = []

  def build(target):
    calls.append(target)
    files.atomic_write_text(target, "built")

  assert files.build_once(str(path), build) == str(path)
  assert files.build_once(str(path), build) == str(path)
  assert calls == [str(path)] and path.read_text() == "built"
  with pytest.raises(ValueError):  # A failed build leaves nothing; the next call retries.
    files.build_once(str(tmp_path / "cache" / "other.txt"),
                     lambda _: (_ for _ in ()).throw(ValueError("no")))
  assert not (tmp_path / "cache" / "other.txt").exists()


def test_a_cache_that_cannot_be_created_is_named_with_its_home_and_fix(tmp_path, monkeypatch):
  # Found by a hostile-input pass (#43): HOME=/proc gave "No such file or directory:
  # /proc/.cache" without saying that it was the corpus cache or what to do.
  blocker = tmp_path / "home"
  blocker.write_text("a file where HOME's directory should be")
  monkeypatch.setenv("HOME", str(blocker))
  cache = os.path.join(os.path.expanduser("~"), ".cache", "x", "corpus.txt")
  with pytest.raises(ValueError) as refused:
    files.build_once(cache, lambda _: None, "the corpus cache", "pass --cache_dir DIR")
  message = str(refused.value)
  assert message.startswith("the corpus cache ") and f"(under HOME={blocker})" in message
  assert message.endswith("pass --cache_dir DIR.")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
