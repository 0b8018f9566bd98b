"""Every test module runs its tests when executed as a script — how `bazel test` runs it.

A py_test executes its file as `__main__`; a module without the pytest footer imports, defines
its tests, runs none and passes. This test finds such modules (and ones a BUILD file does not
list) so that no test can pass under Bazel without running.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re

import pytest

FOOTER = re.compile(r'^if __name__ == "__main__":\n  raise SystemExit\(pytest\.main\(\[__file__',
                    re.MULTILINE)


def _tests_root() -> str:
  """tests/ of the source tree (under Bazel the runfile is a link into it)."""
  return os.path.dirname(os.path.realpath(__file__))


def _modules() -> list[str]:
  return sorted(glob.glob(os.path.join(_tests_root(), "**", "*_test.py"), recursive=True))


def test_the_source_tree_is_found():
  assert len(_modules()) > 50, _tests_root()


def test_every_test_module_runs_pytest_as_a_script():
  missing = [os.path.relpath(p, _tests_root()) for p in _modules()
             if not FOOTER.search(open(p, encoding="utf-8").read())]
  assert not missing, ("these test modules pass under `bazel test` without running a test; end "
                       "them with the pytest footer (docs/CONVENTIONS.md): " + ", ".join(missing))


def test_every_test_module_is_a_bazel_target():
  unlisted = []
  for path in _modules():
    build = os.path.join(os.path.dirname(path), "BUILD")
    text = open(build, encoding="utf-8").read() if os.path.exists(build) else ""
    name = os.path.basename(path)
    patterns = re.findall(r'"([^"]*\*[^"]*)"', " ".join(re.findall(r"glob\((.*?)\)", text)))
    if f'"{name}"' not in text and not any(fnmatch.fnmatch(name, p) for p in patterns):
      unlisted.append(os.path.relpath(path, _tests_root()))
  assert not unlisted, "no py_test in the BUILD file runs " + ", ".join(unlisted)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
