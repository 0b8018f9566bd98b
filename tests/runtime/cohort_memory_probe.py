"""One training run of the toy task's 4.2M-parameter network at a given cohort, in a fresh
process, printing the runtime it ran on and the peak memory of this process and of its
children (TFF's worker); used by cohort_memory_test.

  python -m tests.runtime.cohort_memory_probe ROOT_DIR CLIENTS [--runtime tff_worker]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys

from dp_fl.execution import runtime


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("root_dir")
  parser.add_argument("clients", type=int)
  parser.add_argument("--runtime", default=None, help="as given (default: not given)")
  parser.add_argument("--rounds", type=int, default=1)
  args = parser.parse_args(argv)
  runtime.configure_logging(0)
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  from tests.training import toy_program  # pylint: disable=g-import-not-at-top
  from tests.training import toy_task  # pylint: disable=g-import-not-at-top
  task = toy_task.make_task(num_clients=args.clients, big=True)
  config = toy_program.toy_config(
      args.root_dir, args.rounds, "dpsgd", clients_per_round=args.clients, min_sep=1,
      eval_every=args.rounds, checkpoint_every=args.rounds,
      **({} if args.runtime is None else {"runtime": args.runtime}))
  config, _ = program.runtime_for_cohort(config, program.model_dimension(task),
                                         runtime_given=args.runtime is not None)
  with runtime.execution_context():
    result = program.run(task, config)
  print(json.dumps({
      "runtime": config.runtime, "rounds_completed": result.rounds_completed,
      "peak_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
      "peak_children_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}),
        flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
