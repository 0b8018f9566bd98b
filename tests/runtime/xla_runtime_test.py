"""The in-process MapReduceForm runtime against TFF's C++ worker, XLA, secure sums, devices."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl.execution import runtime
from dp_fl.execution import xla
from dp_fl.training import client_work
from dp_fl.training import program
from dp_fl.training import registry
from dp_fl.training import task as task_lib
from tests.runtime import presets
from tests.runtime import secure_sum_process
from tests.training import toy_program
from tests.training import toy_task

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUNDS = 3


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _preset_config(tmp_path, mechanism):
  os.makedirs(tmp_path, exist_ok=True)
  return presets.config(str(tmp_path), ROUNDS, mechanism)


def _process(task, config):
  mechanism = program.build_mechanism(config)
  aggregator = program.build_aggregator(config, mechanism, len(task.train_data.client_ids), 7,
                                        program.model_dimension(task))
  return program.build_learning_process(task, config, aggregator)


def _cohorts(task):
  ids = task.train_data.client_ids
  # Cohorts of different sizes (as Poisson sampling gives), one client twice over rounds.
  return [[task.train_data.create_tf_dataset_for_client(c) for c in cohort]
          for cohort in (ids[:4], ids[2:5], ids[1:7])]


def _leaves(value):
  return [np.asarray(x, np.float64) for x in tf.nest.flatten(value)]


PRESETS = presets.one_per_computation()


def test_the_presets_cover_every_entry_kind_and_recurrence():
  assert {"blt", "bandmf", "tree", "dpsgd", "dpfedavg", "cpsgd", "none", "clip"} <= set(PRESETS)
  kinds = {presets.computation_kind(name) for name in registry.MECHANISMS}
  assert {presets.computation_kind(name) for name in PRESETS} == kinds
  assert len(kinds) == len(PRESETS)


# cpSGD's clients draw their own noise shares (no two runs agree; tests/aggregators/cpsgd_test.py
# compares its runtimes without noise).
@pytest.mark.parametrize("mechanism", [
    name for name in PRESETS if not registry.MECHANISMS[name].client_randomness])
def test_every_preset_compiles_to_both_forms_and_agrees_with_the_cpp_worker(tmp_path,
                                                                          mechanism):
  task = toy_task.make_task()
  process = _process(task, _preset_config(tmp_path, mechanism))
  mapreduce = xla.MapReduceProcess(process)
  _check_forms(process, mapreduce.form)
  state = process.initialize()
  leaves = mapreduce.initialize()
  for a, b in zip(_leaves(state), _leaves(mapreduce.state(leaves))):
    np.testing.assert_array_equal(a, b)  # The initial state is bitwise the same.
  for cohort in _cohorts(task):
    expected = process.next(state, cohort)
    got = mapreduce.next(leaves, cohort)
    state, leaves = expected.state, got.state
    for a, b in zip(_leaves(expected.state), _leaves(mapreduce.state(got.state))):
      np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(_leaves(expected.metrics), _leaves(mapreduce.output(got.output))):
      np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_cpsgd_runs_in_process_with_its_secure_modular_sum(tmp_path):
  # cpSGD's clients draw their own shares, so no two runs agree bitwise; with 2^20 levels and
  # one Binomial trial per client its noise and quantization are below 1e-5 and the two
  # runtimes agree to that.
  task = toy_task.make_task()
  config = toy_program.toy_config(str(tmp_path), ROUNDS, "cpsgd", participation="uniform",
                                  cpsgd_levels=2 ** 20, cpsgd_trials=1)
  process = _process(task, config)
  mapreduce = xla.MapReduceProcess(process)
  state, leaves = process.initialize(), mapreduce.initialize()
  for cohort in _cohorts(task)[:2]:  # At most clients_per_round = 4 clients (the modulus).
    expected, got = process.next(state, cohort), mapreduce.next(leaves, cohort)
    state, leaves = expected.state, got.state
    for a, b in zip(_leaves(expected.state), _leaves(mapreduce.state(got.state))):
      np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mechanism,beta", [("ddgauss", 0.0), ("skellam", 0.0),
                                            ("ddgauss", math.exp(-0.5))])
def test_distributed_dp_runs_in_process_with_its_bitwidth_secure_sums(tmp_path, mechanism,
                                                                      beta):
  # TFF's DistributedDpSumFactory sums B-bit messages with federated_secure_sum_bitwidth (the
  # server reduces modulo 2^B). Its clients draw their own shares, so no two runs agree
  # bitwise; at B = 22 bits and z = 1e-3 the noise of the mean is z·c/m = 2.5e-4 per
  # coordinate (two runs differ by √2 × that a round): the in-process runtime agrees with
  # TFF's C++ worker to 5e-3 (a wrong decoding or a missing share would be off by O(1)).
  task = toy_task.make_task()
  config = toy_program.toy_config(str(tmp_path), ROUNDS, mechanism, participation="uniform",
                                  noise_multiplier=1e-3, ddp_bits=22, ddp_beta=beta)
  process = _process(task, config)  # β > 0: conditional rounding's redraw loop runs too.
  mapreduce = xla.MapReduceProcess(process)
  # The B-bit messages (bitwidth 22: each value <= 2^22 − 1) and TFF's one-bit counts.
  bounds = [int(np.max(b)) for b in xla.secure_bounds(mapreduce.form) if b is not None]
  assert sorted(set(bounds)) == [1, 2 ** 22 - 1], bounds
  state, leaves = process.initialize(), mapreduce.initialize()
  for cohort in _cohorts(task)[:2]:  # At most clients_per_round = 4 clients (asserted).
    expected, got = process.next(state, cohort), mapreduce.next(leaves, cohort)
    state, leaves = expected.state, got.state
    pairs = list(zip(tf.nest.flatten(expected.state),
                     tf.nest.flatten(mapreduce.state(got.state))))
    strings = [(a, b) for a, b in pairs if np.asarray(a).dtype.kind in "OSU"]
    assert len(strings) == 2 and all(a == b for a, b in strings)  # TFF's dp_event names.
    for a, b in pairs:  # Floats: weights, momentum, the DP state. (The int64 rotation
      # seed is TFF's clock at each process's initialization.)
      if np.asarray(a).dtype.kind == "f":
        np.testing.assert_allclose(np.asarray(b, np.float64), np.asarray(a, np.float64),
                                   rtol=0, atol=5e-3)
  too_many = _cohorts(task)[2]  # 6 clients: more than the m = 4 the accounting allows.
  with pytest.raises(Exception, match="more clients than the 4"):
    mapreduce.next(leaves, too_many)


def test_parallel_clients_give_bitwise_the_same_rounds(tmp_path):
  task = toy_task.make_task()
  process = _process(task, _preset_config(tmp_path, "blt"))
  serial = xla.MapReduceProcess(process)
  parallel = xla.MapReduceProcess(process, parallel_clients=3)
  a, b = serial.initialize(), parallel.initialize()
  for cohort in _cohorts(task):
    a, b = serial.next(a, cohort).state, parallel.next(b, cohort).state
  for x, y in zip(a, b):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  with pytest.raises(ValueError, match="parallel_clients"):
    xla.MapReduceProcess(process, parallel_clients=0)


def _check_forms(process, mapreduce_form=None):
  """The process compiles to MapReduceForm (the in-process runtime's) and to
  DistributeAggregateForm (TFF's other production form)."""
  mrf = mapreduce_form or tff.backends.mapreduce.get_map_reduce_form_for_computation(
      process.next)
  daf = tff.backends.mapreduce.get_distribute_aggregate_form_for_computation(process.next)
  assert isinstance(mrf, tff.backends.mapreduce.MapReduceForm)
  assert isinstance(daf, tff.backends.mapreduce.DistributeAggregateForm)


# The presets checked against the C++ worker above compile there; these (their clients draw
# private randomness) are compiled here.
@pytest.mark.parametrize("mechanism", [
    name for name in PRESETS if registry.MECHANISMS[name].client_randomness])
def test_every_other_preset_compiles_to_both_forms(tmp_path, mechanism):
  _check_forms(_process(toy_task.make_task(), _preset_config(tmp_path, mechanism)))


def _unique_task():
  """The toy task with an op XLA cannot compile (a string op: AsString)."""

  class StringOp(tf.keras.layers.Layer):

    def call(self, x):
      length = tf.strings.length(tf.strings.as_string(x))
      return x + 0.0 * tf.cast(length, x.dtype)

  def keras_model():
    return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)), StringOp(),
                                tf.keras.layers.Dense(3)])

  base = toy_task.make_task()
  return task_lib.Task(**{**base.__dict__, "keras_model_fn": keras_model})


