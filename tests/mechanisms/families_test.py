"""dp_fl/mechanisms/families.py: importing it registers every mechanism family."""

from __future__ import annotations

import pytest

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


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
