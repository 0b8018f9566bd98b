"""Unbounded resources and numeric extremes: refused up front, with the flag, value and fix.

Issue #18: `scripts/mechanism --mechanism bandmf --rounds 100000`, `scripts/privacy --rounds
10000000` and training at `--rounds 1000000000` ran for hours or were OOM-killed with no
message. Each test here asserts the exit code (or exception), that the message names the flag
and its value, and where relevant that nothing was written and no work started.
"""

import io
import os
import tracemalloc
import warnings

import pytest

from dp_fl import _checks
from dp_fl import exits
from dp_fl import resources
from dp_fl.accounting import balls_in_bins
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import banded_optimize
from dp_fl.mechanisms import blt_optimize
from dp_fl.mechanisms import catalog
from scripts import mechanism as mechanism_cli
from scripts import privacy as privacy_cli


@pytest.fixture(autouse=True)
def _default_budgets():
  resources.set_budgets()
  yield
  resources.set_budgets()


def _no_work(*args, **kwargs):
  raise AssertionError("the expensive step started although it should have been refused")


def _mechanism(capsys, *flags):
  code = mechanism_cli.main(list(flags))
  return code, capsys.readouterr()


def _privacy(capsys, *flags):
  code = privacy_cli.main(list(flags))
  return code, capsys.readouterr()


# --- scripts/mechanism --------------------------------------------------------------------


def test_bandmf_at_100000_rounds_is_refused_before_optimizing(capsys, monkeypatch, tmp_path):
  monkeypatch.setattr(banded_optimize, "optimize_banded", _no_work)
  out = tmp_path / "p.json"
  code, io_ = _mechanism(capsys, "--mechanism=bandmf", "--rounds=100000", "--min_sep=10",
                         f"--params_out={out}", "--memory_budget_gb=64")
  assert code == exits.BAD_INPUT
  assert "--rounds=100000" in io_.err and "--memory_budget_gb" in io_.err
  assert "at most" in io_.err and "Traceback" not in io_.err
  assert not out.exists() and io_.out == ""


def test_blt_over_the_memory_budget_names_the_largest_rounds_that_fit(capsys, monkeypatch):
  monkeypatch.setattr(blt_optimize, "optimize_blt", _no_work)
  code, io_ = _mechanism(capsys, "--mechanism=blt", "--rounds=10000000", "--min_sep=10",
                         "--memory_budget_gb=0.01")
  assert code == exits.BAD_INPUT
  assert "--rounds=10000000" in io_.err and "memory budget of 10.2 MB" in io_.err
  fits = int(io_.err.split("at most ")[1].split()[0])
  options, _ = catalog.build_options("blt", rounds=fits, min_sep=10)
  assert catalog.family("blt").build_cost(options).bytes <= 0.01 * resources.GB
  options, _ = catalog.build_options("blt", rounds=fits + 1, min_sep=10)
  assert catalog.family("blt").build_cost(options).bytes > 0.01 * resources.GB


def test_time_budget_refuses_a_long_optimization(capsys, monkeypatch):
  monkeypatch.setattr(banded_optimize, "optimize_banded", _no_work)
  code, io_ = _mechanism(capsys, "--mechanism=bandmf", "--rounds=5000", "--min_sep=100",
                         "--memory_budget_gb=1000", "--time_budget_hours=0.01")
  assert code == exits.BAD_INPUT
  assert "--rounds=5000" in io_.err and "time budget" in io_.err
  assert "--time_budget_hours" in io_.err


def test_long_optimization_is_announced_with_its_estimate(capsys, monkeypatch):
  monkeypatch.setattr(resources, "ANNOUNCE_SECONDS", 0.0)
  code, io_ = _mechanism(capsys, "--mechanism=blt", "--rounds=50", "--min_sep=10",
                         "--buffers=1")
  assert code == exits.COMPLETED
  assert "note: optimizing a 1-buffer BLT for n=50 rounds will take about" in io_.err


@pytest.mark.parametrize("flag", ["--memory_budget_gb=-1", "--memory_budget_gb=nan",
                                  "--time_budget_hours=0"])
