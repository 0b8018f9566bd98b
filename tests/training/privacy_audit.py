"""An independent audit of a finished training run's privacy claim, from its checkpoint alone.

Used by the end-to-end privacy tests. It trusts neither the ledger's summary nor the report:
from the latest checkpoint it reads the participation record (the rows of C each client
actually used), the aggregator's own row counter (the noise state's `round`), and rebuilds the
dense C of the mechanism; then it computes the true sensitivity by brute force over every
participation pattern the realized schedule allows (n rows, the smallest gap b between two
participations of a client, the most participations k) and the ε it implies.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from typing import Any, Optional

import numpy as np

from dp_fl.accounting import dpfedavg
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import tree
from dp_fl.participation import checkpoint as participation_checkpoint
from dp_fl.training import checkpoints as checkpoints_lib
from dp_fl.training import program
from dp_fl.training import registry
from tests.mechanisms import oracles


@dataclasses.dataclass(frozen=True)
class Audit:
  rows: int                      # Rows of C used, from the participation record.
  aggregator_rows: int           # The aggregator's own row counter (noise state `round`).
  min_sep: int                   # Smallest gap between two participations of a client.
  max_participations: int
  patterns: dict[int, tuple[int, ...]]
  true_sensitivity: Optional[float]   # DP-FTRL only.
  true_epsilon: float
  reported: dict[str, Any]       # privacy_report.json
  noise_seed: np.ndarray         # The aggregator's seed, from the state.
  amplified_lower_bound: Optional[float] = None  # Amplified ε the truth is at least (cyclic)
  amplified_delta_check: Optional[tuple[float, float]] = None  # (δ̂, s.e.) at the claimed ε


def _find_state(tree: Any, holds: Any) -> Optional[dict[str, Any]]:
  """The first OrderedDict of `tree` (depth first) for which `holds(d)` is true."""
  if isinstance(tree, dict):
    if holds(tree):
      return tree
    for value in tree.values():
      found = _find_state(value, holds)
      if found is not None:
        return found
  return None


def _noise_state(aggregator_state: Any) -> dict[str, Any]:
  """The OrderedDict holding the aggregator's `seed` and `round`, wherever it is nested (not
  the adaptive clip norm's estimator, which has its own)."""
  return _find_state(aggregator_state,
                     lambda d: "seed" in d and "round" in d and "estimate" not in d)


def _estimator_state(aggregator_state: Any) -> dict[str, Any]:
  """The adaptive clip norm's estimator state, wherever it is nested."""
  return _find_state(aggregator_state, lambda d: "estimate" in d)


