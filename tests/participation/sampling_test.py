"""Tests for Poisson (paper 001), balls-in-bins (paper 003 Def. 3.1 / Sec. 5.2.1),
uniform and cyclic participation.

Statistical tests use fixed seeds, so they are deterministic; each states the
tolerance and the flake rate it would have for a fresh seed: z-tests at 5
standard deviations (two-sided rate 5.7e-7) and chi-square tests requiring
p > 1e-6 (rate 1e-6).
"""

from __future__ import annotations

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest
from scipy import stats

from dp_fl.participation import sampling

Z = 5.0        # z-test tolerance in standard deviations: flake rate 5.7e-7
P_MIN = 1e-6   # chi-square p-value threshold: flake rate 1e-6


def run(scheduler, rounds):
  return [scheduler.next_round() for _ in range(rounds)]


def chisquare_binned(observed_values, pmf, support):
  """Chi-square GOF of integer samples to `pmf` on `support`, merging bins with expected < 5."""
  n = len(observed_values)
  counts = np.array([np.sum(observed_values == k) for k in support], dtype=float)
  expected = n * pmf
  obs_b, exp_b, acc_o, acc_e = [], [], 0.0, 0.0
  for o, e in zip(counts, expected):
    acc_o, acc_e = acc_o + o, acc_e + e
    if acc_e >= 5:
      obs_b.append(acc_o); exp_b.append(acc_e); acc_o, acc_e = 0.0, 0.0
  obs_b[-1] += acc_o + (n - counts.sum())
  exp_b[-1] += acc_e + (n - expected.sum())
  return stats.chisquare(obs_b, exp_b).pvalue


class TestPoisson:

  def test_frequencies_match_definition(self):
    """Each client in each round independently w.p. q (paper 001).

    Checks, at Z = 5 sd / p > 1e-6: mean cohort size N q; cohort-size
    dispersion Binomial(N, q) (chi-square on sum of squared z-scores); per-client
    counts ~ Binomial(R, q) (chi-square GOF); consecutive-round overlap N q^2.
    """
    n, q, rounds = 2000, 0.03, 600
    sels = run(sampling.PoissonScheduler(n, q, seed=7), rounds)
    sizes = np.array([s.cohort_size for s in sels], dtype=float)
    var = n * q * (1 - q)
    assert abs(sizes.mean() - n * q) < Z * np.sqrt(var / rounds)
    dispersion = np.sum((sizes - n * q) ** 2) / var
    tail = stats.chi2.sf(dispersion, rounds)
    assert P_MIN < tail < 1 - P_MIN
    counts = np.zeros(n, dtype=int)
    for s in sels:
      counts[s.client_ids] += 1
    support = np.arange(0, rounds + 1)
    assert chisquare_binned(counts, stats.binom.pmf(support, rounds, q), support) > P_MIN
    overlap = sum(np.intersect1d(a.client_ids, b.client_ids).size for a, b in zip(sels, sels[1:]))
    mean = (rounds - 1) * n * q * q
    assert abs(overlap - mean) < Z * np.sqrt(mean)
    assert all(s.denominator == n * q for s in sels)

  def test_q_one_selects_everyone(self):
    sels = run(sampling.PoissonScheduler(7, 1.0, seed=0), 3)
    assert all(s.client_ids.tolist() == list(range(7)) for s in sels)

  @pytest.mark.parametrize("q", [0.0, -0.1, 1.5, float("nan"), float("inf")])
  def test_bad_q(self, q):
    with pytest.raises(ValueError, match="sampling_probability"):
      sampling.PoissonScheduler(10, q, seed=0)


