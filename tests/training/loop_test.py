"""The training loop and its policies, driven by fakes (no TFF, no TensorFlow)."""

from __future__ import annotations

import dataclasses
import math
import signal
from typing import Any, Optional

import numpy as np
import pytest

from dp_fl.participation import ledger as ledger_lib
from dp_fl.training import loop
from dp_fl.training import policies

# ---------------------------------------------------------------------------------------
# Fakes.


@dataclasses.dataclass
class _Selection:
  shortfall: int = 0


@dataclasses.dataclass
class _Pending:
  draw: int
  client_ids: list[str]
  datasets: list[Any]
  selection: _Selection = dataclasses.field(default_factory=_Selection)

  @property
  def clients_with_data(self) -> int:
    return len(self.client_ids)


class _FakeScheduler:
  """Counts rows committed (the realized participation is the number of applied rounds)."""

  skips_empty_rounds = False

  def __init__(self):
    self.committed = 0
    self.discarded_rounds = 0

  def realized(self) -> int:
    return self.committed

  def realized_if(self, selection) -> int:
    del selection
    return self.committed + 1


class _FakeParticipation:

  def __init__(self, clients_per_round: int = 2):
    self.scheduler = _FakeScheduler()
    self.clients_per_round = clients_per_round
    self.draws = 0
    self.events: list[tuple[str, int]] = []

  def select_round(self) -> _Pending:
    self.draws += 1
    ids = [f"c{self.draws}-{i}" for i in range(self.clients_per_round)]
    return _Pending(self.draws, ids, [f"data-{i}" for i in ids])

  def commit(self, pending):
    self.scheduler.committed += 1
    self.events.append(("commit", pending.draw))

  def discard(self, pending):
    self.scheduler.discarded_rounds += 1
    self.events.append(("discard", pending.draw))

  def withdraw(self, pending):
    self.events.append(("withdraw", pending.draw))


@dataclasses.dataclass
class _Weights:
  trainable: list[np.ndarray]
  non_trainable: list[np.ndarray]


class _FakeLearner:
  """A 'model' that is one number, +1 per applied round; scripted losses per call."""

  def __init__(self, losses: Optional[dict[int, float]] = None):
    self.losses = losses or {}
    self.calls = 0
    self.value = 0.0
    self.committed = 0

  def next(self, datasets):
    self.calls += 1
    loss = self.losses.get(self.calls, 1.0 / self.calls)
    return ("result", self.calls, len(datasets)), {"client_work/train/loss": loss}

  def commit(self, result):
    self.committed += 1
    self.value += 1.0

  def model_weights(self):
    return _Weights([np.array([self.value])], [])

  def set_model_weights(self, weights):
    self.value = float(weights.trainable[0][0])


class _FakeAccountant:
  """ε = 0.5 per applied round plus `charged` (computations a crash lost); a report object
  with that ε."""
  report_accountant = "pld"
  progress_accountant = "zcdp"
  charged = 0.0

  def epsilon(self, realized) -> float:
    return 0.5 * realized + self.charged

  def report(self, realized):
    return None if realized is None else _Report(0.5 * realized + self.charged)


@dataclasses.dataclass
class _Report:
  epsilon: float


class _FakeOutputs:

  def __init__(self):
    self.train_rows, self.evals, self.reports, self.lines = [], [], [], []
    self.epsilons = []

  def train(self, round_number, metrics):
    self.train_rows.append((round_number, dict(metrics)))

  def evaluation(self, round_number, metrics):
    self.evals.append((round_number, dict(metrics)))

  def privacy(self, round_number, report):
    self.reports.append((round_number, report.epsilon))

  def progress(self, line):
    self.lines.append(line)

  def epsilon_so_far(self, round_number, epsilon):
    self.epsilons.append((round_number, epsilon))


class _FakeMeter:

  def line(self, round_number, epsilon, extra="", accountant=""):
    return f"round {round_number} eps {epsilon} {extra} {accountant}"


