"""What the distributed discrete Gaussian and Skellam cost in noise at each bit width (issue #45).

For a model of d parameters, cohorts of n clients, k participations per client and each target
ε (δ), prints the noise multiplier z each mechanism needs at each B bits per coordinate
(`--mechanism=ddgauss` / `skellam`, zero-out neighbours as in training:
`distributed_dp.calibrated_setting`), next to two central references — the continuous
Gaussian through the same Rényi conversion (what the distributed mechanisms tend to with many
bits) and DP-SGD's exact Gaussian (`zcdp`, what `--mechanism=dpsgd` calibrates) — and where
the gap comes from: TFF's rounding inflates the clip norm to `inflated_l2 / c` (√d' grid steps
of γ when unconditional; far less with `--ddp_betas` > 0, conditional rounding), while the
discrete Gaussian draws with ⌈σ⌉ (a little more noise than stated). Beside
them, cpSGD (paper 000, `--mechanism=cpsgd`) at each of `--cpsgd_levels` k: its noise
multiplier σ = w√(n m p(1−p))/c for the fewest Binomial trials m reaching ε (the Binomial
mechanism's Rényi DP, replace-one as cpSGD's analysis: `dp_fl.accounting.mean_estimation.
calibrate_cpsgd`, p = 1/2) and the bits a client then sends, ⌈log₂(k + m)⌉ — for cpSGD the
bits follow from ε and k, not the other way round. Defaults: the StackOverflow quick job (d
of its LSTM, n = 50, k = 1).

  .venv/bin/python -m scripts.distributed_dp_bits --epsilons 8,20 --bits 12,14,16,18,20
  .venv/bin/python -m scripts.distributed_dp_bits --ddp_betas 0,0.6065 --cpsgd_levels none
  ./bazelw run //scripts:distributed_dp_bits -- --format json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from typing import Any, Optional, Sequence

from dp_fl import _checks
from dp_fl import exits
from dp_fl import root_finding
from dp_fl.accounting import discrete_gaussian
from dp_fl.accounting import mean_estimation as mean_estimation_accounting
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import cpsgd

STACKOVERFLOW_QUICK_DIMENSION = 365_588  # The quick preset's LSTM (tasks/stackoverflow/train.py).


def renyi_gaussian_multiplier(epsilon: float, releases: int, delta: float) -> float:
  """z of the continuous Gaussian (sensitivity 1) whose k releases reach ε through the RDP
  conversion the distributed mechanisms use: Prop. 14 with one share (τ = 0) is α/(2z²)."""
  def epsilon_at(z: float) -> float:
    return discrete_gaussian.composed_epsilon(1.0, 1.0, z, 1, 1, 1, releases, delta)[0]
  return root_finding.bisect(lambda z: not epsilon_at(z) <= epsilon, 1e-3, 1e4,
                             relative_tolerance=1e-4)


def cpsgd_row(dimension: int, clients: int, participations: int, epsilon: float, levels: int,
              delta: float, clip_norm: float, central: float) -> dict[str, Any]:
  """cpSGD at k levels: the fewest trials m for ε, the bits it then sends, its σ."""
  estimator = mean_estimation_accounting.calibrate_cpsgd(
      mean_estimation_accounting.Rounds(
          cohort=clients, participations=participations, clip_norm=clip_norm, delta=delta,
          binomial_p=0.5, dimension=dimension), epsilon, levels)
  protocol = estimator.protocol
  sigma = protocol.noise_std_of_sum(clients) / clip_norm
  return {"epsilon": epsilon, "mechanism": f"cpsgd (k = {levels})",
          "bits": protocol.bits_per_coordinate,
          "secure_aggregation_bits": cpsgd.secure_sum_bits(clients, levels,
                                                           protocol.num_trials),
          "noise_multiplier": sigma, "vs_dpsgd": sigma / central, "levels": levels,
          "trials": protocol.num_trials, "epsilon_reached": estimator.guarantee["epsilon"],
          "note": "replace-one neighbours (cpSGD's analysis)"}


def rows(dimension: int, clients: int, participations: int, epsilons: Sequence[float],
         bits: Sequence[int], delta: float, clip_norm: float,
         cpsgd_levels: Sequence[int] = (), betas: Sequence[float] = (0.0,)
         ) -> list[dict[str, Any]]:
  """One row per (ε, mechanism, β, B): z, its ratio to DP-SGD's, and the inflation terms
  (β: the stochastic rounding's, `distributed_dp.check_beta`); one per (ε, k) for cpSGD
  (`cpsgd_row`)."""
  from dp_fl.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
  out = []
  for epsilon in epsilons:
    central = zcdp.noise_multiplier_for_epsilon(math.sqrt(participations), epsilon, delta)
    renyi = renyi_gaussian_multiplier(epsilon, participations, delta)
    out.append({"epsilon": epsilon, "mechanism": "dpsgd (exact Gaussian)", "bits": None,
                "noise_multiplier": central, "vs_dpsgd": 1.0})
    out.append({"epsilon": epsilon, "mechanism": "Gaussian, Rényi conversion", "bits": None,
                "noise_multiplier": renyi, "vs_dpsgd": renyi / central})
    for mechanism, beta, b in itertools.product(("ddgauss", "skellam"), betas, bits):
      row = {"epsilon": epsilon, "bits": b, "beta": beta,
             "mechanism": mechanism + (f" (β = {beta:.3g})" if beta else ""),
             "secure_aggregation_bits": b + math.ceil(math.log2(clients))}
      try:
        s = distributed_dp.calibrated_setting(
            mechanism, epsilon, delta, clients, dimension, b, clip_norm,
            fewest_clients=clients, releases=participations, adjacency=distributed_dp.ZERO_OUT,
            beta=beta)
      except ValueError as e:
        out.append(dict(row, noise_multiplier=None, vs_dpsgd=None, note=str(e)))
        continue
      out.append(dict(
          row, noise_multiplier=s.noise_multiplier, vs_dpsgd=s.noise_multiplier / central,
          epsilon_reached=s.epsilon, scale_factor=s.scale_factor,
          norm_inflation=s.scaled_inflated_l2 / (s.scale_factor * clip_norm),
          stddev_rounding=s.sampled_stddev / s.local_stddev, padded_dimension=s.padded_dimension))
    out += [cpsgd_row(dimension, clients, participations, epsilon, k, delta, clip_norm, central)
            for k in cpsgd_levels]
  return out


def markdown(table: Sequence[dict[str, Any]], setting: dict[str, Any]) -> str:
  lines = [f"d = {setting['dimension']}, n = {setting['clients']}, k = "
           f"{setting['participations']}, δ = {setting['delta']:g}, zero-out neighbours (cpSGD: "
           "replace-one, its analysis; B = ⌈log₂(k + m)⌉ for the fewest trials m)", "",
           "| ε | mechanism | B (SecAgg field) | z | z / DP-SGD's | clip norm inflated × | "
           "σ rounded up × |", "| --- | --- | --- | --- | --- | --- | --- |"]
  for r in table:
    def fmt(key: str, spec: str = ".4g") -> str:
      return "—" if r.get(key) is None else format(r[key], spec)
    bits = ("—" if r["bits"] is None else
            f"{r['bits']} ({r['secure_aggregation_bits']})")
    lines.append(f"| {r['epsilon']:g} | {r['mechanism']} | {bits} | "
                 + (fmt("noise_multiplier") if r.get("noise_multiplier") is not None
                    else "not reachable") + f" | {fmt('vs_dpsgd', '.3f')} | "
                 f"{fmt('norm_inflation', '.4f')} | {fmt('stddev_rounding', '.4f')} |")
  return "\n".join(lines) + "\n"


def _numbers(flag: str, text: str, kind: type) -> tuple[Any, ...]:
  try:
    values = tuple(kind(v) for v in text.split(",") if v.strip())
  except ValueError:
    raise ValueError(f"{flag}={text!r}: expected comma-separated numbers, e.g. "
                     f"{flag}={'8,20' if kind is float else '14,16'}.") from None
  if not values:
    raise ValueError(f"{flag}={text!r} names no value.")
  return values


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dimension", type=int, default=STACKOVERFLOW_QUICK_DIMENSION,
                      help="d, the model's parameters (default: the StackOverflow quick LSTM)")
  parser.add_argument("--clients", type=int, default=50, help="n, clients per round")
  parser.add_argument("--participations", type=int, default=1, help="k per client")
  parser.add_argument("--epsilons", default="8,20", help="target ε values, comma-separated")
  parser.add_argument("--bits", default="12,14,16,18,20", help="B values, comma-separated")
  parser.add_argument("--cpsgd_levels", default="2,4,16,64,256",
                      help="cpSGD's quantization levels k, comma-separated; 'none' skips cpSGD")
  parser.add_argument("--ddp_betas", default="0",
                      help="β of the stochastic rounding, comma-separated: 0 unconditional, "
                      "e.g. 0.6065 (e^(-1/2), the distributed DP paper's) conditional")
  parser.add_argument("--delta", type=float, default=1e-5)
  parser.add_argument("--clip_norm", type=float, default=0.3,
                      help="c (the StackOverflow preset's DP-SGD and distributed DP ζ)")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  exits.add_debug_flag(parser)
  args = parser.parse_args(None if argv is None else list(argv))

  def body() -> int:
    setting = dict(
        dimension=_checks.check_positive_int("--dimension", args.dimension),
        clients=_checks.check_positive_int("--clients", args.clients),
        participations=_checks.check_positive_int("--participations", args.participations),
        delta=_checks.check_open_unit("--delta", args.delta),
        clip_norm=_checks.check_positive("--clip_norm", args.clip_norm))
    epsilons = tuple(_checks.check_positive("--epsilons", e)
                     for e in _numbers("--epsilons", args.epsilons, float))
    from dp_fl.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
    bits = tuple(_checks.check_in_range("--bits", b, 1, distributed_dp.MAX_BITS, integer=True,
                                        why="TFF's DistributedDpSumFactory's range")
                 for b in _numbers("--bits", args.bits, int))
    levels = () if args.cpsgd_levels.strip() == "none" else tuple(
        _checks.check_in_range("--cpsgd_levels", k, 2, 1 << 20, integer=True,
                               why="cpSGD quantizes to k >= 2 levels")
        for k in _numbers("--cpsgd_levels", args.cpsgd_levels, int))
    betas = tuple(distributed_dp.check_beta(b, "--ddp_betas")
                  for b in _numbers("--ddp_betas", args.ddp_betas, float))
    table = rows(setting["dimension"], setting["clients"], setting["participations"],
                 epsilons, bits, setting["delta"], setting["clip_norm"], levels, betas)
    if args.format == "json":
      print(json.dumps({"setting": setting, "rows": table}, indent=1))
    else:
      print(markdown(table, setting), end="")
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
