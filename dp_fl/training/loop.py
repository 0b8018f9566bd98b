"""The round loop as program logic: collaborators and policies passed in, no TFF in here.

`program.run` builds the parts (learning process, participation, accountant, checkpoints,
outputs) and hands them to `TrainingLoop`, which only sequences them (paper 004, Alg. 1;
paper 001, Alg. 1), as TFF's `learning/programs/training_program_logic.py` sequences its
injected managers. One round:

1. `RoundLimit` / ε budget (`EpsilonBudget`, asked with ε *as if* the selected round were
   applied) may stop the run before it starts; a withdrawn selection leaves no trace.
2. The learner runs the round on the selected clients' data.
3. `NonfinitePolicy` judges the result: apply, discard (no row of C, nothing in the
   ledger, the next draw is fresh) or stop (not applied; the last checkpoint is intact).
4. Applied: the learner's state and the ledger advance, `WeightProjection` runs, metrics
   are written; `Cadence` decides checkpoint (always before an evaluation is published)
   and evaluation (with the privacy report of the participation realized so far).
5. `StopSignal` ends the run after the round on SIGTERM/SIGINT.

The collaborators are duck-typed (`tests/training/loop_test.py` drives the loop with fakes):

    learner        next(datasets) -> (result, flat_metrics); commit(result);
                   model_weights(); set_model_weights(weights)
    participation  select_round() -> pending (.selection, .client_ids, .datasets,
                   .clients_with_data);
                   commit/discard/withdraw(pending); .scheduler (realized(),
                   realized_if(selection), discarded_rounds)
    accountant     epsilon(realized); report(realized) (None when non-private);
                   report_accountant, progress_accountant (names shown in progress lines)
    outputs        train / evaluation / privacy (round, values); progress(line)
    meter          line(round, epsilon, extra="", accountant="") -> str
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, Callable, Iterator, Optional

from dp_fl.participation import base as participation_base
from dp_fl.training import policies as policies_lib

# Rounds in a row with no eligible client before the run stops (a night of the diurnal
# availability at 0.2 h rounds is ≈ 40; thousands mean the population cannot serve a round).
MAX_CONSECUTIVE_EMPTY_ROUNDS = participation_base.MAX_CONSECUTIVE_EMPTY_ROUNDS


STAGES = ("data", "training", "accounting", "checkpoint", "evaluation")
"""Where a call's wall time goes (`StageTimes`): selecting the round and building its client
datasets; the learner's round and its commit (client work, aggregation and noise, weight
projection); ε for the budget, the progress lines and the reports; checkpoints; evaluation."""


class StageTimes:
  """Wall seconds the loop spent in each of `STAGES` in this call (issue #43: summary.json's
  `seconds_by_stage`, `scripts/bench_paper_scale`)."""

  def __init__(self, clock: Callable[[], float] = time.perf_counter):
    self.seconds = dict.fromkeys(STAGES, 0.0)
    self._clock = clock

  @contextlib.contextmanager
  def __call__(self, stage: str) -> Iterator[None]:
    start = self._clock()
    try:
      yield
    finally:
      self.seconds[stage] += self._clock() - start


@dataclasses.dataclass
class Policies:
  """The loop's decisions (dp_fl.training.policies), one object each."""
  cadence: policies_lib.Cadence
  budget: policies_lib.EpsilonBudget
  nonfinite: policies_lib.NonfinitePolicy
  projection: policies_lib.WeightProjection
  limit: policies_lib.RoundLimit
  signal: policies_lib.StopSignal
  clock: policies_lib.ProgressClock


@dataclasses.dataclass(frozen=True)
class Outcome:
  """How the loop ended: rounds applied, why it stopped, the last evaluation and report."""
  rounds_done: int
  stopped: str
  message: str
  eval_metrics: dict[str, float]
  report: Optional[Any]
  empty_rounds: int = 0  # Rounds skipped in this call because no client could take part.
  seconds_by_stage: dict[str, float] = dataclasses.field(default_factory=dict)  # StageTimes


