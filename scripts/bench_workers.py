"""Benchmark: rounds/s of the StackOverflow LSTM with the clients on 1, 2 and 4 local TFF
workers (`--workers`, dp_fl/execution/remote_workers.py) next to the in-process and C++-worker
runtimes; prints JSON.

Every setting runs BLT-DP-FTRL (d = 4) rounds of `--clients` clients, each taking
`--local_batches` SGD steps on batches of 16 sentences, with the same data; rounds are timed
interleaved (`bench_training.interleaved_seconds`). The workers are `worker_binary` processes
on loopback started as `scripts/worker` starts them. On this 2-core machine 2 and 4 workers
share the same two cores, so the figure is the honest overhead of the remote path (the model
and the clients' data out, one folded accumulator back, per worker), not a speed-up; on hosts
with more cores, or on several hosts, the clients' work divides over the workers while the
server steps stay fixed (docs/BENCHMARKS.md).

  .venv/bin/python -m scripts.bench_workers [--clients 10 --rounds 4 --local_batches 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import tempfile

import numpy as np

from dp_fl.execution import runtime
from scripts import bench_training
from scripts import worker as worker_script


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _nbytes(type_spec) -> int:
  """Bytes of the tensors of a TFF type."""
  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff
  from tensorflow_federated.python.common_libs import structure
  # pylint: enable=g-import-not-at-top
  if isinstance(type_spec, tff.StructType):
    return sum(_nbytes(t) for t in structure.flatten(type_spec))
  return int(np.prod(type_spec.shape, dtype=np.int64)) * np.dtype(type_spec.dtype).itemsize


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--rounds", type=int, default=4, help="timed rounds per setting")
  parser.add_argument("--local_batches", type=int, default=4)
  parser.add_argument("--workers", default="1,2,4", help="worker counts to time")
  args = parser.parse_args(argv)
  runtime.configure_logging(0)
  runtime.install_signal_handlers()
  from dp_fl.mechanisms import blt  # pylint: disable=g-import-not-at-top
  from dp_fl.mechanisms import catalog  # pylint: disable=g-import-not-at-top
  from dp_fl.training import registry  # pylint: disable=g-import-not-at-top
  from dp_fl.execution import learners  # pylint: disable=g-import-not-at-top
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import task as so_task  # pylint: disable=g-import-not-at-top

  counts = [int(c) for c in args.workers.split(",") if c.strip()]
  task = so_task.make_task(so_task.StackOverflowSettings(max_elements_per_client=16,
                                                         eval_clients=10))
  ids = list(task.train_data.client_ids[:args.clients])
  datasets = [task.train_data.create_tf_dataset_for_client(c).repeat().take(args.local_batches)
              for c in ids]
  mechanism = catalog.BltMechanism(blt.PUBLISHED_BLTS[400])
  root = tempfile.mkdtemp(prefix="dp_fl_bench_workers_")
  binary = worker_script.worker_binary_path()
  started = []
  steps, learners_used = {}, []
  with runtime.execution_context():
    try:
      def learner_for(runtime_name, workers=None):
        config = registry.make_config(
            task=task.name, root_dir=os.path.join(root, runtime_name), rounds=100,
            clients_per_round=args.clients, mechanism="blt", noise_multiplier=1.0,
            participation="uniform", runtime=runtime_name, workers=workers)
        process = program.build_learning_process(
            task, config, program.build_aggregator(config, mechanism, len(ids)))
        learner = learners.runtime(config.runtime).learner(
            process, process.initialize(), 1, "cpu", workers=workers)
        learners_used.append(learner)
        return lambda: learner.commit(learner.next(datasets)[0])

      steps["tff_worker"] = learner_for("tff_worker")
      steps["xla"] = learner_for("xla")
      for count in counts:
        ports = [_free_port() for _ in range(count)]
        started += [worker_script.start_worker(binary, p, -1, tempfile.mkdtemp(dir=root))
                    for p in ports]
        steps[f"workers_{count}"] = learner_for(
            "workers", ",".join(f"localhost:{p}" for p in ports))
      times = bench_training.interleaved_seconds(steps, args.rounds)
    finally:  # Inside the context: the C++ worker's resident state is read back on close.
      for learner in learners_used:
        learner.close()
      for process in started:
        process.kill()
        process.wait()
  form = learners_used[-1].mapreduce.form
  report = {"clients": args.clients, "local_batches": args.local_batches,
            "mechanism": "blt (App. A b=400, d=4)", "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            # Per round and worker, besides the clients' data: the client input (model) out,
            # one folded accumulator back (not one update per client).
            "bytes_to_each_worker": _nbytes(form.work.type_signature.parameter[1]),
            "bytes_from_each_worker": _nbytes(form.zero.type_signature.result),
            "settings": {name: bench_training.timing(t) for name, t in times.items()}}
  base = float(np.median(times["xla"]))
  for name, t in times.items():
    report["settings"][name]["relative_to_xla"] = base / float(np.median(t))
  print(json.dumps(report, indent=1))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
