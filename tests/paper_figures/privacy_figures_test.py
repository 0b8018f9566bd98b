"""Tests of paper 004's Figs. 8-10 (dp_fl/paper_figures/fig08_*, fig09_*, fig10_*, privacy_curves).

Every figure runs compute(quick=True) -> JSON round trip -> draw; its numbers are checked
against the library called directly (catalog sensitivities, zcdp guarantees, Eq. 2 from the
App. A parameters) and against Table 4's printed values.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dp_fl.accounting import zcdp
from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog
from dp_fl.paper_figures import fig08_extrapolation
from dp_fl.paper_figures import fig09_epsilon_vs_rounds
from dp_fl.paper_figures import figure_spec
from dp_fl.paper_figures import paper004
from dp_fl.paper_figures import privacy_curves

_FIGURES = {figure.name: figure for figure in paper004.FIGURES[-3:]}
_QUICK = privacy_curves.figure_settings(quick=True)


@pytest.fixture(scope="module")
def quick_data():
  """Each figure's quick data after a JSON round trip (what `draw` gets from a file)."""
  return {name: json.loads(json.dumps(figure.compute(True), allow_nan=False))
          for name, figure in _FIGURES.items()}


def _panel_series(panel, mechanism):
  return [s for s in panel["series"] if s["mechanism"] == mechanism]


def test_the_three_figures_are_exposed_by_name():
  assert list(_FIGURES) == ["fig08_extrapolation", "fig09_epsilon_vs_rounds",
                            "fig10_blt_toeplitz_coefficients"]


@pytest.mark.parametrize("name,number", [("fig08_extrapolation", 8),
                                         ("fig09_epsilon_vs_rounds", 9),
                                         ("fig10_blt_toeplitz_coefficients", 10)])
def test_compute_round_trip_draw_gives_labelled_figure(quick_data, name, number):
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  data = figure_spec.check_data(_FIGURES[name], quick_data[name])
  assert data["differences"] and data["checks"]
  for check in data["checks"]:
    assert set(check) == {"claim", "holds", "detail"}
    assert isinstance(check["holds"], bool) and check["claim"] and check["detail"]
  figure = _FIGURES[name].draw(data)
  assert isinstance(figure, Figure)
  assert figure._suptitle.get_text().startswith(f"Paper 004, Fig. {number}:")
  assert figure.axes
  for ax in figure.axes:
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    legend = ax.get_legend()
    assert legend is not None and legend.get_texts()


def test_draw_plots_the_numbers_of_the_dict(quick_data):
  data = json.loads(json.dumps(quick_data["fig09_epsilon_vs_rounds"]))
  series = _panel_series(data["panels"][1], "blt")[0]
  series["rho"] = [10.0 * r for r in series["rho"]]
  figure = fig09_epsilon_vs_rounds.draw(data)
  lines = [line for line in figure.axes[1].get_lines() if line.get_label() == series["label"]]
  assert len(lines) == 1
  np.testing.assert_allclose(lines[0].get_ydata(), series["rho"])


def test_fig09_blt_points_are_the_library_guarantee(quick_data):
  panel = quick_data["fig09_epsilon_vs_rounds"]["panels"][1]
  assert panel["min_sep"] == 400
  series = _panel_series(panel, "blt")[0]
  assert series["noise_multiplier"] == 7.379
  mechanism = catalog.BltMechanism(blt.PUBLISHED_BLTS[400])
  for n, k, rho, epsilon in zip(series["rounds"], series["max_participations"],
                                series["rho"], series["epsilon"]):
    assert k == math.ceil(n / 400)
    sens = mechanism.sensitivity(n, 400, math.ceil(n / 400)).guaranteed
    expected = zcdp.matrix_mechanism_guarantee(sens, 7.379, 1e-10)
    assert rho == pytest.approx(expected.rho, rel=1e-12)
    assert epsilon == pytest.approx(expected.epsilon, rel=1e-9)


def test_fig09_id_id_points_match_table4(quick_data):
  points = {p["label"]: p for p in quick_data["fig09_epsilon_vs_rounds"]["panels"][1][
      "table4_points"]}
  blt_point = points["Table 4 id-ID BLT-7.379 / 447 / 5"]
  assert (blt_point["rounds"], blt_point["min_sep"], blt_point["max_participations"]) == (
      2350, 447, 5)
  assert blt_point["rho"] == pytest.approx(0.195, abs=5e-4)  # Table 4 prints 0.20.
  assert blt_point["epsilon"] == pytest.approx(3.93, abs=5e-3)
  tree_point = points["Table 4 id-ID TreeAgg-7 / 437 / 5"]
  assert tree_point["rho"] == pytest.approx(92 / 98, rel=1e-12)  # Table 4 prints 0.94.


