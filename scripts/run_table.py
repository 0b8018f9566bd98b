"""A table of finished training runs: their outcome, privacy, adaptive clip norm and noise guard.

  .venv/bin/python -m scripts.run_table RUN_DIR [RUN_DIR ...] [--format json]
  ./bazelw run //scripts:run_table -- /tmp/runs/* --format json

Reads each run directory's own files (summary.json, config.json, privacy_report.json,
metrics/train.csv) and prints one row per run: the task's headline metrics next to their
unigram baselines, the loss against the unigram loss, the reported ε, with adaptive clipping
its share of the budget and the first / last clip norm, and the noise guard's ratios, verdict
and drift (issue #42; docs/RESULTS.md's tables of adaptive clipping and the noise guard come
from it). Runs with the same `--group_by` label (default: the directory name without a
trailing `_s<seed>`) are also summarised as mean ± std over their seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
from typing import Any, Optional, Sequence

from dp_fl import exits
from dp_fl import writers

_SEED_SUFFIX = re.compile(r"_s\d+$")


def _read_json(path: str) -> Any:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _clip_norms(root_dir: str) -> tuple[Optional[float], Optional[float]]:
  path = os.path.join(root_dir, "metrics", "train.csv")
  if not os.path.exists(path):
    return None, None
  rows = writers.read_csv(path)
  keys = [k for k in (rows[0] if rows else {}) if k.endswith("/clip_norm")]
  if not keys:
    return None, None
  values = [float(r[keys[0]]) for r in rows if r.get(keys[0])]
  return (values[0], values[-1]) if values else (None, None)


def _first_accuracy(evaluation: dict[str, Any]) -> str:
  """The metric of a run whose summary predates `headline_metric`: its first accuracy."""
  return next((k for k in evaluation if "accuracy" in k), next(iter(evaluation), "loss"))


def run_row(root_dir: str) -> dict[str, Any]:
  """One run's row (raises ValueError naming the directory when it is not a finished run)."""
  summary_path = os.path.join(root_dir, "summary.json")
  if not os.path.exists(summary_path):
    raise ValueError(f"RUN_DIR {root_dir!r} has no summary.json: not a run directory a dp_fl "
                     "run has finished a call in.")
  summary = _read_json(summary_path)
  config = _read_json(os.path.join(root_dir, "config.json"))
  report_path = os.path.join(root_dir, "privacy_report.json")
  report = _read_json(report_path) if os.path.exists(report_path) else {}
  baseline = summary.get("baseline") or {}
  evaluation = summary.get("eval") or {}
  loss = evaluation.get("loss")
  unigram_loss = baseline.get("unigram_loss")
  adaptive = report.get("adaptive_clipping")
  first_clip, last_clip = _clip_norms(root_dir)
  guard = summary.get("noise_guard") or {}
  return {
      "run": os.path.basename(os.path.normpath(root_dir)),
      "task": summary.get("task"), "mechanism": config.get("mechanism"),
      "headline_metric": summary.get("headline_metric") or _first_accuracy(evaluation),
      "rounds": summary.get("rounds_completed"), "stopped": summary.get("stopped"),
      "eval": evaluation, "baseline": baseline,
      "loss_over_unigram": (loss / unigram_loss if loss is not None and unigram_loss else None),
      "epsilon": summary.get("epsilon"), "delta": summary.get("delta"),
      "noise_multiplier": config.get("noise_multiplier"),
      # Distributed DP (cpSGD, ddgauss, skellam): bits of each client's message per coordinate.
      "bits_per_coordinate": report.get("bits_per_coordinate", report.get("bits")),
      "clip_norm_initial": config.get("clip_norm"),
      "adaptive_target": (config.get("mechanism_settings") or {}).get(
          "target_unclipped_quantile"),
      "clip_budget_share": None if adaptive is None else adaptive.get("share"),
      "clip_norm_first": first_clip, "clip_norm_last": last_clip,
      "guard_model_noise": (guard.get("ratios") or {}).get("model_noise"),
      "guard_prefix_noise": (guard.get("ratios") or {}).get("prefix_noise"),
      "guard_learnable": guard.get("learnable"),
      "guard_learning_rate_scale": guard.get("learning_rate_scale"),
      "guard_suggested_cohort": guard.get("suggested_cohort"),
      "guard_suggested_epsilon": guard.get("suggested_epsilon"),
      "noise_drift": summary.get("noise_drift"),
  }


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
  values = [v for v in values if v is not None and math.isfinite(v)]
  if not values:
    return math.nan, math.nan
  return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def group_rows(rows: Sequence[dict[str, Any]], metric: Optional[str] = None
               ) -> list[dict[str, Any]]:
  """Mean ± std of `metric` (default: each group's task headline metric) and of the loss over
  the runs of each label."""
  groups: dict[str, list[dict[str, Any]]] = {}
  for row in rows:
    groups.setdefault(_SEED_SUFFIX.sub("", row["run"]), []).append(row)
  out = []
  for label, members in groups.items():
    tasks = {r["task"] for r in members}
    if len(tasks) > 1:
      raise ValueError(f"runs labelled {label!r} come from different tasks {sorted(tasks)}: "
                       "rename their directories so each label is one task's.")
    group_metric = metric or members[0]["headline_metric"]
    metric_mean, metric_std = _mean_std([r["eval"].get(group_metric) for r in members])
    loss_mean, loss_std = _mean_std([r["eval"].get("loss") for r in members])
    share = [r["clip_budget_share"] for r in members if r["clip_budget_share"] is not None]
    out.append({"label": label, "seeds": len(members), "metric": group_metric,
                "metric_mean": metric_mean, "metric_std": metric_std,
                "loss_mean": loss_mean, "loss_std": loss_std,
                "epsilon_max": max((r["epsilon"] or 0.0) for r in members),
                "clip_budget_share": share[0] if share else None})
  return out


