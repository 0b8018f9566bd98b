"""The empirical privacy audit end to end (issue #41): canary clients in real training runs of
the toy task. A mechanism whose aggregator adds a tenth of the noise its accountant assumes is
caught (the one-run lower bound exceeds the accounted ε); the honest one is not; the
non-private `clip` run's bound reaches what K canaries can certify; a resumed run keeps its
canaries, coins and scores bitwise, and canaries never count for a real client."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dp_fl.accounting import empirical
from dp_fl.execution import runtime
from dp_fl.participation import checkpoint as participation_checkpoint
from dp_fl.training import canaries as canaries_lib
from dp_fl.training import checkpoints as checkpoints_lib
from dp_fl.training import program
from dp_fl.training import registry
from scripts import audit_results
from tests.training import toy_program
from tests.training import toy_task

NUM_REAL = 8  # Few real clients: their (aligned) clipped updates do not drown the canaries.
CANARIES = 256


@pytest.fixture(scope="module", autouse=True)
def tff_context():
  with runtime.execution_context():
    yield


def _config(root, mechanism, rounds=1, canaries=CANARIES, **overrides):
  # Every client (real and canary) takes part in every round: each inserted canary is in the
  # aggregate of every released model.
  values = dict(noise_multiplier=8.0, min_sep=1, clients_per_round=NUM_REAL + canaries,
                audit_canaries=canaries, eval_every=rounds, reproducible_noise_seed=11)
  values.update(overrides)
  return toy_program.toy_config(str(root), rounds, mechanism, **values)


def _run(config, **kwargs):
  return program.run(toy_task.make_task(wide=True, num_clients=NUM_REAL), config, **kwargs)


@pytest.fixture
def weakened_dpsgd(monkeypatch):
  entry = registry.mechanism("dpsgd")
  monkeypatch.setattr(entry, "aggregator", entry.aggregator)  # Restored after the test.
  audit_results.weaken_noise("dpsgd")


def test_a_tenth_of_the_noise_is_caught(tmp_path, weakened_dpsgd):
  del weakened_dpsgd
  result = _run(_config(tmp_path, "dpsgd", audit_strict=True))
  assert result.epsilon < 0.5  # σ = 8, one participation: ε ≈ 0.43 at δ = 1e-5.
  assert result.audit["one_run_lower_bound"] > result.epsilon
  assert result.audit_failed
  report = json.load(open(os.path.join(tmp_path, "privacy_report.json")))
  assert report["empirical"]["lower_bound_exceeds_accounted"]
  assert "ERROR" in open(os.path.join(tmp_path, "privacy_report.md")).read()
  summary = json.load(open(os.path.join(tmp_path, "summary.json")))
  assert summary["audit"]["lower_bound_exceeds_accounted"]


def test_the_honest_mechanism_passes(tmp_path):
  result = _run(_config(tmp_path, "dpsgd"))
  assert not result.audit_failed
  assert result.audit["one_run_lower_bound"] <= result.epsilon
  report = json.load(open(os.path.join(tmp_path, "privacy_report.json")))
  assert report["epsilon"] == result.epsilon and "empirical" in report
  md = open(os.path.join(tmp_path, "privacy_report.md")).read()
  assert md.count(canaries_lib.MARKDOWN_HEADING) == 1
  assert "Only the accounted ε is a guarantee" in md


def test_clip_approaches_what_the_canaries_can_certify(tmp_path):
  result = _run(_config(tmp_path, "clip"))
  audit = result.audit
  # Each threat model is tested at half the significance (their maximum holds at 95 %).
  ceiling = empirical.one_run_ceiling(audit["num_inserted"], audit["num_held_out"], 1e-5,
                                      confidence=0.975)
  assert audit["one_run_ceiling"] == ceiling
  assert audit["accounted_epsilon"] is None
  # Without noise the scores tell every canary apart: the bound is the most these canaries
  # can certify, within 20 % of the most any 256 can (equal halves, δ = 0).
  assert audit["one_run_lower_bound"] == ceiling
  assert ceiling > 0.8 * empirical.one_run_ceiling(CANARIES // 2, CANARIES // 2, 0.0)


def _final(root):
  restored = checkpoints_lib.CheckpointManager(os.path.join(root, "checkpoints")).restore_latest()
  return restored


def test_a_resumed_run_keeps_its_canaries_and_scores_bitwise(tmp_path):
  config = dict(rounds=3, canaries=32, noise_multiplier=1.0, clients_per_round=20,
                min_sep=2)
  whole = _run(_config(tmp_path / "whole", "blt", **config))
  _run(_config(tmp_path / "parts", "blt", **config), max_rounds_this_call=1)
  parts = _run(_config(tmp_path / "parts", "blt", **config))
  assert parts.resumed_from == 1
  assert parts.audit == whole.audit
  a, b = _final(tmp_path / "whole"), _final(tmp_path / "parts")
  assert a.blobs[program.CANARIES_BLOB] == b.blobs[program.CANARIES_BLOB]
  for x, y in zip(a.arrays, b.arrays):
    np.testing.assert_array_equal(x, y)
  scores = canaries_lib.CanaryScores.from_bytes(b.blobs[program.CANARIES_BLOB])
  ledger = participation_checkpoint.restore_scheduler(b.blobs["scheduler"]).ledger
  assert ledger.num_clients == NUM_REAL + 32
  # The canaries are the ledger's clients NUM_REAL.. under their own indices.
  np.testing.assert_array_equal(ledger.counts[NUM_REAL:], scores.participations)
  assert int(ledger.counts.sum()) == scores.client_participations
  assert scores.rounds_scored == 3
  # Other canaries would be another population: refused, naming the setting.
  with pytest.raises(ValueError, match="audit_canaries: 32 -> 16"):
    _run(_config(tmp_path / "parts", "blt", **dict(config, canaries=16, rounds=4)))


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
