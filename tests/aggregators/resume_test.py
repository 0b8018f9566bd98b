"""Checkpoint/resume: a saved aggregator state continues the exact noise stream elsewhere.

Paper 004's DP-FTRL noise of round t depends on every earlier round's Gaussian; the
aggregator state (seed, round, buffers) carries all of it. Saving after round r and
continuing in a fresh Python process must give bitwise the same noise for rounds r+1...
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from dp_fl.aggregators import dp_ftrl
from tests.aggregators import reference

VALUE_TYPE = tff.TensorType(np.float32, [5])
PRESETS = ("blt", "banded", "tree", "dpsgd")
TOTAL_ROUNDS = 7
SAVE_AFTER = 3
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(preset: str) -> dp_ftrl.DPFTRLFactory:
  common = dict(clip_norm=0.7, noise_multiplier=1.3, clients_per_round=2, seed=2024)
  return dp_ftrl.DPFTRLFactory(reference.noise_spec(preset, TOTAL_ROUNDS, bands=3), **common)


def run(process, state, rounds):
  zero = np.zeros(5, np.float32)
  results = []
  for _ in range(rounds):
    output = process.next(state, [zero, zero])
    results.append(output.result)
    state = output.state
  return np.array(results), state


def save_state(states: dict, path: str) -> None:
  """One array per state leaf, keyed preset/index (a plain, portable checkpoint)."""
  arrays = {}
  for preset, state in states.items():
    for i, leaf in enumerate(tf.nest.flatten(state)):
      arrays[f"{preset}/{i}"] = np.asarray(leaf)
  np.savez(path, **arrays)


def load_state(process, saved, preset: str):
  template = process.initialize()
  leaves = [saved[f"{preset}/{i}"] for i in range(len(tf.nest.flatten(template)))]
  return tf.nest.pack_sequence_as(template, leaves)


def test_resumed_noise_is_bitwise_identical(tmp_path):
  uninterrupted, states = {}, {}
  for preset in PRESETS:
    process = build(preset).create(VALUE_TYPE)
    first, state = run(process, process.initialize(), SAVE_AFTER)
    rest, _ = run(process, state, TOTAL_ROUNDS - SAVE_AFTER)
    uninterrupted[preset] = rest
    states[preset] = state
    assert state["noise"]["round"] == SAVE_AFTER
    assert np.all(first != 0)
  state_path, out_path = str(tmp_path / "state.npz"), str(tmp_path / "out.npz")
  save_state(states, state_path)
  env = dict(os.environ, PYTHONPATH=_REPO_ROOT)
  proc = subprocess.run(
      [sys.executable, os.path.join(_REPO_ROOT, "tests", "aggregators", "resume_program.py"),
       state_path, str(TOTAL_ROUNDS - SAVE_AFTER), out_path],
      env=env, cwd=_REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  resumed = np.load(out_path)
  for preset in PRESETS:
    np.testing.assert_array_equal(resumed[preset], uninterrupted[preset], err_msg=preset)


def test_restarting_from_initial_state_does_not_resume():
  # Guards the test above against vacuity: dropping the buffers changes the noise.
  process = build("blt").create(VALUE_TYPE)
  _, state = run(process, process.initialize(), SAVE_AFTER)
  reset = tf.nest.map_structure(lambda x: x, state)
  reset["noise"]["buffers"] = [np.zeros_like(b) for b in state["noise"]["buffers"]]
  a, _ = run(process, state, 1)
  b, _ = run(process, reset, 1)
  assert not np.array_equal(a, b)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