class _FakeClock:

  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


class _SignalAfter(policies.StopSignal):
  """A StopSignal that 'receives' SIGTERM once `rounds` rounds were applied (no real signal)."""

  def __init__(self, rounds: int):
    super().__init__()
    self.rounds = rounds

  def check(self, rounds_done):
    if rounds_done >= self.rounds:
      self.signum = signal.SIGTERM
    return super().check(rounds_done)


def _policies(rounds=10, eval_every=4, checkpoint_every=3, target_epsilon=None,
              on_nonfinite="discard", project=None, max_rounds=None, first_round=0,
              signal_policy=None, clock=None):
  return loop.Policies(
      cadence=policies.Cadence(rounds, eval_every, checkpoint_every),
      budget=policies.EpsilonBudget(target_epsilon),
      nonfinite=policies.NonfinitePolicy(on_nonfinite, max_consecutive=3),
      projection=policies.WeightProjection(project),
      limit=policies.RoundLimit(max_rounds, first_round),
      signal=signal_policy or policies.StopSignal(),
      clock=policies.ProgressClock(10.0, clock or _FakeClock()))


def _loop(rounds=10, rounds_done=0, learner=None, **policy_kwargs):
  parts = dict(learner=learner or _FakeLearner(), participation=_FakeParticipation(),
               accountant=_FakeAccountant(), outputs=_FakeOutputs(), checkpoints=[])
  evaluations = []

  def evaluate():
    evaluations.append(parts["learner"].value)
    return {"accuracy": parts["learner"].value / 100}

  training = loop.TrainingLoop(
      rounds=rounds, rounds_done=rounds_done, learner=parts["learner"],
      participation=parts["participation"], accountant=parts["accountant"],
      save_checkpoint=parts["checkpoints"].append, evaluate=evaluate,
      outputs=parts["outputs"], meter=_FakeMeter(),
      policies=_policies(rounds=rounds, first_round=rounds_done, **policy_kwargs),
      learning_rate_at=lambda r: 0.1 * r)
  parts["evaluations"] = evaluations
  return training, parts


# ---------------------------------------------------------------------------------------
# The loop.


def test_runs_every_round_with_cadence_of_checkpoints_and_evaluations():
  training, parts = _loop(rounds=10, eval_every=4, checkpoint_every=3)
  outcome = training.run()
  assert outcome.stopped == policies.COMPLETED and outcome.message == ""
  assert outcome.rounds_done == 10 and parts["learner"].committed == 10
  # Checkpoint every 3 rounds, before every evaluation (4, 8) and at the end.
  assert parts["checkpoints"] == [3, 4, 6, 8, 9, 10]
  assert [r for r, _ in parts["outputs"].evals] == [4, 8, 10]
  assert outcome.eval_metrics == {"accuracy": 0.1}
  assert outcome.report.epsilon == 5.0
  # With every evaluation, and once more when the loop ends.
  assert [r for r, _ in parts["outputs"].reports] == [4, 8, 10, 10]
  rows = parts["outputs"].train_rows
  assert [r for r, _ in rows] == list(range(1, 11))
  assert rows[2][1]["clients"] == 2 and rows[2][1]["shortfall"] == 0
  assert rows[2][1]["server_learning_rate"] == pytest.approx(0.2)
  assert [e for e, _ in parts["participation"].events] == ["commit"] * 10


def test_a_crash_right_after_a_checkpoint_loses_no_row_of_the_privacy_log():
  """The round's ε-so-far row is written before its checkpoint, as its metrics are: a SIGKILL
  just after the checkpoint resumes past the round, which must not leave a hole in
  metrics/privacy.csv (found by program_test's SIGKILL resume on a loaded machine)."""
  training, parts = _loop(rounds=10, eval_every=4, checkpoint_every=3)
  saved = training._save_checkpoint

  def killed_after_saving(round_number):
    saved(round_number)
    if round_number == 3:
      raise KeyboardInterrupt  # The process dies with the checkpoint written.

  training._save_checkpoint = killed_after_saving
  with pytest.raises(KeyboardInterrupt):
    training.run()
  assert parts["checkpoints"][-1] == 3
  assert [r for r, _ in parts["outputs"].epsilons] == [1, 2, 3]


