"""Tests of paper 004's Figs. 1-6 (dp_fl/paper_figures/fig0[1-6]_*.py, rms_loss.py) at quick=True
sizes.

Every figure is computed once (quick), JSON round-tripped and drawn; its numbers are checked
against `catalog.build` / `catalog.evaluate` called directly (fresh mechanisms, no memo), and
the relative panels against the ratio of the unnormalized ones.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dp_fl.mechanisms import catalog
from dp_fl.paper_figures import fig02_rms_loss_vs_min_sep
from dp_fl.paper_figures import figure_spec
from dp_fl.paper_figures import paper004
from dp_fl.paper_figures import rms_loss

NAMES = ("fig01_optimization_time", "fig02_rms_loss_vs_min_sep", "fig03_vary_min_sep",
         "fig04_vary_min_sep_k_n_over_b", "fig05_vary_rounds", "fig06_min_sep_robustness")
FIGURES = paper004.FIGURES[:len(NAMES)]


@pytest.fixture(scope="module")
def data():
  """{name: compute(quick=True) after a JSON round trip}."""
  return {f.name: json.loads(json.dumps(f.compute(True))) for f in FIGURES}


def _figure(name):
  return next(f for f in FIGURES if f.name == name)


def _series(panel, label):
  return next(s for s in panel["series"] if s["label"] == label)


def test_figures_are_the_six_in_order():
  assert tuple(f.name for f in FIGURES) == NAMES
  assert all(isinstance(f, figure_spec.PaperFigure) for f in FIGURES)
  assert all(f.draw is rms_loss.draw for f in FIGURES)


@pytest.mark.parametrize("name", NAMES)
def test_data_records_caption_paper_differences_and_checks(data, name):
  figure_data = figure_spec.check_data(_figure(name), data[name])
  number = NAMES.index(name) + 1
  assert figure_data["title"].startswith(f"Paper 004, Fig. {number}: ")
  assert figure_data["quick"] is True and figure_data["rounds"] == rms_loss.QUICK_ROUNDS
  assert isinstance(figure_data["caption"], str) and "n" in figure_data["caption"]
  assert figure_data["paper"] and figure_data["differences"]
  assert figure_data["checks"]
  for check in figure_data["checks"]:
    assert set(check) == {"claim", "holds", "detail"}
    assert isinstance(check["holds"], bool)
  for panel in figure_data["panels"]:
    for series in panel["series"]:
      assert len(series["x"]) == len(series["y"]) > 0
      assert all(math.isfinite(y) and y > 0 for y in series["y"])


@pytest.mark.parametrize("name", NAMES)
def test_draw_plots_exactly_the_series_with_labelled_axes_and_legend(data, name):
  figure = _figure(name).draw(data[name])
  axes = figure.get_axes()
  panels = data[name]["panels"]
  assert len(axes) == len(panels)
  assert figure.get_suptitle() == data[name]["title"]
  for ax, panel in zip(axes, panels):
    assert ax.get_xlabel() == panel["xlabel"] and ax.get_ylabel() == panel["ylabel"]
    assert ax.get_xscale() == panel["xscale"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [s["label"] for s in panel["series"]]
    lines = {line.get_label(): line for line in ax.get_lines()}
    for series in panel["series"]:
      np.testing.assert_array_equal(lines[series["label"]].get_xdata(), series["x"])
      np.testing.assert_array_equal(lines[series["label"]].get_ydata(), series["y"])


def test_draw_uses_only_the_data_and_marks_lower_bounds():
  series = {"label": "BandMF(b̂=4)", "mechanism": {"name": "bandmf"}, "x": [1, 2, 4],
            "y": [3.0, 2.0, 1.0], "sensitivity_kind": ["lower_bound", "exact", "exact"]}
  data = {"title": "Paper 004, Fig. 9: test", "panels": [
      {"title": "t", "xlabel": "b", "ylabel": "RmsLoss", "xscale": "log", "yscale": "linear",
       "series": [series]}]}
  figure = rms_loss.draw(data)
  ax, = figure.get_axes()
  open_markers = [l for l in ax.get_lines() if l.get_label() == "_nolegend_"]
  assert len(open_markers) == 1
  np.testing.assert_array_equal(open_markers[0].get_xdata(), [1])
  notes = lambda figure: [t.get_text() for t in figure.texts if t.get_text() != data["title"]]
  assert notes(figure) == [rms_loss.LOWER_BOUND_LEGEND]
  series["sensitivity_kind"] = ["exact"] * 3
  assert notes(rms_loss.draw(data)) == []


def test_fig01_times_every_build_and_records_the_machine(data):
  fig = data["fig01_optimization_time"]
  bandmf, blt_series = fig["panels"][0]["series"]
  assert bandmf["label"] == "BandMF" and blt_series["label"].startswith("BLT")
  assert max(blt_series["x"]) > 10 * max(bandmf["x"])  # BLT reaches far larger n.
  assert all(t > 0 for t in bandmf["y"] + blt_series["y"])
  assert fig["machine"]["cpu_count"] >= 1 and fig["machine"]["platform"]
  rows = fig["paper"]["table2_seconds_to_compute_n_coefficients_of_C_inverse"]["rows"]
  assert [r["n"] for r in rows] == [2000, 20000, 200000]


def test_fig02_points_equal_catalog_evaluate_of_fresh_mechanisms(data):
  fig = data["fig02_rms_loss_vs_min_sep"]
  n = fig["rounds"]
  for panel, k in zip(fig["panels"], (2, 5)):
    for series in panel["series"]:
      arguments = dict(series["mechanism"])
      mechanism = catalog.build(arguments.pop("name"), **arguments).mechanism
      for i in (0, len(series["x"]) // 2, len(series["x"]) - 1):
        b = series["x"][i]
        expected = catalog.evaluate(mechanism, n, b, k)
        assert series["y"][i] == pytest.approx(expected.rms_loss, rel=1e-12)
        assert series["sensitivity_kind"][i] == expected.sensitivity_kind
        assert series["max_participations"][i] == min(k, -(-n // b))


def test_fig02_sign_changes_match_the_points(data):
  fig = data["fig02_rms_loss_vs_min_sep"]
  left = fig["panels"][0]
  b_hat = rms_loss.Scale(fig["rounds"]).of(400)
  blt = dict(zip(*(_series(left, "BLT(k=2, mean)")[key] for key in ("x", "y"))))
  bandmf = dict(zip(*(_series(left, f"BandMF(b̂={b_hat})")[key] for key in ("x", "y"))))
  changes = fig["blt_vs_bandmf_k2_sign_changes"]
  for b in blt:
    # Sign of BLT - BandMF flips at each change: parity of changes at or below b.
    flips = sum(c <= b for c in changes)
    assert (blt[b] < bandmf[b]) == ((blt[min(blt)] < bandmf[min(blt)]) == (flips % 2 == 0))


def test_sign_changes_are_located_exactly():
  sign_changes = fig02_rms_loss_vs_min_sep._sign_changes  # pylint: disable=protected-access
  assert sign_changes(lambda b: b < 37 or b >= 80, [1, 10, 50, 100]) == [37, 80]
  assert sign_changes(lambda b: True, [1, 10, 50]) == []


@pytest.mark.parametrize("name", ["fig03_vary_min_sep", "fig04_vary_min_sep_k_n_over_b",
                                  "fig05_vary_rounds"])
def test_relative_panel_is_the_ratio_of_the_unnormalized_one(data, name):
  relative, unnormalized = data[name]["panels"]
  reference = relative["series"][0]["relative_to"]
  ref = dict(zip(_series(unnormalized, reference)["x"], _series(unnormalized, reference)["y"]))
  for rel, raw in zip(relative["series"], unnormalized["series"]):
    assert rel["label"] == raw["label"] and rel["x"] == raw["x"]
    np.testing.assert_allclose(rel["y"], [y / ref[x] for x, y in zip(raw["x"], raw["y"])],
                               rtol=1e-14)
  np.testing.assert_allclose(_series(relative, reference)["y"], 1.0)


def test_fig03_keeps_k_3_up_to_the_largest_such_b(data):
  fig = data["fig03_vary_min_sep"]
  n = fig["rounds"]
  for series in fig["panels"][1]["series"]:
    assert series["max_participations"] == [min(3, -(-n // b)) for b in series["x"]]
    assert (n - 1) // 2 in series["x"]  # b = 999 at n = 2000: still 3 participations.


def test_fig04_uses_only_b_dividing_n_with_k_n_over_b(data):
  fig = data["fig04_vary_min_sep_k_n_over_b"]
  n = fig["rounds"]
  for series in fig["panels"][1]["series"]:
    assert all(n % b == 0 for b in series["x"])
    assert series["max_participations"] == [n // b for b in series["x"]]
    assert n in series["x"]


def test_fig05_bandmf_stops_at_its_n_and_blts_cover_every_n(data):
  fig = data["fig05_vary_rounds"]
  unnormalized = fig["panels"][1]
  all_rounds = max((s["x"] for s in unnormalized["series"]), key=len)
  assert max(all_rounds) == fig["rounds"]
  kinds = {s["mechanism"]["name"] for s in unnormalized["series"]}
  assert kinds == {"blt", "bandmf"}
  for series in unnormalized["series"]:
    optimized_for = series["mechanism"]["rounds"]
    if series["mechanism"]["name"] == "bandmf":
      assert series["x"] == [r for r in all_rounds if r <= optimized_for]
    else:
      assert series["x"] == all_rounds
    assert series["max_participations"] == [-(-r // b) for r, b in
                                            zip(series["x"], series["min_sep"])]


def test_fig06_is_fig02_k5_relative_to_the_blt(data):
  fig6 = data["fig06_min_sep_robustness"]
  right = data["fig02_rms_loss_vs_min_sep"]["panels"][1]
  relative, = fig6["panels"]
  reference = relative["series"][0]["relative_to"]
  ref = dict(zip(_series(right, reference)["x"], _series(right, reference)["y"]))
  for series in relative["series"]:
    raw = dict(zip(_series(right, series["label"])["x"], _series(right, series["label"])["y"]))
    np.testing.assert_allclose(series["y"], [raw[x] / ref[x] for x in series["x"]],
                               rtol=1e-14)


def test_built_is_keyed_by_the_arguments_with_catalog_defaults_filled_in():
  first = figure_spec.built("bandmf", rounds=30, min_sep=6, bands=6, optimize_for="rms")
  assert figure_spec.is_built("bandmf", rounds=30, min_sep=6, bands=6, optimize_for="rms")
  assert figure_spec.built("bandmf", optimize_for="rms", bands=6, min_sep=6, rounds=30,
                           max_participations=None, buffers=4, seed=0) is first
  assert not figure_spec.is_built("bandmf", rounds=30, min_sep=6, optimize_for="rms")
  errors = first.mechanism.per_query_squared_error(30)
  assert first.mechanism.per_query_squared_error(30) is errors  # Computed once per n.
  fresh = catalog.build("bandmf", rounds=30, min_sep=6, bands=6, optimize_for="rms")
  np.testing.assert_allclose(errors, fresh.mechanism.per_query_squared_error(30), rtol=1e-12)


def test_bandmf_is_the_build_the_privacy_figures_ask_for(data):
  # privacy_curves.bandmf_mechanism spells a BandMF this way; both must hit one key.
  n = rms_loss.QUICK_ROUNDS
  b_hat = rms_loss.Scale(n).of(400)
  arguments = rms_loss.bandmf(n, b_hat, "BandMF").build_arguments()
  name = arguments.pop("name")
  assert figure_spec.is_built(name, **arguments)  # Built by Figs. 1-6 (the fixture).
  assert figure_spec.built("bandmf", rounds=n, min_sep=b_hat, bands=b_hat,
                           optimize_for="rms") is figure_spec.built(name, **arguments)


def test_claim_and_log_log_shape_measures():
  entry = figure_spec.claim("c", np.bool_(True), "d")
  assert entry == {"claim": "c", "holds": True, "detail": "d"}
  assert type(entry["holds"]) is bool  # JSON-ready.
  xs = [1, 2, 4, 8]
  power_law = [3.0 * x ** -0.5 for x in xs]
  np.testing.assert_allclose(figure_spec.log_log_slopes(xs, power_law), -0.5)
  assert figure_spec.roughness(xs, power_law) == pytest.approx(0.0, abs=1e-12)
  assert figure_spec.roughness(xs, [1, 2, 4, 4]) == pytest.approx(1.0)  # Slopes 1, 1, 0.


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
