"""Prints the versions of the pinned stack and runs one federated computation.

  ./bazelw run //scripts:env_check [-- --format json]
  .venv/bin/python -m scripts.env_check
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

from absl import app
from absl import flags

from dp_fl.execution import runtime

_FORMAT = flags.DEFINE_enum("format", "table", ["table", "json"], "Output format.")
_QUIET = flags.DEFINE_bool("quiet", False, "Print nothing on success (used by bootstrap).")


def collect_environment() -> dict[str, object]:
  """Imports the stack, runs a federated sum in a guarded C++ context, returns a report."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import scipy  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  import tensorflow_privacy  # pylint: disable=g-import-not-at-top
  from importlib import metadata  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def federated_sum(values):
    return tff.federated_sum(values)

  with runtime.execution_context():
    total = float(federated_sum([1.0, 2.0, 3.5]))
  if total != 6.5:
    raise RuntimeError(f"federated_sum([1, 2, 3.5]) returned {total}, expected 6.5")
  return {
      "python": sys.version.split()[0],
      "tensorflow": tf.__version__,
      "tensorflow_federated": tff.__version__,
      "tensorflow_privacy": metadata.version("tensorflow-privacy"),
      "dp_accounting": metadata.version("dp-accounting"),
      "numpy": np.__version__,
      "scipy": scipy.__version__,
      "federated_sum([1, 2, 3.5])": total,
      "federated_computation_ran": True,
  }


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  runtime.configure_logging(runtime.verbosity_from_flags())
  runtime.install_signal_handlers()
  report = collect_environment()
  if _QUIET.value:
    return
  if _FORMAT.value == "json":
    print(json.dumps(report, indent=2))
  else:
    width = max(len(k) for k in report)
    for key, value in report.items():
      print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
  app.run(main)
