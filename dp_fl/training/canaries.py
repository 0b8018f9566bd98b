"""Canary clients for empirical privacy auditing (issue #41).

Andrew et al. 2023, "One-shot Empirical Privacy Estimation for Federated Learning" (arXiv
2302.03098, Alg. 1 and Sec. 3): K canary clients join the population; each time canary i takes
part, its model update is ζ · u_i, with u_i a secret random unit direction of the model's
dimension and ζ the clip norm. Its update passes through the run's clipping and aggregator like
every client's. The score of a canary is the cosine between u_i and the released model delta;
the scores of the canaries whose update was inserted ("seen") and of those held out ("unseen")
feed the estimators of `dp_fl.accounting.empirical`.

Here:
- **Who takes part.** The canaries are clients K more of the scheduler's population (indices
  N .. N + K − 1 after the N real clients), scheduled by the same rules as every client (device
  timer, min-sep, Poisson, balls-in-bins). Each canary's secret fair coin (Steinke et al.
  2023, arXiv 2305.08846, Alg. 1) decides whether its update is inserted: a held-out canary
  that the scheduler picks sends the empty update of a client with no data (the zero-out
  neighbour of paper 004's adjacency), so the schedule does not depend on the coins.
- **The secret.** One 63-bit secret seeds every direction (`canary_directions`: TF stateless
  Philox normals per variable, folded in with the canary's index and the variable's, scaled to
  unit global norm — the same numbers in the client work and in the scorer). The secret and
  the coins are drawn from OS entropy (or from `--reproducible_noise_seed`) and kept in
  memory and in the checkpoints (`Canaries.to_bytes`) while the run trains; an inserted
  canary's client input carries (secret, index) to whoever runs its client work (TFF's
  worker, `--workers`). The report's "empirical" section then publishes the coins and the
  scores (needed to re-audit; they say nothing about real users), not the secret.
- **The client work.** `with_canaries` wraps TFF's client work: its client data becomes
  ``<data=D*, canary=int64[3]*>`` (TFF's client data is a structure of sequences; `canary` is
  one element [inserted, secret, index]: zeros for a real client or a held-out canary, whose
  data is empty), and an inserted canary's result is replaced by ζ · u_i with the full
  weight. Real clients' results are unchanged.
- **Scores** (`CanaryScores`), from the released global models only: the cosine of u_i with
  w_{t−1} − w_t after every applied round (its maximum over the rounds: the threat model where
  every iterate is released) and with w_0 − w_T (only the final model is released). TFF's
  model delta is the initial minus the trained weights and the server subtracts it, so a
  canary moves the model along −u_i; the scores are signed accordingly.

The canaries are clients of the ledger under their own indices (a canary never counts toward
a real client); the accounted ε covers the population with them (with a fixed cohort the extra
clients change who is sampled: the realized participation, hence ε, can move either way).
Adjacency: a held-out canary's empty update against an inserted one's ζ · u_i is the zero-out
pair DP-FTRL is analysed for, and add/remove for DP-FedAvg's fixed denominator; for cpSGD's
replace-one analysis it is a pair at half the largest distance (ζ of 2ζ), so its audit cannot
be tight.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import math
from typing import Any, Optional, Sequence

import numpy as np

from dp_fl import _checks
from dp_fl.accounting import empirical

CANARY_ID_PREFIX = "canary:"
FULL_WEIGHT = 1e30
"""A canary's weight under example weighting: every cap (DP-FedAvg's min(n_k / ŵ, 1)) gives it
the full weight of a client."""

_CACHED_DIRECTION_FLOATS = 1 << 26  # Up to 256 MiB of directions are kept between rounds.


@dataclasses.dataclass(frozen=True)
class Canaries:
  """The canaries of one run: the population they join, the secret, the coins.

  Attributes:
    num_real: N, the task's training clients (canary i is the scheduler's client N + i).
    secret: the seed of every canary direction (secret; 1 .. 2**63 − 1).
    inserted: canary i's coin: True if its update is inserted when it takes part.
  """
  num_real: int
  secret: int
  inserted: tuple[bool, ...]

  def __post_init__(self):
    _checks.check_nonnegative_int("num_real", self.num_real)
    if not isinstance(self.secret, int) or not 0 < self.secret < 2**63:
      raise ValueError(f"`secret` must be an int in [1, 2**63); got {self.secret!r}.")
    if len(self.inserted) < 2:
      raise ValueError(f"a canary audit needs at least 2 canaries; got {len(self.inserted)}.")

  @classmethod
  def draw(cls, num_canaries: int, num_real: int, seed: Optional[int] = None) -> "Canaries":
    """K canaries with a fresh secret and fair coins, from OS entropy (`seed` None) or, for
    reproducible research runs, from `seed` (in a stream of its own)."""
    _checks.check_positive_int("audit_canaries", num_canaries)
    entropy = np.random.SeedSequence() if seed is None else np.random.SeedSequence(
        [int(seed), 0x41554449])  # "AUDI": apart from the noise's and the sampling's streams.
    rng = np.random.default_rng(entropy)
    return cls(num_real, int(rng.integers(1, 2**63 - 1)),
               tuple(bool(b) for b in rng.integers(0, 2, size=num_canaries)))

  @property
  def num_canaries(self) -> int:
    return len(self.inserted)

  @property
  def indices(self) -> range:
    """The scheduler's client indices of the canaries."""
    return range(self.num_real, self.num_real + self.num_canaries)

  def client_input(self, index: int) -> np.ndarray:
    """The `canary` member of client `index`'s input: [1, secret, i] for inserted canary i,
    zeros for a real client or a held-out canary."""
    i = index - self.num_real
    if 0 <= i < self.num_canaries and self.inserted[i]:
      return np.array([1, self.secret, i], np.int64)
    return np.zeros(3, np.int64)

  def to_bytes(self) -> bytes:
    return json.dumps({"num_real": self.num_real, "secret": self.secret,
                       "inserted": list(self.inserted)}).encode()

  @classmethod
  def from_bytes(cls, data: bytes) -> "Canaries":
    d = json.loads(data.decode())
    return cls(int(d["num_real"]), int(d["secret"]), tuple(bool(b) for b in d["inserted"]))


