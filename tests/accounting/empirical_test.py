"""dp_fl/accounting/empirical.py: the one-shot estimate against closed forms and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dp_fl.accounting import empirical
from dp_fl.accounting import zcdp


def _gaussian_mechanism_delta(mu: float, eps: float) -> float:
  """Balle and Wang 2018, Thm. 8: δ(ε) of N(0, 1) vs N(μ, 1)."""
  return float(stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu))


def _brute_force_delta(ma, sa, mb, sb, eps, points=2_000_001):
  """max over the two directions of ∫ (p − e^ε q)_+ on a fine grid (the definition)."""
  lo = min(ma - 40 * sa, mb - 40 * sb)
  hi = max(ma + 40 * sa, mb + 40 * sb)
  y = np.linspace(lo, hi, points)
  p, q = stats.norm.pdf(y, ma, sa), stats.norm.pdf(y, mb, sb)
  step = y[1] - y[0]
  return max(float(np.sum(np.maximum(p - math.exp(eps) * q, 0.0)) * step),
             float(np.sum(np.maximum(q - math.exp(eps) * p, 0.0)) * step))


@pytest.mark.parametrize("mu", [0.3, 1.0, 3.0, 10.0])
def test_equal_variances_are_the_gaussian_mechanism_up_to_large_epsilon(mu):
  for eps in np.linspace(0.0, mu * mu / 2 + 6 * mu, 13):  # δ from ~1 down to ~1e-10 and below.
    exact = _gaussian_mechanism_delta(mu, eps)
    got = empirical.gaussian_pair_delta(0.0, 1.0, mu, 1.0, eps)
    if exact > 1e-250:
      assert got == pytest.approx(exact, rel=1e-6, abs=1e-300), (mu, eps)
    # Scale and location do not matter: only |Δmean| / std.
    assert empirical.gaussian_pair_delta(5.0, 0.01, 5.0 - mu * 0.01, 0.01, eps) == (
        pytest.approx(got, rel=1e-6, abs=1e-300))


@pytest.mark.parametrize("ma,sa,mb,sb", [(0.0, 1.0, 1.0, 1.5), (0.0, 1.0, 0.0, 2.0),
                                         (0.0, 0.01, 0.05, 0.008), (2.0, 1.0, -1.0, 0.3)])
def test_unequal_variances_match_the_integral_of_the_definition(ma, sa, mb, sb):
  for eps in (0.0, 0.5, 1.0, 2.0, 4.0, 8.0):
    exact = _brute_force_delta(ma, sa, mb, sb, eps)
    got = empirical.gaussian_pair_delta(ma, sa, mb, sb, eps)
    assert got == pytest.approx(exact, rel=1e-4, abs=1e-9), (eps, got, exact)


@pytest.mark.parametrize("mu,delta", [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6), (12.0, 1e-9)])
def test_epsilon_inverts_delta(mu, delta):
  eps = empirical.gaussian_pair_epsilon(0.0, 1.0, mu, 1.0, delta)
  assert _gaussian_mechanism_delta(mu, eps) == pytest.approx(delta, rel=1e-6)
  assert empirical.gaussian_pair_epsilon(0.0, 1.0, 1e-9, 1.0, delta) == 0.0
  # Unequal variances: ε is where the exact δ(ε) crosses δ.
  eps2 = empirical.gaussian_pair_epsilon(0.0, 1.0, mu, 1.3, delta)
  assert empirical.gaussian_pair_delta(0.0, 1.0, mu, 1.3, eps2) == pytest.approx(delta, rel=1e-6)


def test_one_shot_estimate_recovers_a_known_gaussian_pair():
  """Seen ~ N(μσ, σ²), unseen ~ N(0, σ²) with σ = 1/√d: the estimate is near the Gaussian
  mechanism's ε at sensitivity μ, and within the sampling error of the fits."""
  rng = np.random.default_rng(41)
  d, mu, delta = 10_000, 2.0, 1e-5
  sigma = d ** -0.5
  seen = rng.normal(mu * sigma, sigma, size=20_000)
  unseen = rng.normal(0.0, sigma, size=20_000)
  truth = empirical.gaussian_pair_epsilon(0.0, 1.0, mu, 1.0, delta)
  got = empirical.one_shot_epsilon(seen, unseen, delta)
  assert got.null == "empirical" and got.num_seen == got.num_unseen == 20_000
  assert got.epsilon == pytest.approx(truth, rel=0.05)
  null = empirical.one_shot_epsilon_closed_form_null(seen, d, delta)
  assert null.null == "closed_form" and null.unseen_std == pytest.approx(sigma)
  assert null.epsilon == pytest.approx(truth, rel=0.05)
  # Seen canaries indistinguishable from unseen ones: ε ≈ 0.
  same = empirical.one_shot_epsilon(rng.normal(0, sigma, 20_000), unseen, delta)
  assert same.epsilon < 0.2


