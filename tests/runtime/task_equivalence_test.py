"""Both runtimes on the real tasks (small settings): StackOverflow and Reddit, a preset of each
TFF computation (tests/runtime/presets.py), each on one of the two tasks."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.execution import runtime
from dp_fl.execution import xla
from dp_fl.training import program
from dp_fl.training import registry
from tests.runtime import presets
from tasks.reddit import task as reddit_task
from tasks.stackoverflow import task as so_task

ROUNDS = 2


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
  root = tmp_path_factory.mktemp("tasks")
  stackoverflow = so_task.make_task(so_task.StackOverflowSettings(
      vocab_size=300, embedding_size=8, lstm_size=16, max_elements_per_client=8,
      batch_size=4, eval_clients=2, synthetic_clients=30,
      synthetic_cache_dir=str(root / "so")))
  reddit = reddit_task.make_task(reddit_task.RedditSettings(
      vocab_size=300, embedding_size=8, lstm_size=16, tokens_per_user=200, eval_users=2,
      synthetic_authors=30, synthetic_comments_per_author=5.0,
      synthetic_cache_dir=str(root / "reddit"), prepared_cache_dir=str(root / "prepared")))
  return {"stackoverflow": stackoverflow, "reddit": reddit}


def _leaves(value):
  return [np.asarray(x, np.float64) for x in tf.nest.flatten(value)]


def _cases():
  """Each computation on one real task, the two tasks taking turns (alphabetically): every
  computation meets a real LSTM model, both tasks' models meet half of them, and
  xla_runtime_test runs every computation on the toy task."""
  names = [name for name in presets.one_per_computation()
           if not registry.MECHANISMS[name].client_randomness]
  return [(name, ("stackoverflow", "reddit")[i % 2]) for i, name in enumerate(names)]


@pytest.mark.parametrize("mechanism,task_name", _cases())
def test_both_runtimes_agree_on_the_real_tasks(tasks, tmp_path, task_name, mechanism):
  task = tasks[task_name]
  ids = task.train_data.client_ids
  sampled = {"participation": "poisson", "population_sampling_rate": 0.2}
  config = registry.make_config(
      task=task.name, root_dir=str(tmp_path), rounds=4, clients_per_round=3,
      mechanism=mechanism, noise_multiplier=0.5, clip_norm=1.0, min_sep=1,
      reproducible_noise_seed=5,
      **(sampled if mechanism == "dpfedavg" else {"participation": "uniform"}))
  os.makedirs(tmp_path, exist_ok=True)
  mechanism_matrix = program.build_mechanism(config)
  process = program.build_learning_process(
      task, config, program.build_aggregator(config, mechanism_matrix, len(ids), 5))
  mapreduce = xla.MapReduceProcess(process)
  state, leaves = process.initialize(), mapreduce.initialize()
  for r in range(ROUNDS):
    cohort = [task.train_data.create_tf_dataset_for_client(c) for c in ids[3 * r:3 * r + 3]]
    expected, got = process.next(state, cohort), mapreduce.next(leaves, cohort)
    state, leaves = expected.state, got.state
    for a, b in zip(_leaves(expected.state), _leaves(mapreduce.state(got.state))):
      np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    for a, b in zip(_leaves(expected.metrics), _leaves(mapreduce.output(got.output))):
      np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