class TestBallsInBins:

  def test_each_client_once_per_epoch_in_its_bin(self):
    n, nb, epochs = 3000, 7, 5
    s = sampling.BallsInBinsScheduler(n, nb, seed=3)
    sels = run(s, nb * epochs)
    for r, sel in enumerate(sels):
      np.testing.assert_array_equal(sel.client_ids, s.bin_members(r % nb))
    counts = s.ledger.counts
    assert np.all(counts == epochs)
    assert s.realized().min_separation == nb
    assert s.realized().max_participations == epochs
    assert sum(s.bin_sizes()) == n

  def test_bin_sizes_are_multinomial(self):
    """Bin sizes ~ Multinomial(N, 1/NB) (paper 003 Def. 3.1): chi-square p > 1e-6."""
    n, nb = 20000, 13
    sizes = sampling.BallsInBinsScheduler(n, nb, seed=5).bin_sizes()
    assert stats.chisquare(sizes).pvalue > P_MIN

  def test_assignment_uniform_and_independent_across_seeds(self):
    """P(client c in bin j) = 1/NB and independent clients: chi-square p > 1e-6, z at 5 sd."""
    n, nb, seeds = 10, 4, 3000
    table = np.zeros((n, nb))
    same = 0
    for seed in range(seeds):
      s = sampling.BallsInBinsScheduler(n, nb, seed=seed)
      bins = np.empty(n, dtype=int)
      for j in range(nb):
        bins[s.bin_members(j)] = j
      table[np.arange(n), bins] += 1
      same += bins[0] == bins[1]
    assert stats.chisquare(table.ravel()).pvalue > P_MIN
    assert abs(same - seeds / nb) < Z * np.sqrt(seeds * (1 / nb) * (1 - 1 / nb))

  @pytest.mark.parametrize("fixed", [300, 430, 600])
  def test_pad_and_truncate(self, fixed):
    """Paper 003 Sec. 5.2.1: pad small bins, truncate large ones; denominator always B."""
    n, nb = 3000, 7
    s = sampling.BallsInBinsScheduler(n, nb, seed=1, fixed_size=fixed)
    for sel in run(s, 2 * nb):
      members = s.bin_members(sel.round_index % nb)
      assert set(sel.client_ids.tolist()) <= set(members.tolist())
      assert sel.cohort_size == min(members.size, fixed)
      assert sel.num_padding == fixed - sel.cohort_size
      assert sel.num_truncated == max(0, members.size - fixed)
      assert sel.cohort_size + sel.num_padding == fixed
      assert sel.denominator == fixed

  def test_truncation_is_uniform(self):
    """Over many epochs each member of a truncated bin is kept w.p. B/|bin|: chi-square p > 1e-6."""
    s = sampling.BallsInBinsScheduler(200, 2, seed=4, fixed_size=60)
    sels = run(s, 2 * 1500)
    members = s.bin_members(0)
    counts = np.zeros(200)
    for sel in sels[::2]:
      counts[sel.client_ids] += 1
    assert stats.chisquare(counts[members]).pvalue > P_MIN
    assert np.all(counts[members] > 0)

  @pytest.mark.parametrize("nb", [0, -1])
  def test_bad_num_bins(self, nb):
    with pytest.raises(ValueError, match="num_bins"):
      sampling.BallsInBinsScheduler(10, nb, seed=0)

  def test_bad_fixed_size(self):
    with pytest.raises(ValueError, match="fixed_size"):
      sampling.BallsInBinsScheduler(10, 2, seed=0, fixed_size=0)


