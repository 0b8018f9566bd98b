"""Privacy of a training run so far, from the mechanism used and the participation realized.

DP-FTRL (paper 004): ρ = sens² / (2σ²) with sens the mechanism's sensitivity for the rounds run
so far under the *realized* participation of the ledger — the smallest separation between two
participations of any client (b) and the most participations of any client (k) — never the
configured schedule. DP-FedAvg (paper 001): the Poisson-subsampled Gaussian over the rounds run.
The mechanism registry (`registry.py`) picks the accountant of each `--mechanism`.
"""

from __future__ import annotations

import math
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
