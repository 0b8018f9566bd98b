"""The digits experiment's results drawn from its JSON alone: the Markdown table and the
accuracy-vs-bits figure (paper 000, Sec. 5, Fig. 2).

The repository's results pattern (`dp_fl.results`: compute → JSON → draw): `program.sweep`
computes the sweep's JSON-ready dict; `write_outputs` writes it as results.json and draws
results.md and accuracy_vs_bits.png from the file read back, and `replot` does the same from a
committed results.json without training — so a table or figure never shows more than the
JSON beside it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from dp_fl import exits
from dp_fl import results as results_lib
from tasks.digits import data

RESULTS_JSON, RESULTS_MD, FIGURE_PNG = "results.json", "results.md", "accuracy_vs_bits.png"


DISTRIBUTED = {"ddgauss": "DDGauss", "skellam": "Skellam"}  # TFF's; B bits per coordinate.


def _accuracy(row: dict[str, Any], seeds: int) -> str:
  if row.get("unreachable"):
    return "not reachable at these bits"
  text = f"{row['accuracy_mean']:.3f}"
  return text + (f" ± {row['accuracy_std']:.3f}" if seeds > 1 else "")


def _title(output: dict[str, Any]) -> str:
  names = {r["mechanism"] for r in output["rows"]}
  compared = [label for name, label in (("cpsgd", "cpSGD"), ("ddgauss", "DDGauss"),
                                        ("skellam", "Skellam")) if name in names]
  return (", ".join(compared) or "Mechanisms") + " vs Gaussian"


def _k_or_z(row: dict[str, Any]) -> tuple[str, str]:
  """The k and m columns: cpSGD's levels and trials; ddgauss/skellam: —, z."""
  if row["mechanism"] in DISTRIBUTED:
    z = row.get("noise_multiplier")
    return "—", "—" if z is None else f"z = {z:.4g}"
  return str(row["num_levels"] or "—"), str(row.get("num_trials", "—"))


