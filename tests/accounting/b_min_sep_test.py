"""b-min-sep Monte Carlo accounting (Dong & Ganesh 2026) against brute force and its limits.

* the chain's law, the dynamic program and the likelihood-ratio bounds against exact
  enumeration of every participation pattern (small n);
* b = 1 is Poisson sampling: δ̂ of C = I against dp_accounting's PoissonSampledDpEvent, at a
  typical and at a large ε;
* pure sampling with p = 1 is the fixed schedule 0, b, 2b, ...: δ̂ equals the Gaussian δ of
  the unamplified min-sep sensitivity;
* calibration then Estimate-Verify-Release on a fresh seed.
"""

import itertools
import math

import dp_accounting
import numpy as np
import pytest
import scipy.linalg

from dp_fl.accounting import amplification
from dp_fl.accounting import b_min_sep as bms
from dp_fl.accounting import zcdp


def _patterns(n, b):
  """Every participation pattern (a tuple of rounds pairwise >= b apart)."""
  for bits in itertools.product((0, 1), repeat=n):
    rounds = [t for t in range(n) if bits[t]]
    if all(t2 - t1 >= b for t1, t2 in zip(rounds, rounds[1:])):
      yield tuple(rounds)


def _probability(sampling, pattern, klass=0):
  """P[S = pattern] under the chain, by its definition (first-eligible law, then each
  eligible round sampled with probability p, ineligible for b - 1 rounds after); with
  availability, averaged over every outcome of the class's window coins (a round can be
  drawn only if its window's coin is up)."""
  n, b, p = sampling.rounds, sampling.min_sep, sampling.sampling_probability
  windows = (np.zeros(n, dtype=int) if sampling.availability is None
             else sampling.availability.windows[klass])
  q = sampling.window_probability
  ids = sorted({int(w) for w in windows if w >= 0})
  total = 0.0
  for coins in itertools.product((0, 1), repeat=len(ids)):
    up = dict(zip(ids, coins))
    weight = math.prod(q if c else 1.0 - q for c in coins) if q < 1.0 else float(all(coins))
    if weight == 0.0:
      continue
    for first, w in enumerate(sampling.initial_wait_probabilities()):
      if w == 0.0:
        continue
      prob, free_from = w * weight, first
      for t in range(n):
        there = windows[t] >= 0 and up[int(windows[t])]
        if t < free_from or not there:
          if t in pattern:
            prob = 0.0
          continue
        if t in pattern:
          prob *= p
          free_from = t + b
        else:
          prob *= 1.0 - p
      total += prob
  return total


def _enumerated_log_ratio(sampling, log_a, klass=0):
  out = []
  law = {s: _probability(sampling, s, klass) for s in _patterns(sampling.rounds,
                                                                  sampling.min_sep)}
  for row in log_a:
    terms = [math.log(q) + sum(row[t] for t in s) for s, q in law.items() if q > 0]
    out.append(float(np.logaddexp.reduce(terms)))
  return np.array(out)


SETTINGS = [(6, 1, 0.3, True), (7, 2, 0.5, True), (7, 3, 0.4, False), (5, 3, 1.0, True),
            (6, 3, 1.0, False), (2, 4, 0.6, True), (8, 8, 0.2, True)]


@pytest.mark.parametrize("n,b,p,warm", SETTINGS)
def test_pattern_law_sums_to_one_and_matches_the_sampler(n, b, p, warm):
  sampling = bms.BMinSepSampling(n, b, p, warm_start=warm)
  law = {s: _probability(sampling, s) for s in _patterns(n, b)}
  assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
  draws = sampling.sample_patterns(np.random.default_rng(3), 40000)
  seen = {}
  for row in draws:
    key = tuple(np.nonzero(row)[0].tolist())
    seen[key] = seen.get(key, 0) + 1
  assert set(seen) <= {s for s, q in law.items() if q > 0}
  for s, q in law.items():
    assert seen.get(s, 0) / 40000 == pytest.approx(q, abs=4 * math.sqrt(q * (1 - q) / 40000) + 1e-9)