class TrainingLoop:
  """Runs rounds `rounds_done + 1 .. rounds` (see the module docstring)."""

  def __init__(self, *, rounds: int, rounds_done: int, learner: Any, participation: Any,
               accountant: Any, save_checkpoint: Callable[[int], Any],
               evaluate: Callable[[], dict[str, float]], outputs: Any, meter: Any,
               policies: Policies,
               learning_rate_at: Callable[[int], float] = lambda r: float("nan"),
               before_release: Optional[Callable[[int, int], None]] = None,
               after_apply: Optional[Callable[[int, Any], None]] = None):
    """Args:
      rounds: the run's total rounds.
      rounds_done: rounds already applied (a resumed run's checkpoint round).
      learner, participation, accountant, outputs, meter: see the module docstring.
      save_checkpoint: writes a checkpoint after the given number of applied rounds.
      evaluate: metrics of the current global model on held-out data.
      policies: the loop's decisions.
      learning_rate_at: the server learning rate of a 0-based round (written as a metric).
      before_release: called with (round, the scheduler's client indices) before a round is
        computed — for mechanisms whose every computed round is a release
        (`privacy.record_release`).
      after_apply: called with (round, the scheduler's client indices) once a round is
        applied and its model released, before its checkpoint — e.g. the audit's canary
        scores (`canaries.CanaryScores.observe`), which the checkpoint then holds.
    """
    self.rounds = rounds
    self.rounds_done = rounds_done
    self.learner = learner
    self.participation = participation
    self.accountant = accountant
    self._save_checkpoint = save_checkpoint
    self._evaluate = evaluate
    self.outputs = outputs
    self.meter = meter
    self.policies = policies
    self.learning_rate_at = learning_rate_at
    self.before_release = before_release
    self.after_apply = after_apply
    self.eval_metrics: dict[str, float] = {}
    self.evaluated_round: Optional[int] = None
    self.last_checkpoint = rounds_done
    self.discards_at_checkpoint = self.discarded()
    self.empty_rounds = 0  # In this call.
    self.consecutive_empty = 0
    self.timed = StageTimes()

  def discarded(self) -> int:
    return self.participation.scheduler.discarded_rounds

  def run(self) -> Outcome:
    """Rounds until the end or a stop; then the final checkpoint, report and evaluation."""
    stop = None
    with self.policies.signal:
      try:
        while self.rounds_done < self.rounds and stop is None:
          stop = self.policies.limit.check(self.rounds_done) or self.round()
      except BaseException:
        self.checkpoint_on_error()
        raise
    if self.last_checkpoint != self.rounds_done or (
        self.discarded() != self.discards_at_checkpoint):
      self.checkpoint()  # Rounds, or discards (they move the scheduler on), since the last.
    report = self.refresh_privacy() if self.rounds_done else None
    if self.rounds_done and self.evaluated_round != self.rounds_done:
      self.evaluate()
    stop = stop or policies_lib.Stop(policies_lib.COMPLETED, "")
    return Outcome(self.rounds_done, stop.reason, stop.message, self.eval_metrics, report,
                   self.empty_rounds, dict(self.timed.seconds))

  def round(self) -> Optional[policies_lib.Stop]:
    """One round (steps 1-5 of the module docstring); a `Stop` ends the run."""
    with self.timed("data"):
      pending = self.participation.select_round()
    next_round = self.rounds_done + 1
    if not pending.client_ids and self.participation.scheduler.skips_empty_rounds:
      return self.skip_empty_round(pending, next_round)
    if self.policies.budget.active:
      with self.timed("accounting"):
        stop = self.budget_check(next_round, pending)
      if stop is not None:
        self.participation.withdraw(pending)
        return stop
    if self.before_release is not None:
      self.before_release(next_round, pending.selection.client_ids)
    try:
      with self.timed("training"):
        result, metrics = self.learner.next(pending.datasets)
    except BaseException:
      # Nothing of the round was applied (nor released, unless `before_release` says a
      # computed round is): its selection is withdrawn, so a checkpoint written on the way
      # out records only committed rounds.
      self.participation.withdraw(pending)
      raise
    # Clients without data of their own (the audit's canaries) report no examples: a round
    # of them alone has not diverged.
    verdict, message = self.policies.nonfinite.judge(next_round, metrics,
                                                     pending.clients_with_data)
    if verdict is policies_lib.Verdict.STOP:
      self.participation.withdraw(pending)
      return policies_lib.Stop(policies_lib.NONFINITE, message)
    if verdict is policies_lib.Verdict.DISCARD:
      # Not applied: the aggregator state (the row of C) does not advance, and the ledger
      # records nothing; the next selection is a fresh draw for the same row.
      self.participation.discard(pending)
      self.outputs.progress(message)
      return self.policies.nonfinite.give_up()
    self.apply(result, pending, metrics)
    return self.policies.signal.check(self.rounds_done)

  def budget_check(self, next_round: int, pending: Any) -> Optional[policies_lib.Stop]:
    """The ε budget asked as if `pending` were applied (step 1 of the module docstring)."""
    realized = self.participation.scheduler.realized_if(pending.selection)
    stop = self.policies.budget.check(next_round, self.accountant.epsilon(realized),
                                      participation=realized)
    if stop is None:
      return None
    # The progress bound (e.g. RDP) may be looser than the report's (PLD): the budget caps
    # the ε the run reports, so the report's figure decides (a σ calibrated with PLD).
    report = self.accountant.report(realized)
    now = self.participation.scheduler.realized()
    now_report = self.accountant.report(now)
    return self.policies.budget.check(
        next_round, self.accountant.epsilon(realized) if report is None else report.epsilon,
        participation=realized,
        epsilon_now=self.accountant.epsilon(now) if now_report is None else now_report.epsilon,
        # Reports of runs that charge every computed round (distributed DP) count them.
        computations=getattr(report, "participations", None))

  def skip_empty_round(self, pending: Any, next_round: int) -> Optional[policies_lib.Stop]:
    """No client could take part (e.g. none available at night): nothing is trained.

    Running the round would apply a noise-only update to the model. It is skipped as a
    discarded round is: the scheme moves on (simulated time passes) but no row of C is used
    and the ledger records nothing, so the privacy accounting is unchanged (issue #18).
    """
    self.participation.discard(pending)
    self.empty_rounds += 1
    self.consecutive_empty += 1
    if self.consecutive_empty == 1 or self.policies.clock.due():
      self.outputs.progress(
          f"round {next_round}: no eligible clients; skipped ({self.empty_rounds} empty so "
          "far; they train nothing and use no privacy)")
      self.policies.clock.mark()
    if self.consecutive_empty >= MAX_CONSECUTIVE_EMPTY_ROUNDS:
      return policies_lib.Stop(policies_lib.NO_CLIENTS, (
          f"stopped: {self.consecutive_empty} rounds in a row found no eligible client; "
          "check --availability, --timer_hours and --clients_per_round against the "
          "population"))
    return None

  def apply(self, result: Any, pending: Any, metrics: dict[str, Any]) -> None:
    """Commits a good round, projects the weights, writes metrics, checkpoints, evaluates."""
    # The learner's state and the ledger advance together, before anything that can fail:
    # a round whose model exists is always in the ledger.
    with self.timed("training"):
      self.learner.commit(result)
    self.participation.commit(pending)
    if self.consecutive_empty > 1:  # The streak's first line gave only its first round.
      self.outputs.progress(
          f"rounds before {self.rounds_done + 1}: {self.consecutive_empty} in a row found no "
          f"eligible client and were skipped ({self.empty_rounds} empty in this call)")
    self.consecutive_empty = 0
    if self.policies.projection.active:
      with self.timed("training"):
        self.learner.set_model_weights(
            self.policies.projection.apply(self.learner.model_weights()))
    self.rounds_done += 1
    if self.after_apply is not None:
      self.after_apply(self.rounds_done, pending.selection.client_ids)
    if not pending.client_ids:
      # Run as the scheme requires (base.Scheduler.skips_empty_rounds): the update is the
      # mechanism's noise alone. Its client metrics are no measurement (TFF sums nothing).
      self.empty_rounds += 1
      metrics = {k: (float("nan") if k.startswith("client_work/") else v)
                 for k, v in metrics.items()}
      self.outputs.progress(f"round {self.rounds_done}: no client took part; the update is "
                            f"noise only ({self.empty_rounds} such rounds in this call)")
    metrics.update(clients=len(pending.client_ids), shortfall=pending.selection.shortfall,
                   discarded_rounds=self.discarded(),
                   server_learning_rate=self.learning_rate_at(self.rounds_done - 1))
    self.outputs.train(self.rounds_done, metrics)
    cadence = self.policies.cadence
    evaluate = cadence.evaluate_after(self.rounds_done)
    record = evaluate or cadence.record_epsilon_after(self.rounds_done)
    due = evaluate or self.policies.clock.due()  # The file's rows follow the rounds; the
    epsilon = None                               # progress lines, the wall clock.
    if record or due:
      epsilon = self.progress_epsilon(evaluate)
      if record:
        # Before the checkpoint, as the round's metrics: a crash right after the checkpoint
        # resumes past this round, and its row would be missing from privacy.csv.
        self.outputs.epsilon_so_far(self.rounds_done, epsilon)
    if cadence.checkpoint_after(self.rounds_done):
      # Before an evaluation is published: a crash after it resumes from this state, so
      # the published result is never recomputed (with the same noise) on resume.
      self.checkpoint()
    if evaluate:
      self.evaluate()
      report = self.refresh_privacy()
      extra = "eval " + ", ".join(f"{k} {v:.4f}" for k, v in self.eval_metrics.items())
      if report is not None and self.accountant.report_accountant:
        # "ε so far" stays the progress accountant's (one method on every line, so it never
        # goes down as rounds go up); the report's tighter figure is shown beside it.
        extra = (f"report ε {report.epsilon:.3f} ({self.accountant.report_accountant})  "
                 + extra)
      self.outputs.progress(self.meter.line(
          self.rounds_done, epsilon, extra, self.accountant.progress_accountant))
      self.policies.clock.mark()
    elif due:
      self.outputs.progress(self.meter.line(
          self.rounds_done, epsilon, accountant=self.accountant.progress_accountant))
      self.policies.clock.mark()

  def progress_epsilon(self, evaluation: bool) -> float:
    """The ε of a progress line and of privacy.csv: the progress accountant's; at an
    evaluation of a run whose report has no separate method, the report's (the same figure
    the report then states)."""
    if evaluation and not self.accountant.report_accountant:
      with self.timed("accounting"):
        report = self.accountant.report(self.participation.scheduler.realized())
      if report is not None:
        return report.epsilon
    return self.epsilon_so_far()

  def checkpoint_on_error(self) -> None:
    """On an error exit: a checkpoint of the last committed round, if it has none yet.

    A failure to write it (e.g. the disk that caused the error) is reported, not raised:
    the original error is what the user must see.
    """
    if self.last_checkpoint == self.rounds_done and (
        self.discarded() == self.discards_at_checkpoint):
      return
    try:
      self.checkpoint()
      self.outputs.progress(f"error after round {self.rounds_done}: checkpointed it; rerun "
                            "the same command to resume from there")
    except Exception as e:  # pylint: disable=broad-except
      self.outputs.progress(f"error after round {self.rounds_done}, and its checkpoint "
                            f"could not be written either ({type(e).__name__}: {e}); the "
                            f"run resumes from round {self.last_checkpoint}")

  def checkpoint(self) -> None:
    self.discards_at_checkpoint = self.discarded()
    with self.timed("checkpoint"):
      self._save_checkpoint(self.rounds_done)
    self.last_checkpoint = self.rounds_done

  def evaluate(self) -> None:
    with self.timed("evaluation"):
      self.eval_metrics = self._evaluate()
    self.outputs.evaluation(self.rounds_done, self.eval_metrics)
    self.evaluated_round = self.rounds_done

  def epsilon_so_far(self) -> float:
    """The progress accountant's ε of the rounds applied."""
    with self.timed("accounting"):
      return self.accountant.epsilon(self.participation.scheduler.realized())

  def refresh_privacy(self) -> Optional[Any]:
    with self.timed("accounting"):
      report = self.accountant.report(self.participation.scheduler.realized())
    if report is not None:
      self.outputs.privacy(self.rounds_done, report)
    return report
