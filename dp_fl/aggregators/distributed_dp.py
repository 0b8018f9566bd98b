"""TFF 0.87's distributed DP aggregator — discrete Gaussian or Skellam — accounted and calibrated.

`tff.aggregators.DistributedDpSumFactory` (rotation 'hd', modclip_prob = `MODCLIP_PROB`): with
noise multiplier z, each client rotates, clips to c, scales by γ⁻¹ (`_heuristic_scale_factor`:
k_stddevs = 3.9 standard deviations of the aggregate fit in 2^B), rounds stochastically to
integers, adds integer noise of scale σ = z c/(γ√n), and the sum is taken modulo 2^B. The
rounding is unconditional at β = 0 (TFF's default: the scaled L2 norm after rounding is at
most c/γ + √d', the "inflated" bound) or conditional at β > 0 (Kairouz, Liu & Steinke 2021,
Sec. 4: redrawn until the norm is at most min(c/γ + √d', √(c²/γ² + d'/4 + √(2 log(1/β))
(c/γ + √d'/2))), which a draw meets with probability >= 1 − β; the bound is enforced, not
assumed — the anchor's runs use β = e^(−1/2), `ANCHOR_BETA`). The bound is the sensitivity:
at 14 bits on StackOverflow's d' = 2^19 it is 1.28 c at β = 0 and 1.01 c at β = e^(−1/2).
The mechanisms:

* `"ddgauss"` (TFF's 'distributed_dgauss'): N_Z(0, σ²) with σ rounded up (TFF's sampler uses
  ⌈σ⌉), accounted by Prop. 14 of Kairouz, Liu & Steinke (arXiv:2102.06387;
  `dp_fl.accounting.discrete_gaussian`) for the sum of n independent shares;
* `"skellam"` (TFF's 'distributed_skellam'): Sk(σ²/2, σ²/2) (variance σ², σ as float32),
  accounted by Thm. 3.5 of Agarwal, Kairouz & Liu (arXiv:2110.04995; `dp_fl.accounting.
  skellam`) for the Skellam sum of variance n σ². tensorflow_privacy's query seeds that noise
  with the clock (`[tf.timestamp() · 1e6, 0]`: guessable, and equal for two clients in the same
  microsecond); `NoisySums` builds the factory with `secret_skellam_query()` instead, whose
  seed is drawn from OS entropy inside the computation.

TFF states no guarantee (its DP event is `UnsupportedDpEvent`); the replace-one
sensitivities are Δ₂ = 2 × TFF's scaled inflated L2 bound and Δ₁ = 2 × its scaled L1 bound
(zero-out: once, `Setting.sensitivities`),
and `calibrated_setting` finds the smallest z reaching a target ε. Bits per coordinate = B
(the client's message and the secure-sum modulus are both B bits). Its MSE "bound" is
d'(σ² + 1/4)/(n γ⁻²): the noise's variance (<= σ², ⌈σ⌉² for the discrete Gaussian) plus
stochastic rounding's (<= 1/4), without wraps.

Everything is computed by TFF 0.87's own functions, and `NoisySums` (round after round on
NumPy vectors: the DME study, the digits experiment) checks that the process
TFF builds uses the accounted scale, norm bound and noise. `DistributedDpMeanFactory` is the
training aggregator of `--mechanism=ddgauss` / `skellam` (dp_fl/training/registry.py,
`DistributedDpEntry`): guards, TFF's factory with its bitwidth-B secure sums, at most m clients
a round — checked, the discrete Gaussian's τ is accounted at m — and / m. Training accounts
zero-out neighbours (dp_fl's DP-FTRL adjacency: Δ = TFF's bound on one client's rounded
vector); the DME study replace-one (2×, as cpSGD's paper 000).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl import _checks
from dp_fl import root_finding
from dp_fl.aggregators import _types
from dp_fl.aggregators import dp_ftrl
from dp_fl.aggregators import guards
from dp_fl.accounting import adaptive_clipping
from dp_fl.accounting import discrete_gaussian
from dp_fl.accounting import skellam
from dp_fl.mechanisms import cpsgd

# Neighbouring datasets, and how many times a client's norm bound the sum can move between
# them: zero-out (one client's update replaced by zeros, as dp_fl's DP-FTRL reports; training)
# or replace-one (by any other update: twice; cpSGD's paper 000 and the DME study).
ZERO_OUT = adaptive_clipping.ZERO_OUT  # The adjacency names dp_fl's accounting uses.
REPLACE_ONE = "replace_one"
SENSITIVITY_MULTIPLES = {ZERO_OUT: 1.0, REPLACE_ONE: 2.0}
# dp_fl's names of the mechanisms and TFF's.
MECHANISMS = {"ddgauss": "distributed_dgauss", "skellam": "distributed_skellam"}
# TFF 0.87's DistributedDpSumFactory settings: its defaults. β = 0 is unconditional rounding
# (TFF's default, this module's and the DME study's); the anchor's runs (google-research/
# federated distributed_dp) and training's `--ddp_beta` default use conditional rounding at
# β = e^(−1/2), which TFF's docstring recommends for β > 0.
MODCLIP_PROB = 1e-4
BETA = 0.0
ANCHOR_BETA = math.exp(-0.5)
MAX_BETA = 0.9
BETA_RANGE_WHY = ("0: unconditional stochastic rounding; β > 0 redraws the rounding until its "
                  "norm meets the tighter bound, each draw with probability >= 1 − β; the "
                  "distributed DP paper's runs use e^(-1/2) = 0.6065")
MAX_BITS = 22  # TFF's own limit (float32 arithmetic inside).
NOISE_MULTIPLIER_RANGE = (1e-3, 1e4)  # Where `calibrated_setting` searches z.
NOISE_MULTIPLIER_RATIO = 1.001  # ... until the bracket's ends are within this ratio (0.1 %).


def check_beta(beta: float, name: str = "beta") -> float:
  """β of TFF's conditional randomized rounding, in [0, `MAX_BETA`]: 0 is unconditional
  rounding; a draw meets the conditional bound with probability >= 1 − β, and TFF gives up
  after 1,000 draws."""
  return _checks.check_in_range(name, beta, 0.0, MAX_BETA, why=BETA_RANGE_WHY)


def _check_mechanism(mechanism: str) -> str:
  if mechanism not in MECHANISMS:
    raise ValueError(f"`mechanism` must be one of {sorted(MECHANISMS)}; got {mechanism!r}.")
  return mechanism


@dataclasses.dataclass(frozen=True)
class Setting:
  """What TFF's distributed DP aggregator does at one noise multiplier.

  Attributes:
    mechanism: "ddgauss" or "skellam".
    noise_multiplier: z (central noise std / c, before scaling).
    bits: B.
    scale_factor: γ⁻¹ of `_heuristic_scale_factor`, capped at `MAX_SCALE_FACTOR`.
    scaled_inflated_l2: TFF's norm bound on a client's rounded, scaled vector.
    scaled_l1: TFF's L1 bound, ⌈L2 · min(√d', L2)⌉.
    local_stddev: z c/√n · γ⁻¹ (float32), the local noise scale TFF states.
    sampled_stddev: the scale the noise is drawn with: ⌈local_stddev⌉ for the discrete
      Gaussian, local_stddev for Skellam.
    padded_dimension: d'.
    epsilon: ε at δ of what it was built for: one release of n clients, replace-one
      (`setting_at`), or the planned releases (`calibrated_setting`).
    rdp_order: the Rényi order achieving it.
    tau: τ of Prop. 14 (discrete Gaussian; 0 for Skellam).
    rounding_beta: β of the stochastic rounding (0: unconditional; > 0: conditional, the
      norm bound enforced by redrawing).
  """
  mechanism: str
  noise_multiplier: float
  bits: int
  scale_factor: float
  scaled_inflated_l2: float
  scaled_l1: float
  local_stddev: float
  sampled_stddev: float
  padded_dimension: int
  epsilon: float
  rdp_order: float
  tau: float
  rounding_beta: float = BETA

  def sensitivities(self, adjacency: str = REPLACE_ONE) -> tuple[float, float]:
    """(Δ₂, Δ₁) of the integer sum between `adjacency` neighbours: TFF's scaled bounds on a
    client's rounded vector, once (zero-out: the zero update rounds to zero) or twice
    (replace-one)."""
    if adjacency not in SENSITIVITY_MULTIPLES:
      raise ValueError(f"`adjacency` must be one of {sorted(SENSITIVITY_MULTIPLES)}; got "
                       f"{adjacency!r}.")
    multiple = SENSITIVITY_MULTIPLES[adjacency]
    return multiple * self.scaled_inflated_l2, multiple * self.scaled_l1

  def composed_epsilon(self, fewest_clients: int, most_clients: int, releases: int,
                       delta: float, adjacency: str = REPLACE_ONE
                       ) -> tuple[float, float, float]:
    """(ε, order, τ) at δ of `releases` sums of this setting's shares, each of between
    `fewest_clients` and `most_clients` clients (the scale and σ stay those of the m the
    setting was built for; realized cohorts vary): Prop. 14 with μ at the fewest shares and
    τ at the most (`discrete_gaussian.composed_epsilon`), or Thm. 3.5 at the fewest shares
    (the Skellam bound only worsens as the summed variance n σ² falls; τ = 0)."""
    l2, l1 = self.sensitivities(adjacency)
    if self.mechanism == "ddgauss":
      return discrete_gaussian.composed_epsilon(l2, l1, self.sampled_stddev, fewest_clients,
                                                most_clients, self.padded_dimension,
                                                releases, delta)
    _checks.check_positive_int("most_clients", most_clients)
    if most_clients < _checks.check_positive_int("fewest_clients", fewest_clients):
      raise ValueError(f"`most_clients` = {most_clients} is below `fewest_clients` = "
                       f"{fewest_clients}.")
    epsilon, order = skellam.composed_epsilon(l2, l1, fewest_clients * self.sampled_stddev ** 2,
                                              releases, delta)
    return epsilon, order, 0.0

  def mse_bound(self, num_clients: int) -> float:
    """d'(σ² + 1/4)/(n γ⁻²): noise (variance <= σ²) and rounding (<= 1/4), no wraps."""
    return (self.padded_dimension * (self.sampled_stddev ** 2 + 0.25)
            / (num_clients * self.scale_factor ** 2))


