"""Reliability of a training run's lifecycle (issue #18): validation before anything is
written, one process per run directory, a checkpoint on every error exit, explicit empty
rounds, no duplicated rows, errors that name the flag, distinct exit codes.

Each case asserts the exit code (or exception), that the message names the right flag or
file and its value, and that nothing in the run directory was lost or duplicated.
"""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from dp_fl import exits
from dp_fl import writers
from dp_fl.execution import runtime
from dp_fl.training import checkpoints as checkpoints_lib
from dp_fl.training import cli
from dp_fl.training import program
from dp_fl.training import run_lock
from dp_fl.training import task as task_lib
from tests.training import toy_program
from tests.training import toy_task

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_QUIET = io.StringIO()


def _run(task, config, stream=_QUIET):
  """program.run in its own execution context (a binary's run, as `_binary` makes, ends the
  TFF workers of every context: contexts do not nest)."""
  with runtime.execution_context():
    return program.run(task, config, progress_stream=stream)


def _config(root, rounds=4, mechanism="blt", **overrides):
  values = dict(clients_per_round=2, checkpoint_every=100, eval_every=100)
  values.update(overrides)
  return toy_program.toy_config(str(root), rounds, mechanism, **values)


def _listing(root) -> list[str]:
  return sorted(os.path.relpath(os.path.join(d, f), root)
                for d, _, names in os.walk(root) for f in names)


def _rows(root, name="train") -> list[int]:
  path = os.path.join(root, "metrics", f"{name}.csv")
  return [int(r["round"]) for r in writers.read_csv(path)] if os.path.exists(path) else []


def _binary(config_or_error, task=None, **args):
  """cli.run_task_binary on the toy task: (exit code, stderr)."""
  namespace = argparse.Namespace(calibrate_epsilon=None, format="json", debug=False,
                                 memory_budget_gb=None, time_budget_hours=None,
                                 preset="toy")
  for key, value in args.items():
    setattr(namespace, key, value)

  def settings_and_config(_):
    if isinstance(config_or_error, Exception):
      raise config_or_error
    return None, config_or_error

  err = io.StringIO()
  old = sys.stderr
  sys.stderr = err
  try:
    code = cli.run_task_binary(namespace, settings_and_config,
                               lambda _: task or toy_task.make_task(),
                               {"toy": cli.Preset({}, {})})
  finally:
    sys.stderr = old
  return code, err.getvalue()


# ---------------------------------------------------------------------------------------
# Class 3: a failed run must not poison its run directory.


def test_a_run_refused_by_validation_writes_nothing_and_the_corrected_rerun_trains(tmp_path):
  too_many = _config(tmp_path, clients_per_round=toy_task.NUM_CLIENTS + 1)
  with pytest.raises(ValueError, match=r"--clients_per_round=\d+ exceeds"):
    _run(toy_task.make_task(), too_many)
  assert not {"config.json", "mechanism.json"} & set(_listing(tmp_path))
  result = _run(toy_task.make_task(), _config(tmp_path))
  assert result.stopped == "completed" and _rows(tmp_path) == [1, 2, 3, 4]


def test_calibration_writes_no_mechanism_file(tmp_path):
  config = _config(tmp_path, rounds=6)
  with runtime.execution_context():
    sigma = program.calibrate_noise_multiplier(config, 20.0)
  assert sigma > 0
  assert not os.path.exists(os.path.join(tmp_path, "mechanism.json"))


def test_a_stray_mechanism_file_without_config_is_refused_naming_it(tmp_path):
  config = _config(tmp_path)
  _run(toy_task.make_task(), config)
  os.remove(os.path.join(tmp_path, "config.json"))
  shutil.rmtree(os.path.join(tmp_path, "checkpoints"))
  os.remove(os.path.join(tmp_path, "metrics", "train.csv"))
  code, err = _binary(_config(tmp_path, min_sep=2))
  assert code == exits.BAD_INPUT
  assert "mechanism.json exists but config.json and checkpoints do not" in err
  assert str(tmp_path) in err


# ---------------------------------------------------------------------------------------
# Class 4: one process per run directory.


def test_a_second_process_on_a_held_run_directory_gets_busy_naming_the_holder(tmp_path):
  os.makedirs(tmp_path, exist_ok=True)
  with run_lock.RunDirectoryLock(str(tmp_path)):
    code, err = _binary(_config(tmp_path))
  assert code == exits.BUSY
  assert f"pid {os.getpid()}" in err and "--root_dir" in err
  assert not os.path.exists(os.path.join(tmp_path, "config.json"))
  assert _rows(tmp_path) == []