@pytest.mark.parametrize("n,b,p,warm", SETTINGS)
def test_dynamic_program_equals_enumeration(n, b, p, warm):
  sampling = bms.BMinSepSampling(n, b, p, warm_start=warm)
  rng = np.random.default_rng(n * 100 + b)
  log_a = rng.normal(0.0, 3.0, size=(6, n))
  log_a[1] *= 40.0  # Rescaled rows.
  log_a[2] = 300.0 * np.sign(log_a[2])  # Beyond the linear range: the log-space path.
  log_a[3] = -1e6  # The client never takes part: log P[S = ∅].
  got = bms.log_likelihood_ratio(sampling, log_a)
  np.testing.assert_allclose(got, _enumerated_log_ratio(sampling, log_a), rtol=1e-10,
                             atol=1e-9)
  assert got[3] == pytest.approx(bms._log_never(sampling), abs=1e-9)


# Device availability: (n, b, p, warm, windows of two classes, q).
AVAILABILITY = [
    (7, 2, 0.5, True, [[-1, 0, 0, -1, 1, 1, 1], [0, 0, 0, 0, -1, -1, 3]], 0.6),
    (6, 3, 0.4, False, [[0, 0, 0, 1, 1, 1], [-1, 5, 5, 5, 6, -1]], 0.3),
    (6, 1, 0.3, True, [[-1, -1, 0, 0, -1, 2], [1, 1, 1, 1, 1, 1]], 1.0),
    (5, 2, 1.0, True, [[0, 0, -1, 1, 1], [-1, -1, -1, -1, 0]], 0.5),
    (3, 5, 0.7, True, [[0, 0, 0], [-1, 2, 2]], 0.45),
]


def _available(n, b, p, warm, windows, q):
  return bms.BMinSepSampling(n, b, p, warm_start=warm, availability=bms.Availability(
      np.array(windows), (3, 5), q))


@pytest.mark.parametrize("n,b,p,warm,windows,q", AVAILABILITY)
def test_availability_law_matches_the_sampler(n, b, p, warm, windows, q):
  sampling = _available(n, b, p, warm, windows, q)
  for klass in range(2):
    law = {s: _probability(sampling, s, klass) for s in _patterns(n, b)}
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    draws = sampling.sample_patterns(np.random.default_rng(klass), 40000, klass)
    seen = {}
    for row in draws:
      key = tuple(np.nonzero(row)[0].tolist())
      seen[key] = seen.get(key, 0) + 1
    assert set(seen) <= {s for s, v in law.items() if v > 0}
    for s, v in law.items():
      assert seen.get(s, 0) / 40000 == pytest.approx(
          v, abs=4 * math.sqrt(v * (1 - v) / 40000) + 1e-9)


