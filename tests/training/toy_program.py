"""Runs the toy task through the training program; used by program_test in subprocesses.

  python -m tests.training.toy_program ROOT_DIR ROUNDS MECHANISM [--target_epsilon E] ...
"""

from __future__ import annotations

import argparse
import json
import sys

from dp_fl.execution import runtime


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("root_dir")
  parser.add_argument("rounds", type=int)
  parser.add_argument("mechanism")
  parser.add_argument("--checkpoint_every", type=int, default=1)
  parser.add_argument("--target_epsilon", type=float, default=None)
  parser.add_argument("--noise_multiplier", type=float, default=0.5)
  parser.add_argument("--reproducible_noise_seed", type=int, default=None)
  parser.add_argument("--participation", default="min_sep_rounds")
  parser.add_argument("--on_nonfinite", default="stop")
  parser.add_argument("--poison_clients", default="", help="comma-separated client ids")
  parser.add_argument("--num_clients", type=int, default=None)
  parser.add_argument("--min_sep", type=int, default=3)
  parser.add_argument("--timer_hours", type=float, default=24.0)
  parser.add_argument("--clients_per_round", type=int, default=4)
  parser.add_argument("--population_sampling_rate", type=float, default=None)
  parser.add_argument("--runtime", default="tff_worker")
  parser.add_argument("--audit_canaries", type=int, default=0)
  parser.add_argument("--target_unclipped_quantile", type=float, default=None)
  parser.add_argument("--clip_learning_rate", type=float, default=None)
  args = parser.parse_args(argv)
  adaptive = {name: getattr(args, name) for name in ("target_unclipped_quantile",
                                                     "clip_learning_rate")
              if getattr(args, name) is not None}
  runtime.configure_logging(0)
  runtime.install_signal_handlers()
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  from tests.training import toy_task  # pylint: disable=g-import-not-at-top
  config = toy_config(args.root_dir, args.rounds, args.mechanism,
                      checkpoint_every=args.checkpoint_every,
                      target_epsilon=args.target_epsilon,
                      noise_multiplier=args.noise_multiplier,
                      reproducible_noise_seed=args.reproducible_noise_seed,
                      participation=args.participation, on_nonfinite=args.on_nonfinite,
                      clients_per_round=args.clients_per_round,
                      population_sampling_rate=args.population_sampling_rate,
                      min_sep=args.min_sep, timer_hours=args.timer_hours,
                      runtime=args.runtime, audit_canaries=args.audit_canaries, **adaptive)
  with runtime.execution_context():
    task = toy_task.make_task(
        poison_client=[c for c in args.poison_clients.split(",") if c],
        **({} if args.num_clients is None else {"num_clients": args.num_clients}))
    result = program.run(task, config)
  print(json.dumps({"rounds_completed": result.rounds_completed, "stopped": result.stopped}),
        flush=True)
  return 0


def toy_config(root_dir, rounds, mechanism, **overrides):
  from dp_fl.training import registry  # pylint: disable=g-import-not-at-top
  values = dict(task="toy", root_dir=root_dir, rounds=rounds, clients_per_round=4,
                mechanism=mechanism, noise_multiplier=0.5, clip_norm=1.0,
                participation="min_sep_rounds", min_sep=3, eval_every=4, checkpoint_every=1,
                blt_buffers=2, seed=3, client_learning_rate=0.3, delta=1e-5)
  values.update(overrides)
  return registry.make_config(**values)


def calibrated_config(task, root_dir, mechanism, epsilon=8.0, rounds=6, **overrides):
  """`toy_config` with σ calibrated (`--calibrate_epsilon`) to `epsilon` for `task`."""
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  config = toy_config(str(root_dir), rounds, mechanism, **overrides)
  sigma = program.calibrate_noise_multiplier(config, epsilon,
                                             len(task.train_data.client_ids), task)
  return config.replace(noise_multiplier=sigma)


if __name__ == "__main__":
  sys.exit(main())
