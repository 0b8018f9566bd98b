"""cpSGD's release log (paper 000 through dp_fl.accounting.cpsgd): every computed round is a
release, and crashes, resumes and fresh restarts are charged client by client — checked by an
independent audit from the checkpoint and the log (tests/training/privacy_audit.py)."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from dp_fl.execution import runtime
from dp_fl.training import privacy
from dp_fl.training import program
from tests.training import privacy_audit
from tests.training import toy_program
from tests.training import toy_task


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield


def _calibrated(task, root_dir, epsilon=8.0, **overrides):
  return toy_program.calibrated_config(task, root_dir, "cpsgd", epsilon, **overrides)


class _CrashingRuntime:
  """`learners.runtime(name)` whose learner raises while computing its `crash_at`-th round
  (1-based, counted in this process): a process killed mid-round."""

  def __init__(self, real, crash_at):
    self._real, self._crash_at = real, crash_at

  def __call__(self, name):
    real, crash_at = self._real(name), self._crash_at

    class Learner:
      def __init__(self, *args, **kwargs):
        self._inner, self._calls = real.learner(*args, **kwargs), 0

      def next(self, datasets):
        self._calls += 1
        if self._calls == crash_at:
          raise RuntimeError("injected crash while computing a round")
        return self._inner.next(datasets)

      def __getattr__(self, attribute):
        return getattr(self._inner, attribute)

    return dataclasses.replace(real, learner=Learner)


def _run_crashing(task, config, crash_at, monkeypatch):
  with monkeypatch.context() as m:
    m.setattr(program.learners_lib, "runtime",
              _CrashingRuntime(program.learners_lib.runtime, crash_at))
    with pytest.raises(RuntimeError, match="injected crash"):
      program.run(task, config)


def test_a_fresh_restart_after_a_crash_is_charged_client_by_client(tmp_path, monkeypatch):
  # Issue #39: attempt 1 crashes computing round 1 (no checkpoint yet); attempt 2 starts
  # afresh — a new secret scheduler seed, new cohorts — applies round 1 and crashes computing
  # round 2; attempt 3 resumes and finishes. Some clients were in 3 computations while the
  # old accounting charged 2 (it assumed a re-run replays the same cohorts).
  task = toy_task.make_task()
  config = _calibrated(task, tmp_path / "run", rounds=6, min_sep=4, checkpoint_every=1)
  charged, truths = [], []
  for attempt in range(6):  # Fresh cohorts are random: repeat until the overlap shows.
    run_config = config.replace(root_dir=str(tmp_path / f"run{attempt}"))
    _run_crashing(task, run_config, 1, monkeypatch)
    assert not os.path.exists(os.path.join(run_config.root_dir, "checkpoints", "checkpoint"))
    _run_crashing(task, run_config, 2, monkeypatch)
    result = program.run(task, run_config)
    assert result.stopped == "completed" and result.resumed_from == 1
    audit = privacy_audit.audit_cpsgd_run(task, run_config)
    report = audit["reported"]
    assert report["participations"] == audit["participations"]  # Client by client.
    assert report["cohort"] <= audit["cohort"]
    assert report["epsilon"] >= audit["true_epsilon"] * (1 - 1e-12)
    charged.append(report["participations"])
    truths.append(audit["participations"])
    if audit["participations"] >= 3:
      break
  assert max(truths) >= 3, truths  # The scenario of the issue was reproduced.


def test_resuming_with_a_larger_timer_does_not_shrink_the_charge(tmp_path):
  # The old accounting divided a crash's extra computations by the *current* --timer_hours /
  # --round_hours separation; a resume with a larger timer shrank the charge.
  task = toy_task.make_task()
  config = _calibrated(task, tmp_path / "run", rounds=8, participation="device_timer",
                       timer_hours=2.0, round_hours=1.0)
  program.run(task, config, max_rounds_this_call=2)
  for r in (3, 4, 5):  # Three crashed computations of rounds the resume computes again.
    privacy.record_release(config.root_dir, r, [0, 1, 2, 3])
  bigger = config.replace(timer_hours=4.0)
  program.run(task, bigger)
  audit = privacy_audit.audit_cpsgd_run(task, bigger)
  report = audit["reported"]
  assert report["participations"] == audit["participations"] >= 3
  assert report["epsilon"] >= audit["true_epsilon"] * (1 - 1e-12)


@pytest.mark.parametrize("participation", ["min_sep_rounds", "uniform"])
def test_the_report_bounds_an_independent_audit_after_crashes(tmp_path, participation):
  # Crashes while rounds 3, 5 and 8 were computed (their releases logged, nothing applied),
  # each followed by a resume that computes the round again: the audit counts, client by
  # client from the release log, every computation it took part in.
  task = toy_task.make_task()
  config = _calibrated(task, tmp_path / "run", rounds=8, participation=participation)
  program.run(task, config, max_rounds_this_call=2)
  privacy.record_release(config.root_dir, 3, [0, 1, 2, 3])
  program.run(task, config, max_rounds_this_call=2)
  privacy.record_release(config.root_dir, 5, [1, 2, 3])
  program.run(task, config, max_rounds_this_call=3)
  privacy.record_release(config.root_dir, 8, [0, 2, 4, 6])
  result = program.run(task, config)
  audit = privacy_audit.audit_cpsgd_run(task, config)
  assert audit["participations"] > 1 and audit["cohort"] == 3
  report = audit["reported"]
  assert report["participations"] == audit["participations"]
  assert report["cohort"] <= audit["cohort"]
  assert report["epsilon"] >= audit["true_epsilon"] * (1 - 1e-12)
  assert result.epsilon == pytest.approx(report["epsilon"])


def test_the_budget_counts_a_lost_computation_of_the_round_it_looks_ahead_at(tmp_path):
  # 12 clients, 4 a round, min-sep 3: round 4 is round 1's cohort again. A crash while round
  # 4 was computed (its release logged): the resume's round 4 would be those clients' third
  # computation, above the target calibrated for two, so the run stops before it. (The
  # look-ahead used to take the lost computation for the pending round's own: it applied
  # round 4 and ended above its target.)
  task = toy_task.make_task(num_clients=12)
  config = _calibrated(task, tmp_path / "run", rounds=6, target_epsilon=8.0)
  program.run(task, config, max_rounds_this_call=3)
  privacy.record_release(config.root_dir, 4, list(range(12)))
  result = program.run(task, config)
  assert result.stopped == "target_epsilon" and result.rounds_completed == 3
  assert "before round 4: it would raise ε" in result.message
  assert result.epsilon <= 8.0
  audit = privacy_audit.audit_cpsgd_run(task, config)
  assert audit["reported"]["participations"] == audit["participations"] == 2
  assert audit["reported"]["epsilon"] >= audit["true_epsilon"] * (1 - 1e-12)


def test_release_log_charges_each_client_its_computations(tmp_path):
  def charge(rounds_applied, *events, legacy=(), pending=None):
    path = tmp_path / privacy.RELEASE_LOG
    lines = [json.dumps({"round": r, "cohort": len(ids), "clients": list(ids)})
             for r, ids in events]
    lines += [json.dumps({"round": r, "cohort": n}) for r, n in legacy]
    path.write_text("".join(line + "\n" for line in lines))
    c = privacy.ReleaseLog(str(tmp_path)).charge(rounds_applied, pending)
    return c.participations, c.beyond_ledger, c.smallest_cohort

  # (most computations of one client, most lost ones of one client, smallest lost cohort)
  assert privacy.ReleaseLog(str(tmp_path / "none")).charge(0) == privacy.ReleaseCharge(
      0, 0, None)
  assert charge(3, (1, [0, 1]), (2, [2, 3]), (3, [0, 2])) == (2, 0, None)  # Applied once each.
  assert charge(3, (1, [0, 1]), (2, [2, 3]), (3, [4]), (3, [0, 2])) == (2, 1, 1)  # Round 3 twice.
  assert charge(2, (1, [0, 1]), (2, [2, 3]), (3, [1, 2])) == (2, 1, 2)  # Computed, not applied.
  # A fresh restart's new cohorts: client 0 in two lost computations of different rounds.
  assert charge(2, (1, [0, 1]), (2, [0, 3]), (1, [2, 3]), (2, [1, 2])) == (2, 2, 2)
  # Client by client, not the most applied plus the most lost: a crash lost rounds 3-4
  # (clients 4-7, new ones); nobody is in more than one computation (the ledger's k plus
  # the most lost would say 2).
  assert charge(2, (1, [0, 1]), (2, [2, 3]), (3, [4, 5]), (4, [6, 7])) == (1, 1, 2)
  # A look-ahead: round 3 pending, its earlier (lost) computation counted, as is the pending
  # one; a client of neither is charged as before.
  assert charge(2, (1, [0, 1]), (2, [2, 3]), (3, [4, 5]), pending=[4, 5]) == (2, 1, 2)
  assert charge(2, (1, [0, 1]), (2, [2, 3]), (3, [4, 5]), pending=[6, 7]) == (1, 1, 2)
  assert charge(2, (1, [0, 1]), (2, [2, 3]), pending=[0, 6]) == (2, 0, None)
  # Lines written before client ids were logged are charged to everyone.
  assert charge(2, (1, [0, 1]), (1, [2, 3]), (2, [0, 3]), legacy=[(3, 5)]) == (3, 2, 2)
  # A log lacking an applied round cannot give the total: the caller bounds it instead.
  assert charge(3, (1, [0, 1]), (3, [0, 2]), (3, [1])) == (None, 1, 2)
  # Read incrementally: an appended line is seen; a replaced file is read again.
  log = privacy.ReleaseLog(str(tmp_path))
  (tmp_path / privacy.RELEASE_LOG).write_text("")
  assert log.charge(0) == privacy.ReleaseCharge(0, 0, None)
  privacy.record_release(str(tmp_path), 1, [7, 8, 9])
  assert log.charge(0) == privacy.ReleaseCharge(1, 1, 3)
  privacy.record_release(str(tmp_path), 1, np.array([7], dtype=np.int64))
  assert log.charge(1) == privacy.ReleaseCharge(2, 1, 3)
  (tmp_path / privacy.RELEASE_LOG).write_text("")
  assert log.charge(1) == privacy.ReleaseCharge(None, 0, None)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
