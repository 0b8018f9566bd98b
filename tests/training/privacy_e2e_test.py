"""End-to-end privacy tests: short training jobs whose reported ε is checked against the truth.

Every run is audited from its checkpoint alone (`privacy_audit`): the participation record
(rows of C each client used), the aggregator's row counter and the dense C give the true
sensitivity by brute force over the realized schedule, and the reported ε must be ≥ the true
ε — for every mechanism × participation scheme × {no discards, discards, resume after SIGKILL}.
The regressions of issue #15 are in privacy_regression_test.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dp_fl import writers
from dp_fl.execution import runtime
from dp_fl.training import program
from dp_fl.training import registry
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_QUIET = open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with

MECHANISMS = ("blt", "bandmf", "tree", "dpsgd")
PARTICIPATIONS = ("min_sep_rounds", "device_timer", "uniform", "cyclic", "balls_in_bins")
CASES = ([(m, p) for m in MECHANISMS for p in PARTICIPATIONS] + [("dpfedavg", "poisson")]
         + [("bandmf", "cyclic_poisson"), ("dpsgd", "cyclic_poisson")])
NUM_CLIENTS = 6
ROUNDS = 12
POISONED = ("client_002",)  # Its local training diverges: a round with only it is discarded.


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _settings(mechanism: str, participation: str, **overrides):
  """The e2e toy run: 6 clients, one per round, 12 rounds, min-sep 3 (where enforced)."""
  values = dict(clients_per_round=1, participation=participation, min_sep=3, timer_hours=3.0,
                round_hours=1.0, noise_multiplier=1.0, on_nonfinite="discard",
                checkpoint_every=2)
  if mechanism == "dpfedavg":
    values.update(population_sampling_rate=0.25)
  values.update(overrides)
  return values


def _config(root, mechanism, participation, rounds=ROUNDS, **overrides):
  return toy_program.toy_config(str(root), rounds, mechanism,
                                **_settings(mechanism, participation, **overrides))


def _task(poisoned=POISONED, num_clients=NUM_CLIENTS):
  return toy_task.make_task(poison_client=list(poisoned), num_clients=num_clients)


def _train_and_audit(root, mechanism, participation, poisoned=(), **overrides):
  config = _config(root, mechanism, participation, **overrides)
  task = _task(poisoned)
  result = program.run(task, config, progress_stream=_QUIET)
  audit = privacy_audit.audit_run(task, config)
  privacy_audit.check_claim(audit)
  return result, audit


# One participation scheme per mechanism for the plain and the SIGKILL runs (each scheme
# appears once in both, in other pairings); the discard runs cover the whole grid (below).
DIAGONAL = [("blt", "device_timer"), ("bandmf", "uniform"), ("tree", "min_sep_rounds"),
            ("dpsgd", "balls_in_bins"), ("dpfedavg", "poisson"), ("bandmf", "cyclic_poisson"),
            ("tree", "balls_in_bins")]
ANTI_DIAGONAL = [("blt", "cyclic"), ("bandmf", "min_sep_rounds"), ("tree", "uniform"),
                 ("dpsgd", "device_timer"), ("dpfedavg", "poisson"), ("blt", "balls_in_bins"),
                 ("dpsgd", "cyclic_poisson")]


@pytest.mark.parametrize("mechanism,participation", DIAGONAL)
def test_reported_epsilon_bounds_the_truth_without_discards(tmp_path, mechanism,
                                                            participation):
  result, audit = _train_and_audit(tmp_path, mechanism, participation)
  assert result.stopped == "completed" and audit.rows == ROUNDS
  assert result.epsilon == audit.reported["epsilon"]


def _check_discarded_rounds(root, participation, result, audit):
  """The poisoned client's discarded rounds leave no row and no trace in the ledger."""
  with open(os.path.join(root, "summary.json"), encoding="utf-8") as f:
    summary = json.load(f)
  if not registry.PARTICIPATIONS[participation].variable_cohorts:
    # Alone in its cohort, the poisoned client's rounds are all discarded: it never
    # contributes a row, and its discards leave no trace. (Under Poisson sampling it may
    # share a cohort; TFF then zeroes its update and the round is applied.)
    assert 2 not in audit.patterns
  if result.stopped == "completed":
    assert audit.rows == ROUNDS
  else:  # Too many consecutive discards: fewer rows, still exactly accounted.
    assert result.stopped == "nonfinite"
  assert summary["discarded_rounds"] >= 0
  assert summary["realized_participation"]["num_rounds"] == audit.rows


