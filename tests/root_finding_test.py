"""Tests for dp_fl/root_finding.py: brackets, continuous roots against scipy, integer searches
against brute force, and the errors of unreachable targets. Deterministic (no sampling)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from dp_fl import root_finding

THRESHOLDS = (1e-9, 0.003, 0.5, 1.0, 1.7, 123.4, 9.9e5)


class Recorder:
  """A predicate that records where it was evaluated."""

  def __init__(self, predicate):
    self.predicate, self.points = predicate, []

  def __call__(self, x):
    self.points.append(x)
    return self.predicate(x)


# ----------------------------------------------------------------------------- brackets

@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_expand_up_doubles_until_hi_meets_the_target(threshold):
  lo, hi = root_finding.expand_up(lambda x: x < threshold, 1e-12, 1.0)
  assert lo < threshold <= hi
  assert hi == 1.0 or (lo == hi / 2 and hi / 2 < threshold)


def test_expand_up_refuses_past_the_limit_without_evaluating_there():
  short = Recorder(lambda x: True)
  with pytest.raises(root_finding.UnreachableTargetError, match=r"up to 100\.0"):
    root_finding.expand_up(short, 0.0, 1.0, limit=100.0)
  assert short.points == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]  # Never 128 > limit.
  assert issubclass(root_finding.UnreachableTargetError, ValueError)


def test_expand_up_clamped_to_the_limit_evaluates_the_limit():
  short = Recorder(lambda m: m < 100)
  lo, hi = root_finding.expand_up(short, 3, 6, factor=2, limit=100, clamp_to_limit=True)
  assert (lo, hi) == (96, 100) and short.points == [6, 12, 24, 48, 96, 100]
  assert isinstance(hi, int)
  with pytest.raises(ValueError, match="m = 100 short"):
    root_finding.expand_up(lambda m: m < 101, 3, 6, factor=2, limit=100, clamp_to_limit=True,
                           unreachable=lambda lo, hi: f"m = {hi} short (from {lo})")


def test_expand_down_halves_while_lo_meets_and_keeps_integers():
  meets = Recorder(lambda m: m >= 5)
  lo, hi = root_finding.expand_down(meets, 40, 80, factor=2)
  assert (lo, hi) == (2, 5) and meets.points == [40, 20, 10, 5, 2]
  assert root_finding.expand_down(lambda m: True, 6, 12, factor=2) == (0, 1)  # Floor 0 reached.
  lo, hi = root_finding.expand_down(lambda x: True, 0.5, 1.0, floor=0.1)
  assert (lo, hi) == (0.0625, 0.125)


@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("start", [(1e-6, 2e-6), (0.4, 0.8), (1e3, 2e3)])
def test_expand_both_finds_a_bracket_from_either_side(threshold, start):
  lo, hi = root_finding.expand_both(lambda x: x < threshold, lambda x: x >= threshold, *start)
  assert lo < threshold <= hi and hi == 2 * lo


def test_expand_both_gives_up_after_max_steps():
  with pytest.raises(root_finding.UnreachableTargetError, match=r"within \[1024\.0, 2048\.0\]"):
    root_finding.expand_both(lambda x: True, lambda x: False, 1.0, 2.0, max_steps=10,
                             unreachable=lambda lo, hi: f"within [{lo!r}, {hi!r}]")


def test_factor_must_exceed_one():
  with pytest.raises(ValueError, match="factor"):
    root_finding.expand_up(lambda x: True, 0.0, 1.0, factor=1.0)


# ----------------------------------------------------------------------------- continuous

@pytest.mark.parametrize("f, lo, hi", [
    (lambda x: x ** 3 - 2.0, 0.0, 4.0),
    (lambda x: math.exp(-x) - 0.01, 0.0, 64.0),
    (lambda x: math.log(x) + 3.0, 1e-9, 1.0),
])
def test_brent_is_scipys_brentq(f, lo, hi):
  for xtol, rtol in ((1e-12, 1e-12), (1e-6, 1e-3)):
    assert root_finding.brent(f, lo, hi, xtol=xtol, rtol=rtol) == optimize.brentq(
        f, lo, hi, xtol=xtol, rtol=rtol)


def test_brent_without_a_sign_change_is_unreachable():
  with pytest.raises(root_finding.UnreachableTargetError, match="does not change sign"):
    root_finding.brent(lambda x: x + 1.0, 0.0, 1.0, xtol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("tolerance", [1e-12, 1e-3, 0.5])
def test_bisect_returns_the_meeting_end_within_the_tolerance(threshold, tolerance):
  lo, hi = threshold / 3.0, threshold * 5.0
  result = root_finding.bisect(lambda x: x < threshold, lo, hi, relative_tolerance=tolerance)
  assert threshold <= result <= threshold * (1.0 + tolerance) * (1.0 + 1e-15)


def test_bisect_follows_geometric_midpoints():
  short = Recorder(lambda x: x < 3.0)
  root_finding.bisect(short, 1.0, 16.0, relative_tolerance=0.5)
  assert short.points == [4.0, 2.0, math.sqrt(8.0)]  # Then 4 / √8 <= 1.5: stop.


# ----------------------------------------------------------------------------- integers

def test_first_integer_against_brute_force():
  for lo in range(0, 6):
    for hi in range(lo + 1, 40):
      for threshold in range(lo + 1, hi + 1):
        meets = lambda x, t=threshold: x >= t
        assert root_finding.first_integer(meets, lo, hi) == threshold


@pytest.mark.parametrize("method", root_finding.INTEGER_METHODS)
def test_smallest_integer_exact_against_brute_force(method):
  rng = np.random.default_rng(0)
  for _ in range(300):
    hi = int(rng.integers(2, 5000))
    threshold = int(rng.integers(1, hi + 1))
    scale, power = float(rng.uniform(0.1, 50.0)), float(rng.uniform(0.3, 2.5))
    f = lambda m: scale * (threshold / m) ** power  # f(threshold) = scale: the target.
    lo = int(rng.integers(0, threshold))
    found = root_finding.smallest_integer(f, scale, lo, hi, method=method)
    brute = next(m for m in range(max(lo, 1), hi + 1) if f(m) <= scale)
    assert found == brute


def test_regula_falsi_is_within_its_relative_tolerance_and_faster():
  target, tolerance = 2.0, 1e-3
  f = lambda m: 4e6 / m ** 1.3
  smallest = math.ceil((4e6 / target) ** (1 / 1.3))
  while f(smallest - 1) <= target:
    smallest -= 1
  counts = {}
  for method in root_finding.INTEGER_METHODS:
    calls = Recorder(f)
    found = root_finding.smallest_integer(calls, target, 1, 1 << 30, method=method,
                                          relative_tolerance=tolerance)
    assert f(found) <= target and smallest <= found <= smallest + max(1, tolerance * found)
    counts[method] = len(calls.points)
  assert counts[root_finding.REGULA_FALSI] < counts[root_finding.BISECT]


def test_smallest_integer_refuses_an_unreachable_target_and_an_unknown_method():
  with pytest.raises(root_finding.UnreachableTargetError, match="no integer up to 10"):
    root_finding.smallest_integer(lambda m: 1.0 / m, 0.01, 0, 10)
  with pytest.raises(ValueError, match="method"):
    root_finding.smallest_integer(lambda m: 0.0, 1.0, 0, 10, method="newton")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
