"""Paper 000's distributed mean estimation (DME) study: MSE vs bits per coordinate vs ε.

n clients hold X_i ∈ R^d with ‖X_i‖₂ <= D (D = 1: every MSE ratio is invariant to it); the
server estimates X̄ = (1/n) Σ_i X_i; replace-one neighbours (n public). At every target ε, one
total δ for all methods, one round and each number of quantization levels k:

* `gaussian` — each client adds N(0, σ²I), σ = 2D√(2 log(1.25/δ))/(√n ε) (Thm. 2), measured
  as X̄ + N(0, σ²/n · I);
* the cpSGD variants of `dp_fl.mechanisms.dme.VARIANTS` (Rot(s_k(Bin(m, p)), HA) at Thm. 4's
  X_max, s_k(Bin(m, p)) at X_max = D, and the ablation without rotation at Thm. 4's X_max),
  p = 1/2 (Fig. 2), m the smallest number of Binomial trials (to 0.1 %) reaching the target
  by the Binomial mechanism's Rényi DP (`dp_fl.accounting.cpsgd.trials_for_epsilon`), run
  together per variant (`dme.shared_mean_estimates`);
* `dgauss` — TFF 0.87's distributed discrete Gaussian at B bits
  (`dp_fl.aggregators.distributed_dp`: z calibrated by Prop. 14 of arXiv:2102.06387,
  `dp_fl.accounting.discrete_gaussian`), run in TFF's test C++ context on the first input of
  --inputs ('hd' rotation: its error is input-independent up to wrap-around), --dgauss_trials
  times with TFF's own seeds.

Reported: bits per coordinate (a client's message: ⌈log₂(k + m)⌉; B), the secure-sum width
(⌈log₂(n(k−1+m)+1)⌉; B), the MSE bound and the measured MSE (mean ± std over --trials runs),
also as ratios to Thm. 2's Gaussian MSE dσ²/n (the paper's reference; the exactly calibrated
Gaussian, Balle & Wang 2018, is beside it as `gaussian_exact_mse`). Writes table.json, then
table.md and dme.png from it (`dp_fl.results`), to --out_dir; prints the Markdown table (or
JSON with --format json). Default run (n = 1000, d = 2^14, ε ∈ {1, 2, 4}, δ = 1e-5, 3
repetitions): 4–13 minutes on a busy 2-core machine, most of it calibrating m:

  .venv/bin/python -m scripts.cpsgd_dme --out_dir docs/results/cpsgd_dme
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import itertools
import json
import math
import os
import sys
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from dp_fl import _checks
from dp_fl import exits
from dp_fl import results
from dp_fl.accounting import cpsgd as cpsgd_accounting
from dp_fl.accounting import zcdp
from dp_fl.aggregators import distributed_dp
from dp_fl.execution import runtime
from dp_fl.mechanisms import cpsgd
from dp_fl.mechanisms import dme

CLIP_NORM = 1.0  # D. Every MSE ratio below is invariant to it.
BINOMIAL_P = 0.5  # p of paper 000's experiments (Fig. 2).
PARTICIPATIONS = 1  # One DME round.
GAUSSIAN, DGAUSS, SKELLAM = "gaussian", "dgauss", "skellam"
# The study's rows of TFF's distributed DP aggregator: method -> distributed_dp's mechanism.
DISTRIBUTED = {DGAUSS: "ddgauss", SKELLAM: "skellam"}
_INPUT_MEMORY_LIMIT_BYTES = 4 << 30  # The inputs are held as float32 (n × d).


# ----------------------------------------------------------------------------- the study

@dataclasses.dataclass(frozen=True)
class Study:
  """The flags of one run, validated."""
  dimension: int
  clients: int
  epsilons: tuple[float, ...]
  levels: tuple[int, ...]
  delta: float
  repetitions: int
  inputs: tuple[str, ...]
  seed: int
  dgauss_bits: tuple[int, ...]
  dgauss_repetitions: int
  bounds_only: bool = False


def _finish(row: dict[str, Any]) -> dict[str, Any]:
  """Mean ± std (ddof 1) of the measured MSE and both MSEs as ratios to Thm. 2's Gaussian."""
  runs = row["mse_runs"]
  row["mse_measured"] = float(np.mean(runs)) if runs else None
  row["mse_measured_std"] = float(np.std(runs, ddof=1)) if len(runs) > 1 else None
  row["repetitions"] = len(runs)
  row["clipped_values"] = (float(np.mean(row["clipped_runs"])) if row["clipped_runs"]
                           else None)
  g = row["gaussian_mse"]
  for key in ("mse_bound", "mse_measured", "mse_measured_std"):
    value = row[key]
    row["ratio" + key[3:]] = None if value is None else value / g
  return row


