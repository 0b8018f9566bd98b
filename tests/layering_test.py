"""The import graph of dp_fl has layers: a module imports only its own layer or lower ones.

Every import of every module under dp_fl/ is read with `ast` — function-level and
`TYPE_CHECKING` imports included, since a circle that only closes at run time is still a
circle — and checked against `LAYERS` (the table of the root README's "Architecture"):

  - no import circle between modules;
  - no back edge: a module importing a higher layer (dp_fl importing tasks/ or scripts/
    included);
  - the math layers (mechanisms, accounting, participation) import neither TensorFlow nor TFF;
  - planning, decentralized and paper_figures never import dp_fl.training (checked apart so
    that the message says so even if the table changes).

A package or ground-floor module missing from the table fails the test: add it to `LAYERS`
(and to the README's table) at the layer it belongs to.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from typing import Iterable, Mapping, Optional, Sequence

import pytest

# Lowest first. Ground-floor modules are listed one by one; a package covers its submodules.
GROUND_FLOOR = 0
LAYERS: dict[str, int] = {
    "dp_fl": GROUND_FLOOR,  # the package's __init__ (its version)
    "dp_fl._checks": GROUND_FLOOR,
    "dp_fl.files": GROUND_FLOOR,
    "dp_fl.exits": GROUND_FLOOR,
    "dp_fl.resources": GROUND_FLOOR,
    "dp_fl.writers": GROUND_FLOOR,
    "dp_fl.results": GROUND_FLOOR,
    "dp_fl.root_finding": GROUND_FLOOR,
    "dp_fl.settings": GROUND_FLOOR,
    "dp_fl.mechanisms": 1,
    "dp_fl.accounting": 2,
    "dp_fl.participation": 3,
    "dp_fl.aggregators": 4,
    "dp_fl.execution": 5,
    "dp_fl.training": 6,
    "dp_fl.planning": 7,
    "dp_fl.decentralized": 7,
    "dp_fl.paper_figures": 7,
}
# Outside dp_fl, above every layer: nothing in dp_fl may import them.
OUTSIDE = {"tasks": 8, "scripts": 8, "tests": 8}
MATH_PACKAGES = ("dp_fl.mechanisms", "dp_fl.accounting", "dp_fl.participation")
FRAMEWORKS = ("tensorflow", "tensorflow_federated")
TOP_PACKAGES = ("dp_fl.planning", "dp_fl.decentralized", "dp_fl.paper_figures")


@dataclasses.dataclass(frozen=True)
class Import:
  """One import statement's target, where it is written."""
  target: str  # dotted name: a dp_fl module if it resolves to one, else what was imported
  path: str
  line: int

  def where(self) -> str:
    return f"{self.path}:{self.line}"


def _repo_root() -> str:
  """The source tree (under Bazel this file is a link into it)."""
  return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def module_files(root: str) -> dict[str, str]:
  """{dotted module name: path relative to root} of every .py file under root/dp_fl."""
  found = {}
  for directory, _, names in os.walk(os.path.join(root, "dp_fl")):
    for name in sorted(names):
      if not name.endswith(".py"):
        continue
      relative = os.path.relpath(os.path.join(directory, name), root)
      parts = relative[:-len(".py")].split(os.sep)
      if parts[-1] == "__init__":
        parts = parts[:-1]
      found[".".join(parts)] = relative
  return found