def setting_at(mechanism: str, noise_multiplier: float, num_clients: int, dimension: int,
               bits: int, delta: float, clip_norm: float, *, beta: float = BETA) -> Setting:
  """What `DistributedDpSumFactory(noise_multiplier, n, bits, c, beta=beta, mechanism=
  MECHANISMS[mechanism], rotation_type='hd')` will use, by TFF 0.87's own functions, and its ε.

  Raises:
    ValueError: 2^(2B) < n k_stddevs² (B bits cannot hold the sum; TFF refuses it too).
  """
  from tensorflow_federated.python.aggregators import discretization  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
  _check_mechanism(mechanism)
  beta = check_beta(beta)
  padded = cpsgd.padded_dimension(dimension)
  local = noise_multiplier * clip_norm / math.sqrt(num_clients)
  k_stddevs = distributed_dp._clip_prob_to_num_stddevs(MODCLIP_PROB)  # pylint: disable=protected-access
  scale = float(distributed_dp._heuristic_scale_factor(  # pylint: disable=protected-access
      local, clip_norm, bits, num_clients, padded, k_stddevs).numpy())
  if not scale > 0:  # NaN when 2^(2B) < n k_stddevs² (TFF's factory rejects those too).
    raise ValueError(f"B = {bits} bits cannot hold {k_stddevs:.2f} standard deviations of "
                     f"the sum of {num_clients} clients (TFF needs 2^(2B) >= n·k²); use "
                     "more bits.")
  scale = min(scale, distributed_dp.MAX_SCALE_FACTOR)
  inflated = float(discretization.inflated_l2_norm_bound(
      l2_norm_bound=clip_norm, gamma=1.0 / scale, beta=beta, dim=padded).numpy())
  scaled_l2 = (inflated + 1e-5) * scale  # TFF's leeway included, as in its DP query.
  scaled_l1 = float(math.ceil(scaled_l2 * min(math.sqrt(padded), scaled_l2)))
  local_scaled = float(np.float32(local * scale))  # TFF's query state is float32.
  # The discrete Gaussian's sampler draws with ⌈σ⌉; Skellam's with σ itself.
  sampled = float(max(1, math.ceil(local_scaled))) if mechanism == "ddgauss" else local_scaled
  setting = Setting(mechanism, noise_multiplier, bits, scale, scaled_l2, scaled_l1,
                    local_scaled, sampled, padded, math.nan, math.nan, math.nan, beta)
  epsilon, order, tau = setting.composed_epsilon(num_clients, num_clients, 1, delta)
  return dataclasses.replace(setting, epsilon=epsilon, rdp_order=order, tau=tau)