def _base_row(study: Study, input_name: str, method: str, epsilon: float) -> dict[str, Any]:
  n, d = study.clients, study.dimension
  return dict(
      input=input_name, method=method, epsilon=epsilon, delta=study.delta, levels=None,
      binomial_trials=None, p=None, x_max=None, bits_per_coordinate=None, secure_sum_bits=None,
      epsilon_reached=None, mse_bound=None, mse_runs=[], clipped_runs=[],
      gaussian_mse=cpsgd.gaussian_mse(CLIP_NORM, n, d, epsilon, study.delta),
      gaussian_exact_mse=d * (CLIP_NORM * zcdp.noise_multiplier_for_epsilon(
          2.0, epsilon, study.delta)) ** 2 / n ** 2,
      note="")


@functools.lru_cache(maxsize=None)
def _calibrate(levels: int, x_max: float, dimension: int, clients: int, epsilon: float,
               delta: float) -> tuple[int, float]:
  """(m, its ε), once for every input and variant sharing (k, X_max, d): seconds each."""
  m = cpsgd_accounting.trials_for_epsilon(levels, BINOMIAL_P, x_max, CLIP_NORM, dimension,
                                          clients, PARTICIPATIONS, epsilon, delta)
  guarantee = cpsgd_accounting.composed_epsilon(levels, m, BINOMIAL_P, x_max, CLIP_NORM,
                                                dimension, clients, PARTICIPATIONS, delta)
  return m, guarantee.epsilon


def plan_cpsgd(study: Study, input_name: str) -> dict[str, list[tuple[dict, Any]]]:
  """Per variant, (row, Protocol or None) for every (ε, k): m calibrated, bounds computed."""
  n, d, delta = study.clients, study.dimension, study.delta
  plans: dict[str, list[tuple[dict, Any]]] = {}
  for variant in dme.VARIANTS.values():
    x_max = variant.x_max(CLIP_NORM, n, d, delta)
    dim = variant.accounting_dimension(d)
    plans[variant.name] = []
    for epsilon in study.epsilons:
      for k in study.levels:
        row = _base_row(study, input_name, variant.name, epsilon)
        row.update(levels=k, p=BINOMIAL_P, x_max=x_max, note=variant.source)
        try:
          m, epsilon_reached = _calibrate(k, x_max, dim, n, epsilon, delta)
        except ValueError as e:
          row["note"] = f"{variant.source}; not reachable: {e}"
          plans[variant.name].append((row, None))
          continue
        protocol = cpsgd.Protocol(k, m, BINOMIAL_P, x_max, CLIP_NORM, variant.rotate)
        row.update(binomial_trials=m, bits_per_coordinate=protocol.bits_per_coordinate,
                   secure_sum_bits=cpsgd.secure_sum_bits(n, k, m),
                   epsilon_reached=epsilon_reached,
                   mse_bound=protocol.mse_bound(n, d, delta))
        plans[variant.name].append((row, protocol))
  return plans