class CanaryClientData:
  """The task's client data with the canaries appended (a ClientData for `TffParticipation`).

  Every client's input is ``OrderedDict(data=dataset, canary=dataset)``: a real client's own
  dataset, a canary's empty dataset (the element spec of the first real client's); `canary`
  holds one element, `Canaries.client_input`.
  """

  def __init__(self, client_data: Any, canaries: Canaries):
    real = tuple(client_data.client_ids)
    if len(real) != canaries.num_real:
      raise ValueError(f"the canaries were drawn for {canaries.num_real} real clients; the "
                       f"task has {len(real)}.")
    clash = [c for c in real if c.startswith(CANARY_ID_PREFIX)]
    if clash:
      raise ValueError(f"client id {clash[0]!r} starts with {CANARY_ID_PREFIX!r}, which names "
                       "the audit's canaries; rename the task's clients or run without "
                       "--audit_canaries.")
    self._client_data = client_data
    self._canaries = canaries
    self.client_ids = list(real) + [f"{CANARY_ID_PREFIX}{i}"
                                    for i in range(canaries.num_canaries)]
    self._index = {c: i for i, c in enumerate(self.client_ids)}
    self._empty = None

  def _empty_dataset(self) -> Any:
    if self._empty is None:
      self._empty = self._client_data.create_tf_dataset_for_client(
          self._client_data.client_ids[0]).take(0)
    return self._empty

  def create_tf_dataset_for_client(self, client_id: str) -> Any:
    index = self._index.get(client_id)
    if index is None:
      raise ValueError(f"unknown client id {client_id!r}.")
    data = (self._client_data.create_tf_dataset_for_client(client_id)
            if index < self._canaries.num_real else self._empty_dataset())
    return collections.OrderedDict(
        data=data, canary=_one_element(self._canaries.client_input(index)))

  def has_data(self, client_id: str) -> bool:
    """Whether the client trains on data of its own (a canary has none)."""
    return not client_id.startswith(CANARY_ID_PREFIX)

  def create_padding_input(self) -> Any:
    """The input of an empty padding client (balls-in-bins): no data, no canary."""
    return collections.OrderedDict(data=self._empty_dataset(),
                                   canary=_one_element(np.zeros(3, np.int64)))


def _one_element(value: np.ndarray) -> Any:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.data.Dataset.from_tensors(value)


