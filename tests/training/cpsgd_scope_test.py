"""cpSGD's privacy report names everything the server receives (paper 000's trust model): the
secure sum is the only noised release; the un-noised counts and, with --workers, each
worker's partial sum are stated as not covered; a worker is never left with one client."""

from __future__ import annotations

import dataclasses

import pytest

from dp_fl.accounting import report as report_lib
from dp_fl.training import privacy
from tests.training import toy_program

WORKERS = "localhost:8000,localhost:8001"  # Never contacted: the config is only validated.


def _config(tmp_path, **overrides):
  return toy_program.toy_config(str(tmp_path), 4, "cpsgd", participation="uniform",
                                **overrides)


def _dummy_report(scope, caveats) -> report_lib.BinomialPrivacyReport:
  """A report whose numbers do not matter here: each field filled by its annotated type."""
  def dummy(annotation: str):
    for name, value in (("tuple", ()), ("float", 1.0), ("int", 1), ("str", "basic")):
      if name in annotation:
        return value
    return None

  fields = {f.name: dummy(str(f.type)) for f in dataclasses.fields(
      report_lib.BinomialPrivacyReport) if f.default is dataclasses.MISSING}
  return report_lib.BinomialPrivacyReport(**fields, scope=scope, caveats=caveats)


def test_the_scope_names_every_quantity_the_server_receives(tmp_path):
  scope, caveats = privacy.distributed_scope(_config(tmp_path))
  entries = dict(scope)
  covered = entries["covered"]
  assert "the only noised one" in covered and "not all the server receives" in covered
  not_covered = " ".join(v for k, v in scope if "NOT covered" in k)
  for released in ("cohort size (clients)", "clipped_count", "zeroed_count", "nonfinite_count",
                   "secure_sum/coordinates_clipped", "training metrics"):
    assert released in not_covered, released
  assert "without releasing any client's values" in not_covered  # The bounds check: one bit.
  assert not any("by each worker" in k for k in entries) and not caveats
  # The report's own statement of the setting no longer claims the sum is all that is seen.
  report = _dummy_report(scope, caveats)
  setting = report.checklist()["dp_setting"]
  assert "reveals only the sum" not in setting and "not covered" in setting
  assert "clipped_count" in report.to_markdown()


def test_with_workers_the_scope_states_what_each_partial_carries(tmp_path):
  config = _config(tmp_path, workers=WORKERS)
  scope, caveats = privacy.distributed_scope(config)
  (entry,) = [v for k, v in scope if k.startswith("released to this process by each worker")]
  for stated in ("sum over its chunk of the clients' integer messages", "at least 2 clients",
                 "only its chunk's noise shares", "far weaker than the ε stated",
                 "maxima are not sent"):
    assert stated in entry, stated
  (caveat,) = caveats
  assert f"--workers={WORKERS}" in caveat and "only those clients' noise shares" in caveat


def test_a_worker_assignment_that_would_isolate_a_client_is_refused(tmp_path):
  three = WORKERS + ",localhost:8002"
  with pytest.raises(ValueError, match=(r"--mechanism=cpsgd with --workers=.*\(3 workers\) and "
                                        r"--clients_per_round=5.*at least 2 clients.*Use at "
                                        r"most 2 workers, or --clients_per_round >= 6")):
    _config(tmp_path, workers=three, clients_per_round=5)
  _config(tmp_path, workers=three, clients_per_round=6)  # Two clients each: accepted.
  # Central DP trusts the server with the clipped updates: no such limit for BLT.
  toy_program.toy_config(str(tmp_path), 4, "blt", workers=three, clients_per_round=4)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