def _progress(message: str) -> None:
  print(f"[cpsgd_dme {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _measure(vectors: np.ndarray, gaussian_rows: list[dict[str, Any]],
             plans: dict[str, list[tuple[dict, Any]]], seeds: Sequence[np.random.SeedSequence],
             progress: Callable[[str], None]) -> None:
  """Appends one measured MSE per repetition to every Gaussian and cpSGD row."""
  n, d = vectors.shape
  mean = vectors.astype(np.float64).mean(axis=0)
  for rep, seed in enumerate(seeds):
    progress(f"{gaussian_rows[0]['input']}: repetition {rep + 1}/{len(seeds)} (n = {n}, "
             f"d = {d})")
    rng = np.random.default_rng(seed)
    for row in gaussian_rows:  # X̄ + N(0, σ²/n · I): per coordinate variance MSE/d.
      noise = rng.normal(0.0, math.sqrt(row["gaussian_mse"] / d), size=d)
      row["mse_runs"].append(float(noise @ noise))
    for plan in plans.values():
      ready = [(row, protocol) for row, protocol in plan if protocol is not None]
      if not ready:
        continue
      estimates, clipped = dme.shared_mean_estimates(vectors, [p for _, p in ready], rng)
      for (row, _), estimate in zip(ready, estimates):
        error = estimate - mean
        row["mse_runs"].append(float(error @ error))
        row["clipped_runs"].append(clipped)


def run(study: Study, progress: Callable[[str], None] = _progress) -> dict[str, Any]:
  """Every row of the study (see the module docstring), with the configuration."""
  n, d = study.clients, study.dimension
  started = time.perf_counter()
  rows: list[dict[str, Any]] = []
  root = np.random.SeedSequence(study.seed)
  dgauss_input = None
  for input_index, (input_name, seeds) in enumerate(
      zip(study.inputs, root.spawn(len(study.inputs)))):
    gaussian_rows = [_base_row(study, input_name, GAUSSIAN, e) for e in study.epsilons]
    for row in gaussian_rows:
      row.update(mse_bound=row["gaussian_mse"], epsilon_reached=row["epsilon"],
                 note="Thm. 2 (classical Gaussian mechanism bound)")
      if row["gaussian_exact_mse"] > row["gaussian_mse"]:  # Large ε: Lemma 1 needs ε < 1.
        row["note"] += ("; NOT a valid (ε, δ) calibration here: its σ is below the exact "
                        "Gaussian's")
    plans = plan_cpsgd(study, input_name)
    if not study.bounds_only:
      data_seed, *rep_seeds = seeds.spawn(1 + study.repetitions)
      make = dme.INPUTS[input_name].make
      vectors = make(np.random.default_rng(data_seed), n, d, CLIP_NORM)
      _measure(vectors, gaussian_rows, plans, rep_seeds, progress)
      if input_index == 0:
        dgauss_input = vectors
      del vectors
    rows += gaussian_rows
    for plan in plans.values():
      rows += [row for row, _ in plan]
  if study.dgauss_bits:
    rows += run_dgauss(study, study.inputs[0], dgauss_input, progress=progress)
  return {
      "setting": dict(dimension=d, padded_dimension=cpsgd.padded_dimension(d), clients=n,
                      epsilons=list(study.epsilons), levels=list(study.levels),
                      delta=study.delta, repetitions=study.repetitions,
                      inputs=list(study.inputs), seed=study.seed,
                      dgauss_bits=list(study.dgauss_bits),
                      dgauss_repetitions=study.dgauss_repetitions, bounds_only=study.bounds_only,
                      clip_norm=CLIP_NORM, binomial_p=BINOMIAL_P, participations=PARTICIPATIONS),
      "inputs": {name: dme.INPUTS[name].description for name in study.inputs},
      "rows": [_finish(row) for row in rows],
      "seconds": round(time.perf_counter() - started, 1),
  }