def canary_directions(shapes: Sequence[Any], secret: Any, index: Any) -> list[Any]:
  """u_i as one tensor per trainable variable (float32), of unit global L2 norm.

  Variable j's part is `tf.random.stateless_normal` under the seed fold_in(fold_in((secret,
  0), i), j): a deterministic function of (secret, i, j) in TF's Philox generator, so the
  client work (inside a TFF computation) and the scorer (eager) draw the same numbers.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  base = tf.random.experimental.stateless_fold_in(
      tf.stack([tf.cast(secret, tf.int64), tf.constant(0, tf.int64)]), tf.cast(index, tf.int64))
  parts = [tf.random.stateless_normal(
      shape, seed=tf.random.experimental.stateless_fold_in(base, j), dtype=tf.float32)
           for j, shape in enumerate(shapes)]
  norm = tf.linalg.global_norm(parts)
  return [p / norm for p in parts]


def with_canaries(work: Any, clip_norm: float, canary_weight: float) -> Any:
  """TFF client work whose inserted canaries send ζ · u_i (Andrew et al. 2023, Alg. 1).

  Args:
    work: a `tff.learning.templates.ClientWorkProcess` (model-delta client work).
    clip_norm: ζ, the norm of a canary's update (the run's clip norm).
    canary_weight: a canary's update weight (1 for uniform weighting; `FULL_WEIGHT` under
      example weighting).

  Returns:
    A ClientWorkProcess with the same state and results whose client data is
    ``<data=D*, canary=int64[3]*>``.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  _checks.check_positive("clip_norm", clip_norm)
  state_type, weights_type, data_type = work.next.type_signature.parameter
  result_type = work.next.type_signature.result.result.member
  canary_type = tff.SequenceType(tff.TensorType(np.int64, [3]))
  input_type = tff.StructType([("data", data_type.member), ("canary", canary_type)])
  update_shapes = [t.shape for t in tff.structure.flatten(result_type.update)]
  # Just inside the clip norm: float rounding never makes a canary count as clipped in the
  # round's (un-noised) clipped-update metric, which would then depend on the coins.
  norm = clip_norm * (1.0 - 1e-6)

  @tff.tensorflow.computation(result_type, canary_type)
  def substitute(result, canary_dataset):
    canary = canary_dataset.reduce(tf.zeros([3], tf.int64), lambda _, element: element)
    update = tf.nest.flatten(result.update)

    def canary_update():
      parts = canary_directions(update_shapes, canary[1], canary[2])
      return [tf.cast(norm * p, u.dtype) for p, u in zip(parts, update)], tf.constant(
          canary_weight, result.update_weight.dtype)

    parts, weight = tf.cond(canary[0] > 0, canary_update,
                            lambda: (update, result.update_weight))
    return tff.learning.templates.ClientResult(
        update=tf.nest.pack_sequence_as(result.update, parts), update_weight=weight)

  @tff.federated_computation(state_type, weights_type, tff.FederatedType(input_type,
                                                                          tff.CLIENTS))
  def next_fn(state, weights, client_input):
    output = work.next(state, weights, client_input.data)
    result = tff.federated_map(substitute, (output.result, client_input.canary))
    return tff.templates.MeasuredProcessOutput(output.state, result, output.measurements)

  return tff.learning.templates.ClientWorkProcess(work.initialize, next_fn)


def _flat(weights: Sequence[Any]) -> np.ndarray:
  return np.concatenate([np.asarray(w, np.float32).ravel() for w in weights])


