"""tasks.stackoverflow.data: a facade over the data modules, each name held by one module."""

from __future__ import annotations

import ast
import os

import pytest

from tasks.stackoverflow import baselines
from tasks.stackoverflow import data
from tasks.stackoverflow import database
from tasks.stackoverflow import in_memory
from tasks.stackoverflow import preprocessing
from tasks.stackoverflow import vocab

_MODULES = (database, vocab, preprocessing, in_memory, baselines)


def _package_imports(module) -> set[str]:
  """The `tasks.stackoverflow` modules that `module`'s source imports."""
  with open(module.__file__, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == "tasks.stackoverflow":
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
        "tasks.stackoverflow."):
      names.add(node.module.split(".")[2])
    elif isinstance(node, ast.Import):
      names.update(alias.name.split(".")[2] for alias in node.names
                   if alias.name.startswith("tasks.stackoverflow."))
  return names


@pytest.mark.parametrize("name", data.__all__)
def test_each_name_is_held_by_exactly_one_module(name):
  homes = [m for m in _MODULES if name in vars(m)]
  assert len(homes) == 1, (name, [m.__name__ for m in homes])
  assert getattr(data, name) is vars(homes[0])[name]


def test_all_lists_every_public_name_of_the_facade():
  public = {name for name, value in vars(data).items()
            if not name.startswith("_") and getattr(value, "__module__", None) != "typing"
            and not isinstance(value, type(os)) and name != "annotations"}
  assert public == set(data.__all__)


@pytest.mark.parametrize("module", _MODULES, ids=lambda m: m.__name__.split(".")[-1])
def test_data_modules_import_neither_the_facade_nor_the_generator(module):
  imported = _package_imports(module)
  assert "data" not in imported
  assert "synthetic" not in imported


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
