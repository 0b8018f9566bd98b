"""Tests of the per-mechanism tuned comparison (dp_fl/training/compare.py) on the toy task."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from dp_fl.training import compare
from tests.training import toy_program
from tests.training import toy_task


class _Counting:
  def __init__(self, fn):
    self.fn, self.calls = fn, 0

  def __call__(self):
    self.calls += 1
    return self.fn()


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
  out_dir = str(tmp_path_factory.mktemp("cmp"))
  task = toy_task.make_task()
  evaluation = _Counting(task.eval_dataset_fn)
  validation = _Counting(task.validation_dataset_fn)
  task = dataclasses.replace(task, eval_dataset_fn=evaluation, validation_dataset_fn=validation)

  # compare() runs each training in its own execution context (and TFF worker).
  return _compare_clip_and_dpsgd(task, out_dir), out_dir, evaluation, validation


def _compare_clip_and_dpsgd(task, out_dir):
  def config_for(mechanism, participation=None):
    return toy_program.toy_config(os.path.join(out_dir, "unused"), 4, mechanism,
                                  server_momentum=0.0, reproducible_noise_seed=11,
                                  **({"participation": participation} if participation else {}))

  return compare.compare(task, config_for, mechanisms=("clip", "dpsgd"),
                         target_epsilon=20.0, out_dir=out_dir, lr_factors=(0.25, 2.0),
                         seeds=2, max_grid_extensions=0, progress=lambda line: None)


def test_grid_runs_score_on_validation_data_and_seed_runs_on_evaluation_data(comparison):
  output, _, evaluation, validation = comparison
  phases = [r["phase"] for r in output["runs"]]
  assert phases.count("validation") == 4 and phases.count("evaluation") == 4
  # One evaluation per run (eval_every = rounds): the grid never saw the evaluation data.
  assert validation.calls == 4
  assert evaluation.calls == 4


def test_validation_runs_show_the_validation_baselines(tmp_path):
  task = dataclasses.replace(toy_task.make_task(),
                             validation_baseline_metrics={"unigram_accuracy": 0.25})
  assert task.for_validation().baseline_metrics == {"unigram_accuracy": 0.25}
  assert task.baseline_metrics["unigram_accuracy"] == pytest.approx(1 / 3)
  plain = toy_task.make_task()  # None: the evaluation data's baselines
  assert plain.for_validation().baseline_metrics == dict(plain.baseline_metrics)


def test_the_chosen_rate_is_the_best_on_validation(comparison):
  output, _, _, _ = comparison
  for row in output["rows"]:
    grid = {float(k): v for k, v in row["grid"].items()}
    assert set(grid) == {0.25, 2.0}
    assert row["server_learning_rate"] == max(grid, key=lambda k: (grid[k], -k))
    seeds = [r for r in output["runs"]
             if r["mechanism"] == row["mechanism"] and r["phase"] == "evaluation"]
    assert {r["server_learning_rate"] for r in seeds} == {row["server_learning_rate"]}
    assert [r["seed"] for r in seeds] == [4, 5]  # config seed 3 + 1 + s
    values = [r["metric"] for r in seeds]
    assert row["metric_mean"] == pytest.approx(np.mean(values))
    assert row["metric_std"] == pytest.approx(np.std(values, ddof=1))


def test_private_rows_report_the_realized_epsilon_of_every_seed(comparison):
  output, _, _, _ = comparison
  rows = {r["mechanism"]: r for r in output["rows"]}
  assert rows["clip"]["epsilon"] is None and rows["clip"]["noise_multiplier"] is None
  dpsgd = rows["dpsgd"]
  assert len(dpsgd["epsilons"]) == 2
  assert dpsgd["epsilon"] == max(dpsgd["epsilons"])
  assert 0 < dpsgd["epsilon"] <= 20.0 * (1 + 1e-6)  # calibrated to the planned schedule
  for run in output["runs"]:  # Each figure comes from a run's own summary.
    with open(os.path.join(run["root_dir"], "summary.json")) as f:
      summary = json.load(f)
    assert summary["eval"]["accuracy"] == pytest.approx(run["metric"])
    assert summary["epsilon"] == run["epsilon"]


def test_outputs_json_markdown_and_png(comparison):
  output, out_dir, _, _ = comparison
  with open(os.path.join(out_dir, "comparison.json")) as f:
    assert json.load(f)["rows"] == json.loads(json.dumps(output["rows"]))
  text = open(os.path.join(out_dir, "comparison.md")).read()
  assert "| clip | — |" in text and "| dpsgd |" in text and "comparison.png" in text
  assert " ± " in text.split("| --- |")[-1]  # Two seeds: mean ± std in the rows.
  with open(os.path.join(out_dir, "comparison.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  figure = compare.comparison_figure(output)
  bars = [p.get_height() for p in figure.axes[0].patches]
  np.testing.assert_allclose(bars, [r["metric_mean"] for r in output["rows"]])


def test_every_run_directory_has_its_figures(comparison):
  output, _, _, _ = comparison
  for run in output["runs"]:
    assert os.path.exists(os.path.join(run["root_dir"], "report.md"))
    assert os.path.exists(os.path.join(run["root_dir"], "figures", "loss.png"))


def _grid_search(score, rates, limit):
  """The rates `compare` trains for a validation score `score(rate)`, in order."""
  grid = [compare.RunRecord("m", "validation", r, 0, score(r), 0.0, None, 1, "completed", 0.0,
                            "") for r in rates]
  for rate in compare._edge_extensions(grid, limit):
    grid.append(dataclasses.replace(grid[0], server_learning_rate=rate, metric=score(rate)))
  return [r.server_learning_rate for r in grid], compare._best(grid).server_learning_rate


@pytest.mark.parametrize("peak, expected_rates, expected_best", [
    (1.0, [0.5, 1.0, 2.0], 1.0),                 # inside: no extension
    (3.0, [0.5, 1.0, 2.0, 4.0, 8.0], 4.0),       # past the top: x2 (best, so an edge), x2
    (100.0, [0.5, 1.0, 2.0, 4.0, 8.0], 8.0),     # far past the top: stops at the limit
    (0.2, [0.5, 1.0, 2.0, 0.25, 0.125], 0.25),   # past the bottom: /2, /2
    (0.01, [0.5, 1.0, 2.0, 0.25, 0.125], 0.125),
    (1.3, [0.5, 1.0, 2.0], 1.0),                 # between 1 and 2, nearer 1: inside
])
def test_the_grid_is_extended_while_its_best_rate_lies_on_its_edge(peak, expected_rates,
                                                                   expected_best):
  def score(rate):
    return -abs(np.log(rate / peak))
  rates, best = _grid_search(score, [0.5, 1.0, 2.0], limit=2)
  assert rates == pytest.approx(expected_rates)
  assert best == pytest.approx(expected_best)


def test_the_grid_is_not_extended_past_a_diverged_edge_or_without_a_limit():
  # The largest rate diverged (NaN); the best finite one is inside: nothing to add.
  rates, best = _grid_search(lambda r: float("nan") if r > 1.5 else r, [0.5, 1.0, 2.0], 2)
  assert rates == [0.5, 1.0, 2.0] and best == 1.0
  # Every rate diverged: no best to extend from.
  assert _grid_search(lambda r: float("nan"), [0.5, 1.0], 2)[0] == [0.5, 1.0]
  assert _grid_search(lambda r: r, [0.5, 1.0, 2.0], 0)[0] == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("kwargs, message", [
    (dict(target_epsilon=0.0), "target_epsilon"),
    (dict(target_epsilon=float("inf")), "target_epsilon"),
    (dict(seeds=0), "seeds"),
    (dict(lr_factors=(1.0, -2.0)), "lr_factors"),
    (dict(max_grid_extensions=-1), "max_grid_extensions"),
])
def test_bad_arguments_are_refused_before_training(kwargs, message, tmp_path):
  args = dict(mechanisms=("clip",), target_epsilon=8.0, out_dir=str(tmp_path))
  args.update(kwargs)
  with pytest.raises(ValueError, match=message):
    compare.compare(toy_task.make_task(), lambda m: None, **args)
  assert not os.listdir(tmp_path)


def test_a_task_without_validation_data_cannot_run_a_grid(tmp_path):
  task = dataclasses.replace(toy_task.make_task(), validation_dataset_fn=None)
  with pytest.raises(ValueError, match="no validation data"):
    compare.compare(task, lambda m: None, mechanisms=("clip",), target_epsilon=8.0,
                    out_dir=str(tmp_path), lr_factors=(0.5, 1.0))


def test_each_private_mechanism_under_each_participation_at_one_epsilon(tmp_path):
  """--participations: one row per (mechanism, scheme), each calibrated to the same ε by its
  own accounting (cyclic Poisson amplified, min-sep not), so the σ each needs is comparable;
  the non-private reference appears once."""
  task = toy_task.make_task(num_clients=16)

  def config_for(mechanism, participation=None):
    return toy_program.toy_config(str(tmp_path / "unused"), 4, mechanism,
                                  clients_per_round=2, server_momentum=0.0,
                                  reproducible_noise_seed=5,
                                  **({"participation": participation} if participation else {}))

  output = compare.compare(task, config_for, mechanisms=("clip", "dpsgd"),
                           target_epsilon=8.0, out_dir=str(tmp_path), lr_factors=(1.0,),
                           seeds=1, participations=("min_sep_rounds", "cyclic_poisson"),
                           progress=lambda line: None)
  rows = {r["mechanism"]: r for r in output["rows"]}
  assert set(rows) == {"clip@min_sep_rounds", "dpsgd@min_sep_rounds", "dpsgd@cyclic_poisson"}
  minsep, cyclic = rows["dpsgd@min_sep_rounds"], rows["dpsgd@cyclic_poisson"]
  assert cyclic["participation"] == "cyclic_poisson"
  assert cyclic["noise_multiplier"] < minsep["noise_multiplier"]  # Amplification pays.
  for row in (minsep, cyclic):
    assert row["epsilon"] <= 8.0 * (1 + 1e-6)
  table_rows = [line for line in compare.markdown(output).splitlines()
                if line.startswith("| dpsgd@")]
  assert len(table_rows) == 2 and not any("±" in line for line in table_rows)  # One seed.


def test_the_distributed_mechanisms_are_compared_at_the_same_epsilon(tmp_path):
  """Issue #45: ddgauss and skellam rows next to central DP-SGD, each calibrated by its own
  accounting (the distributed ones need the model's dimension) to the same ε."""
  task = toy_task.make_task()

  def config_for(mechanism, participation=None):
    del participation
    return toy_program.toy_config(str(tmp_path / "unused"), 4, mechanism, server_momentum=0.0,
                                  participation="uniform", reproducible_noise_seed=5)

  output = compare.compare(task, config_for, mechanisms=("dpsgd", "ddgauss", "skellam"),
                           target_epsilon=8.0, out_dir=str(tmp_path), lr_factors=(1.0,),
                           seeds=1, progress=lambda line: None)
  rows = {r["mechanism"]: r for r in output["rows"]}
  assert set(rows) == {"dpsgd", "ddgauss", "skellam"}
  for row in rows.values():  # Calibrated to the planned schedule; realized ε at most that.
    assert 0 < row["epsilon"] <= 8.0 * (1 + 1e-6), row
  # Both distributed rows pay for TFF's rounding and the Rényi conversion: more noise.
  assert rows["ddgauss"]["noise_multiplier"] > rows["dpsgd"]["noise_multiplier"]


def test_rerunning_a_comparison_reads_finished_runs_back(comparison):
  """A comparison that stopped (machine lost, Ctrl-C) is resumed by rerunning it: every
  finished run comes back from its checkpoint with the same figures, nothing is retrained."""
  output, out_dir, _, _ = comparison
  again = _compare_clip_and_dpsgd(toy_task.make_task(), out_dir)
  assert [r["metric"] for r in again["runs"]] == [r["metric"] for r in output["runs"]]
  assert [r["epsilon"] for r in again["runs"]] == [r["epsilon"] for r in output["runs"]]
  assert all(r["rounds"] == 4 for r in again["runs"])
  for run in again["runs"]:
    with open(os.path.join(run["root_dir"], "metrics", "train.csv")) as f:
      assert len(f.read().strip().splitlines()) == 1 + 4  # Header + 4 rounds, not 8.


def test_audited_rows_show_the_lower_bound_and_flag_a_failed_audit():
  def record(seed, bound, one_shot, failed):
    audit = {"one_run_lower_bound": bound, "one_shot_epsilon_final_model": one_shot,
             "lower_bound_exceeds_accounted": failed}
    return compare.RunRecord("dpsgd", "evaluation", 1.0, seed, 0.1, 0.2, 2.0, 3, "completed",
                             1.0, "", audit=audit)

  base = toy_program.toy_config("/tmp/unused", 3, "dpsgd")
  honest = compare._row("dpsgd", base, 1.0, [], [record(0, 0.4, 1.5, False),
                                                 record(1, 0.7, None, False)])
  assert honest["audit_lower_bound"] == 0.7 and honest["audit_one_shot_final_model"] == 1.5
  broken = compare._row("blt", base, 1.0, [], [record(0, 2.5, 9.0, True)])
  plain = compare._row("clip", base, 1.0, [], [dataclasses.replace(
      record(0, 0, 0, False), audit=None)])
  assert "audit_lower_bound" not in plain
  output = {"headline_metric": "accuracy", "baseline": {}, "task": "toy", "description": "",
            "target_epsilon": 2.0, "lr_factors": [1.0], "seeds": 2,
            "rows": [honest, broken, plain]}
  text = compare.markdown(output)
  assert "one-run lower bound (95 % each)" in text
  assert "| 0.7 / 1.5 |" in text and "2.5 / 9 **AUDIT FAILED: bound > ε** |" in text
  clip_line = next(line for line in text.splitlines() if line.startswith("| clip |"))
  assert clip_line.endswith("| — |")  # A row without canaries.


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