def markdown(output: dict[str, Any]) -> str:
  """The human table: one line per (ε, mechanism, k)."""
  s = output["settings"]
  seeds = len(output["sweep"]["seeds"])
  lines = [
      f"# {_title(output)} on {output['data']['source']}: accuracy vs bits (paper 000, "
      "Sec. 5)", "",
      f"MLP {output['data']['num_features']} → {' → '.join(map(str, s['hidden_layers']))} "
      f"→ {data.NUM_CLASSES} (d = {output['model_dimension']}, d' = "
      f"{output['padded_dimension']}); n = {s['clients_per_round']} clients per round, "
      f"E = {s['epochs']} epoch(s) ({s['rounds']} rounds), clip D = {s['clip_norm']:g}, server "
      f"SGD lr {s['learning_rate']:g} momentum {s['momentum']:g}; δ = {s['delta']:g}, "
      f"p = {s['binomial_p']:g}. Test accuracy: mean ± std (ddof 1) over {seeds} seed(s); "
      f"chance {output['chance_accuracy']:.2f}.", "",
      "| ε | mechanism | k | m (cpsgd) or z | bits/coord | noise std of the mean (× Gaussian) "
      "| ε reached (accounting) | test accuracy |",
      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in output["rows"]:
    eps = "—" if r["epsilon_target"] is None else f"{r['epsilon_target']:g}"
    ratio = ("" if r["noise_std_vs_gaussian"] is None
             else f" (×{r['noise_std_vs_gaussian']:.2f})")
    reached = ("—" if r["epsilon"] is None else
               f"{r['epsilon']:.3f} ({r.get('composition', 'exact Gaussian')})")
    bits = "—" if r["bits_per_coordinate"] is None else str(r["bits_per_coordinate"])
    noise = "—" if r["noise_std_of_mean"] is None else f"{r['noise_std_of_mean']:.4g}{ratio}"
    levels, trials = _k_or_z(r)
    lines.append(
        f"| {eps} | {r['mechanism']} | {levels} | {trials} | {bits} | {noise} | "
        f"{reached} | {_accuracy(r, seeds)}"
        + (f" ({r['diverged_runs']} diverged)" if r["diverged_runs"] else "") + " |")
  lines += [f"\n{DISTRIBUTED[r['mechanism']]}, ε = {r['epsilon_target']:g}, B = "
            f"{r['bits']}: {r['unreachable']}" for r in output["rows"] if r.get("unreachable")]
  lines += ["", "**What ε covers.** " + output["privacy"], "",
            f"{len(output['runs'])} runs in {output['seconds']:.0f} s."]
  return "\n".join(lines) + "\n"


def figure(output: dict[str, Any]) -> Any:
  """Accuracy vs bits per coordinate: cpSGD per ε (points labelled k), DDGauss and Skellam
  per ε (at their B), the Gaussian of the same ε as a dashed horizontal line (its ±std band),
  `none` dotted, chance grey."""
  from dp_fl import writers  # pylint: disable=g-import-not-at-top
  fig, ax = writers.new_figure(7.0, 4.4)
  colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
  epsilons = sorted({r["epsilon_target"] for r in output["rows"]
                     if r["epsilon_target"] is not None})
  cp_rows = [r for r in output["rows"] if r["mechanism"] == "cpsgd"]
  distributed_rows = [r for r in output["rows"]
                      if r["mechanism"] in DISTRIBUTED and r["accuracy_mean"] is not None]
  bits = [r["bits_per_coordinate"] for r in cp_rows + distributed_rows] or [1, 32]
  for i, eps in enumerate(epsilons):
    color = colors[i % len(colors)]
    points = sorted((r for r in cp_rows if r["epsilon_target"] == eps),
                    key=lambda r: r["bits_per_coordinate"])
    if points:
      ax.errorbar([r["bits_per_coordinate"] for r in points],
                  [r["accuracy_mean"] for r in points],
                  yerr=[r["accuracy_std"] for r in points], marker="o", color=color,
                  capsize=3, label=f"cpSGD ε={eps:g}")
      for r in points:
        ax.annotate(f"k={r['num_levels']}", (r["bits_per_coordinate"], r["accuracy_mean"]),
                    textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
    for (name, label), (marker, style) in zip(DISTRIBUTED.items(), (("^", "-."), ("s", ":"))):
      points = sorted((r for r in distributed_rows
                       if r["mechanism"] == name and r["epsilon_target"] == eps),
                      key=lambda r: r["bits_per_coordinate"])
      if points:
        ax.errorbar([r["bits_per_coordinate"] for r in points],
                    [r["accuracy_mean"] for r in points],
                    yerr=[r["accuracy_std"] for r in points], marker=marker, linestyle=style,
                    color=color, capsize=3, label=f"{label} ε={eps:g}")
    for r in output["rows"]:
      if r["mechanism"] == "gaussian" and r["epsilon_target"] == eps:
        ax.axhline(r["accuracy_mean"], color=color, linestyle="--", linewidth=1,
                   label=f"Gaussian ε={eps:g} (real-valued)")
        ax.axhspan(r["accuracy_mean"] - r["accuracy_std"],
                   r["accuracy_mean"] + r["accuracy_std"], color=color, alpha=0.08)
  for r in output["rows"]:
    if r["mechanism"] == "none":
      ax.axhline(r["accuracy_mean"], color="black", linestyle=":", label="non-private (none)")
  ax.axhline(output["chance_accuracy"], color="grey", linewidth=0.8, label="chance")
  ax.set_xlim(min(bits) - 1, max(bits) + 2)
  ax.set_ylim(0.0, 1.0)
  ax.set_xlabel("bits per coordinate per client (cpSGD: ⌈log₂(k + m)⌉; DDGauss, Skellam: B)")
  ax.set_ylabel("test accuracy")
  s = output["settings"]
  ax.set_title(f"{_title(output)}, {output['data']['source'].split(' (')[0]}: n = "
               f"{s['clients_per_round']}, E = {s['epochs']}, δ = {s['delta']:g}", fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  return fig


def markdown_with_figure(output: dict[str, Any]) -> str:
  """results.md: the table, then the figure beside it."""
  return markdown(output) + f"\n![accuracy vs bits]({FIGURE_PNG})\n"


def write_outputs(output: dict[str, Any], out_dir: str) -> dict[str, str]:
  """results.json, then results.md (with the figure) and accuracy_vs_bits.png drawn from it,
  in `out_dir` (`dp_fl.results.write`)."""
  return results_lib.write(out_dir, output, RESULTS_JSON,
                           markdown={RESULTS_MD: markdown_with_figure},
                           figures={FIGURE_PNG: figure})


def replot(results_json: str, out_dir: str) -> int:
  """Rewrites results.md and the figure (and a copy of the JSON) from `results_json`."""
  try:
    output = results_lib.read(results_json)
  except json.JSONDecodeError as e:
    raise ValueError(f"--replot={results_json!r} is not JSON ({e}).") from e
  if not isinstance(output, dict) or "rows" not in output:
    raise ValueError(f"--replot={results_json!r} is not a results.json of this experiment.")
  paths = write_outputs(output, out_dir or ".")
  print(f"wrote {', '.join(paths.values())}", file=sys.stderr)
  print(markdown(output))
  return exits.COMPLETED
