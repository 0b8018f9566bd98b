"""Figures of a run directory and its Markdown report (`report.md`), from the run's own files.

    write_run_report(root_dir)   ->  figures/*.png and report.md, from summary.json,
                                     metrics/{train,eval,privacy}.csv

| figure                        | what it shows                                                   |
|-------------------------------|-----------------------------------------------------------------|
| figures/loss.png              | training loss per round (clients' mean, un-noised) and the      |
|                               | evaluation loss                                                 |
| figures/evaluation.png        | each evaluation accuracy vs rounds, its unigram baseline dashed |
| figures/epsilon.png           | ε at δ vs rounds, from the participation realized so far        |
| figures/participation.png     | clients by number of rounds taken part in (the ledger's         |
|                               | histogram), with the realized min-sep                           |
| figures/clip_norm.png         | adaptive clipping: the clip norm per round and the released     |
|                               | (noised) fraction of unclipped updates, next to the target      |

The program writes them at the end of every call of `program.run` (completed, stopped or
interrupted), so they always show the run up to its last round; `python -m
dp_fl.training.figures ROOT_DIR` rewrites them from the files. Every number plotted is read
from the CSV files beside them, so a figure never says more than the data it comes from.
Figures are drawn on `matplotlib.figure.Figure` (no pyplot state; safe in any thread) and
written atomically (`dp_fl.writers`).
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Mapping, Optional, Sequence

from dp_fl import files
from dp_fl import writers

FIGURES_DIR = "figures"
REPORT_FILE = "report.md"
_ACCURACY_HINT = "accuracy"


def _read_rows(path: str) -> list[dict[str, float]]:
  """A metrics CSV as rows of floats (empty cells and text dropped); [] if absent."""
  if not os.path.exists(path):
    return []
  rows = []
  for raw in writers.read_csv(path):
    row = {}
    for key, value in raw.items():
      try:
        row[key] = float(value)
      except (TypeError, ValueError):
        continue
    if "round" in row:
      rows.append(row)
  return sorted(rows, key=lambda r: r["round"])


def _series(rows: Sequence[Mapping[str, float]], key: str) -> tuple[list[float], list[float]]:
  points = [(r["round"], r[key]) for r in rows if key in r and math.isfinite(r[key])]
  return [p[0] for p in points], [p[1] for p in points]


def loss_figure(train: Sequence[Mapping[str, float]], evaluation: Sequence[Mapping[str, float]],
                title: str, baseline: Optional[float] = None) -> Optional[Any]:
  figure, ax = writers.new_figure()
  x, y = _series(train, "client_work/train/loss")
  ex, ey = _series(evaluation, "loss")
  if not x and not ex:
    return None
  if x:
    ax.plot(x, y, color="tab:blue", linewidth=1.2, label="training loss (clients, un-noised)")
  if ex:
    ax.plot(ex, ey, "o-", color="tab:orange", label="evaluation loss")
  if baseline is not None and math.isfinite(baseline):
    ax.axhline(baseline, color="tab:orange", linestyle="--", linewidth=1,
               label=f"unigram baseline ({baseline:.2f}: best context-free loss)")
  finite = [v for v in y + ey if v > 0]
  if finite and max(finite) / min(finite) > 50:
    ax.set_yscale("log")  # A diverging run stays readable.
  ax.set_xlabel("round")
  ax.set_ylabel("cross-entropy loss")
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  return figure


def evaluation_figure(evaluation: Sequence[Mapping[str, float]],
                      baseline: Mapping[str, float], title: str) -> Optional[Any]:
  names = [k for k in (evaluation[-1] if evaluation else {}) if _ACCURACY_HINT in k]
  if not names:
    return None
  figure, ax = writers.new_figure()
  colors = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")
  for i, name in enumerate(names):
    color = colors[i % len(colors)]
    x, y = _series(evaluation, name)
    ax.plot(x, y, "o-", color=color, label=name)
    base = baseline.get(f"unigram_{name}", baseline.get(name))
    if base is not None and math.isfinite(base):
      ax.axhline(base, color=color, linestyle="--", linewidth=1,
                 label=f"unigram baseline ({base:.3f})")
  ax.set_xlabel("round")
  ax.set_ylabel("accuracy (held-out data)")
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  return figure


def epsilon_figure(privacy: Sequence[Mapping[str, float]], delta: Optional[float],
                   title: str) -> Optional[Any]:
  x, y = _series(privacy, "epsilon_so_far")
  rx, ry = _series(privacy, "epsilon")
  if not x and not rx:
    return None
  figure, ax = writers.new_figure()
  if x:
    ax.plot(x, y, ".-", color="tab:red", label="ε so far (progress accountant)")
  if rx:
    ax.plot(rx, ry, "s", color="black", label="ε of the privacy report")
  ax.set_xlabel("round")
  ax.set_ylabel(f"ε at δ = {delta:g}" if delta else "ε")
  ax.set_ylim(bottom=0)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  return figure


def participation_figure(realized: Mapping[str, Any], title: str) -> Optional[Any]:
  histogram = list(realized.get("participation_histogram") or ())
  if len(histogram) < 2:
    return None
  figure, ax = writers.new_figure()
  counts = histogram[1:]
  ax.bar(range(1, len(histogram)), counts, color="tab:green")
  ax.set_xticks(range(1, len(histogram)))
  ax.set_xlabel("rounds a client took part in")
  ax.set_ylabel("clients")
  never = histogram[0]
  sep = realized.get("min_separation")
  ax.set_title(f"{title}\n{sum(counts)} clients took part ({never} never); realized min-sep "
               + ("none (no client twice)" if sep is None else f"{sep} rounds"), fontsize=9)
  ax.grid(alpha=0.3, axis="y")
  return figure


def _column(rows: Sequence[Mapping[str, float]], suffix: str) -> Optional[str]:
  """The metrics column whose name ends with `/suffix` (the aggregator's prefix varies)."""
  for row in rows:
    for key in row:
      if key == suffix or key.endswith("/" + suffix):
        return key
  return None


def clip_norm_figure(train: Sequence[Mapping[str, float]], target: Optional[float],
                     title: str) -> Optional[Any]:
  """The adaptive clip norm per round (log scale) and the noised unclipped fraction."""
  clip_key = _column(train, "clip_norm")
  if clip_key is None:
    return None
  figure, ax = writers.new_figure()
  x, y = _series(train, clip_key)
  ax.plot(x, y, color="tab:blue", label="clip norm ζₜ")
  ax.set_yscale("log")
  ax.set_xlabel("round")
  ax.set_ylabel("clip norm")
  fraction_key = _column(train, "unclipped_fraction_noised")
  if fraction_key is not None:
    twin = ax.twinx()
    fx, fy = _series(train, fraction_key)
    twin.plot(fx, fy, ".", color="tab:orange", markersize=3,
              label="unclipped fraction (noised, released)")
    if target is not None:
      twin.axhline(target, color="tab:orange", linestyle="--", linewidth=1,
                   label=f"target quantile γ = {target:g}")
    twin.set_ylabel("fraction of updates unclipped")
    twin.legend(loc="lower right", fontsize=7)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(loc="upper left", fontsize=7)
  return figure


def write_run_report(root_dir: str) -> dict[str, str]:
  """Writes the figures of the run in `root_dir` and `report.md`; returns {figure: path}.

  Reads `summary.json` (written at the end of every `program.run` call) and the metrics CSV
  files; a figure without data (e.g. ε of a non-private run) is left out of the report.
  """
  with open(os.path.join(root_dir, "summary.json"), encoding="utf-8") as f:
    summary = json.load(f)
  config = {}
  config_path = os.path.join(root_dir, "config.json")
  if os.path.exists(config_path):
    with open(config_path, encoding="utf-8") as f:
      config = json.load(f)
  metrics_dir = os.path.join(root_dir, "metrics")
  train = _read_rows(os.path.join(metrics_dir, "train.csv"))
  evaluation = _read_rows(os.path.join(metrics_dir, "eval.csv"))
  privacy = _read_rows(os.path.join(metrics_dir, "privacy.csv"))
  name = f"{summary.get('task', 'run')} — {config.get('mechanism', '?')}"
  figures = {
      "loss": loss_figure(train, evaluation, f"{name}: loss vs rounds",
                          (summary.get("baseline") or {}).get("unigram_loss")),
      "evaluation": evaluation_figure(evaluation, summary.get("baseline") or {},
                                      f"{name}: held-out accuracy vs rounds"),
      "epsilon": epsilon_figure(privacy, summary.get("delta"),
                                f"{name}: privacy spent vs rounds"),
      "participation": participation_figure(summary.get("realized_participation") or {},
                                            f"{name}: participation per client"),
      "clip_norm": clip_norm_figure(
          train, (config.get("mechanism_settings") or {}).get("target_unclipped_quantile"),
          f"{name}: adaptive clip norm"),
  }
  written = {}
  for key, figure in figures.items():
    if figure is not None:
      written[key] = writers.save_figure(figure,
                                         os.path.join(root_dir, FIGURES_DIR, f"{key}.png"))
  files.atomic_write_text(os.path.join(root_dir, REPORT_FILE),
                          report_markdown(summary, config, written, root_dir))
  return written


def report_markdown(summary: Mapping[str, Any], config: Mapping[str, Any],
                    figures: Mapping[str, str], root_dir: str) -> str:
  """The run's Markdown report: outcome, metrics against the baseline, privacy, figures."""
  baseline = summary.get("baseline") or {}
  lines = [f"# {summary.get('task', 'run')}: {config.get('mechanism', '?')} — "
           f"{summary.get('rounds_completed')} rounds ({summary.get('stopped')})", ""]
  if summary.get("message"):
    lines += [f"> {summary['message']}", ""]
  lines += ["| metric | value | unigram baseline |", "| --- | --- | --- |"]
  for key, value in (summary.get("eval") or {}).items():
    base = baseline.get(f"unigram_{key}", baseline.get(key))
    lines.append(f"| {key} | {value:.4f} | {'' if base is None else f'{base:.4f}'} |")
  epsilon = summary.get("epsilon")
  lines.append("")
  if epsilon is None:
    lines.append("Privacy: none (non-private training).")
  else:
    lines.append(f"Privacy: ε = {epsilon:.4g} at δ = {summary.get('delta'):g} from the "
                 "participation realized (an upper bound); what it covers and assumes: "
                 "[privacy_report.md](privacy_report.md).")
  guard = summary.get("noise_guard")
  if guard:
    ratios = guard["ratios"]
    model = ratios.get("model_noise")
    lines += ["", "## Noise against signal (the noise guard)", "",
              f"One round's noise is {ratios['round_noise']:.3g}× the clip norm; the summed "
              f"updates' noise {ratios['prefix_noise']:.3g}× their largest signal (limit "
              f"{guard['prefix_noise_limit']:g})" + ("" if model is None else
              f"; the noise left in the final model {model:.3g}× the initial model's norm "
              f"(limit {guard['model_noise_limit']:g})") + "."]
    if guard.get("marginal"):
      lines.append("**Marginal**: within the limit, but in the band where runs have both "
                   "learned and stayed at the unigram figure; a larger cohort or ε gives "
                   "margin.")
    if not guard["learnable"]:
      lines.append(f"**Beyond what learns** by {guard['excess']:.3g}×: a cohort of "
                   f"{guard['suggested_cohort']}" + (
                       "" if guard["suggested_epsilon"] is None else
                       f" or ε ≈ {guard['suggested_epsilon']:.3g}") + " would bring it in; "
                   f"server learning rate × {guard['learning_rate_scale']:.3g} "
                   "(`--noise_guard=scale` applies it).")
  drift = summary.get("noise_drift")
  if drift:
    lines += ["", f"**Drifting on noise**: at round {drift['round']:g} the evaluation loss "
              f"{drift['loss']:.4g} exceeded {noise_drift_factor():g}× the reference "
              f"{drift['reference']:.4g}."]
  captions = {"loss": "Loss vs rounds (dashed: the best context-free loss)",
              "evaluation": "Held-out accuracy vs rounds (dashed: the unigram baseline)",
              "epsilon": "ε vs rounds",
              "participation": "Participation per client",
              "clip_norm": "Adaptive clip norm and the released unclipped fraction"}
  if figures:
    lines += ["", "## Figures", ""]
    for key, path in figures.items():
      relative = os.path.relpath(path, root_dir)
      lines += [f"### {captions[key]}", "", f"![{captions[key]}]({relative})", ""]
  lines += ["", "Files: `config.json`, `metrics/train.csv`, `metrics/eval.csv`, "
            "`metrics/privacy.csv`, `summary.json`, `privacy_report.md`, `tensorboard/`."]
  return "\n".join(lines) + "\n"


def noise_drift_factor() -> float:
  from dp_fl.training import noise_guard  # pylint: disable=g-import-not-at-top
  return noise_guard.DRIFT_FACTOR


def main(argv: Optional[Sequence[str]] = None) -> int:
  """`python -m dp_fl.training.figures ROOT_DIR`: rewrites a run directory's figures."""
  from dp_fl import exits  # pylint: disable=g-import-not-at-top
  args = list(sys.argv[1:] if argv is None else argv)
  if len(args) != 1:
    print("usage: python -m dp_fl.training.figures ROOT_DIR", file=sys.stderr)
    return exits.BAD_INPUT

  def body() -> int:
    root_dir = args[0]
    if not os.path.exists(os.path.join(root_dir, "summary.json")):
      raise ValueError(f"ROOT_DIR {root_dir!r} has no summary.json: not a run directory a "
                       "dp_fl run has finished a call in. Pass the --root_dir of a run.")
    for path in write_run_report(root_dir).values():
      print(path)
    print(os.path.join(root_dir, REPORT_FILE))
    return exits.COMPLETED

  return exits.guarded(body)


if __name__ == "__main__":
  sys.exit(main())
