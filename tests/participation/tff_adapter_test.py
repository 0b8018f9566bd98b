"""The TFF adapter with a tiny TestClientData (no federated computation is executed)."""

from __future__ import annotations

import collections

import pytest
import tensorflow_federated as tff

from dp_fl.participation import device_timer
from dp_fl.participation import sampling
from dp_fl.participation import tff_adapter


def make_client_data(n=12):
  return tff.simulation.datasets.TestClientData({
      f"client_{i:02d}": collections.OrderedDict(x=list(range(i, i + 1 + i % 3)))
      for i in range(n)})


def values(dataset):
  return [int(e["x"]) for e in dataset.as_numpy_iterator()]


def test_rounds_yield_selected_clients_and_their_data():
  data = make_client_data()
  scheduler = device_timer.DeviceTimerScheduler(12, 3, 8, seed=0, min_separation_rounds=4)
  adapter = tff_adapter.TffParticipation(scheduler, data)
  for r in range(8):
    rnd = adapter.next_round()
    assert rnd.selection.round_index == r
    expected = tuple(adapter.client_ids[i] for i in rnd.selection.client_ids)
    assert rnd.client_ids == expected and len(rnd.datasets) == 3
    for cid, ds in zip(rnd.client_ids, rnd.datasets):
      assert values(ds) == values(data.create_tf_dataset_for_client(cid))
  assert scheduler.realized().num_rounds == 8
  assert scheduler.realized().min_separation == 4


def test_padding_with_empty_datasets():
  data = make_client_data()
  scheduler = sampling.BallsInBinsScheduler(12, 3, seed=1, fixed_size=8)
  adapter = tff_adapter.TffParticipation(scheduler, data, pad_with_empty_datasets=True)
  rnd = adapter.next_round()
  assert len(rnd.datasets) == 8
  assert rnd.selection.num_padding == 8 - len(rnd.client_ids)
  for ds in rnd.datasets[len(rnd.client_ids):]:
    assert values(ds) == []


def test_restore_continues_identically():
  data = make_client_data()
  adapter = tff_adapter.TffParticipation(sampling.PoissonScheduler(12, 0.3, seed=5), data)
  for _ in range(4):
    adapter.next_round()
  restored = tff_adapter.TffParticipation.restore(adapter.state(), data)
  for _ in range(5):
    assert adapter.next_round().client_ids == restored.next_round().client_ids


def test_bad_input():
  data = make_client_data()
  with pytest.raises(ValueError, match="12 clients"):
    tff_adapter.TffParticipation(sampling.UniformScheduler(5, 2, seed=0), data)
  with pytest.raises(ValueError, match="create_tf_dataset_for_client"):
    tff_adapter.TffParticipation(sampling.UniformScheduler(5, 2, seed=0), object())
  with pytest.raises(ValueError, match="scheduler"):
    tff_adapter.TffParticipation("not a scheduler", data)


def test_participation_package_imports_no_tensorflow():
  import subprocess
  import sys
  code = ("import sys; import dp_fl.participation.checkpoint, dp_fl.participation.extrapolation, "
          "dp_fl.participation.tff_adapter; "
          "assert 'tensorflow' not in sys.modules and 'tensorflow_federated' not in sys.modules")
  subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
