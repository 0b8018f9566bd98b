"""Canary clients (dp_fl/training/canaries.py): the secret and coins, the client inputs, the
TFF client work that inserts ζ · u_i, and the scores, against NumPy brute force."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl.execution import runtime
from dp_fl.training import canaries as canaries_lib
from dp_fl.training import client_work
from tests.training import toy_task


@pytest.fixture(scope="module")
def tff_context():
  with runtime.execution_context():
    yield


def test_draw_is_secret_by_default_and_reproducible_from_a_seed():
  a, b = (canaries_lib.Canaries.draw(64, 10) for _ in range(2))
  assert a.secret != b.secret  # OS entropy.
  c, d = (canaries_lib.Canaries.draw(64, 10, seed=7) for _ in range(2))
  assert c == d and c.secret != a.secret
  assert canaries_lib.Canaries.draw(64, 10, seed=8) != c
  assert 10 < sum(c.inserted) < 54  # Fair coins (P[outside] < 1e-6).
  assert canaries_lib.Canaries.from_bytes(c.to_bytes()) == c
  assert list(c.indices) == list(range(10, 74))


def test_bad_canary_sets_are_refused():
  with pytest.raises(ValueError, match="at least 2"):
    canaries_lib.Canaries(5, 3, (True,))
  with pytest.raises(ValueError, match="secret"):
    canaries_lib.Canaries(5, 0, (True, False))
  with pytest.raises(ValueError, match="audit_canaries"):
    canaries_lib.Canaries.draw(0, 5)


def test_client_inputs_mark_only_inserted_canaries():
  canaries = canaries_lib.Canaries(24, 12345, (True, False, True))
  data = canaries_lib.CanaryClientData(toy_task.ToyClientData(), canaries)
  assert data.client_ids[:24] == toy_task.ToyClientData().client_ids
  assert data.client_ids[24:] == ["canary:0", "canary:1", "canary:2"]

  def canary(cid):
    return list(data.create_tf_dataset_for_client(cid)["canary"])[0].numpy().tolist()

  assert canary("client_003") == [0, 0, 0]
  assert canary("canary:0") == [1, 12345, 0]
  assert canary("canary:1") == [0, 0, 0]  # Held out: an empty client.
  assert canary("canary:2") == [1, 12345, 2]
  real = data.create_tf_dataset_for_client("client_003")["data"]
  want = toy_task.ToyClientData().create_tf_dataset_for_client("client_003")
  for got, expected in zip(real, want):
    np.testing.assert_array_equal(got[0], expected[0])
  assert not list(data.create_tf_dataset_for_client("canary:0")["data"])
  padding = data.create_padding_input()
  assert not list(padding["data"]) and list(padding["canary"])[0].numpy().tolist() == [0, 0, 0]
  with pytest.raises(ValueError, match="unknown client id"):
    data.create_tf_dataset_for_client("client_999")


def test_a_round_of_canaries_alone_counts_no_client_with_data():
  """Canaries report no examples: the loop must not take a round of them alone for one in
  which every client diverged (`policies.nonfinite_problem`)."""
  from dp_fl.participation import tff_adapter  # pylint: disable=g-import-not-at-top
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  from tests.training import toy_program  # pylint: disable=g-import-not-at-top
  canaries = canaries_lib.Canaries(24, 12345, (True, False, True))
  data = canaries_lib.CanaryClientData(toy_task.ToyClientData(), canaries)
  assert data.has_data("client_000") and not data.has_data("canary:1")
  config = toy_program.toy_config("/tmp/unused", 30, "dpsgd", clients_per_round=27,
                                  participation="uniform", audit_canaries=3)
  adapter = tff_adapter.TffParticipation(program.build_scheduler(config, 27, seed=1), data)
  pending = adapter.select_round()
  assert len(pending.client_ids) == 27 and pending.clients_with_data == 24


def test_client_ids_that_look_like_canaries_are_refused():
  class Clashing(toy_task.ToyClientData):
    def __init__(self):
      super().__init__(4)
      self.client_ids = ["canary:0", "a", "b", "c"]

  with pytest.raises(ValueError, match="canary:0"):
    canaries_lib.CanaryClientData(Clashing(), canaries_lib.Canaries(4, 9, (True, False)))


def test_directions_are_unit_and_depend_on_secret_and_index():
  shapes = [(4, 3), (3,)]

  def flat(secret, index):
    return np.concatenate([t.numpy().ravel() for t in canary_directions(shapes, secret, index)])

  canary_directions = canaries_lib.canary_directions
  u = flat(11, 0)
  assert np.linalg.norm(u) == pytest.approx(1.0, abs=1e-6)
  np.testing.assert_array_equal(u, flat(11, 0))
  assert not np.allclose(u, flat(11, 1)) and not np.allclose(u, flat(12, 0))


def test_client_work_inserts_clip_norm_times_the_direction_for_inserted_canaries(tff_context):
  del tff_context
  task = toy_task.make_task()
  spec = task.train_data.create_tf_dataset_for_client("client_000").element_spec
  inner = client_work.delta_client_work(task, spec, optimizer="sgd", learning_rate=0.3,
                                        weighting=tff.learning.ClientWeighting.UNIFORM)
  work = canaries_lib.with_canaries(inner, 2.5, 1.0)
  canaries = canaries_lib.Canaries(24, 4242, (True, False))
  data = canaries_lib.CanaryClientData(task.train_data, canaries)
  model = task.keras_model_fn()
  weights = tff.learning.models.ModelWeights(
      trainable=[np.full(w.shape, 0.1, np.float32) for w in model.trainable_weights],
      non_trainable=[])
  ids = ["client_005", "canary:0", "canary:1"]
  inputs = [data.create_tf_dataset_for_client(c) for c in ids]
  out = work.next(work.initialize(), [weights] * 3, inputs)
  inner_out = inner.next(inner.initialize(), [weights],
                         [task.train_data.create_tf_dataset_for_client("client_005")])
  real, inserted, held_out = out.result
  for got, want in zip(real.update, inner_out.result[0].update):
    np.testing.assert_array_equal(got, want)
  direction = canaries_lib.canary_directions([w.shape for w in model.trainable_weights],
                                             4242, 0)
  for got, u in zip(inserted.update, direction):
    np.testing.assert_allclose(got, 2.5 * (1 - 1e-6) * u.numpy(), rtol=1e-6)
  assert inserted.update_weight == 1.0
  assert np.linalg.norm(np.concatenate([np.ravel(u) for u in inserted.update])) == (
      pytest.approx(2.5, rel=1e-5))
  assert all(not np.any(u) for u in held_out.update)


def _weights(rng, shapes):
  return [rng.normal(size=s).astype(np.float32) for s in shapes]


def test_scores_match_brute_force_cosines_and_survive_a_checkpoint():
  shapes = [(40, 30), (30,)]
  canaries = canaries_lib.Canaries(5, 77, (True, True, False, True, False, True))
  rng = np.random.default_rng(0)
  w0 = _weights(rng, shapes)
  scores = canaries_lib.CanaryScores(canaries, w0)
  directions = np.stack([np.concatenate([
      t.numpy().ravel() for t in canaries_lib.canary_directions(shapes, 77, i)])
                         for i in range(6)])
  flat = lambda ws: np.concatenate([w.ravel() for w in ws]).astype(np.float64)
  iterates = [w0]
  for step in range(3):
    move = 0.3 * directions[1 + step] + 0.001 * rng.normal(size=directions.shape[1])
    new = flat(iterates[-1]) - move
    iterates.append([new[:1200].reshape(40, 30).astype(np.float32),
                     new[1200:].astype(np.float32)])
    scores.observe([0, 3, 5 + step + 1, 5 + 2 * step], iterates[-1])
    if step == 1:
      scores = canaries_lib.CanaryScores.from_bytes(scores.to_bytes())

  def cos(delta):
    return directions @ delta / np.linalg.norm(delta)

  want_max = np.max([cos(flat(a) - flat(b)) for a, b in zip(iterates, iterates[1:])], axis=0)
  np.testing.assert_allclose(scores.max_iterate, want_max, atol=1e-6)
  np.testing.assert_allclose(scores.final(), cos(flat(w0) - flat(iterates[-1])), atol=1e-6)
  assert scores.max_iterate[1] > 0.9  # The round that moved along u_1.
  # Client indices 0 and 3 are real clients: they never count for a canary.
  np.testing.assert_array_equal(scores.participations, [1, 1, 2, 1, 1, 0])
  assert scores.client_participations == 12 and scores.rounds_scored == 3


def test_audit_section_flags_a_lower_bound_above_the_accounted_epsilon():
  k = 200
  inserted = tuple(bool(b) for b in np.random.default_rng(1).integers(0, 2, k))
  canaries = canaries_lib.Canaries(10, 5, inserted)
  scores = canaries_lib.CanaryScores(canaries, [np.zeros((3000,), np.float32)])
  # Scores a mechanism with almost no noise would give: inserted canaries far above the rest.
  rng = np.random.default_rng(2)
  values = np.where(inserted, 0.3, 0.0) + 0.01 * rng.normal(size=k)
  scores.max_iterate = values
  scores.previous = np.zeros(3000, np.float32)
  scores.rounds_scored = 1
  section = canaries_lib.audit(scores, accounted_epsilon=0.5, delta=1e-5)
  assert section["one_run_lower_bound"] > 0.5 and section["lower_bound_exceeds_accounted"]
  assert section["num_inserted"] + section["num_held_out"] == k
  assert "ERROR" in canaries_lib.markdown(section)
  assert "privacy analysis or implementation bug" in canaries_lib.exceeded_message(section)
  assert section["one_run_claim_tested"] == "epsilon_delta"
  gaussian = canaries_lib.audit(scores, accounted_epsilon=0.5, delta=1e-5, gaussian_claim=True)
  assert gaussian["one_run_claim_tested"] == "gaussian" and gaussian["gaussian_claim"]
  assert gaussian["one_run_lower_bound"] > section["one_run_lower_bound"]
  assert gaussian["one_run_ceiling"] > section["one_run_ceiling"]
  # A saved section re-audits to itself from its own scores.
  assert canaries_lib.estimate(gaussian, True) == gaussian
  honest = canaries_lib.audit(scores, accounted_epsilon=50.0, delta=1e-5)
  assert not honest["lower_bound_exceeds_accounted"]
  assert "ERROR" not in canaries_lib.markdown(honest)
  assert "Only the accounted ε is a guarantee" in canaries_lib.markdown(honest)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
