"""Privacy of a training run so far, from the mechanism used and the participation realized.

DP-FTRL (paper 004): ρ = sens² / (2σ²) with sens the mechanism's sensitivity for the rounds run
so far under the *realized* participation of the ledger — the smallest separation between two
participations of any client (b) and the most participations of any client (k) — never the
configured schedule. DP-FedAvg (paper 001): the Poisson-subsampled Gaussian over the rounds run.
The mechanism registry (`registry.py`) picks the accountant of each `--mechanism`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Optional, Sequence

import numpy as np

from dp_fl.accounting import adaptive_clipping
from dp_fl.accounting import dpfedavg
from dp_fl.accounting import report as report_lib
from dp_fl.participation import ledger as ledger_lib
from dp_fl.training import runtimes


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
  if getattr(config, "audit_canaries", 0):
    scope += (("audit canaries", f"{config.audit_canaries} canary clients (--audit_canaries) "
               "joined the population and were scheduled by the same rules as every client; "
               "each sends the clip norm times its secret random direction when its secret "
               "coin inserted it, and nothing otherwise (dp_fl/training/canaries.py). They are "
               "clients of the ledger under their own indices, so the accounted ε covers the "
               "population with them. The empirical section below is computed from the "
               "released models alone and publishes the canaries' coins and scores (not "
               "their secret, which is in the checkpoints and in the inserted canaries' "
               "client inputs)."),)
  if getattr(config.mechanism_settings, "adaptive_clipping", False):
    scope += (("adaptive clip norm", "The clip norm of round t is ζ₀ = --clip_norm moved by the "
               "noised fractions of unclipped updates of the earlier rounds (Andrew et al. "
               "2021; the train.csv columns clip_norm and unclipped_fraction_noised): those "
               "fractions are released and covered — the accounted ε composes their noise "
               "with the updates' — and the round's noise is scaled by its clip norm. The "
               "un-noised clipped_count / clipped_fraction columns remain NOT covered."),)
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
               clients_per_round: int, delta: float, scope: Scope = ((), ()),
               clip_estimator: Any = None):
    """Args: mechanism (a dp_fl.mechanisms.catalog Mechanism), noise_multiplier σ,
    clip_norm ζ, clients_per_round m, delta, scope ((scope, caveats) from `release_scope`),
    clip_estimator (the adaptive clip norm's `adaptive_clipping.ClipEstimator`, composed
    for the realized k; None for a fixed clip norm)."""
    self._clip_estimator = clip_estimator
    self._mechanism = mechanism
    self._sigma = noise_multiplier
    self._clip = clip_norm
    self._m = clients_per_round
    self._delta = delta
    self._scope, self._caveats = scope
    self._last: Optional[tuple[Any, Any]] = None  # (participation, its report)

  def report(self, realized):
    """The report for the realized (n, b, k); the last one is kept, so the budget check
    before a round and the progress line after it compute the sensitivity once (issue #43:
    BandMF's exact search with b < bands is ≈ 0.9 s at n = 2052)."""
    participation = participation_from_realized(realized)
    if participation is None:
      return None
    if self._last is not None and self._last[0] == participation:
      return self._last[1]
    report = report_lib.matrix_mechanism_report(
        self._mechanism, self._sigma, participation, self._delta, clip_norm=self._clip,
        clients_per_round=self._m, scope=self._scope, caveats=self._caveats,
        clip_estimator=self._clip_estimator)
    self._last = (participation, report)
    return report

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
               scope: Scope = ((), ()), clip_estimator: Any = None,
               update_noise_multiplier: Optional[float] = None):
    """Args: population K, expected_clients_per_round C̃ = qK, noise_multiplier z (with
    adaptive clipping the effective z of the updates' z_Δ = `update_noise_multiplier` and
    the counts of `clip_estimator`), clip_norm S, delta, scope ((scope, caveats) from
    `release_scope`)."""
    self._clip_estimator = clip_estimator
    self._update_z = update_noise_multiplier
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
                                      scope=self._scope, caveats=self._caveats,
                                      clip_estimator=self._clip_estimator,
                                      update_noise_multiplier=(
                                          self._update_z if self._clip_estimator else None))

  def epsilon(self, realized):
    if realized.num_rounds == 0:
      return 0.0
    return dpfedavg.dpfedavg_epsilon(self._population, self._expected, self._z,
                                     realized.num_rounds, self._delta,
                                     method=dpfedavg.RDP).epsilon


