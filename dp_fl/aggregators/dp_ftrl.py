"""DP-FTRL aggregation with streaming correlated noise as a TFF aggregation factory.

Paper 004, Alg. 1 and Eqs. 1/4: each round the clients' updates are clipped to
L2 norm ζ, summed, and the round's row of the correlated noise σζ C⁻¹Z is
added before dividing by the fixed number of clients per round m:

    Δ̃ᵗ / m = (Σ_i clip(Δᵢᵗ, ζ) + σζ (C⁻¹ Z)_{t,:}) / m.

The mechanism (BLT, BandMF, TreeAgg or DP-SGD's C = I) enters only through its
streaming generator (`dp_fl.aggregators.noise`, built from the mechanism's typed
noise spec in `dp_fl.mechanisms.streaming`), whose buffers live in the
aggregator state next to the noise seed and the round index: the state alone
determines the rest of the noise stream, so a checkpointed state resumes it
bit for bit.

Composition (outermost first), all TFF factories except the noise step:

    nonfinite_zeroing_factory   NaN/Inf client updates -> zeros (counted)
      tff zeroing_factory       updates with L2 norm > zeroing_norm -> zeros
        tff clipping_factory    global L2 clipping to ζ (counted)
          record factory        SumFactory by default (e.g. a secure sum)
    + correlated noise at the server, / clients_per_round.

Privacy accounting (sensitivity of C under the participation schema, zCDP,
ε) is done by `dp_fl.accounting` from the same mechanism; this module only
guarantees that the noise added is exactly σζ C⁻¹Z for that mechanism.

Adaptive clipping (`adaptive=quantile.QuantileEstimator`, Andrew et al. 2021): the clip
norm ζₜ of round t is the private quantile estimator's (`quantile.py`, a TFF
EstimationProcess given to TFF's clipping factory) and the round's noise is scaled by it:

    Δ̃ᵗ = Σᵢ clip(Δᵢᵗ, ζₜ) + σζₜ (C⁻¹Z)_{t,:} = ζₜ · (yₜ + σ (C⁻¹Z)_{t,:}),
    yₜ = Σᵢ clip(Δᵢᵗ, ζₜ) / ζₜ.

Claim: the run is the fixed-ζ mechanism with ζ = 1 on the normalised stream y (plus the
quantile releases), so its privacy is that of C with unit clip norm and σ, composed with the
count releases. Proof: each client's normalised update has norm ≤ 1, so y has the same
per-participation sensitivity as unit-ζ clipping, and the released row is ζₜ times the
unit-ζ mechanism's row t; ζₜ is a function of the counts released before round t only, so
the rescaling is post-processing and yₜ an adaptively chosen input. The Gaussian matrix
mechanism with lower-triangular C keeps its guarantee for adaptively chosen inputs (Denisov,
McMahan, Rush, Smith, Thakurta 2022, Thm. 2.1), and interleaving the count releases keeps the
joint strategy lower-triangular (a block diag(C, I) in release order). Tested against dense
brute force: the released prefix sums equal A(y + σC⁻¹Z) rescaled row by row
(tests/aggregators/adaptive_clipping_test.py).
"""

from __future__ import annotations

import collections
import math
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import _checks
from dp_fl.aggregators import _types
from dp_fl.aggregators import guards
from dp_fl.aggregators import noise as noise_lib
from dp_fl.aggregators import quantile as quantile_lib
from dp_fl.mechanisms import streaming

DEFAULT_ZEROING_MULTIPLE = 1e3  # zeroing_norm default: 1000 ζ (L2).
QUANTILE_SEED_STREAM = 1  # `seed_pair(seed, 1)`: the adaptive clip norm's noise.


def adaptive_zeroing_norm(estimator: quantile_lib.QuantileEstimator) -> float:
  """The zeroing norm with an adaptive clip norm: 1000 × the largest ζ the estimator can
  reach (a numeric guard: only updates whose norm overflows clipping are zeroed)."""
  return DEFAULT_ZEROING_MULTIPLE * estimator.max_estimate


