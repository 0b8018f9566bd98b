"""TFF 0.87's distributed DP aggregator (discrete Gaussian and Skellam), as dp_fl accounts it:
ε recomputed independently from the setting's own numbers, calibration to a target, the noisy
sum TFF builds, and the Skellam noise drawn from OS entropy (not tensorflow_privacy's clock)."""

import math

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest

from dp_fl.accounting import discrete_gaussian
from dp_fl.aggregators import distributed_dp

N, D, BITS, DELTA, CLIP = 20, 10, 16, 1e-5, 1.0


def _skellam_epsilon_by_hand(setting, n, delta):
  """Thm. 3.5 of arXiv:2110.04995 written out: ε(α) = αΔ₂²/(2μ) + min{((2α−1)Δ₂² + 6Δ₁)/(4μ²),
  3Δ₁/(2μ)}, μ = n σ², replace-one Δ = 2 × TFF's bounds, over integer orders."""
  l2, l1 = 2 * setting.scaled_inflated_l2, 2 * setting.scaled_l1
  mu = n * setting.sampled_stddev ** 2
  orders = np.arange(2, 257, dtype=np.float64)
  curve = [a * l2 ** 2 / (2 * mu) + min(((2 * a - 1) * l2 ** 2 + 6 * l1) / (4 * mu ** 2),
                                        3 * l1 / (2 * mu)) for a in orders]
  return rdp_privacy_accountant.compute_epsilon(orders, np.array(curve), delta)[0]


@pytest.mark.parametrize("mechanism", ["ddgauss", "skellam"])
def test_setting_epsilon_is_recomputed_independently(mechanism):
  setting = distributed_dp.setting_at(mechanism, 0.8, N, D, BITS, DELTA, CLIP)
  assert setting.padded_dimension == 16 and setting.scale_factor > 0
  if mechanism == "ddgauss":
    assert setting.sampled_stddev == math.ceil(setting.local_stddev)
    want = discrete_gaussian.sum_epsilon(2 * setting.scaled_inflated_l2, 2 * setting.scaled_l1,
                                         setting.sampled_stddev, N, 16, DELTA)[0]
    assert setting.epsilon == pytest.approx(want, rel=1e-12)
  else:
    assert setting.sampled_stddev == setting.local_stddev and setting.tau == 0.0
    # The written-out bound over integer orders 2..256 only: never below the module's.
    assert setting.epsilon <= _skellam_epsilon_by_hand(setting, N, DELTA) * (1 + 1e-12)
    assert setting.epsilon == pytest.approx(_skellam_epsilon_by_hand(setting, N, DELTA),
                                            rel=0.02)


@pytest.mark.parametrize("mechanism", ["ddgauss", "skellam"])
def test_calibration_reaches_the_target_with_the_least_noise(mechanism):
  setting = distributed_dp.calibrated_setting(mechanism, 4.0, DELTA, N, D, BITS, CLIP)
  assert setting.epsilon <= 4.0
  below = distributed_dp.setting_at(mechanism, setting.noise_multiplier / 1.01, N, D, BITS,
                                    DELTA, CLIP)
  assert below.epsilon > 4.0


def test_skellam_needs_no_more_noise_than_the_discrete_gaussian_at_many_bits():
  """At 16 bits the grid is fine: both are near the Gaussian mechanism's z."""
  z = {m: distributed_dp.calibrated_setting(m, 4.0, DELTA, N, D, BITS, CLIP).noise_multiplier
       for m in ("ddgauss", "skellam")}
  assert z["skellam"] == pytest.approx(z["ddgauss"], rel=0.15)


