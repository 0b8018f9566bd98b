"""The catalog: every mechanism built, evaluated, streamed and serialized by one vocabulary."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dp_fl.mechanisms import blt
from dp_fl.mechanisms import catalog
from tests.mechanisms import oracles


@pytest.fixture(scope="module")
def built_small():
  n, b = 24, 6
  return {name: catalog.build(name, rounds=n, min_sep=b, buffers=2, bands=4).mechanism
          for name in catalog.MECHANISMS}


@pytest.mark.parametrize("name", ["blt", "bandmf", "dpsgd"])
def test_streaming_noise_inverts_the_mechanisms_c(built_small, name):
  mechanism = built_small[name]
  n = 24
  c = oracles.dense_strategy(mechanism, n)
  np.testing.assert_allclose(mechanism.streaming_noise(n).materialize(n) @ c, np.eye(n),
                             atol=1e-10)


@pytest.mark.parametrize("name", ["blt", "bandmf", "dpsgd", "tree", "tree_full"])
def test_evaluation_matches_dense_brute_force(built_small, name):
  mechanism = built_small[name]
  n, b, k = 24, 6, 4
  ev = catalog.evaluate(mechanism, n, b, k)
  a = np.tril(np.ones((n, n)))
  if name in ("tree", "tree_full"):
    from dp_fl.mechanisms import tree  # pylint: disable=g-import-not-at-top
    c_tree = tree.binary_tree_matrix(n)
    sens = oracles.max_pattern_norm(c_tree, b, k)
    if name == "tree":
      b_matrix = a @ np.linalg.inv(tree.online_tree_matrix(n))
    else:
      b_matrix = a @ np.linalg.pinv(c_tree)
  else:
    c = oracles.dense_strategy(mechanism, n)
    sens = oracles.max_pattern_norm(c, b, k)
    b_matrix = a @ np.linalg.inv(c)
  errors = np.sum(b_matrix ** 2, axis=1)
  assert ev.sensitivity == pytest.approx(sens, rel=1e-9)
  assert ev.sensitivity_kind == catalog.EXACT
  assert ev.max_error == pytest.approx(math.sqrt(errors.max()), rel=1e-9)
  assert ev.rms_error == pytest.approx(math.sqrt(errors.mean()), rel=1e-9)
  assert ev.max_loss == pytest.approx(ev.sensitivity * ev.max_error)
  assert ev.rms_loss == pytest.approx(ev.sensitivity * ev.rms_error)


def test_buffers(built_small):
  assert built_small["blt"].buffers(24) == 2
  assert built_small["bandmf"].buffers(24) == 3
  assert built_small["tree"].buffers(24) == 4  # floor(log2 24)
  assert built_small["tree_full"].buffers(24) is None
  assert built_small["dpsgd"].buffers(24) == 0


@pytest.mark.parametrize("name", catalog.MECHANISMS)
def test_json_round_trip(built_small, name):
  mechanism = built_small[name]
  restored = catalog.from_dict(json.loads(json.dumps(mechanism.to_dict())))
  assert restored.name == name
  first = catalog.evaluate(mechanism, 20, 5)
  again = catalog.evaluate(restored, 20, 5)
  assert again.max_loss == pytest.approx(first.max_loss, rel=1e-12)
  assert again.rms_loss == pytest.approx(first.rms_loss, rel=1e-12)


def test_bandmf_refuses_rounds_beyond_its_n(built_small):
  with pytest.raises(ValueError, match="exceeds the 24 rounds"):
    catalog.evaluate(built_small["bandmf"], 25, 6)
  with pytest.raises(ValueError, match="beyond the 24 rounds"):
    noise = built_small["bandmf"].streaming_noise()
    state = noise.init(())
    for _ in range(25):
      _, state = noise.next(np.float64(0.0), state)


def test_tree_full_cannot_stream(built_small):
  with pytest.raises(ValueError, match="tree_full"):
    built_small["tree_full"].streaming_noise(24)


def test_infeasible_participations_are_reduced_and_said():
  ev = catalog.evaluate(catalog.DpSgdMechanism(), 10, 4, 9)
  assert ev.max_participations == 3 and ev.requested_max_participations == 9
  assert any("reduced" in note for note in ev.notes)
  assert ev.sensitivity == pytest.approx(math.sqrt(3))


def test_tree_at_large_n_reports_what_kind_of_sensitivity_it_is():
  ev = catalog.evaluate(catalog.TreeMechanism(full=True), 2052, 342, 6)
  assert ev.sensitivity_kind in (catalog.EXACT, catalog.LOWER_BOUND)
  if ev.sensitivity_kind == catalog.LOWER_BOUND:
    assert any("LOWER BOUND" in note for note in ev.notes)


def test_published_blt_round_trips_through_the_catalog():
  params = blt.PUBLISHED_BLTS[400]
  mechanism = catalog.from_dict(params.to_dict())
  ev = catalog.evaluate(mechanism, 4000, 400, 5)
  assert ev.sensitivity == pytest.approx(params.sensitivity(4000, 400, 5), rel=1e-12)


@pytest.mark.parametrize("data, match", [
    ({"mechanism": "fancy"}, "Unknown mechanism 'fancy'"),
    ({"theta": [0.5]}, "'mechanism' key"),
    ([1, 2], "'mechanism' key"),
])
def test_bad_parameters_are_clear_errors(data, match):
  with pytest.raises(ValueError, match=match):
    catalog.from_dict(data)


def test_bad_build_arguments_are_clear_errors():
  with pytest.raises(ValueError, match="`mechanism` must be one of"):
    catalog.build("fancy", rounds=10, min_sep=2)
  with pytest.raises(ValueError, match="`rounds` must be a positive integer"):
    catalog.build("blt", rounds=0, min_sep=2)
  with pytest.raises(ValueError, match="`min_sep` must be a positive integer"):
    catalog.build("dpsgd", rounds=10, min_sep=-1)
  with pytest.raises(ValueError, match="`buffers` must be a positive integer"):
    catalog.build("blt", rounds=10, min_sep=2, buffers=0)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
