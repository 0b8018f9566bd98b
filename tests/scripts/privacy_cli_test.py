"""scripts/privacy.py: paper 004 Table 4 (BLT rows), paper 001 Table 2, balls-in-bins, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dp_fl.mechanisms import blt
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


def test_balls_in_bins_amplification_lowers_sigma():
  out = cli.balls_in_bins_calibration("dpsgd", None, 2, 8, 4, 2.0, 1e-3, 2**15, 0)
  assert out["noise_multiplier"] < out["noise_multiplier_without_amplification"]
  assert out["mc_samples"] == 2**15 and out["standard_error"] > 0


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


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
