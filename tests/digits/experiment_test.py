"""tasks.digits.experiment: the binary's outputs (JSON, Markdown, PNG, --replot) and its flag
errors."""

from __future__ import annotations

import json
import os

import pytest

from tasks.digits import experiment
from tasks.digits import results


def test_binary_quick_run_writes_json_markdown_and_png(tmp_path, capsys):
  out_dir = str(tmp_path / "out")
  code = experiment.main(["--quick", "--hidden_layers", "16", "--epsilons", "50",
                          "--levels", "4,16", "--bits", "4,16", "--workers", "1",
                          "--out_dir", out_dir, "--format", "json"])
  assert code == 0
  printed = json.loads(capsys.readouterr().out)
  with open(os.path.join(out_dir, results.RESULTS_JSON), encoding="utf-8") as f:
    written = json.load(f)
  assert printed["rows"] == written["rows"]
  groups = {(r["mechanism"], r["epsilon_target"], r["num_levels"], r["bits"])
            for r in written["rows"]}
  assert groups == {("none", None, None, None), ("gaussian", 50.0, None, None),
                    ("cpsgd", 50.0, 4, None), ("cpsgd", 50.0, 16, None),
                    ("ddgauss", 50.0, None, 4), ("ddgauss", 50.0, None, 16),
                    ("skellam", 50.0, None, 4), ("skellam", 50.0, None, 16)}
  for r in written["rows"]:
    if r["epsilon"] is not None:
      assert r["epsilon"] <= 50.0 * (1 + 1e-9)
    if r["bits"] == 4:  # 2^8 levels cannot hold 200 clients' sum: a row saying so, no runs.
      assert "use more bits" in r["unreachable"] and r["accuracies"] == []
    elif r["bits"] == 16:
      assert r["bits_per_coordinate"] == 16 and r["noise_multiplier"] > 0
      assert r["accuracy_mean"] > 0.1  # Chance; ε = 50 barely noises 200 clients' mean.
  assert {run["mechanism"] for run in written["runs"]} == {
      "none", "gaussian", "cpsgd", "ddgauss", "skellam"}
  assert "replace-one" in written["privacy"] and "No amplification" in written["privacy"]
  text = open(os.path.join(out_dir, results.RESULTS_MD), encoding="utf-8").read()
  assert "| 50 | cpsgd | 16 |" in text and results.FIGURE_PNG in text
  assert "| 50 | ddgauss | — | z = " in text and "not reachable at these bits" in text
  with open(os.path.join(out_dir, results.FIGURE_PNG), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  # --replot rewrites the Markdown and the figure from the JSON alone.
  os.remove(os.path.join(out_dir, results.FIGURE_PNG))
  assert experiment.main(["--replot", os.path.join(out_dir, results.RESULTS_JSON)]) == 0
  assert os.path.exists(os.path.join(out_dir, results.FIGURE_PNG))
  assert "| 50 | cpsgd | 4 |" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--epsilons", "2,x"], "--epsilons='2,x': 'x' is not a number"),
    (["--epsilons", "-1"], "--epsilons: -1 is not a finite ε > 0"),
    (["--levels", "1,4"], "--levels: k = 1 quantization levels"),
    (["--levels", "4.5"], "--levels='4.5': '4.5' is not a whole number"),
    (["--bits", "0,16"], "--bits: B = 0 bits per coordinate"),
    (["--bits", "23"], "--bits: B = 23 bits per coordinate; TFF's distributed DP takes 1..22"),
    (["--bits", "16.5"], "--bits='16.5': '16.5' is not a whole number"),
    (["--mechanisms", "gaussian,laplace"], "unknown ['laplace']"),
    (["--clients_per_round", "0"], "--clients_per_round=0"),
    (["--clients_per_round", "5000"], "--clients_per_round=5000 exceeds the 1438"),
    (["--epochs", "two"], "--epochs='two' is not a whole number"),
    (["--delta", "2"], "--delta=2"),
    (["--binomial_p", "1"], "--binomial_p=1"),
    (["--momentum", "1.5"], "--momentum=1.5"),
    (["--num_seeds", "0"], "--num_seeds=0"),
    (["--hidden_layers", "60,0"], "--hidden_layers='60,0'"),
    (["--dataset", "mnist"], "--dataset=mnist needs --data_dir"),
    (["--dataset", "cifar"], "--dataset='cifar' is not known"),
    (["--replot", "/nonexistent/results.json"], "No such file"),
])
def test_bad_flags_name_the_flag_and_exit_2_or_3(flags, message, capsys):
  code = experiment.main(["--quick", "--workers", "1", *flags])
  err = capsys.readouterr().err
  assert code in (2, 3), err
  assert message in err and "Traceback" not in err


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