class CanaryScores:
  """The canaries' cosines with the released models (final model; maximum over iterates) and
  their participation, kept in the checkpoints.

  Args:
    canaries: the run's canaries.
    initial_weights: w_0, the trainable weights of the initial global model (released).
  """

  def __init__(self, canaries: Canaries, initial_weights: Sequence[Any]):
    self.canaries = canaries
    self._shapes = [tuple(np.shape(w)) for w in initial_weights]
    self.initial = _flat(initial_weights)
    self.previous = self.initial.copy()
    self.max_iterate = np.full(canaries.num_canaries, -np.inf)
    self.participations = np.zeros(canaries.num_canaries, np.int64)
    self.client_participations = 0
    self.rounds_scored = 0
    self._cache: Optional[np.ndarray] = None
    self._draw: Optional[Any] = None

  @property
  def dimension(self) -> int:
    return int(self.initial.size)

  def _direction_rows(self):
    """Yields blocks of the u_i as rows (float32): all of them, kept in memory, when they fit
    in 256 MiB; else one at a time, drawn again on every call."""
    if self._cache is not None:
      yield self._cache
      return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if self._draw is None:  # Traced once per process.
      shapes, secret = self._shapes, self.canaries.secret
      self._draw = tf.function(lambda i: tf.concat(
          [tf.reshape(p, [-1]) for p in canary_directions(shapes, secret, i)], axis=0),
                               input_signature=[tf.TensorSpec([], tf.int64)])
    draw = self._draw
    keep = self.canaries.num_canaries * self.dimension <= _CACHED_DIRECTION_FLOATS
    rows = []
    for i in range(self.canaries.num_canaries):
      row = draw(tf.constant(i, tf.int64)).numpy()
      if keep:
        rows.append(row)
      else:
        yield row[None, :]
    if keep:
      self._cache = np.stack(rows)
      yield self._cache

  def _cosines(self, delta: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(delta.astype(np.float64)))
    if norm == 0 or not math.isfinite(norm):
      return np.zeros(self.canaries.num_canaries)
    unit = (delta / norm).astype(np.float32)
    return np.concatenate([rows @ unit for rows in self._direction_rows()]).astype(np.float64)

  def observe(self, client_indices: Sequence[int], weights: Sequence[Any]) -> None:
    """After an applied round: its cohort and the new global model's trainable weights."""
    current = _flat(weights)
    self.max_iterate = np.maximum(self.max_iterate,
                                  self._cosines(self.previous.astype(np.float64) - current))
    self.previous = current
    for index in client_indices:
      i = int(index) - self.canaries.num_real
      if 0 <= i < self.canaries.num_canaries:
        self.participations[i] += 1
    self.client_participations += len(client_indices)
    self.rounds_scored += 1

  def final(self) -> np.ndarray:
    """cos(u_i, w_0 − w_T) for every canary."""
    return self._cosines(self.initial.astype(np.float64) - self.previous)

  def to_bytes(self) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, canaries=np.frombuffer(self.canaries.to_bytes(), np.uint8),
             initial=self.initial, previous=self.previous, max_iterate=self.max_iterate,
             participations=self.participations,
             counts=np.array([self.client_participations, self.rounds_scored], np.int64),
             shapes=np.array(json.dumps(self._shapes)))
    return buffer.getvalue()

  @classmethod
  def from_bytes(cls, data: bytes) -> "CanaryScores":
    with np.load(io.BytesIO(data)) as f:
      canaries = Canaries.from_bytes(f["canaries"].tobytes())
      shapes = [tuple(s) for s in json.loads(str(f["shapes"]))]
      scores = cls(canaries, [np.zeros(s, np.float32) for s in shapes])
      scores.initial, scores.previous = f["initial"], f["previous"]
      scores.max_iterate, scores.participations = f["max_iterate"], f["participations"]
      scores.client_participations, scores.rounds_scored = (int(v) for v in f["counts"])
    return scores


GUARANTEE_SENTENCE = (
    "Only the accounted ε is a guarantee. The one-shot figures are estimates (Andrew et al. "
    "2023) and the one-run figure is a lower bound that holds with the stated confidence "
    "(Steinke et al. 2023); a lower bound above the accounted ε means a bug in the privacy "
    "analysis or the implementation.")


