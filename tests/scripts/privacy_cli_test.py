"""scripts/privacy.py: paper 004 Table 4 (BLT rows), paper 001 Table 2, balls-in-bins
(Estimate-Verify-Release), guaranteed sensitivities, errors."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import subprocess
import sys

import pytest

from dp_fl.accounting import amplification
from dp_fl.accounting import balls_in_bins
from dp_fl.accounting import verification
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog
from scripts import privacy as cli

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args):
  env = dict(os.environ, PYTHONPATH=_ROOT)
  return subprocess.run([sys.executable, "-m", "scripts.privacy", *args], cwd=_ROOT, env=env,
                        capture_output=True, text=True, timeout=300)


# Paper 004, Table 4: (row, App. A BLT by min-sep, σ, rounds, realized min-sep, k, printed ε).
_TABLE_4_BLT_ROWS = [
    ("es-ES BLT-7.379", 400, 7.379, 1280, 300, 4, 3.46),
    ("id-ID BLT-7.379", 400, 7.379, 2350, 447, 5, 3.93),
    ("pt-BR BLT-8.681", 1000, 8.681, 2000, 2001, 1, 1.25),
    ("pt-BR BLT-16.1", 1000, 16.1, 2000, 1181, 2, 0.98),
]


@pytest.mark.parametrize("row,blt_sep,sigma,n,b,k,eps", _TABLE_4_BLT_ROWS)
def test_paper_004_table_4_blt_rows(tmp_path, row, blt_sep, sigma, n, b, k, eps):
  params = tmp_path / "blt.json"
  params.write_text(blt.PUBLISHED_BLTS[blt_sep].to_json())
  report = tmp_path / "report.md"
  out = cli.matrix_mechanism("blt", str(params), n, b, k, 4, sigma, None, 1e-10, 0,
                             str(report))
  assert round(out["epsilon"], 2) == eps, row
  assert out["conversion"] == "exact_gaussian"
  assert not out["sensitivity_is_lower_bound"]
  text = report.read_text()
  assert "Checklist (paper 004, App. C)" in text and f"{b}" in text


def test_calibration_inverts_accounting(tmp_path):
  params = tmp_path / "blt.json"
  params.write_text(blt.PUBLISHED_BLTS[400].to_json())
  out = cli.matrix_mechanism("blt", str(params), 1280, 300, 4, 4, None, 3.458, 1e-10, 0, None)
  assert out["noise_multiplier"] == pytest.approx(7.379, rel=1e-3)


def test_paper_001_table_2_row_via_cli():
  out = _cli("--sampling=poisson", "--population=763430", "--clients_per_round=5000",
             "--rounds=5000", "--noise_multiplier=1.0", "--delta=1e-9", "--format=json")
  assert out.returncode == 0, out.stderr
  result = json.loads(out.stdout)
  assert round(result["epsilon_moments_accountant"], 3) == 4.634  # Paper 001, Sec. 3.
  assert result["epsilon_rdp"] <= result["epsilon_moments_accountant"]
  assert result["epsilon_pld"] <= result["epsilon_rdp"]


# A small balls-in-bins setting: Thm 2.1 needs ~3.2e5 samples at δ = 1e-3, ~1 s. Runs on
# OS-entropy seeds use a wide margin (relative Monte Carlo error here is ~4%, so margin 0.5
# puts verification ~7 standard errors clear: no flaky failures).
_BIB = dict(name="dpsgd", params_in=None, epochs=2, batches_per_epoch=8, buffers=4,
            target_epsilon=2.0, delta=1e-3)
_BIB_FLAGS = ["--sampling=balls_in_bins", "--mechanism=dpsgd", "--epochs=2",
              "--batches_per_epoch=8", "--target_epsilon=2", "--delta=1e-3"]


def test_balls_in_bins_sigma_is_released_only_after_verification():
  out = _cli(*_BIB_FLAGS, "--calibration_margin=0.5", "--format=json")
  assert out.returncode == 0, out.stderr
  r = json.loads(out.stdout)
  assert r["released"] is True and r["verification"] == "passed"
  # Calibrated to δ_cal = δ_verify / (1 + margin) on one seed, verified on another.
  assert r["delta_verify"] == pytest.approx(verification.DEFAULT_VERIFY_RATIO * 1e-3)
  assert r["delta_calibration"] == pytest.approx(r["delta_verify"] / 1.5)
  assert r["calibration_seed"] != r["verification_seed"]
  assert r["verification_delta_hat"] <= r["delta_verify"]
  required = verification.required_num_samples(r["delta_verify"], 1e-3)
  assert r["mc_samples"] == r["mc_samples_required"] == required
  assert 0 < r["verification_failure_probability_bound"] <= 1e-3  # Thm 2.1.
  assert "Thm 2.1" in r["guarantee"] and "(ε = 2, δ = 0.001)-DP" in r["guarantee"]
  # The σ printed is the σ verified: recheck it on the verification seed.
  assert r["noise_multiplier"] >= r["calibration_noise_multiplier"]
  mechanism = catalog.build("dpsgd", rounds=16, min_sep=8, max_participations=2).mechanism
  pair = balls_in_bins.dominating_pair(num_bins=8, num_epochs=2,
                                       **mechanism.lower_triangular_input(16))
  again = balls_in_bins.estimate_verify_release(
      pair, noise_multiplier=r["noise_multiplier"], epsilon=2.0, delta=1e-3,
      seed=r["verification_seed"], num_samples=r["mc_samples"])
  assert again.verified and again.delta_hat == pytest.approx(r["verification_delta_hat"])
  assert r["noise_multiplier"] < r["noise_multiplier_without_amplification"]


def test_balls_in_bins_seeds_fresh_by_default_reproducible_with_seed():
  a = cli.balls_in_bins_release(**_BIB, calibration_margin=0.5)
  b = cli.balls_in_bins_release(**_BIB, calibration_margin=0.5)
  seeds = {a["calibration_seed"], a["verification_seed"], b["calibration_seed"],
           b["verification_seed"]}
  assert len(seeds) == 4  # OS entropy: every run, and both stages, get their own seed.
  c = cli.balls_in_bins_release(**_BIB, seed=7)
  d = cli.balls_in_bins_release(**_BIB, seed=7)
  assert c["calibration_seed"] == 7 != c["verification_seed"]
  assert c["delta_calibration"] == pytest.approx(
      c["delta_verify"] / (1 + cli.DEFAULT_CALIBRATION_MARGIN))
  assert (c["verification_seed"], c["noise_multiplier"]) == (
      d["verification_seed"], d["noise_multiplier"])
  assert any("--seed=7" in n for n in c["notes"])
  for seed in (0, 1, 2**64 + 3):
    cal, ver = amplification.accounting_seeds(seed)
    assert cal == seed and ver != cal


def test_balls_in_bins_failed_verification_releases_nothing(monkeypatch):
  # Calibration that returns too small a σ (as a bad seed or an optimistic estimate
  # could): the genuine verification on the fresh seed must catch it.
  real = balls_in_bins.calibrate_noise_multiplier

  def optimistic(*args, **kwargs):
    cal = real(*args, **kwargs)
    return dataclasses.replace(cal, noise_multiplier=0.8 * cal.noise_multiplier)

  monkeypatch.setattr(balls_in_bins, "calibrate_noise_multiplier", optimistic)
  with pytest.raises(cli.VerificationFailedError, match="--calibration_margin"):
    cli.balls_in_bins_release(**_BIB, seed=0)
  out = io.StringIO()
  err = io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    rc = cli.main([*_BIB_FLAGS, "--format=json"])
  assert rc == 1
  assert out.getvalue() == ""  # No σ printed at all.
  message = err.getvalue()
  assert "verification failed, no σ released" in message
  assert "--mc_samples=" in message and "--calibration_margin=" in message
  assert "Traceback" not in message


@pytest.mark.parametrize("flags,message", [
    (["--mc_samples=1000"], "--mc_samples=1000 is below the 321214"),
    (["--delta_verify=1e-3"], "--delta_verify=0.001 must be in (0, --delta=0.001)"),
    (["--calibration_margin=-0.5"], "--calibration_margin=-0.5"),
    (["--seed=-1"], "--seed=-1"),
    (["--noise_multiplier=1"], "--noise_multiplier=1 is not used with --sampling=balls_in_bins"),
])
def test_balls_in_bins_bad_flags_are_clear_errors(flags, message):
  out = _cli(*_BIB_FLAGS, *flags)
  assert out.returncode == 2, out.stdout
  assert message in out.stderr and "Traceback" not in out.stderr


def test_released_sigma_is_rounded_up():
  for x in (1.2345649, 1.2345651, 7.379, 1e-7 / 3, 123456789.1, 0.1 + 0.2):
    up = amplification.round_up(x)
    assert up >= x and float(f"{up:.6g}") == up
    assert up <= x * (1 + 1e-5)


class _LowerBoundMechanism(catalog.DpSgdMechanism):
  """C = I, but reporting a lower bound (sqrt(k)) next to a larger valid upper bound."""

  def sensitivity(self, rounds, min_sep, max_participations):
    exact = super().sensitivity(rounds, min_sep, max_participations)
    return catalog.Sensitivity(exact.value, catalog.LOWER_BOUND, "test lower bound",
                               upper=2.5 * exact.value, upper_method="test upper bound")


def test_min_sep_calibration_uses_the_guaranteed_sensitivity(monkeypatch, tmp_path):
  monkeypatch.setattr(cli, "_mechanism", lambda *args: _LowerBoundMechanism())
  report = tmp_path / "report.md"
  out = cli.matrix_mechanism("dpsgd", None, 100, 20, 5, 4, None, 2.0, 1e-6, None,
                             str(report))
  lower, upper = math.sqrt(5), 2.5 * math.sqrt(5)
  sigma = zcdp.noise_multiplier_for_epsilon(upper, 2.0, 1e-6)
  assert out["noise_multiplier"] == pytest.approx(sigma, rel=1e-5)
  assert out["noise_multiplier"] >= sigma  # Rounded up: ε stays at or below the target.
  assert out["epsilon"] <= 2.0 and out["epsilon"] == pytest.approx(2.0, rel=1e-4)
  assert out["sensitivity_is_lower_bound"] is True and out["sensitivity_kind"] == "upper_bound"
  assert out["sensitivity"] == out["sensitivity_guaranteed"] == pytest.approx(upper)
  assert out["sensitivity_lower_bound"] == pytest.approx(lower)
  assert out["sensitivity_upper_bound_method"] == "test upper bound"
  assert out["rho"] == pytest.approx(upper**2 / (2 * out["noise_multiplier"]**2))
  assert out["epsilon_from_lower_bound"] < out["epsilon"]
  assert any("LOWER bound" in n for n in out["notes"])
  # With σ given, the headline ε also comes from the guaranteed sensitivity.
  given = cli.matrix_mechanism("dpsgd", None, 100, 20, 5, 4, 3.0, None, 1e-6, None, None)
  assert given["epsilon"] == pytest.approx(
      zcdp.matrix_mechanism_guarantee(upper, 3.0, 1e-6).epsilon)
  table = cli.format_table(out)
  assert "sensitivity_lower_bound" in table and "sensitivity_guaranteed" in table


def test_min_sep_exact_sensitivity_output_is_unlabelled():
  out = cli.matrix_mechanism("dpsgd", None, 100, 20, 5, 4, None, 2.0, 1e-6, None, None)
  assert out["sensitivity_is_lower_bound"] is False and out["sensitivity_kind"] == "exact"
  assert "sensitivity_lower_bound" not in out
  assert out["noise_multiplier"] == pytest.approx(
      zcdp.noise_multiplier_for_epsilon(math.sqrt(5), 2.0, 1e-6), rel=1e-5)


@pytest.mark.parametrize("args,message", [
    (["--mechanism=dpsgd", "--rounds=10", "--min_sep=2", "--noise_multiplier=1",
      "--delta=1.5"], "delta"),
    (["--mechanism=dpsgd", "--rounds=10", "--min_sep=2", "--noise_multiplier=-1",
      "--delta=1e-6"], "noise_multiplier"),
    (["--mechanism=dpsgd", "--rounds=10", "--min_sep=2", "--target_epsilon=0",
      "--delta=1e-6"], "epsilon"),
    (["--mechanism=dpsgd", "--rounds=10", "--min_sep=2", "--delta=1e-6"],
     "exactly one of --noise_multiplier and --target_epsilon"),
    (["--sampling=poisson", "--population=10", "--clients_per_round=20", "--rounds=5",
      "--noise_multiplier=1", "--delta=1e-6"], "clients_per_round"),
])
def test_bad_input_is_a_clear_error(args, message):
  out = _cli(*args)
  assert out.returncode == 2, out.stdout
  assert message in out.stderr and "Traceback" not in out.stderr


_BMS_FLAGS = ["--sampling=b_min_sep", "--mechanism=blt", "--rounds=12", "--min_sep=3",
              "--population=100", "--clients_per_round=20", "--delta=5e-3", "--seed=4",
              "--format=json"]


def test_b_min_sep_releases_sigma_or_epsilon_beside_the_unamplified_guarantee():
  out = _cli(*_BMS_FLAGS, "--target_epsilon=2")
  assert out.returncode == 0, out.stderr
  sigma_for = json.loads(out.stdout)
  assert sigma_for["released"] and sigma_for["verification"] == "passed"
  assert sigma_for["epsilon"] == 2.0 and sigma_for["solved_for"] == "noise_multiplier"
  # p whose stationary cohort p N / (1 + (b - 1) p) is 20 of 100.
  assert sigma_for["sampling_probability"] == pytest.approx(0.2 / (1 - 2 * 0.2))
  assert sigma_for["noise_multiplier"] < sigma_for["noise_multiplier_without_amplification"]
  assert not sigma_for["exact_likelihood_ratio"]  # BLT: rows shared 3 rounds apart.
  assert any("conservative" in n for n in sigma_for["notes"])
  out = _cli(*_BMS_FLAGS, f"--noise_multiplier={sigma_for['noise_multiplier']}")
  assert out.returncode == 0, out.stderr
  eps_for = json.loads(out.stdout)
  assert eps_for["solved_for"] == "epsilon"
  assert eps_for["epsilon"] == pytest.approx(2.0, rel=0.15)
  assert eps_for["epsilon"] < eps_for["epsilon_without_amplification"]


@pytest.mark.parametrize("flags,message", [
    ([], "exactly one of --target_epsilon"),
    (["--target_epsilon=2", "--noise_multiplier=1"], "exactly one of --target_epsilon"),
    (["--target_epsilon=2", "--clients_per_round=40"], "at most 1/3"),
    (["--target_epsilon=2", "--sampling_probability=1.5"], "`--sampling_probability` must be"),
    (["--target_epsilon=2", "--warm_start=maybe"], "--warm_start"),
])
def test_b_min_sep_bad_flags_are_clear_errors(flags, message):
  out = _cli(*_BMS_FLAGS, *flags)
  assert out.returncode == 2, out.stdout
  assert message in out.stderr and "Traceback" not in out.stderr


_CYCLIC = ["--sampling=cyclic_poisson", "--mechanism=bandmf", "--rounds=60", "--min_sep=6",
           "--population=6000", "--clients_per_round=100", "--delta=1e-5"]


def test_cyclic_poisson_epsilon_and_sigma_for_a_target():
  out = _cli(*_CYCLIC, "--noise_multiplier=1.0", "--format=json")
  assert out.returncode == 0, out.stderr
  r = json.loads(out.stdout)
  assert r["sampling_probability"] == pytest.approx(0.1) and r["compositions"] == 10
  g = amplification.cyclic_poisson_epsilon(1.0, column_norm=r["column_norm"],
                                           sampling_probability=0.1, num_groups=6,
                                           rounds=60, delta=1e-5)
  assert r["epsilon"] == pytest.approx(g.epsilon)
  assert r["epsilon"] < r["epsilon_without_amplification"]
  out = _cli(*_CYCLIC, "--target_epsilon=2", "--format=json")
  assert out.returncode == 0, out.stderr
  r = json.loads(out.stdout)
  assert r["epsilon"] <= 2.0 and r["noise_multiplier"] > 0


@pytest.mark.parametrize("flags, message", [
    (["--mechanism=blt", "--noise_multiplier=1"], "banded"),
    (["--clients_per_round=2000", "--noise_multiplier=1"], "> 1"),
    (["--noise_multiplier=1", "--target_epsilon=2"], "exactly one"),
])
def test_cyclic_poisson_bad_flags_are_clear_errors(flags, message):
  out = _cli(*[f for f in _CYCLIC if not any(f.split("=")[0] == g.split("=")[0]
                                             for g in flags)], *flags)
  assert out.returncode == 2, out.stdout
  assert message in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("mechanism,bands", [("bsr", 8), ("bisr", 8), ("bandinvmf", 5)])
def test_banded_square_root_mechanisms_with_their_bands(mechanism, bands):
  out = cli.matrix_mechanism(mechanism, None, 120, 20, 6, 4, 3.0, None, 1e-6, None, None,
                             bands=bands)
  guaranteed = out.get("sensitivity_guaranteed", out["sensitivity"])
  assert out["epsilon"] == pytest.approx(
      zcdp.matrix_mechanism_guarantee(guaranteed, 3.0, 1e-6).epsilon, rel=1e-9)
  if mechanism == "bsr":  # b >= p: k unit columns.
    assert out["sensitivity_kind"] == "exact" and out["sensitivity"] == pytest.approx(
        math.sqrt(6))
  wider = cli.matrix_mechanism(mechanism, None, 120, 20, 6, 4, 3.0, None, 1e-6, None, None,
                               bands=30)  # > b: the columns of one client's rounds overlap.
  assert wider["epsilon"] != out["epsilon"]  # --bands reaches the mechanism.


def test_bands_flag_is_checked():
  out = _cli("--mechanism=bisr", "--rounds=10", "--min_sep=2", "--bands=0",
             "--noise_multiplier=1", "--delta=1e-6")
  assert out.returncode == 2 and "--bands" in out.stderr and "Traceback" not in out.stderr


def test_b_min_sep_with_device_availability_accounts_every_class():
  flags = [f for f in _BMS_FLAGS if not f.startswith(("--clients_per_round", "--rounds"))]
  out = _cli(*flags, "--rounds=16", "--clients_per_round=5", "--availability=diurnal",
             "--round_hours=3", "--target_epsilon=2")
  assert out.returncode == 0, out.stderr
  r = json.loads(out.stdout)
  assert r["released"] and r["availability"]["num_classes"] >= 2
  assert sum(r["availability"]["class_sizes"]) == 100
  assert r["availability"]["peak_participation_rate"] == pytest.approx(0.05, rel=1e-6)
  assert r["mean_participation_rate"] <= 0.05
  assert any("independent of its data" in n for n in r["notes"])
  # At most half the devices check in on a day: 60 of 100 in a round is out of reach.
  out = _cli(*flags, "--rounds=16", "--clients_per_round=60", "--availability=diurnal",
             "--round_hours=3", "--target_epsilon=2")
  assert out.returncode == 2 and "--availability=always" in out.stderr, out.stderr
  out = _cli(*[f for f in flags if not f.startswith("--population")], "--rounds=16",
             "--sampling_probability=0.5", "--availability=diurnal", "--target_epsilon=2")
  assert out.returncode == 2 and "needs --population" in out.stderr, out.stderr


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
