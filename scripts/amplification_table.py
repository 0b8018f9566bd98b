"""The noise each (mechanism × participation) needs at one ε: min-sep, balls-in-bins, cyclic
Poisson, b-min-sep.

For n rounds in E epochs (a client takes part once per epoch on average) and each target ε at
δ, the σ each scheme needs and the RMSE it gives (σ·√mean_t ||B[t]||², the prefix-sum error
per round for unit clip norm, comparable across mechanisms):

* min_sep — fixed participation: every client at most E times, ≥ n/E rounds apart (paper 004,
  Sec. 3.1; exact sensitivity, exact Gaussian (ε, δ));
* balls_in_bins — b = n/E bins (paper 003): σ by Alg. 2 on `--mc_samples` samples, with its
  Monte Carlo standard error (an estimate for planning; a training run releases σ only after
  Estimate-Verify-Release, `dp_fl.training.amplified`);
* cyclic_poisson — banded C only (BandMF with G bands, DP-SGD with G = 1): G groups, rate
  q = E·G/n, ⌈n/G⌉ compositions of the Poisson-subsampled Gaussian (PLD);
* b_min_sep — a client waits b − 1 rounds after taking part, then is sampled with the p whose
  stationary rate is E/n (Dong & Ganesh 2026), for b = each `min_sep_fractions` · n/E (at
  b = n/E, p = 1: balls-in-bins' schedule): σ by the calibration with defensive importance
  sampling, sized to a 5 % relative standard error of δ̂ (at most `--mc_samples`), with its
  standard error (an estimate; a run releases σ only after Estimate-Verify-Release).

Settings: `stackoverflow` (paper 004 Table 3: n = 2052, E = 6; BLT and BandMF),
`paper003_fig2` (paper 003 Fig. 2: n = 2048, E = 16; DP-SGD and 64-band BandMF, the RMSE
improvement of each amplification over no amplification) and `b_min_sep_headline` (n = 256,
E = 8: b-min-sep, cyclic Poisson and balls-in-bins on the same 16-band BandMF and DP-SGD at
the same participation rate, from high noise to low). Writes table.json, table.md and
table.png in --out_dir; prints the Markdown (or JSON with --format json).

  .venv/bin/python -m scripts.amplification_table --setting stackoverflow --out_dir /tmp/amp
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from typing import Any, Optional, Sequence

import numpy as np

from dp_fl import exits
from dp_fl import results
from dp_fl import writers
from dp_fl.accounting import amplification
from dp_fl.accounting import b_min_sep
from dp_fl.accounting import balls_in_bins
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.participation import schemes

SETTINGS = {
    "stackoverflow": dict(rounds=2052, epochs=6, delta=1e-5, epsilons=(2.0, 4.0, 8.0),
                          mechanisms=(("blt", None), ("bandmf", None)),
                          cyclic_bands=(4, 16, 64), min_sep_fractions=(1.0, 0.5)),
    # b-min-sep next to cyclic Poisson and balls-in-bins on the same C at the same rate (1/32
    # a round): BandMF with 16 bands (cyclic Poisson's 16 groups, q = 0.5; b-min-sep b = 16,
    # p = 1/17, exact), and DP-SGD (Poisson q = 1/32).
    # b-min-sep at paper 004's schedule with its population's rate, 1000 of 342,477 a round
    # (b = 342: p = 0.677); the other schemes' rows are the `stackoverflow` setting's.
    "stackoverflow_b_min_sep": dict(rounds=2052, epochs=6, delta=1e-5, epsilons=(2.0, 4.0, 8.0),
                                    mechanisms=(("blt", None), ("bandmf", None)),
                                    cyclic_bands=(), min_sep_fractions=(1.0,),
                                    participation_rate=1000 / 342477,
                                    schemes=("min_sep", "b_min_sep")),
    "b_min_sep_headline": dict(rounds=256, epochs=8, delta=1e-5,
                               epsilons=(1.0, 2.0, 4.0, 8.0, 16.0),
                               mechanisms=(("bandmf", 16), ("dpsgd", None)),
                               cyclic_bands=(16,), min_sep_fractions=(0.5,)),
    "paper003_fig2": dict(rounds=2048, epochs=16, delta=1e-5,
                          epsilons=(1.0, 2.0, 4.0, 8.0, 16.0),
                          mechanisms=(("dpsgd", None), ("bandmf", 64)), cyclic_bands=(),
                          min_sep_fractions=()),
}
MIN_SEP, BALLS_IN_BINS, CYCLIC_POISSON, B_MIN_SEP = SCHEMES = schemes.analyses(
    schemes.CORRELATED)
"""The analyses of the participation schemes that serve DP-FTRL (`schemes.Scheme.analysis`)."""


def _rmse(mechanism: catalog.Mechanism, rounds: int, sigma: float) -> float:
  return float(sigma * math.sqrt(np.mean(mechanism.per_query_squared_error(rounds))))


def _build(name: str, rounds: int, min_sep: int, epochs: int, bands: Optional[int]):
  return catalog.build(name, rounds=rounds, min_sep=min_sep, max_participations=epochs,
                       bands=bands).mechanism


def rows_for(name: str, bands: Optional[int], *, rounds: int, epochs: int, delta: float,
             epsilons: Sequence[float], cyclic_bands: Sequence[int], mc_samples: int,
             seed: int, min_sep_fractions: Sequence[float] = (),
             relative_standard_error: float = 0.05,
             participation_rate: Optional[float] = None,
             schemes: Sequence[str] = SCHEMES) -> list[dict[str, Any]]:
  """The rows of one mechanism: each scheme (of `schemes`) at each ε (see the module doc);
  b-min-sep at `participation_rate` a round (default E/n)."""
  bins = rounds // epochs
  mechanism = _build(name, rounds, bins, epochs, bands)
  label = name if bands is None else f"{name} ({bands} bands)"
  sens = mechanism.sensitivity(rounds, bins, epochs).guaranteed
  pair = amplification.balls_in_bins_pair(mechanism, num_bins=bins, rounds=rounds)
  rows = []
  for eps in epsilons:
    sigma = zcdp.noise_multiplier_for_epsilon(sens, eps, delta)
    rows.append(dict(mechanism=label, scheme=MIN_SEP, epsilon=eps, delta=delta,
                     noise_multiplier=sigma, noise_multiplier_standard_error=0.0,
                     rmse=_rmse(mechanism, rounds, sigma), note=f"sensitivity {sens:.4g}"))
    if BALLS_IN_BINS not in schemes:
      continue
    started = time.perf_counter()
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", balls_in_bins.InsufficientSamplesWarning)
      cal = balls_in_bins.calibrate_noise_multiplier(pair, epsilon=eps, delta=delta,
                                                     num_samples=mc_samples, seed=seed)
    rows.append(dict(mechanism=label, scheme=BALLS_IN_BINS, epsilon=eps, delta=delta,
                     noise_multiplier=cal.noise_multiplier,
                     noise_multiplier_standard_error=cal.noise_multiplier_standard_error,
                     rmse=_rmse(mechanism, rounds, cal.noise_multiplier),
                     note=f"{bins} bins; Alg. 2 on {mc_samples} samples "
                          f"({time.perf_counter() - started:.0f} s)"))
  rate = 1.0 / bins if participation_rate is None else participation_rate
  for fraction in (min_sep_fractions if B_MIN_SEP in schemes else ()):
    b = max(1, int(round(bins * fraction)))
    sampling = b_min_sep.BMinSepSampling(
        rounds, b, b_min_sep.BMinSepSampling.probability_for_rate(rate, b))
    bms_pair = amplification.b_min_sep_pair(mechanism, sampling)
    for eps in epsilons:
      started = time.perf_counter()
      cal = b_min_sep.calibrate_noise_multiplier(
          bms_pair, epsilon=eps, delta=delta, num_samples=mc_samples, seed=seed,
          relative_standard_error=relative_standard_error)
      rows.append(dict(
          mechanism=label, scheme=B_MIN_SEP, epsilon=eps, delta=delta,
          noise_multiplier=cal.noise_multiplier,
          noise_multiplier_standard_error=cal.noise_multiplier_standard_error,
          rmse=_rmse(mechanism, rounds, cal.noise_multiplier), min_sep=b,
          unamplified_noise_multiplier=cal.unamplified_noise_multiplier,
          sampling_probability=sampling.sampling_probability,
          exact_likelihood_ratio=bms_pair.exact,
          note=f"b = {b}, p = {sampling.sampling_probability:.3g}, {cal.direction} direction, "
               f"{'exact' if bms_pair.exact else 'bounded'} likelihood; "
               f"{cal.num_samples} tilted samples ({time.perf_counter() - started:.0f} s)"))
  cyclic = [(1, _build("dpsgd", rounds, 1, None, None), "dpsgd")] if name == "dpsgd" else []
  if name == "bandmf":
    cyclic = [(b, _build("bandmf", rounds, b, None, b), f"bandmf ({b} bands)")
              for b in sorted(set(cyclic_bands) | ({bands} if bands else set()))]
  for groups, banded, banded_label in (cyclic if CYCLIC_POISSON in schemes else ()):
    q = epochs * groups / rounds
    if q > 1.0:
      continue
    args = amplification.cyclic_poisson_args(banded, sampling_probability=q,
                                             num_groups=groups, rounds=rounds, delta=delta)
    for eps in epsilons:
      sigma = amplification.cyclic_poisson_noise_multiplier(eps, accountant="pld", **args)
      rows.append(dict(mechanism=banded_label, scheme=CYCLIC_POISSON, epsilon=eps,
                       delta=delta, noise_multiplier=sigma,
                       noise_multiplier_standard_error=0.0,
                       rmse=_rmse(banded, rounds, sigma),
                       note=f"{groups} groups, q = {q:.4g}, "
                            f"{sensitivity_lib.participation_cap(rounds, groups)} "
                            "compositions (PLD)"))
  for r in rows:
    r["family"] = name
  return rows


def table(setting: str, mc_samples: int, seed: int,
          relative_standard_error: float = 0.05) -> dict[str, Any]:
  spec = SETTINGS[setting]
  rows = []
  for name, bands in spec["mechanisms"]:
    rows += rows_for(name, bands, rounds=spec["rounds"], epochs=spec["epochs"],
                     delta=spec["delta"], epsilons=spec["epsilons"],
                     cyclic_bands=spec["cyclic_bands"], mc_samples=mc_samples, seed=seed,
                     min_sep_fractions=spec.get("min_sep_fractions", ()),
                     relative_standard_error=relative_standard_error,
                     participation_rate=spec.get("participation_rate"),
                     schemes=spec.get("schemes", SCHEMES))
  baseline = {(r["family"], r["epsilon"]): r["rmse"] for r in rows
              if r["scheme"] == MIN_SEP}
  for r in rows:  # RMSE improvement over the family's min-sep row (paper 003 Fig. 2)
    base = baseline.get((r["family"], r["epsilon"]))
    r["rmse_improvement_percent"] = (None if base is None or r["scheme"] == MIN_SEP
                                     else 100.0 * (1.0 - r["rmse"] / base))
  return {"setting": setting,
          **{k: v for k, v in spec.items() if k not in ("mechanisms", "schemes")},
          "mc_samples": mc_samples, "seed": seed,
          "b_min_sep_relative_standard_error": relative_standard_error, "rows": rows}


def markdown(output: dict[str, Any]) -> str:
  lines = [f"# σ at one ε: {output['setting']} (n = {output['rounds']}, E = "
           f"{output['epochs']}, δ = {output['delta']:g})", "",
           "| mechanism | participation | ε | σ | RMSE | RMSE vs the min-sep row | how |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
  for r in output["rows"]:
    se = (f" ± {r['noise_multiplier_standard_error']:.2g}"
          if r["noise_multiplier_standard_error"] else "")
    gain = ("—" if r["rmse_improvement_percent"] is None
            else f"{-r['rmse_improvement_percent']:+.1f}%")
    lines.append(f"| {r['mechanism']} | {r['scheme']} | {r['epsilon']:g} | "
                 f"{r['noise_multiplier']:.4g}{se} | {r['rmse']:.4g} | {gain} | {r['note']} |")
  return "\n".join(lines) + "\n"


def figure(output: dict[str, Any]) -> Any:
  """RMSE vs ε per (mechanism, participation), log-log."""
  fig, ax = writers.new_figure(7.0, 4.4)
  series: dict[tuple[str, str], list[tuple[float, float]]] = {}
  for r in output["rows"]:  # b-min-sep rows of each b are a series of their own.
    label = r["scheme"] if r["scheme"] != B_MIN_SEP else f"{B_MIN_SEP} b={r['min_sep']}"
    series.setdefault((r["mechanism"], label), []).append((r["epsilon"], r["rmse"]))
  styles = dict(zip(SCHEMES, ("-", "--", ":", "-.")))
  for (mechanism, scheme), points in series.items():
    xs, ys = zip(*sorted(points))
    ax.plot(xs, ys, styles[scheme.split(" ")[0]], marker="o", label=f"{mechanism}, {scheme}")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xlabel("ε")
  ax.set_ylabel("RMSE of the prefix sums (σ·‖B‖, unit clip)")
  ax.set_title(f"{output['setting']}: noise each participation needs "
               f"(n = {output['rounds']}, E = {output['epochs']}, δ = {output['delta']:g})",
               fontsize=9)
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7)
  return fig


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--setting", choices=sorted(SETTINGS), default="stackoverflow")
  parser.add_argument("--mc_samples", type=int, default=2 ** 20,
                      help="Monte Carlo samples of the balls-in-bins calibration (the most "
                           "the b-min-sep calibration draws)")
  parser.add_argument("--seed", type=int, default=0, help="seed of the Monte Carlo sample")
  parser.add_argument("--relative_standard_error", type=float, default=0.05,
                      help="b-min-sep rows: the sample grows until δ̂'s relative standard "
                           "error is at most this (or --mc_samples)")
  parser.add_argument("--out_dir", default=None,
                      help="write table.json, table.md and table.png here")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)

  def body() -> int:
    if args.mc_samples < 1024:
      raise ValueError(f"--mc_samples={args.mc_samples} is too small; use e.g. 1048576.")
    if not 0.0 < args.relative_standard_error < 1.0:
      raise ValueError(f"--relative_standard_error={args.relative_standard_error} must be in "
                       "(0, 1); use e.g. 0.05.")
    output = table(args.setting, args.mc_samples, args.seed, args.relative_standard_error)
    if args.out_dir:  # compute → JSON → draw: table.md and table.png from table.json.
      results.write(args.out_dir, output, "table.json",
                    markdown={"table.md": lambda data: markdown(data)
                              + "\n![RMSE vs ε](table.png)\n"},
                    figures={"table.png": figure})
    print(json.dumps(output, indent=1) if args.format == "json" else markdown(output))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