def test_fig09_blt_beats_treeagg_and_bandmf_stops_where_optimized(quick_data):
  data = quick_data["fig09_epsilon_vs_rounds"]
  assert [p["min_sep"] for p in data["panels"]] == [100, 400, 1000]
  for panel in data["panels"]:
    tree_rho = _panel_series(panel, "tree")[0]["rho"]
    blt_rho = _panel_series(panel, "blt")[0]["rho"]
    assert all(b < t for b, t in zip(blt_rho, tree_rho))
    bandmf = _panel_series(panel, "bandmf")[0]
    assert max(bandmf["rounds"]) == _QUICK.bandmf_rounds
    assert max(_panel_series(panel, "tree")[0]["rounds"]) == 4000
  assert privacy_curves.figure_settings(quick=False).bandmf_rounds == 2000
  assert data["caption"]["noise_multipliers"]["blt"]["100"] == pytest.approx(3.12 * 6500 / 3000)


def test_bandmf_noise_multiplier_matches_treeagg_rmse(quick_data):
  rounds = _QUICK.bandmf_rounds
  sigma = quick_data["fig09_epsilon_vs_rounds"]["caption"]["noise_multipliers"]["bandmf"]
  tree = catalog.evaluate(catalog.TreeMechanism(full=False), rounds, 400)
  for min_sep in (100, 400, 1000):
    bandmf = privacy_curves.bandmf_mechanism(rounds, min_sep)
    evaluation = catalog.evaluate(bandmf, rounds, min(min_sep, rounds))
    assert sigma[str(min_sep)] * evaluation.rms_error == pytest.approx(7 * tree.rms_error,
                                                                       rel=1e-12)


def test_privacy_curve_uses_the_upper_bound_and_keeps_the_lower_one():
  tree = catalog.TreeMechanism(full=False, max_work=1)  # Out of budget: a bracket.
  sens = tree.sensitivity(100, 7, 5)
  assert not sens.is_exact and sens.guaranteed > sens.value
  curve = privacy_curves.privacy_curve(tree, [(100, 7, 5)], 7.0)
  assert curve["sensitivity_kind"] == ["upper_bound"]
  assert curve["rho"][0] == pytest.approx(sens.guaranteed ** 2 / 98)
  assert curve["rho_lower_bound"][0] == pytest.approx(sens.value ** 2 / 98)
  exact = privacy_curves.privacy_curve(tree, [(64, 32, 9)], 7.0)  # k capped at 2.
  assert exact["max_participations"] == [2] and exact["rho_lower_bound"] == [None]


def test_fig10_coefficients_follow_eq2_and_invert(quick_data):
  data = quick_data["fig10_blt_toeplitz_coefficients"]
  parameters = {p["min_sep"]: p for p in data["paper"]["app_a_blts"]}
  assert [c["min_sep"] for c in data["curves"]] == [100, 400, 1000]
  for curve in data["curves"]:
    theta = np.array(parameters[curve["min_sep"]]["theta"])
    omega = np.array(parameters[curve["min_sep"]]["omega"])
    assert tuple(theta) == blt.PUBLISHED_BLTS[curve["min_sep"]].theta
    c, c_hat = np.array(curve["coef"]), np.array(curve["inverse_coef"])
    n = c.size
    assert n == curve["rounds"] == c_hat.size
    t = np.arange(1, n)
    eq2 = np.concatenate([[1.0], (omega[None, :] * theta[None, :] ** (t[:, None] - 1)).sum(1)])
    np.testing.assert_allclose(c, eq2, rtol=1e-12)
    np.testing.assert_allclose(np.convolve(c, c_hat)[:n], np.eye(1, n)[0], atol=1e-12)
    assert c_hat[0] == 1.0 and np.all(c_hat[1:] < 0)
  full = privacy_curves.figure_settings(quick=False)
  assert full.fig10_rounds is None  # Each BLT's own n: 2000, 4000, 4000.
  assert all(check["holds"] for check in data["checks"])


