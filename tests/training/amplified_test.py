"""Amplified accounting of training runs (dp_fl/training/amplified.py): balls-in-bins and
cyclic Poisson DP-FTRL end to end on the toy task."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from dp_fl.accounting import amplification
from dp_fl.execution import runtime
from dp_fl.participation import ledger as ledger_lib
from dp_fl.training import amplified
from dp_fl.training import program
from dp_fl.training import registry
from tests.training import toy_program
from tests.training import toy_task

_QUIET = open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with
NUM_CLIENTS = 12


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _config(root, mechanism="blt", participation="balls_in_bins", **overrides):
  values = dict(participation=participation, clients_per_round=2, noise_multiplier=1.0,
                eval_every=6, checkpoint_every=2)
  values.update(overrides)
  return toy_program.toy_config(str(root), 12, mechanism, **values)


def _report(root):
  with open(os.path.join(root, "privacy_report.json"), encoding="utf-8") as f:
    return json.load(f)


def _new_process():
  amplified._RELEASED.clear()  # pylint: disable=protected-access
  amplified._CALIBRATED.clear()  # pylint: disable=protected-access


def test_calibration_is_cached_and_a_resume_reuses_it_bitwise(tmp_path, monkeypatch):
  task = toy_task.make_task(num_clients=NUM_CLIENTS)
  calls = []
  real = amplification.release_noise_multiplier

  def counting(*args, **kwargs):
    calls.append(kwargs.get("epsilon"))
    return real(*args, **kwargs)

  monkeypatch.setattr(amplification, "release_noise_multiplier", counting)
  config = _config(tmp_path)
  sigma = program.calibrate_noise_multiplier(config, 6.0, NUM_CLIENTS)
  assert calls == [6.0]
  assert not os.path.exists(tmp_path / amplified.AMPLIFICATION_FILE)  # Calibration writes
  config = config.replace(noise_multiplier=sigma)                       # nothing.
  program.run(task, config, progress_stream=_QUIET, max_rounds_this_call=4)
  saved = (tmp_path / amplified.AMPLIFICATION_FILE).read_bytes()
  record = json.loads(saved)["release"]
  assert record["noise_multiplier"] == sigma and record["verified"]

  _new_process()
  again = program.calibrate_noise_multiplier(_config(tmp_path), 6.0, NUM_CLIENTS)
  assert again == sigma and calls == [6.0]  # From amplification.json, bit for bit.
  result = program.run(task, config, progress_stream=_QUIET)
  assert result.resumed_from == 4 and result.rounds_completed == 12
  assert (tmp_path / amplified.AMPLIFICATION_FILE).read_bytes() == saved
  report = _report(tmp_path)
  assert report["scheme"] == "balls_in_bins" and report["amplified_holds"]
  assert report["epsilon_amplified"] == pytest.approx(6.0)
  assert report["epsilon"] == min(report["epsilon_amplified"],
                                  report["unamplified"]["epsilon"])
  # Bins of N / m = 6 clients, one epoch of 6 rounds: each client took part at most twice.
  assert report["amplified"]["bins"] == 6 and report["amplified"]["epochs"] == 2
  text = (tmp_path / "privacy_report.md").read_text()
  assert "secretly" in text and "failure probability" in text


@pytest.mark.parametrize("mechanism,participation,extra", [
    ("dpsgd", "balls_in_bins", {}), ("bandmf", "cyclic_poisson", dict(min_sep=3)),
    ("dpsgd", "cyclic_poisson", dict(min_sep=1))])
def test_the_amplified_epsilon_is_below_the_unamplified_one_of_the_same_run(
    tmp_path, mechanism, participation, extra):
  task = toy_task.make_task(num_clients=NUM_CLIENTS)
  result = program.run(task, _config(tmp_path, mechanism, participation, **extra),
                       progress_stream=_QUIET)
  report = _report(tmp_path)
  assert report["amplified_holds"], report["why_not_amplified"]
  assert report["epsilon_amplified"] < report["unamplified"]["epsilon"]
  assert result.epsilon == report["epsilon"] == report["epsilon_amplified"]


def test_a_discarded_round_withdraws_the_amplified_claim(tmp_path):
  config = _config(tmp_path, "dpsgd", "cyclic_poisson", min_sep=2)
  accountant = amplified.of(registry.PARTICIPATIONS["cyclic_poisson"]).accountant(
      config, program.build_mechanism(config), NUM_CLIENTS)
  ledger = ledger_lib.ParticipationLedger(NUM_CLIENTS)
  for r in range(6):  # Client 0 in every turn of its group: the unamplified worst case.
    ledger.record(r, [r % 2])
  clean = accountant.report(ledger.realized())
  assert clean.amplified_holds and clean.epsilon == clean.epsilon_amplified
  shifted = accountant.report(dataclasses.replace(ledger.realized(), discarded_draws=1))
  assert not shifted.amplified_holds and "discarded" in shifted.why_not_amplified
  assert shifted.epsilon == shifted.epsilon_unamplified > clean.epsilon
  assert "No amplified ε is claimed" in shifted.to_markdown()
  # Progress lines and --target_epsilon use the RDP bound: fast, never below the report's.
  assert (accountant.progress_accountant, accountant.report_accountant) == ("RDP", "PLD")
  assert accountant.epsilon(ledger.realized()) >= clean.epsilon
  assert accountant.epsilon(dataclasses.replace(ledger.realized(), discarded_draws=1)) == (
      shifted.epsilon)


def test_a_public_sampling_seed_is_a_caveat_of_the_amplified_claim(tmp_path):
  config = _config(tmp_path, "dpsgd", "cyclic_poisson", min_sep=2, reproducible_noise_seed=3)
  accountant = amplified.of(registry.PARTICIPATIONS["cyclic_poisson"]).accountant(
      config, program.build_mechanism(config), NUM_CLIENTS)
  ledger = ledger_lib.ParticipationLedger(NUM_CLIENTS)
  ledger.record(0, [0, 1])
  report = accountant.report(ledger.realized())
  assert any("no amplification holds" in c for c in report.caveats)


def test_settings_the_analyses_do_not_cover_are_refused_before_training(tmp_path):
  task = toy_task.make_task(num_clients=NUM_CLIENTS)
  with pytest.raises(ValueError, match="needs a banded C"):
    _config(tmp_path / "a", "blt", "cyclic_poisson", min_sep=3)
  with pytest.raises(ValueError, match="q = m·G/N"):
    program.run(task, _config(tmp_path / "b", "dpsgd", "cyclic_poisson", min_sep=8),
                progress_stream=_QUIET)


def test_a_failed_verification_falls_back_on_the_unamplified_sigma_also_on_resume(
    tmp_path, monkeypatch):
  """Alg. 1 returned ⊥: the run gets the σ that needs no amplification, and a resumed run's
  calibration finds that same σ in the run directory (no new Monte Carlo attempt)."""
  task = toy_task.make_task(num_clients=NUM_CLIENTS)
  real = amplification.release_noise_multiplier
  calls = []

  def failing(*args, **kwargs):
    calls.append(1)
    return dataclasses.replace(real(*args, **kwargs), verified=False)

  monkeypatch.setattr(amplification, "release_noise_multiplier", failing)
  _new_process()
  config = _config(tmp_path, "dpsgd")
  sigma = program.calibrate_noise_multiplier(config, 6.0, NUM_CLIENTS)
  mechanism = program.build_mechanism(config)
  unamplified = amplified.of(registry.PARTICIPATIONS["balls_in_bins"]).pair(
      config, mechanism, NUM_CLIENTS)
  assert sigma == amplification.round_up(
      amplification.balls_in_bins.unamplified_noise_multiplier(unamplified, epsilon=6.0,
                                                               delta=config.delta))
  config = config.replace(noise_multiplier=sigma)
  program.run(task, config, progress_stream=_QUIET, max_rounds_this_call=4)
  _new_process()
  assert program.calibrate_noise_multiplier(_config(tmp_path, "dpsgd"), 6.0,
                                            NUM_CLIENTS) == sigma
  assert len(calls) == 1
  result = program.run(task, config, progress_stream=_QUIET)
  assert result.rounds_completed == 12 and result.epsilon <= 6.0 * (1 + 1e-9)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