def imports_of(source: str, module: str, path: str, is_package: bool,
               known: Iterable[str]) -> list[Import]:
  """Every import in `source` (any depth of the syntax tree), resolved to a known module where
  it names one: `from dp_fl.training import outputs` is the module dp_fl.training.outputs."""
  known = set(known)
  package = module if is_package else module.rpartition(".")[0]
  found = []
  for node in ast.walk(ast.parse(source, filename=path)):
    if isinstance(node, ast.Import):
      found += [Import(alias.name, path, node.lineno) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
      for alias in node.names:
        candidate = f"{base}.{alias.name}"
        found.append(Import(candidate if candidate in known else base, path, node.lineno))
  return found


def import_graph(root: str) -> dict[str, list[Import]]:
  """{module: its imports} for every module under root/dp_fl."""
  files = module_files(root)
  graph = {}
  for module, relative in files.items():
    with open(os.path.join(root, relative), encoding="utf-8") as f:
      source = f.read()
    graph[module] = imports_of(source, module, relative, relative.endswith("__init__.py"),
                               files)
  return graph


def layer_of(name: str, layers: Mapping[str, int]) -> Optional[int]:
  """The layer of a dotted module name; None if the table does not place it.

  Exact entries win; otherwise the longest package entry containing it. "dp_fl" itself
  covers only the package's __init__, never its submodules.
  """
  if name in layers:
    return layers[name]
  parts = name.split(".")
  for end in range(len(parts) - 1, 0, -1):
    prefix = ".".join(parts[:end])
    if prefix in layers and prefix != "dp_fl":
      return layers[prefix]
  top = parts[0]
  return OUTSIDE.get(top) if top != "dp_fl" else None


def _is_ours(name: str) -> bool:
  return name.split(".")[0] in ("dp_fl", *OUTSIDE)


def _within(name: str, package: str) -> bool:
  return name == package or name.startswith(package + ".")


def unplaced(graph: Mapping[str, Sequence[Import]], layers: Mapping[str, int]) -> list[str]:
  """Modules of dp_fl the table does not place, with a message saying what to do."""
  return [f"{module} is in no layer: add it (or its package) to LAYERS in "
          "tests/layering_test.py and to the layer table of README.md's Architecture section "
          "(a new package also adds its :sources filegroup to the test's data in tests/BUILD)"
          for module in sorted(graph) if layer_of(module, layers) is None]


def back_edges(graph: Mapping[str, Sequence[Import]], layers: Mapping[str, int]) -> list[str]:
  """Imports of a higher layer, as 'file:line: a (layer i) imports b (layer j)'."""
  problems = []
  for module, imports in sorted(graph.items()):
    own = layer_of(module, layers)
    for imp in imports:
      if not _is_ours(imp.target) or own is None:
        continue
      theirs = layer_of(imp.target, layers)
      if theirs is None or theirs > own:
        problems.append(f"{imp.where()}: {module} (layer {own}) imports {imp.target} "
                        f"(layer {theirs})")
  return problems


def forbidden_imports(graph: Mapping[str, Sequence[Import]]) -> list[str]:
  """TensorFlow/TFF in the math layers; dp_fl.training from the top packages."""
  problems = []
  for module, imports in sorted(graph.items()):
    for imp in imports:
      if any(_within(module, p) for p in MATH_PACKAGES) and any(
          _within(imp.target, f) for f in FRAMEWORKS):
        problems.append(f"{imp.where()}: {module} is math (NumPy/SciPy) but imports "
                        f"{imp.target}")
      if any(_within(module, p) for p in TOP_PACKAGES) and _within(imp.target,
                                                                   "dp_fl.training"):
        problems.append(f"{imp.where()}: {module} imports {imp.target}; planning, "
                        "decentralized and paper_figures must not import dp_fl.training "
                        "(dp_fl.writers has the generic figure/CSV/TensorBoard writers)")
  return problems


def cycles(graph: Mapping[str, Sequence[Import]]) -> list[list[Import]]:
  """One import circle per strongly connected component of the module graph (Tarjan), as the
  imports that close it: a imports b imports … imports a."""
  edges = {m: sorted({i.target for i in imports if i.target in graph and i.target != m})
           for m, imports in graph.items()}
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  components = []

  def visit(node: str) -> None:
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for nxt in edges[node]:
      if nxt not in index:
        visit(nxt)
        low[node] = min(low[node], low[nxt])
      elif nxt in on_stack:
        low[node] = min(low[node], index[nxt])
    if low[node] == index[node]:
      component = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
          break
      if len(component) > 1:
        components.append(set(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return [_circle(graph, component) for component in components]


def _circle(graph: Mapping[str, Sequence[Import]], component: set[str]) -> list[Import]:
  """A shortest circle through the component's first module (breadth-first search)."""
  start = min(component)
  previous: dict[str, tuple[str, Import]] = {}
  frontier = [start]
  while frontier:
    following = []
    for module in frontier:
      for imp in graph[module]:
        if imp.target not in component or imp.target in previous:
          continue
        previous[imp.target] = (module, imp)
        if imp.target == start:
          following = []
          break
        following.append(imp.target)
      if start in previous:
        break
    frontier = following
  path, node = [], start
  while True:
    module, imp = previous[node]
    path.append(imp)
    node = module
    if node == start:
      return path[::-1]


def describe_circle(circle: Sequence[Import]) -> str:
  modules = [os.path.splitext(i.path)[0].replace(os.sep, ".") for i in circle]
  chain = " -> ".join(f"{m} ({i.where()})" for m, i in zip(modules, circle))
  return f"import circle: {chain} -> {circle[0].path}"


# ------------------------------------------------------------------------------------------
# The checker on small synthetic graphs: it can fail.

def _graph(edges: Mapping[str, Sequence[str]]) -> dict[str, list[Import]]:
  return {m: [Import(t, f"{m.replace('.', '/')}.py", n + 1) for n, t in enumerate(targets)]
          for m, targets in edges.items()}


def test_the_checker_finds_a_circle_and_names_its_imports():
  graph = _graph({"dp_fl.training.a": ["dp_fl.training.b"],
                  "dp_fl.training.b": ["dp_fl.training.c", "numpy"],
                  "dp_fl.training.c": ["dp_fl.training.a"],
                  "dp_fl.training.d": ["dp_fl.training.a"]})
  found = cycles(graph)
  assert len(found) == 1
  assert [i.target for i in found[0]] == ["dp_fl.training.b", "dp_fl.training.c",
                                         "dp_fl.training.a"]
  assert "dp_fl/training/a.py:1" in describe_circle(found[0])
  assert not cycles(_graph({"dp_fl.files": [], "dp_fl.exits": ["dp_fl.files"]}))


def test_the_checker_finds_back_edges_and_forbidden_imports():
  graph = _graph({"dp_fl.exits": ["dp_fl.execution.runtime"],
                  "dp_fl.mechanisms.m": ["dp_fl.files", "tensorflow"],
                  "dp_fl.planning.p": ["dp_fl.training.outputs", "dp_fl.mechanisms.m"],
                  "dp_fl.training.t": ["tasks.stackoverflow.train"]})
  assert back_edges(graph, LAYERS) == [
      "dp_fl/exits.py:1: dp_fl.exits (layer 0) imports dp_fl.execution.runtime (layer 5)",
      "dp_fl/training/t.py:1: dp_fl.training.t (layer 6) imports tasks.stackoverflow.train "
      "(layer 8)"]
  problems = forbidden_imports(graph)
  assert len(problems) == 2
  assert problems[0].startswith("dp_fl/mechanisms/m.py:2: dp_fl.mechanisms.m is math")
  assert problems[1].startswith("dp_fl/planning/p.py:1: dp_fl.planning.p imports "
                                "dp_fl.training.outputs")


def test_the_checker_refuses_a_package_missing_from_the_table():
  graph = _graph({"dp_fl.newpackage.thing": ["dp_fl.files"], "dp_fl.files": []})
  assert layer_of("dp_fl.newpackage.thing", LAYERS) is None
  [message] = unplaced(graph, LAYERS)
  assert "dp_fl.newpackage.thing is in no layer: add it" in message
  assert back_edges(_graph({"dp_fl.files": ["dp_fl.newpackage"]}), LAYERS) == [
      "dp_fl/files.py:1: dp_fl.files (layer 0) imports dp_fl.newpackage (layer None)"]


def test_imports_are_read_at_any_depth_and_resolved_to_modules():
  source = ("from dp_fl import files\n"
            "import dp_fl.exits as exits\n"
            "def f():\n"
            "  from dp_fl.training import outputs  # lazy\n"
            "  from . import sibling\n"
            "  from dp_fl.training.config import TrainingConfig\n")
  known = {"dp_fl.files", "dp_fl.exits", "dp_fl.training.outputs", "dp_fl.training.sibling",
           "dp_fl.training.config"}
  found = imports_of(source, "dp_fl.training.x", "dp_fl/training/x.py", False, known)
  assert [(i.target, i.line) for i in found] == [
      ("dp_fl.files", 1), ("dp_fl.exits", 2), ("dp_fl.training.outputs", 4),
      ("dp_fl.training.sibling", 5), ("dp_fl.training.config", 6)]


# ------------------------------------------------------------------------------------------
# The repository.

@pytest.fixture(scope="module")
def graph() -> dict[str, list[Import]]:
  found = import_graph(_repo_root())
  assert len(found) > 50, _repo_root()
  return found


def test_every_module_is_in_a_layer(graph):
  problems = unplaced(graph, LAYERS)
  assert not problems, "\n".join(problems)


def test_no_import_circles(graph):
  found = cycles(graph)
  assert not found, "\n".join(describe_circle(c) for c in found)


def test_no_module_imports_a_higher_layer(graph):
  problems = back_edges(graph, LAYERS)
  assert not problems, ("a module may import only its own layer or lower ones (README.md, "
                        "Architecture):\n" + "\n".join(problems))


def test_math_is_framework_free_and_planning_stays_off_training(graph):
  problems = forbidden_imports(graph)
  assert not problems, "\n".join(problems)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
