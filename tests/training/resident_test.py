"""ResidentProcess: the state stays in TFF's worker and the rounds are bitwise `process.next`."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dp_fl.execution import resident as resident_lib
from dp_fl.execution import runtime
from dp_fl.training import program
from dp_fl.training import registry
from tests.training import toy_task


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _process(tmp_path, mechanism: str):
  task = toy_task.make_task()
  config = registry.make_config(
      task=task.name, root_dir=str(tmp_path), rounds=20, clients_per_round=4,
      mechanism=mechanism, noise_multiplier=0.5, clip_norm=1.0, blt_buffers=2,
      participation="uniform", client_learning_rate=0.1, server_learning_rate=1.0, seed=3)
  aggregator = program.build_aggregator(config, program.build_mechanism(config),
                                        len(task.train_data.client_ids))
  return task, program.build_learning_process(task, config, aggregator)


def _cohorts(task, sizes):
  ids = task.train_data.client_ids
  return [[task.train_data.create_tf_dataset_for_client(ids[(3 * r + i) % len(ids)])
           for i in range(size)] for r, size in enumerate(sizes)]


def _flat(state):
  return [np.asarray(a) for a in tf.nest.flatten(state)]


def _assert_bitwise_equal(a, b):
  flat_a, flat_b = _flat(a), _flat(b)
  assert len(flat_a) == len(flat_b)
  for x, y in zip(flat_a, flat_b):
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("mechanism", ["blt", "none"])
def test_resident_rounds_equal_python_driven_rounds_bitwise(tmp_path, mechanism):
  task, process = _process(tmp_path, mechanism)
  cohorts = _cohorts(task, [4] * 5)
  state = process.initialize()
  expected_metrics = []
  for data in cohorts:
    output = process.next(state, data)
    state = output.state
    expected_metrics.append(output.metrics)

  resident = resident_lib.ResidentProcess(process, process.initialize())
  for data, metrics in zip(cohorts, expected_metrics):
    result = resident.next(data)
    tf.nest.map_structure(np.testing.assert_array_equal, result.metrics, metrics)
    resident.commit(result)
  # Written in once, read out once: nothing crossed in between.
  _assert_bitwise_equal(resident.state(), state)
  assert resident.transfers == 2
  resident.close()


def test_uncommitted_rounds_leave_the_state_unchanged(tmp_path):
  task, process = _process(tmp_path, "blt")
  cohorts = _cohorts(task, [4, 4, 4])
  state = process.initialize()
  state = process.next(state, cohorts[0]).state
  state = process.next(state, cohorts[2]).state

  resident = resident_lib.ResidentProcess(process, process.initialize())
  resident.commit(resident.next(cohorts[0]))
  resident.next(cohorts[1])  # Discarded: not committed.
  resident.commit(resident.next(cohorts[2]))
  _assert_bitwise_equal(resident.state(), state)


def test_cohort_size_changes_and_python_side_state_changes(tmp_path):
  task, process = _process(tmp_path, "blt")
  sizes = [4, 3, 3, 5, 4]
  cohorts = _cohorts(task, sizes)

  def halve_weights(state):
    weights = process.get_model_weights(state)
    halved = type(weights)(trainable=[np.asarray(w) / 2 for w in weights.trainable],
                           non_trainable=list(weights.non_trainable))
    return process.set_model_weights(state, halved)

  state = process.initialize()
  for r, data in enumerate(cohorts):
    state = process.next(state, data).state
    if r == 2:
      state = halve_weights(state)

  resident = resident_lib.ResidentProcess(process, process.initialize())
  for r, data in enumerate(cohorts):
    resident.commit(resident.next(data))
    if r == 2:
      resident.set_state(halve_weights(resident.state()))
  _assert_bitwise_equal(resident.state(), state)
  # Each change of cohort size moves the state to the worker's executor for that size.
  assert resident.transfers > 2


def test_a_result_from_another_executor_cannot_be_committed(tmp_path):
  task, process = _process(tmp_path, "none")
  cohorts = _cohorts(task, [4, 3])
  resident = resident_lib.ResidentProcess(process, process.initialize())
  stale = resident.next(cohorts[0])
  resident.commit(resident.next(cohorts[1]))
  with pytest.raises(ValueError, match="commit each round's result"):
    resident.commit(stale)


def test_needs_an_executor_backed_context(tmp_path):
  _, process = _process(tmp_path, "none")
  state = process.initialize()
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.context_stack import runtime_error_context  # pylint: disable=g-import-not-at-top
  with context_stack_impl.context_stack.install(runtime_error_context.RuntimeErrorContext()):
    with pytest.raises(RuntimeError, match="execution_context"):
      resident_lib.ResidentProcess(process, state)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
