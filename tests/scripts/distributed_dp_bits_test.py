"""scripts/distributed_dp_bits: the noise the distributed mechanisms need at each bit width."""

import json
import math

import pytest

from scripts import distributed_dp_bits

ARGS = ["--dimension", "1000", "--clients", "20", "--participations", "2", "--epsilons", "4",
        "--bits", "6,12,16,20"]


@pytest.fixture(scope="module")
def table():
  return distributed_dp_bits.rows(1000, 20, 2, (4.0,), (6, 12, 16, 20), 1e-5, 0.3, (2, 16, 256))


def test_more_bits_need_less_noise_down_to_the_renyi_gaussian(table):
  (central,) = [r for r in table if r["mechanism"].startswith("dpsgd")]
  (renyi,) = [r for r in table if r["mechanism"].startswith("Gaussian")]
  assert renyi["vs_dpsgd"] > 1  # The Rényi conversion is looser than the exact Gaussian.
  for mechanism in ("ddgauss", "skellam"):
    rows = [r for r in table if r["mechanism"] == mechanism and r["noise_multiplier"]]
    multipliers = [r["noise_multiplier"] for r in rows]
    assert multipliers == sorted(multipliers, reverse=True) and len(rows) == 3
    for r in rows:
      # z = the Rényi Gaussian's × TFF's norm inflation, over ⌈σ⌉'s rounding up (more noise
      # drawn than stated), to the bisection's 0.1 % — plus Skellam's second term and the
      # discrete Gaussian's τ, both >= 0.
      floor = renyi["noise_multiplier"] * r["norm_inflation"] / r["stddev_rounding"]
      assert floor * (1 - 2e-3) <= r["noise_multiplier"] <= floor * 1.02
      assert r["epsilon_reached"] <= 4.0 and r["secure_aggregation_bits"] == r["bits"] + 5
    assert rows[-1]["vs_dpsgd"] < 1.1 * renyi["vs_dpsgd"]
    (coarse,) = [r for r in table if r["mechanism"] == mechanism and r["bits"] == 6]
    assert coarse["noise_multiplier"] is None and "use more bits" in coarse["note"]
  assert central["noise_multiplier"] < renyi["noise_multiplier"]


def test_cpsgd_sends_the_bits_its_trials_need_and_more_levels_cost_less_noise(table):
  (central,) = [r for r in table if r["mechanism"].startswith("dpsgd")]
  rows = [r for r in table if r["mechanism"].startswith("cpsgd")]
  assert [r["levels"] for r in rows] == [2, 16, 256]
  for r in rows:
    assert r["bits"] == math.ceil(math.log2(r["levels"] + r["trials"]))
    assert r["epsilon_reached"] <= 4.0 and r["noise_multiplier"] > central["noise_multiplier"]
    assert r["vs_dpsgd"] == pytest.approx(r["noise_multiplier"] / central["noise_multiplier"])
  assert [r["bits"] for r in rows] == sorted(r["bits"] for r in rows)
  multipliers = [r["noise_multiplier"] for r in rows]
  assert multipliers == sorted(multipliers, reverse=True)


def test_conditional_rounding_brings_coarse_grids_near_the_renyi_gaussian():
  # β = e^(-1/2): the norm bound after rounding is enforced near c, so 12 bits need almost
  # the Rényi Gaussian's z where unconditional rounding needs far more.
  table = distributed_dp_bits.rows(1000, 20, 2, (4.0,), (10, 12), 1e-5, 0.3, (),
                                   (0.0, math.exp(-0.5)))
  (renyi,) = [r for r in table if r["mechanism"].startswith("Gaussian")]
  for mechanism in ("ddgauss", "skellam"):
    for bits in (10, 12):
      plain, conditional = sorted((r for r in table if r["bits"] == bits
                                   and r["mechanism"].startswith(mechanism)),
                                  key=lambda r: r["beta"])
      assert conditional["mechanism"] == f"{mechanism} (β = 0.607)"
      assert conditional["norm_inflation"] < plain["norm_inflation"]
      assert conditional["noise_multiplier"] < plain["noise_multiplier"]
      assert conditional["epsilon_reached"] <= 4.0
    assert conditional["noise_multiplier"] < 1.1 * renyi["noise_multiplier"]


def test_json_and_table_outputs(capsys):
  assert distributed_dp_bits.main(ARGS + ["--format", "json"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["setting"]["clients"] == 20 and len(out["rows"]) == 2 + 2 * 4 + 5
  assert distributed_dp_bits.main(ARGS + ["--cpsgd_levels", "none", "--format", "json"]) == 0
  assert len(json.loads(capsys.readouterr().out)["rows"]) == 2 + 2 * 4
  assert distributed_dp_bits.main(ARGS) == 0
  text = capsys.readouterr().out
  assert "| 4 | ddgauss | 16 (21) |" in text and "not reachable" in text


@pytest.mark.parametrize("flags,match", [
    (["--bits", "23"], "--bits"), (["--epsilons", "eight"], "--epsilons"),
    (["--clients", "0"], "--clients"), (["--delta", "1"], "--delta"),
    (["--cpsgd_levels", "1"], "--cpsgd_levels"), (["--ddp_betas", "1"], "--ddp_betas"),
    (["--ddp_betas", "-0.5"], "--ddp_betas")])
def test_bad_flags_are_named(flags, match, capsys):
  assert distributed_dp_bits.main(flags) != 0
  assert match in capsys.readouterr().err


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