def _work_round(task, jit_compile, runtime_kind):
  element_spec = task.train_data.create_tf_dataset_for_client(
      task.train_data.client_ids[0]).element_spec
  tf.keras.utils.set_random_seed(1)  # The same initial model for every variant.
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      client_work.model_fn(task, element_spec, jit_compile=jit_compile),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  cohort = _cohorts(task)[0]
  if runtime_kind == "xla":
    mapreduce = xla.MapReduceProcess(process)
    return mapreduce.output(mapreduce.next(mapreduce.initialize(), cohort).output)
  return process.next(process.initialize(), cohort).metrics


def test_xla_really_compiles_the_client_step():
  task = _unique_task()
  # Without XLA both runtimes run the model; the C++ worker even ignores jit_compile.
  assert _work_round(task, False, "xla") is not None
  assert _work_round(task, True, "tff_worker") is not None
  # In this process TensorFlow compiles the jit_compile step with XLA, which refuses AsString.
  with pytest.raises(tf.errors.InvalidArgumentError, match="unsupported operations"):
    _work_round(task, True, "xla")


def _lstm_task():
  """The toy task with a recurrent model (its 4 features read as a sequence of length 4)."""

  def keras_model():
    return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                                tf.keras.layers.Reshape((4, 1)), tf.keras.layers.LSTM(5),
                                tf.keras.layers.Dense(3)])

  base = toy_task.make_task()
  return task_lib.Task(**{**base.__dict__, "keras_model_fn": keras_model})


