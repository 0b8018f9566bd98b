"""Tests of the run directory's figures and Markdown report (dp_fl/training/figures.py)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dp_fl import writers
from dp_fl.training import figures
from dp_fl.training import outputs


def _run_dir(tmp_path, private=True, rounds=6):
  root = str(tmp_path / "run")
  out = outputs.RunOutputs(root, 0)
  for r in range(1, rounds + 1):
    out.train(r, {"client_work/train/loss": 7.0 - 0.5 * r, "clients": 5})
    if private:
      out.epsilon_so_far(r, 0.4 * r)
  for r in (3, 6):
    out.evaluation(r, {"loss": 6.0 - 0.2 * r, "accuracy": 0.05 * r,
                       "accuracy_without_out_of_vocab_or_end_of_sentence": 0.02 * r})
  out.close()
  if private:
    # The report's row at an evaluation round keeps the progress ε written before it.
    out2 = outputs.RunOutputs(root, rounds)
    out2._privacy.append(6, {"rho": 0.5, "epsilon": 2.2, "delta": 1e-5}, merge=True)
    out2.close()
  summary = {"task": "stackoverflow", "rounds_completed": rounds, "stopped": "completed",
             "message": "", "eval": {"loss": 4.8, "accuracy": 0.3,
                                     "accuracy_without_out_of_vocab_or_end_of_sentence": 0.12},
             "baseline": {"unigram_accuracy": 0.07,
                          "unigram_accuracy_without_out_of_vocab_or_end_of_sentence": 0.09},
             "epsilon": 2.2 if private else None, "delta": 1e-5,
             "realized_participation": {"participation_histogram": [3, 10, 4],
                                        "min_separation": 2}}
  with open(os.path.join(root, "summary.json"), "w") as f:
    json.dump(summary, f)
  with open(os.path.join(root, "config.json"), "w") as f:
    json.dump({"mechanism": "blt" if private else "none"}, f)
  return root


def _is_png(path):
  with open(path, "rb") as f:
    return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_every_figure_is_written_as_png_and_linked_from_the_report(tmp_path):
  root = _run_dir(tmp_path)
  written = figures.write_run_report(root)
  assert set(written) == {"loss", "evaluation", "epsilon", "participation"}
  import matplotlib.image  # pylint: disable=g-import-not-at-top
  for path in written.values():
    assert _is_png(path)
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert np.std(image) > 0  # Not a blank canvas.
  report = open(os.path.join(root, figures.REPORT_FILE)).read()
  for key in written:
    assert f"](figures/{key}.png)" in report
  assert "ε = 2.2 at δ = 1e-05" in report and "privacy_report.md" in report
  assert "| accuracy | 0.3000 | 0.0700 |" in report


def test_privacy_csv_keeps_both_epsilons_of_an_evaluation_round(tmp_path):
  root = _run_dir(tmp_path)
  rows = {r["round"]: r for r in writers.read_csv(os.path.join(root, "metrics", "privacy.csv"))}
  assert float(rows["6"]["epsilon"]) == 2.2
  assert float(rows["6"]["epsilon_so_far"]) == pytest.approx(2.4)
  assert float(rows["5"]["epsilon_so_far"]) == pytest.approx(2.0)


def test_evaluation_figure_draws_each_baseline_at_its_value():
  evaluation = [{"round": 3.0, "accuracy": 0.1, "loss": 5.0},
                {"round": 6.0, "accuracy": 0.2, "loss": 4.0}]
  figure = figures.evaluation_figure(evaluation, {"unigram_accuracy": 0.07}, "t")
  ax = figure.axes[0]
  assert ax.get_title() == "t"
  lines = {line.get_label(): line for line in ax.get_lines()}
  np.testing.assert_allclose(lines["accuracy"].get_ydata(), [0.1, 0.2])
  np.testing.assert_allclose(lines["unigram baseline (0.070)"].get_ydata(), [0.07, 0.07])
  assert "loss" not in lines  # Accuracies only; the loss has its own figure.


def test_epsilon_figure_plots_the_recorded_points():
  privacy = [{"round": 1.0, "epsilon_so_far": 0.5}, {"round": 2.0, "epsilon_so_far": 0.9,
                                                     "epsilon": 0.8}]
  ax = figures.epsilon_figure(privacy, 1e-5, "eps").axes[0]
  ydata = [list(line.get_ydata()) for line in ax.get_lines()]
  assert [0.5, 0.9] in ydata and [0.8] in ydata
  assert ax.get_ylabel() == "ε at δ = 1e-05"


def test_participation_figure_shows_the_histogram_without_the_never_bin():
  ax = figures.participation_figure(
      {"participation_histogram": [7, 10, 4, 1], "min_separation": 5}, "p").axes[0]
  assert [p.get_height() for p in ax.patches] == [10, 4, 1]
  assert "15 clients took part (7 never)" in ax.get_title()
  assert "min-sep 5 rounds" in ax.get_title()


def test_a_non_private_run_has_no_epsilon_figure(tmp_path):
  root = _run_dir(tmp_path, private=False)
  written = figures.write_run_report(root)
  assert "epsilon" not in written
  assert not os.path.exists(os.path.join(root, "figures", "epsilon.png"))
  assert "Privacy: none" in open(os.path.join(root, figures.REPORT_FILE)).read()


def test_loss_figure_draws_the_context_free_baseline():
  train = [{"round": 1.0, "client_work/train/loss": 7.0}, {"round": 2.0,
                                                           "client_work/train/loss": 6.0}]
  ax = figures.loss_figure(train, [], "t", baseline=5.5).axes[0]
  lines = {line.get_label(): line for line in ax.get_lines()}
  baseline = [line for label, line in lines.items() if label.startswith("unigram baseline")]
  assert len(baseline) == 1
  np.testing.assert_allclose(baseline[0].get_ydata(), [5.5, 5.5])


def test_a_diverging_loss_is_drawn_on_a_log_scale():
  train = [{"round": float(r), "client_work/train/loss": 7.0 * 3 ** r} for r in range(8)]
  ax = figures.loss_figure(train, [], "diverging").axes[0]
  assert ax.get_yscale() == "log"


def test_the_command_refuses_a_directory_without_a_finished_call(tmp_path, capsys):
  assert figures.main([str(tmp_path)]) == 2
  assert "has no summary.json" in capsys.readouterr().err


def test_the_command_rewrites_the_figures(tmp_path, capsys):
  root = _run_dir(tmp_path)
  assert figures.main([root]) == 0
  assert os.path.join(root, "report.md") in capsys.readouterr().out


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