def audit_run(task, config) -> Audit:
  """Audits the run of `config` in `config.root_dir` (see the module docstring)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  restored = checkpoints_lib.CheckpointManager(
      os.path.join(config.root_dir, "checkpoints")).restore_latest()
  scheduler = participation_checkpoint.restore_scheduler(restored.blobs["scheduler"])
  ledger = scheduler.ledger
  patterns = ledger.participation_patterns()
  rows = ledger.num_rounds
  gaps = [b - a for rows_ in patterns.values() for a, b in zip(rows_, rows_[1:])]
  min_sep = min(gaps) if gaps else rows
  k = max((len(p) for p in patterns.values()), default=0)

  mechanism = program.build_mechanism(config)
  num_clients = program.population(task, config)  # The task's clients and any canaries.
  factory = program.build_aggregator(config, mechanism, num_clients)
  process = program.build_learning_process(task, config, factory)
  state = tf.nest.pack_sequence_as(process.initialize(), restored.arrays)
  noise = _noise_state(state.aggregator)
  # Adaptive clipping: the clip norm's count releases, one per applied round (their estimator
  # advanced exactly once per row), with the σ_b the aggregator actually used.
  estimator = getattr(factory, "adaptive", None)
  if estimator is not None:
    estimator_state = _estimator_state(state.aggregator)
    assert int(estimator_state["round"]) == int(noise["round"]), (estimator_state, noise)

  with open(os.path.join(config.root_dir, "privacy_report.json"), encoding="utf-8") as f:
    reported = json.load(f)
  if isinstance(registry.mechanism(config.mechanism), registry.DpFedAvgEntry):
    true_sens = None
    q = config.participation_settings.population_sampling_rate
    z = config.noise_multiplier
    if estimator is not None:  # Andrew et al., Thm. 1, the count's add/remove sensitivity ½.
      z = (z ** -2 + (2.0 * estimator.count_stddev) ** -2) ** -0.5
    true_eps = dpfedavg.dpfedavg_epsilon(num_clients, q * num_clients, z,
                                         int(noise["round"]), config.delta,
                                         method=dpfedavg.PLD).epsilon
  else:
    c = oracles.dense_strategy(mechanism, rows)
    true_sens = oracles.brute_force_sensitivity(c, min_sep, k)
    # Each client's own pattern is one of those searched.
    for rows_ in patterns.values():
      own = float(np.linalg.norm(c[:, list(rows_)].sum(axis=1)))
      assert own <= true_sens * (1 + 1e-9) + 1e-12, (rows_, own, true_sens)
    rho = true_sens ** 2 / (2.0 * config.noise_multiplier ** 2)
    if estimator is not None:  # k counts, zero-out sensitivity 1 (a no-data client: +½).
      rho += k / (2.0 * estimator.count_stddev ** 2)
    true_eps = zcdp.epsilon_from_rho(rho, config.delta)
  amplified_lower, delta_check = None, None
  if reported.get("amplified_holds"):
    amplified_lower, delta_check = _audit_amplified(config, mechanism, scheduler, patterns,
                                                    rows, reported)
  return Audit(rows=rows, aggregator_rows=int(noise["round"]), min_sep=min_sep,
               max_participations=k, patterns=patterns, true_sensitivity=true_sens,
               true_epsilon=true_eps, reported=reported, noise_seed=np.asarray(noise["seed"]),
               amplified_lower_bound=amplified_lower, amplified_delta_check=delta_check)


def _online_c(mechanism: catalog.Mechanism, n: int) -> np.ndarray:
  """The n x n lower-triangular C whose rows the aggregator's noise realizes."""
  if isinstance(mechanism, catalog.TreeMechanism):
    return tree.online_tree_matrix(n)
  return oracles.dense_strategy(mechanism, n)