@pytest.mark.parametrize("make_task", [toy_task.make_task, _lstm_task], ids=["dense", "lstm"])
def test_jit_compiled_training_matches_the_plain_graph(make_task):
  # The LSTM needs its while loop unrolled under XLA (client_work._unroll_recurrent_layers).
  task = make_task()
  plain = _work_round(task, False, "xla")
  compiled = _work_round(task, True, "xla")
  for a, b in zip(_leaves(plain), _leaves(compiled)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_secure_sums_have_their_bounds_and_modulus():
  process = secure_sum_process.secure_sum_process()
  mapreduce = xla.MapReduceProcess(process)

  def sums(values):
    result = mapreduce.next(mapreduce.initialize(), secure_sum_process.datasets(values))
    return {k: int(v) for k, v in mapreduce.output(result.output).items()}

  assert sums([3, 5, 4]) == {"bits": 12, "capped": 12, "modular": 5, "plain": 12}
  assert sums([]) == {"bits": 0, "capped": 0, "modular": 0, "plain": 0}  # An empty round.
  with pytest.raises(ValueError, match="bitwidth 3"):  # 8 > 2³ − 1.
    mapreduce.next(mapreduce.initialize(), secure_sum_process.datasets([8, 1]))
  with pytest.raises(ValueError, match="max_input"):  # 6 > 5 (and < 2³).
    mapreduce.next(mapreduce.initialize(), secure_sum_process.datasets([6, 1]))


def test_a_partial_aggregate_carries_sums_and_one_bit_not_maxima():
  # The server needs the sums and whether some value broke its bound; the elementwise maxima
  # it once received would reveal more (a worker with one client: that client's message).
  process = secure_sum_process.secure_sum_process()
  mapreduce = xla.MapReduceProcess(process)
  client_input = mapreduce.prepare(mapreduce.initialize())
  fold = mapreduce._local_partial  # pylint: disable=protected-access
  partial = fold(secure_sum_process.datasets([3, 5, 4]), client_input)
  assert tuple(vars(partial)) == ("accumulator", "secure_sums", "out_of_bounds")
  assert [int(x) for x in partial.secure_sums] == [12, 12, 12]
  assert partial.out_of_bounds.dtype == tf.bool and partial.out_of_bounds.shape == ()
  assert not bool(partial.out_of_bounds)
  broken = fold(secure_sum_process.datasets([3, 8]), client_input)
  assert bool(broken.out_of_bounds)


def test_device_selection_without_an_accelerator():
  assert xla.select_device("auto").endswith("CPU:0")
  assert xla.select_device("cpu").endswith("CPU:0")
  with pytest.raises(ValueError, match="--device=gpu: TensorFlow sees no GPU"):
    xla.select_device("gpu")
  with pytest.raises(ValueError, match="`device` must be one of"):
    xla.select_device("cuda")


def test_state_lives_on_the_chosen_device():
  # Logical devices must be configured before TensorFlow starts: a fresh interpreter.
  script = textwrap.dedent("""
      import tensorflow as tf
      cpu = tf.config.list_physical_devices("CPU")[0]
      tf.config.set_logical_device_configuration(
          cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
      from dp_fl.execution import runtime, xla
      from tests.training import toy_task
      import tensorflow_federated as tff
      from dp_fl.training import client_work
      task = toy_task.make_task()
      spec = task.train_data.create_tf_dataset_for_client(
          task.train_data.client_ids[0]).element_spec
      process = tff.learning.algorithms.build_unweighted_fed_avg(
          client_work.model_fn(task, spec),
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
          server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
      device = tf.config.list_logical_devices("CPU")[1].name
      mapreduce = xla.MapReduceProcess(process, device)
      leaves = mapreduce.initialize()
      data = [task.train_data.create_tf_dataset_for_client(c)
              for c in task.train_data.client_ids[:2]]
      leaves = mapreduce.next(leaves, data).state
      print(sorted({leaf.device.rsplit("/", 1)[-1] for leaf in leaves}))
      """)
  env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  result = subprocess.run([sys.executable, "-c", script], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().splitlines()[-1] == "['device:CPU:1']"


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
