"""scripts/paper004_figures: every figure computed (quick settings), written as JSON, drawn
from the JSON alone, redrawn with --replot; bad flags exit 2 naming the flag."""

from __future__ import annotations

import json
import os

import pytest

from scripts import paper004_figures


def test_every_figure_is_written_as_json_and_png_and_replots(capsys, tmp_path):
  assert paper004_figures.main(["--quick", f"--out_dir={tmp_path}", "--format=json"]) == 0
  rows = json.loads(capsys.readouterr().out)
  names = [f.name for f in paper004_figures.FIGURES]
  assert [r["figure"] for r in rows] == names
  assert [n[:5] for n in names] == ["fig01", "fig02", "fig03", "fig04", "fig05", "fig06",
                                    "fig08", "fig09", "fig10"]
  for row in rows:
    data = json.loads((tmp_path / f"{row['figure']}.json").read_text())
    assert data["caption"] and "paper" in data
    assert os.path.getsize(row["png"]) > 5_000
  # --replot draws again from the JSON alone (computing nothing), the same files.
  before = {r["figure"]: os.path.getmtime(r["json"]) for r in rows}
  assert paper004_figures.main(["--replot", f"--out_dir={tmp_path}", "--only=fig02,fig10",
                                "--format=json"]) == 0
  replotted = json.loads(capsys.readouterr().out)
  assert [r["figure"][:5] for r in replotted] == ["fig02", "fig10"]
  assert all(os.path.getmtime(r["json"]) == before[r["figure"]] for r in replotted)


@pytest.mark.parametrize("flags,named", [
    (["--only=fig07"], "--only"),
    (["--only=fig1"], "--only"),
    (["--replot", "--only=fig02"], "--replot"),
])
def test_bad_flags_exit_2_naming_the_flag(capsys, tmp_path, flags, named):
  assert paper004_figures.main([f"--out_dir={tmp_path / 'empty'}", *flags]) == 2
  assert named in capsys.readouterr().err


def test_replot_refuses_another_figures_json(capsys, tmp_path):
  assert paper004_figures.main(["--quick", f"--out_dir={tmp_path}", "--only=fig10"]) == 0
  capsys.readouterr()
  data = json.loads((tmp_path / "fig10_blt_toeplitz_coefficients.json").read_text())
  assert data["figure"] == "fig10_blt_toeplitz_coefficients" and data["quick"] is True
  (tmp_path / "fig09_epsilon_vs_rounds.json").write_text(json.dumps(data))
  assert paper004_figures.main(["--replot", f"--out_dir={tmp_path}", "--only=fig09"]) == 2
  assert "fig10_blt_toeplitz_coefficients" in capsys.readouterr().err


def test_committed_figures_replot_from_their_json(capsys, tmp_path):
  """docs/figures holds every figure's JSON, named for it and computed at full size."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  committed = os.path.join(root, "docs", "figures")
  for figure in paper004_figures.FIGURES:
    data = json.loads(open(os.path.join(committed, figure.name + ".json"),
                           encoding="utf-8").read())
    assert data["figure"] == figure.name and data["quick"] is False
    with open(tmp_path / (figure.name + ".json"), "w", encoding="utf-8") as f:
      json.dump(data, f)
  assert paper004_figures.main(["--replot", f"--out_dir={tmp_path}"]) == 0


def test_unwritable_out_dir(capsys, tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  assert paper004_figures.main([f"--out_dir={blocker}/figs", "--quick", "--only=fig10"]) == 2
  assert "--out_dir" in capsys.readouterr().err


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
