"""Private quantile estimation of the clients' update norms: adaptive clipping.

Andrew, Thakkar, McMahan and Ramaswamy, "Differentially Private Learning with Adaptive
Clipping" (NeurIPS 2021), Alg. 1 with the geometric update: in round t each client reports
bᵢ = 1[‖Δᵢ‖ ≤ ζₜ]; the server releases the noised fraction of unclipped updates

    b̃ₜ = (Σᵢ (bᵢ − ½) + N(0, σ_b²)) / m + ½                  (m the expected cohort)

and moves the clip norm towards the target quantile γ of the norms,

    ζₜ₊₁ = ζₜ · exp(−η (b̃ₜ − γ)),

clamped to [min_estimate, max_estimate] (a public bound that keeps ζ representable in
float32; post-processing). Centring bᵢ by ½ makes one client's contribution ±½: the count's
sensitivity is ½ under add/remove adjacency and 1 under zero-out or replace-one (a
neighbour's reported ½ against −½); the accountants (`dp_fl/accounting/adaptive_clipping.py`)
charge the one the run's adjacency needs. ζₜ₊₁ depends on the data only through b̃ₜ, so the
clip norm every later round uses is post-processing of released values.

**The start search** (`search_step` s₀ > 0; dp_fl's addition, not in Andrew et al.): the
geometric step moves log ζ by at most η·max(γ, 1 − γ) a round, so a start 100× off costs
⌈ln 100 / (ηγ)⌉ rounds (18 at η = 1, γ = ½; 46 at the paper's η = 0.2) in which every update
is clipped to a fraction of its size or noised at 100× the scale — a quarter of a 100-round job
(docs/RESULTS.md). Until the search ends, the estimator instead steps log ζ by ±s in the
direction d = sign(γ − b̃ₜ) and halves s each time d reverses (a bisection over log ζ that
first brackets the quantile by steps of s₀); it ends when s ≤ η·max(γ, 1 − γ), the largest
step the geometric update takes, and the geometric update runs from there. It starts only
when the first round's b̃₀ is saturated (≤ γ/2 or ≥ (1 + γ)/2): a ζ₀ near the quantile gets
the geometric update from the first round. From 100× off
with s₀ = 2 the quantile is bracketed in ⌈ln 100 / 2⌉ = 3 rounds. The search reads the
data only through the same b̃ₜ (its d, s and the round it ends are functions of b̃₀..b̃ₜ):
post-processing, so the accounting is the estimator's without it.

`QuantileEstimator.process(seed)` is a `tff.templates.EstimationProcess` with the signature
TFF's `tff.aggregators.clipping_factory` takes for an adaptive clipping norm (`next(state,
norms@CLIENTS)`, `report(state) -> ζ@SERVER`), so the DP aggregators compose TFF's clipping
with it. TFF's own `PrivateQuantileEstimationProcess` is not used because its noise comes from
tensorflow_privacy's `tf.random.normal` (neither a function of the checkpointed state nor
secret from the seed): here the noise of round t is `stateless_normal(fold_in(seed, t))` with
the seed in the state, so a resumed run continues the estimator bit for bit.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import _checks
from dp_fl.accounting import adaptive_clipping
from dp_fl.aggregators import noise as noise_lib

NORM_DTYPE = np.float32  # What TFF's clipping factory passes to a norm process.
DEFAULT_LEARNING_RATE = 0.2  # η of Andrew et al. (their experiments; Sec. 4).
ESTIMATE_RANGE = (1e-8, 1e8)  # The clip norms a float32 model represents (config's range).


@dataclasses.dataclass(frozen=True)
class QuantileEstimator:
  """The geometric private quantile estimator of Andrew et al. (2021), Alg. 1.

  Attributes:
    initial_estimate: ζ₀ > 0.
    target_quantile: γ in (0, 1), the fraction of updates that should be left unclipped.
    learning_rate: η > 0 of the geometric update.
    count_stddev: σ_b >= 0, the std of the Gaussian noise on Σᵢ (bᵢ − ½) (0: not private).
    expected_count: m > 0, the denominator (the expected cohort).
    min_estimate, max_estimate: the public clamp of ζ.
    search_step: s₀ >= 0, the first log-step of the start search (see the module docstring;
      0: the geometric update from the first round, as in Andrew et al.).
    max_step_clip_norm: None, or ζ_cap: the aggregators then scale the released update of a
      round by min(1, ζ_cap / ζₜ), so a clip norm still far above the update norms (early in
      a run started high) cannot put more noise into the model than clipping at ζ_cap would
      (the noise guard's limit, `dp_fl/training/noise_guard.py`). ζₜ and ζ_cap are public:
      post-processing.
  """
  initial_estimate: float
  target_quantile: float
  learning_rate: float
  count_stddev: float
  expected_count: float
  min_estimate: float = ESTIMATE_RANGE[0]
  max_estimate: float = ESTIMATE_RANGE[1]
  max_step_clip_norm: Optional[float] = None
  search_step: float = 0.0

  def __post_init__(self):
    _checks.check_open_unit("target_quantile", self.target_quantile)
    _checks.check_positive("learning_rate", self.learning_rate)
    _checks.check_nonnegative("count_stddev", self.count_stddev)
    _checks.check_positive("expected_count", self.expected_count)
    _checks.check_positive("min_estimate", self.min_estimate)
    if not self.min_estimate < self.max_estimate < math.inf:
      raise ValueError(f"`max_estimate`={self.max_estimate!r} must be finite and above "
                       f"`min_estimate`={self.min_estimate!r}.")
    _checks.check_in_range("initial_estimate", self.initial_estimate, self.min_estimate,
                           self.max_estimate, why="the clip norm must stay representable")
    if self.max_step_clip_norm is not None:
      _checks.check_positive("max_step_clip_norm", self.max_step_clip_norm)
    _checks.check_in_range("search_step", self.search_step, 0.0,
                           adaptive_clipping.MAX_SEARCH_STEP,
                           why="a log-step of the clip norm; 0 for no start search")

  @property
  def geometric_step_bound(self) -> float:
    """η·max(γ, 1 − γ): the largest log-step of the geometric update (the search ends at or
    below it)."""
    return self.learning_rate * max(self.target_quantile, 1.0 - self.target_quantile)

  @property
  def initial_search_step(self) -> float:
    """s₀, or 0 when it is no larger than the geometric update's own step (no search)."""
    return self.search_step if self.search_step > self.geometric_step_bound else 0.0

  def step_scale(self, clip_norm: tf.Tensor) -> tf.Tensor:
    """min(1, ζ_cap / ζₜ): the factor of the round's released update (1 without a cap)."""
    if self.max_step_clip_norm is None:
      return tf.ones([], clip_norm.dtype)
    return tf.minimum(tf.ones([], clip_norm.dtype),
                      tf.constant(self.max_step_clip_norm, clip_norm.dtype) / clip_norm)

  def process(self, seed: np.ndarray) -> tff.templates.EstimationProcess:
    """The estimator as a TFF EstimationProcess; `seed` an int64[2] (its noise stream).

    State: OrderedDict(estimate=ζₜ, noised_fraction=b̃ₜ₋₁ (NaN before the first round),
    seed, round, search_step=sₜ (0 once the start search has ended), search_direction=the
    last search step's sign dₜ₋₁ (0 before the first)).
    """
    seed = np.asarray(seed, np.int64)
    if seed.shape != (2,):
      raise ValueError(f"`seed` must be an int64[2] seed pair; got shape {seed.shape}.")
    settings = self

    @tff.tensorflow.computation
    def init_state():
      return collections.OrderedDict(
          estimate=tf.constant(settings.initial_estimate, NORM_DTYPE),
          noised_fraction=tf.constant(np.nan, NORM_DTYPE),
          seed=tf.constant(seed, noise_lib.SEED_DTYPE),
          round=tf.constant(0, noise_lib.ROUND_DTYPE),
          search_step=tf.constant(settings.initial_search_step, NORM_DTYPE),
          search_direction=tf.constant(0.0, NORM_DTYPE))

    state_type = init_state.type_signature.result

    @tff.tensorflow.computation(NORM_DTYPE, NORM_DTYPE)
    def centred_indicator(norm, estimate):
      return tf.cast(norm <= estimate, NORM_DTYPE) - 0.5

    @tff.tensorflow.computation(state_type, NORM_DTYPE)
    def update(state, centred_sum):
      z = noise_lib.standard_normal(state["seed"], state["round"],
                                    [tf.TensorSpec([], NORM_DTYPE)])[0]
      fraction = noised_fraction(centred_sum, z, settings.count_stddev,
                                 settings.expected_count)
      estimate, search_step, direction = searched_update(
          state["estimate"], fraction, state["search_step"], state["search_direction"],
          tf.equal(state["round"], 0), settings)
      return collections.OrderedDict(
          estimate=estimate, noised_fraction=fraction, seed=state["seed"],
          round=state["round"] + 1, search_step=search_step, search_direction=direction)

    @tff.tensorflow.computation(state_type)
    def report_estimate(state):
      return state["estimate"]

    @tff.federated_computation()
    def init_fn():
      return tff.federated_eval(init_state, tff.SERVER)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(NORM_DTYPE, tff.CLIENTS))
    def next_fn(state, norms):
      estimate = tff.federated_broadcast(tff.federated_map(report_estimate, state))
      indicators = tff.federated_map(centred_indicator, (norms, estimate))
      return tff.federated_map(update, (state, tff.federated_sum(indicators)))

    @tff.federated_computation(init_fn.type_signature.result)
    def report_fn(state):
      return tff.federated_map(report_estimate, state)

    return tff.templates.EstimationProcess(init_fn, next_fn, report_fn)


