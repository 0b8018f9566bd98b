"""dp_fl.paper_figures: one module per figure, named for it, listed once in the paper's order."""

from __future__ import annotations

import os
import pkgutil

import pytest

from dp_fl import paper_figures
from dp_fl.paper_figures import figure_spec
from dp_fl.paper_figures import paper004

# The modules of the package that are not a figure: the spec, what figures share, the list.
SHARED = {"figure_spec", "paper004", "privacy_curves", "rms_loss"}


def test_each_figure_is_its_own_module_named_for_it():
  for module in paper004.MODULES:
    assert isinstance(module.FIGURE, figure_spec.PaperFigure)
    assert module.FIGURE.name == module.__name__.rsplit(".", 1)[-1]
    assert module.FIGURE.compute.__module__ == module.__name__  # Its numbers are its own.
  assert [f.name for f in paper004.FIGURES] == [m.FIGURE.name for m in paper004.MODULES]


def test_every_figure_module_is_listed_in_the_paper_order():
  directory = os.path.dirname(paper_figures.__file__)
  modules = {info.name for info in pkgutil.iter_modules([directory])}
  listed = {m.__name__.rsplit(".", 1)[-1] for m in paper004.MODULES}
  assert modules - SHARED == listed
  numbers = [int(f.name[3:5]) for f in paper004.FIGURES]
  assert numbers == sorted(numbers) == [1, 2, 3, 4, 5, 6, 8, 9, 10]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