def distributed_scope(config: Any, mechanism: str = "cpsgd") -> Scope:
  """`release_scope` for a mechanism whose noise the clients add and whose sum of updates only
  secure aggregation sees (cpSGD, paper 000; `ddgauss`, `skellam`: TFF's
  DistributedDpSumFactory): other secrets, another trust model, and every other quantity the
  server receives named (un-noised counts; with --workers, each worker's partial sum,
  `worker_partials_scope`)."""
  scope, caveats = release_scope(config, sampled=False)
  cpsgd = mechanism == "cpsgd"
  scheduler = ("The scheduler's seed " + (
      "derives from --reproducible_noise_seed (see the caveat)."
      if config.noise_seed_is_public else
      "is drawn from OS entropy and kept only in the checkpoints."))
  counted = ("how many rotated coordinates were clipped to ±X_max "
             "(secure_sum/coordinates_clipped)" if cpsgd else
             "TFF's distributed_dp measurements (the public clip norm, scale, noise scale and "
             "padded dimension, and the number of clients)")
  replaced = {
      "covered": (
          "The secure sum of the clients' integer messages each round (their rotated, "
          "quantized updates plus their noise shares) — the only quantity the server receives "
          "that is computed from the clients' updates, and the only noised one — hence every "
          "global model, the checkpoints' models and everything computed from them alone. It "
          "is not all the server receives: the entries marked NOT covered name the rest."),
      "released: per-round training metrics — NOT covered": (
          "With every round's secure sum the server receives, un-noised and as plain sums "
          "(not secure ones): the cohort size (clients), how many updates were "
          + ("clipped to D (clipped_count), " if cpsgd else "")
          + "zeroed for a norm above the zeroing norm (zeroed_count) or for non-finite "
          f"entries (nonfinite_count), {counted}, and the clients' training metrics (loss, "
          "accuracy, example and batch counts); metrics/train.csv and the tensorboard train/ "
          "scalars hold them. They are computed from the clients' data without noise, so the "
          "guarantee does not cover them, against the server either: keep them as private as "
          "the data; do not publish them. The secure sum's bounds are checked without "
          "releasing any client's values (one bit per round: whether some value exceeded its "
          "bound, false in a correct run)."),
      "secrets": (
          "Each client's quantization dither and noise share come from that client's own OS "
          "entropy and are never stored; the rotation seed is public randomness (paper 000, "
          "Sec. 3.1). " + scheduler if cpsgd else
          "Each client's noise share comes from its own randomness, never stored: the "
          "discrete Gaussian's sampler from unseeded TensorFlow random ops, the Skellam "
          "sampler from a seed drawn from OS entropy each call (dp_fl replaces "
          "tensorflow_privacy's clock-seeded one). TFF seeds the rotation and the stochastic "
          "rounding from the clock: public randomness, which the guarantee does not need "
          "secret (the sensitivity bounds every rounding: TFF's worst case at β = 0, "
          "enforced by redrawing at β > 0). "
          + scheduler),
      "assumed": (
          "Clients that add their own shares and follow the participation rules; secure "
          "aggregation of the integer messages modulo 2^b (in this simulation TFF computes "
          "that sum in the clear, as its test backend does, and nothing wraps). " if cpsgd else
          "Clients that add their own shares and follow the participation rules; secure "
          "aggregation of the B-bit integer messages (TFF's federated_secure_sum_bitwidth, "
          "reduced modulo 2^B on the server; in this simulation the sum is computed in the "
          "clear, as TFF's test backend does; a wrap modulo 2^B costs accuracy, not privacy). "
      ) + (
          "Every computed round is logged before it runs (releases.jsonl): a round re-run "
          "after a crash, or computed and not applied, draws fresh shares and is charged as a "
          "further participation of every client of it."),
  }
  scope = tuple((k, replaced.get(k, v)) for k, v in scope)
  workers = runtimes.remote_workers(config)
  if workers is not None:
    scope += (worker_partials_scope(config),)
    caveats += (
        f"--workers={workers}: the training process receives each worker's sum of its "
        "clients' integer messages, which carries only those clients' noise shares; the ε "
        "holds for the cohort's sum, i.e. against a server that sees the partials only "
        "combined (see 'released to this process by each worker').",)
  return scope, caveats