def run_dgauss(study: Study, input_name: str, vectors: Optional[np.ndarray],
               progress: Callable[[str], None] = _progress) -> list[dict[str, Any]]:
  """The `dgauss` and `skellam` rows (TFF's distributed DP aggregator, issue #45 adds
  Skellam): z calibrated per (ε, B), measured in TFF on `vectors` (if given)."""
  n, d = study.clients, study.dimension
  rows = []
  with (runtime.execution_context() if vectors is not None else contextlib.nullcontext()):
    for epsilon, bits, (method, mechanism) in itertools.product(
        study.epsilons, study.dgauss_bits, DISTRIBUTED.items()):
      row = _base_row(study, input_name, method, epsilon)
      row.update(bits_per_coordinate=bits, secure_sum_bits=bits,
                 note=f"TFF DistributedDpSumFactory('{distributed_dp.MECHANISMS[mechanism]}', "
                      "'hd')")
      rows.append(row)
      try:
        setting = distributed_dp.calibrated_setting(mechanism, epsilon, study.delta, n, d,
                                                    bits, CLIP_NORM)
      except ValueError as e:
        row["note"] = f"not reachable: {e}"
        continue
      row.update(epsilon_reached=setting.epsilon, mse_bound=setting.mse_bound(n),
                 dgauss=dataclasses.asdict(setting))
      if vectors is None:
        continue
      mean = vectors.astype(np.float64).mean(axis=0)
      for rep in range(study.dgauss_repetitions):
        progress(f"{input_name}: TFF {method}, ε = {epsilon:g}, B = {bits}, z = "
                 f"{setting.noise_multiplier:.4g} ({rep + 1}/{study.dgauss_repetitions})")
        error = distributed_dp.noisy_sum(setting, vectors, CLIP_NORM) / n - mean
        row["mse_runs"].append(float(error @ error))
  return rows


# ----------------------------------------------------------------------------- output

def _fmt(value: Optional[float], spec: str = ".3g") -> str:
  return "—" if value is None else format(value, spec)


def _pm(mean: Optional[float], std: Optional[float]) -> str:
  return "—" if mean is None else _fmt(mean) + ("" if std is None else f" ± {std:.2g}")