def audit(scores: CanaryScores, accounted_epsilon: Optional[float], delta: float,
          gaussian_claim: bool = False, confidence: float = 0.95) -> dict[str, Any]:
  """The "empirical" section of the privacy report from the canaries' scores.

  Args:
    scores: the run's canary scores.
    accounted_epsilon: the report's ε (None: a non-private run).
    delta: δ of the report.
    gaussian_claim: the accounted ε is the exact (ε, δ) of a μ-GDP mechanism (DP-FTRL or
      DP-SGD with Gaussian noise, unamplified): the one-run bound then tests that Gaussian
      curve (Mahloujifar et al. 2024, tighter); otherwise the (ε, δ) claim itself (Steinke
      et al. 2023). Both are shown; the headline (`one_run_lower_bound`, the one
      `--audit_strict` checks) is the one that applies, each at `confidence`.
  """
  canaries = scores.canaries
  inserted = np.array(canaries.inserted)
  section: dict[str, Any] = {
      "accounted_epsilon": accounted_epsilon, "delta": delta,
      "num_canaries": canaries.num_canaries, "num_inserted": int(inserted.sum()),
      "num_held_out": int((~inserted).sum()), "dimension": scores.dimension,
      "rounds_scored": scores.rounds_scored, "confidence": confidence,
      "canary_participations": int(scores.participations.sum()),
      "inserted_canary_participations": int(scores.participations[inserted].sum()),
      "canary_cohort_share": (float(scores.participations[inserted].sum())
                              / scores.client_participations
                              if scores.client_participations else 0.0),
      "inserted_canaries_that_took_part": int((scores.participations[inserted] > 0).sum()),
      "threat_models": {
          "final_model": "only the final model w_T is released; score cos(u_i, w_0 − w_T)",
          "all_iterates": ("every global model is released; score max_t cos(u_i, w_{t−1} − "
                           "w_t)")},
      "guarantee": GUARANTEE_SENTENCE,
      "scores": {"inserted": [bool(b) for b in inserted],
                 "final_model": [float(v) for v in scores.final()],
                 "all_iterates": [float(v) for v in scores.max_iterate]},
  }
  return estimate(section, gaussian_claim)


def estimate(section: dict[str, Any], gaussian_claim: bool) -> dict[str, Any]:
  """`section` with its estimates and bounds (re)computed from its own "scores" — so a saved
  report can be re-audited with other estimators."""
  inserted = np.array(section["scores"]["inserted"], bool)
  final = np.array(section["scores"]["final_model"])
  iterates = np.array(section["scores"]["all_iterates"])
  delta, confidence = section["delta"], section["confidence"]
  dimension = section["dimension"]
  seen, unseen = final[inserted], final[~inserted]
  out = dict(section)
  out["one_shot"] = {
      "final_model": _estimate(empirical.one_shot_epsilon, seen, unseen, delta),
      "all_iterates": _estimate(empirical.one_shot_epsilon, iterates[inserted],
                                iterates[~inserted], delta),
      "final_model_closed_form_null": (
          _estimate(empirical.one_shot_epsilon_closed_form_null, seen, dimension, delta)
          if dimension >= empirical.MIN_GAUSSIAN_NULL_DIMENSION
          else {"epsilon": None, "why": f"d = {dimension} < "
                f"{empirical.MIN_GAUSSIAN_NULL_DIMENSION}: the closed-form null is not "
                "Gaussian there"})}
  # Both threat models bound the accounted ε (the final model is post-processing of the
  # iterates): each is tested at half the significance, so their maximum holds at
  # `confidence` (a union bound).
  each = 1.0 - (1.0 - confidence) / 2.0
  if len(seen) >= 2 and len(unseen) >= 2:
    floors = (empirical.one_shot_noise_floor(len(seen), len(unseen), delta),
              empirical.one_shot_noise_floor(len(seen), 0, delta, closed_form_null=True))
    # None: unbounded (too few canaries for the estimate to mean anything).
    out["one_shot_noise_floor"] = dict(zip(("empirical_null", "closed_form_null"), (
        f if math.isfinite(f) else None for f in floors)))
  for key, trade_off in (("one_run", empirical.EPSILON_DELTA),
                         ("one_run_gaussian", empirical.GAUSSIAN)):
    out[key] = {name: dataclasses.asdict(empirical.one_run_lower_bound(
        values[inserted], values[~inserted], delta, each, trade_off=trade_off))
                for name, values in (("all_iterates", iterates), ("final_model", final))}
  headline = empirical.GAUSSIAN if gaussian_claim else empirical.EPSILON_DELTA
  out["gaussian_claim"] = bool(gaussian_claim)
  out["one_run_claim_tested"] = headline
  out["one_run_ceiling"] = empirical.one_run_ceiling(
      int(inserted.sum()), int((~inserted).sum()), delta, each, trade_off=headline)
  bounds = out["one_run_gaussian" if gaussian_claim else "one_run"]
  lower = max(bounds["all_iterates"]["epsilon"], bounds["final_model"]["epsilon"])
  out["one_run_lower_bound"] = lower
  accounted = section["accounted_epsilon"]
  out["lower_bound_exceeds_accounted"] = bool(accounted is not None and lower > accounted)
  return out