def noised_fraction(centred_sum: tf.Tensor, standard_normal: tf.Tensor, count_stddev: float,
                    expected_count: float) -> tf.Tensor:
  """b̃ = (Σᵢ (bᵢ − ½) + σ_b z) / m + ½ (Andrew et al., Alg. 1)."""
  dtype = centred_sum.dtype
  return ((centred_sum + tf.constant(count_stddev, dtype) * standard_normal)
          / tf.constant(expected_count, dtype) + tf.constant(0.5, dtype))


def geometric_update(estimate: tf.Tensor, fraction: tf.Tensor,
                     settings: QuantileEstimator) -> tf.Tensor:
  """ζ · exp(−η (b̃ − γ)), clamped to the estimator's public range."""
  dtype = estimate.dtype
  step = tf.exp(-tf.constant(settings.learning_rate, dtype)
                * (fraction - tf.constant(settings.target_quantile, dtype)))
  return tf.clip_by_value(estimate * step, tf.constant(settings.min_estimate, dtype),
                          tf.constant(settings.max_estimate, dtype))


def searched_update(estimate: tf.Tensor, fraction: tf.Tensor, search_step: tf.Tensor,
                    last_direction: tf.Tensor, first_round: tf.Tensor,
                    settings: QuantileEstimator) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """(ζₜ₊₁, sₜ₊₁, dₜ) of one round: the start search's step while it runs, else the
  geometric update (module docstring). A function of the released b̃ₜ and the state only.

  The search starts only if the first round's fraction is saturated — at most γ/2 or at
  least (1 + γ)/2, halfway to all clipped or none — so a ζ₀ already near the quantile is not
  thrown ×e^±s₀ off by the noise in b̃ (the geometric update runs from the first round). A
  round with b̃ exactly γ keeps the last direction (no step, no lost reversal)."""
  dtype = estimate.dtype
  gamma = tf.constant(settings.target_quantile, dtype)
  direction = tf.sign(gamma - fraction)
  saturated = tf.logical_or(fraction <= gamma / 2, fraction >= (1 + gamma) / 2)
  search_step = tf.where(tf.logical_and(first_round, tf.logical_not(saturated)),
                         tf.zeros([], dtype), search_step)
  reversed_ = direction * last_direction < 0
  step = tf.where(reversed_, search_step / 2, search_step)
  searching = step > tf.constant(settings.geometric_step_bound, dtype)
  direction_kept = tf.where(tf.equal(direction, 0), last_direction, direction)
  searched = tf.clip_by_value(estimate * tf.exp(direction * step),
                              tf.constant(settings.min_estimate, dtype),
                              tf.constant(settings.max_estimate, dtype))
  return (tf.where(searching, searched, geometric_update(estimate, fraction, settings)),
          tf.where(searching, step, tf.zeros([], dtype)),
          tf.where(searching, direction_kept, tf.zeros([], dtype)))