def worker_partials_scope(config: Any) -> tuple[str, str]:
  """The scope entry of what each remote worker returns to the training process under a
  distributed-DP mechanism (`dp_fl/execution/remote_workers.py`)."""
  from dp_fl.execution import remote_workers  # pylint: disable=g-import-not-at-top
  least = remote_workers.MIN_CLIENTS_PER_SECURE_PARTIAL
  return (
      "released to this process by each worker — NOT covered",
      f"With --workers={runtimes.remote_workers(config)} each round's cohort of c clients is split in "
      f"contiguous chunks, one per worker, of at least {least} clients each (fewer workers "
      f"are used when c < {least} × workers, and a cohort of one goes to one worker). Each "
      "worker returns to the training process the sum over its chunk of the clients' integer "
      "messages, the sums of their un-noised counts and training metrics, and one bit "
      "(whether some client's secure-sum input exceeded its bound); the values' maxima are "
      "not sent. A worker's sum carries only its chunk's noise shares (c_w of the c): the ε "
      "of this report is for the whole cohort's sum and treats the training process as the "
      "secure aggregator, which combines the partials and stores, logs and publishes none "
      "of them. Against anyone who reads a partial — the training process's memory, the "
      "network to the workers (plaintext unless --worker_tls_ca_cert), a worker — a "
      "client's guarantee is that of the noise shares of its chunk of c_w clients "
      "alone, far weaker than the ε stated; the workers also run the clients and so see "
      "each client's data and message (docs/DISTRIBUTED.md).")


class _ComputedRoundsAccountant(Accountant):
  """A distributed-DP accountant: every computed round is a release (`ReleaseLog`)."""

  _log: "ReleaseLog"

  def _charge(self, realized: ledger_lib.RealizedParticipation) -> ReleaseCharge:
    """The release log's charge for `realized` (a look-ahead's pending round included),
    completed with the ledger: `participations`, the most computations of any client, never
    below the ledger's count; `smallest_cohort`, the fewest clients of any computation,
    applied or lost (1 before any)."""
    pending = realized.pending_clients
    applied = realized.num_rounds - (pending is not None)
    charge = self._log.charge(applied, pending)
    bound = realized.max_participations + charge.beyond_ledger
    participations = (bound if charge.participations is None
                      else max(charge.participations, realized.max_participations))
    cohorts = [c for c in (realized.min_cohort, charge.smallest_cohort) if c]
    return dataclasses.replace(charge, participations=participations,
                               smallest_cohort=min(cohorts) if cohorts else 1)


class BinomialAccountant(_ComputedRoundsAccountant):
  """cpSGD (paper 000): the Binomial mechanism's Rényi curve per round at the smallest cohort
  (`dp_fl.accounting.cpsgd`), composed over the most computations of any client — applied
  rounds and every computation the ledger does not count, client by client from the release
  log (`ReleaseLog.charge`)."""

  def __init__(self, protocol: Any, dimension: int, secure_sum_bits: int,
               noise_multiplier: float, delta: float, root_dir: str,
               scope: Scope = ((), ())):
    """Args: protocol (`dp_fl.mechanisms.cpsgd.Protocol`), dimension d' the rotation acts on,
    secure_sum_bits b, noise_multiplier (Gaussian-equivalent, for the report), delta,
    root_dir (its release log), scope."""
    self._protocol = protocol
    self._dimension = dimension
    self._bits = secure_sum_bits
    self._sigma = noise_multiplier
    self._delta = delta
    self._log = ReleaseLog(root_dir)
    self._scope, self._caveats = scope

  def guarantee(self, charge: ReleaseCharge):
    """The composed guarantee of `charge` (`_charge`: k and the smallest cohort)."""
    from dp_fl.accounting import cpsgd  # pylint: disable=g-import-not-at-top
    p = self._protocol
    return cpsgd.composed_epsilon(
        p.num_levels, p.num_trials, p.p, p.x_max, p.clip_norm, self._dimension,
        charge.smallest_cohort, charge.participations, self._delta)

  def report(self, realized):
    from dp_fl.accounting import report as report_lib  # pylint: disable=g-import-not-at-top
    if realized.num_rounds == 0 or realized.max_participations == 0:
      return None
    charge = self._charge(realized)
    g = self.guarantee(charge)
    p = self._protocol
    notes = ()
    if not math.isfinite(g.epsilon):
      notes = ("No finite ε for this cohort and m (too few Binomial trials per coordinate "
               "for the largest shift Eq. 10 allows): no privacy is claimed. Use more trials "
               "(--cpsgd_trials, or a larger --noise_multiplier) or larger cohorts.",)
    return report_lib.BinomialPrivacyReport(
        mechanism="cpsgd", num_levels=p.num_levels, num_trials=p.num_trials, p=p.p,
        x_max=p.x_max, clip_norm=p.clip_norm, dimension=self._dimension, cohort=g.cohort,
        participations=g.participations,
        replayed_participations=charge.beyond_ledger,
        rounds=realized.num_rounds, epsilon=g.epsilon, delta=self._delta,
        round_epsilon=g.round_epsilon, round_delta=self._delta, composition=g.composition,
        bits_per_coordinate=g.bits_per_coordinate, secure_sum_bits=self._bits,
        noise_multiplier=self._sigma, notes=notes, scope=self._scope,
        caveats=self._caveats)

  def epsilon(self, realized):
    if realized.num_rounds == 0 or realized.max_participations == 0:
      return 0.0
    return self.guarantee(self._charge(realized)).epsilon