def _estimate(estimator: Any, *args: Any) -> dict[str, Any]:
  """A one-shot estimate as a dict; {"epsilon": None, "why": ...} where the scores cannot be
  fitted (fewer than 2 inserted or held-out canaries, or no spread: a model that never
  moved)."""
  try:
    return dataclasses.asdict(estimator(*args))
  except ValueError as e:
    return {"epsilon": None, "why": str(e)}


def exceeded_message(section: dict[str, Any]) -> str:
  """The error a run prints when the one-run lower bound exceeds its accounted ε."""
  return (f"EMPIRICAL PRIVACY AUDIT FAILED: the one-run lower bound ε ≥ "
          f"{section['one_run_lower_bound']:.4g} ({section['confidence']:.0%} confidence, "
          f"{section['num_canaries']} canaries) exceeds the accounted ε = "
          f"{section['accounted_epsilon']:.4g}: a privacy analysis or implementation bug.")


MARKDOWN_HEADING = "## Empirical privacy audit (canaries)"

_CLAIMS = {empirical.EPSILON_DELTA: "the (ε, δ) claim (Steinke et al. 2023)",
           empirical.GAUSSIAN: "the Gaussian (μ-GDP) claim the accountant makes "
                               "(Mahloujifar et al. 2024)"}


def markdown(section: dict[str, Any]) -> str:
  """The section as Markdown (appended to privacy_report.md)."""
  def eps(d: dict[str, Any]) -> str:
    return f"{d['epsilon']:.4g}" if d.get("epsilon") is not None else f"— ({d['why']})"

  def gaussian(threat: str) -> str:
    # Only a μ-GDP mechanism's ε is bounded by the Gaussian test (`estimate`).
    return (eps(section["one_run_gaussian"][threat]) if section["gaussian_claim"]
            else "n/a (not a Gaussian claim)")

  one_shot, one_run = section["one_shot"], section["one_run"]
  noise = section.get("one_shot_noise_floor")
  floor = "—" if noise is None else " / ".join(
      "∞ (too few canaries)" if f is None else f"{f:.3g}"
      for f in (noise["empirical_null"], noise["closed_form_null"]))
  accounted = section["accounted_epsilon"]
  rows = [
      ("accounted ε (the guarantee)", "∞ (no privacy)" if accounted is None
       or not math.isfinite(accounted) else f"{accounted:.4g}"),
      ("one-shot estimate, final model", eps(one_shot["final_model"])),
      ("one-shot estimate, final model, closed-form null",
       eps(one_shot["final_model_closed_form_null"])),
      ("one-shot estimate, all iterates", eps(one_shot["all_iterates"])),
      ("one-shot estimates' noise floor (95 % of what no leakage gives with these "
       "canaries): held-out null / closed-form null", floor),
      (f"one-run lower bound ({section['confidence']:.0%}, the larger of both threat "
       f"models): {_CLAIMS[section['one_run_claim_tested']]} — the headline",
       f"**{section['one_run_lower_bound']:.4g}**"),
      ("one-run lower bound, final model: (ε, δ) claim / Gaussian claim",
       f"{eps(one_run['final_model'])} / {gaussian('final_model')}"),
      ("one-run lower bound, all iterates: (ε, δ) claim / Gaussian claim",
       f"{eps(one_run['all_iterates'])} / {gaussian('all_iterates')}"),
      ("most the headline test can certify with these canaries (all guesses right)",
       f"{section['one_run_ceiling']:.4g}"),
      ("canaries K (inserted / held out)",
       f"{section['num_canaries']} ({section['num_inserted']} / {section['num_held_out']})"),
      ("inserted canaries' share of participations", f"{section['canary_cohort_share']:.2%}"),
      ("model dimension d", str(section["dimension"])),
  ]
  lines = ["", MARKDOWN_HEADING, ""]
  if section["lower_bound_exceeds_accounted"]:
    lines += [f"> **ERROR:** {exceeded_message(section)}", ""]
  lines += ["| quantity | value |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows]
  lines += ["", f"- **final model**: {section['threat_models']['final_model']}.",
            f"- **all iterates**: {section['threat_models']['all_iterates']}.",
            f"- {section['guarantee']}"]
  return "\n".join(lines) + "\n"
