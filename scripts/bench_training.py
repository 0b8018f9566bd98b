"""Benchmark of one training round on the 4,050,748-parameter StackOverflow LSTM; prints JSON.

Measures, for 10 clients per round (the same clients and batches every time):
  * a TFF round (dp_fl's learning process: FedAvg, client SGD, server SGD with momentum)
    with no privacy, with BLT-DP-FTRL (d = 4) and with DP-SGD noise — the aggregator's
    share of a real training round (issue "TFF aggregators": BLT adds <= 3 %) — driven as
    dp_fl's training loop drives it (`ResidentProcess`: the state stays in TFF's worker) and,
    for comparison, by calling `process.next(state, data)` from Python;
  * a plain TensorFlow loop doing the same client updates (SGD over the same batches) and
    the averaging, in one process (issue "training program": TFF >= 0.7x its speed);
  * the same rounds on the in-process runtime (`--runtime=xla`: MapReduceForm run by
    TensorFlow in this process, dp_fl/execution/xla.py), without and with the XLA-compiled
    client step (`--jit_compile`), against the C++ worker (issue "XLA runtime": >= 1.5x its
    round speed, >= 1.0x the plain-TF loop);
  * the time and size of a training checkpoint (dp_fl.training.checkpoints) of the BLT run;
  * the peak resident memory of the process (all settings together).

Run: ``.venv/bin/python -m scripts.bench_training [--clients 10 --rounds 8
--local_batches 16]`` (synthetic corpus, model at the paper's sizes). Each client takes
`--local_batches` SGD steps on batches of 16 sentences: 16 is the work of a paper 004
StackOverflow client (up to 256 sentences, batch 16, one epoch), 1 the worst case for any
per-round overhead. Rounds of all settings are timed interleaved (see `interleaved_seconds`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time

import numpy as np

from dp_fl.execution import runtime


def _seconds(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def interleaved_seconds(steps: dict, rounds: int) -> dict[str, list[float]]:
  """Times `rounds` calls of every step, interleaved (the order rotates each round).

  On a shared 2-core machine a round's time drifts by ±30 % over minutes; timing the settings
  in turn, round by round, exposes them to the same drift, and the per-round ratios between
  settings are far steadier than ratios of separately timed medians.
  """
  for step in steps.values():
    step()  # warm-up: traces, compiles, places
  times = {name: [] for name in steps}
  names = list(steps)
  for r in range(rounds):
    for name in names[r % len(names):] + names[:r % len(names)]:
      times[name].append(_seconds(steps[name]))
  return times


def timing(times: list[float]) -> dict:
  """Median seconds and rounds per second of timed rounds, with the rounds' times."""
  median = float(np.median(times))
  return {"seconds_per_round": median, "rounds_per_second": 1.0 / median, "times": times}


def _ratio_summary(numerator: list[float], denominator: list[float]) -> dict[str, float]:
  ratios = np.array(numerator) / np.array(denominator)
  return {"median": float(np.median(ratios)), "min": float(ratios.min()),
          "max": float(ratios.max())}


