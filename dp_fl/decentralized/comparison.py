"""LEASGD against D-PSGD (paper 002, Sec. 4): the runs, Table 1, Figure 2 and the claims.

For each worker count m: both algorithms, non-private and private with the same noise
multiplier σ (Table 1: "the adding noise scales are the same for two algorithms"), from the
same initial model and shards. Paper 002's three claims are then checked on the histories:

1. **Faster early convergence** (Fig. 2(a)): the non-private LEASGD's mean training loss over
   the first `early_fraction` of the iterations is below D-PSGD's.
2. **Fewer transmitted vectors for the same loss** (Fig. 2(b)): the vectors per worker each
   non-private algorithm has sent when it first reaches the loss both reach (the larger of the
   two final losses); LEASGD needs fewer.
3. **Less ε for equal accuracy** (Table 1): private runs; the ε each has spent when its test
   accuracy first reaches the accuracy both reach (the smaller of the two best accuracies);
   LEASGD spends less. At equal σ and equal iterations the per-iteration cost is equal (and
   LEASGD also pays for its loss reports), so LEASGD can only win by getting there sooner.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Optional, Sequence

from dp_fl import results as results_lib
from dp_fl import writers
from dp_fl.decentralized import accounting
from dp_fl.decentralized import training

# Paper 002, Table 1 (MNIST, 3-layer MLP; CIFAR-10, 3-layer CNN): (accuracy, total ε).
PAPER_TABLE_1 = {
    "MNIST": {5: {"leasgd": (0.97, 4.183), "d_psgd": (0.97, 4.505)},
              15: {"leasgd": (0.97, 4.651), "d_psgd": (0.95, 4.843)}},
    "CIFAR-10": {5: {"leasgd": (0.74, 4.651), "d_psgd": (0.71, 4.925)},
                 15: {"leasgd": (0.72, 4.116), "d_psgd": (0.68, 4.56)}},
}
NAMES = {training.LEASGD: "LEASGD", training.D_PSGD: "D-PSGD"}
SETTINGS = ("non_private", "private")


def run_name(algorithm: str, num_workers: int, private: bool) -> str:
  return f"{algorithm}_m{num_workers}_{'private' if private else 'non_private'}"


def run_all(base: training.Settings, load_shards: Callable[[int], training.Shards],
            worker_counts: Sequence[int], out_dir: Optional[str], *,
            algorithms: Sequence[str] = training.ALGORITHMS,
            settings: Sequence[str] = SETTINGS, reproducible_seed: Optional[int] = None,
            progress: Optional[Callable[[str], None]] = None) -> dict[str, dict[str, Any]]:
  """Every (m, algorithm, setting) run, each in `out_dir/<run_name>` (resumed or read back
  when there). The private and non-private runs of one m share shards and initial model."""
  results = {}
  for m in worker_counts:
    shards = load_shards(m)
    for private in (False, True):
      if ("private" if private else "non_private") not in settings:
        continue
      for algorithm in algorithms:
        name = run_name(algorithm, m, private)
        run_settings = dataclasses.replace(base, algorithm=algorithm, num_workers=m,
                                           private=private)
        run_dir = os.path.join(out_dir, name) if out_dir else None
        results[name] = training.train(run_settings, shards, run_dir,
                                       reproducible_seed=reproducible_seed, progress=progress)
  return results


def _first(history: Sequence[dict[str, Any]], key: str, reached: Callable[[float], bool]
           ) -> Optional[dict[str, Any]]:
  return next((row for row in history if reached(row[key])), None)


def claims(results: dict[str, dict[str, Any]], m: int,
           early_fraction: float = 0.2) -> dict[str, Any]:
  """Paper 002's three claims for worker count m (None where a run is missing)."""
  out: dict[str, Any] = {}
  lea = results.get(run_name(training.LEASGD, m, False))
  dps = results.get(run_name(training.D_PSGD, m, False))
  if lea and dps:
    horizon = early_fraction * lea["iterations_done"]

    def early(result):
      later = [r for r in result["history"] if r["iteration"] > 0]
      # At least the first evaluation after the start (an eval_every beyond the window).
      rows = [r["train_loss"] for r in later if r["iteration"] <= horizon] or [
          r["train_loss"] for r in later[:1]]
      return sum(rows) / len(rows) if rows else math.nan

    out["faster_early_convergence"] = {
        "early_iterations": horizon, "leasgd_mean_loss": early(lea),
        "d_psgd_mean_loss": early(dps), "holds": early(lea) < early(dps)}
    target = max(lea["final"]["train_loss"], dps["final"]["train_loss"])
    hit = {k: _first(r["history"], "train_loss", lambda v: v <= target)
           for k, r in (("leasgd", lea), ("d_psgd", dps))}
    out["fewer_vectors_for_same_loss"] = {
        "target_train_loss": target,
        **{f"{k}_vectors_per_worker": h["vectors_per_worker"] if h else None
           for k, h in hit.items()},
        "holds": bool(hit["leasgd"] and hit["d_psgd"] and hit["leasgd"]["vectors_per_worker"]
                      < hit["d_psgd"]["vectors_per_worker"])}
  lea = results.get(run_name(training.LEASGD, m, True))
  dps = results.get(run_name(training.D_PSGD, m, True))
  if lea and dps:
    target = min(max(r["test_accuracy"] for r in lea["history"]),
                 max(r["test_accuracy"] for r in dps["history"]))
    hit = {k: _first(r["history"], "test_accuracy", lambda v: v >= target)
           for k, r in (("leasgd", lea), ("d_psgd", dps))}
    out["less_epsilon_for_equal_accuracy"] = {
        "target_test_accuracy": target,
        **{f"{k}_epsilon": h["epsilon"] for k, h in hit.items()},
        **{f"{k}_iteration": h["iteration"] for k, h in hit.items()},
        "holds": hit["leasgd"]["epsilon"] < hit["d_psgd"]["epsilon"]}
  return out