def _fmt(value: Any, spec: str = ".4g") -> str:
  if value is None:
    return "—"
  if isinstance(value, float):
    return format(value, spec)
  return str(value)


def markdown(rows: Sequence[dict[str, Any]], groups: Sequence[dict[str, Any]]) -> str:
  lines = ["| run | mechanism | ζ₀ → ζ_last | metrics (unigram) | loss / unigram loss | ε | "
           "clip share | guard: model noise, verdict, lr × | drift |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    metrics = ", ".join(
        f"{k} {_fmt(v)}" + (f" ({_fmt(r['baseline'].get('unigram_' + k, r['baseline'].get(k)))})"
                            if r["baseline"].get("unigram_" + k, r["baseline"].get(k))
                            is not None else "")
        for k, v in r["eval"].items())
    clip = (f"{_fmt(r['clip_norm_initial'])}" if r["clip_norm_last"] is None else
            f"{_fmt(r['clip_norm_first'])} → {_fmt(r['clip_norm_last'])}")
    guard = ("—" if r["guard_model_noise"] is None else
             f"{_fmt(r['guard_model_noise'], '.3g')}, "
             f"{'learnable' if r['guard_learnable'] else 'beyond'}, "
             f"{_fmt(r['guard_learning_rate_scale'], '.3g')}")
    drift = "—" if not r["noise_drift"] else f"round {r['noise_drift']['round']}"
    mechanism = r["mechanism"] + (f" ({r['bits_per_coordinate']} bits)"
                                  if r.get("bits_per_coordinate") else "")
    lines.append(f"| {r['run']} | {mechanism} | {clip} | {metrics} | "
                 f"{_fmt(r['loss_over_unigram'], '.3f')} | {_fmt(r['epsilon'])} | "
                 f"{_fmt(r['clip_budget_share'], '.3f')} | {guard} | {drift} |")
  if any(g["seeds"] > 1 for g in groups):
    lines += ["", "| label | seeds | metric (mean ± std) | loss (mean ± std) | ε (max) |",
              "| --- | --- | --- | --- | --- |"]
    for g in groups:
      lines.append(f"| {g['label']} | {g['seeds']} | {g['metric']} {g['metric_mean']:.4f} ± "
                   f"{g['metric_std']:.4f} | {g['loss_mean']:.4f} ± {g['loss_std']:.4f} | "
                   f"{g['epsilon_max']:.4g} |")
  return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("run_dirs", nargs="+", help="finished run directories (--root_dir)")
  parser.add_argument("--metric", default=None,
                      help="the metric of the grouped summary (default: each task's headline "
                           "metric, e.g. Reddit's accuracy_top1)")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  exits.add_debug_flag(parser)
  args = parser.parse_args(None if argv is None else list(argv))

  def body() -> int:
    rows = [run_row(d) for d in args.run_dirs]
    groups = group_rows(rows, args.metric)
    if args.format == "json":
      print(json.dumps({"runs": rows, "groups": groups}, indent=1))
    else:
      print(markdown(rows, groups), end="")
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
