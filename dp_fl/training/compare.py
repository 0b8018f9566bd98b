"""Honest comparisons of mechanisms at one ε: tuned per mechanism, several seeds, references.

Paper 004 compares mechanisms after tuning each one's learning rates separately; comparing
them at one shared learning rate measures the rate, not the mechanism. `compare` does, for
each mechanism (private ones and the non-private references `none` and `clip`):

1. σ calibrated so the planned schedule reaches the target ε at δ (private mechanisms): the
   largest σ over the seeds the row runs (each seed's C and simulated population), and every
   run stops before a round that would report more (`calibration.py`);
2. a small grid of server learning rates (the mechanism's tuned rate × `lr_factors`),
   each trained once and scored on the task's **validation** data
   (`Task.validation_dataset_fn`, disjoint from the evaluation data); while the best rate
   lies on the grid's edge the grid is extended one step past it (at most
   `max_grid_extensions` times), so a mechanism is not reported at a rate the grid merely
   cut off;
3. the best rate (by the task's headline metric) trained with `seeds` other seeds (model
   initialization and the simulated population; the noise from OS entropy, or from
   `reproducible_noise_seed + seed`), scored on the **evaluation** data;
4. a row: the headline metric and accuracy as mean ± std over the seeds, the chosen rate,
   the realized ε of every seed (the largest is the row's ε).

Outputs in `out_dir`: `comparison.json` (every run), `comparison.md` (the table, the
baseline, the command's settings) and `comparison.png` (mean ± std per mechanism, the
unigram baseline dashed). Each run has its own run directory
`<out_dir>/<mechanism>/{lr_<rate>,seed_<s>_lr_<rate>}` with its figures and report;
rerunning the same command resumes unfinished runs and reuses finished ones.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from typing import Any, Callable, Mapping, Optional, Sequence

from dp_fl import results
from dp_fl import writers
from dp_fl.execution import runtime
from dp_fl.training import calibration
from dp_fl.training import config as config_lib
from dp_fl.training import program
from dp_fl.training import registry
from dp_fl.training import task as task_lib

DEFAULT_MECHANISMS = ("none", "clip", "dpsgd", "tree", "bandmf", "blt")
DEFAULT_LR_FACTORS = (0.5, 1.0, 2.0)


@dataclasses.dataclass(frozen=True)
class RunRecord:
  """One training run of a comparison."""
  mechanism: str
  phase: str  # "validation" (the grid) or "evaluation" (the seeds)
  server_learning_rate: float
  seed: int
  metric: float
  accuracy: float
  epsilon: Optional[float]
  rounds: int
  stopped: str
  seconds: float
  root_dir: str
  audit: Optional[dict[str, Any]] = None  # `program.audit_summary` (--audit_canaries).


def _grid_key(rate: float) -> str:
  return f"{rate:.6g}"


ConfigFor = Callable[..., config_lib.TrainingConfig]
"""`config_for(mechanism, participation=None)`: the run's TrainingConfig as if the mechanism
(and the participation, unless None) had been given as flags."""


def compare(task: task_lib.Task, config_for: ConfigFor, *,
            mechanisms: Sequence[str], target_epsilon: float, out_dir: str,
            lr_factors: Sequence[float] = DEFAULT_LR_FACTORS, seeds: int = 3,
            max_grid_extensions: int = 2, participations: Optional[Sequence[str]] = None,
            progress: Callable[[str], None] = print) -> dict[str, Any]:
  """Runs the comparison (see the module doc); returns what `comparison.json` holds.

  Args:
    task: the task; its `validation_dataset_fn` is required when `lr_factors` has more
      than one value.
    config_for: the run's TrainingConfig for a mechanism and a participation (preset, its
      per-mechanism settings, the user's flags: `ConfigFor`); `root_dir`, `seed`, the server
      rate and σ are set here.
    mechanisms: the mechanisms to compare (non-private ones are the reference rows).
    target_epsilon: the ε every private row is calibrated to.
    out_dir: where the runs and the outputs go.
    lr_factors: the grid, as factors of each mechanism's configured server rate.
    seeds: runs per mechanism at the chosen rate.
    max_grid_extensions: how many rates may be added past the grid's edge while the best
      rate lies on it (see `_edge_extensions`); 0 keeps the grid as given.
    participations: compare each private mechanism under each of these `--participation`
      schemes (rows `mechanism@participation`, each calibrated to `target_epsilon` with its
      own — possibly amplified — accounting); None: the configured one.
    progress: where progress lines go.
  """
  if not target_epsilon > 0 or math.isinf(target_epsilon):
    raise ValueError(f"`target_epsilon` must be a finite ε > 0; got {target_epsilon!r}.")
  if seeds < 1:
    raise ValueError(f"`seeds` must be >= 1; got {seeds!r}.")
  if max_grid_extensions < 0:
    raise ValueError(f"`max_grid_extensions` must be >= 0; got {max_grid_extensions!r}.")
  factors = tuple(float(f) for f in lr_factors)
  if not factors or any(not (f > 0 and math.isfinite(f)) for f in factors):
    raise ValueError(f"`lr_factors` must be positive numbers; got {lr_factors!r}.")
  validation = task.for_validation() if len(factors) > 1 else None
  metric = task.headline_metric
  records: list[RunRecord] = []
  rows = []
  for label, base in _entries(mechanisms, participations, config_for):
    first_rate = base.server_learning_rate * factors[0]
    first_dir = (os.path.join(out_dir, label, f"lr_{_grid_key(first_rate)}")
                 if validation is not None else
                 os.path.join(out_dir, label, f"seed_{base.seed + 1}_lr_{_grid_key(first_rate)}"))
    if registry.mechanism(base.mechanism).private:
      seeds_run = ([base.seed] if validation is not None else []) + [
          base.seed + 1 + s for s in range(seeds)]
      base = calibration.with_budget(base.replace(noise_multiplier=_calibrate(
          task, base, first_dir, target_epsilon, seeds_run)), target_epsilon)
    grid = []
    if validation is not None:

      def grid_run(rate, label=label, base=base):
        record = _run(validation, base, label, "validation", rate, base.seed,
                      os.path.join(out_dir, label, f"lr_{_grid_key(rate)}"), metric,
                      progress)
        records.append(record)
        grid.append(record)

      for factor in factors:
        grid_run(base.server_learning_rate * factor)
      for rate in _edge_extensions(grid, max_grid_extensions):
        grid_run(rate)
      chosen = _best(grid).server_learning_rate
    else:
      chosen = first_rate
    runs = []
    for s in range(seeds):
      seed = base.seed + 1 + s
      record = _run(task, base, label, "evaluation", chosen, seed,
                    os.path.join(out_dir, label, f"seed_{seed}_lr_{_grid_key(chosen)}"),
                    metric, progress)
      records.append(record)
      runs.append(record)
    rows.append(_row(label, base, chosen, grid, runs))
  output = {
      "task": task.name, "description": task.description, "target_epsilon": target_epsilon,
      "headline_metric": metric, "baseline": dict(task.baseline_metrics),
      "lr_factors": list(factors), "max_grid_extensions": max_grid_extensions,
      "seeds": seeds, "rows": rows,
      "runs": [dataclasses.asdict(r) for r in records],
  }
  write_outputs(output, out_dir)
  return output


def _calibrate(task: task_lib.Task, base: config_lib.TrainingConfig, first_dir: str,
               target_epsilon: float, seeds_run: Sequence[int]) -> float:
  """The row's σ: the largest of those calibrated for each seed its runs use, so every run
  reports at most the target (issue #39). The seed is the public seed of the run: it sets
  the optimizer's random starts of C (BLT's C differs by seed) and the simulated
  availability the participation is planned for. Calibrated in the first run's directory,
  where an amplified participation caches its Monte Carlo release: a rerun finds the same
  σ there."""
  return max(program.calibrate_noise_multiplier(
      base.replace(root_dir=first_dir, seed=seed), target_epsilon,
      program.population(task, base), task) for seed in dict.fromkeys(seeds_run))


def _entries(mechanisms: Sequence[str], participations: Optional[Sequence[str]],
             config_for: ConfigFor) -> list[tuple[str, config_lib.TrainingConfig]]:
  """(row label, configuration) of every row: each mechanism under each participation (the
  non-private references once, under the first); labels `mechanism@participation` when
  several participations are compared."""
  out = []
  for mechanism in mechanisms:  # A label: a mechanism, or a variant (`registry.variant`).
    base = config_for(mechanism)
    schemes = list(participations) if participations else [base.participation]
    private = registry.mechanism(base.mechanism).private
    for participation in (schemes if private else schemes[:1]):
      label = mechanism if len(schemes) == 1 else f"{mechanism}@{participation}"
      # The scheme's own settings from the user's flags (e.g. --population_sampling_rate).
      out.append((label, base if participation == base.participation
                  else config_for(mechanism, participation)))
  return out


def _best(grid: Sequence[RunRecord]) -> RunRecord:
  """The best validation score; ties (and NaN-free equal scores) go to the smaller rate."""
  return max(grid, key=lambda r: (r.metric if math.isfinite(r.metric) else -math.inf,
                                  -r.server_learning_rate))


def _edge_extensions(grid: list[RunRecord], limit: int):
  """Rates to add while the best of `grid` lies on its edge (at most `limit` of them).

  A best rate at the largest (smallest) value tried says the optimum may lie beyond it: the
  grid is extended one step past that edge, the step being the ratio of the two outermost
  rates on that side, until the best is inside or the limit is reached (a one-point grid,
  which has no step, is not extended). Yields lazily: each rate is chosen after the previous
  one was trained (appended to `grid` by the caller).
  """
  for _ in range(limit):
    rates = sorted(r.server_learning_rate for r in grid)
    best = _best(grid)
    if not math.isfinite(best.metric) or len(rates) < 2:
      return
    if best.server_learning_rate == rates[-1]:
      yield rates[-1] * rates[-1] / rates[-2]
    elif best.server_learning_rate == rates[0]:
      yield rates[0] * rates[0] / rates[1]
    else:
      return


def _run(task: task_lib.Task, base: config_lib.TrainingConfig, mechanism: str, phase: str,
         rate: float, seed: int, root_dir: str, metric: str,
         progress: Callable[[str], None]) -> RunRecord:
  noise_seed = (None if base.reproducible_noise_seed is None
                else base.reproducible_noise_seed + seed)
  config = base.replace(root_dir=root_dir, server_learning_rate=rate, seed=seed,
                        reproducible_noise_seed=noise_seed)
  private = registry.mechanism(config.mechanism).private
  noise = f"σ {config.noise_multiplier:.4g}" if private else "no noise"
  progress(f"== {mechanism} ({phase}): server lr {rate:.4g}, seed {seed}, {noise} -> "
           f"{root_dir}")
  # Each run in its own TFF worker: a worker that crashes costs one rerun from that run's
  # last checkpoint, not the comparison.
  result = runtime.run_with_fresh_workers(lambda: program.run(task, config), on_restart=progress)
  return RunRecord(
      mechanism=mechanism, phase=phase, server_learning_rate=rate, seed=seed,
      # A run that stopped early is scored as what it reached; the grid never picks a NaN.
      metric=float(result.eval_metrics.get(metric, float("nan"))),
      accuracy=float(result.eval_metrics.get("accuracy",
                                             result.eval_metrics.get(metric, float("nan")))),
      epsilon=result.epsilon, rounds=result.rounds_completed, stopped=result.stopped,
      seconds=result.seconds, root_dir=root_dir,
      audit=None if result.audit is None else program.audit_summary(result.audit))


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
  finite = [v for v in values if math.isfinite(v)]
  if len(finite) < len(values) or not finite:
    return float("nan"), float("nan")
  return statistics.fmean(finite), (statistics.stdev(finite) if len(finite) > 1 else 0.0)


def _row(mechanism: str, base: config_lib.TrainingConfig, chosen: float,
         grid: Sequence[RunRecord], runs: Sequence[RunRecord]) -> dict[str, Any]:
  mean, std = _mean_std([r.metric for r in runs])
  accuracy_mean, accuracy_std = _mean_std([r.accuracy for r in runs])
  epsilons = [r.epsilon for r in runs]
  private = registry.mechanism(base.mechanism).private
  return {
      "mechanism": mechanism, "participation": base.participation,
      "private": private,
      "noise_multiplier": base.noise_multiplier if private else None,
      "server_learning_rate": chosen,
      "grid": {_grid_key(r.server_learning_rate): r.metric for r in grid},
      "metric_mean": mean, "metric_std": std,
      "accuracy_mean": accuracy_mean, "accuracy_std": accuracy_std,
      "epsilon": None if any(e is None for e in epsilons) else max(epsilons),
      "epsilons": epsilons, "delta": base.delta,
      "rounds": [r.rounds for r in runs], "stopped": [r.stopped for r in runs],
      "seconds": sum(r.seconds for r in runs),
      **_audit_columns(runs),
  }


def _audit_columns(runs: Sequence[RunRecord]) -> dict[str, Any]:
  """The row's empirical audit (--audit_canaries): every seed's, the largest one-run lower
  bound and one-shot estimate over the seeds, and whether any seed's bound exceeded its ε.
  Each seed's bound holds at 95 %; with S seeds, that one of them exceeds the truth by chance
  has probability up to S × 5 % (the table says so)."""
  audits = [r.audit for r in runs if r.audit is not None]
  if not audits:
    return {}
  one_shot = [a["one_shot_epsilon_final_model"] for a in audits
              if a["one_shot_epsilon_final_model"] is not None]
  return {"audits": audits,
          "audit_lower_bound": max(a["one_run_lower_bound"] for a in audits),
          "audit_one_shot_final_model": max(one_shot) if one_shot else None,
          "audit_failed": any(a["lower_bound_exceeds_accounted"] for a in audits)}


def _mean_pm_std(mean: float, std: float, seeds: int) -> str:
  """"mean ± std", or the value alone for one seed (a std of 0 would claim no spread)."""
  return f"{mean:.4f}" if seeds == 1 else f"{mean:.4f} ± {std:.4f}"


def _audit_cell(row: Mapping[str, Any]) -> str:
  if "audit_lower_bound" not in row:
    return "—"
  one_shot = row["audit_one_shot_final_model"]
  return (f"{row['audit_lower_bound']:.3g} / " + ("—" if one_shot is None else f"{one_shot:.3g}")
          + (" **AUDIT FAILED: bound > ε**" if row["audit_failed"] else ""))


def markdown(output: Mapping[str, Any]) -> str:
  """The comparison as a Markdown table (mean ± std over the seeds)."""
  metric = output["headline_metric"]
  baseline = output["baseline"]
  audited = any("audit_lower_bound" in r for r in output["rows"])
  base = baseline.get(f"unigram_{metric}")
  lines = [f"# {output['task']}: mechanisms at ε = {output['target_epsilon']:g}", "",
           output["description"], "",
           f"Each row: the server learning rate chosen on validation data from the "
           f"mechanism's rate × {output['lr_factors']} (extended past its edge while the "
           "best rate lay on it; the `grid` of comparison.json lists every rate tried), then "
           f"{output['seeds']} seed{'s' if output['seeds'] > 1 else ''} at that "
           "rate on the evaluation data (mean ± std; one seed: no std). ε: the largest "
           "realized over the seeds (an upper bound, from the participation actually "
           "realized).", "",
           f"| mechanism | σ | server lr | {metric} | accuracy | ε realized | rounds |"
           + (" audited ε, largest over the seeds: one-run lower bound (95 % each) / "
              "one-shot, final model |"
              if audited else ""),
           "| --- " * (8 if audited else 7) + "|"]
  for r in output["rows"]:
    sigma = "—" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:.4g}"
    eps = "∞ (not private)" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
    rounds = "/".join(str(x) for x in sorted(set(r["rounds"])))
    stopped = sorted(set(r["stopped"]) - {"completed"})
    if stopped:
      rounds += f" ({', '.join(stopped)})"
    lines.append(f"| {r['mechanism']} | {sigma} | {r['server_learning_rate']:.3g} | "
                 f"{_mean_pm_std(r['metric_mean'], r['metric_std'], output['seeds'])} | "
                 f"{_mean_pm_std(r['accuracy_mean'], r['accuracy_std'], output['seeds'])} | "
                 f"{eps} | {rounds} |" + (f" {_audit_cell(r)} |" if audited else ""))
  lines += ["", "Unigram baselines (accuracies: always the most frequent word; loss: the "
            "best context-free distribution): " + ", ".join(
      f"{k.removeprefix('unigram_')} {v:.4f}" for k, v in baseline.items())]
  if base is not None:
    above = [r["mechanism"] for r in output["rows"] if r["metric_mean"] > base]
    lines.append(f"Above the unigram {metric} ({base:.4f}): {', '.join(above) or 'none'}.")
  return "\n".join(lines) + "\n"


def comparison_figure(output: Mapping[str, Any]) -> Any:
  """Bar chart: the headline metric per mechanism (mean ± std), the unigram baseline dashed."""
  metric = output["headline_metric"]
  figure, ax = writers.new_figure(7.0, 4.2)
  rows = output["rows"]
  names = [r["mechanism"] for r in rows]
  means = [r["metric_mean"] for r in rows]
  stds = [r["metric_std"] for r in rows]
  colors = ["tab:gray" if not r["private"] else "tab:blue" for r in rows]
  ax.bar(range(len(rows)), means, yerr=stds, color=colors, capsize=4)
  for i, r in enumerate(rows):
    label = "∞" if r["epsilon"] is None else f"ε={r['epsilon']:.2g}"
    ax.annotate(label, (i, 0), xytext=(0, 3), textcoords="offset points", ha="center",
                fontsize=7, color="white")
  ax.set_xticks(range(len(rows)), names)
  base = output["baseline"].get(f"unigram_{metric}")
  if base is not None:
    ax.axhline(base, color="black", linestyle="--", linewidth=1,
               label=f"unigram baseline ({base:.3f})")
    ax.legend(fontsize=8)
  ax.set_ylabel(f"{metric}\n(mean ± std, {output['seeds']} seeds)", fontsize=8)
  ax.set_title(f"{output['task']}: mechanisms at ε = {output['target_epsilon']:g} "
               "(gray: non-private references)", fontsize=10)
  ax.grid(alpha=0.3, axis="y")
  return figure


def write_outputs(output: Mapping[str, Any], out_dir: str) -> dict[str, str]:
  """comparison.json, then comparison.md and comparison.png drawn from the JSON read back
  (`dp_fl.results`: the table and figure never show more than the file beside them);
  returns {file name: path}."""
  return results.write(
      out_dir, output, "comparison.json", default=str,
      markdown={"comparison.md": lambda data: markdown(data)
                + "\n![comparison](comparison.png)\n"},
      figures={"comparison.png": comparison_figure})