def test_the_wall_time_is_attributed_to_each_stage():
  """Issue #43: where a call's time goes (summary.json's `seconds_by_stage`), each
  collaborator's time counted in its own stage, none twice."""
  clock = _FakeClock()
  training, parts = _loop(rounds=4, eval_every=2, checkpoint_every=2, target_epsilon=100.0)
  training.timed = loop.StageTimes(clock)

  def costing(seconds, function):
    def call(*args, **kwargs):
      clock.now += seconds
      return function(*args, **kwargs)
    return call

  parts["participation"].select_round = costing(1.0, parts["participation"].select_round)
  parts["learner"].next = costing(10.0, parts["learner"].next)
  parts["learner"].commit = costing(0.5, parts["learner"].commit)
  parts["accountant"].epsilon = costing(0.25, parts["accountant"].epsilon)
  parts["accountant"].report = costing(0.125, parts["accountant"].report)
  training._save_checkpoint = costing(2.0, training._save_checkpoint)
  training._evaluate = costing(3.0, training._evaluate)
  outcome = training.run()
  assert outcome.rounds_done == 4
  # 4 rounds: selections, rounds + commits; ε before each round (the budget) and after it
  # (the ε-so-far rows), reports at the evaluations and at the end; checkpoints at 2 and 4;
  # evaluations at 2 and 4.
  assert outcome.seconds_by_stage == {
      "data": 4 * 1.0, "training": 4 * 10.5,
      "accounting": 4 * 0.25 + 4 * 0.25 + 3 * 0.125,
      "checkpoint": 2 * 2.0, "evaluation": 2 * 3.0}


def test_a_run_already_over_its_target_is_told_so_not_that_the_round_would_raise_it():
  training, parts = _loop(rounds=10, rounds_done=0, target_epsilon=1.6)
  parts["accountant"].charged = 1.0  # e.g. rounds a crashed worker computed, charged.
  outcome = training.run()
  # Round 2 would give 2.0 > 1.6; without it ε is 1.5, under the target: the usual message.
  assert outcome.rounds_done == 1 and "would raise ε to 2 > target 1.6" in outcome.message
  training, parts2 = _loop(rounds=10, target_epsilon=1.6)
  parts2["accountant"].charged = 3.0
  outcome = training.run()
  assert outcome.stopped == policies.TARGET_EPSILON and outcome.rounds_done == 0
  assert "before round 1: ε is already 3 > target 1.6 without it" in outcome.message
  assert parts2["learner"].calls == 0


def test_epsilon_budget_withdraws_the_round_that_would_exceed_it():
  training, parts = _loop(rounds=10, target_epsilon=1.6)
  outcome = training.run()
  # ε = 0.5 per round: round 4 would give 2.0 > 1.6.
  assert outcome.stopped == policies.TARGET_EPSILON and outcome.rounds_done == 3
  assert "before round 4" in outcome.message and "2 > target 1.6" in outcome.message
  assert parts["participation"].events[-1] == ("withdraw", 4)
  assert parts["learner"].calls == 3  # The withdrawn round never ran.
  assert parts["checkpoints"][-1] == 3 and outcome.report.epsilon == 1.5
  assert parts["outputs"].evals[-1][0] == 3  # The final model is evaluated.


def test_nonfinite_discard_uses_no_row_and_the_next_draw_is_fresh():
  learner = _FakeLearner(losses={2: math.nan, 3: math.inf})
  training, parts = _loop(rounds=4, learner=learner, eval_every=100, checkpoint_every=100)
  outcome = training.run()
  assert outcome.stopped == policies.COMPLETED and outcome.rounds_done == 4
  assert parts["participation"].events == [
      ("commit", 1), ("discard", 2), ("discard", 3), ("commit", 4), ("commit", 5),
      ("commit", 6)]
  assert parts["participation"].scheduler.discarded_rounds == 2
  assert learner.committed == 4 and learner.calls == 6
  assert any("round 2: non-finite training loss (nan); round discarded" in line
             for line in parts["outputs"].lines)
  assert [row["discarded_rounds"] for _, row in parts["outputs"].train_rows] == [0, 2, 2, 2]


