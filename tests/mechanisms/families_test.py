"""dp_fl/mechanisms/families.py: importing it registers every mechanism family."""

from __future__ import annotations

import importlib
import textwrap

import pytest

from dp_fl import mechanisms

from dp_fl.mechanisms import banded_inverse
from dp_fl.mechanisms import bsr
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import families  # pylint: disable=unused-import
from dp_fl.mechanisms import two_band


def test_every_family_is_registered_and_builds():
  names = catalog.names()
  for name in ("blt", "bandmf", "tree", "dpsgd", two_band.NAME, bsr.NAME, banded_inverse.BISR,
               banded_inverse.BANDINVMF):
    assert name in names
    built = catalog.build(name, rounds=8, min_sep=2, max_participations=2)
    assert catalog.from_dict(built.mechanism.to_dict()).to_dict() == built.mechanism.to_dict()
  assert len(set(names)) == len(names)


_TOY_FAMILY = textwrap.dedent('''
    """A mechanism module as the README recipe writes one: it registers its family."""
    from dp_fl.mechanisms import catalog

    catalog.register(catalog.Family(
        "toy_identity", "toy: C = I", lambda options: (catalog.DpSgdMechanism(), ()),
        lambda data: catalog.DpSgdMechanism(), banded=True))
    ''')


def test_a_new_mechanism_module_is_found_without_editing_families(tmp_path, monkeypatch):
  (tmp_path / "toy_identity_family.py").write_text(_TOY_FAMILY, encoding="utf-8")
  monkeypatch.setattr(mechanisms, "__path__", [*mechanisms.__path__, str(tmp_path)])
  monkeypatch.setattr(catalog, "_FAMILIES", dict(catalog._FAMILIES))  # pylint: disable=protected-access
  assert "toy_identity" not in catalog.names()
  importlib.reload(families)
  assert "toy_identity" in catalog.names()
  family = catalog.family("toy_identity")
  assert family.trains and family.banded and family.knobs == ""
  assert catalog.build("toy_identity", rounds=4, min_sep=1, max_participations=4).mechanism


def test_a_family_with_unknown_knobs_is_refused_naming_them(monkeypatch):
  monkeypatch.setattr(catalog, "_FAMILIES", dict(catalog._FAMILIES))  # pylint: disable=protected-access
  family = catalog.Family("toy_knobs", "toy", lambda options: (catalog.DpSgdMechanism(), ()),
                          lambda data: catalog.DpSgdMechanism(), knobs="buffers")
  with pytest.raises(ValueError, match="knobs='buffers'.*'bands'"):
    catalog.register(family)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
