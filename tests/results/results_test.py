"""dp_fl.results: compute → JSON → draw; the Markdown and the figures see only the JSON."""

from __future__ import annotations

import json
import os

import pytest

from dp_fl import results
from dp_fl import writers


def _figure(data):
  figure, ax = writers.new_figure()
  ax.plot(data["x"], data["y"])
  return figure


def test_write_stores_json_then_draws_from_the_file(tmp_path):
  seen = []

  def markdown(data):
    seen.append(data)
    return f"| x | y |\n{data['keys']}\n"

  output = {"x": (1, 2, 3), "y": [1.0, 4.0, 9.0], "keys": {1: "one"}}
  paths = results.write(str(tmp_path / "out"), output, "table.json",
                        markdown={"table.md": markdown}, figures={"table.png": _figure})
  assert list(paths) == ["table.json", "table.md", "table.png"]
  assert all(os.path.dirname(p) == str(tmp_path / "out") for p in paths.values())
  text = (tmp_path / "out" / "table.json").read_text()
  assert text == json.dumps(output, indent=1)  # indent=1 by default.
  # Drawn from the JSON read back: tuples are lists, keys are strings.
  assert seen == [{"x": [1, 2, 3], "y": [1.0, 4.0, 9.0], "keys": {"1": "one"}}]
  assert (tmp_path / "out" / "table.md").read_text() == "| x | y |\n{'1': 'one'}\n"
  assert os.path.getsize(paths["table.png"]) > 1000


def test_dump_kwargs_reach_json_and_draw_redraws_from_a_read(tmp_path):
  class Opaque:
    def __str__(self):
      return "opaque"

  results.write(str(tmp_path), {"value": Opaque()}, "r.json", default=str, indent=None)
  assert (tmp_path / "r.json").read_text() == '{"value": "opaque"}'
  data = results.read(str(tmp_path / "r.json"))
  paths = results.draw(str(tmp_path / "again"), data,
                       markdown={"a.md": lambda d: d["value"], "b.md": lambda d: "b"})
  assert list(paths) == ["a.md", "b.md"]
  assert (tmp_path / "again" / "a.md").read_text() == "opaque"


def test_write_json_returns_what_a_reader_gets(tmp_path):
  assert results.write_json(str(tmp_path / "a.json"), {"t": (1, 2)}) == {"t": [1, 2]}


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