def test_the_closed_form_null_is_the_cosine_of_a_random_direction():
  rng = np.random.default_rng(7)
  for d in (3, 50, 2000):
    u = rng.normal(size=(20_000, d))
    cosines = u[:, 0] / np.linalg.norm(u, axis=1)
    assert np.var(cosines) == pytest.approx(1 / d, rel=0.05)
    ks = stats.kstest(cosines, lambda t, d=d: np.vectorize(empirical.null_cosine_cdf)(t, d))
    assert ks.pvalue > 1e-3, (d, ks)
  # d = 3: the cosine is uniform on [-1, 1] (Archimedes).
  assert empirical.null_cosine_cdf(0.5, 3) == pytest.approx(0.75)


def test_bad_inputs_are_refused_naming_them():
  with pytest.raises(ValueError, match="dimension.*1000"):
    empirical.one_shot_epsilon_closed_form_null([0.1, 0.2, 0.3], 999, 1e-5)
  with pytest.raises(ValueError, match="at least 2"):
    empirical.one_shot_epsilon([0.1], [0.0, 0.1], 1e-5)
  with pytest.raises(ValueError, match=r"cosines in \[-1, 1\]"):
    empirical.one_shot_epsilon([0.1, 2.0], [0.0, 0.1], 1e-5)
  with pytest.raises(ValueError, match="all equal"):
    empirical.one_shot_epsilon([0.1, 0.1], [0.0, 0.1], 1e-5)
  with pytest.raises(ValueError, match="std_b"):
    empirical.gaussian_pair_delta(0.0, 1.0, 1.0, 0.0, 1.0)
  with pytest.raises(ValueError, match="epsilon"):
    empirical.gaussian_pair_delta(0.0, 1.0, 1.0, 1.0, -1.0)
  with pytest.raises(ValueError, match="delta"):
    empirical.gaussian_pair_epsilon(0.0, 1.0, 1.0, 1.0, 0.0)