@pytest.mark.parametrize("n,b,p,warm,windows,q", AVAILABILITY)
def test_availability_dynamic_program_equals_enumeration(n, b, p, warm, windows, q):
  sampling = _available(n, b, p, warm, windows, q)
  rng = np.random.default_rng(n * 10 + b)
  for klass in range(2):
    log_a = rng.normal(0.0, 3.0, size=(5, n))
    log_a[1] *= 40.0
    log_a[2] = 300.0 * np.sign(log_a[2])
    log_a[3] = -1e6
    want = _enumerated_log_ratio(sampling, log_a, klass)
    np.testing.assert_allclose(bms.log_likelihood_ratio(sampling, log_a, klass), want,
                               rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(bms._log_likelihood_ratio_logspace(sampling, log_a, klass),
                               want, rtol=1e-10, atol=1e-9)
    assert bms._log_never(sampling, klass) == pytest.approx(want[3], abs=1e-9)
    marginals = [sum(v for s, v in ((s, _probability(sampling, s, klass))
                                    for s in _patterns(n, b)) if t in s) for t in range(n)]
    np.testing.assert_allclose(bms.participation_probabilities(sampling, klass), marginals,
                               atol=1e-12)


def test_one_open_window_without_a_coin_is_no_availability_filter():
  plain = bms.BMinSepSampling(9, 3, 0.35)
  windowed = bms.BMinSepSampling(9, 3, 0.35, availability=bms.Availability(
      np.zeros((1, 9), dtype=int), (4,), 1.0))
  log_a = np.random.default_rng(0).normal(0.0, 2.0, size=(7, 9))
  np.testing.assert_allclose(bms.log_likelihood_ratio(windowed, log_a),
                             bms.log_likelihood_ratio(plain, log_a), rtol=1e-13)
  assert windowed.participation_rate == pytest.approx(
      bms.participation_probabilities(plain).mean(), rel=1e-12)


def test_availability_refuses_bad_windows():
  with pytest.raises(ValueError, match="consecutive"):
    bms.Availability(np.array([[0, -1, 0]]), (1,))
  with pytest.raises(ValueError, match="class_sizes"):
    bms.Availability(np.array([[0, 0, 0]]), (1, 2))
  with pytest.raises(ValueError, match="rounds"):
    bms.BMinSepSampling(4, 2, 0.5, availability=bms.Availability(np.zeros((1, 3), int), (1,)))
  with pytest.raises(ValueError, match="window_probability"):
    bms.Availability(np.zeros((1, 3), int), (1,), 0.0)


def test_stationary_rate_and_its_inverse():
  sampling = bms.BMinSepSampling(4000, 5, 0.1)
  draws = sampling.sample_patterns(np.random.default_rng(0), 200)
  assert draws.mean() == pytest.approx(sampling.participation_rate, rel=0.03)
  assert sampling.participation_rate == pytest.approx(0.1 / 1.4)
  gaps = np.diff(np.nonzero(draws[0])[0])
  assert gaps.min() >= 5
  assert bms.BMinSepSampling.probability_for_rate(0.1 / 1.4, 5) == pytest.approx(0.1)
  assert bms.BMinSepSampling.probability_for_rate(0.2, 5) == pytest.approx(1.0)
  with pytest.raises(ValueError, match="at most 1/5"):
    bms.BMinSepSampling.probability_for_rate(0.25, 5)
  for bad in (0.0, 1.5, float("nan")):
    with pytest.raises(ValueError, match="sampling_probability"):
      bms.BMinSepSampling(10, 2, bad)


def _blt_coefs(n, theta=(0.9, 0.5), omega=(0.3, 0.2)):
  t = np.arange(1, n)
  return np.concatenate([[1.0], sum(w * th ** (t - 1) for w, th in zip(omega, theta))])


def test_toeplitz_transpose_by_fft_equals_dense():
  sampling = bms.BMinSepSampling(37, 4, 0.3)
  coefs = _blt_coefs(37)
  pair = bms.dominating_pair(sampling, toeplitz_coefs=coefs)
  dense = bms.dominating_pair(sampling, matrix=scipy.linalg.toeplitz(coefs, np.zeros(37)))
  z = np.random.default_rng(1).normal(size=(5, 37))
  np.testing.assert_allclose(bms._Model(pair, bms.REMOVE)._transpose_apply(z), z @ dense.matrix,
                             atol=1e-12)
  np.testing.assert_allclose(pair.cross_bound, dense.cross_bound)


def test_exact_for_separated_columns_bounded_otherwise():
  n, b = 9, 3
  banded = np.tril(np.triu(np.ones((n, n)), -2))  # 3 bands: rounds 3 apart share no row.
  assert bms.dominating_pair(bms.BMinSepSampling(n, b, 0.4), matrix=banded).exact
  assert bms.dominating_pair(bms.BMinSepSampling(n, b, 0.4), matrix=np.eye(n)).exact
  assert not bms.dominating_pair(bms.BMinSepSampling(n, 2, 0.4), matrix=banded).exact
  pair = bms.dominating_pair(bms.BMinSepSampling(n, b, 0.4), toeplitz_coefs=_blt_coefs(n))
  assert not pair.exact
  # L_low <= L <= L_up, L by enumeration with the full quadratic form.
  sigma = 1.3
  rng = np.random.default_rng(5)
  for direction in bms.DIRECTIONS:
    model = bms._Model(pair, direction)
    rows = model.prepare(model.draw(rng, 20))
    bound = model.losses(rows, 1.0 / sigma)
    if direction == bms.REMOVE:
      patterns = (np.asarray(rows[0]) + 0.5 * pair.column_norms_squared) @ np.linalg.pinv(
          pair.gram)  # Recover 1_S from α = G 1_S − diag/2.
      x = np.rint(patterns) @ pair.matrix.T + sigma * np.linalg.solve(pair.matrix.T,
                                                                      rows[1].T).T
    else:
      x = sigma * np.linalg.solve(pair.matrix.T, rows[0].T).T
    true = []
    for xi in x:
      terms = []
      for s in _patterns(n, b):
        q = _probability(pair.sampling, s)
        v = pair.matrix[:, list(s)].sum(axis=1)
        terms.append(math.log(q) + (xi @ v - 0.5 * v @ v) / sigma ** 2)
      true.append(np.logaddexp.reduce(terms))
    if direction == bms.REMOVE:
      assert np.all(bound >= np.array(true) - 1e-9)
    else:
      assert np.all(bound <= np.array(true) + 1e-9)


@pytest.mark.parametrize("n,b", [(9, 2), (10, 3), (7, 1), (6, 6)])
def test_cross_bound_is_the_best_separated_set(n, b):
  gram = np.random.default_rng(n + b).uniform(0.0, 1.0, size=(n, n))
  gram = gram + gram.T
  want = []
  for t in range(n):
    others = [s for s in _patterns(n, b)
              if all(abs(r - t) >= b for r in s)]
    want.append(max(sum(gram[t, r] for r in s) for s in others))
  np.testing.assert_allclose(bms._cross_bound(gram, b), want, rtol=1e-12)


@pytest.mark.parametrize("epsilon,sigma", [(1.0, 1.0), (6.0, 0.45)])
def test_b_equals_one_is_poisson_sampling(epsilon, sigma):
  n, p = 12, 0.2
  pair = bms.dominating_pair(bms.BMinSepSampling(n, 1, p), matrix=np.eye(n))
  assert pair.exact
  est = bms.estimate_delta(pair, noise_multiplier=sigma, epsilon=epsilon, num_samples=2**17,
                           seed=4)
  accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  accountant.compose(dp_accounting.PoissonSampledDpEvent(
      p, dp_accounting.GaussianDpEvent(sigma)), n)
  exact = accountant.get_delta(epsilon)
  se = max(est.remove.standard_error, est.add.standard_error)
  assert exact > 1e-4  # A delta the sample resolves.
  assert est.delta_hat == pytest.approx(exact, abs=4 * se + 0.02 * exact)


@pytest.mark.parametrize("warm", [False, True])
def test_p_one_pure_is_the_unamplified_min_sep_gaussian(warm):
  n, b, sigma, eps = 20, 4, 2.0, 1.0
  pair = bms.dominating_pair(bms.BMinSepSampling(n, b, 1.0, warm_start=warm), matrix=np.eye(n))
  assert pair.unamplified_sensitivity == pytest.approx(math.sqrt(5))
  est = bms.estimate_delta(pair, noise_multiplier=sigma, epsilon=eps, num_samples=2**16, seed=2)
  gaussian = zcdp.gaussian_delta(math.sqrt(5) / sigma, eps)
  if not warm:  # One fixed schedule: the mechanism is the Gaussian one.
    for d in (est.remove, est.add):
      assert d.delta_hat == pytest.approx(gaussian, abs=4 * d.standard_error)
  else:  # Balls-in-bins with 4 bins of 5 rounds: amplified, never above the Gaussian.
    assert est.delta_hat < gaussian - 4 * est.worse.standard_error


def test_banded_p_one_pure_equals_unamplified_for_bandmf():
  n, b = 24, 6
  c = np.tril(np.triu(np.full((n, n), 0.5), -5)) + 0.5 * np.eye(n)
  pair = bms.dominating_pair(bms.BMinSepSampling(n, b, 1.0, warm_start=False), matrix=c)
  assert pair.exact
  sigma, eps = 3.0, 0.5
  est = bms.estimate_delta(pair, noise_multiplier=sigma, epsilon=eps, num_samples=2**15,
                           seed=9)
  gaussian = zcdp.gaussian_delta(pair.unamplified_sensitivity / sigma, eps)
  assert est.delta_hat == pytest.approx(gaussian, abs=4 * est.worse.standard_error)


def test_calibrate_then_verify_on_a_fresh_seed():
  n, b, p = 32, 4, 0.5
  pair = bms.dominating_pair(bms.BMinSepSampling(n, b, p), toeplitz_coefs=_blt_coefs(n))
  eps, delta = 2.0, 1e-3
  cal = bms.calibrate_noise_multiplier(pair, epsilon=eps, delta=delta / 2, num_samples=2**15,
                                       seed=11, importance_sampling=False)
  assert 0 < cal.noise_multiplier < cal.unamplified_noise_multiplier
  assert cal.by_direction[cal.direction]["noise_multiplier"] == cal.noise_multiplier
  # δ̂ at σ* is δ on the calibration sample.
  again = bms.estimate_delta(pair, noise_multiplier=cal.noise_multiplier, epsilon=eps,
                             num_samples=2**15, seed=11)
  assert again.delta_hat == pytest.approx(delta / 2, rel=1e-4)
  ok = bms.estimate_verify_release(pair, noise_multiplier=cal.noise_multiplier * 1.05,
                                   epsilon=eps, delta=delta, delta_verify=0.8 * delta, seed=12)
  assert ok.verified and ok.delta_hat <= 0.8 * delta
  bad = bms.estimate_verify_release(pair, noise_multiplier=cal.noise_multiplier * 0.7,
                                    epsilon=eps, delta=delta, delta_verify=0.8 * delta, seed=12)
  assert not bad.verified
  # ε for σ: the inverse of the calibration on the same sample.
  eps_star, hat, _ = bms.calibrate_epsilon(pair, noise_multiplier=cal.noise_multiplier,
                                           delta=delta / 2, num_samples=2**15, seed=11)
  assert eps_star == pytest.approx(eps, rel=1e-3)
  assert hat == pytest.approx(delta / 2, rel=1e-3)


@pytest.mark.parametrize("coefs", [None, "blt"])
def test_importance_sampling_is_unbiased_and_cuts_the_error(coefs):
  n, b = 40, 5
  kw = dict(toeplitz_coefs=_blt_coefs(n)) if coefs else dict(matrix=np.eye(n))
  pair = bms.dominating_pair(bms.BMinSepSampling(n, b, 0.3), **kw)
  sigma, eps = (6.0, 2.0) if coefs else (1.7, 2.0)  # δ ≈ 1e-4: a rare tail.
  plain = bms.estimate_delta(pair, noise_multiplier=sigma, epsilon=eps, num_samples=2**18,
                             seed=3)
  tilted = bms.estimate_delta(pair, noise_multiplier=sigma, epsilon=eps, num_samples=2**15,
                              seed=4, importance_sampling=True)
  for d in bms.DIRECTIONS:
    a, t = getattr(plain, d), getattr(tilted, d)
    if a.delta_hat == 0.0:
      continue
    assert t.delta_hat == pytest.approx(a.delta_hat, abs=4 * math.hypot(a.standard_error,
                                                                      t.standard_error))
  worse = plain.worse.direction
  # 8x fewer samples: a plain sample's standard error would be √8 x; the tilted one's is
  # smaller for BLT, and (defensive mixture) never more than ~√2 · √8 x.
  gain = (getattr(plain, worse).standard_error * math.sqrt(8)
          / getattr(tilted, worse).standard_error)
  assert gain > (2.0 if coefs else 0.7)
  # Calibration: σ whose plain δ̂ is the target, within the estimate's error.
  cal = bms.calibrate_noise_multiplier(pair, epsilon=eps, delta=1e-4, num_samples=2**18,
                                       seed=5, relative_standard_error=0.05)
  # Plain Monte Carlo's relative error at δ = 1e-4 and 2^18 samples: ≈ 0.2.
  assert cal.delta_standard_error <= (0.05 if coefs else 0.1) * cal.delta_hat
  check = bms.estimate_delta(pair, noise_multiplier=cal.noise_multiplier, epsilon=eps,
                             num_samples=2**20, seed=6)
  assert check.delta_hat == pytest.approx(
      1e-4, abs=4 * math.hypot(check.worse.standard_error, cal.delta_standard_error))


def test_direction_that_needs_no_noise_is_skipped():
  # p small: P[S = ∅] >= e^-ε, so the add direction holds at any σ.
  pair = bms.dominating_pair(bms.BMinSepSampling(4, 2, 0.05), matrix=np.eye(4))
  assert bms.noiseless_delta(pair, bms.ADD, 1.0) == 0.0
  cal = bms.calibrate_noise_multiplier(pair, epsilon=1.0, delta=1e-3, num_samples=2**14, seed=0)
  assert cal.by_direction[bms.ADD]["noise_multiplier"] == 0.0
  assert cal.direction == bms.REMOVE
  # Its verification needs no sample of that direction (exact bound 0 <= δ_verify).
  ver = bms.estimate_verify_release(pair, noise_multiplier=cal.noise_multiplier * 1.2,
                                    epsilon=1.0, delta=1e-3, seed=1)
  assert ver.verified and ver.delta_hat > 0.0  # The sampled (remove) direction is the worse.
  with pytest.raises(ValueError, match="without any noise"):
    bms.calibrate_noise_multiplier(pair, epsilon=1.0, delta=0.5, num_samples=2**14, seed=0)


def test_release_verifies_on_a_fresh_sample_and_round_trips():
  n = 24
  pair = bms.dominating_pair(bms.BMinSepSampling(n, 3, 0.4), toeplitz_coefs=_blt_coefs(n))
  kw = dict(delta=2e-3, verify_ratio=0.5, seed=5)
  release = amplification.release_noise_multiplier(pair, epsilon=2.0, **kw)
  assert release.verified and release.scheme == amplification.B_MIN_SEP
  assert release.calibration_seed != release.verification_seed
  assert release.noise_multiplier < release.noise_multiplier_without_amplification
  assert release.schedule["min_sep"] == 3 and release.num_bins == 0
  assert "b-min-sep sampling (b = 3" in release.guarantee()
  back = amplification.MonteCarloRelease.from_dict(release.to_dict())
  assert back == release
  # ε for that σ: verified, close to the target (calibrated with a margin, so at most a
  # little above it), and the claim at the target itself verifies.
  eps = amplification.release_epsilon(pair, noise_multiplier=release.noise_multiplier, **kw)
  assert eps.verified and 1.5 < eps.epsilon < 2.1
  same = amplification.release_verified(pair, noise_multiplier=release.noise_multiplier,
                                        epsilon=2.0, **kw)
  assert same.verified


def test_bad_inputs_are_named():
  sampling = bms.BMinSepSampling(5, 2, 0.5)
  with pytest.raises(ValueError, match="exactly one"):
    bms.dominating_pair(sampling)
  with pytest.raises(ValueError, match="non-negative"):
    bms.dominating_pair(sampling, toeplitz_coefs=[1.0, -0.5])
  with pytest.raises(ValueError, match="5 x 5"):
    bms.dominating_pair(sampling, matrix=np.eye(4))
  with pytest.raises(ValueError, match="rounds"):
    bms.log_likelihood_ratio(sampling, np.zeros((2, 4)))


def test_worker_processes_sum_the_same_sample():
  """Estimate-Verify-Release's long sums split over worker processes: the same chunks (each
  from its own seed), so the same sums up to floating-point order; a class with availability
  too."""
  from dp_fl.accounting import monte_carlo  # pylint: disable=import-outside-toplevel
  n = 12
  sampling = bms.BMinSepSampling(n, 3, 0.4, availability=bms.Availability(
      np.array([[0] * 4 + [-1] * 4 + [1] * 4, [-1] * 2 + [2] * 10]), (5, 7), 0.6))
  pair = bms.dominating_pair(sampling, toeplitz_coefs=_blt_coefs(n))
  m = 40 * monte_carlo.RNG_BLOCK + 17
  for component in [(0, bms.REMOVE), (1, bms.ADD)]:
    stream = bms._stream(pair, component, 9, monte_carlo.RNG_BLOCK)
    alone = monte_carlo.streaming_stats(stream, m, 0.5, 0.5)
    split = monte_carlo.streaming_stats(stream, m, 0.5, 0.5, workers=2)
    assert alone.num_tail == split.num_tail > 0
    assert split.sum_f == pytest.approx(alone.sum_f, rel=1e-12)
    assert split.sum_f2 == pytest.approx(alone.sum_f2, rel=1e-12)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