def summarize(results: dict[str, dict[str, Any]], worker_counts: Sequence[int],
              dataset: str) -> dict[str, Any]:
  """The rows of Table 1 (and the non-private ones), the claims, the paper's numbers."""
  rows = []
  for name, result in results.items():
    s = result["settings"]
    rows.append({
        "run": name, "algorithm": s["algorithm"], "num_workers": s["num_workers"],
        "private": s["private"], "iterations": result["iterations_done"],
        "test_accuracy": result["final"]["test_accuracy"],
        "train_loss": result["final"]["train_loss"],
        "epsilon": result["privacy"]["max_epsilon"] if result["privacy"] else math.inf,
        "vectors_per_worker_per_iteration":
            result["communication"]["vectors_per_worker_per_iteration"],
        "bytes_per_worker": result["communication"]["bytes_per_worker"]})
  paper = PAPER_TABLE_1["CIFAR-10" if dataset == "cifar10" else "MNIST"]
  first = next(iter(results.values()))
  return {"dataset": dataset, "data": first["data"]["source"], "model": first["model"],
          "rows": rows, "claims": {str(m): claims(results, m) for m in worker_counts},
          "paper_table_1": {str(m): paper.get(m) for m in worker_counts},
          "delta": first["settings"]["delta"],
          "settings": {k: v for k, v in first["settings"].items()
                       if k not in ("algorithm", "num_workers", "private")},
          "not_covered": (list(accounting.NOT_COVERED) if any(r["private"] for r in rows)
                          else [])}


def _eps(value: float) -> str:
  return "∞" if not math.isfinite(value) else f"{value:.3f}"


