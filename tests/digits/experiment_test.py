"""tasks.digits.experiment: calibration (ε ≤ target, m smallest), the cpSGD round against
its bounds, short training runs, the binary's outputs and its flag errors."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import dp_accounting
import numpy as np
import pytest

from dp_fl.accounting import cpsgd as cpsgd_accounting
from dp_fl.mechanisms import cpsgd
from tasks.digits import data
from tasks.digits import experiment
from tasks.digits import model

SMALL = experiment.Settings(clients_per_round=100, epochs=3, learning_rate=0.2, momentum=0.9,
                            clip_norm=1.0, delta=1e-9, binomial_p=0.5, hidden_layers=(16,))
SMALL_DIMENSION = model.Mlp((64, 16, 10)).dimension  # 1,210 (d' = 2,048).


@pytest.fixture(scope="module")
def digits():
  return data.load("sklearn_digits")


@pytest.mark.parametrize("epochs", [1, 3])
@pytest.mark.parametrize("levels", [2, 16])
def test_calibrated_trials_reach_the_target_and_are_the_fewest(epochs, levels):
  settings = dataclasses.replace(SMALL, epochs=epochs)
  estimator = experiment.calibrate_cpsgd(settings, SMALL_DIMENSION, 4.0, levels)
  protocol = estimator.protocol
  assert protocol.x_max == cpsgd.rotated_x_max(1.0, 100, SMALL_DIMENSION, 1e-9)

  def composed(trials):
    return cpsgd_accounting.composed_epsilon(
        levels, trials, 0.5, protocol.x_max, 1.0, 2048, 100, epochs, 1e-9).epsilon

  # trials_for_epsilon returns an m within 0.1 % of the smallest (its relative_tolerance).
  slack = max(1, int(1e-3 * protocol.num_trials))
  assert composed(protocol.num_trials) <= 4.0 < composed(protocol.num_trials - slack)
  described = estimator.describe()
  assert described["epsilon"] == composed(protocol.num_trials)
  assert described["participations"] == epochs and described["padded_dimension"] == 2048
  assert described["bits_per_coordinate"] == math.ceil(math.log2(levels +
                                                                 protocol.num_trials))


def test_more_epochs_need_more_trials():
  one = experiment.calibrate_cpsgd(dataclasses.replace(SMALL, epochs=1), SMALL_DIMENSION,
                                   4.0, 16)
  three = experiment.calibrate_cpsgd(SMALL, SMALL_DIMENSION, 4.0, 16)
  assert three.protocol.num_trials > one.protocol.num_trials


def test_many_levels_calibrate():  # The Rényi accountant has no e^ε₀ to overflow.
  estimator = experiment.calibrate_cpsgd(SMALL, SMALL_DIMENSION, 2.0, 256)
  assert estimator.describe()["epsilon"] <= 2.0


@pytest.mark.parametrize("epochs", [1, 5])
def test_gaussian_calibration_matches_an_independent_pld_accountant(epochs):
  settings = dataclasses.replace(SMALL, epochs=epochs, clip_norm=0.5)
  estimator = experiment.calibrate_gaussian(settings, SMALL_DIMENSION, 4.0, None)
  assert estimator.describe()["epsilon"] == pytest.approx(4.0, rel=1e-6)
  # E rounds, each the sum (sensitivity 2D, replace-one) plus N(0, σ²): PLD of E Gaussians.
  accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  accountant.compose(dp_accounting.GaussianDpEvent(
      estimator.noise_std_of_sum / (2 * settings.clip_norm)), epochs)
  assert accountant.get_epsilon(1e-9) == pytest.approx(4.0, rel=0.01)
  assert estimator.describe()["noise_std_of_mean"] == estimator.noise_std_of_sum / 100


def test_cpsgd_round_is_unbiased_within_the_mse_bound():
  """One round's estimate of the mean of n clipped vectors: E‖X̂ − X̄‖² is at least the
  Binomial noise's d·std² (the noise is i.i.d. over the d' rotated coordinates, R is
  orthogonal, and the estimate keeps d of them) and at most Thm. 3/4's bound
  (`Protocol.mse_bound`). Averaged over 200 rounds (20,000 squared errors: the mean's
  relative std is about 1%, the 10% margins are ~10 std)."""
  rng = np.random.default_rng(0)
  n, d = 50, 100
  vectors = cpsgd.clip_l2(rng.normal(size=(n, d)) * 0.2, 1.0)
  settings = dataclasses.replace(SMALL, clients_per_round=n, epochs=1)
  estimator = experiment.calibrate_cpsgd(settings, d, 8.0, 4)
  estimates = np.array([estimator.estimate(vectors, 7, r) for r in range(200)])
  errors = np.sum((estimates - vectors.mean(0)) ** 2, axis=1)
  noise_only = d * estimator.describe()["noise_std_of_mean"] ** 2
  bound = estimator.protocol.mse_bound(n, d, delta=1e-9)
  assert 0.9 * noise_only <= np.mean(errors) <= 1.1 * bound
  bias = np.sum((estimates.mean(axis=0) - vectors.mean(0)) ** 2)
  assert bias < 0.05 * noise_only  # Unbiased: about noise_only / 200 expected.
  # The rotation's signs are public and fresh every round.
  signs = [cpsgd.rademacher_signs(experiment.stream(7, experiment.ROTATION, r), d)
           for r in range(2)]
  assert not np.array_equal(*signs)


def test_none_learns_and_cpsgd_at_a_large_epsilon_learns_above_chance(digits):
  plain = experiment.train(digits, SMALL, experiment.PlainMean(), seed=0)
  assert plain["test_accuracy"] > 0.8
  assert plain["max_participations"] == 3 and plain["rounds"] == 3 * (1438 // 100)
  private = experiment.calibrate_cpsgd(SMALL, SMALL_DIMENSION, 200.0, 16)
  result = experiment.train(digits, SMALL, private, seed=0)
  assert result["test_accuracy"] > 0.4  # Chance is 0.1.
  assert len(result["test_accuracy_per_epoch"]) == 3 and result["diverged_at_round"] is None


def test_binary_quick_run_writes_json_markdown_and_png(tmp_path, capsys):
  out_dir = str(tmp_path / "out")
  code = experiment.main(["--quick", "--hidden_layers", "16", "--epsilons", "50",
                          "--levels", "4,16", "--workers", "1", "--out_dir", out_dir,
                          "--format", "json"])
  assert code == 0
  printed = json.loads(capsys.readouterr().out)
  with open(os.path.join(out_dir, experiment.RESULTS_JSON), encoding="utf-8") as f:
    written = json.load(f)
  assert printed["rows"] == written["rows"]
  groups = {(r["mechanism"], r["epsilon_target"], r["num_levels"]) for r in written["rows"]}
  assert groups == {("none", None, None), ("gaussian", 50.0, None), ("cpsgd", 50.0, 4),
                    ("cpsgd", 50.0, 16)}
  for r in written["rows"]:
    if r["epsilon"] is not None:
      assert r["epsilon"] <= 50.0 * (1 + 1e-9)
  assert "replace-one" in written["privacy"] and "No amplification" in written["privacy"]
  text = open(os.path.join(out_dir, experiment.RESULTS_MD), encoding="utf-8").read()
  assert "| 50 | cpsgd | 16 |" in text and experiment.FIGURE_PNG in text
  with open(os.path.join(out_dir, experiment.FIGURE_PNG), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  # --replot rewrites the Markdown and the figure from the JSON alone.
  os.remove(os.path.join(out_dir, experiment.FIGURE_PNG))
  assert experiment.main(["--replot", os.path.join(out_dir, experiment.RESULTS_JSON)]) == 0
  assert os.path.exists(os.path.join(out_dir, experiment.FIGURE_PNG))
  assert "| 50 | cpsgd | 4 |" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--epsilons", "2,x"], "--epsilons='2,x': 'x' is not a number"),
    (["--epsilons", "-1"], "--epsilons: -1 is not a finite ε > 0"),
    (["--levels", "1,4"], "--levels: k = 1 quantization levels"),
    (["--levels", "4.5"], "--levels='4.5': '4.5' is not a whole number"),
    (["--mechanisms", "gaussian,laplace"], "unknown ['laplace']"),
    (["--clients_per_round", "0"], "--clients_per_round=0"),
    (["--clients_per_round", "5000"], "--clients_per_round=5000 exceeds the 1438"),
    (["--epochs", "two"], "--epochs='two' is not a whole number"),
    (["--delta", "2"], "--delta=2"),
    (["--binomial_p", "1"], "--binomial_p=1"),
    (["--momentum", "1.5"], "--momentum=1.5"),
    (["--num_seeds", "0"], "--num_seeds=0"),
    (["--hidden_layers", "60,0"], "--hidden_layers='60,0'"),
    (["--dataset", "mnist"], "--dataset=mnist needs --data_dir"),
    (["--dataset", "cifar"], "--dataset='cifar' is not known"),
    (["--replot", "/nonexistent/results.json"], "No such file"),
])
def test_bad_flags_name_the_flag_and_exit_2_or_3(flags, message, capsys):
  code = experiment.main(["--quick", "--workers", "1", *flags])
  err = capsys.readouterr().err
  assert code in (2, 3), err
  assert message in err and "Traceback" not in err


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
