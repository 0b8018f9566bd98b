"""Per-target test times of the last `bazel test` run against each target's timeout.

  ./bazelw run //scripts:test_times [-- --format json]
  .venv/bin/python -m scripts.test_times [--testlogs bazel-testlogs] [--max_fraction 0.5]

Reads every `py_test` of `tests/**/BUILD` (its size or explicit timeout, its shard count) and
the `test.xml` Bazel wrote for it (one per shard) under `--testlogs`, and prints, per target, the
slowest shard's seconds as a fraction of the Bazel timeout, the target's total test seconds
and the suite's totals. The suite's rule is headroom: every target within half its timeout on an
otherwise idle 2-core machine (`--max_fraction`, exit status 1 when a target exceeds it, so a
run on a loaded machine can still be read without failing CI: `.ci/run` only prints it).
Targets without a result (not run, or run before their shard count changed) are listed as such.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from typing import Optional, Sequence
from xml.etree import ElementTree

# Bazel's default timeout per test size (seconds).
TIMEOUTS = {"small": 60, "medium": 300, "large": 900, "enormous": 3600}
NAMED_TIMEOUTS = {"short": 60, "moderate": 300, "long": 900, "eternal": 3600}
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PY_TEST = re.compile(r"^\[?py_test\((.*?)^\)(.*?)$", re.S | re.M)


@dataclasses.dataclass(frozen=True)
class Target:
  label: str
  timeout_s: int
  shards: int


@dataclasses.dataclass(frozen=True)
class Timing:
  label: str
  timeout_s: int
  shards: int
  shard_seconds: Optional[list[float]]  # None: no complete result for the current shards.
  failed: bool

  @property
  def slowest_s(self) -> Optional[float]:
    return max(self.shard_seconds) if self.shard_seconds else None

  @property
  def fraction(self) -> Optional[float]:
    return None if self.slowest_s is None else self.slowest_s / self.timeout_s


def _attribute(body: str, name: str) -> Optional[str]:
  match = re.search(rf"\b{name}\s*=\s*(\"[^\"]*\"|\d+)", body)
  return None if match is None else match.group(1).strip('"')


def _glob_names(package_dir: str, comprehension: str) -> list[str]:
  """Names of a `[py_test(name = src[:-len(".py")], ...) for src in glob([...])]` rule."""
  pattern = re.search(r"glob\(\[\"([^\"]+)\"\]", comprehension)
  if pattern is None:
    return []
  regex = re.compile("^" + re.escape(pattern.group(1)).replace(r"\*", ".*") + "$")
  return sorted(f[:-len(".py")] for f in os.listdir(package_dir) if regex.match(f))


def targets(root: str = _ROOT) -> list[Target]:
  """Every py_test under tests/, with its timeout and shard count, from the BUILD files."""
  found = []
  for directory, _, files in sorted(os.walk(os.path.join(root, "tests"))):
    if "BUILD" not in files:
      continue
    package = os.path.relpath(directory, root)
    with open(os.path.join(directory, "BUILD"), encoding="utf-8") as f:
      text = f.read()
    for match in _PY_TEST.finditer(text):
      body = match.group(1)
      named = _attribute(body, "timeout")
      timeout = (NAMED_TIMEOUTS[named] if named
                 else TIMEOUTS[_attribute(body, "size") or "medium"])
      shards = int(_attribute(body, "shard_count") or 1)
      name = _attribute(body, "name")
      names = [name] if name else _glob_names(directory, match.group(2))
      found += [Target(f"//{package}:{n}", timeout, shards) for n in names]
  return found


def _xml_seconds(path: str) -> tuple[float, bool]:
  suite = ElementTree.parse(path).getroot()
  case = suite.find(".//testcase")
  seconds = float(case.get("time") or case.get("duration") or 0.0) if case is not None else 0.0
  failed = suite.find(".//failure") is not None or suite.find(".//error") is not None
  return seconds, failed


def timing(target: Target, testlogs: str) -> Timing:
  package, name = target.label[2:].split(":")
  directory = os.path.join(testlogs, package, name)
  paths = ([os.path.join(directory, "test.xml")] if target.shards == 1 else
           [os.path.join(directory, f"shard_{i}_of_{target.shards}", "test.xml")
            for i in range(1, target.shards + 1)])
  if not all(os.path.exists(p) for p in paths):
    return Timing(target.label, target.timeout_s, target.shards, None, False)
  results = [_xml_seconds(p) for p in paths]
  return Timing(target.label, target.timeout_s, target.shards, [s for s, _ in results],
                any(failed for _, failed in results))


def report(timings: Sequence[Timing], max_fraction: float) -> dict[str, object]:
  measured = [t for t in timings if t.shard_seconds is not None]
  rows = [{"target": t.label, "timeout_s": t.timeout_s, "shards": t.shards,
           "slowest_shard_s": t.slowest_s, "test_s": sum(t.shard_seconds or []) or None,
           "fraction_of_timeout": None if t.fraction is None else round(t.fraction, 3),
           "failed": t.failed} for t in sorted(timings, key=lambda t: -(t.fraction or 0))]
  over = [t.label for t in measured if t.fraction > max_fraction]
  return {"targets": len(timings), "measured": len(measured),
          "test_seconds": sum(sum(t.shard_seconds) for t in measured),
          "max_fraction": max_fraction, "over_max_fraction": over,
          "not_measured": [t.label for t in timings if t.shard_seconds is None], "rows": rows}


def _table(summary: dict[str, object]) -> str:
  lines = [f"{'target':58s} {'shards':>6s} {'slowest':>8s} {'timeout':>7s} {'share':>6s}"]
  for row in summary["rows"]:
    slowest = "-" if row["slowest_shard_s"] is None else f"{row['slowest_shard_s']:.0f} s"
    share = "-" if row["fraction_of_timeout"] is None else f"{row['fraction_of_timeout']:.0%}"
    flag = "  FAILED" if row["failed"] else ""
    lines.append(f"{row['target']:58s} {row['shards']:6d} {slowest:>8s} "
                 f"{row['timeout_s']:5d} s {share:>6s}{flag}")
  lines.append(f"{summary['measured']} of {summary['targets']} targets measured, "
               f"{summary['test_seconds']:.0f} s of test time; over "
               f"{summary['max_fraction']:.0%} of their timeout: "
               f"{', '.join(summary['over_max_fraction']) or 'none'}")
  return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--testlogs", default=os.path.join(_ROOT, "bazel-testlogs"),
                      help="Bazel's test log directory (default: the workspace's).")
  parser.add_argument("--max_fraction", type=float, default=0.5,
                      help="the headroom rule: slowest shard / timeout (default 0.5).")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  args = parser.parse_args(argv)
  if not 0 < args.max_fraction <= 1:
    parser.error(f"--max_fraction={args.max_fraction}: must be in (0, 1]")
  if not os.path.isdir(args.testlogs):
    parser.error(f"--testlogs={args.testlogs}: no such directory; run "
                 "`./bazelw test //...` first or point it at Bazel's bazel-testlogs")
  summary = report([timing(t, args.testlogs) for t in targets()], args.max_fraction)
  print(json.dumps(summary, indent=2) if args.format == "json" else _table(summary))
  return 1 if summary["over_max_fraction"] else 0


if __name__ == "__main__":
  sys.exit(main())