def test_consecutive_discards_stop_the_run_and_are_checkpointed():
  learner = _FakeLearner(losses={i: math.nan for i in range(2, 20)})
  training, parts = _loop(rounds=10, learner=learner, eval_every=100, checkpoint_every=100)
  outcome = training.run()
  assert outcome.stopped == policies.NONFINITE and outcome.rounds_done == 1
  assert "3 consecutive rounds" in outcome.message
  assert [e for e, _ in parts["participation"].events] == ["commit"] + ["discard"] * 3
  # The discards moved the scheduler on after the last checkpoint: one more is written.
  assert parts["checkpoints"] == [1]


def test_nonfinite_stop_applies_nothing():
  learner = _FakeLearner(losses={3: math.nan})
  training, parts = _loop(rounds=10, learner=learner, on_nonfinite="stop",
                          eval_every=100, checkpoint_every=100)
  outcome = training.run()
  assert outcome.stopped == policies.NONFINITE and outcome.rounds_done == 2
  assert "round 3: non-finite training loss" in outcome.message
  assert parts["participation"].events[-1] == ("withdraw", 3)
  assert learner.committed == 2 and parts["checkpoints"] == [2]


def test_weight_projection_runs_after_every_applied_round():
  training, parts = _loop(rounds=5, project=lambda ws: [np.minimum(w, 2.0) for w in ws])
  training.run()
  # +1 per round, projected onto [-inf, 2] after each: the model stays at 2.
  assert parts["learner"].value == 2.0
  assert parts["evaluations"][-1] == 2.0


def test_signal_stops_after_the_round_with_a_checkpoint():
  training, parts = _loop(rounds=10, signal_policy=_SignalAfter(2), eval_every=100,
                          checkpoint_every=100)
  outcome = training.run()
  assert outcome.stopped == policies.SIGNAL and outcome.rounds_done == 2
  assert "SIGTERM received: stopped after round 2" in outcome.message
  assert parts["checkpoints"] == [2] and parts["outputs"].evals[-1][0] == 2


def test_round_limit_pauses_a_resumed_run():
  training, parts = _loop(rounds=10, rounds_done=4, max_rounds=3, eval_every=100,
                          checkpoint_every=100)
  outcome = training.run()
  assert outcome.stopped == policies.PAUSED and outcome.rounds_done == 7
  assert outcome.message == "paused after 3 rounds"
  assert parts["checkpoints"] == [7]


def test_a_completed_run_does_nothing_but_report():
  training, parts = _loop(rounds=5, rounds_done=5)
  outcome = training.run()
  assert outcome.stopped == policies.COMPLETED and outcome.rounds_done == 5
  assert parts["learner"].calls == 0 and parts["checkpoints"] == []
  assert parts["outputs"].evals == [(5, {"accuracy": 0.0})]


def test_progress_lines_between_evaluations_follow_the_clock():
  clock = _FakeClock()

  class _Ticking(_FakeLearner):

    def next(self, datasets):
      clock.now += 4.0  # Each round takes 4 s: a line every third round (> 10 s).
      return super().next(datasets)

  training, parts = _loop(rounds=9, learner=_Ticking(), eval_every=100, checkpoint_every=100,
                          clock=clock)
  training.run()
  progress = [line for line in parts["outputs"].lines if line.startswith("round")]
  assert [line.split()[1] for line in progress] == ["3", "6", "9"]
  assert all(line.endswith("zcdp") for line in progress[:2])


# ---------------------------------------------------------------------------------------
# The policies on their own.