def test_fig08_extrapolation_rules(quick_data):
  data = quick_data["fig08_extrapolation"]
  panels = {p["key"]: p for p in data["panels"]}
  sigma0 = data["caption"]["noise_multiplier_at_6500"]
  assert sigma0["blt"] == 7.379
  for key, population in (("a", 3_000_000), ("b", 10_000_000)):
    assert panels[key]["population"] == population
    for series in panels[key]["series"]:
      m = series["report_goal"]
      assert series["noise_multiplier"] == pytest.approx(sigma0[series["mechanism"]] * m / 6500)
      assert set(series["min_sep"]) == {population // m}
      assert series["max_participations"] == [math.ceil(n / (population // m))
                                              for n in series["rounds"]]
      if series["mechanism"] == "bandmf":
        assert max(series["rounds"]) <= _QUICK.bandmf_rounds
    report_goals = [s["report_goal"] for s in panels[key]["series"] if s["mechanism"] == "blt"]
    assert report_goals == [3250, 6500, 13000, 26000]
  for key, cap in (("c", None), ("d", 2)):
    for series in panels[key]["series"]:
      assert set(series["rounds"]) == {_QUICK.bandmf_rounds}
      assert series["min_sep"] == list(_QUICK.fig8_min_seps)
      for b, k in zip(series["min_sep"], series["max_participations"]):
        worst = math.ceil(_QUICK.bandmf_rounds / b)
        assert k == (worst if cap is None else min(cap, worst))
  # A BLT point against the library directly: σ scaled to m = 26000.
  series = [s for s in panels["a"]["series"]
            if s["mechanism"] == "blt" and s["report_goal"] == 26000][0]
  n, b, k = series["rounds"][-1], series["min_sep"][-1], series["max_participations"][-1]
  sens = catalog.BltMechanism(blt.PUBLISHED_BLTS[400]).sensitivity(n, b, k).guaranteed
  assert series["rho"][-1] == pytest.approx(
      zcdp.matrix_mechanism_guarantee(sens, 7.379 * 4, 1e-10).rho, rel=1e-12)


def test_bandmf_is_the_build_figs_1_to_6_ask_for():
  # Figs. 1-6 spell a BandMF this way (`rms_loss.bandmf`); both must hit one key.
  assert privacy_curves.bandmf_mechanism(120, 24) is figure_spec.built(
      "bandmf", rounds=120, min_sep=24, max_participations=None, buffers=4, bands=24,
      optimize_for="rms").mechanism
  # b̂ > n: bands = n, the same build as b̂ = n.
  assert (privacy_curves.bandmf_mechanism(120, 400)
          is privacy_curves.bandmf_mechanism(120, 120))


def test_calibrated_noise_multiplier_reproduces_the_rho():
  bandmf = privacy_curves.bandmf_mechanism(_QUICK.bandmf_rounds, 400)
  calibration = privacy_curves.calibrate_noise_multiplier(bandmf, 150, 37, 9, 0.29)
  assert calibration.max_participations == 5  # Capped at ⌈150/37⌉.
  sens = bandmf.sensitivity(150, 37, 5)
  assert calibration.noise_multiplier == pytest.approx(sens.guaranteed / math.sqrt(0.58),
                                                       rel=1e-12)
  curve = privacy_curves.privacy_curve(bandmf, [(150, 37, 5)], calibration.noise_multiplier)
  assert curve["rho"][0] == pytest.approx(0.29, rel=1e-12)
  assert calibration.sensitivity_kind == curve["sensitivity_kind"][0]
  assert privacy_curves.es_es_bandmf_calibration(_QUICK.bandmf_rounds) is None  # n < 1280.


def test_quick_fig08_draws_the_rmse_rule_and_fig09_notes_the_es_es_sigma(quick_data):
  caption = quick_data["fig08_extrapolation"]["caption"]
  bandmf = caption["bandmf_noise_multiplier_at_6500"]
  assert bandmf["drawn"] == "rmse_rule" and bandmf["table4_es_es"] is None
  assert caption["noise_multiplier_at_6500"]["bandmf"] == bandmf["rmse_rule"]
  fig9 = quick_data["fig09_epsilon_vs_rounds"]["caption"]["noise_multipliers"]
  assert bandmf["rmse_rule"] == pytest.approx(fig9["bandmf"]["400"], rel=1e-12)
  assert fig9["bandmf_table4_es_es_note"]["400"] is None
  assert "Fig. 8 draws" in fig9["bandmf_table4_es_es_note"]["note"]


def test_fig08_draws_the_es_es_calibrated_bandmf_and_checks_both(monkeypatch):
  # The full-size path at quick sizes: a calibration at a quick (n, b, k) stands in for es-ES.
  bandmf = privacy_curves.bandmf_mechanism(_QUICK.bandmf_rounds, 400)
  calibration = privacy_curves.calibrate_noise_multiplier(bandmf, 150, 37, 4, 0.29)
  monkeypatch.setattr(privacy_curves, "es_es_bandmf_calibration", lambda rounds: calibration)
  data = json.loads(json.dumps(fig08_extrapolation.compute(True)))
  sigma0 = data["caption"]["bandmf_noise_multiplier_at_6500"]
  drawn = calibration.noise_multiplier
  assert sigma0["drawn"] == "table4_es_es" and sigma0["table4_es_es"] == drawn
  assert data["caption"]["noise_multiplier_at_6500"]["bandmf"] == drawn
  assert data["table4_es_es_bandmf_calibration"]["noise_multiplier"] == drawn
  for panel in data["panels"]:
    for series in _panel_series(panel, "bandmf"):
      assert series["noise_multiplier"] == pytest.approx(drawn * series["report_goal"] / 6500)
  claims = [c["claim"] for c in data["checks"]]
  under_drawn = [c for c in claims if "Table 4 es-ES calibration, drawn" in c]
  under_rmse = [c for c in claims if "Sec. 5 RMSE rule, not drawn" in c]
  assert len(under_drawn) == len(under_rmse) >= 2
  # The RMSE rule's claim, recomputed: ρ_BandMF scales by (σ_drawn / σ_rmse)².
  blt_c, bandmf_c = next(p for p in data["panels"] if p["key"] == "c")["series"]
  factor = (drawn / sigma0["rmse_rule"]) ** 2
  ratios = [b / (m * factor) for b, m in zip(blt_c["rho"], bandmf_c["rho"])]
  check = next(c for c in data["checks"] if c["claim"].startswith("Caption and (1), panel (c)")
               and "RMSE rule" in c["claim"])
  assert check["holds"] == all(r < 1 for r in ratios)
  assert f"{min(ratios):.2f} .. {max(ratios):.2f}" in check["detail"]


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