class DistributedDpAccountant(_ComputedRoundsAccountant):
  """The distributed discrete Gaussian / Skellam (`dp_fl.aggregators.distributed_dp`): the
  setting's Rényi curve per round for sums of between the smallest realized cohort and m
  shares (Prop. 14 of arXiv:2102.06387 needs both ends: τ grows with the shares), between
  zero-out neighbours (DP-FTRL's adjacency in dp_fl: a client's update replaced by zeros,
  which TFF's rotation and rounding keep zero; its sensitivity is TFF's bound on one client's
  rounded vector, not twice it as for replace-one), composed over the most computations of
  any client: applied rounds and every computation the ledger does not count
  (`ReleaseLog.charge`, as cpSGD's)."""

  def __init__(self, setting: Any, clip_norm: float, dimension: int, clients_per_round: int,
               delta: float, root_dir: str, scope: Scope = ((), ())):
    """Args: setting (`distributed_dp.Setting` of one round of m clients), clip_norm c,
    dimension d (the model's parameters), clients_per_round m (the most shares of a round:
    the aggregator refuses more), delta, root_dir (its release log), scope."""
    self._setting = setting
    self._clip = clip_norm
    self._dimension = dimension
    self._most = clients_per_round
    self._delta = delta
    self._log = ReleaseLog(root_dir)
    self._scope, self._caveats = scope

  def guarantee(self, charge: ReleaseCharge) -> tuple[float, float, float]:
    """(ε, order, τ) of `charge` (`_charge`): every client's computations, lost ones included."""
    return self._setting.composed_epsilon(charge.smallest_cohort, self._most,
                                          charge.participations, self._delta,
                                          adaptive_clipping.ZERO_OUT)

  def report(self, realized):
    if realized.num_rounds == 0 or realized.max_participations == 0:
      return None
    charge = self._charge(realized)
    epsilon, order, tau = self.guarantee(charge)
    fewest = charge.smallest_cohort
    s = self._setting
    l2, l1 = s.sensitivities(adaptive_clipping.ZERO_OUT)
    return report_lib.DistributedDpPrivacyReport(
        mechanism=s.mechanism, noise_multiplier=s.noise_multiplier, clip_norm=self._clip,
        bits=s.bits, dimension=self._dimension, padded_dimension=s.padded_dimension,
        scale_factor=s.scale_factor, local_stddev=s.local_stddev,
        sampled_stddev=s.sampled_stddev, l2_sensitivity=l2, l1_sensitivity=l1, tau=tau,
        fewest_clients=fewest, most_clients=self._most,
        participations=charge.participations,
        replayed_participations=charge.beyond_ledger, rounds=realized.num_rounds, epsilon=epsilon,
        delta=self._delta, rdp_order=order,
        round_epsilon=s.composed_epsilon(fewest, self._most, 1, self._delta,
                                         adaptive_clipping.ZERO_OUT)[0],
        rounding_beta=s.rounding_beta, scope=self._scope, caveats=self._caveats)

  def epsilon(self, realized):
    if realized.num_rounds == 0 or realized.max_participations == 0:
      return 0.0
    return self.guarantee(self._charge(realized))[0]


RELEASE_LOG = "releases.jsonl"
"""For mechanisms whose every computed round is a release (cpSGD: the server sees each round's
secure sum, and a re-computed round draws fresh shares): one line per round computed, written
and synced before the round runs — across crashes, resumes and restarts of the run directory."""


def record_release(root_dir: str, round_number: int, client_ids: Sequence[int]) -> None:
  """Logs (and syncs) that round `round_number` is about to be computed with `client_ids`.

  The ids are the scheduler's client indices: the log is as secret as the checkpoints, whose
  ledger holds the same participation.
  """
  ids = [int(c) for c in client_ids]
  with open(os.path.join(root_dir, RELEASE_LOG), "a", encoding="utf-8") as f:
    f.write(json.dumps({"round": int(round_number), "cohort": len(ids), "clients": ids})
            + "\n")
    f.flush()
    os.fsync(f.fileno())