class TestCyclicPoisson:

  def test_clients_only_in_their_groups_rounds_at_rate_q(self):
    """Groups drawn once; round t samples group t mod G, each member w.p. q (independently):
    per-client counts over R rounds ~ Binomial(⌈R/G⌉ turns, q); cohorts are subsets of the
    round's group; the denominator is the expected cohort qN/G."""
    n, groups, q, rounds = 3000, 5, 0.2, 500
    scheduler = sampling.CyclicPoissonScheduler(n, groups, q, seed=11)
    members = [set(scheduler.group_members(g).tolist()) for g in range(groups)]
    assert sum(len(m) for m in members) == n and set().union(*members) == set(range(n))
    counts = np.zeros(n, dtype=int)
    for t, sel in enumerate(run(scheduler, rounds)):
      assert set(sel.client_ids.tolist()) <= members[t % groups]
      assert sel.denominator == pytest.approx(q * n / groups)
      counts[sel.client_ids] += 1
    turns = rounds // groups
    assert chisquare_binned(counts, stats.binom.pmf(np.arange(turns + 1), turns, q),
                            np.arange(turns + 1)) > P_MIN
    realized = scheduler.realized()
    assert realized.min_separation is None or realized.min_separation >= groups

  def test_groups_are_uniform_and_one_group_is_poisson(self):
    scheduler = sampling.CyclicPoissonScheduler(6000, 3, 0.1, seed=2)
    group_sizes = [scheduler.group_members(g).size for g in range(3)]
    assert stats.chisquare(group_sizes).pvalue > P_MIN
    one = sampling.CyclicPoissonScheduler(50, 1, 0.3, seed=3)
    assert one.group_members(0).tolist() == list(range(50))

  def test_restore_continues_identically(self):
    a = sampling.CyclicPoissonScheduler(40, 4, 0.5, seed=9)
    run(a, 7)
    b = sampling.CyclicPoissonScheduler.from_bytes(a.to_bytes())
    for sa, sb in zip(run(a, 9), run(b, 9)):
      np.testing.assert_array_equal(sa.client_ids, sb.client_ids)

  @pytest.mark.parametrize("kwargs, message", [(dict(num_groups=0), "num_groups"),
                                               (dict(sampling_probability=1.5),
                                                "sampling_probability")])
  def test_bad_arguments(self, kwargs, message):
    args = dict(num_clients=10, num_groups=2, sampling_probability=0.5, seed=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
      sampling.CyclicPoissonScheduler(**args)


class TestUniformAndCyclic:

  def test_uniform_counts(self):
    """m distinct clients per round, per-client counts uniform: chi-square p > 1e-6."""
    s = sampling.UniformScheduler(100, 9, seed=2)
    for sel in run(s, 3000):
      assert sel.cohort_size == 9 and np.unique(sel.client_ids).size == 9
    assert stats.chisquare(s.ledger.counts).pvalue > P_MIN

  @hypothesis.settings(derandomize=True, deadline=None, max_examples=40)
  @hypothesis.given(st.integers(1, 200), st.integers(1, 50), st.booleans(), st.integers(0, 99))
  def test_cyclic_epochs(self, n, m, reshuffle, seed):
    hypothesis.assume(m <= n)
    s = sampling.CyclicScheduler(n, m, seed, reshuffle_each_epoch=reshuffle)
    g = s.rounds_per_epoch
    assert g == -(-n // m)
    for epoch in range(3):
      seen = np.concatenate([s.next_round().client_ids for _ in range(g)])
      np.testing.assert_array_equal(np.sort(seen), np.arange(n))  # everyone once per epoch
    if not reshuffle and g > 1:
      assert s.realized().min_separation == g
    assert s.realized().max_participations == 3

  def test_bad_sizes(self):
    with pytest.raises(ValueError, match="clients_per_round"):
      sampling.UniformScheduler(5, 6, seed=0)
    with pytest.raises(ValueError, match="clients_per_round"):
      sampling.CyclicScheduler(5, 0, seed=0)
    with pytest.raises(ValueError, match="seed"):
      sampling.UniformScheduler(5, 2, seed=-1)


# ---------------------------------------------------------------- b-min-sep


def _scheduler_patterns(scheduler, rounds):
  patterns = np.zeros((scheduler.num_clients, rounds), dtype=bool)
  for t in range(rounds):
    patterns[scheduler.next_round().client_ids, t] = True
  return patterns


@pytest.mark.parametrize("b,p,warm", [(1, 0.3, True), (3, 0.4, True), (3, 0.4, False),
                                      (2, 1.0, True)])
def test_b_min_sep_realizes_the_chain_the_accounting_analyses(b, p, warm):
  from dp_fl.accounting import b_min_sep  # pylint: disable=import-outside-toplevel
  n, clients = 6, 30000
  scheduler = sampling.BMinSepScheduler(clients, b, p, seed=3, warm_start=warm)
  got = _scheduler_patterns(scheduler, n)
  want = b_min_sep.BMinSepSampling(n, b, p, warm_start=warm).sample_patterns(
      np.random.default_rng(1), clients)

  def law(patterns):
    keys, counts = np.unique(np.packbits(patterns, axis=1), axis=0, return_counts=True)
    return {bytes(k): c / patterns.shape[0] for k, c in zip(keys, counts)}

  got_law, want_law = law(got), law(want)
  assert set(got_law) == set(want_law)
  for key, q in want_law.items():
    assert got_law[key] == pytest.approx(q, abs=5 * np.sqrt(2 * q / clients) + 1e-4)
  realized = scheduler.realized()
  if b > 1:
    assert realized.min_separation >= b
  assert scheduler.enforced_min_separation == b


def test_b_min_sep_cohorts_vary_around_the_stationary_expectation():
  scheduler = sampling.BMinSepScheduler(5000, 4, 0.2, seed=9)
  sizes = [scheduler.next_round().cohort_size for _ in range(40)]
  assert scheduler.expected_cohort_size == pytest.approx(5000 * 0.2 / 1.6)
  assert np.mean(sizes) == pytest.approx(scheduler.expected_cohort_size, rel=0.05)
  assert len(set(sizes)) > 5
  pure = sampling.BMinSepScheduler(5000, 4, 0.2, seed=9, warm_start=False)
  assert pure.next_round().cohort_size == pytest.approx(1000, rel=0.1)  # p N at round 0.


def test_b_min_sep_resumes_bitwise_and_discards_keep_the_separation():
  scheduler = sampling.BMinSepScheduler(300, 3, 0.5, seed=4)
  for _ in range(5):
    scheduler.next_round()
  selection = scheduler.select_round()
  scheduler.discard(selection)  # Its clients wait like the others.
  assert not np.any(scheduler.eligible(selection.round_index)[selection.client_ids])
  blob = scheduler.to_bytes()
  from dp_fl.participation import checkpoint, schemes  # pylint: disable=import-outside-toplevel
  del schemes  # Registers the b-min-sep scheduler's KIND for checkpoints.
  restored = checkpoint.restore_scheduler(blob)
  assert isinstance(restored, sampling.BMinSepScheduler)
  for _ in range(8):
    a, b = scheduler.next_round(), restored.next_round()
    np.testing.assert_array_equal(a.client_ids, b.client_ids)
  assert scheduler.realized().min_separation >= 3
  assert restored.to_bytes() == scheduler.to_bytes()


@pytest.mark.parametrize("b,p,hours", [(2, 0.6, 3.0), (3, 1.0, 2.0), (1, 0.4, 4.0)])
def test_b_min_sep_with_availability_realizes_each_class_chain(b, p, hours):
  """Only devices in their window and checked in are drawn: per class of public windows,
  the scheduler's patterns follow the law the accounting analyses (its own sampler and the
  exact per-round participation probabilities)."""
  from dp_fl.accounting import b_min_sep  # pylint: disable=import-outside-toplevel
  from dp_fl.participation import availability  # pylint: disable=import-outside-toplevel
  n, clients = 10, 24000
  model = availability.simulated("diurnal", clients, 5)
  windows, klass = model.round_windows(n, hours)
  classes = b_min_sep.Availability(windows, tuple(np.bincount(klass).tolist()),
                                   model.window_probability)
  accounting = b_min_sep.BMinSepSampling(n, b, p, availability=classes)
  scheduler = sampling.BMinSepScheduler(clients, b, p, seed=3, availability=model,
                                        round_hours=hours, denominator=7.0)
  assert scheduler.expected_cohort_size == 7.0
  got = _scheduler_patterns(scheduler, n)
  assert classes.num_classes >= 2
  for k in range(classes.num_classes):
    members = got[klass == k]
    assert not np.any(members[:, windows[k] < 0])  # Never drawn outside a window.
    want = accounting.sample_patterns(np.random.default_rng(k), 200000, k)
    np.testing.assert_allclose(members.mean(axis=0),
                               b_min_sep.participation_probabilities(accounting, k),
                               atol=5 * np.sqrt(0.25 / members.shape[0]) + 1e-9)
    np.testing.assert_allclose(want.mean(axis=0),
                               b_min_sep.participation_probabilities(accounting, k), atol=0.006)
    # Joint law: how many times a client took part.
    got_counts = np.bincount(members.sum(axis=1), minlength=n + 1) / members.shape[0]
    want_counts = np.bincount(want.sum(axis=1), minlength=n + 1) / want.shape[0]
    np.testing.assert_allclose(got_counts, want_counts,
                               atol=5 * np.sqrt(0.25 / members.shape[0]) + 0.002)
  mean_cohort = got.sum(axis=0).mean()
  assert mean_cohort == pytest.approx(accounting.participation_rate * clients, rel=0.05)
  if b > 1:
    assert scheduler.realized().min_separation >= b


def test_b_min_sep_with_availability_resumes_bitwise():
  from dp_fl.participation import availability  # pylint: disable=import-outside-toplevel
  from dp_fl.participation import checkpoint, schemes  # pylint: disable=import-outside-toplevel
  del schemes  # Registers the b-min-sep scheduler's KIND for checkpoints.
  model = availability.simulated("diurnal", 400, 2)
  scheduler = sampling.BMinSepScheduler(400, 3, 0.7, seed=4, availability=model,
                                        round_hours=2.0, denominator=12.5)
  for _ in range(7):
    scheduler.next_round()
  restored = checkpoint.restore_scheduler(scheduler.to_bytes())
  assert restored.availability is not None and restored.round_hours == 2.0
  assert restored.expected_cohort_size == 12.5
  for _ in range(20):
    np.testing.assert_array_equal(scheduler.next_round().client_ids,
                                  restored.next_round().client_ids)
  assert restored.to_bytes() == scheduler.to_bytes()


def test_b_min_sep_bad_settings_are_named():
  with pytest.raises(ValueError, match="min_sep"):
    sampling.BMinSepScheduler(10, 0, 0.5, seed=1)
  with pytest.raises(ValueError, match="sampling_probability"):
    sampling.BMinSepScheduler(10, 2, 1.5, seed=1)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