def test_nonfinite_problem_names_each_kind():
  assert policies.nonfinite_problem({"client_work/train/loss": 1.0}, 3) == ""
  assert "non-finite training loss" in policies.nonfinite_problem(
      {"client_work/train/loss": math.inf}, 3)
  assert "every client" in policies.nonfinite_problem(
      {"client_work/train/loss": 0.0, "client_work/train/num_batches": 0}, 3)
  assert policies.nonfinite_problem({"client_work/train/num_batches": 0}, 0) == ""
  assert "server update" in policies.nonfinite_problem({"finalizer/update_non_finite": 1}, 3)


def test_nonfinite_policy_resets_after_a_good_round():
  policy = policies.NonfinitePolicy("discard", max_consecutive=2)
  bad, good = {"client_work/train/loss": math.nan}, {"client_work/train/loss": 1.0}
  assert policy.judge(1, bad, 2)[0] is policies.Verdict.DISCARD and policy.give_up() is None
  assert policy.judge(2, good, 2)[0] is policies.Verdict.APPLY
  assert policy.judge(3, bad, 2)[0] is policies.Verdict.DISCARD and policy.give_up() is None
  policy.judge(4, bad, 2)
  assert policy.give_up().reason == policies.NONFINITE
  with pytest.raises(ValueError, match="on_nonfinite"):
    policies.NonfinitePolicy("ignore")


@pytest.mark.parametrize("rounds,eval_every,checkpoint_every,evals,checkpoints", [
    (7, 3, 2, [3, 6, 7], [2, 3, 4, 6, 7]),
    (5, 10, 10, [5], [5]),
    (4, 1, 4, [1, 2, 3, 4], [1, 2, 3, 4]),
])
def test_cadence(rounds, eval_every, checkpoint_every, evals, checkpoints):
  cadence = policies.Cadence(rounds, eval_every, checkpoint_every)
  assert [r for r in range(1, rounds + 1) if cadence.evaluate_after(r)] == evals
  assert [r for r in range(1, rounds + 1) if cadence.checkpoint_after(r)] == checkpoints


def test_epsilon_budget():
  budget = policies.EpsilonBudget(2.0)
  assert budget.check(5, 2.0) is None
  stop = budget.check(5, 2.5)
  assert stop.reason == policies.TARGET_EPSILON and "round 5" in stop.message
  assert not policies.EpsilonBudget(None).active
  assert policies.EpsilonBudget(None).check(1, 1e9) is None
  assert budget.check(5, 2.5, epsilon_now=1.9) == stop  # Under the target without it.
  assert "ε is already 2.2 > target 2" in budget.check(5, 2.5, epsilon_now=2.2).message
  realized = ledger_lib.RealizedParticipation(
      num_rounds=5, min_separation=3, max_participations=2, participation_histogram=(0, 1, 1),
      num_participants=2, total_participations=3, refused_check_ins=0)
  assert budget.check(5, 2.5, participation=realized).message.endswith(
      "(with it, some client would have taken part in 2 applied rounds, twice only 3 rounds "
      "apart)")
  assert budget.check(5, 2.5, participation=realized, computations=2) == budget.check(
      5, 2.5, participation=realized)
  assert budget.check(5, 2.5, participation=realized, computations=3).message.endswith(
      "; counting the computations not applied (lost in a crash, then computed again) some "
      "client would have been in 3)")
  with pytest.raises(ValueError, match="target_epsilon"):
    policies.EpsilonBudget(-1.0)


def test_weight_projection_checks_shapes():
  projection = policies.WeightProjection(lambda ws: [w[:1] for w in ws])
  with pytest.raises(ValueError, match="project_weights"):
    projection.apply(_Weights([np.zeros(3)], []))
  kept = policies.WeightProjection(lambda ws: [w * 0 for w in ws]).apply(
      _Weights([np.ones(3)], [np.ones(1)]))
  assert isinstance(kept, _Weights) and kept.trainable[0].sum() == 0
  assert kept.non_trainable[0].sum() == 1