def test_bad_budget_flags_are_refused(capsys, flag):
  code, io_ = _mechanism(capsys, "--mechanism=dpsgd", "--rounds=10", "--min_sep=2", flag)
  assert code == exits.BAD_INPUT
  assert flag.split("=")[0] in io_.err and flag.split("=")[1] in io_.err


def test_unwritable_params_out_is_refused_before_optimizing(capsys, monkeypatch, tmp_path):
  monkeypatch.setattr(blt_optimize, "optimize_blt", _no_work)
  out = tmp_path / "missing" / "p.json"
  code, io_ = _mechanism(capsys, "--mechanism=blt", "--rounds=2000", "--min_sep=100",
                         f"--params_out={out}")
  assert code == exits.BAD_INPUT
  assert f"--params_out='{out}'" in io_.err and "does not exist" in io_.err
  assert not out.parent.exists()


@pytest.mark.parametrize("directory", ["/proc", "/sys"])
def test_params_out_where_even_root_cannot_write_is_refused_before_optimizing(
    capsys, monkeypatch, directory):
  # Found by a hostile-input pass (#43): the permission check passed for root, the
  # optimization ran, and the final write failed naming a temporary file.
  if not os.path.isdir(directory):
    pytest.skip(f"no {directory} here")
  ran = []
  monkeypatch.setattr(blt_optimize, "optimize_blt", lambda *a, **k: ran.append(1) or _no_work())
  code, io_ = _mechanism(capsys, "--mechanism=blt", "--rounds=2000", "--min_sep=100",
                         f"--params_out={directory}/p.json")
  assert code == exits.BAD_INPUT and not ran
  assert f"--params_out='{directory}/p.json' cannot be written" in io_.err
  assert ".tmp" not in io_.err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_params_out_directory_is_refused(capsys, monkeypatch, tmp_path):
  monkeypatch.setattr(blt_optimize, "optimize_blt", _no_work)
  locked = tmp_path / "locked"
  locked.mkdir()
  locked.chmod(0o500)
  try:
    code, io_ = _mechanism(capsys, "--mechanism=blt", "--rounds=2000", "--min_sep=100",
                           f"--params_out={locked / 'p.json'}")
  finally:
    locked.chmod(0o700)
  assert code == exits.BAD_INPUT
  assert "--params_out=" in io_.err and "cannot be written" in io_.err
  assert os.listdir(locked) == []


def test_params_out_that_is_a_directory_is_refused(capsys, tmp_path):
  code, io_ = _mechanism(capsys, "--mechanism=dpsgd", "--rounds=10", "--min_sep=2",
                         f"--params_out={tmp_path}")
  assert code == exits.BAD_INPUT and "is a directory" in io_.err


def test_eval_rounds_over_budget_names_eval_rounds(capsys):
  code, io_ = _mechanism(capsys, "--mechanism=tree_full", "--rounds=10", "--min_sep=2",
                         "--eval_rounds=1000000", "--memory_budget_gb=8")
  assert code == exits.BAD_INPUT and "--eval_rounds=1000000" in io_.err


@pytest.mark.parametrize("flag,value", [("--rounds", "3000000000"), ("--min_sep", "0"),
                                        ("--buffers", "0"), ("--bands", "-3"),
                                        ("--seed", "-1")])
def test_mechanism_int_flags_out_of_range(capsys, flag, value):
  flags = {"--mechanism": "dpsgd", "--rounds": "10", "--min_sep": "2", flag: value}
  code, io_ = _mechanism(capsys, *(f"{k}={v}" for k, v in flags.items()))
  assert code == exits.BAD_INPUT
  assert f"`{flag}` must be an integer in [" in io_.err and f"got {value}" in io_.err


# --- scripts/privacy ----------------------------------------------------------------------

_MIN_SEP = ("--mechanism=dpsgd", "--rounds=100", "--min_sep=20")