def _audit_amplified(config, mechanism, scheduler, patterns, rows, reported):
  """Checks the schedule is the analysed one and recomputes the amplified claim independently:
  balls-in-bins: δ̂ at the claimed ε on a fresh Monte Carlo sample of the dominating pair of
  Lemma 3.2 built from explicit column sums of C; b-min-sep: δ̂ with the true likelihood
  ratio over every enumerated pattern, both directions; cyclic Poisson: an optimistic PLD (a
  lower bound on the truth) of the Poisson-subsampled Gaussian."""
  from dp_accounting.pld import privacy_loss_distribution  # pylint: disable=g-import-not-at-top
  from dp_fl.accounting import balls_in_bins  # pylint: disable=g-import-not-at-top
  assert scheduler.discarded_rounds == 0, "an amplified claim after discarded rounds"
  c_planned = _online_c(mechanism, config.rounds)
  if reported["scheme"] == "balls_in_bins":
    b = scheduler.num_bins
    for rows_ in patterns.values():  # Every client used its one bin only.
      assert len({r % b for r in rows_}) <= 1, rows_
    e = -(-config.rounds // b)
    padded = np.zeros((config.rounds, b * e))
    padded[:, :config.rounds] = c_planned
    modes = np.stack([padded[:, i::b].sum(axis=1) for i in range(b)], axis=1)
    pair = balls_in_bins.BallsInBinsPair(num_bins=b, num_epochs=e, gram=modes.T @ modes,
                                         rounds=config.rounds)
    with warnings.catch_warnings():  # Few tail samples: the 4-s.e. check allows for it.
      warnings.simplefilter("ignore", balls_in_bins.InsufficientSamplesWarning)
      est = balls_in_bins.estimate_delta(pair, noise_multiplier=config.noise_multiplier,
                                         epsilon=reported["epsilon_amplified"],
                                         num_samples=2 ** 22, seed=20261123)
    return None, (est.delta_hat, est.standard_error)
  if reported["scheme"] == "b_min_sep":
    return None, _b_min_sep_delta(config, scheduler, patterns, c_planned, reported)
  groups = scheduler.num_groups
  for rows_ in patterns.values():  # Every client used its group's rounds only.
    assert len({r % groups for r in rows_}) <= 1, rows_
  bands = max(int(np.max(np.nonzero(c_planned[:, j])[0]) - j) + 1
              for j in range(c_planned.shape[1]))
  assert bands <= groups, (bands, groups)
  z = config.noise_multiplier / float(np.max(np.linalg.norm(c_planned, axis=0)))
  pld = privacy_loss_distribution.from_gaussian_mechanism(
      standard_deviation=z, sampling_prob=scheduler.sampling_probability,
      pessimistic_estimate=False, value_discretization_interval=1e-3)
  optimistic = pld.self_compose(-(-rows // groups)).get_epsilon_for_delta(config.delta)
  return float(optimistic), None


def chain_patterns(n: int, b: int, p: float, warm_start: bool, windows=None,
                   window_probability: float = 1.0) -> list[tuple[tuple, float]]:
  """Every participation pattern of b-min-sep sampling over n rounds with its probability,
  by walking the eligibility chain (independently of dp_fl's dynamic program). With
  `windows` (per round: the availability window, or -1), a client can be drawn only in a
  window whose coin (probability `window_probability`, tossed at its first round) came up."""
  first = np.zeros(b)
  if warm_start:
    first[:] = p / (1.0 + (b - 1) * p)
    first[0] = 1.0 / (1.0 + (b - 1) * p)
  else:
    first[0] = 1.0
  windows = np.zeros(n, dtype=int) if windows is None else np.asarray(windows)
  q = window_probability if np.any(windows >= 0) else 1.0
  law: dict[tuple, float] = {}

  def walk(t, wait, rows, prob, up):
    if prob == 0.0:
      return
    if t == n:
      law[rows] = law.get(rows, 0.0) + prob
      return
    w = int(windows[t])
    if w >= 0 and (t == 0 or windows[t - 1] != w) and q < 1.0:  # A window opens: its coin.
      walk_in(t, wait, rows, prob * q, True)
      walk_in(t, wait, rows, prob * (1.0 - q), False)
      return
    walk_in(t, wait, rows, prob, up if w >= 0 else False)

  def walk_in(t, wait, rows, prob, up):
    there = windows[t] >= 0 and (up or q == 1.0)
    if wait > 0 or not there:
      walk(t + 1, max(wait - 1, 0), rows, prob, up)
      return
    walk(t + 1, b - 1, rows + (t,), prob * p, up)
    walk(t + 1, 0, rows, prob * (1.0 - p), up)

  for start, w in enumerate(first):
    walk(0, start, (), w, False)
  return list(law.items())


def availability_windows(model, times: np.ndarray) -> np.ndarray:
  """Each device's window at each round time (-1: not in one) from its time zone, by the
  rule's definition (DiurnalAvailability: local time in [start, start + length), a coin per
  day)."""
  config, arrays = model.to_config()
  phase = np.mod(arrays["timezone_offsets_hours"] - config["window_start_hour"], 24.0)
  u = np.asarray(times)[None, :] + phase[:, None]
  day = np.floor(u / 24.0)
  return np.where(u - 24.0 * day < config["window_hours"], day, -1).astype(int)


def _b_min_sep_delta(config, scheduler, patterns, c_planned, reported, num_samples=2 ** 18):
  """δ̂ at the claimed ε, the largest over the two directions and every availability class,
  with the TRUE likelihood ratio (every pattern enumerated, the full quadratic form): a
  fresh Monte Carlo sample."""
  b, p = scheduler.min_sep, scheduler.sampling_probability
  for rows_ in patterns.values():  # Every client kept the separation.
    assert all(y - x >= b for x, y in zip(rows_, rows_[1:])), rows_
  classes = [(None, 1.0)]
  if scheduler.availability is not None:
    times = np.array([scheduler.round_time(t) for t in range(config.rounds)])
    steps = times / scheduler.round_hours  # A public clock on the grid, moving forward.
    assert np.all(np.diff(times) > 0) and np.allclose(steps, np.round(steps)), times
    windows = availability_windows(scheduler.availability, times)
    for client, rows_ in patterns.items():  # Every participant was there.
      for t in rows_:
        assert windows[client, t] >= 0 and scheduler.availability.available(
            [client], times[t], scheduler.seed)[0], (client, t)
    q = scheduler.availability.window_probability
    classes = [(row, q) for row in np.unique(windows, axis=0)]
  out = []
  for row, q in classes:
    law = chain_patterns(config.rounds, b, p, scheduler.warm_start, row, q)
    out.append(_true_delta(config, law, c_planned, reported["epsilon_amplified"], num_samples))
  return max(out)


def _true_delta(config, law, c_planned, eps, num_samples):
  probs = np.array([q for _, q in law])
  means = np.zeros((config.rounds, len(law)))
  for j, (rows_, _) in enumerate(law):
    means[:, j] = c_planned[:, list(rows_)].sum(axis=1)
  sigma = config.noise_multiplier
  half_norms = 0.5 * np.sum(means ** 2, axis=0)
  rng = np.random.default_rng(20261127)
  sums = {"remove": [0.0, 0.0], "add": [0.0, 0.0]}
  for _ in range(num_samples // 4096):
    z = rng.standard_normal((4096, config.rounds)) * sigma
    for direction in sums:
      x = z
      if direction == "remove":
        x = z + means[:, rng.choice(len(law), size=4096, p=probs)].T
      y = np.logaddexp.reduce(np.log(probs) + (x @ means - half_norms) / sigma ** 2, axis=1)
      f = -np.expm1(np.minimum(eps - y, 0.0) if direction == "remove"
                    else np.minimum(eps + y, 0.0))
      sums[direction][0] += f.sum()
      sums[direction][1] += np.dot(f, f)
  worst = max(sums.values(), key=lambda v: v[0])
  mean = worst[0] / num_samples
  return mean, float(np.sqrt(max(worst[1] / num_samples - mean ** 2, 0.0) / num_samples))


def check_claim(audit: Audit) -> None:
  """Asserts the report describes the rows used and never understates ε."""
  assert audit.rows == audit.aggregator_rows, (
      f"the ledger has {audit.rows} rows but the aggregator used {audit.aggregator_rows}")
  reported = audit.reported
  if "unamplified" in reported:  # Two bounds; the unamplified one is audited as usual.
    amplified = reported["epsilon_amplified"] if reported["amplified_holds"] else None
    assert reported["epsilon"] == min(
        [reported["unamplified"]["epsilon"]] + ([amplified] if amplified is not None else []))
    if audit.amplified_lower_bound is not None:
      assert amplified >= audit.amplified_lower_bound * (1 - 1e-9), (
          f"amplified ε {amplified} < the optimistic PLD {audit.amplified_lower_bound}")
    if audit.amplified_delta_check is not None:
      delta_hat, se = audit.amplified_delta_check
      assert delta_hat <= reported["delta"] + 4 * se, (
          f"δ̂ {delta_hat} ± {se} at the amplified ε exceeds δ {reported['delta']}")
    reported = dict(reported["unamplified"])
  if audit.true_sensitivity is None:  # DP-FedAvg: the sampled Gaussian over T rounds.
    assert reported["rounds"] == audit.aggregator_rows
  else:
    participation = reported["participation"]
    assert participation["rounds"] == audit.rows
    assert participation["min_sep"] == audit.min_sep
    assert participation["max_participations"] == audit.max_participations
    assert reported["sensitivity"] >= audit.true_sensitivity * (1 - 1e-9)
  assert reported["epsilon"] >= audit.true_epsilon * (1 - 1e-9), (
      f"reported ε {reported['epsilon']} < true ε {audit.true_epsilon}")


def logged_computations(config) -> dict[int, list[tuple[int, ...]]]:
  """Every computation of a distributed-DP run, by 1-based round, from its release log —
  checked against the checkpoint: each applied row (the ledger's cohort) was logged, and no
  logged cohort is missing its clients."""
  from dp_fl.training import privacy  # pylint: disable=g-import-not-at-top
  restored = checkpoints_lib.CheckpointManager(
      os.path.join(config.root_dir, "checkpoints")).restore_latest()
  ledger = participation_checkpoint.restore_scheduler(restored.blobs["scheduler"]).ledger
  computations: dict[int, list[tuple[int, ...]]] = {}  # 1-based round -> cohorts computed.
  with open(os.path.join(config.root_dir, privacy.RELEASE_LOG), encoding="utf-8") as f:
    for line in f:
      if line.strip():
        event = json.loads(line)
        assert len(event["clients"]) == event["cohort"], event
        computations.setdefault(event["round"], []).append(tuple(event["clients"]))
  for r in range(ledger.num_rounds):
    applied = tuple(int(c) for c in ledger.round_clients(r))
    assert applied in computations.get(r + 1, []), (
        f"applied round {r + 1} (clients {applied}) is not in the release log")
  return computations


def _cohorts_per_client(computations) -> dict[int, list[int]]:
  """Each client's computations, as the sizes of their cohorts (brute force over the log)."""
  per_client: dict[int, list[int]] = {}
  for cohorts in computations.values():
    for cohort in cohorts:
      for c in cohort:
        per_client.setdefault(c, []).append(len(cohort))
  return per_client


def _reported(config) -> dict[str, Any]:
  with open(os.path.join(config.root_dir, "privacy_report.json"), encoding="utf-8") as f:
    return json.load(f)


def audit_cpsgd_run(task, config) -> dict[str, Any]:
  """An independent audit of a cpSGD run's claim from its checkpoint and release log.

  Every computation of a round is a release (the clients' shares are fresh each time), so
  the truth is, client by client, the number of logged computations it was in — whatever
  cohorts a resume or a fresh restart drew. The audit assumes nothing about which
  computation a round's applied row came from (`logged_computations`). Returns the most
  participations of any client (brute force over clients), the smallest cohort of any
  computation, the ε they imply, and the report.
  """
  from dp_fl.accounting import cpsgd as cpsgd_accounting  # pylint: disable=g-import-not-at-top
  from dp_fl.mechanisms import cpsgd as cpsgd_math  # pylint: disable=g-import-not-at-top
  per_client = _cohorts_per_client(logged_computations(config))
  participations = max(len(v) for v in per_client.values())
  cohort = min(min(v) for v in per_client.values())
  dimension = program.model_dimension(task)
  protocol = registry.mechanism("cpsgd").protocol(config, dimension)
  true_epsilon = cpsgd_accounting.composed_epsilon(
      protocol.num_levels, protocol.num_trials, protocol.p, protocol.x_max, protocol.clip_norm,
      cpsgd_math.padded_dimension(dimension), cohort, participations,
      config.delta).epsilon
  return {"participations": participations, "cohort": cohort,
          "true_epsilon": true_epsilon, "reported": _reported(config)}


# Rényi orders of the audit's conversion (integers, where both theorems hold).
_AUDIT_ORDERS = np.arange(2, 1025, dtype=np.float64)


def distributed_dp_curve(mechanism: str, l2: float, l1: float, sigma: float, shares: int,
                         dimension: int) -> np.ndarray:
  """One release's Rényi curve over `_AUDIT_ORDERS`, written out from the papers for the
  audit (not dp_fl's code): Kairouz, Liu & Steinke 2021 Prop. 14 for `ddgauss` (n shares of
  N_Z(0, σ²)), Agarwal, Kairouz & Liu 2021 Thm. 3.5 for `skellam` (variance n σ²)."""
  a = _AUDIT_ORDERS
  if mechanism == "skellam":
    mu = shares * sigma ** 2
    return a * l2 ** 2 / (2 * mu) + np.minimum(((2 * a - 1) * l2 ** 2 + 6 * l1) / (4 * mu ** 2),
                                               3 * l1 / (2 * mu))
  tau = 10 * sum(math.exp(-2 * math.pi ** 2 * sigma ** 2 * k / (k + 1)) for k in range(1, shares))
  m2, m1 = l2 / (math.sqrt(shares) * sigma), l1 / (math.sqrt(shares) * sigma)
  return np.minimum(np.minimum(a / 2 * m2 ** 2 + tau * dimension,
                               a / 2 * (m2 ** 2 + 2 * m1 * tau + tau ** 2 * dimension)),
                    a / 2 * (m2 + math.sqrt(dimension) * tau) ** 2)


def rdp_to_epsilon(curve: np.ndarray, delta: float) -> float:
  """Canonne, Kamath & Steinke 2020 Prop. 12 (as dp_accounting converts), written out:
  ε = min_α ε(α) + log((α−1)/α) − (log δ + log α)/(α−1)."""
  a = _AUDIT_ORDERS
  return float(np.min(curve + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)))


def audit_distributed_dp_run(config) -> dict[str, Any]:
  """An independent audit of a `ddgauss` / `skellam` run's claim from its checkpoint, its
  release log and the values TFF's process reported (metrics/train.csv: the scale factor,
  the scaled norm bound it enforced and each client's noise scale). The truth is brute force
  over clients: each client's computations composed, each at its own cohort's size (exact
  where the report bounds every cohort by the fewest and the most shares)."""
  import csv  # pylint: disable=g-import-not-at-top
  with open(os.path.join(config.root_dir, "metrics", "train.csv"), encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  prefix = "aggregator/distributed_dp/"
  l2 = max(float(r[prefix + "scaled_inflated_l2"]) for r in rows)
  stddev = max(float(r[prefix + "scaled_local_stddev"]) for r in rows)
  dimension = int(rows[0][prefix + "padded_dim"])
  sigma = math.ceil(stddev) if config.mechanism == "ddgauss" else stddev
  l1 = math.ceil(l2 * min(math.sqrt(dimension), l2))  # TFF's L1 bound of its DP query.
  per_client = _cohorts_per_client(logged_computations(config))
  epsilons = [rdp_to_epsilon(sum(distributed_dp_curve(config.mechanism, l2, l1, sigma, n,
                                                       dimension) for n in cohorts),
                             config.delta)
              for cohorts in per_client.values()]
  return {"true_epsilon": max(epsilons),
          "participations": max(len(v) for v in per_client.values()),
          "cohort": min(min(v) for v in per_client.values()),
          "l2": l2, "sigma": sigma, "reported": _reported(config)}


def check_recipe_run(task, config_for, pauses=(2,)):
  """The "Adding a mechanism" recipe's promise on the toy task, for a DP-FTRL mechanism:
  `config_for(name)` (a config whose root_dir is `<tmp>/<name>`) trains to completion, its ε
  dominates this audit's (and equals it where the sensitivity is exact; an amplified claim is
  re-estimated by `check_claim`), and a run paused
  after each of `pauses` rounds and resumed ends bitwise where the uninterrupted one did —
  model, optimizer, noise state, ledger — with the same ε. Returns (whole, resumed)."""
  whole_config = config_for("whole")
  whole = program.run(task, whole_config)
  assert whole.stopped == "completed" and whole.rounds_completed == whole_config.rounds
  assert np.isfinite(whole.eval_metrics["loss"])
  audit = audit_run(task, whole_config)
  check_claim(audit)  # An amplified claim: its δ̂ re-estimated; the unamplified one as below.
  if not audit.reported.get("amplified_holds"):
    assert whole.epsilon >= audit.true_epsilon * (1 - 1e-9)
    if whole.privacy_report.sensitivity_kind == catalog.EXACT:
      assert abs(whole.epsilon - audit.true_epsilon) <= 1e-9 * audit.true_epsilon
  split = config_for("split")
  for pause in pauses:
    assert program.run(task, split, max_rounds_this_call=pause).stopped == "paused"
  resumed = program.run(task, split)
  assert resumed.resumed_from == sum(pauses) and resumed.rounds_completed == split.rounds
  a, b = (checkpoints_lib.CheckpointManager(os.path.join(c.root_dir, "checkpoints"))
          .restore_latest() for c in (whole_config, split))
  assert a.round == b.round == split.rounds and len(a.arrays) == len(b.arrays)
  for x, y in zip(a.arrays, b.arrays):  # Model, optimizer, aggregator (noise) state.
    assert x.dtype == y.dtype and np.array_equal(x, y)
  assert a.blobs["scheduler"] == b.blobs["scheduler"]
  assert resumed.epsilon == whole.epsilon
  return whole, resumed
