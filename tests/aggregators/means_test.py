"""Tests of cohort_mean_factory: the non-private mean, defined for empty cohorts (issue #19)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from dp_fl.aggregators import means

VALUE_TYPE = tff.types.to_type(collections.OrderedDict(
    a=tff.TensorType(np.float32, [2]), b=tff.TensorType(np.float32, [3])))


def _value(x: float) -> collections.OrderedDict:
  return collections.OrderedDict(a=np.full(2, x, np.float32), b=np.full(3, -x, np.float32))


def _round(factory, clients: list[float]):
  process = factory.create(VALUE_TYPE)
  output = process.next(process.initialize(), [_value(x) for x in clients])
  return output.result, output.measurements


@pytest.mark.parametrize("fixed", [None, 4])
def test_empty_cohort_gives_a_zero_update_not_nan(fixed):
  # TFF's UnweightedMeanFactory gives 0/0 = NaN here; TFF's finalizer then refuses the
  # update and the run stopped ("non-finite server update", docs/RESULTS.md round 47).
  result, measurements = _round(means.cohort_mean_factory(fixed), [])
  np.testing.assert_array_equal(result["a"], np.zeros(2, np.float32))
  np.testing.assert_array_equal(result["b"], np.zeros(3, np.float32))
  assert measurements["clients"] == 0


def test_unweighted_tff_mean_is_nan_on_an_empty_cohort():
  # The failure the factory exists for: if TFF ever defines it, this test says so.
  process = tff.aggregators.UnweightedMeanFactory().create(VALUE_TYPE)
  result = process.next(process.initialize(), []).result
  assert np.isnan(result["a"]).all()


def test_mean_over_the_clients_that_reported():
  result, measurements = _round(means.cohort_mean_factory(), [1.0, 2.0, 6.0])
  np.testing.assert_allclose(result["a"], np.full(2, 3.0))
  np.testing.assert_allclose(result["b"], np.full(3, -3.0))
  assert measurements["clients"] == 3


def test_fixed_denominator_divides_by_the_report_goal_whatever_the_cohort():
  # The DP aggregators' estimator (paper 004 Alg. 1: sum / m) without the noise.
  result, measurements = _round(means.cohort_mean_factory(4), [1.0, 2.0, 6.0])
  np.testing.assert_allclose(result["a"], np.full(2, 9.0 / 4))
  assert measurements["clients"] == 3


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_bad_fixed_denominator_is_refused(bad):
  with pytest.raises(ValueError, match="fixed_denominator"):
    means.cohort_mean_factory(bad)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
