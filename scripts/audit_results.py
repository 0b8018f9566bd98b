"""The empirical privacy audit of the StackOverflow quick job (issue #41, docs/RESULTS.md).

  .venv/bin/python -m scripts.audit_results --out_dir /tmp/audit \\
      --rows blt@8,bandmf@8,tree@8,dpsgd@8,dpfedavg@8,cpsgd@8,clip@inf,blt@2~weakened
  ./bazelw run //scripts:audit_results -- --rows blt@8 --format json

Each row `mechanism@ε` is the quick job (`tasks.stackoverflow.train`, its preset, σ calibrated
to ε; `inf` for the non-private `clip`) with `--audit_canaries=K`, in a run directory of its
own under `--out_dir`; `~weakened` runs it with `weaken_noise`: an aggregator that adds a tenth
of the noise its accountant assumes — the bug the audit must catch (its one-run lower bound
above the accounted ε). `~no_canaries` runs the row without canaries (the accuracy cost). A row
whose run directory already holds a finished run is read, not rerun. Prints a table (or JSON)
and writes audit_results.json and .md to `--out_dir`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Optional, Sequence

from dp_fl import results
from dp_fl.training import canaries as canaries_lib

WEAKENED = "weakened"
NO_CANARIES = "no_canaries"
VARIANTS = (WEAKENED, NO_CANARIES)
# Flags a mechanism needs beyond the quick preset (DP-FedAvg samples by Poisson, paper 001).
_THREATS = ("final_model", "all_iterates")
MECHANISM_FLAGS = {"dpfedavg": ("--participation=poisson",)}


def weaken_noise(mechanism: str, factor: float = 0.1) -> None:
  """Makes `mechanism`'s aggregator add `factor` × the noise its accountant assumes (in this
  process): a deliberately broken mechanism for the audit to catch. Test and demo use only."""
  from dp_fl.training import registry  # pylint: disable=g-import-not-at-top
  entry = registry.mechanism(mechanism)
  build = type(entry).aggregator

  def weakened(self, config, *args, **kwargs):
    return build(self, config.replace(noise_multiplier=config.noise_multiplier * factor),
                 *args, **kwargs)

  entry.aggregator = weakened.__get__(entry)  # pylint: disable=no-value-for-parameter


def parse_row(text: str) -> tuple[str, Optional[float], str]:
  """'mechanism@ε[~variant]' -> (mechanism, ε or None for inf, variant or '')."""
  head, _, variant = text.partition("~")
  mechanism, at, epsilon = head.partition("@")
  if not at or not mechanism or variant not in ("",) + VARIANTS:
    raise ValueError(f"--rows: {text!r} is not mechanism@epsilon[~{'|~'.join(VARIANTS)}] "
                     "(e.g. blt@8, clip@inf, blt@2~weakened).")
  try:
    value = float(epsilon)
  except ValueError:
    raise ValueError(f"--rows: the ε of {text!r} is not a number or inf.") from None
  if value <= 0:
    raise ValueError(f"--rows: the ε of {text!r} must be positive.")
  return mechanism, (None if value == float("inf") else value), variant


def row_flags(row: str, out_dir: str, canaries: int, extra: Sequence[str]) -> list[str]:
  mechanism, epsilon, variant = parse_row(row)
  flags = [f"--mechanism={mechanism}", f"--root_dir={os.path.join(out_dir, row_name(row))}",
           "--reproducible_noise_seed=7", "--format=json"]
  if epsilon is not None:  # A non-private row (clip@inf) is not calibrated.
    flags.append(f"--calibrate_epsilon={epsilon:g}")
  if variant != NO_CANARIES:
    flags.append(f"--audit_canaries={canaries}")
  return flags + list(MECHANISM_FLAGS.get(mechanism, ())) + list(extra)


def row_name(row: str) -> str:
  return row.replace("@", "_eps").replace("~", "_")


def run_row(row: str, out_dir: str, canaries: int, extra: Sequence[str]) -> dict[str, Any]:
  """Runs (or reads) one row; its summary.json and the figures the table shows."""
  root = os.path.join(out_dir, row_name(row))
  summary_path = os.path.join(root, "summary.json")
  done = False
  if os.path.exists(summary_path):
    with open(summary_path, encoding="utf-8") as f:
      done = json.load(f).get("stopped") == "completed"
  if not done:
    command = [sys.executable, "-m", "scripts.audit_results", "--one_row", row,
               "--out_dir", out_dir, "--audit_canaries", str(canaries), "--", *extra]
    with open(os.path.join(out_dir, row_name(row) + ".log"), "w", encoding="utf-8") as log:
      code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    if code not in (0, 8):
      raise RuntimeError(f"row {row} failed (exit {code}); see its log in {out_dir}.")
  with open(summary_path, encoding="utf-8") as f:
    summary = json.load(f)
  mechanism, epsilon, variant = parse_row(row)
  out = {"row": row, "mechanism": mechanism, "target_epsilon": epsilon, "variant": variant,
         "accounted_epsilon": summary.get("epsilon"),
         "accuracy": summary["eval"].get("accuracy_without_out_of_vocab_or_end_of_sentence"),
         "accuracy_all_tokens": summary["eval"].get("accuracy")}
  with open(os.path.join(root, "privacy_report.json"), encoding="utf-8") as f:
    section = json.load(f).get("empirical")
  if section is None:
    return out
  # Re-audited from the saved scores: the estimators of this version on every row.
  section = canaries_lib.estimate(section, section.get("gaussian_claim", _gaussian(mechanism)))
  return {**out, "num_canaries": section["num_canaries"],
          "canary_cohort_share": section["canary_cohort_share"],
          "one_shot_final_model": section["one_shot"]["final_model"]["epsilon"],
          "one_shot_closed_form_null": section["one_shot"]["final_model_closed_form_null"][
              "epsilon"],
          "one_shot_all_iterates": section["one_shot"]["all_iterates"]["epsilon"],
          "one_shot_noise_floor": section["one_shot_noise_floor"]["empirical_null"],
          "one_shot_noise_floor_closed_form": section["one_shot_noise_floor"][
              "closed_form_null"],
          "one_run_epsilon_delta": max(section["one_run"][t]["epsilon"] for t in _THREATS),
          # Only a μ-GDP mechanism's ε is bounded by the Gaussian test.
          "one_run_gaussian": (max(section["one_run_gaussian"][t]["epsilon"]
                                   for t in _THREATS) if section["gaussian_claim"] else None),
          "one_run_claim_tested": section["one_run_claim_tested"],
          "one_run_lower_bound": section["one_run_lower_bound"],
          "one_run_ceiling": section["one_run_ceiling"],
          "lower_bound_exceeds_accounted": section["lower_bound_exceeds_accounted"]}


def _gaussian(mechanism: str) -> bool:
  """Whether the quick job's report of `mechanism` is a μ-GDP claim (for sections written
  before they recorded it): DP-FTRL and DP-SGD under the device timer (not amplified)."""
  from dp_fl.participation import schemes  # pylint: disable=g-import-not-at-top
  from dp_fl.training import registry  # pylint: disable=g-import-not-at-top
  return registry.mechanism(mechanism).accounting == schemes.CORRELATED


def _cell(value: Any, spec: str = ".3g") -> str:
  if value is None:
    return "—"
  if isinstance(value, bool):
    return "**CAUGHT**" if value else "no"
  return format(value, spec)


def markdown(rows: list[dict[str, Any]]) -> str:
  lines = ["| row | accounted ε | one-shot ε: final model (closed-form null) / all iterates "
           "[noise floor] | one-run lower bound, 95 %, larger of both threat models: "
           "headline [(ε, δ) claim "
           "/ Gaussian claim] (most these K can certify) | "
           "K | inserted canaries' share | content-word acc. | bound > accounted |",
           "| --- " * 8 + "|"]
  for r in rows:
    if "num_canaries" not in r:
      lines.append(f"| {r['row']} | {_cell(r['accounted_epsilon'])} | — | — | — | — | "
                   f"{_cell(r['accuracy'], '.4f')} | — |")
      continue
    lines.append(
        f"| {r['row']} | {_cell(r['accounted_epsilon'])} | "
        f"{_cell(r['one_shot_final_model'])} ({_cell(r['one_shot_closed_form_null'])}) / "
        f"{_cell(r['one_shot_all_iterates'])} [{_cell(r['one_shot_noise_floor'])} "
        f"({_cell(r['one_shot_noise_floor_closed_form'])})] | "
        f"**{_cell(r['one_run_lower_bound'])}** "
        f"[{_cell(r['one_run_epsilon_delta'])} / {_cell(r['one_run_gaussian'])}] "
        f"({_cell(r['one_run_ceiling'])}) | {r['num_canaries']} | "
        f"{_cell(r['canary_cohort_share'], '.2%')} | {_cell(r['accuracy'], '.4f')} | "
        f"{_cell(r['lower_bound_exceeds_accounted'])} |")
  return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", default="blt@8,clip@inf,blt@2~weakened",
                      help="comma-separated mechanism@ε[~weakened|~no_canaries]")
  parser.add_argument("--out_dir", default="/tmp/dp_fl_audit")
  parser.add_argument("--audit_canaries", type=int, default=128)
  parser.add_argument("--one_row", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--format", choices=("table", "json"), default="table")
  parser.add_argument("extra", nargs="*", help="flags for every run (after --)")
  args = parser.parse_args(argv)
  if args.audit_canaries < 2:
    parser.error(f"--audit_canaries={args.audit_canaries}: use at least 2 (e.g. 128).")
  if args.one_row is not None:
    return _one_row(args.one_row, args.out_dir, args.audit_canaries, args.extra)
  try:
    rows = [row.strip() for row in args.rows.split(",") if row.strip()]
    for row in rows:
      parse_row(row)
  except ValueError as e:
    parser.error(str(e))
  os.makedirs(args.out_dir, exist_ok=True)
  table = [run_row(row, args.out_dir, args.audit_canaries, args.extra) for row in rows]
  results.write(args.out_dir, {"rows": table}, "audit_results.json",
                markdown={"audit_results.md": lambda d: markdown(d["rows"])})
  print(json.dumps(table, indent=1) if args.format == "json" else markdown(table))
  return 0


def _one_row(row: str, out_dir: str, canaries: int, extra: Sequence[str]) -> int:
  from tasks.stackoverflow import train  # pylint: disable=g-import-not-at-top
  mechanism, _, variant = parse_row(row)
  if variant == WEAKENED:
    weaken_noise(mechanism)
  return train.main(row_flags(row, out_dir, canaries, extra))


if __name__ == "__main__":
  sys.exit(main())
