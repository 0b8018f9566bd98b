"""cpSGD through the registry (paper 000): trains, reports ε and bits, charges resumes, refuses
what its analysis does not cover."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from dp_fl.accounting import cpsgd as cpsgd_accounting
from dp_fl.accounting import report as report_lib
from dp_fl.execution import runtime
from dp_fl.mechanisms import cpsgd as cpsgd_math
from dp_fl.training import privacy
from dp_fl.training import program
from dp_fl.training import registry
from tests.training import toy_program
from tests.training import toy_task


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _config(root_dir, rounds=6, **overrides):
  return toy_program.toy_config(str(root_dir), rounds, "cpsgd", **overrides)


def _calibrated(task, root_dir, epsilon=8.0, **overrides):
  return toy_program.calibrated_config(task, root_dir, "cpsgd", epsilon, **overrides)


def test_trains_and_reports_epsilon_and_bits(tmp_path):
  task = toy_task.make_task()
  config = _calibrated(task, tmp_path / "run")
  result = program.run(task, config)
  assert result.stopped == "completed" and np.isfinite(result.eval_metrics["loss"])
  report = result.privacy_report
  assert isinstance(report, report_lib.BinomialPrivacyReport)
  # The planned k = ⌈6 / 3⌉ = 2 at full cohorts reaches at most the calibrated ε.
  assert report.participations <= 2 and report.epsilon <= 8.0
  # The report's ε is the accounting of what it states (m from σ, d' from the model).
  dimension = program.model_dimension(task)
  entry = registry.mechanism("cpsgd")
  protocol = entry.protocol(config, dimension)
  assert report.num_trials == protocol.num_trials >= 1
  assert report.dimension == cpsgd_math.padded_dimension(dimension)
  assert report.epsilon == cpsgd_accounting.composed_epsilon(
      protocol.num_levels, protocol.num_trials, protocol.p, protocol.x_max,
      protocol.clip_norm, report.dimension, report.cohort, report.participations,
      config.delta).epsilon
  assert report.bits_per_coordinate == math.ceil(math.log2(16 + protocol.num_trials))
  assert report.cohort == 4  # Every round had the full report goal.
  text = report.to_markdown()
  assert "secure aggregation" in text and "bits per coordinate" in text


def test_a_round_computed_before_a_crash_is_charged_as_a_second_release(tmp_path):
  task = toy_task.make_task()
  whole = program.run(task, _calibrated(task, tmp_path / "whole"))
  # A clean pause (checkpoint after round 2) and a resume: nothing is computed twice.
  paused_config = _calibrated(task, tmp_path / "paused")
  assert program.run(task, paused_config, max_rounds_this_call=2).stopped == "paused"
  paused = program.run(task, paused_config)
  assert paused.resumed_from == 2 and paused.privacy_report.replayed_participations == 0
  assert paused.epsilon == whole.epsilon
  # A crash while round 3 was computed (its release logged, the process killed before the
  # round was applied): the resume computes round 3 again with fresh shares.
  crashed_config = _calibrated(task, tmp_path / "crashed")
  program.run(task, crashed_config, max_rounds_this_call=2)
  privacy.record_release(crashed_config.root_dir, 3, [0, 1, 2, 3])
  crashed = program.run(task, crashed_config)
  assert crashed.resumed_from == 2
  assert crashed.privacy_report.cohort == whole.privacy_report.cohort
  assert crashed.privacy_report.replayed_participations == 1
  assert crashed.privacy_report.participations == whole.privacy_report.participations + 1
  assert crashed.epsilon > whole.epsilon
  # Showing a finished run's results computes nothing and is not charged.
  again = program.run(task, crashed_config)
  assert again.epsilon == crashed.epsilon
  # A crash in round 1 of a fresh run (no checkpoint): the restart's round 1 is charged too.
  fresh_config = _calibrated(task, tmp_path / "fresh")
  os.makedirs(fresh_config.root_dir, exist_ok=True)
  privacy.record_release(fresh_config.root_dir, 1, [5, 6])
  fresh = program.run(task, fresh_config)
  assert fresh.privacy_report.replayed_participations == 1
  assert fresh.privacy_report.cohort == 2  # The smaller cohort of the lost computation.


def test_calibration_gives_the_smallest_trials(tmp_path):
  task = toy_task.make_task()
  config = _calibrated(task, tmp_path / "a", epsilon=4.0)
  dimension = program.model_dimension(task)
  entry = registry.mechanism("cpsgd")
  m = entry.protocol(config, dimension).num_trials
  planned = dict(cohort=config.clients_per_round, participations=2)
  x_max = entry.protocol(config, dimension).x_max
  d = cpsgd_math.padded_dimension(dimension)
  eps = [cpsgd_accounting.composed_epsilon(16, t, 0.5, x_max, 1.0, d, planned["cohort"],
                                           planned["participations"], config.delta).epsilon
         for t in (m - 1, m)]
  assert eps[1] <= 4.0 < eps[0]
  with pytest.raises(ValueError, match="--cpsgd_trials=1 gives ε"):
    program.calibrate_noise_multiplier(_config(tmp_path / "b", cpsgd_trials=1), 4.0, 10,
                                       task)


@pytest.mark.parametrize("overrides,match", [
    ({"participation": "poisson"}, "without amplification"),
    ({"participation": "balls_in_bins"}, "without amplification"),
    ({"on_nonfinite": "discard"}, "discarded round is still"),
    ({"cpsgd_trials": 0}, "no noise"),
    ({"noise_multiplier": 0.0}, "noise_multiplier"),
    ({"cpsgd_p": 0.3}, r"p = 1/2.*--cpsgd_p"),  # The Rényi analysis uses Bin(N, ½)'s symmetry.
])
def test_refuses_what_its_analysis_does_not_cover(tmp_path, overrides, match):
  with pytest.raises(ValueError, match=match):
    registry.mechanism("cpsgd").check_config(_config(tmp_path, **overrides))


def test_bad_parameters_name_the_flag(tmp_path):
  for name, value in (("cpsgd_levels", 1), ("cpsgd_p", 1.5), ("cpsgd_x_max", -1.0),
                      ("cpsgd_trials", -3)):
    with pytest.raises(ValueError, match=name):
      _config(tmp_path, **{name: value})


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
