"""Training under `--participation=b_min_sep` (issue #44): σ calibrated for a target ε by the
b-min-sep Monte Carlo release, the run's report checked by a brute-force audit from its
checkpoint (every participation pattern enumerated, the true likelihood ratio), a resume
bitwise, and the amplified claim withdrawn after a discarded round."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from dp_fl.execution import runtime
from dp_fl.participation import ledger as ledger_lib
from dp_fl.participation import schemes
from dp_fl.training import amplified
from dp_fl.training import program
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task

NUM_CLIENTS = 12
DELTA = 1e-3  # A δ whose Estimate-Verify-Release sample (~5e4) keeps the test fast.


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _report(root):
  with open(os.path.join(root, "privacy_report.json"), encoding="utf-8") as f:
    return json.load(f)


@pytest.mark.parametrize("mechanism", ["blt", "dpsgd"])
def test_calibrated_run_is_audited_and_resumes_bitwise(tmp_path, mechanism):
  task = toy_task.make_task(num_clients=NUM_CLIENTS)
  amplified._RELEASED.clear()  # pylint: disable=protected-access

  def config_for(name):
    return toy_program.calibrated_config(
        task, tmp_path / name, mechanism, epsilon=3.0, rounds=8, participation="b_min_sep",
        min_sep=2, clients_per_round=2, delta=DELTA, checkpoint_every=1, eval_every=8,
        reproducible_noise_seed=5)  # Whole and split runs draw the same cohorts and noise.

  whole, _ = privacy_audit.check_recipe_run(task, config_for, pauses=(3,))
  report = _report(tmp_path / "whole")
  assert report["scheme"] == "b_min_sep" and report["amplified_holds"], report
  assert report["epsilon_amplified"] == pytest.approx(3.0)
  assert report["epsilon_amplified"] < report["unamplified"]["epsilon"]
  assert whole.epsilon == report["epsilon"]
  details = report["amplified"]
  assert details["min_sep"] == 2 and details["warm_start"]
  assert details["exact_likelihood_ratio"] == (mechanism == "dpsgd")
  # p is the one whose stationary expected cohort is m = 2 of 12 clients.
  assert details["stationary_participation_rate"] == pytest.approx(2 / NUM_CLIENTS)
  text = (tmp_path / "whole" / "privacy_report.md").read_text()
  assert "ineligible for the next 1 round" in text and "secretly" in text
  assert any("reproducible_noise_seed=5" in c for c in report["caveats"])


def test_device_availability_run_is_audited_per_class(tmp_path):
  """Only devices in their daily window (and checked in) are drawn; every class of public
  windows is accounted, and the audit enumerates each class's patterns with the true ratio."""
  task = toy_task.make_task(num_clients=NUM_CLIENTS)
  amplified._RELEASED.clear()  # pylint: disable=protected-access

  def config_for(name):
    return toy_program.calibrated_config(
        task, tmp_path / name, "blt", epsilon=3.0, rounds=8, participation="b_min_sep",
        min_sep=2, clients_per_round=1, delta=DELTA, checkpoint_every=1, eval_every=8,
        availability="diurnal", round_hours=3.0, reproducible_noise_seed=5)

  whole, _ = privacy_audit.check_recipe_run(task, config_for, pauses=(4,))
  report = _report(tmp_path / "whole")
  assert report["scheme"] == "b_min_sep" and report["amplified_holds"], report
  assert report["epsilon_amplified"] == pytest.approx(3.0)
  details = report["amplified"]
  availability = details["availability"]
  assert availability["num_classes"] >= 2 and sum(availability["class_sizes"]) == NUM_CLIENTS
  assert availability["window_probability"] == 0.5
  # The default p makes the busiest round's expected cohort m = 1 of 12.
  assert details["peak_participation_rate"] == pytest.approx(1 / NUM_CLIENTS)
  assert details["mean_participation_rate"] < details["peak_participation_rate"]
  text = (tmp_path / "whole" / "privacy_report.md").read_text()
  assert "only clients available" in text and "independent of its data" in text
  assert whole.epsilon == report["epsilon"]


def test_unreachable_cohort_under_availability_is_refused():
  config = toy_program.toy_config("/tmp/unused", 8, "blt", participation="b_min_sep",
                                  min_sep=2, clients_per_round=4, availability="diurnal",
                                  round_hours=3.0)
  with pytest.raises(ValueError, match="availability=always"):
    schemes.scheme("b_min_sep").amplification.sampling(config, NUM_CLIENTS)
  odd = config.replace(clients_per_round=1, rounds=200,
                       participation_settings=dataclasses.replace(
                           config.participation_settings, round_hours=0.37))
  with pytest.raises(ValueError, match="round_hours"):
    schemes.scheme("b_min_sep").amplification.sampling(odd, 5000)