@pytest.mark.parametrize("flag,value", [
    ("--noise_multiplier", "1e-200"),  # σ² underflows: ρ = inf.
    ("--noise_multiplier", "1e-10"),  # ε overflows the conversion.
    ("--noise_multiplier", "1e200"),  # σ² overflows: ρ = 0.
    ("--delta", "0.5"),  # Guarantees nothing.
    ("--delta", "1e-300"),
    ("--target_epsilon", "1e-300"),
    ("--target_epsilon", "10000"),  # e^ε overflows.
])
def test_privacy_numeric_extremes_are_refused_with_the_range(capsys, flag, value):
  flags = {"--noise_multiplier": "1.0", "--delta": "1e-6"}
  if flag == "--target_epsilon":
    flags.pop("--noise_multiplier")
  flags[flag] = value
  code, io_ = _privacy(capsys, *_MIN_SEP, *(f"{k}={v}" for k, v in flags.items()))
  assert code == exits.BAD_INPUT, io_.out
  assert f"`{flag}` must be a number in [" in io_.err and repr(float(value)) in io_.err
  assert "Traceback" not in io_.err and io_.out == ""


@pytest.mark.parametrize("flag", ["--population=0", "--clients_per_round=0", "--rounds=0"])
def test_poisson_bad_counts(capsys, flag):
  flags = {"--population": "1000", "--clients_per_round": "10", "--rounds": "5"}
  name, value = flag.split("=")
  flags[name] = value
  code, io_ = _privacy(capsys, "--sampling=poisson", "--noise_multiplier=1", "--delta=1e-6",
                       *(f"{k}={v}" for k, v in flags.items()))
  assert code == exits.BAD_INPUT and f"`{name}`" in io_.err and "got 0" in io_.err


def test_privacy_ten_million_rounds_refused_by_the_time_budget(capsys, monkeypatch):
  monkeypatch.setattr(blt_optimize, "optimize_blt", _no_work)
  code, io_ = _privacy(capsys, "--mechanism=blt", "--rounds=10000000", "--min_sep=1",
                       "--noise_multiplier=5", "--delta=1e-6", "--time_budget_hours=0.05")
  assert code == exits.BAD_INPUT
  assert "--rounds=10000000" in io_.err and "time budget" in io_.err


def test_unwritable_report_out_is_refused_before_the_mechanism(capsys, monkeypatch, tmp_path):
  monkeypatch.setattr(blt_optimize, "optimize_blt", _no_work)
  out = tmp_path / "nope" / "report.md"
  code, io_ = _privacy(capsys, "--mechanism=blt", "--rounds=2000", "--min_sep=100",
                       "--noise_multiplier=5", "--delta=1e-6", f"--report_out={out}")
  assert code == exits.BAD_INPUT and "--report_out=" in io_.err
  assert not out.parent.exists()


def test_balls_in_bins_monte_carlo_over_budget_names_the_bins(capsys, monkeypatch):
  monkeypatch.setattr(blt_optimize, "optimize_blt", _no_work)
  monkeypatch.setattr(balls_in_bins, "calibrate_noise_multiplier", _no_work)
  code, io_ = _privacy(capsys, "--sampling=balls_in_bins", "--mechanism=blt", "--epochs=2",
                       "--batches_per_epoch=100000", "--target_epsilon=1", "--delta=1e-5",
                       "--seed=1", "--memory_budget_gb=16")
  assert code == exits.BAD_INPUT
  assert "--batches_per_epoch=100000" in io_.err and "Monte Carlo" in io_.err


# --- the shared path: catalog and accounting -----------------------------------------------


def test_catalog_build_checks_before_any_work(monkeypatch):
  monkeypatch.setattr(banded_optimize, "optimize_banded", _no_work)
  resources.set_budgets(memory_bytes=100e6)
  with pytest.raises(ValueError, match=r"--rounds=2000: optimizing BandMF"):
    catalog.build("bandmf", rounds=2000, min_sep=100)


def test_loaded_mechanism_evaluation_is_checked_in_check_rounds():
  mechanism = catalog.build("tree_full", rounds=4, min_sep=1).mechanism
  resources.set_budgets(memory_bytes=1e6)
  with pytest.raises(ValueError, match=r"--rounds=5000: evaluating TreeAgg-Full"):
    mechanism.sensitivity(5000, 100, None)
  assert mechanism.check_rounds(100) == 100  # 32 n² = 320 kB fits.