def calibrated_setting(mechanism: str, epsilon: float, delta: float, num_clients: int,
                       dimension: int, bits: int, clip_norm: float, *,
                       fewest_clients: Optional[int] = None, releases: int = 1,
                       adjacency: str = REPLACE_ONE, beta: float = BETA) -> Setting:
  """The setting of the smallest noise multiplier z (to 0.1 %) whose ε reaches the target:
  one release of `num_clients` shares, or (training) `releases` releases of between
  `fewest_clients` and `num_clients` shares each (`Setting.composed_epsilon`; the setting is
  built for `num_clients`, the m a round is scaled for).

  ε is non-increasing in z (the scaled sensitivity falls and σ grows), so a bisection on
  log z over `NOISE_MULTIPLIER_RANGE` (`root_finding.bisect`) keeps the upper end, whose ε is
  <= the target.

  Raises:
    ValueError: when no z up to 1e4 reaches ε: B bits leave too coarse a grid (TFF's
      rounding inflates the sensitivity by √d' grid steps).
  """
  fewest = num_clients if fewest_clients is None else fewest_clients
  evaluated: dict[float, Setting] = {}

  def setting(z: float) -> Setting:
    if z not in evaluated:
      built = setting_at(mechanism, z, num_clients, dimension, bits, delta, clip_norm,
                         beta=beta)
      if (fewest, releases, adjacency) != (num_clients, 1, REPLACE_ONE):
        reached, order, tau = built.composed_epsilon(fewest, num_clients, releases, delta,
                                                     adjacency)
        built = dataclasses.replace(built, epsilon=reached, rdp_order=order, tau=tau)
      evaluated[z] = built
    return evaluated[z]

  def too_coarse(low: float, high: float) -> str:
    del low
    best = setting(high)
    return (f"no noise multiplier <= {high:g} reaches ε = {epsilon:g} at B = {bits} bits "
            f"(n = {num_clients}, d' = {best.padded_dimension}, {releases} release(s), "
            f"cohorts of at least {fewest}): the grid is too coarse "
            f"(scale {best.scale_factor:.3g}, rounding inflates the L2 bound to "
            f"{best.scaled_inflated_l2 / best.scale_factor:.3g}·c); use more bits.")

  low, high = NOISE_MULTIPLIER_RANGE
  root_finding.expand_up(lambda z: setting(z).epsilon > epsilon, low, high, limit=high,
                         clamp_to_limit=True, unreachable=too_coarse)  # Checks z = high.
  # hi / lo - 1 > ratio - 1 is hi / lo > ratio exactly (Sterbenz: the subtraction is exact).
  return setting(root_finding.bisect(lambda z: not setting(z).epsilon <= epsilon, low, high,
                                     relative_tolerance=NOISE_MULTIPLIER_RATIO - 1.0))