def test_the_lock_is_released_after_a_run_and_after_a_failed_one(tmp_path):
  with pytest.raises(ValueError):
    _run(toy_task.make_task(), _config(tmp_path, clients_per_round=99))
  _run(toy_task.make_task(), _config(tmp_path, rounds=2))
  with run_lock.RunDirectoryLock(str(tmp_path)):
    pass


def test_the_lock_of_a_killed_process_is_free_at_once(tmp_path):
  code = ("import sys, time; from dp_fl.training import run_lock; "
          "lock = run_lock.RunDirectoryLock(sys.argv[1]); lock.acquire(); "
          "print('held', flush=True); time.sleep(60)")
  proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=_ROOT,
                          env=dict(os.environ, PYTHONPATH=_ROOT), stdout=subprocess.PIPE,
                          text=True)
  assert proc.stdout.readline().strip() == "held"
  with pytest.raises(exits.BusyError, match=f"pid {proc.pid}"):
    run_lock.RunDirectoryLock(str(tmp_path)).acquire()
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=30)
  with run_lock.RunDirectoryLock(str(tmp_path)):
    pass


# ---------------------------------------------------------------------------------------
# Class 6: no error exit loses committed rounds.


class _FailingClientData(toy_task.ToyClientData):
  """Toy clients whose datasets fail to build from the `fail_after`-th request on."""

  def __init__(self, fail_after: int, error: BaseException, **kwargs):
    super().__init__(toy_task.NUM_CLIENTS, **kwargs)
    self.requests = 0
    self.fail_after = fail_after
    self.error = error

  def create_tf_dataset_for_client(self, client_id):
    self.requests += 1
    if self.requests > self.fail_after:
      raise self.error
    return super().create_tf_dataset_for_client(client_id)


def _failing_task(fail_after, error):
  task = toy_task.make_task()
  return task_lib.Task(**{**task.__dict__, "train_data": _FailingClientData(fail_after, error)})


@pytest.mark.parametrize("error,code", [
    (RuntimeError("storage went away"), exits.FAILED),
    (OSError(errno.EIO, "Input/output error", "/data/so/client_17.db"), exits.ENVIRONMENT),
    (ValueError("client 'c17' record 3: feature 'tokens' is int64, expected bytes"),
     exits.BAD_INPUT),
])
def test_an_error_mid_run_checkpoints_the_last_committed_round_and_the_rerun_resumes(
    tmp_path, error, code):
  config = _config(tmp_path, rounds=6)
  exit_code, err = _binary(config, task=_failing_task(3 * config.clients_per_round, error))
  assert exit_code == code
  assert str(error).split(":")[0] in err or os.strerror(errno.EIO) in err
  manager = checkpoints_lib.CheckpointManager(os.path.join(tmp_path, "checkpoints"))
  committed = _rows(tmp_path)
  assert committed and committed == list(range(1, len(committed) + 1))
  assert manager.rounds() == [len(committed)]  # checkpoint_every=100: written on the way out.
  result = _run(toy_task.make_task(), config)
  assert result.resumed_from == len(committed) and result.stopped == "completed"
  assert _rows(tmp_path) == [1, 2, 3, 4, 5, 6]


def test_an_internal_error_prints_no_traceback_unless_debug(tmp_path):
  config = _config(tmp_path, rounds=3)
  code, err = _binary(config, task=_failing_task(2, RuntimeError("boom")))
  assert code == exits.FAILED and "internal error: RuntimeError: boom" in err
  assert "Traceback" not in err and "--debug" in err
  code, err = _binary(config, task=_failing_task(0, RuntimeError("boom")), debug=True)
  assert code == exits.FAILED and "Traceback" in err


def test_disk_full_while_checkpointing_is_an_environment_error_and_keeps_old_checkpoints(
    tmp_path, monkeypatch):
  config = _config(tmp_path, rounds=4, checkpoint_every=2)
  original = checkpoints_lib.CheckpointManager.save

  def save(self, round_number, *args, **kwargs):
    if round_number >= 4:
      raise OSError(errno.ENOSPC, "No space left on device",
                    os.path.join(self.directory, f"ckpt-{round_number}"))
    return original(self, round_number, *args, **kwargs)

  monkeypatch.setattr(checkpoints_lib.CheckpointManager, "save", save)
  code, err = _binary(config)
  assert code == exits.ENVIRONMENT
  assert "No space left on device" in err and "ckpt-4" in err and "free space" in err
  manager = checkpoints_lib.CheckpointManager(os.path.join(tmp_path, "checkpoints"))
  assert manager.restore_latest().round == 2


