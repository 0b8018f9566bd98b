"""The two-band Toeplitz mechanism's math (C = LtToep(1, c)) against dense brute force:
sensitivity, errors, the optimized c, its JSON, bad parameters. Its noise and training through
the registry: tests/training/two_band_mechanism_test.py."""

from __future__ import annotations

import numpy as np
import pytest

from dp_fl.mechanisms import catalog
from dp_fl.mechanisms import sensitivity as sensitivity_lib
from dp_fl.mechanisms import two_band
from tests.mechanisms import oracles


def _dense(c: float, n: int) -> np.ndarray:
  return np.eye(n) + c * np.eye(n, k=-1)


@pytest.mark.parametrize("c,n,b,k", [(0.0, 6, 2, 3), (0.4, 7, 2, 4), (0.9, 8, 3, 3),
                                     (1.0, 6, 1, 6), (0.7, 9, 4, 2)])
def test_sensitivity_is_the_brute_force_maximum(c, n, b, k):
  sens = two_band.TwoBandMechanism(c).sensitivity(n, b, k)
  assert sens.is_exact
  truth = oracles.brute_force_sensitivity(_dense(c, n), b, k)
  assert sens.value == pytest.approx(truth, rel=1e-12)


@pytest.mark.parametrize("c,n", [(0.3, 5), (0.95, 9)])
def test_errors_are_those_of_b_equals_a_c_inverse(c, n):
  b_matrix = np.tril(np.ones((n, n))) @ np.linalg.inv(_dense(c, n))
  expected = np.sum(b_matrix ** 2, axis=1)
  np.testing.assert_allclose(two_band.TwoBandMechanism(c).per_query_squared_error(n),
                             expected, rtol=1e-12)


def test_build_beats_dpsgd_and_a_grid_and_round_trips_through_json():
  built = catalog.build(two_band.NAME, rounds=60, min_sep=6, max_participations=10)
  mechanism = built.mechanism
  options = catalog.BuildOptions(60, 6, 10)
  grid = min(two_band.loss(c, options) for c in np.linspace(0.0, 1.0, 201))
  assert two_band.loss(mechanism.c, options) <= grid * (1 + 1e-6)
  assert two_band.loss(mechanism.c, options) < 0.8 * two_band.loss(0.0, options)
  assert catalog.from_dict(mechanism.to_dict()).to_dict() == mechanism.to_dict()
  assert two_band.NAME in catalog.names()


@pytest.mark.parametrize("bad,match", [({"c": 1.5}, "must lie in"), ({"c": -0.1}, "`c`"),
                                       ({}, "subdiagonal")])
def test_bad_parameters_fail_clearly(bad, match):
  with pytest.raises(ValueError, match=match):
    catalog.from_dict({"mechanism": two_band.NAME, **bad})


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