class ReleaseLog:
  """The computations in a run directory's release log, read incrementally.

  Which computation of an applied round r is the applied one: the last logged. A round is
  applied only by the run that computed it last — after a crash the next run resumes from the
  latest checkpoint (or starts afresh without one) and computes every later round again,
  logging after the earlier runs. Every other computation was seen by the server all the
  same: its clients are charged one participation each, client by client. A line without
  client ids (written before they were logged) is charged to every client.
  """

  def __init__(self, root_dir: str):
    self._path = os.path.join(root_dir, RELEASE_LOG)
    self._reset()

  def _reset(self) -> None:
    self._offset = 0
    self._computations: dict[int, list[Optional[np.ndarray]]] = {}  # round -> cohorts
    self._cohorts: dict[int, list[int]] = {}
    self._count: dict[int, int] = {}  # client -> logged computations with its id
    self._most = 0  # max(self._count.values())
    self._unknown = 0  # Computations logged without client ids: charged to everyone.
    self._repeated: set[int] = set()  # Rounds computed more than once.
    self._contiguous = 0  # Rounds 1..this all have a logged computation.
    self._last_round = 0

  def _read(self) -> None:
    if not os.path.exists(self._path):
      self._reset()
      return
    size = os.path.getsize(self._path)
    if size < self._offset:  # Replaced or truncated: read it again.
      self._reset()
    if size == self._offset:
      return
    with open(self._path, "rb") as f:
      f.seek(self._offset)
      data = f.read()
    end = data.rfind(b"\n") + 1  # A line still being written is read next time.
    for line in data[:end].decode("utf-8").splitlines():
      if line.strip():
        event = json.loads(line)
        ids = event.get("clients")
        r = int(event["round"])
        self._computations.setdefault(r, []).append(
            None if ids is None else np.asarray(ids, dtype=np.int64))
        self._cohorts.setdefault(r, []).append(int(event["cohort"]))
        if len(self._cohorts[r]) > 1:
          self._repeated.add(r)
        self._last_round = max(self._last_round, r)
        if ids is None:
          self._unknown += 1
        for c in ids or ():
          self._count[c] = self._count.get(c, 0) + 1
          self._most = max(self._most, self._count[c])
    while self._contiguous + 1 in self._computations:
      self._contiguous += 1
    self._offset += end

  def charge(self, rounds_applied: int,
             pending: Optional[Sequence[int]] = None) -> ReleaseCharge:
    """What the log charges after `rounds_applied` rounds, plus the `pending` round's clients
    (a look-ahead: round `rounds_applied + 1`, not logged yet) when given.

    Client by client: every computation a client took part in counts, each logged one and the
    pending one. That total is exact when every applied round was logged; where the log lacks
    one, `participations` is None and the caller bounds it by the ledger's count plus the most
    lost computations of any client. Lost: every computation of a round not applied, and all
    but the last of an applied round's. Its cost grows with the lost computations and the
    pending cohort, not with the run's length (counts are kept as the log is read).
    """
    self._read()
    lost: dict[int, int] = {}
    lost_unknown = 0
    smallest = None
    beyond = range(rounds_applied + 1, self._last_round + 1)
    for r in sorted(self._repeated.union(r for r in beyond if r in self._computations)):
      applied = r <= rounds_applied
      cohorts = self._computations[r]
      for ids, size in list(zip(cohorts, self._cohorts[r]))[:-1 if applied else None]:
        if size > 0:
          smallest = size if smallest is None else min(smallest, size)
        if ids is None:
          lost_unknown += 1
        for c in () if ids is None else ids.tolist():
          lost[c] = lost.get(c, 0) + 1
    most = max([self._most] + [self._count.get(int(c), 0) + 1 for c in pending or ()])
    return ReleaseCharge(
        participations=most + self._unknown if rounds_applied <= self._contiguous else None,
        beyond_ledger=max(lost.values(), default=0) + lost_unknown,
        smallest_cohort=smallest)


@dataclasses.dataclass(frozen=True)
class ReleaseCharge:
  """`ReleaseLog.charge`. participations: the most computations any client took part in,
  applied and lost (None when the log lacks an applied round); beyond_ledger: the most lost
  ones (computed and seen by the server, not applied) of any client; smallest_cohort: the
  fewest clients of a lost computation (None without one)."""
  participations: Optional[int]
  beyond_ledger: int
  smallest_cohort: Optional[int]