@functools.cache
def _secret_skellam_query_type():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_privacy  # pylint: disable=g-import-not-at-top

  class SecretSkellamSumQuery(tensorflow_privacy.DistributedSkellamSumQuery):
    """tensorflow_privacy's distributed Skellam query, its noise seeded from OS entropy: each
    call draws a fresh int64 seed pair by an unseeded stateful op (TF seeds those from the
    OS), not from the clock."""

    def add_noise_to_sample(self, local_stddev, record):
      lam = 0.5 * tf.cast(local_stddev, tf.float64) ** 2

      def add_noise(v):
        seed = tf.random.uniform([2], minval=tf.int64.min, maxval=tf.int64.max,
                                 dtype=tf.int64)
        draws = tf.random.stateless_poisson(
            shape=tf.concat([tf.shape(v), [2]], axis=0), seed=seed, lam=[lam, lam],
            dtype=tf.int64)
        return v + tf.cast(draws[..., 0] - draws[..., 1], v.dtype)

      return tf.nest.map_structure(add_noise, record)

  return SecretSkellamSumQuery


@contextlib.contextmanager
def secret_skellam_query():
  """While open, TFF's DistributedDpSumFactory builds its Skellam query as
  `SecretSkellamSumQuery` (OS-entropy noise) instead of tensorflow_privacy's clock-seeded one."""
  import tensorflow_privacy  # pylint: disable=g-import-not-at-top
  original = tensorflow_privacy.DistributedSkellamSumQuery
  tensorflow_privacy.DistributedSkellamSumQuery = _secret_skellam_query_type()
  try:
    yield
  finally:
    tensorflow_privacy.DistributedSkellamSumQuery = original


