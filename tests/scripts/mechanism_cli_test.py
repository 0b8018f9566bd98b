"""scripts/mechanism.py: every mechanism end to end, JSON keys, params round trip, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dp_fl.mechanisms import blt
from scripts import mechanism as cli

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_REQUIRED_KEYS = {"mechanism", "rounds", "min_sep", "max_participations", "sensitivity",
                  "max_error", "rms_error", "max_loss", "rms_loss", "buffers",
                  "optimize_seconds", "params"}


def _run(mechanism, rounds=64, min_sep=16, k=None, **kw):
  args = dict(buffers=2, bands=None, optimize_for="max", seed=0, params_in=None,
              params_out=None, eval_rounds=None, eval_min_sep=None,
              eval_max_participations=None)
  args.update(kw)
  return cli.run(mechanism, rounds, min_sep, k, **args)


@pytest.mark.parametrize("mechanism,buffers", [("blt", 2), ("bandmf", 15), ("tree", 6),
                                               ("tree_full", None), ("dpsgd", 0)])
def test_every_mechanism_reports_the_documented_keys(mechanism, buffers):
  report = _run(mechanism)
  assert _REQUIRED_KEYS <= set(report)
  assert report["max_participations"] == 4  # ceil(64 / 16)
  assert report["rms_error"] <= report["max_error"] + 1e-12
  assert report["max_loss"] == pytest.approx(report["sensitivity"] * report["max_error"])
  assert report["buffers"] == buffers


def test_dpsgd_matches_closed_form():
  report = _run("dpsgd", rounds=100, min_sep=10, k=3)
  assert report["sensitivity"] == pytest.approx(3 ** 0.5)
  assert report["max_error"] == pytest.approx(100 ** 0.5)  # Row n of A has n ones.
  assert report["rms_error"] == pytest.approx((sum(range(1, 101)) / 100) ** 0.5)


def test_params_round_trip_and_robustness_evaluation(tmp_path):
  out = tmp_path / "blt.json"
  first = _run("blt", params_out=str(out))
  again = _run("blt", params_in=str(out), eval_rounds=128, eval_min_sep=8)
  assert again["max_loss"] == pytest.approx(first["max_loss"], rel=1e-12)
  assert again["optimize_seconds"] == 0.0
  ev = again["evaluation_at"]
  assert (ev["rounds"], ev["min_sep"], ev["max_participations"]) == (128, 8, 16)


def test_infeasible_k_is_reduced_and_said():
  report = _run("dpsgd", rounds=10, min_sep=5, k=7)
  assert report["max_participations"] == 2
  assert any("reduced" in n for n in report["notes"])


def test_params_of_another_mechanism_is_refused(tmp_path):
  path = tmp_path / "p.json"
  path.write_text(blt.PUBLISHED_BLTS[400].to_json())
  with pytest.raises(ValueError, match="holds a 'blt' mechanism"):
    _run("bandmf", params_in=str(path))


def test_cli_json_and_clean_error():
  env = dict(os.environ, PYTHONPATH=_ROOT)
  ok = subprocess.run([sys.executable, "-m", "scripts.mechanism", "--mechanism=dpsgd",
                       "--rounds=20", "--min_sep=5", "--format=json"],
                      cwd=_ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert ok.returncode == 0, ok.stderr
  assert json.loads(ok.stdout)["sensitivity"] == pytest.approx(2.0)
  bad = subprocess.run([sys.executable, "-m", "scripts.mechanism", "--mechanism=blt",
                        "--rounds=0", "--min_sep=5"],
                       cwd=_ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert bad.returncode == 2
  assert "`--rounds` must be an integer in [1, 2147483647]; got 0" in bad.stderr
  assert "Traceback" not in bad.stderr


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
