"""Benchmark of one training round on the 4,050,748-parameter StackOverflow LSTM; prints JSON.

Measures, for 10 clients per round (the same clients and batches every time):
  * a TFF round (dp_fl's learning process: FedAvg, client SGD, server SGD with momentum)
    with no privacy, with BLT-DP-FTRL (d = 4) and with DP-SGD noise — the aggregator's
    share of a real training round (issue "TFF aggregators": BLT adds <= 3 %) — driven as
    dp_fl's training loop drives it (`ResidentProcess`: the state stays in TFF's worker) and,
    for comparison, by calling `process.next(state, data)` from Python;
  * a plain TensorFlow loop doing the same client updates (SGD over the same batches) and
    the averaging, in one process (issue "training program": TFF >= 0.7x its speed);
  * the time and size of a training checkpoint (dp_fl.training.checkpoints) of the BLT run.

Run: ``.venv/bin/python -m scripts.bench_training [--clients 10 --rounds 3
--sentences_per_client 16]`` (synthetic corpus, model at the paper's sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import numpy as np

from dp_fl import runtime


def _median_seconds(fn, rounds: int) -> tuple[float, list[float]]:
  fn()  # warm-up: traces, compiles, places
  times = []
  for _ in range(rounds):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times)), times


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--rounds", type=int, default=3, help="timed rounds per setting")
  parser.add_argument("--sentences_per_client", type=int, default=16)
  args = parser.parse_args(argv)
  runtime.configure_logging(0)
  runtime.install_signal_handlers()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from dp_fl.mechanisms import blt  # pylint: disable=g-import-not-at-top
  from dp_fl.mechanisms import catalog  # pylint: disable=g-import-not-at-top
  from dp_fl.training import checkpoints  # pylint: disable=g-import-not-at-top
  from dp_fl.training import config as config_lib  # pylint: disable=g-import-not-at-top
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  from dp_fl.training import resident  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import task as so_task  # pylint: disable=g-import-not-at-top

  settings = so_task.StackOverflowSettings(max_elements_per_client=args.sentences_per_client,
                                           eval_clients=10)
  task = so_task.make_task(settings)
  ids = list(task.train_data.client_ids[:args.clients])
  datasets = [task.train_data.create_tf_dataset_for_client(c) for c in ids]
  batches = [list(ds) for ds in datasets]
  report = {"clients": args.clients, "sentences_per_client": args.sentences_per_client,
            "batches_per_round": sum(len(b) for b in batches),
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "tff": {}}
  root = tempfile.mkdtemp(prefix="dp_fl_bench_training_")
  mechanisms = {"none": None, "dpsgd": catalog.DpSgdMechanism(),
                "blt": catalog.BltMechanism(blt.PUBLISHED_BLTS[400])}
  blt_state = blt_process = None
  with runtime.execution_context():
    for name, mechanism in mechanisms.items():
      config = config_lib.TrainingConfig(
          task=task.name, root_dir=os.path.join(root, name), rounds=100,
          clients_per_round=args.clients, mechanism=name, noise_multiplier=1.0,
          participation="uniform")
      process = program.build_learning_process(
          task, config, program.build_aggregator(config, mechanism, len(ids)))
      state = process.initialize()
      # dp_fl's training loop: the state stays in TFF's worker between rounds.
      resident_process = resident.ResidentProcess(process, state)
      seconds, times = _median_seconds(
          lambda: resident_process.commit(resident_process.next(datasets)), args.rounds)
      # Calling `process.next` from Python: the state crosses into and out of the worker.
      python_seconds, python_times = _median_seconds(
          lambda: process.next(state, datasets), args.rounds)
      report["tff"][name] = {"seconds_per_round": seconds, "times": times,
                             "python_driven_seconds_per_round": python_seconds,
                             "python_driven_times": python_times}
      if name == "blt":
        blt_state, blt_process = resident_process.state(), process
      resident_process.close()
    num_params = int(sum(np.prod(w.shape) for w in
                         blt_process.get_model_weights(blt_state).trainable))
    report["parameters"] = num_params
    manager = checkpoints.CheckpointManager(os.path.join(root, "ckpt"), keep=1)
    saves = [manager.save(r, tf.nest.flatten(blt_state), {"scheduler": b"x" * 1000}, {})
             for r in range(3)]
    start = time.perf_counter()
    manager.restore_latest()
    report["checkpoint"] = {"save_seconds": float(np.median([s["seconds"] for s in saves])),
                            "bytes": saves[-1]["bytes"],
                            "restore_seconds": time.perf_counter() - start,
                            "contents": "model, server momentum, BLT state (4 buffers)"}

  # The same client updates and averaging in plain TensorFlow.
  keras_model = task.keras_model_fn()
  loss_fn = task.loss_fn()
  optimizer = tf.keras.optimizers.SGD(0.5)
  global_weights = [tf.Variable(w) for w in keras_model.trainable_weights]

  @tf.function
  def client_step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, keras_model(x, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, keras_model.trainable_weights),
                                  keras_model.trainable_weights))

  def plain_round():
    total = [tf.zeros_like(w) for w in global_weights]
    for client_batches in batches:
      for w, g in zip(keras_model.trainable_weights, global_weights):
        w.assign(g)
      for x, y in client_batches:
        client_step(x, y)
      total = [t + (w - g) for t, w, g in zip(total, keras_model.trainable_weights,
                                               global_weights)]
    for g, t in zip(global_weights, total):
      g.assign_add(t / len(batches))

  seconds, times = _median_seconds(plain_round, args.rounds)
  report["plain_tf"] = {"seconds_per_round": seconds, "times": times}
  none_s = report["tff"]["none"]["seconds_per_round"]
  blt_s = report["tff"]["blt"]["seconds_per_round"]
  report["goals"] = {
      "tff_speed_relative_to_plain_tf": seconds / none_s,
      "tff_speed_goal": 0.7,
      "blt_overhead_percent": 100.0 * (blt_s / none_s - 1.0),
      "blt_overhead_goal_percent": 3.0,
  }
  print(json.dumps(report, indent=1))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
