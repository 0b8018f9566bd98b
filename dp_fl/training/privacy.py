"""Privacy of a training run so far, from the mechanism used and the participation realized.

DP-FTRL (paper 004): ρ = sens² / (2σ²) with sens the mechanism's sensitivity for the rounds run
so far under the *realized* participation of the ledger — the smallest separation between two
participations of any client (b) and the most participations of any client (k) — never the
configured schedule. DP-FedAvg (paper 001): the Poisson-subsampled Gaussian over the rounds run.
The mechanism registry (`registry.py`) picks the accountant of each `--mechanism`.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional

from dp_fl.accounting import dpfedavg
from dp_fl.accounting import report as report_lib
from dp_fl.participation import ledger as ledger_lib


def participation_from_realized(realized: ledger_lib.RealizedParticipation
                                ) -> Optional[report_lib.Participation]:
  """The (n, b, k) the guarantee covers; None before anyone took part.

  With no client taking part twice, any b >= n describes the schedule; n is used.
  """
  if realized.num_rounds == 0 or realized.max_participations == 0:
    return None
  n = realized.num_rounds
  b = realized.min_separation if realized.min_separation is not None else n
  return report_lib.Participation(n, b, realized.max_participations, source="realized",
                                  clients_seen=realized.num_participants)


Scope = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]


def release_scope(config: Any, sampled: bool = False) -> Scope:
  """(scope, caveats) of a training run's privacy report: what the run releases, what the
  guarantee covers and what it assumes (paper 004, App. C), and what weakens the claim.

  `sampled`: the cohorts are a secret random sample (Poisson; amplification assumes it).
  """
  secret = ("the aggregator's noise seed" + (" and the scheduler's sampling seed" if sampled
                                             else " and the scheduler's seed"))
  scope = (
      ("covered", "The sequence of noised aggregates of the rows of C actually used (one per "
       "applied round), hence every global model, the checkpoints' models and everything "
       "computed from them alone. A round discarded for a non-finite result uses no row of C "
       "and its result is dropped; the ledger and the accounting count applied rounds only."),
      ("released: models and evaluations", "Covered (post-processing). metrics/eval.csv is "
       "computed on the task's held-out data, which this guarantee does not protect; "
       "evaluations are published only for checkpointed states, so a crash never makes a "
       "published result be recomputed with the same noise."),
      ("released: per-round training metrics — NOT covered", "metrics/train.csv and the "
       "tensorboard train/ scalars hold un-noised client statistics: training loss and "
       "accuracy, example and batch counts, clipped / zeroed / non-finite counts, the cohort "
       "size" + (" (under Poisson sampling it reveals how many users were sampled)"
                 if sampled else "") + ". They are computed from the clients' data without "
       "noise: keep them as private as the data; do not publish them."),
      ("decisions on un-noised data — NOT covered", "--on_nonfinite="
       f"{config.on_nonfinite}: stopping or discarding a round is decided on the clients' "
       "un-noised losses and so reveals that some client of that cohort diverged. "
       "--target_epsilon stops on the accountant, which depends on participation only."),
      ("secrets", f"{secret[0].upper() + secret[1:]} are drawn from OS entropy and kept only in "
       "the checkpoints (never in config.json or the logs). Anyone who reads a checkpoint can "
       "regenerate the noise: keep the run directory's checkpoints as secret as the data."
       if not config.noise_seed_is_public else
       f"{secret[0].upper() + secret[1:]} derive from --reproducible_noise_seed, which is "
       "written in config.json (see the caveat)."),
      ("assumed", "A trusted server (central DP) that clips, aggregates and adds the noise as "
       "configured; clients that follow the participation rules (a client that ignores its "
       "timer is refused); deterministic client computation, so a round re-run after a crash "
       "(from the last checkpoint, with the same noise row) reproduces its result bitwise "
       "(tested on CPU) — nothing noised from rounds after the last checkpoint was published."),
  )
  caveats = ()
  if config.noise_seed_is_public:
    caveats = (f"the noise and the client sampling derive from reproducible_noise_seed="
               f"{config.reproducible_noise_seed}, written in config.json: this run is NOT "
               "private against anyone who knows that number (research runs only).",)
  return scope, caveats


class Accountant:
  """ε so far and the App. C report of a run; this base class is the non-private one.

  ε is always an upper bound on the truth: from the exact sensitivity, or from a valid upper
  bound where only a lower bound is known; the decisions of the training loop
  (--target_epsilon) and the run's summary use it.
  """

  progress_accountant = ""  # How `epsilon` bounds ε when it differs from the reports' method.
  report_accountant = ""    # How `report(...).epsilon` is computed, when that differs.

  def report(self, realized: ledger_lib.RealizedParticipation) -> Optional[Any]:
    """The privacy report after the rounds in `realized`; None when nothing is private."""
    del realized
    return None

  def epsilon(self, realized: ledger_lib.RealizedParticipation) -> float:
    """ε at δ so far (0 before anyone took part, inf without privacy)."""
    del realized
    return math.inf


NoPrivacy = Accountant


class MatrixMechanismAccountant(Accountant):
  """DP-FTRL (paper 004, Sec. 3.1): ρ-zCDP of the matrix mechanism under the realized (n, b, k)."""

  def __init__(self, mechanism: Any, noise_multiplier: float, clip_norm: float,
               clients_per_round: int, delta: float, scope: Scope = ((), ())):
    """Args: mechanism (a dp_fl.mechanisms.catalog Mechanism), noise_multiplier σ,
    clip_norm ζ, clients_per_round m, delta, scope ((scope, caveats) from `release_scope`)."""
    self._mechanism = mechanism
    self._sigma = noise_multiplier
    self._clip = clip_norm
    self._m = clients_per_round
    self._delta = delta
    self._scope, self._caveats = scope

  def report(self, realized):
    participation = participation_from_realized(realized)
    if participation is None:
      return None
    return report_lib.matrix_mechanism_report(
        self._mechanism, self._sigma, participation, self._delta, clip_norm=self._clip,
        clients_per_round=self._m, scope=self._scope, caveats=self._caveats)

  def epsilon(self, realized):
    report = self.report(realized)
    return 0.0 if report is None else report.epsilon


class PoissonAccountant(Accountant):
  """DP-FedAvg (paper 001): the Poisson-subsampled Gaussian over the rounds applied.

  Progress lines use the RDP accountant (fast, a valid upper bound); reports the tighter PLD.
  """

  progress_accountant = "RDP"
  report_accountant = "PLD"

  def __init__(self, population: int, expected_clients_per_round: float,
               noise_multiplier: float, clip_norm: float, delta: float,
               scope: Scope = ((), ())):
    """Args: population K, expected_clients_per_round C̃ = qK, noise_multiplier z,
    clip_norm S, delta, scope ((scope, caveats) from `release_scope`)."""
    self._population = population
    self._expected = expected_clients_per_round
    self._z = noise_multiplier
    self._clip = clip_norm
    self._delta = delta
    self._scope, self._caveats = scope

  def report(self, realized):
    if realized.num_rounds == 0:
      return None
    return report_lib.dpfedavg_report(self._population, self._expected, self._z,
                                      realized.num_rounds, self._delta, clip_norm=self._clip,
                                      scope=self._scope, caveats=self._caveats)

  def epsilon(self, realized):
    if realized.num_rounds == 0:
      return 0.0
    return dpfedavg.dpfedavg_epsilon(self._population, self._expected, self._z,
                                     realized.num_rounds, self._delta,
                                     method=dpfedavg.RDP).epsilon


def distributed_scope(config: Any) -> Scope:
  """`release_scope` for a mechanism whose noise the clients add and whose sum only secure
  aggregation sees (cpSGD, paper 000): other secrets and another trust model."""
  scope, caveats = release_scope(config, sampled=False)
  replaced = {
      "covered": (
          "What the server sees each round — the secure sum of the clients' integer messages "
          "(their rotated, quantized updates plus their noise shares) — hence every global "
          "model, the checkpoints' models and everything computed from them alone."),
      "secrets": (
          "Each client's quantization dither and noise share come from that client's own OS "
          "entropy and are never stored; the rotation seed is public randomness (paper 000, "
          "Sec. 3.1). The scheduler's seed " + (
              "derives from --reproducible_noise_seed (see the caveat)."
              if config.noise_seed_is_public else
              "is drawn from OS entropy and kept only in the checkpoints.")),
      "assumed": (
          "Clients that add their own shares and follow the participation rules; secure "
          "aggregation of the integer messages modulo 2^b (in this simulation TFF computes "
          "that sum in the clear, as its test backend does, and nothing wraps). Every computed "
          "round is logged before it runs (releases.jsonl): a round re-run after a crash, or "
          "computed and not applied, draws fresh shares and is charged as a further "
          "participation of every client of it."),
  }
  return tuple((k, replaced.get(k, v)) for k, v in scope), caveats


class BinomialAccountant(Accountant):
  """cpSGD (paper 000): Thm. 1 per round at the smallest cohort, composed over each client's
  realized participations plus every computed round the ledger does not count (the release
  log, `releases_beyond_ledger`)."""

  def __init__(self, protocol: Any, dimension: int, secure_sum_bits: int,
               noise_multiplier: float, delta: float, root_dir: str,
               enforced_separation: int = 1, scope: Scope = ((), ())):
    """Args: protocol (`dp_fl.mechanisms.cpsgd.Protocol`), dimension d' the rotation acts on,
    secure_sum_bits b, noise_multiplier (Gaussian-equivalent, for the report), delta,
    root_dir (its release log), enforced_separation (rounds the scheduler keeps between two
    participations of a client; 1 when it keeps none), scope."""
    self._protocol = protocol
    self._dimension = dimension
    self._bits = secure_sum_bits
    self._sigma = noise_multiplier
    self._delta = delta
    self._root_dir = root_dir
    self._separation = max(1, int(enforced_separation))
    self._scope, self._caveats = scope
    self._unlogged_cache: tuple[Any, tuple[int, Optional[int]]] = (None, (0, None))

  def _unlogged(self, realized: ledger_lib.RealizedParticipation) -> tuple[int, Optional[int]]:
    """(participations per client the ledger does not count, their smallest cohort): a client
    is in at most one of the extra releases of a round, and in rounds at least the enforced
    separation apart. The log is read again only when it or the ledger changed (this runs
    every round)."""
    path = os.path.join(self._root_dir, RELEASE_LOG)
    key = (os.path.getsize(path) if os.path.exists(path) else 0, realized.num_rounds)
    if key != self._unlogged_cache[0]:
      extra, smallest = releases_beyond_ledger(self._root_dir, realized.num_rounds)
      span = max(extra) - min(extra) + 1 if extra else 0
      value = ((max(extra.values()) * -(-span // self._separation), smallest) if extra
               else (0, None))
      self._unlogged_cache = (key, value)
    return self._unlogged_cache[1]

  def guarantee(self, realized: ledger_lib.RealizedParticipation):
    from dp_fl.accounting import cpsgd  # pylint: disable=g-import-not-at-top
    unlogged, smallest = self._unlogged(realized)
    cohorts = [c for c in (realized.min_cohort, smallest) if c]
    p = self._protocol
    return cpsgd.composed_epsilon(
        p.num_levels, p.num_trials, p.p, p.x_max, p.clip_norm, self._dimension,
        min(cohorts) if cohorts else 1, realized.max_participations + unlogged, self._delta)

  def report(self, realized):
    from dp_fl.accounting import report as report_lib  # pylint: disable=g-import-not-at-top
    if realized.num_rounds == 0 or realized.max_participations == 0:
      return None
    g = self.guarantee(realized)
    p = self._protocol
    notes = ()
    if g.round_guarantee is None:
      notes = ("Thm. 1's condition N·p·(1−p) >= max(23 log(10d/δ₀), 2Δ∞) fails for this "
               "cohort and m: no finite ε is claimed. Use more trials (--cpsgd_trials, or a "
               "larger --noise_multiplier) or larger cohorts.",)
    return report_lib.BinomialPrivacyReport(
        mechanism="cpsgd", num_levels=p.num_levels, num_trials=p.num_trials, p=p.p,
        x_max=p.x_max, clip_norm=p.clip_norm, dimension=self._dimension, cohort=g.cohort,
        participations=g.participations,
        replayed_participations=self._unlogged(realized)[0],
        rounds=realized.num_rounds, epsilon=g.epsilon, delta=self._delta,
        round_epsilon=(g.round_guarantee.epsilon if g.round_guarantee else math.inf),
        round_delta=g.round_delta, composition=g.composition,
        bits_per_coordinate=g.bits_per_coordinate, secure_sum_bits=self._bits,
        noise_multiplier=self._sigma, notes=notes, scope=self._scope,
        caveats=self._caveats)

  def epsilon(self, realized):
    if realized.num_rounds == 0 or realized.max_participations == 0:
      return 0.0
    return self.guarantee(realized).epsilon


RELEASE_LOG = "releases.jsonl"
"""For mechanisms whose every computed round is a release (cpSGD: the server sees each round's
secure sum, and a re-computed round draws fresh shares): one line per round computed, written
and synced before the round runs — across crashes, resumes and restarts of the run directory."""


def record_release(root_dir: str, round_number: int, cohort: int) -> None:
  """Logs (and syncs) that round `round_number` is about to be computed with `cohort` clients."""
  with open(os.path.join(root_dir, RELEASE_LOG), "a", encoding="utf-8") as f:
    f.write(json.dumps({"round": int(round_number), "cohort": int(cohort)}) + "\n")
    f.flush()
    os.fsync(f.fileno())


def releases_beyond_ledger(root_dir: str, rounds_applied: int
                           ) -> tuple[dict[int, int], Optional[int]]:
  """({round: releases the ledger does not count}, smallest cohort of those releases).

  Round r was computed `count_r` times (the log); the ledger counts it once if r <=
  `rounds_applied`. Every other computation of it — before a crash, a round that was not
  applied, a fresh start over a run that crashed before its first checkpoint — was seen by the
  server all the same.
  """
  path = os.path.join(root_dir, RELEASE_LOG)
  if not os.path.exists(path):
    return {}, None
  counts: dict[int, int] = {}
  smallest_cohort: dict[int, int] = {}  # Of each round's non-empty computations.
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        event = json.loads(line)
        r, cohort = event["round"], event["cohort"]
        counts[r] = counts.get(r, 0) + 1
        if cohort > 0:
          smallest_cohort[r] = min(smallest_cohort.get(r, cohort), cohort)
  extra = {r: count - (r <= rounds_applied) for r, count in counts.items()
           if count - (r <= rounds_applied) > 0}
  cohorts = [smallest_cohort[r] for r in extra if r in smallest_cohort]
  return extra, (min(cohorts) if cohorts else None)