def parse_args(argv=None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--clients", type=int, default=10)
  parser.add_argument("--rounds", type=int, default=8,
                      help="timed rounds per setting (interleaved)")
  parser.add_argument("--python_rounds", type=int, default=2,
                      help="timed rounds driven by process.next from Python, per setting (0: none)")
  parser.add_argument("--sentences_per_client", type=int, default=16,
                      help="distinct sentences per client (one batch of 16)")
  parser.add_argument("--local_batches", type=int, default=16,
                      help="local SGD steps per client; 16 = paper 004's StackOverflow clients "
                           "(up to 256 sentences, batch 16); 1 = the worst case for overheads")
  parser.add_argument("--device", default="auto", help="device of the in-process runtime")
  parser.add_argument("--xla_jit", action="store_true",
                      help="also time the in-process runtime with the XLA-compiled client step "
                           "(on this CPU: 30 s of compilation, then slower than the plain graph)")
  return parser.parse_args(argv)


def main(argv=None) -> int:
  args = parse_args(argv)
  runtime.configure_logging(0)
  runtime.install_signal_handlers()
  from dp_fl.mechanisms import blt  # pylint: disable=g-import-not-at-top
  from dp_fl.mechanisms import catalog  # pylint: disable=g-import-not-at-top
  from tasks.stackoverflow import task as so_task  # pylint: disable=g-import-not-at-top

  settings = so_task.StackOverflowSettings(max_elements_per_client=args.sentences_per_client,
                                           eval_clients=10)
  task = so_task.make_task(settings)
  ids = list(task.train_data.client_ids[:args.clients])
  # Every client runs exactly --local_batches steps (its batches, repeated as needed).
  datasets = [task.train_data.create_tf_dataset_for_client(c).repeat().take(args.local_batches)
              for c in ids]
  batches = [list(ds) for ds in datasets]
  report = {"clients": args.clients, "sentences_per_client": args.sentences_per_client,
            "local_batches": args.local_batches,
            "batches_per_round": sum(len(b) for b in batches),
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "tff": {}}
  root = tempfile.mkdtemp(prefix="dp_fl_bench_training_")
  mechanisms = {"none": None, "dpsgd": catalog.DpSgdMechanism(),
                "blt": catalog.BltMechanism(blt.PUBLISHED_BLTS[400])}
  with runtime.execution_context():
    processes, residents = {}, {}
    for name, mechanism in mechanisms.items():
      processes[name] = _learning_process(task, args, root, name, mechanism, len(ids))
      # dp_fl's training loop: the state stays in TFF's worker between rounds.
      residents[name] = _resident(processes[name])
    steps = {name: _resident_round(residents[name], datasets) for name in mechanisms}
    steps.update(_xla_steps(task, args, root, mechanisms, len(ids), datasets))
    steps["plain_tf"] = _plain_tf_round(task, batches)
    times = interleaved_seconds(steps, args.rounds)
    for name in mechanisms:
      report["tff"][name] = timing(times[name])
      if args.python_rounds > 0:
        report["tff"][name].update(_python_driven(processes[name], residents[name], datasets,
                                                  args.python_rounds))
    report["plain_tf"] = timing(times["plain_tf"])
    blt_process, blt_state = processes["blt"], residents["blt"].state()
    for resident_process in residents.values():
      resident_process.close()
    num_params = int(sum(np.prod(w.shape) for w in
                         blt_process.get_model_weights(blt_state).trainable))
    report["parameters"] = num_params
    report["checkpoint"] = _checkpoint(root, blt_state)
  report["xla_runtime"] = _xla_report(times)
  report["peak_memory_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  # The largest finished child: TFF's C++ workers (closed above) hold the worker's rounds.
  report["peak_memory_worker_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
  report["goals"] = _goals(times)
  print(json.dumps(report, indent=1))
  return 0


def _learning_process(task, args, root: str, name: str, mechanism, num_clients: int,
                      **runtime_settings):
  """dp_fl's learning process for `mechanism` (σ = 1, uniform participation); on the C++
  worker unless `runtime_settings` say otherwise (runtime="xla", jit_compile)."""
  from dp_fl.training import registry  # pylint: disable=g-import-not-at-top
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  config = registry.make_config(
      task=task.name, root_dir=os.path.join(root, name), rounds=100,
      clients_per_round=args.clients, mechanism=name, noise_multiplier=1.0,
      participation="uniform", **runtime_settings)
  return program.build_learning_process(
      task, config, program.build_aggregator(config, mechanism, num_clients))


def _resident(process):
  from dp_fl.execution import resident  # pylint: disable=g-import-not-at-top
  return resident.ResidentProcess(process, process.initialize())


def _resident_round(resident_process, datasets):
  return lambda: resident_process.commit(resident_process.next(datasets))


def _xla_steps(task, args, root: str, mechanisms, num_clients: int, datasets) -> dict:
  """A round of the in-process runtime (and of its XLA client step) without noise and with
  BLT noise, as `interleaved_seconds` steps named "<mechanism>_xla[_jit]"."""
  from dp_fl.execution import learners  # pylint: disable=g-import-not-at-top

  def learner_round(learner):
    return lambda: learner.commit(learner.next(datasets)[0])

  steps = {}
  for name in ("none", "blt"):  # The in-process runtime (and its XLA client step).
    for jit in (False, True) if args.xla_jit else (False,):
      process = _learning_process(task, args, root, name, mechanisms[name], num_clients,
                                  runtime="xla", jit_compile=jit)
      learner = learners.XlaLearner(process, process.initialize(), 1, args.device)
      steps[f"{name}_xla{'_jit' if jit else ''}"] = learner_round(learner)
  return steps


def _python_driven(process, resident_process, datasets, rounds: int) -> dict:
  """Rounds driven by calling `process.next(state, data)` from Python instead: the state
  crosses into and out of the worker every round."""
  state = resident_process.state()
  python_times = interleaved_seconds(
      {"python": lambda: process.next(state, datasets)}, rounds)["python"]
  return {"python_driven_seconds_per_round": float(np.median(python_times)),
          "python_driven_times": python_times}


def _checkpoint(root: str, blt_state) -> dict:
  """Median save time, size and restore time of a training checkpoint of the BLT run."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from dp_fl.training import checkpoints  # pylint: disable=g-import-not-at-top
  manager = checkpoints.CheckpointManager(os.path.join(root, "ckpt"), keep=1)
  saves = [manager.save(r, tf.nest.flatten(blt_state), {"scheduler": b"x" * 1000}, {})
           for r in range(3)]
  start = time.perf_counter()
  manager.restore_latest()
  return {"save_seconds": float(np.median([s["seconds"] for s in saves])),
          "bytes": saves[-1]["bytes"],
          "restore_seconds": time.perf_counter() - start,
          "contents": "model, server momentum, BLT state (4 buffers)"}


def _xla_report(times: dict[str, list[float]]) -> dict:
  """Each in-process setting: its timing and its speed against the C++ worker and plain TF."""
  xla_speed = {name: _ratio_summary(times[name], times[name.split("_xla")[0]])
               for name in times if "_xla" in name}
  return {
      name: {**timing(times[name]),
             "speed_relative_to_cpp_worker": 1.0 / xla_speed[name]["median"],
             "speed_relative_to_plain_tf": float(np.median(
                 np.array(times["plain_tf"]) / np.array(times[name])))}
      for name in xla_speed}


def _goals(times: dict[str, list[float]]) -> dict:
  """The issues' goals beside the measured speeds and overheads (per-round ratios)."""
  speed = _ratio_summary(times["plain_tf"], times["none"])
  blt_ratio = _ratio_summary(times["blt"], times["none"])
  dpsgd_ratio = _ratio_summary(times["dpsgd"], times["none"])
  return {
      "xla_speed_relative_to_cpp_worker_goal": 1.5,
      "xla_speed_relative_to_plain_tf_goal": 1.0,
      "tff_speed_relative_to_plain_tf": speed["median"],
      "tff_speed_relative_to_plain_tf_range": [speed["min"], speed["max"]],
      "tff_speed_goal": 0.7,
      "blt_overhead_percent": 100.0 * (blt_ratio["median"] - 1.0),
      "blt_overhead_percent_range": [100.0 * (blt_ratio["min"] - 1.0),
                                     100.0 * (blt_ratio["max"] - 1.0)],
      "blt_overhead_seconds": float(np.median(np.array(times["blt"]) -
                                              np.array(times["none"]))),
      "dpsgd_overhead_percent": 100.0 * (dpsgd_ratio["median"] - 1.0),
      "blt_overhead_goal_percent": 3.0,
  }


def _plain_tf_round(task, batches):
  """One round of the same client updates (SGD over the same batches) and averaging in TF."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
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

  return plain_round


if __name__ == "__main__":
  raise SystemExit(main())
