"""DP-FedAvg estimators (paper 001, Alg. 1) as a weighted TFF aggregation factory.

With user weights w_k = min(n_k / ŵ, 1) (n_k the client's example count, ŵ
the per-user example cap), total weight W = Σ_k w_k over all users and
sampling probability q, each round releases one of the two bounded-
sensitivity estimators of the weighted average update (paper 001, Sec. 2):

    f̃_f(𝒞) = Σ_{k∈𝒞} w_k Δ_k / (qW)                          fixed denominator
    f̃_c(𝒞) = Σ_{k∈𝒞} w_k Δ_k / max(qW_min, Σ_{k∈𝒞} w_k)      clipped denominator

plus Gaussian noise N(0, σ²I) with σ = z·𝕊, where by Lemma 1 𝕊 = S/(qW) for
f̃_f and 2S/(qW_min) for f̃_c, and z is the noise multiplier the moments
accountant sees (Thm. 1; `dp_fl.accounting.dpfedavg`). Updates are clipped to
L2 norm S before weighting, either flat (the concatenation of all tensors,
π(Δ, S)) or per layer (π(Δ(j), S_j) with S = √(Σ S_j²), by default
S_j = S/√m for m tensors). Cohorts may have any size (Poisson sampling).

Adaptive clipping (`adaptive=quantile.QuantileEstimator`, Andrew et al. 2021, Alg. 1): S
becomes Sₜ, the private quantile estimate of the update norms (`quantile.py`; its count has
sensitivity ½ under add/remove), flat clipping only; the noise is z·𝕊ₜ with 𝕊ₜ the
estimator's sensitivity at Sₜ, so the round is the S = 1 mechanism rescaled by the public
Sₜ/1 (post-processing; `dp_ftrl.py` states the construction). Each round is then the
Poisson-subsampled Gaussian with the effective noise multiplier (z⁻² + (2σ_b)⁻²)^(−½)
(Andrew et al., Thm. 1; `dp_fl/accounting/adaptive_clipping.py`).

As the client weight, pass the client's example count n_k (what
`tff.learning.algorithms.build_weighted_fed_avg` does); with
`example_cap=None` every user has w_k = 1.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import _checks
from dp_fl.accounting import dpfedavg as dpfedavg_accounting
from dp_fl.aggregators import _types
from dp_fl.aggregators import dp_ftrl
from dp_fl.aggregators import noise as noise_lib
from dp_fl.aggregators import quantile as quantile_lib

ESTIMATORS = ("fixed", "clipped")
CLIPPING = ("flat", "per_layer")
_WEIGHT_DTYPES = (np.float32, np.float64, np.int32, np.int64)


class DPFedAvgFactory(tff.aggregators.WeightedAggregationFactory):
  """Clipped, weighted, Gaussian-noised f̃_f or f̃_c (paper 001, Alg. 1).

  State: OrderedDict(numerator=<record factory state>, seed=int64[2],
  round=int64). Measurements: round, clients, total_weight (Σ_{k∈𝒞} w_k),
  denominator, clipped_count, nonfinite_count, sensitivity (𝕊), noise_stddev (σ); with
  adaptive clipping the state also holds clip (the estimator's state) and the measurements
  clip_norm (Sₜ used) and unclipped_fraction_noised (b̃ₜ).
  """

  def __init__(self, *, clip_norm: float, noise_multiplier: float,
               sampling_probability: float, total_weight: float,
               estimator: str = "fixed", min_weight: Optional[float] = None,
               example_cap: Optional[float] = None, clipping: str = "flat",
               layer_clip_norms: Optional[Sequence[float]] = None,
               seed: Optional[int] = None,
               record_aggregation_factory: Optional[
                   tff.aggregators.UnweightedAggregationFactory] = None,
               adaptive: Optional[quantile_lib.QuantileEstimator] = None):
    """Validates everything at construction.

    Args:
      clip_norm: S > 0, the bound on ||Δ_k|| (flat), or √(Σ S_j²) (per layer).
      noise_multiplier: z >= 0; σ = z·𝕊 (0 = no noise, for testing).
      sampling_probability: q in (0, 1].
      total_weight: W = Σ_k w_k over all users (the number of users when w_k = 1).
      estimator: "fixed" (f̃_f) or "clipped" (f̃_c).
      min_weight: W_min for f̃_c (required there, unused for f̃_f).
      example_cap: ŵ > 0, w_k = min(n_k / ŵ, 1); None gives w_k = 1.
      clipping: "flat" or "per_layer".
      layer_clip_norms: per-layer S_j (one per tensor); default S/√m. When given,
        S is taken as √(Σ S_j²) and must match `clip_norm` to 1e-6 relative.
      seed: noise seed; None draws one from OS entropy. Part of the state.
      record_aggregation_factory: sums the weighted clipped updates; SumFactory by default.
      adaptive: a `quantile.QuantileEstimator` with initial estimate `clip_norm` (flat
        clipping only): S follows it (module docstring). Its noise has its own seed stream.
    """
    self._clip_norm = _checks.check_positive("clip_norm", clip_norm)
    self._z = _checks.check_nonnegative("noise_multiplier", noise_multiplier)
    self._q = _checks.check_half_open_unit("sampling_probability", sampling_probability)
    self._total_weight = _checks.check_positive("total_weight", total_weight)
    if estimator not in ESTIMATORS:
      raise ValueError(f"`estimator` must be one of {ESTIMATORS} (f̃_f, f̃_c); got {estimator!r}.")
    self._estimator = estimator
    if estimator == "clipped":
      if min_weight is None:
        raise ValueError("`min_weight` (W_min) is required for estimator='clipped' "
                         "(f̃_c divides by max(q W_min, Σ w_k)).")
      self._min_weight = _checks.check_positive("min_weight", min_weight)
      self._sensitivity = dpfedavg_accounting.sensitivity_clipped_denominator(
          self._clip_norm, self._q, self._min_weight)
    else:
      if min_weight is not None:
        raise ValueError(f"`min_weight`={min_weight!r} only applies to estimator='clipped'; "
                         f"omit it for the fixed-denominator estimator.")
      self._min_weight = None
      self._sensitivity = dpfedavg_accounting.sensitivity_fixed_denominator(
          self._clip_norm, self._q, self._total_weight)
    self._example_cap = (None if example_cap is None
                         else _checks.check_positive("example_cap", example_cap))
    if clipping not in CLIPPING:
      raise ValueError(f"`clipping` must be one of {CLIPPING}; got {clipping!r}.")
    self._clipping = clipping
    if layer_clip_norms is not None:
      if clipping != "per_layer":
        raise ValueError("`layer_clip_norms` requires clipping='per_layer'.")
      norms = [_checks.check_positive("layer_clip_norms[j]", s) for s in layer_clip_norms]
      total = math.sqrt(sum(s * s for s in norms))
      if not math.isclose(total, self._clip_norm, rel_tol=1e-6):
        raise ValueError(
            f"`layer_clip_norms` give S = sqrt(sum S_j^2) = {total}, but `clip_norm`="
            f"{self._clip_norm}; the sensitivity uses S, so pass clip_norm={total}.")
      layer_clip_norms = norms
    self._layer_clip_norms = layer_clip_norms
    self._seed = dp_ftrl.seed_pair(seed)
    self._adaptive = adaptive
    if adaptive is not None:
      if not isinstance(adaptive, quantile_lib.QuantileEstimator):
        raise ValueError(f"`adaptive` must be a quantile.QuantileEstimator or None; got "
                         f"{type(adaptive).__name__}.")
      if clipping != "flat":
        raise ValueError("Adaptive clipping estimates one norm: it needs clipping='flat' "
                         f"(got {clipping!r}).")
      if not math.isclose(adaptive.initial_estimate, self._clip_norm, rel_tol=1e-12):
        raise ValueError(
            f"`adaptive.initial_estimate`={adaptive.initial_estimate} must be `clip_norm`="
            f"{self._clip_norm} (S₀ of the adaptive clip norm).")
      self._quantile_seed = dp_ftrl.seed_pair(seed, dp_ftrl.QUANTILE_SEED_STREAM)
    self._record_factory = _types.record_aggregation_factory(record_aggregation_factory)

  @property
  def sensitivity(self) -> float:
    """𝕊 of the estimator (paper 001, Lemma 1)."""
    return self._sensitivity

  @property
  def noise_stddev(self) -> float:
    """σ = z·𝕊 (paper 001, Thm. 1)."""
    return self._z * self._sensitivity

  def _layer_norms(self, m: int) -> list[float]:
    if self._layer_clip_norms is None:
      return [self._clip_norm / math.sqrt(m)] * m
    if len(self._layer_clip_norms) != m:
      raise ValueError(
          f"`layer_clip_norms` has {len(self._layer_clip_norms)} entries but the value type "
          f"has m={m} tensors (layers); pass one S_j per tensor.")
    return list(self._layer_clip_norms)

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    specs = _types.tensor_specs(value_type)
    if (not isinstance(weight_type, tff.TensorType) or weight_type.shape
        or weight_type.dtype.type not in _WEIGHT_DTYPES):
      raise ValueError(
          f"`weight_type` must be a scalar float or int tensor type (the client's example "
          f"count n_k); got {weight_type}.")
    flat = self._clipping == "flat"
    clip_norm = self._clip_norm
    layer_norms = None if flat else self._layer_norms(len(specs))
    cap = self._example_cap
    fixed = self._estimator == "fixed"
    fixed_denominator = self._q * self._total_weight
    min_denominator = self._q * self._min_weight if not fixed else 0.0
    stddev = self.noise_stddev
    sensitivity = self._sensitivity
    seed = self._seed
    numerator_process = self._record_factory.create(value_type)
    float_sum = tff.aggregators.SumFactory().create(tff.TensorType(np.float32))
    count_sum = tff.aggregators.SumFactory().create(tff.TensorType(np.int32))

    adaptive = self._adaptive
    estimator = None if adaptive is None else adaptive.process(self._quantile_seed)
    per_clip = sensitivity / clip_norm  # 𝕊 per unit of S.

    @tff.tensorflow.computation(value_type, weight_type, np.float32)
    def client_fn(value, n_k, clip_norm):
      leaves = _types.flatten(value)
      n_k = tf.cast(n_k, tf.float32)
      finite = tf.logical_and(
          tf.reduce_all([tf.reduce_all(tf.math.is_finite(x)) for x in leaves]),
          tf.math.is_finite(n_k))
      w_k = tf.ones([]) if cap is None else tf.minimum(n_k / cap, 1.0)
      w_k = tf.where(finite, tf.maximum(w_k, 0.0), 0.0)
      leaves = [tf.where(finite, x, tf.zeros_like(x)) for x in leaves]
      if flat:  # π(Δ, S), paper 001 Eq. 1.
        norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.cast(x, tf.float32)))
                                 for x in leaves]))
        scale = tf.minimum(1.0, tf.math.divide_no_nan(clip_norm, norm))
        scale = tf.where(norm > 0, scale, 1.0)
        clipped = norm > clip_norm
        leaves = [x * tf.cast(scale * w_k, x.dtype) for x in leaves]
        norm = tf.where(finite, norm, 0.0)
      else:  # π(Δ(j), S_j) per tensor.
        out, flags = [], []
        for x, s_j in zip(leaves, layer_norms):
          norm = tf.norm(tf.cast(x, tf.float32))
          scale = tf.where(norm > s_j, s_j / tf.maximum(norm, 1e-30), 1.0)
          flags.append(norm > s_j)
          out.append(x * tf.cast(scale * w_k, x.dtype))
        leaves, clipped = out, tf.reduce_any(flags)
        norm = tf.zeros([])  # Per-layer clipping is never adaptive.
      return (_types.pack_as(value, leaves), w_k, tf.cast(clipped, tf.int32),
              tf.cast(tf.logical_not(finite), tf.int32), norm)

    @tff.tensorflow.computation
    def init_noise():
      return collections.OrderedDict(seed=tf.constant(seed, noise_lib.SEED_DTYPE),
                                     round=tf.constant(0, noise_lib.ROUND_DTYPE))

    @tff.tensorflow.computation(init_noise.type_signature.result, value_type, tf.float32,
                                tf.float32)
    def server_fn(noise_state, numerator, weight_sum, clip_now):
      if fixed:
        denominator = tf.constant(fixed_denominator, tf.float32)
      else:
        denominator = tf.maximum(tf.constant(min_denominator, tf.float32), weight_sum)
      z = noise_lib.standard_normal(noise_state["seed"], noise_state["round"], specs)
      if adaptive is None:
        round_stddev = tf.constant(stddev, tf.float32)
      else:  # z·𝕊ₜ, 𝕊ₜ the sensitivity at the round's Sₜ.
        round_stddev = tf.constant(self._z * per_clip, tf.float32) * clip_now
      leaves = [x / tf.cast(denominator, x.dtype)
                + (tf.constant(stddev, x.dtype) if adaptive is None
                   else tf.cast(round_stddev, x.dtype)) * z_i
                for x, z_i in zip(_types.flatten(numerator), z)]
      if adaptive is not None:  # min(1, S_cap / Sₜ): post-processing (quantile.py).
        leaves = [x * tf.cast(adaptive.step_scale(clip_now), x.dtype) for x in leaves]
      new_state = collections.OrderedDict(seed=noise_state["seed"],
                                          round=noise_state["round"] + 1)
      return _types.pack_as(numerator, leaves), denominator, new_state, round_stddev

    @tff.tensorflow.computation(tf.float32)
    def sensitivity_at(clip_now):
      return tf.constant(per_clip, tf.float32) * clip_now

    @tff.federated_computation()
    def init_fn():
      state = collections.OrderedDict(
          numerator=numerator_process.initialize(),
          noise=tff.federated_eval(init_noise, tff.SERVER))
      if estimator is not None:
        state["clip"] = estimator.initialize()
      return tff.federated_zip(state)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      if estimator is None:
        clip_now = tff.federated_value(np.float32(clip_norm), tff.SERVER)
      else:
        clip_now = estimator.report(state.clip)
      weighted, w, was_clipped, nonfinite, norms = tff.federated_map(
          client_fn, tff.federated_zip((value, weight, tff.federated_broadcast(clip_now))))
      numerator = numerator_process.next(state.numerator, weighted)
      weight_sum = float_sum.next(float_sum.initialize(), w).result
      result, denominator, noise_state, round_stddev = tff.federated_map(
          server_fn, tff.federated_zip((state.noise, numerator.result, weight_sum, clip_now)))
      measurements = collections.OrderedDict(
          round=state.noise.round,
          clients=tff.federated_sum(tff.federated_value(1, tff.CLIENTS)),
          total_weight=weight_sum,
          denominator=denominator,
          clipped_count=count_sum.next(count_sum.initialize(), was_clipped).result,
          nonfinite_count=count_sum.next(count_sum.initialize(), nonfinite).result,
          sensitivity=tff.federated_value(np.float32(sensitivity), tff.SERVER),
          noise_stddev=round_stddev,
          record_aggregation=numerator.measurements)
      new_state = collections.OrderedDict(numerator=numerator.state, noise=noise_state)
      if estimator is not None:
        new_state["clip"] = estimator.next(state.clip, norms)
        measurements["sensitivity"] = tff.federated_map(sensitivity_at, clip_now)
        measurements.update(clip_norm=clip_now,
                            unclipped_fraction_noised=new_state["clip"].noised_fraction)
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(new_state),
          result=result,
          measurements=tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(init_fn, next_fn)
