"""Error-message helpers shared by the StackOverflow data modules."""

from __future__ import annotations

from typing import Any, Sequence

_MAX_LISTED = 5


def listed(items: Sequence[Any]) -> str:
  """The first few `items` as reprs, then how many more: "'a', 'b' and 3 more"."""
  shown = ", ".join(repr(item) for item in items[:_MAX_LISTED])
  more = len(items) - _MAX_LISTED
  return shown + (f" and {more} more" if more > 0 else "")