def test_one_run_all_correct_guesses_reach_the_stated_maximum():
  """All m guesses right, one guess count, δ = 0: the bound is logit((1 − confidence)^(1/m))."""
  for m in (10, 100, 1000):
    scores_in, scores_out = np.arange(m // 2) + 1000.0, np.arange(m - m // 2) * 1.0
    bound = empirical.one_run_lower_bound(scores_in, scores_out, delta=0.0,
                                          guess_counts=[m - m % 2])
    assert bound.correct == bound.guesses == m - m % 2
    assert bound.epsilon == pytest.approx(empirical.one_run_maximum(m - m % 2), rel=1e-6)
  assert empirical.one_run_maximum(1000) == pytest.approx(math.log(0.05 ** 1e-3 /
                                                                    (1 - 0.05 ** 1e-3)))
  # δ > 0 can only lower what the same guesses certify.
  m = 1000
  strict = empirical.one_run_lower_bound(np.arange(500) + 1e3, np.arange(500.0), 0.0, 0.95, [m])
  loose = empirical.one_run_lower_bound(np.arange(500) + 1e3, np.arange(500.0), 1e-5, 0.95, [m])
  assert 0 < loose.epsilon < strict.epsilon


@pytest.mark.parametrize("m,delta", [(10, 0.0), (64, 1e-5), (256, 1e-5), (1001, 1e-6)])
def test_the_ceiling_is_what_perfectly_separated_canaries_get(m, delta):
  """Default guess counts, every canary told apart: with equal halves every guess is right
  and the bound is the all-correct bound at the best count, below the single-count δ = 0
  maximum; unequal halves certify less even with perfect scores."""
  scores_in, scores_out = np.arange(m // 2) + 1e6, np.arange(m - m // 2) * 1.0
  bound = empirical.one_run_lower_bound(scores_in, scores_out, delta)
  ceiling = empirical.one_run_ceiling(m // 2, m - m // 2, delta)
  assert bound.epsilon == ceiling
  counts = empirical._guess_counts(m)  # pylint: disable=protected-access
  assert ceiling == pytest.approx(max(empirical.one_run_epsilon_for_counts(
      m, r, r, delta, 0.05 / len(counts)) for r in counts if r <= 2 * (m // 2)), rel=1e-8)
  assert ceiling < empirical.one_run_maximum(m - m % 2)
  assert empirical.one_run_ceiling(m // 2 - 3, m - m // 2 + 3, delta) <= ceiling
  # Scores that swap one inserted and one held-out canary certify less.
  swapped = empirical.one_run_lower_bound(np.append(scores_in[1:], -1.0),
                                          np.append(scores_out[1:], 2e6), delta)
  assert swapped.epsilon < ceiling


def test_one_run_p_value_is_the_binomial_tail_and_grows_with_epsilon():
  # δ = 0: exactly P[Bin(r, q) >= v].
  assert empirical.one_run_p_value(100, 20, 15, 1.0, 0.0) == pytest.approx(
      stats.binom.sf(14, 20, math.exp(1) / (1 + math.exp(1))))
  ps = [empirical.one_run_p_value(100, 20, 15, e, 1e-4) for e in (0.0, 0.5, 1.0, 2.0, 4.0)]
  assert ps == sorted(ps)
  assert empirical.one_run_p_value(100, 20, 15, 1.0, 1e-4) >= (
      empirical.one_run_p_value(100, 20, 15, 1.0, 0.0))


@pytest.mark.parametrize("true_epsilon", [0.5, 2.0, 6.0])
def test_one_run_bound_is_valid_against_randomized_response(true_epsilon):
  """Scores from an exactly ε-DP mechanism (randomized response on each coin: the score says
  the true coin with probability e^ε/(1+e^ε)) — the bound exceeds ε in at most about 5 % of
  runs at 95 % confidence, and comes close to ε with many canaries."""
  rng = np.random.default_rng(int(true_epsilon * 100))
  keep = math.exp(true_epsilon) / (1 + math.exp(true_epsilon))
  over, bounds = 0, []
  for _ in range(200):
    coins = rng.random(400) < 0.5
    said = np.where(rng.random(400) < keep, coins, ~coins)
    scores = said + rng.random(400) * 0.5  # A score ranks by what the mechanism said.
    bound = empirical.one_run_lower_bound(scores[coins], scores[~coins], delta=0.0)
    over += bound.epsilon > true_epsilon
    bounds.append(bound.epsilon)
  assert over <= 20, (over, true_epsilon)
  assert np.median(bounds) > 0.25 * min(true_epsilon, empirical.one_run_maximum(400))


def test_one_run_refusals_name_the_argument():
  with pytest.raises(ValueError, match="at least 2 canaries"):
    empirical.one_run_lower_bound([0.1], [], 1e-5)
  with pytest.raises(ValueError, match="guess_counts"):
    empirical.one_run_lower_bound([0.1, 0.2], [0.0, 0.3], 1e-5, guess_counts=[3])
  with pytest.raises(ValueError, match="confidence"):
    empirical.one_run_lower_bound([0.1, 0.2], [0.0, 0.3], 1e-5, confidence=1.0)
  with pytest.raises(ValueError, match="correct <= guesses"):
    empirical.one_run_p_value(10, 4, 5, 1.0, 0.0)


# ---------------------------------------------------------------------------------------
# The Gaussian (f-DP) refinement of the one-run audit (Mahloujifar et al. 2024).


def _gdp_trial(rng, m, mu):
  """One audit of a μ-GDP mechanism's dominating pair: fair coins, scores N(μ, 1) in and
  N(0, 1) out; every canary guessed (top half "in", bottom half "out")."""
  coins = rng.integers(0, 2, m).astype(bool)
  scores = rng.normal(size=m) + mu * coins
  order = np.argsort(scores)
  correct = int(np.sum(coins[order[m // 2:]]) + np.sum(~coins[order[:m // 2]]))
  return coins, scores, correct


@pytest.mark.parametrize("mu", [0.5, 2.0, 4.0])
def test_the_gaussian_test_rejects_a_true_claim_at_most_at_its_significance(mu):
  """At the mechanism's own μ the claim is true: over 3000 seeded audits the margin may be
  positive (a false rejection) in at most a fraction α of them (+ 3 standard errors)."""
  rng = np.random.default_rng(41)
  m, alpha, trials = 64, 0.1, 3000
  rejected = sum(empirical.one_run_gaussian_margin(m, m, _gdp_trial(rng, m, mu)[2], mu,
                                                   alpha) > 0 for _ in range(trials))
  assert rejected / trials <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / trials)
  # ... and a claim far below the truth is rejected often.
  weak = sum(empirical.one_run_gaussian_margin(m, m, _gdp_trial(rng, m, mu)[2], mu / 4,
                                               alpha) > 0 for _ in range(300))
  if mu >= 2.0:
    assert weak / 300 > 0.5


@pytest.mark.parametrize("seed", range(4))
def test_the_gaussian_bound_is_tighter_and_below_the_truth(seed):
  rng = np.random.default_rng(seed)
  mu = 2.0
  coins, scores, _ = _gdp_trial(rng, 512, mu)
  plain = empirical.one_run_lower_bound(scores[coins], scores[~coins], 1e-5)
  gaussian = empirical.one_run_lower_bound(scores[coins], scores[~coins], 1e-5,
                                           trade_off=empirical.GAUSSIAN)
  truth = empirical.gaussian_pair_epsilon(mu, 1.0, 0.0, 1.0, 1e-5)
  assert plain.epsilon < gaussian.epsilon < truth
  assert gaussian.trade_off == empirical.GAUSSIAN
  # The claim at the bound is rejected, just above it it is not (the largest rejected ε).
  sig = 0.05 / len(gaussian.guess_counts_tried)
  margin = lambda eps: empirical.one_run_gaussian_margin(
      512, gaussian.guesses, gaussian.correct,
      1 / zcdp.noise_multiplier_for_epsilon(1.0, eps, 1e-5), sig)
  assert margin(gaussian.epsilon) >= 0 > margin(gaussian.epsilon * 1.001)


def test_the_gaussian_ceiling_is_higher_and_bad_claims_are_refused():
  assert (empirical.one_run_ceiling(64, 64, 1e-5, trade_off=empirical.GAUSSIAN)
          > empirical.one_run_ceiling(64, 64, 1e-5))
  with pytest.raises(ValueError, match="δ > 0"):
    empirical.one_run_gaussian_epsilon_for_counts(10, 10, 10, 0.0, 0.05)
  with pytest.raises(ValueError, match="trade_off"):
    empirical.one_run_lower_bound([1.0, 2.0], [0.0], 1e-5, trade_off="laplace")


def test_the_one_shot_noise_floor_shrinks_with_more_canaries():
  """With nothing leaking, 61 vs 67 canaries' fitted Gaussians still differ enough to read
  ε ≈ 6 at the 95th percentile: the floor below which an estimate says nothing."""
  small = empirical.one_shot_noise_floor(61, 67, 1e-5)
  large = empirical.one_shot_noise_floor(500, 500, 1e-5)
  assert large < small and 4.0 < small < 9.0
  closed = empirical.one_shot_noise_floor(61, 0, 1e-5, closed_form_null=True)
  assert 0 < closed < small  # One fitted Gaussian instead of two.
  # The floor is the quantile it claims: fresh null estimates fall below it ~95 % of the time.
  rng = np.random.default_rng(5)
  below = np.mean([empirical.one_shot_epsilon(rng.normal(size=61) * 1e-2,
                                              rng.normal(size=67) * 1e-2, 1e-5).epsilon <= small
                   for _ in range(300)])
  assert 0.9 < below < 0.99


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