def test_rho_extremes_are_value_errors_naming_the_noise_multiplier():
  for sigma in (1e-200, 1e200):
    with pytest.raises(ValueError, match="`noise_multiplier`="):
      zcdp.rho_from_sensitivity(2.0, sigma)
  with pytest.raises(ValueError, match="astronomically large"):
    zcdp.epsilon_from_rho(1e20, 1e-6)  # Was an OverflowError (exit 1).


# --- estimates against measurements --------------------------------------------------------


def _peak(step):
  tracemalloc.start()
  try:
    step()
    return tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()


def test_blt_estimate_bounds_the_measured_peak():
  n = 20000
  options, _ = catalog.build_options("blt", rounds=n, min_sep=1000, buffers=2)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    peak = _peak(lambda: catalog.build("blt", rounds=n, min_sep=1000, buffers=2))
  estimate = catalog.family("blt").build_cost(options).bytes
  assert peak <= estimate <= 8 * peak + 2e6


def test_dense_evaluation_estimate_bounds_the_measured_peak():
  mechanism = catalog.build("bandmf", rounds=300, min_sep=50).mechanism
  peak = _peak(lambda: catalog.evaluate(mechanism, 300, 50))
  estimate = catalog.evaluation_cost("bandmf", 300).bytes
  assert peak <= estimate <= 4 * peak


def test_monte_carlo_estimate_bounds_the_measured_peak():
  pair = balls_in_bins.dominating_pair(num_bins=64, num_epochs=2,
                                       toeplitz_coefs=[1.0, 0.5, 0.25])
  peak = _peak(lambda: balls_in_bins.calibrate_noise_multiplier(
      pair, epsilon=2.0, delta=1e-3, num_samples=16384, seed=1))
  estimate = balls_in_bins.monte_carlo_cost(num_bins=64, num_epochs=2, num_samples=16384)
  assert peak <= estimate.bytes <= 4 * peak


# --- helpers -------------------------------------------------------------------------------


class _Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_progress_prints_only_after_the_delay_with_an_eta():
  clock, stream = _Clock(), io.StringIO()
  progress = resources.Progress("optimizing X", 10, stream=stream, interval=5, delay=3,
                                clock=clock)
  clock.now = 1.0
  progress.update(2)
  assert stream.getvalue() == ""
  clock.now = 4.0
  progress.update(4)  # 40% after 4 s: 6 s left.
  clock.now = 6.0
  progress.update(5)  # Within the interval: silent.
  clock.now = 10.0
  progress.advance(3)  # 80% after 10 s: ~2 s left.
  progress.finish()
  lines = stream.getvalue().splitlines()
  assert lines == ["optimizing X: 40% after 4 s, about 6 s left",
                   "optimizing X: 80% after 10 s, about 2 s left",
                   "optimizing X: done in 10 s"]


def test_quick_progress_is_silent():
  stream = io.StringIO()
  progress = resources.Progress("quick", 3, stream=stream)
  for i in range(3):
    progress.update(i + 1)
  progress.finish()
  assert stream.getvalue() == ""


def test_check_in_range():
  assert _checks.check_in_range("--x", 5, 1, 10, integer=True) == 5
  assert _checks.check_in_range("--y", "0.5", 0.1, 1) == 0.5
  for bad in (0, 11, 2.5, True, "3"):
    with pytest.raises(ValueError, match=r"`--x` must be an integer in \[1, 10\]"):
      _checks.check_in_range("--x", bad, 1, 10, integer=True)
  with pytest.raises(ValueError, match=r"`--y` must be a number in \[0.1, 1\] \(why\)"):
    _checks.check_in_range("--y", float("inf"), 0.1, 1, why="why")


def test_format_helpers():
  assert resources.format_bytes(512) == "512 B"
  assert resources.format_bytes(3 * resources.GB) == "3 GB"
  assert resources.format_seconds(45) == "45 s"
  assert resources.format_seconds(5400) == "90 min"
  assert resources.format_seconds(2 * 86400) == "2 days"


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