def test_a_failed_dataset_build_leaves_no_pending_selection(tmp_path):
  from dp_fl.participation import tff_adapter  # pylint: disable=g-import-not-at-top
  config = _config(tmp_path)
  scheduler = program.build_scheduler(config, toy_task.NUM_CLIENTS, seed=1)
  data = _FailingClientData(0, ValueError("bad record"))
  participation = tff_adapter.TffParticipation(scheduler, data)
  with pytest.raises(ValueError, match="bad record"):
    participation.select_round()
  data.fail_after = 10 ** 6
  participation.select_round()  # No "neither committed, discarded nor withdrawn".


# ---------------------------------------------------------------------------------------
# Class 8: nothing silently retrained, duplicated or inconsistent.


def test_rerunning_a_completed_run_duplicates_no_row(tmp_path):
  config = _config(tmp_path, rounds=3, eval_every=3, checkpoint_every=1)
  _run(toy_task.make_task(), config)
  before = {name: _rows(tmp_path, name) for name in ("train", "eval", "privacy")}
  _run(toy_task.make_task(), config)
  after = {name: _rows(tmp_path, name) for name in ("train", "eval", "privacy")}
  assert after == before and before["eval"] == [3] and before["train"] == [1, 2, 3]


@pytest.mark.parametrize("damage", ["manifests", "checkpoints"])
def test_a_run_whose_checkpoints_were_lost_is_not_silently_retrained(tmp_path, damage):
  config = _config(tmp_path, rounds=3, checkpoint_every=1)
  _run(toy_task.make_task(), config)
  ckpt_dir = os.path.join(tmp_path, "checkpoints")
  if damage == "manifests":
    for name in os.listdir(ckpt_dir):
      for path in (os.path.join(ckpt_dir, name, "MANIFEST.json"),):
        if os.path.exists(path):
          os.remove(path)
  else:
    shutil.rmtree(ckpt_dir)
  train_csv = open(os.path.join(tmp_path, "metrics", "train.csv"), encoding="utf-8").read()
  code, err = _binary(config)
  assert code == exits.BAD_INPUT
  assert "no usable checkpoint" in err and "train.csv has 3 trained rounds" in err
  assert open(os.path.join(tmp_path, "metrics", "train.csv"),
              encoding="utf-8").read() == train_csv


def test_data_quality_is_written_and_announced(tmp_path):
  task = toy_task.make_task()
  task = task_lib.Task(**{**task.__dict__, "data_quality": lambda: {
      "skipped": 2, "by_reason": {"undecodable_utf8": 2}}})
  stream = io.StringIO()
  _run(task, _config(tmp_path, rounds=2), stream)
  with open(os.path.join(tmp_path, "data_quality.json"), encoding="utf-8") as f:
    assert json.load(f)["by_reason"] == {"undecodable_utf8": 2}
  assert "2 bad records or lines skipped" in stream.getvalue()


# ---------------------------------------------------------------------------------------
# Class 2 (training flags), 9 (exit codes) and 10 (errors that name the right thing).


@pytest.mark.parametrize("field,value", [
    ("noise_multiplier", 1e-300), ("noise_multiplier", 1e300), ("noise_multiplier", 1e-5),
    ("clip_norm", 1e300), ("clip_norm", 1e-30)])
def test_numeric_extremes_are_refused_before_training_naming_the_flag(tmp_path, field, value):
  parser = argparse.ArgumentParser()
  cli.add_training_arguments(parser)
  args = parser.parse_args([f"--{field}", repr(value)])
  with pytest.raises(ValueError) as raised:
    cli.training_config(args, task="toy", defaults={"root_dir": str(tmp_path), "rounds": 4,
                                                    "clients_per_round": 2})
  assert f"`--{field}` must be a number in [" in str(raised.value)
  assert f"got {value!r}" in str(raised.value)
  assert not os.listdir(tmp_path)


def test_an_error_in_a_preset_value_says_it_came_from_the_preset():
  from tasks.stackoverflow import train  # pylint: disable=g-import-not-at-top
  args = train.build_parser().parse_args(["--rounds", "4"])
  with pytest.raises(ValueError) as raised:
    train.settings_and_config(args)
  text = str(raised.value)
  assert "`--cooldown_rounds`=25 exceeds `--rounds`=4" in text
  assert "--cooldown_rounds=25 comes from --preset=quick" in text


def test_a_value_the_user_gave_is_not_blamed_on_the_preset():
  from tasks.stackoverflow import train  # pylint: disable=g-import-not-at-top
  args = train.build_parser().parse_args(["--rounds", "4", "--cooldown_rounds", "9"])
  with pytest.raises(ValueError) as raised:
    train.settings_and_config(args)
  assert "`--cooldown_rounds`=9" in str(raised.value)
  assert "comes from --preset" not in str(raised.value)