def markdown(output: dict[str, Any]) -> str:
  s = output["setting"]
  lines = [f"# DME: MSE vs bits vs ε (paper 000, Sec. 4) — n = {s['clients']}, d = "
           f"{s['dimension']}, δ = {s['delta']:g}, p = {s['binomial_p']}, "
           f"{s['repetitions']} repetitions", ""]
  for name, description in output["inputs"].items():
    lines.append(f"- input `{name}`: {description}")
  for variant in dme.VARIANTS.values():
    lines.append(f"- `{variant.name}`: {variant.label} ({variant.source})")
  lines.append(f"- `{DGAUSS}`: TFF's distributed discrete Gaussian at B bits (ε by Prop. 14 "
               "of arXiv:2102.06387)")
  lines.append(f"- `{SKELLAM}`: TFF's distributed Skellam mechanism at B bits (ε by Thm. 3.5 "
               "of arXiv:2110.04995; noise seeded from OS entropy)")
  lines += ["", "Ratios are to Thm. 2's Gaussian MSE (ratio 1); `bits` = bits per coordinate "
            "of a client's message (⌈log₂(k+m)⌉ for cpSGD, B for dgauss and skellam), `SecAgg` = the "
            "secure-sum width.", ""]
  for input_name in output["inputs"]:
    for epsilon in s["epsilons"]:
      rows = [r for r in output["rows"]
              if r["input"] == input_name and r["epsilon"] == epsilon]
      if not rows:
        continue
      lines += [f"## `{input_name}`, ε = {epsilon:g} (Gaussian MSE "
                f"{rows[0]['gaussian_mse']:.4g}; exactly calibrated Gaussian "
                f"{rows[0]['gaussian_exact_mse']:.4g})", "",
                "| method | k | m | bits | SecAgg | ε reached | MSE measured | MSE bound | "
                "ratio measured | ratio bound | clipped | note |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
      for r in rows:
        lines.append(
            f"| {r['method']} | {_fmt(r['levels'], 'd')} | {_fmt(r['binomial_trials'], 'd')} | "
            f"{_fmt(r['bits_per_coordinate'], 'd')} | {_fmt(r['secure_sum_bits'], 'd')} | "
            f"{_fmt(r['epsilon_reached'], '.4g')} | "
            f"{_pm(r['mse_measured'], r['mse_measured_std'])} | {_fmt(r['mse_bound'])} | "
            f"{_pm(r['ratio_measured'], r['ratio_measured_std'])} | "
            f"{_fmt(r['ratio_bound'])} | {_fmt(r['clipped_values'])} | "
            f"{r['note'][:160]} |")
      lines.append("")
  lines.append(f"({output['seconds']:.0f} s)")
  return "\n".join(lines) + "\n"


_STYLES = {"cpsgd_rot": ("-", "o"), "cpsgd_norot": ("--", "s"),
           "cpsgd_norot_small_xmax": (":", "^"), DGAUSS: ("-.", "D"), SKELLAM: (":", "v")}


def figure(output: dict[str, Any]) -> Any:
  """MSE / Thm. 2's Gaussian MSE (measured; bounds with --bounds_only) vs bits per coordinate
  (left: a client's message, right: the secure sum): a curve per (method, ε), row per input."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  s = output["setting"]
  ratio_key = "ratio_bound" if s["bounds_only"] else "ratio_measured"
  inputs = list(output["inputs"])
  fig = Figure(figsize=(12.0, 0.6 + 4.0 * len(inputs)))
  axes = fig.subplots(len(inputs), 2, squeeze=False)
  colors = {e: f"C{i}" for i, e in enumerate(s["epsilons"])}
  for row_axes, input_name in zip(axes, inputs):
    for ax, bits_key, xlabel in zip(
        row_axes, ("bits_per_coordinate", "secure_sum_bits"),
        ("bits per coordinate of a client's message (cpSGD: ⌈log₂(k+m)⌉; DGauss: B)",
         "secure-aggregation width per coordinate (cpSGD: ⌈log₂(n(k−1+m)+1)⌉; DGauss: B)")):
      for method, (line, marker) in _STYLES.items():
        for epsilon in s["epsilons"]:
          points = sorted((r[bits_key], r[ratio_key]) for r in output["rows"]
                          if r["input"] == input_name and r["method"] == method
                          and r["epsilon"] == epsilon and r[ratio_key] is not None)
          if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, line, marker=marker, color=colors[epsilon], markersize=4,
                    label=f"{method}, ε = {epsilon:g}")
      for epsilon in s["epsilons"]:
        exact = [r for r in output["rows"] if r["epsilon"] == epsilon][0]
        ax.axhline(exact["gaussian_exact_mse"] / exact["gaussian_mse"], color=colors[epsilon],
                   lw=0.7, alpha=0.6)
      ax.axhline(1.0, color="black", lw=1.0, label="Gaussian (Thm. 2) = 1")
      ax.set_yscale("log")
      ax.set_xlabel(xlabel, fontsize=8)
      ax.set_ylabel("MSE / Gaussian MSE" + (" (bounds)" if s["bounds_only"] else
                                            " (measured)"), fontsize=8)
      ax.set_title(f"input `{input_name}`", fontsize=9)
      ax.grid(alpha=0.3, which="both")
  fig.suptitle(f"DME (paper 000, Sec. 4): n = {s['clients']}, d = {s['dimension']}, "
               f"δ = {s['delta']:g}, p = {s['binomial_p']}; thin lines: exactly calibrated "
               "Gaussian (Balle & Wang) at each ε", fontsize=10)
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7,
             bbox_to_anchor=(0.5, -0.07 if len(inputs) > 1 else -0.16))
  fig.tight_layout()
  return fig


# ----------------------------------------------------------------------------- flags

def _list_of(kind: Callable[[str], Any], what: str) -> Callable[[str], tuple]:
  def parse(text: str) -> tuple:
    if text.strip().lower() == "none" and what == "bit widths":
      return ()
    try:
      values = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
      raise argparse.ArgumentTypeError(
          f"{text!r} is not a comma-separated list of {what}") from None
    if not values:
      raise argparse.ArgumentTypeError(f"{text!r} is empty; give a comma-separated list of "
                                       f"{what}")
    return values
  return parse


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dimension", type=int, default=1 << 14, help="d (default 2^14)")
  parser.add_argument("--clients", type=int, default=1000, help="n (default 1000)")
  parser.add_argument("--epsilons", type=_list_of(float, "numbers"), default=(1.0, 2.0, 4.0),
                      help="target ε values, comma-separated")
  parser.add_argument("--levels", type=_list_of(int, "integers"),
                      default=(2, 4, 8, 16, 32, 64, 128, 256, 1024),
                      help="quantization levels k, comma-separated")
  parser.add_argument("--delta", type=float, default=1e-5,
                      help="total δ of every method's (ε, δ)")
  parser.add_argument("--trials", type=int, default=3,
                      help="repetitions of each measured cpSGD/Gaussian MSE")
  parser.add_argument("--inputs", type=_list_of(str, "input names"), default=("sphere", "spike"),
                      help=f"synthetic inputs, comma-separated, from {sorted(dme.INPUTS)}")
  parser.add_argument("--seed", type=int, default=0, help="seed of the data and the protocols")
  parser.add_argument("--dgauss_bits", type=_list_of(int, "bit widths"),
                      default=(12, 14, 16, 20),
                      help="bit widths B of TFF's distributed discrete Gaussian, comma-"
                           f"separated (<= {distributed_dp.MAX_BITS}); 'none' skips it")
  parser.add_argument("--dgauss_trials", type=int, default=1,
                      help="TFF runs per (ε, B) of the distributed discrete Gaussian")
  parser.add_argument("--bounds_only", action="store_true",
                      help="calibrate m (and DGauss's z) and report the MSE bounds without "
                           "measuring anything (fast, any n and d)")
  parser.add_argument("--out_dir", default=None,
                      help="write table.json, table.md and dme.png here")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def study_from_flags(args: argparse.Namespace) -> Study:
  """Validates the flags (ValueError naming the flag, its value and the fix)."""
  d = _checks.check_in_range("--dimension", args.dimension, 2, 1 << 20, integer=True)
  n = _checks.check_in_range("--clients", args.clients, 2, 10 ** 6, integer=True)
  if not args.bounds_only and n * d * 4 > _INPUT_MEMORY_LIMIT_BYTES:
    raise ValueError(f"--clients={n} × --dimension={d} float32 inputs take "
                     f"{n * d * 4 / 2 ** 30:.1f} GiB (> {_INPUT_MEMORY_LIMIT_BYTES >> 30} "
                     "GiB); lower --clients or --dimension (or pass --bounds_only).")
  epsilons = tuple(_checks.check_in_range("--epsilons", e, 1e-3, 100.0)
                   for e in args.epsilons)
  levels = tuple(_checks.check_in_range("--levels", k, 2, 1 << 20, integer=True,
                                        why="k >= 2 quantization levels")
                 for k in args.levels)
  delta = _checks.check_delta(args.delta, "--delta")
  repetitions = _checks.check_in_range("--trials", args.trials, 1, 1000, integer=True)
  unknown = [name for name in args.inputs if name not in dme.INPUTS]
  if unknown:
    raise ValueError(f"--inputs: unknown input(s) {unknown}; choose from "
                     f"{sorted(dme.INPUTS)}.")
  bits = tuple(_checks.check_in_range("--dgauss_bits", b, 1, distributed_dp.MAX_BITS,
                                      integer=True, why="TFF's DistributedDpSumFactory limit")
               for b in args.dgauss_bits)
  if bits and min(bits) < math.log2(n):
    raise ValueError(f"--dgauss_bits={','.join(map(str, bits))}: TFF needs B >= "
                     f"log2(--clients) = {math.log2(n):.2f}; raise B or pass 'none'.")
  dgauss_repetitions = _checks.check_in_range("--dgauss_trials", args.dgauss_trials, 1, 100,
                                              integer=True)
  return Study(d, n, tuple(sorted(set(epsilons))), tuple(sorted(set(levels))), delta,
               repetitions, tuple(dict.fromkeys(args.inputs)), args.seed,
               tuple(sorted(set(bits))), dgauss_repetitions, args.bounds_only)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  runtime.configure_logging(0)
  runtime.install_signal_handlers()

  def body() -> int:
    study = study_from_flags(args)
    output = run(study)
    if args.out_dir:  # Relative to where `bazel run` was called from, if it was.
      out_dir = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), args.out_dir)
      results.write(out_dir, output, "table.json", figures={"dme.png": figure}, markdown={
          "table.md": lambda data: markdown(data) + "\n![MSE ratio vs bits](dme.png)\n"})
    print(json.dumps(output, indent=1) if args.format == "json" else markdown(output))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