def test_a_release_is_reused_across_private_runs_from_the_cache(tmp_path, monkeypatch):
  """$DP_FL_AMPLIFICATION_CACHE: a second process (its memory cleared) with the same C,
  schedule and target reuses the first release — verified or ⊥, so a failed verification is
  never retried into a pass — instead of recomputing it; other settings do not, and research
  runs (public accounting seeds) neither read nor write it."""
  import dataclasses as dc  # pylint: disable=import-outside-toplevel
  from dp_fl.accounting import amplification  # pylint: disable=import-outside-toplevel
  task = toy_task.make_task(num_clients=NUM_CLIENTS)
  cache = tmp_path / "cache"
  monkeypatch.setenv(amplified.CACHE_ENV, str(cache))

  def config(name, epsilon=3.0, **kwargs):
    amplified._RELEASED.clear()  # pylint: disable=protected-access
    amplified._CALIBRATED.clear()  # pylint: disable=protected-access
    return toy_program.calibrated_config(
        task, tmp_path / name, "dpsgd", epsilon=epsilon, rounds=6, participation="b_min_sep",
        min_sep=2, clients_per_round=2, delta=DELTA, **kwargs)

  first = config("first")
  assert len(list(cache.iterdir())) == 1
  real = amplification.release_noise_multiplier

  def refuse(*args, **kwargs):
    raise AssertionError("recomputed a release the cache holds")

  with monkeypatch.context() as m:
    m.setattr(amplification, "release_noise_multiplier", refuse)
    assert config("second").noise_multiplier == first.noise_multiplier
    with pytest.raises(AssertionError, match="recomputed"):
      config("other", epsilon=2.0)
    with pytest.raises(AssertionError, match="recomputed"):  # A research run: not read.
      config("research", reproducible_noise_seed=5)
  with monkeypatch.context() as m:  # A verification that fails (⊥) is kept too.
    m.setattr(amplification, "release_noise_multiplier",
              lambda *a, **k: dc.replace(real(*a, **k), verified=False))
    failed = config("failed", epsilon=2.5)
  assert len(list(cache.iterdir())) == 2
  with monkeypatch.context() as m:
    m.setattr(amplification, "release_noise_multiplier", refuse)
    again = config("again", epsilon=2.5)  # No retry: the same fallback σ, unamplified.
    assert again.noise_multiplier == failed.noise_multiplier > first.noise_multiplier
  for f in cache.iterdir():
    f.write_text("{not json")
  with pytest.raises(ValueError, match="DP_FL_AMPLIFICATION_CACHE"):
    config("broken")


def test_a_discarded_round_withdraws_the_amplified_claim(tmp_path):
  config = toy_program.toy_config(str(tmp_path), 6, "dpsgd", participation="b_min_sep",
                                  min_sep=2, clients_per_round=2, noise_multiplier=1.5,
                                  delta=DELTA)
  accountant = amplified.of(schemes.scheme("b_min_sep")).accountant(
      config, program.build_mechanism(config), NUM_CLIENTS)
  ledger = ledger_lib.ParticipationLedger(NUM_CLIENTS)
  for r in range(6):  # Client 0 in every round it may take part in: the unamplified worst.
    ledger.record(r, [0] if r % 2 == 0 else [1])
  clean = accountant.report(ledger.realized())
  assert clean.amplified_holds and clean.epsilon == clean.epsilon_amplified
  assert clean.epsilon_amplified < clean.epsilon_unamplified
  shifted = accountant.report(dataclasses.replace(ledger.realized(), discarded_draws=1))
  assert not shifted.amplified_holds and "discarded" in shifted.why_not_amplified
  assert shifted.epsilon == shifted.epsilon_unamplified > clean.epsilon


def test_settings_the_analysis_does_not_cover_are_refused(tmp_path):
  config = toy_program.toy_config(str(tmp_path), 6, "blt", participation="b_min_sep",
                                  min_sep=4, clients_per_round=4, delta=DELTA)
  with pytest.raises(ValueError, match="at most 1/4"):
    program.calibrate_noise_multiplier(config, 3.0, NUM_CLIENTS)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