@pytest.mark.parametrize("value", [-1.0, 0.0, float("inf"), float("nan")])
def test_a_bad_calibrate_epsilon_is_named_as_such(tmp_path, value):
  code, err = _binary(_config(tmp_path), calibrate_epsilon=value)
  assert code == exits.BAD_INPUT
  assert "--calibrate_epsilon" in err and "target_epsilon" not in err
  assert not os.path.exists(os.path.join(tmp_path, "config.json"))


def test_compare_names_its_own_flags(tmp_path, capsys):
  from tasks.stackoverflow import compare  # pylint: disable=g-import-not-at-top
  assert compare.main(["--root_dir", str(tmp_path)]) == exits.BAD_INPUT
  assert "--out_dir" in capsys.readouterr().err
  assert compare.main(["--mechanisms", "blt,warp"]) == exits.BAD_INPUT
  assert "'blt,warp'" in capsys.readouterr().err
  for argv, named in ((["--seeds", "0"], "--seeds=0"),
                      (["--lr_factors", "1,fast"], "--lr_factors='1,fast'"),
                      (["--lr_factors", "0.5,-1"], "--lr_factors='0.5,-1'"),
                      (["--max_grid_extensions", "-1"], "--max_grid_extensions=-1"),
                      (["--mechanism", "blt"], "--mechanisms")):
    assert compare.main(argv + ["--out_dir", str(tmp_path / "c")]) == exits.BAD_INPUT
    assert named in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "c")  # Refused before anything was written.


def test_exit_codes_say_how_the_run_ended(tmp_path):
  assert _binary(_config(tmp_path / "done", rounds=2))[0] == exits.COMPLETED
  target = _config(tmp_path / "budget", rounds=12, target_epsilon=0.5)
  assert _binary(target)[0] == exits.TARGET_EPSILON
  nonfinite = _config(tmp_path / "nan", rounds=3, clients_per_round=1, min_sep=1,
                      participation="uniform")
  code, _ = _binary(nonfinite, task=toy_task.make_task(
      poison_client=[f"client_{i:03d}" for i in range(toy_task.NUM_CLIENTS)]))
  assert code == exits.NONFINITE
  code, _ = _binary(ValueError("`rounds` must be a positive integer (>= 1); got 0."))
  assert code == exits.BAD_INPUT


def test_an_interrupted_binary_exits_75_and_resumes(tmp_path):
  env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  args = [sys.executable, "-c",
          "import sys; from tests.reliability import run_test; "
          "sys.exit(run_test.toy_binary(sys.argv[1], int(sys.argv[2])))",
          str(tmp_path), "40"]
  proc = subprocess.Popen(args, cwd=_ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 240
  while len(_rows(tmp_path)) < 2:
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    assert time.monotonic() < deadline
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  assert proc.wait(timeout=120) == exits.INTERRUPTED
  done = _rows(tmp_path)
  assert done == list(range(1, len(done) + 1)) and len(done) < 40


def toy_binary(root_dir: str, rounds: int) -> int:
  """A task binary's main on the toy task (for the subprocess cases)."""
  runtime.configure_logging(0)
  runtime.install_signal_handlers()
  code, err = _binary(_config(root_dir, rounds=rounds, checkpoint_every=1))
  sys.stderr.write(err)
  return code


def test_describe_os_error_names_the_file_and_the_fix():
  for number, fix in ((errno.EACCES, "writable"), (errno.EROFS, "read-only"),
                      (errno.ENOSPC, "free space")):
    text = exits.describe_os_error(OSError(number, os.strerror(number), "/runs/x/ckpt"))
    assert "/runs/x/ckpt" in text and fix in text and os.strerror(number) in text


def test_keyboard_interrupt_and_busy_map_to_their_codes():
  def interrupted():
    raise KeyboardInterrupt

  def busy():
    raise exits.BusyError("held by pid 1")

  stream = io.StringIO()
  assert exits.guarded(interrupted, stream=stream) == exits.INTERRUPTED
  assert exits.guarded(busy, stream=stream) == exits.BUSY
  assert "held by pid 1" in stream.getvalue()


def test_out_of_memory_is_an_environment_error_not_a_traceback():
  class ResourceExhaustedError(Exception):  # TF's name; dp_fl does not import TF for it.
    pass

  for error in (MemoryError("Unable to allocate 23.8 TiB"),
                ResourceExhaustedError("OOM when allocating tensor")):
    def body(error=error):
      raise error

    stream = io.StringIO()
    assert exits.guarded(body, stream=stream) == exits.ENVIRONMENT
    text = stream.getvalue()
    assert text.startswith("error: out of memory") and "Traceback" not in text
    assert "internal error" not in text


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