def test_stop_signal_installs_and_restores_handlers():
  previous = signal.getsignal(signal.SIGTERM)
  with policies.StopSignal() as stop:
    assert signal.getsignal(signal.SIGTERM) != previous
    signal.raise_signal(signal.SIGTERM)
    assert stop.check(7).reason == policies.SIGNAL
    with pytest.raises(KeyboardInterrupt):  # A second signal kills.
      signal.raise_signal(signal.SIGTERM)
  assert signal.getsignal(signal.SIGTERM) == previous


# ---------------------------------------------------------------------------------------
# Issue #18: empty rounds, one accountant on the progress line, a checkpoint on errors.


class _GappyParticipation(_FakeParticipation):
  """No eligible client in the draws listed in `empty_draws`."""

  def __init__(self, empty_draws, skips=True):
    super().__init__()
    self.empty_draws = set(empty_draws)
    self.scheduler.skips_empty_rounds = skips

  def select_round(self):
    pending = super().select_round()
    if pending.draw in self.empty_draws:
      return _Pending(pending.draw, [], [])
    return pending


def test_an_empty_round_trains_nothing_uses_no_row_and_is_counted():
  training, parts = _loop(rounds=4)
  training.participation = parts["participation"] = _GappyParticipation({2, 3})
  outcome = training.run()
  assert outcome.stopped == policies.COMPLETED and outcome.rounds_done == 4
  assert parts["learner"].calls == 4  # Never called for the two empty draws.
  events = parts["participation"].events
  assert events == [("commit", 1), ("discard", 2), ("discard", 3), ("commit", 4),
                    ("commit", 5), ("commit", 6)]
  assert outcome.empty_rounds == 2 and outcome.report.epsilon == 2.0  # 4 rows, not 6.
  assert any("no eligible clients; skipped" in line for line in parts["outputs"].lines)
  # The console's last word on the streak agrees with the count summary.json gets (#43: the
  # streak's first line said 1 where the summary said 12).
  assert any("2 in a row found no eligible client and were skipped (2 empty in this call)"
             in line for line in parts["outputs"].lines)


def test_where_rows_make_clients_eligible_an_empty_round_runs_noise_only_and_says_so():
  training, parts = _loop(rounds=3)
  training.participation = parts["participation"] = _GappyParticipation({2}, skips=False)
  outcome = training.run()
  assert outcome.rounds_done == 3 and parts["learner"].calls == 3
  assert [e for e, _ in parts["participation"].events] == ["commit"] * 3
  assert outcome.empty_rounds == 1 and outcome.report.epsilon == 1.5
  row = dict(parts["outputs"].train_rows)[2]
  assert row["clients"] == 0 and math.isnan(row["client_work/train/loss"])
  assert any("the update is noise only" in line for line in parts["outputs"].lines)


def test_too_many_empty_rounds_in_a_row_stop_the_run(monkeypatch):
  monkeypatch.setattr(loop, "MAX_CONSECUTIVE_EMPTY_ROUNDS", 3)
  training, parts = _loop(rounds=5)
  training.participation = parts["participation"] = _GappyParticipation({2, 3, 4, 5})
  outcome = training.run()
  assert outcome.stopped == policies.NO_CLIENTS and outcome.rounds_done == 1
  assert "--availability" in outcome.message and outcome.empty_rounds == 3