@functools.cache
def _sum_process(setting: Setting, dimension: int, clip_norm: float, num_clients: int):
  """TFF's DistributedDpSumFactory process for `setting` on vectors of length `dimension`,
  built once per setting (its state is per round, not per process), checked against the
  accounting: the process uses the accounted scale, norm bound and noise (and, for Skellam,
  the OS-entropy query)."""
  from tensorflow_federated.python.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
  factory = distributed_dp.DistributedDpSumFactory(
      noise_multiplier=setting.noise_multiplier, expected_clients_per_round=num_clients,
      bits=setting.bits, l2_clip=clip_norm, modclip_prob=MODCLIP_PROB,
      beta=setting.rounding_beta, mechanism=MECHANISMS[setting.mechanism], rotation_type="hd")
  with secret_skellam_query():
    process = factory.create(tff.TensorType(np.float32, [dimension]))
  return factory, process


class NoisySums:
  """TFF's distributed DP aggregator run round after round on NumPy client vectors.

  Each call is one round: the decoded noisy sum of the rows of `vectors` (each clipped to c
  by TFF), the process's state carried to the next call (fresh rotation seeds each round, as
  in training). Calls need a TFF execution context (`dp_fl.execution.runtime`); the first
  checks that the process TFF built uses the scale, norm bound and noise `setting` was
  accounted with. The noise shares come from the clients' own randomness (unseeded
  TensorFlow ops; Skellam from OS entropy), never from a public seed.
  """

  def __init__(self, setting: Setting, dimension: int, clip_norm: float, num_clients: int):
    self._setting = setting
    self._factory, self._process = _sum_process(setting, dimension, clip_norm, num_clients)
    self._state = None

  def _initial_state(self):
    state = self._process.initialize()
    _, discrete, dp_state = self._factory._unpack_state(state)  # pylint: disable=protected-access
    query = dp_state.query_state
    built = (float(discrete["scale_factor"]), float(query.l2_norm_bound),
             float(query.local_stddev))
    expected = (self._setting.scale_factor, self._setting.scaled_inflated_l2,
                self._setting.local_stddev)
    if not np.allclose(built, expected, rtol=1e-4):
      raise RuntimeError(f"TFF's DistributedDpSumFactory built (scale, scaled L2 bound, local "
                         f"stddev) = {built}, but the accounting assumed {expected}.")
    return state

  def __call__(self, vectors: np.ndarray) -> np.ndarray:
    if self._state is None:
      self._state = self._initial_state()
    output = self._process.next(self._state, list(np.asarray(vectors, np.float32)))
    self._state = output.state
    return np.asarray(output.result, np.float64)


def noisy_sum(setting: Setting, vectors: np.ndarray, clip_norm: float) -> np.ndarray:
  """One round of TFF's distributed DP aggregator on `vectors` (n × d): the decoded noisy sum
  (`NoisySums`, a fresh state)."""
  n, d = vectors.shape
  return NoisySums(setting, d, clip_norm, n)(vectors)


class DistributedDpMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """The distributed DP mean: guards, TFF's `DistributedDpSumFactory`, / m.

  Non-finite updates and updates above `zeroing_norm` are zeroed (`guards.guard_update`, as
  every DP aggregator's guards), the rest rotated and clipped to c by TFF's factory,
  discretized, noised by each client (the Skellam noise from OS entropy,
  `secret_skellam_query`) and summed by its bitwidth-B secure sums; the server refuses a round
  of more than m clients (the accounting bounds the number of shares by m) and divides by the
  fixed m. The guards are inlined in one wrapper rather than nested as factories: TFF's
  factory is already deep, and two more wrapper levels make the composed computation's proto
  deeper than protobuf (upb) parses back (`DecodeError`).

  Measurements per round: clients, nonfinite_count, zeroed_count, and TFF's distributed DP
  measurements (l2_clip, scale_factor, scaled_local_stddev, padded_dim, ...).
  """

  def __init__(self, mechanism: str, *, noise_multiplier: float, clip_norm: float, bits: int,
               clients_per_round: int, zeroing_norm: Optional[float] = None,
               beta: float = BETA):
    self._mechanism = _check_mechanism(mechanism)
    self._beta = check_beta(beta)
    self._noise_multiplier = _checks.check_positive("noise_multiplier", noise_multiplier)
    self._clip_norm = _checks.check_positive("clip_norm", clip_norm)
    self._bits = _checks.check_positive_int("bits", bits)
    if self._bits > MAX_BITS:
      raise ValueError(f"`bits` must be at most {MAX_BITS} (TFF's limit); got {bits}.")
    self._clients_per_round = _checks.check_positive_int("clients_per_round",
                                                         clients_per_round)
    if zeroing_norm is None:
      zeroing_norm = dp_ftrl.DEFAULT_ZEROING_MULTIPLE * clip_norm
    if zeroing_norm < clip_norm:
      raise ValueError(f"`zeroing_norm`={zeroing_norm} is below the clip norm {clip_norm}; "
                       "use zeroing_norm >= clip_norm.")
    self._zeroing_norm = float(zeroing_norm)

  @property
  def bits(self) -> int:
    return self._bits

  def setting(self, dimension: int, delta: float) -> Setting:
    """The accounted setting of one round of m clients (`setting_at`)."""
    return setting_at(self._mechanism, self._noise_multiplier, self._clients_per_round,
                      dimension, self._bits, delta, self._clip_norm, beta=self._beta)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    _types.tensor_specs(value_type)  # Clear errors for unsupported value types.
    from tensorflow_federated.python.aggregators import distributed_dp as tff_ddp  # pylint: disable=g-import-not-at-top
    factory = tff_ddp.DistributedDpSumFactory(
        noise_multiplier=self._noise_multiplier,
        expected_clients_per_round=self._clients_per_round, bits=self._bits,
        l2_clip=self._clip_norm, modclip_prob=MODCLIP_PROB, beta=self._beta,
        mechanism=MECHANISMS[self._mechanism], rotation_type="hd")
    with secret_skellam_query():
      inner = factory.create(value_type)
    zeroing_norm, most = self._zeroing_norm, self._clients_per_round

    @tff.tensorflow.computation(value_type)
    def guard(value):
      return guards.guard_update(value, zeroing_norm)

    @tff.tensorflow.computation(value_type, tff.TensorType(guards.COUNT_DTYPE))
    def divide(value_sum, clients):
      with tf.control_dependencies([tf.debugging.assert_less_equal(
          clients, guards.COUNT_DTYPE(most),
          message=f"more clients than the {most} a round the distributed DP accounting "
                  "allows (--clients_per_round)")]):
        leaves = [tf.identity(v) / tf.constant(float(most), v.dtype)
                  for v in _types.flatten(value_sum)]
      return _types.pack_as(value_sum, leaves)

    @tff.federated_computation()
    def init_fn():
      return inner.initialize()

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      guarded, nonfinite, zeroed = tff.federated_map(guard, value)
      output = inner.next(state, guarded)
      clients = tff.federated_sum(tff.federated_value(guards.COUNT_DTYPE(1), tff.CLIENTS))
      measurements = collections.OrderedDict(
          clients=clients, nonfinite_count=tff.federated_sum(nonfinite),
          zeroed_count=tff.federated_sum(zeroed), distributed_dp=output.measurements)
      return tff.templates.MeasuredProcessOutput(
          state=output.state, result=tff.federated_map(divide, (output.result, clients)),
          measurements=tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(_flattened(init_fn), _flattened(next_fn))


def _flattened(computation):
  """`computation` in TFF's call-dominant form: one block of locals instead of the nested
  blocks TFF's DistributedDpSumFactory composes (concatenation, rotation, discretization,
  modular clipping, the DP query, the secure sum). Nested, the learning process that embeds
  it is deeper than protobuf (upb) parses back (`DecodeError` in `compose_learning_process`);
  flattened, it is the same computation, under its original (annotated) type signature."""
  from tensorflow_federated.python.core.impl.compiler import transformations  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.computation import computation_impl  # pylint: disable=g-import-not-at-top
  concrete = computation_impl.ConcreteComputation
  flat = concrete.from_building_block(
      transformations.to_call_dominant(computation.to_building_block()))
  return concrete.with_type(flat, computation.type_signature)