@pytest.mark.parametrize("mechanism", sorted(distributed_dp.MECHANISMS))
def test_zero_out_neighbours_move_the_sum_by_one_bound_and_cohorts_range(mechanism):
  setting = distributed_dp.setting_at(mechanism, 0.8, N, D, BITS, DELTA, CLIP)
  assert setting.sensitivities("zero_out") == (setting.scaled_inflated_l2, setting.scaled_l1)
  assert setting.sensitivities("replace_one") == (2 * setting.scaled_inflated_l2,
                                                  2 * setting.scaled_l1)
  assert setting.composed_epsilon(N, N, 1, DELTA)[0] == setting.epsilon  # Replace-one.
  zero_out = setting.composed_epsilon(N, N, 3, DELTA, "zero_out")[0]
  assert zero_out < setting.composed_epsilon(N, N, 3, DELTA, "replace_one")[0]
  # A range of realized cohorts bounds every cohort in it (each at its own n).
  ranged = setting.composed_epsilon(N // 2, N, 3, DELTA, "zero_out")[0]
  for n in range(N // 2, N + 1):
    assert ranged >= setting.composed_epsilon(n, n, 3, DELTA, "zero_out")[0] * (1 - 1e-12)
  with pytest.raises(ValueError, match="adjacency"):
    setting.sensitivities("add_remove")
  with pytest.raises(ValueError, match="fewest_clients"):
    setting.composed_epsilon(N, N // 2, 1, DELTA)


def test_the_flag_s_bit_limit_is_tff_s():
  from dp_fl.training import registry  # pylint: disable=g-import-not-at-top
  assert registry.DistributedDpSettings.MAX_BITS == distributed_dp.MAX_BITS


def test_a_bad_mechanism_is_named():
  with pytest.raises(ValueError, match="ddgauss"):
    distributed_dp.setting_at("gauss", 1.0, N, D, BITS, DELTA, CLIP)


def test_secret_skellam_noise_has_its_variance_and_fresh_seeds():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  query_type = distributed_dp._secret_skellam_query_type()  # pylint: disable=protected-access
  query = query_type(l1_norm_bound=10, l2_norm_bound=10, local_stddev=3.0)

  @tf.function
  def twice():
    zeros = tf.zeros([40000], tf.int32)
    return (query.add_noise_to_sample(3.0, zeros), query.add_noise_to_sample(3.0, zeros))

  a, b = (np.asarray(x, np.float64) for x in twice())
  assert not np.array_equal(a, b)  # Same instant, different noise.
  for x in (a, b):
    assert abs(x.mean()) < 5 * 3.0 / math.sqrt(x.size)
    assert x.var() == pytest.approx(9.0, rel=0.05)


@pytest.mark.parametrize("mechanism,beta", [("ddgauss", 0.0), ("skellam", 0.0),
                                            ("skellam", distributed_dp.ANCHOR_BETA)])
def test_noisy_sum_is_the_sum_plus_the_accounted_noise(mechanism, beta):
  # NoisySums checks that TFF's process enforces the accounted bound (β's included).
  rng = np.random.default_rng(0)
  vectors = rng.normal(size=(N, D)).astype(np.float32)
  vectors *= 0.5 / np.linalg.norm(vectors, axis=1, keepdims=True)  # Inside the clip.
  setting = distributed_dp.setting_at(mechanism, 0.5, N, D, BITS, DELTA, CLIP, beta=beta)
  with distributed_dp.secret_skellam_query():
    pass  # The context restores tensorflow_privacy's class.
  import tensorflow_privacy  # pylint: disable=g-import-not-at-top
  assert tensorflow_privacy.DistributedSkellamSumQuery.__name__ == "DistributedSkellamSumQuery"
  from dp_fl.execution import runtime  # pylint: disable=g-import-not-at-top
  with runtime.execution_context():
    sums = distributed_dp.NoisySums(setting, D, CLIP, N)  # Rounds, the state carried.
    errors = np.stack([sums(vectors) - vectors.sum(axis=0) for _ in range(3)]
                      + [distributed_dp.noisy_sum(setting, vectors, CLIP) - vectors.sum(axis=0)])
  rms = math.sqrt(setting.mse_bound(N) * N * N / 16)  # Per coordinate of the sum.
  assert 0.2 * rms < errors.std() < 3 * rms
  assert len({e.tobytes() for e in errors}) == 4  # Fresh noise (and rotation) every round.


def _conditional_bound_by_hand(clip, gamma, beta, dim):
  """Kairouz, Liu & Steinke 2021, Sec. 4, written out: after conditional randomized rounding
  to the grid γℤ^d the norm is at most min(c + γ√d, √(c² + γ²d/4 + √(2 log(1/β)) γ (c +
  γ√d/2)))."""
  unconditional = clip + gamma * math.sqrt(dim)
  if beta == 0:
    return unconditional
  return min(unconditional, math.sqrt(clip ** 2 + gamma ** 2 * dim / 4 + math.sqrt(
      2 * math.log(1 / beta)) * gamma * (clip + gamma * math.sqrt(dim) / 2)))


@pytest.mark.parametrize("mechanism", ["ddgauss", "skellam"])
def test_conditional_rounding_tightens_the_sensitivity_and_the_noise_it_needs(mechanism):
  # A coarse grid (10 bits, d' = 1024): unconditional rounding's worst case is 1.5 c, the
  # conditional bound 1.04 c.
  d, bits, beta = 1000, 10, distributed_dp.ANCHOR_BETA
  plain, conditional = (distributed_dp.setting_at(mechanism, 2.0, N, d, bits, DELTA, CLIP,
                                                  beta=b) for b in (0.0, beta))
  assert conditional.rounding_beta == beta and plain.rounding_beta == 0.0
  assert conditional.scale_factor == plain.scale_factor
  gamma = 1 / plain.scale_factor
  for setting, b in ((plain, 0.0), (conditional, beta)):
    want = (_conditional_bound_by_hand(CLIP, gamma, b, 1024) + 1e-5) / gamma
    assert setting.scaled_inflated_l2 == pytest.approx(want, rel=1e-5)
  assert conditional.scaled_inflated_l2 < 0.75 * plain.scaled_inflated_l2
  assert conditional.epsilon < plain.epsilon
  z = [distributed_dp.calibrated_setting(mechanism, 4.0, DELTA, N, d, bits, CLIP,
                                         beta=b).noise_multiplier for b in (0.0, beta)]
  assert z[1] < 0.6 * z[0]


def test_conditional_rounding_never_exceeds_the_accounted_bound():
  # TFF's own rounding (the function its factory calls) on scaled vectors of norm just below
  # c/γ whose every coordinate sits mid-cell (k + 1/2: the most rounding variance). Each of
  # 300 conditional roundings has a float64 norm within the accounted (scaled) bound — TFF's
  # float32 check plus its 1e-5 leeway holds exactly — while unconditional roundings of the
  # same vectors exceed it about one time in ten (the loop does redraw).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.aggregators import discretization  # pylint: disable=g-import-not-at-top
  d, bits, beta = 4096, 10, distributed_dp.ANCHOR_BETA
  setting = distributed_dp.setting_at("ddgauss", 2.0, N, d, bits, DELTA, CLIP, beta=beta)
  scale = setting.scale_factor
  radius = CLIP * scale  # c/γ, the clipped vector's largest scaled norm.
  wide = int(((radius ** 2) * (1 - 1e-6) - 0.25 * d) / 2)  # Coordinates ±1.5; the rest ±0.5.
  assert 0 < wide < d
  rng = np.random.default_rng(1)
  bound = tf.constant(radius, tf.float32)
  over = 0
  for seed in range(300):
    x = np.where(np.arange(d) < wide, 1.5, 0.5) * rng.choice([-1.0, 1.0], size=d)
    assert np.linalg.norm(x) <= radius
    x = tf.constant(rng.permutation(x), tf.float32)
    for b in (beta, 0.0):
      rounded = discretization._stochastic_rounding(  # pylint: disable=protected-access
          x, l2_norm_bound=bound, scale=scale, beta=b, seed=tf.constant(seed, tf.int64))
      norm = np.linalg.norm(np.asarray(rounded, np.float64))
      if b:
        assert norm <= setting.scaled_inflated_l2
      else:
        over += norm > setting.scaled_inflated_l2
  assert 10 < over < 100


@pytest.mark.parametrize("beta", [-0.1, 0.95, 1.0, float("nan"), None])
def test_a_bad_beta_is_named(beta):
  with pytest.raises(ValueError, match="beta.*0.6065"):
    distributed_dp.setting_at("skellam", 1.0, N, D, BITS, DELTA, CLIP, beta=beta)
  with pytest.raises(ValueError, match="beta"):
    distributed_dp.DistributedDpMeanFactory("skellam", noise_multiplier=1.0, clip_norm=1.0,
                                            bits=16, clients_per_round=4, beta=beta)


def _value_type():
  import collections  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return tff.to_type(collections.OrderedDict(w=tff.TensorType(np.float32, [3, 2]),
                                             b=tff.TensorType(np.float32, [4])))


def _updates(n, seed=0, norm=0.5):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    w, b = rng.normal(size=(3, 2)), rng.normal(size=4)
    scale = norm / math.sqrt(np.sum(w ** 2) + np.sum(b ** 2))
    out.append({"w": (w * scale).astype(np.float32), "b": (b * scale).astype(np.float32)})
  return out


def _flat(value):
  return np.concatenate([np.ravel(value["w"]), np.ravel(value["b"])])


@pytest.mark.parametrize("mechanism", ["ddgauss", "skellam"])
def test_the_training_mean_compiles_to_mapreduce_form_with_secure_sums(mechanism):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  factory = distributed_dp.DistributedDpMeanFactory(
      mechanism, noise_multiplier=0.5, clip_norm=CLIP, bits=BITS, clients_per_round=4)
  process = factory.create(_value_type())

  @tff.federated_computation(process.initialize.type_signature.result,
                             tff.FederatedType(_value_type(), tff.CLIENTS))
  def next_fn(state, value):
    output = process.next(state, value)
    return output.state, output.result

  form = tff.backends.mapreduce.get_map_reduce_form_for_computation(next_fn)
  assert form.securely_aggregates_tensors
  # Each client sends d' = 16 integers to a bitwidth-B secure sum (and a 1-bit count).
  assert "int32[16]" in str(form.work.type_signature.result)
  from dp_fl.execution import runtime  # pylint: disable=g-import-not-at-top
  with runtime.execution_context():
    assert BITS in tuple(form.secure_sum_bitwidth())


@pytest.mark.parametrize("mechanism", ["ddgauss", "skellam"])
def test_the_training_mean_is_the_guarded_mean_plus_the_accounted_noise(mechanism):
  from dp_fl.execution import runtime  # pylint: disable=g-import-not-at-top
  n = 6
  factory = distributed_dp.DistributedDpMeanFactory(
      mechanism, noise_multiplier=0.3, clip_norm=CLIP, bits=BITS, clients_per_round=n)
  setting = factory.setting(10, DELTA)
  updates = _updates(n)
  updates[0] = {"w": np.full((3, 2), np.nan, np.float32), "b": np.zeros(4, np.float32)}
  updates[1] = {"w": np.full((3, 2), 1e6, np.float32), "b": np.zeros(4, np.float32)}
  with runtime.execution_context():
    process = factory.create(_value_type())
    state = process.initialize()
    results = []
    for _ in range(6):
      out = process.next(state, updates)
      state = out.state
      results.append(_flat(out.result))
    assert int(out.measurements["nonfinite_count"]) == 1
    assert int(out.measurements["zeroed_count"]) == 1
    assert int(out.measurements["clients"]) == n
    too_many = distributed_dp.DistributedDpMeanFactory(
        mechanism, noise_multiplier=0.3, clip_norm=CLIP, bits=BITS,
        clients_per_round=2).create(_value_type())
    with pytest.raises(Exception, match="more clients than the 2"):
      too_many.next(too_many.initialize(), _updates(3))
  mean = np.sum([_flat(u) for u in updates[2:]], axis=0) / n
  errors = np.stack(results) - mean
  rms = math.sqrt(setting.mse_bound(n) * n * n / 16) / n  # Per coordinate of the mean.
  assert 0.2 * rms < errors.std() < 3 * rms


def test_bad_training_settings_are_named():
  with pytest.raises(ValueError, match="bits"):
    distributed_dp.DistributedDpMeanFactory("skellam", noise_multiplier=1.0, clip_norm=1.0,
                                            bits=23, clients_per_round=4)
  with pytest.raises(ValueError, match="zeroing_norm"):
    distributed_dp.DistributedDpMeanFactory("skellam", noise_multiplier=1.0, clip_norm=1.0,
                                            bits=16, clients_per_round=4, zeroing_norm=0.5)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