def test_epsilon_so_far_comes_from_one_accountant_and_never_decreases():
  class TighterReport(_FakeAccountant):
    def report(self, realized):  # The report's method is tighter than the progress bound.
      return None if realized is None else _Report(0.3 * realized)

  training, parts = _loop(rounds=8, eval_every=2)
  training.accountant = TighterReport()
  ticks = iter(range(10 ** 6))  # A progress line after every round.
  training.policies = dataclasses.replace(
      training.policies, clock=policies.ProgressClock(0.5, lambda: float(next(ticks))))
  training.run()
  shown = [float(line.split("eps ")[1].split()[0]) for line in parts["outputs"].lines]
  assert shown == sorted(shown) and shown[-1] == pytest.approx(0.5 * 8)
  assert any("report ε 2.400 (pld)" in line for line in parts["outputs"].lines)
  # The ε-vs-rounds figure plots the progress accountant's ε too: what a line showed for a
  # round is what the file holds for it (here every round is recorded: 8 rounds < 20 points).
  recorded = dict(parts["outputs"].epsilons)
  lines = {int(line.split()[1]): float(line.split("eps ")[1].split()[0])
           for line in parts["outputs"].lines}
  assert sorted(recorded) == list(range(1, 9)) and list(recorded.values()) == sorted(
      recorded.values())
  assert all(recorded[r] == eps for r, eps in lines.items())


def test_epsilon_so_far_rows_follow_the_rounds_not_the_clock():
  """metrics/privacy.csv's rows: 20 evenly spaced rounds and every evaluation, whatever the
  wall clock does, so two runs of one seed write the same file (issue #40)."""
  recorded = []
  for clock in (lambda: 0.0, iter(range(0, 10 ** 8, 100)).__next__):  # Never / always due.
    training, parts = _loop(rounds=60, eval_every=25, checkpoint_every=100,
                            clock=lambda c=clock: float(c()))
    training.run()
    recorded.append([r for r, _ in parts["outputs"].epsilons])
  assert recorded[0] == recorded[1] == sorted({*range(3, 61, 3), 25, 50})
  assert len(parts["outputs"].lines) > len(recorded[1])  # Progress lines on the clock.


class _BrokenLearner(_FakeLearner):
  def __init__(self, fail_at_call):
    super().__init__()
    self.fail_at_call = fail_at_call

  def next(self, datasets):
    if self.calls + 1 == self.fail_at_call:
      raise RuntimeError("data store went away")
    return super().next(datasets)


def test_an_error_checkpoints_the_last_committed_round_and_withdraws_the_failed_one():
  training, parts = _loop(rounds=10, checkpoint_every=100, eval_every=100,
                          learner=_BrokenLearner(fail_at_call=5))
  with pytest.raises(RuntimeError, match="went away"):
    training.run()
  assert parts["checkpoints"] == [4]
  assert parts["participation"].events[-1] == ("withdraw", 5)
  assert any("checkpointed it" in line for line in parts["outputs"].lines)


def test_an_error_right_after_a_checkpoint_writes_no_second_one():
  training, parts = _loop(rounds=10, checkpoint_every=2, eval_every=100,
                          learner=_BrokenLearner(fail_at_call=5))
  with pytest.raises(RuntimeError):
    training.run()
  assert parts["checkpoints"] == [2, 4]


def test_a_checkpoint_that_fails_on_the_way_out_does_not_hide_the_error():
  training, parts = _loop(rounds=10, checkpoint_every=100, eval_every=100,
                          learner=_BrokenLearner(fail_at_call=3))

  def failing_save(round_number):
    raise OSError(28, "No space left on device")

  training._save_checkpoint = failing_save  # pylint: disable=protected-access
  with pytest.raises(RuntimeError, match="went away"):
    training.run()
  assert any("could not be written either" in line and "resumes from round 0" in line
             for line in parts["outputs"].lines)


def test_a_non_private_run_shows_the_same_epsilon_on_every_progress_line():
  class NonPrivate(_FakeAccountant):
    report_accountant = progress_accountant = ""

    def epsilon(self, realized):
      return math.inf

    def report(self, realized):
      return None

  training, parts = _loop(rounds=6, eval_every=2)
  training.accountant = NonPrivate()
  ticks = iter(range(10 ** 6))
  training.policies = dataclasses.replace(
      training.policies, clock=policies.ProgressClock(0.5, lambda: float(next(ticks))))
  training.run()
  shown = {line.split("eps ")[1].split()[0] for line in parts["outputs"].lines}
  assert shown == {"inf"}


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