# The discard runs cover the whole grid across the two runtimes: the diagonal's cases on the
# in-process runtime (`test_reported_epsilon_bounds_the_truth_on_the_xla_runtime`), every other
# case here, on TFF's C++ worker (the runtimes execute the same process: xla_runtime_test).
OFF_DIAGONAL = [case for case in CASES if case not in DIAGONAL]


@pytest.mark.parametrize("mechanism,participation", OFF_DIAGONAL)
def test_reported_epsilon_bounds_the_truth_with_discarded_rounds(tmp_path, mechanism,
                                                                 participation):
  result, audit = _train_and_audit(tmp_path, mechanism, participation, poisoned=POISONED)
  _check_discarded_rounds(tmp_path, participation, result, audit)


def _start(root, mechanism, participation, rounds=ROUNDS, poisoned=(), runtime_name="tff_worker",
           audit_canaries=0, **flags):
  settings = _settings(mechanism, participation)
  args = [str(root), str(rounds), mechanism, f"--participation={participation}",
          f"--runtime={runtime_name}", f"--audit_canaries={audit_canaries}",
          "--clients_per_round=1", f"--num_clients={NUM_CLIENTS}", "--min_sep=3",
          "--timer_hours=3", "--noise_multiplier=1.0", "--on_nonfinite=discard",
          "--checkpoint_every=2", f"--poison_clients={','.join(poisoned)}"]
  if settings.get("population_sampling_rate"):
    args.append(f"--population_sampling_rate={settings['population_sampling_rate']}")
  args += [f"--{name}={value}" for name, value in flags.items()]
  env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.Popen([sys.executable, "-m", "tests.training.toy_program", *args],
                          cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _rows(root) -> int:
  path = os.path.join(root, "metrics", "train.csv")
  return len(writers.read_csv(path)) if os.path.exists(path) else 0


def _kill_mid_run(root, mechanism, participation, **start_kwargs) -> None:
  """Starts the poisoned e2e run in a subprocess and SIGKILLs it after round 5: mid-way
  between two checkpoints (every 2 rounds)."""
  proc = _start(root, mechanism, participation, poisoned=POISONED, **start_kwargs)
  deadline = time.monotonic() + 240
  while _rows(root) < 5:
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    assert time.monotonic() < deadline, "the program made no progress"
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("mechanism,participation", ANTI_DIAGONAL)
def test_reported_epsilon_bounds_the_truth_after_sigkill_and_resume(tmp_path, mechanism,
                                                                    participation):
  _kill_mid_run(tmp_path, mechanism, participation)
  result, audit = _train_and_audit(tmp_path, mechanism, participation, poisoned=POISONED)
  assert result.resumed_from is not None and result.resumed_from < ROUNDS
  assert audit.rows == result.rounds_completed


# The in-process runtime (`--runtime=xla`, dp_fl/execution/xla.py) executes the same learning
# process: the same audit must hold on it, and across a SIGKILL that moves the job from one
# runtime to the other (checkpoints are interchangeable).
@pytest.mark.parametrize("mechanism,participation", DIAGONAL)
def test_reported_epsilon_bounds_the_truth_on_the_xla_runtime(tmp_path, mechanism,
                                                              participation):
  result, audit = _train_and_audit(tmp_path, mechanism, participation, poisoned=POISONED,
                                   runtime="xla")
  _check_discarded_rounds(tmp_path, participation, result, audit)
  assert result.epsilon == audit.reported["epsilon"]


@pytest.mark.parametrize("killed_on,resumed_on", [("xla", "tff_worker"), ("tff_worker", "xla")])
def test_reported_epsilon_bounds_the_truth_when_a_killed_job_resumes_on_the_other_runtime(
    tmp_path, killed_on, resumed_on):
  mechanism, participation = ("blt", "device_timer") if killed_on == "xla" else (
      "bandmf", "cyclic")
  _kill_mid_run(tmp_path, mechanism, participation, runtime_name=killed_on)
  result, audit = _train_and_audit(tmp_path, mechanism, participation, poisoned=POISONED,
                                   runtime=resumed_on)
  assert result.resumed_from is not None and result.resumed_from < ROUNDS
  assert audit.rows == result.rounds_completed


# With the audit's canary clients on (issue #41): they join the population, so the truth is
# brute-forced over the population with them; a canary is a client of the ledger under its own
# index (NUM_CLIENTS..), never a real client's. One case per participation scheme.
CANARY_CASES = [("blt", "device_timer"), ("bandmf", "cyclic"), ("dpsgd", "balls_in_bins"),
                ("dpfedavg", "poisson"), ("tree", "uniform"), ("dpsgd", "cyclic_poisson"),
                ("tree", "min_sep_rounds")]
CANARIES = 4


def _check_canaries(root, result, audit):
  from dp_fl.training import canaries as canaries_lib  # pylint: disable=g-import-not-at-top
  from dp_fl.training import checkpoints as checkpoints_lib  # pylint: disable=g-import-not-at-top
  restored = checkpoints_lib.CheckpointManager(os.path.join(root, "checkpoints")).restore_latest()
  scores = canaries_lib.CanaryScores.from_bytes(restored.blobs[program.CANARIES_BLOB])
  assert scores.canaries.num_real == NUM_CLIENTS
  assert scores.rounds_scored == audit.rows == result.rounds_completed
  for i in range(CANARIES):
    assert len(audit.patterns.get(NUM_CLIENTS + i, ())) == scores.participations[i]
  assert sum(len(p) for p in audit.patterns.values()) == scores.client_participations
  assert result.audit is not None and result.audit["num_canaries"] == CANARIES


@pytest.mark.parametrize("mechanism,participation", CANARY_CASES)
def test_reported_epsilon_bounds_the_truth_with_canaries(tmp_path, mechanism, participation):
  result, audit = _train_and_audit(tmp_path, mechanism, participation, poisoned=POISONED,
                                   audit_canaries=CANARIES)
  _check_discarded_rounds(tmp_path, participation, result, audit)
  _check_canaries(tmp_path, result, audit)


def test_reported_epsilon_bounds_the_truth_after_sigkill_and_resume_with_canaries(tmp_path):
  mechanism, participation = "bandmf", "device_timer"
  _kill_mid_run(tmp_path, mechanism, participation, audit_canaries=CANARIES)
  result, audit = _train_and_audit(tmp_path, mechanism, participation, poisoned=POISONED,
                                   audit_canaries=CANARIES)
  assert result.resumed_from is not None and result.resumed_from < ROUNDS
  assert audit.rows == result.rounds_completed
  _check_canaries(tmp_path, result, audit)


# Adaptive clipping (issue #42): the clip norm's count releases composed in, audited against
# the brute-force sensitivity plus the counts' k / 2σ_b² (DP-FTRL) or Andrew et al.'s
# effective multiplier (DP-FedAvg); one run killed and resumed.
ADAPTIVE = dict(target_unclipped_quantile=0.5, clip_learning_rate=0.5)


@pytest.mark.parametrize("mechanism,participation", [
    ("blt", "device_timer"), ("bandmf", "min_sep_rounds"), ("tree", "uniform"),
    ("dpsgd", "cyclic"), ("dpfedavg", "poisson")])
def test_reported_epsilon_bounds_the_truth_with_adaptive_clipping(tmp_path, mechanism,
                                                                  participation):
  result, audit = _train_and_audit(tmp_path, mechanism, participation, poisoned=POISONED,
                                   **ADAPTIVE)
  _check_discarded_rounds(tmp_path, participation, result, audit)
  assert result.privacy_report.adaptive_clipping is not None
  rows = writers.read_csv(os.path.join(tmp_path, "metrics", "train.csv"))
  clips = {float(r["aggregator/clip_norm"]) for r in rows}
  assert len(clips) > 1  # The clip norm moved.


def test_reported_epsilon_bounds_the_truth_after_sigkill_and_resume_with_adaptive_clipping(
    tmp_path):
  mechanism, participation = "blt", "min_sep_rounds"
  _kill_mid_run(tmp_path, mechanism, participation, **ADAPTIVE)
  result, audit = _train_and_audit(tmp_path, mechanism, participation, poisoned=POISONED,
                                   **ADAPTIVE)
  assert result.resumed_from is not None and result.resumed_from < ROUNDS
  assert audit.rows == result.rounds_completed


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
