"""Typed settings: the fields of a registry entry's settings dataclass, each also a flag.

A mechanism, participation scheme or runtime that reads flags of its own declares them as a
frozen dataclass of `setting(...)` fields (training's registry generates the flags, checks that
a run passes only the flags its entries read, and saves the privacy-relevant ones with every
checkpoint); one that reads none declares `NoSettings`.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def setting(default: Any, help: str, *, privacy: bool = False,  # pylint: disable=redefined-builtin
            aliases: tuple[str, ...] = ()) -> Any:
  """A field of a settings dataclass, which is also the flag `--<field name>`.

  Args:
    default: the flag's default.
    help: the flag's help text.
    privacy: whether the value is part of the run's privacy guarantee (saved with every
      checkpoint; a resumed run may not change it).
    aliases: earlier names of the flag and field, still read from command lines, config.json
      and checkpoints.
  """
  return dataclasses.field(default=default, metadata={"help": help, "privacy": privacy,
                                                      "aliases": tuple(aliases)})


@dataclasses.dataclass(frozen=True)
class NoSettings:
  """The settings of a name that reads no flag of its own."""
