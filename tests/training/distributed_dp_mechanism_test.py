"""The distributed discrete Gaussian and Skellam mechanisms through the registry (issue #45):
they train on TFF's own DistributedDpSumFactory, report ε by their Rényi DP (checked against
an independent computation from what TFF's process reported), charge every computed round,
and refuse what their analysis does not cover."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dp_fl.accounting import report as report_lib
from dp_fl.execution import runtime
from dp_fl.training import privacy
from dp_fl.training import program
from dp_fl.training import registry
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task

MECHANISMS = ("ddgauss", "skellam")


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _calibrated(task, root_dir, mechanism, epsilon=8.0, **overrides):
  return toy_program.calibrated_config(task, root_dir, mechanism, epsilon, **overrides)


@pytest.mark.parametrize("mechanism,bits,beta", [("ddgauss", 16, 0.0), ("skellam", 16, 0.0),
                                               ("skellam", 12, math.exp(-0.5))])
def test_trains_and_reports_the_epsilon_of_what_tff_ran(tmp_path, mechanism, bits, beta):
  task = toy_task.make_task()
  config = _calibrated(task, tmp_path / "run", mechanism, ddp_bits=bits, ddp_beta=beta)
  result = program.run(task, config)
  assert result.stopped == "completed" and np.isfinite(result.eval_metrics["loss"])
  report = result.privacy_report
  assert isinstance(report, report_lib.DistributedDpPrivacyReport)
  assert report.mechanism == mechanism and report.bits == bits
  assert report.rounding_beta == beta
  # The planned k = ⌈6 / 3⌉ = 2 at full cohorts of 4 reaches the calibrated ε (within the
  # calibration's 0.1 % in z), never above it.
  assert report.participations == 2 and report.fewest_clients == report.most_clients == 4
  assert 7.9 < report.epsilon <= 8.0
  audit = privacy_audit.audit_distributed_dp_run(config)
  # What TFF's process enforced is what the report states (float32 measurements)...
  assert audit["l2"] == pytest.approx(report.l2_sensitivity, rel=1e-6)
  assert audit["sigma"] == pytest.approx(report.sampled_stddev, rel=1e-6)
  if mechanism == "ddgauss":
    assert report.sampled_stddev == math.ceil(report.local_stddev)
  # ... and the ε is the papers' bound, written out independently (tests/training/
  # privacy_audit.py), for the realized participations.
  assert audit["participations"] == report.participations
  assert report.epsilon == pytest.approx(audit["true_epsilon"], rel=1e-5)
  assert report.epsilon >= audit["true_epsilon"] * (1 - 1e-6)
  text = report.to_markdown()
  assert "Zero-out" in text and "secure aggregation" in text
  assert f"B + ⌈log₂ n⌉ = {bits + 2}" in text
  assert report.to_dict()["secure_aggregation_bits"] == bits + 2
  assert ("enforced by conditional rounding" in text) == (beta > 0)
  if beta:  # The bound TFF enforced is tighter than unconditional rounding's, at the same z.
    unconditional = dataclasses.replace(config, mechanism_settings=dataclasses.replace(
        config.mechanism_settings, ddp_beta=0.0))
    plain = registry.mechanism(mechanism).setting(unconditional, program.model_dimension(task))
    assert report.l2_sensitivity < plain.scaled_inflated_l2


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_report_bounds_an_independent_audit_after_crashes_and_short_rounds(tmp_path,
                                                                               mechanism):
  # Short rounds (the device timer's check-ins leave some rounds below m) and crashed
  # computations (logged, never applied) that a resume computes again with fresh shares: the
  # audit composes, client by client from the release log, every computation at its own
  # cohort's size; the report bounds it with μ at the fewest shares and τ at m.
  task = toy_task.make_task(num_clients=12)
  config = _calibrated(task, tmp_path / "run", mechanism, rounds=8, clients_per_round=4,
                       participation="uniform")
  program.run(task, config, max_rounds_this_call=2)
  privacy.record_release(config.root_dir, 3, [0, 1, 2])  # A short round, crashed.
  program.run(task, config, max_rounds_this_call=3)
  privacy.record_release(config.root_dir, 6, [1, 2, 3, 4])
  result = program.run(task, config)
  assert result.stopped == "completed" and result.resumed_from == 5
  report = result.privacy_report
  audit = privacy_audit.audit_distributed_dp_run(config)
  assert report.replayed_participations >= 1
  assert report.participations == audit["participations"]  # Client by client.
  assert report.fewest_clients <= audit["cohort"] == 3
  assert report.epsilon >= audit["true_epsilon"] * (1 - 1e-6) > 0
  # The crashed computations are charged: above the ε of the applied rounds alone.
  setting = registry.mechanism(mechanism).setting(config, program.model_dimension(task))
  applied = setting.composed_epsilon(4, 4, report.participations
                                     - report.replayed_participations, config.delta,
                                     "zero_out")[0]
  assert report.epsilon > applied


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_clients_noise_is_secret_even_from_public_seeds(tmp_path, mechanism):
  # Two runs from the same public seeds (model initialization, cohorts: research runs'
  # --reproducible_noise_seed) differ: the clients' shares come from their own entropy, not
  # from any seed in the config (TF's global seed included).
  task = toy_task.make_task()
  finals = []
  for run in ("a", "b"):
    config = toy_program.toy_config(str(tmp_path / run), 2, mechanism, participation="uniform",
                                    noise_multiplier=1.0, reproducible_noise_seed=7)
    result = program.run(task, config)
    assert result.stopped == "completed"
    finals.append(result.eval_metrics["loss"])
  assert finals[0] != finals[1]


@pytest.mark.parametrize("flags,match", [
    ({"participation": "poisson", "population_sampling_rate": 0.5}, "poisson"),
    ({"on_nonfinite": "discard"}, "on_nonfinite=stop"),
    ({"noise_multiplier": 0.0}, "noise_multiplier"),
])
def test_refuses_what_its_analysis_does_not_cover(tmp_path, flags, match):
  with pytest.raises(ValueError, match=match):
    config = toy_program.toy_config(str(tmp_path), 6, "ddgauss", **flags)
    registry.mechanism("ddgauss").check_config(config)


@pytest.mark.parametrize("bits", [0, 23, 16.5])
def test_bits_outside_tff_s_range_name_the_flag(tmp_path, bits):
  with pytest.raises(ValueError, match="ddp_bits"):
    toy_program.toy_config(str(tmp_path), 6, "skellam", ddp_bits=bits)


@pytest.mark.parametrize("beta", [-0.1, 0.95, 1.0, float("nan")])
def test_a_rounding_beta_outside_its_range_names_the_flag(tmp_path, beta):
  with pytest.raises(ValueError, match="ddp_beta.*0.6065"):
    toy_program.toy_config(str(tmp_path), 6, "ddgauss", ddp_beta=beta)


def test_too_few_bits_for_the_target_say_use_more_bits(tmp_path):
  task = toy_task.make_task()
  with pytest.raises(ValueError, match="use more bits"):
    _calibrated(task, tmp_path, "ddgauss", epsilon=1.0, ddp_bits=3)


def test_a_distributed_flag_is_refused_for_another_mechanism():
  (why,) = registry.ignored_flags({"ddp_bits": 12}, [("blt", "device_timer")])
  assert "--mechanism=ddgauss or skellam" in why and "Drop --ddp_bits" in why
  assert not registry.ignored_flags({"ddp_bits": 12}, [("skellam", "device_timer")])


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