def markdown(summary: dict[str, Any]) -> str:
  """Table 1's layout (accuracy, total ε per algorithm and m), the non-private rows, the
  paper's numbers and the claims."""
  by = {(r["algorithm"], r["num_workers"], r["private"]): r for r in summary["rows"]}
  counts = sorted({r["num_workers"] for r in summary["rows"]})
  head = "| setting | " + " | ".join(
      f"m={m} {NAMES[a]} acc. | m={m} {NAMES[a]} total ε" for m in counts
      for a in training.ALGORITHMS) + " |"
  lines = [head, "|" + "---|" * (1 + 4 * len(counts))]
  for private in (True, False):
    cells = []
    for m in counts:
      for a in training.ALGORITHMS:
        r = by.get((a, m, private))
        cells += [f"{r['test_accuracy']:.4f}", _eps(r["epsilon"])] if r else ["–", "–"]
    lines.append(f"| {'private' if private else 'non-private'} (ours) | " + " | ".join(cells)
                 + " |")
  cells = []
  for m in counts:
    for a in training.ALGORITHMS:
      paper = (summary["paper_table_1"].get(str(m)) or {}).get(a)
      cells += [f"{paper[0]:.2f}", f"{paper[1]:.3f}"] if paper else ["–", "–"]
  dataset = "CIFAR-10" if summary["dataset"] == "cifar10" else "MNIST"
  lines.append(f"| private (paper 002, {dataset}) | " + " | ".join(cells) + " |")
  lines += ["", f"δ = {summary['delta']:g}; ε is the largest over the workers (RDP accountant). "
            f"Data: {summary['data']}; model: {summary['model']['architecture']} "
            f"({summary['model']['parameters']} parameters).", ""]
  if any(r["private"] for r in summary["rows"]):
    lines += ["Not covered by ε: the training losses (train_loss here, in each run's "
              "metrics/eval.csv and result.json, and in the figures) are measured on the "
              "workers' own shards without noise; keep the private runs' as private as the "
              "shards. Test accuracy is on the held-out set, which ε does not protect.", ""]
  lines.append("| m | run | vectors / worker / iteration | MB sent / worker |")
  lines.append("|---|---|---|---|")
  for r in summary["rows"]:
    lines.append(f"| {r['num_workers']} | {r['run']} | {r['vectors_per_worker_per_iteration']:.3f}"
                 f" | {r['bytes_per_worker'] / 1e6:.2f} |")
  lines.append("")
  for m, found in summary["claims"].items():
    for claim, value in found.items():
      numbers = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in value.items() if k != "holds")
      lines.append(f"- m={m}, {claim.replace('_', ' ')}: "
                   f"**{'holds' if value['holds'] else 'does not hold'}** ({numbers})")
  return "\n".join(lines) + "\n"


def write_figures(results: dict[str, dict[str, Any]], worker_counts: Sequence[int],
                  out_dir: str) -> dict[str, str]:
  """Figure 2: training loss vs iterations (a) and vs transmitted vectors per worker (b), one
  panel per m, solid non-private, dashed private."""
  paths = {}
  for key, x_key, x_label in (("loss_vs_iterations", "iteration", "iteration"),
                              ("loss_vs_vectors", "vectors_per_worker",
                               "transmitted vectors per worker")):
    figure, _ = writers.new_figure(5.0 * len(worker_counts), 4.0)
    figure.clear()
    axes = figure.subplots(1, len(worker_counts), squeeze=False)[0]
    for ax, m in zip(axes, worker_counts):
      for algorithm, color in ((training.LEASGD, "tab:blue"), (training.D_PSGD, "tab:orange")):
        for private, style in ((False, "-"), (True, "--")):
          result = results.get(run_name(algorithm, m, private))
          if not result:
            continue
          rows = result["history"]
          ax.plot([r[x_key] for r in rows], [r["train_loss"] for r in rows], style, color=color,
                  label=f"{NAMES[algorithm]} {'private' if private else 'non-private'}")
      ax.set_xlabel(x_label)
      ax.set_ylabel("mean training loss of the workers")
      ax.set_title(f"m = {m}")
      ax.grid(alpha=0.3)
      ax.legend()
    paths[key] = writers.save_figure(figure, os.path.join(out_dir, f"{key}.png"))
  return paths


def write_outputs(summary: dict[str, Any], runs: dict[str, dict[str, Any]],
                  worker_counts: Sequence[int], out_dir: str) -> dict[str, str]:
  """Figure 2 from the runs' histories, then comparison.json (the summary and the files'
  paths) and comparison.md drawn from it (`dp_fl.results`: compute → JSON → draw)."""
  paths = write_figures(runs, worker_counts, out_dir)
  paths["json"] = os.path.join(out_dir, "comparison.json")
  written = results_lib.write(out_dir, {**summary, "figures": dict(paths)}, "comparison.json",
                              markdown={"comparison.md": markdown})
  paths["markdown"] = written["comparison.md"]
  return paths
