"""Typed settings: the fields of a registry entry's settings dataclass, each also a flag.

A mechanism, participation scheme or runtime that reads flags of its own declares them as a
frozen dataclass of `setting(...)` fields (training's registry generates the flags, checks that
a run passes only the flags its entries read, and saves the privacy-relevant ones with every
checkpoint); one that reads none declares `NoSettings`.
"""

from __future__ import annotations

import dataclasses
from typing import Any


_NO_VALUE = object()


def setting(default: Any, help: str, *, privacy: bool = False,  # pylint: disable=redefined-builtin
            aliases: tuple[str, ...] = (), absent: Any = _NO_VALUE) -> Any:
  """A field of a settings dataclass, which is also the flag `--<field name>`.

  Args:
    default: the flag's default.
    help: the flag's help text.
    privacy: whether the value is part of the run's privacy guarantee (saved with every
      checkpoint; a resumed run may not change it).
    aliases: earlier names of the flag and field, still read from command lines, config.json
      and checkpoints.
    absent: the value a saved config.json or checkpoint record that lacks the field had (the
      behaviour of versions before the field existed), where it differs from `default` —
      a default changed later must not change what an older run is read as.
  """
  metadata = {"help": help, "privacy": privacy, "aliases": tuple(aliases)}
  if absent is not _NO_VALUE:
    metadata["absent"] = absent
  return dataclasses.field(default=default, metadata=metadata)


def absent_value(field: dataclasses.Field) -> Any:
  """What a saved record lacking `field` held: its `absent` value, else its default."""
  return field.metadata.get("absent", field.default)


@dataclasses.dataclass(frozen=True)
class NoSettings:
  """The settings of a name that reads no flag of its own."""