def seed_pair(seed: Optional[int], stream: int = 0) -> np.ndarray:
  """The two-word int64 seed held in the state; fresh OS entropy when `seed` is None.

  `stream` > 0 gives an independent seed of the same `seed` (the adaptive clip norm's noise,
  `quantile.py`, beside the update noise's stream 0).
  """
  if seed is not None:
    seed = _checks.check_nonnegative_int("seed", seed)
  sequence = (np.random.SeedSequence(seed) if stream == 0
              else np.random.SeedSequence(seed, spawn_key=(stream,)))
  return sequence.generate_state(2, np.uint32).astype(np.int64)


class DPFTRLFactory(tff.aggregators.UnweightedAggregationFactory):
  """Clipped sum + streaming correlated noise σζ C⁻¹Z, divided by m (paper 004, Alg. 1).

  Build it from a mechanism (`DPFTRLFactory(mechanism, ...)`: a catalog
  mechanism, a noise spec or a TF generator) or with a named constructor
  (`blt`, `banded`, `tree`, `dpsgd`). State: OrderedDict(inner=<guards/zeroing/
  clipping/sum state>, noise=OrderedDict(seed=int64[2], round=int64,
  buffers=<one [buffers, *shape] tensor per model tensor>)). Measurements per
  round: round, clients, clipped_count, clipped_fraction, zeroed_count,
  nonfinite_count, noise_stddev (σζ, the std of each entry of Z); with adaptive clipping
  also clip_norm (ζₜ used this round) and unclipped_fraction_noised (b̃ₜ, the estimator's
  released fraction), and the state's inner clipping_norm holds the estimator's state.
  """

  def __init__(self, noise: Any, *, clip_norm: float,
               noise_multiplier: float, clients_per_round: int,
               rounds: Optional[int] = None, seed: Optional[int] = None,
               zeroing_norm: Optional[float] = None,
               record_aggregation_factory: Optional[
                   tff.aggregators.UnweightedAggregationFactory] = None,
               adaptive: Optional[quantile_lib.QuantileEstimator] = None):
    """Builds the factory; all arguments are validated here, not in a traced graph.

    Args:
      noise: the mechanism: anything `noise.from_mechanism` accepts (a
        `dp_fl.mechanisms.catalog.Mechanism`, a `dp_fl.mechanisms.streaming`
        noise spec, or a TF `noise.StreamingNoise`).
      clip_norm: ζ > 0, the L2 clip norm of each client update.
      noise_multiplier: σ >= 0; each entry of Z has std σζ (0 = no noise).
      clients_per_round: m >= 1, the fixed denominator.
      rounds: training rounds; must not exceed what the mechanism was built for
        (BandMF's n, TreeAgg's n). Defaults to the mechanism's own n, if any.
        Also sizes the online tree's state when `noise` is a catalog mechanism.
      seed: noise seed (non-negative int); None draws one from OS entropy. The
        seed is part of the state either way.
      zeroing_norm: client updates with L2 norm above it are zeroed (TFF's
        zeroing factory); default 1000 ζ; math.inf disables.
      record_aggregation_factory: how clipped updates are summed;
        tff.aggregators.SumFactory() by default.
      adaptive: a `quantile.QuantileEstimator` whose initial estimate is `clip_norm`: the
        clip norm follows its private quantile estimate (module docstring); None: fixed ζ.
        Its noise has its own seed stream of `seed`. The zeroing norm then defaults to
        `adaptive_zeroing_norm`.
    """
    noise = noise_lib.from_mechanism(noise, rounds)
    self._noise = noise
    self._clip_norm = _checks.check_positive("clip_norm", clip_norm)
    self._noise_multiplier = _checks.check_nonnegative("noise_multiplier", noise_multiplier)
    self._clients_per_round = _checks.check_positive_int("clients_per_round", clients_per_round)
    if rounds is None:
      rounds = noise.max_rounds
    if rounds is not None:
      rounds = streaming.check_rounds(rounds, noise.max_rounds, noise.name)
    self._rounds = rounds
    self._seed = seed_pair(seed)
    self._adaptive = adaptive
    if adaptive is not None:
      if not isinstance(adaptive, quantile_lib.QuantileEstimator):
        raise ValueError(f"`adaptive` must be a quantile.QuantileEstimator or None; got "
                         f"{type(adaptive).__name__}.")
      if not math.isclose(adaptive.initial_estimate, self._clip_norm, rel_tol=1e-12):
        raise ValueError(
            f"`adaptive.initial_estimate`={adaptive.initial_estimate} must be `clip_norm`="
            f"{self._clip_norm} (ζ₀ of the adaptive clip norm).")
      self._quantile_seed = seed_pair(seed, QUANTILE_SEED_STREAM)
    if zeroing_norm is None:
      zeroing_norm = (DEFAULT_ZEROING_MULTIPLE * self._clip_norm if adaptive is None
                      else adaptive_zeroing_norm(adaptive))
    if zeroing_norm != math.inf:
      zeroing_norm = _checks.check_positive("zeroing_norm", zeroing_norm)
    if zeroing_norm < self._clip_norm:
      raise ValueError(
          f"`zeroing_norm`={zeroing_norm} is below `clip_norm`={self._clip_norm}; it would "
          f"zero updates that clipping keeps. Use zeroing_norm >= clip_norm.")
    self._zeroing_norm = float(zeroing_norm)
    self._record_factory = _types.record_aggregation_factory(record_aggregation_factory)

  # -- named constructors (paper 004, Table 1) ---------------------------------------------

  @classmethod
  def blt(cls, theta: Any, omega: Any, **kwargs) -> "DPFTRLFactory":
    """BLT-DP-FTRL with C = BLT(θ, ω) (paper 004, Eq. 2); kwargs as in `__init__`.

    Streams by paper 004 Alg. 3 with d buffers; defined for any number of rounds.
    """
    return cls(streaming.BltStreamingNoise(theta, omega), **kwargs)

  @classmethod
  def banded(cls, c_matrix: Any, **kwargs) -> "DPFTRLFactory":
    """DP-FTRL with any banded lower-triangular C (e.g. BandMF's), as a dense n × n array.

    bands − 1 buffers; refuses `rounds` beyond the n of C.
    """
    return cls(streaming.BandedStreamingNoise(c_matrix), **kwargs)

  @classmethod
  def tree(cls, *, rounds: int, **kwargs) -> "DPFTRLFactory":
    """Online TreeAgg (Kairouz et al.) for `rounds` rounds, ⌊log₂ n⌋ buffers."""
    return cls(streaming.TreeStreamingNoise(rounds), rounds=rounds, **kwargs)

  @classmethod
  def dpsgd(cls, **kwargs) -> "DPFTRLFactory":
    """DP-SGD / DP-FedAvg with a fixed cohort: C = I, independent noise, no buffers."""
    return cls(streaming.IdentityStreamingNoise(), **kwargs)

  # -- properties --------------------------------------------------------------------------

  @property
  def noise(self) -> noise_lib.StreamingNoise:
    return self._noise

  @property
  def noise_stddev(self) -> float:
    """σζ: the std of each entry of Z (before C⁻¹), added to the sum."""
    return self._noise_multiplier * self._clip_norm

  @property
  def clients_per_round(self) -> int:
    return self._clients_per_round

  @property
  def adaptive(self) -> Optional[quantile_lib.QuantileEstimator]:
    return self._adaptive

  @property
  def rounds(self) -> Optional[int]:
    return self._rounds

  # -- process -----------------------------------------------------------------------------

  def create(self, value_type) -> tff.templates.AggregationProcess:
    """The aggregation process for `value_type` (a structure of float tensors)."""
    specs = _types.tensor_specs(value_type)
    adaptive = self._adaptive
    clip = (self._clip_norm if adaptive is None
            else adaptive.process(self._quantile_seed))
    fixed_stddev = None if adaptive is not None else self.noise_stddev
    inner_process = guards.nonfinite_zeroing_factory(
        tff.aggregators.zeroing_factory(
            self._zeroing_norm,
            tff.aggregators.clipping_factory(clip, self._record_factory),
            norm_order=2.0)).create(value_type)
    noise = self._noise
    sigma = self._noise_multiplier
    denominator = float(self._clients_per_round)
    seed = self._seed

    @tff.tensorflow.computation
    def init_noise_state():
      return collections.OrderedDict(
          seed=tf.constant(seed, noise_lib.SEED_DTYPE),
          round=tf.constant(0, noise_lib.ROUND_DTYPE),
          buffers=[noise.initial_buffer(s) for s in specs])

    noise_state_type = init_noise_state.type_signature.result

    @tff.tensorflow.computation(noise_state_type, value_type, np.float32)
    def add_noise(state, value_sum, clip_norm):
      seed_, round_ = state["seed"], state["round"]
      z = noise_lib.standard_normal(seed_, round_, specs)
      sums = _types.flatten(value_sum)
      buffers = _types.flatten(state["buffers"])
      results, new_buffers = [], []
      for z_i, sum_i, buffer_i in zip(z, sums, buffers):
        noise_i, buffer_i = noise.step(z_i, buffer_i, round_)
        # σζₜ: ζₜ is the round's clip norm (fixed, or the estimator's, module docstring).
        stddev = (tf.constant(fixed_stddev, sum_i.dtype) if fixed_stddev is not None
                  else tf.constant(sigma, sum_i.dtype) * tf.cast(clip_norm, sum_i.dtype))
        result_i = (sum_i + stddev * noise_i) / tf.constant(denominator, sum_i.dtype)
        if adaptive is not None:  # min(1, ζ_cap / ζₜ): post-processing (quantile.py).
          result_i = result_i * tf.cast(adaptive.step_scale(clip_norm), sum_i.dtype)
        results.append(result_i)
        new_buffers.append(buffer_i)
      new_state = collections.OrderedDict(
          seed=seed_, round=round_ + 1, buffers=new_buffers)
      return _types.pack_as(value_sum, results), new_state

    @tff.tensorflow.computation(np.float32)
    def noise_stddev(clip_norm):
      if fixed_stddev is not None:
        return tf.constant(fixed_stddev, tf.float32)
      return tf.constant(sigma, tf.float32) * clip_norm

    @tff.tensorflow.computation(tf.int32, tf.int32)
    def fraction(count, clients):
      return tf.math.divide_no_nan(tf.cast(count, tf.float32), tf.cast(clients, tf.float32))

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(collections.OrderedDict(
          inner=inner_process.initialize(),
          noise=tff.federated_eval(init_noise_state, tff.SERVER)))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      inner_output = inner_process.next(state.inner, value)
      zeroing = inner_output.measurements.nonfinite
      clipping = zeroing.zeroing
      clip_norm = clipping.clipping_norm  # ζₜ, the norm this round clipped to.
      result, noise_state = tff.federated_map(
          add_noise, tff.federated_zip((state.noise, inner_output.result, clip_norm)))
      clients = tff.federated_sum(tff.federated_value(1, tff.CLIENTS))
      clipped_count = clipping.clipped_count
      measurements = collections.OrderedDict(
          round=state.noise.round,
          clients=clients,
          clipped_count=clipped_count,
          clipped_fraction=tff.federated_map(
              fraction, tff.federated_zip((clipped_count, clients))),
          zeroed_count=zeroing.zeroed_count,
          nonfinite_count=inner_output.measurements.nonfinite_count,
          noise_stddev=tff.federated_map(noise_stddev, clip_norm),
          record_aggregation=clipping.clipping)
      if adaptive is not None:
        estimator_state = inner_output.state.inner_agg.inner_agg.clipping_norm
        measurements.update(clip_norm=clip_norm,
                            unclipped_fraction_noised=estimator_state.noised_fraction)
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(collections.OrderedDict(
              inner=inner_output.state, noise=noise_state)),
          result=result,
          measurements=tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(init_fn, next_fn)
