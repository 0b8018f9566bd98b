"""Tests for dp_fl.accounting.binomial (paper 000, Thm. 1 and Thm. 3)."""

from __future__ import annotations

import math

import hypothesis
from hypothesis import strategies as st
import pytest

from dp_fl.accounting import binomial


def test_constants_at_half_match_the_printed_values():
  b, c, d = binomial.binomial_constants(0.5)
  assert b == pytest.approx(1 / 3)
  assert c == pytest.approx(5 / 2)      # formula gives 7√2/4 ≈ 2.475, theorem prints 5/2
  assert d == pytest.approx(2 / 3)


def test_epsilon_by_hand_at_half():
  n, p, s, l1, l2, linf, dim, delta = 10 ** 6, 0.5, 0.25, 20.0, 2.0, 1.0, 100, 1e-5
  g = binomial.binomial_mechanism_epsilon(n, p, s, l1, l2, linf, dim, delta)
  var = n / 4
  first = l2 * math.sqrt(2 * math.log(1.25 / delta)) / (s * math.sqrt(var))
  second = (l2 * 2.5 * math.sqrt(math.log(10 / delta)) + l1 / 3) / (s * var * (1 - delta / 10))
  third = ((2 / 3) * linf * math.log(1.25 / delta)
           + linf * (2 / 3) * math.log(20 * dim / delta) * math.log(10 / delta)) / (s * var)
  assert g.gaussian_term == pytest.approx(first)
  assert g.second_term == pytest.approx(second)
  assert g.third_term == pytest.approx(third)
  assert g.epsilon == pytest.approx(first + second + third)
  assert g.noise_std == pytest.approx(s * math.sqrt(var))
  assert g.mean_squared_error == pytest.approx(dim * s * s * var)


@hypothesis.settings(derandomize=True, deadline=None, max_examples=40)
@hypothesis.given(log_n=st.floats(4.0, 9.0), scale_exp=st.integers(0, 4))
def test_large_n_approaches_gaussian_mechanism(log_n, scale_exp):
  # Paper 000, remark after Thm. 1: the leading term is the Gaussian mechanism's ε for
  # σ = s√(Np(1−p)); the other terms vanish relative to it as N grows.
  n = int(10 ** log_n)
  s = 1.0 / 2 ** scale_exp
  try:
    g = binomial.binomial_mechanism_epsilon(n, 0.5, s, 4.0, 2.0, 1.0, 10, 1e-6)
  except ValueError:
    return  # condition of Thm. 1 not met for this draw; covered by its own test
  gauss = 2.0 * math.sqrt(2 * math.log(1.25 / 1e-6)) / g.noise_std
  assert g.gaussian_term == pytest.approx(gauss)
  assert g.epsilon >= gauss
  bigger = binomial.binomial_mechanism_epsilon(100 * n, 0.5, s, 4.0, 2.0, 1.0, 10, 1e-6)
  assert (bigger.epsilon / bigger.gaussian_term - 1) < (g.epsilon / g.gaussian_term - 1)


def test_condition_enforced_with_minimum_n():
  d, delta = 1000, 1e-5
  need = 23 * math.log(10 * d / delta)
  min_n = math.ceil(need / 0.25)
  with pytest.raises(ValueError, match=rf"num_trials.*at least {min_n}"):
    binomial.binomial_mechanism_epsilon(min_n - 1, 0.5, 1.0, 1.0, 1.0, 1.0, d, delta)
  binomial.binomial_mechanism_epsilon(min_n, 0.5, 1.0, 1.0, 1.0, 1.0, d, delta)


def test_condition_linf_term():
  # 2Δ∞/s dominates: Δ∞ = 1000, s = 1/1000 needs Np(1−p) >= 2e6.
  with pytest.raises(ValueError, match="2Δ∞/s"):
    binomial.binomial_mechanism_epsilon(10 ** 6, 0.5, 1e-3, 1.0, 1.0, 1000.0, 1, 1e-5)


def test_bits_per_coordinate():
  g = binomial.binomial_mechanism_epsilon(10 ** 4, 0.5, 1.0, 1.0, 1.0, 1.0, 1, 1e-5,
                                          num_quantization_levels=16)
  assert g.bits_per_coordinate == math.ceil(math.log2(16 + 10 ** 4))
  assert g.to_dict()["bits_per_coordinate"] == 14


@pytest.mark.parametrize("kwargs,match", [
    (dict(delta=0.0), "delta"), (dict(delta=1.5), "delta"), (dict(p=1.0), "p"),
    (dict(p=0.0), "p"), (dict(scale=0.0), "scale"), (dict(num_trials=0), "num_trials"),
    (dict(dimension=0), "dimension"), (dict(l2_sensitivity=-1.0), "l2_sensitivity"),
])
def test_bad_input(kwargs, match):
  args = dict(num_trials=10 ** 6, p=0.5, scale=1.0, l1_sensitivity=1.0,
              l2_sensitivity=1.0, linf_sensitivity=1.0, dimension=10, delta=1e-5)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    binomial.binomial_mechanism_epsilon(**args)


def test_all_zero_sensitivities_rejected():
  with pytest.raises(ValueError, match="sensitivities"):
    binomial.binomial_mechanism_epsilon(10 ** 6, 0.5, 1.0, 0.0, 0.0, 0.0, 10, 1e-5)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
