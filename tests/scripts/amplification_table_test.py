"""Tests for scripts/amplification_table.py (σ per mechanism × participation at one ε)."""

from __future__ import annotations

import json
import math
import os

import pytest

from scripts import amplification_table as table_lib

TINY = dict(rounds=24, epochs=3, delta=1e-4, epsilons=(2.0, 8.0),
            mechanisms=(("blt", None), ("bandmf", None), ("dpsgd", None)), cyclic_bands=(2,),
            min_sep_fractions=(1.0, 0.5))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  out_dir = str(tmp_path_factory.mktemp("amp"))
  table_lib.SETTINGS["tiny"] = TINY
  try:
    assert table_lib.main(["--setting", "tiny", "--mc_samples", str(2 ** 16), "--out_dir",
                           out_dir, "--format", "json"]) == 0
  finally:
    del table_lib.SETTINGS["tiny"]
  with open(os.path.join(out_dir, "table.json"), encoding="utf-8") as f:
    return json.load(f), out_dir


def test_every_mechanism_under_every_scheme_that_applies(tiny):
  output, _ = tiny
  schemes = {}
  for r in output["rows"]:
    schemes.setdefault(r["family"], set()).add(r["scheme"])
  assert schemes == {"blt": {"min_sep", "balls_in_bins", "b_min_sep"},  # BLT is not banded.
                     "bandmf": {"min_sep", "balls_in_bins", "cyclic_poisson", "b_min_sep"},
                     "dpsgd": {"min_sep", "balls_in_bins", "cyclic_poisson", "b_min_sep"}}


def test_amplification_needs_less_noise_than_min_sep_for_the_same_c(tiny):
  output, _ = tiny
  by = {(r["mechanism"], r["scheme"], r["epsilon"]): r for r in output["rows"]}
  for (mechanism, scheme, eps), r in by.items():
    if scheme == "balls_in_bins":
      minsep = by[(mechanism, "min_sep", eps)]
      assert r["noise_multiplier"] < minsep["noise_multiplier"]
      assert r["rmse_improvement_percent"] > 0
    assert r["noise_multiplier"] > 0 and r["rmse"] > 0
  # b-min-sep at b = n/E bins with p = 1 is balls-in-bins' schedule: the same σ (within the
  # two Monte Carlo errors) where the likelihood ratio is exact; below the unamplified σ of
  # its own min-sep always (a smaller b allows more participations than the min-sep row's).
  for r in output["rows"]:
    if r["scheme"] == "b_min_sep":
      assert r["noise_multiplier"] < r["unamplified_noise_multiplier"]
      if r["min_sep"] == 8 and r["exact_likelihood_ratio"]:
        assert r["sampling_probability"] == pytest.approx(1.0)
        bib = by[(r["mechanism"], "balls_in_bins", r["epsilon"])]
        se = math.hypot(r["noise_multiplier_standard_error"],
                        bib["noise_multiplier_standard_error"])
        assert r["noise_multiplier"] == pytest.approx(bib["noise_multiplier"], abs=4 * se)
  dpsgd = by[("dpsgd", "cyclic_poisson", 2.0)]
  assert dpsgd["noise_multiplier"] < by[("dpsgd", "min_sep", 2.0)]["noise_multiplier"]


def test_outputs_json_markdown_and_png(tiny):
  _, out_dir = tiny
  text = open(os.path.join(out_dir, "table.md"), encoding="utf-8").read()
  assert "| blt | balls_in_bins | 2 |" in text and "table.png" in text
  with open(os.path.join(out_dir, "table.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_too_few_samples_is_a_clear_error(capsys):
  assert table_lib.main(["--mc_samples", "10"]) == 2
  assert "--mc_samples=10" in capsys.readouterr().err


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
