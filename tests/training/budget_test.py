"""A training job beyond its memory or time budget is refused before anything is written,
naming --rounds, the estimate and the rounds that would fit (issue #18;
dp_fl/training/budget.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dp_fl import resources
from dp_fl.training import budget
from dp_fl.training import registry


@pytest.fixture(autouse=True)
def _default_budgets():
  resources.set_budgets()
  yield
  resources.set_budgets()


def _config(tmp_path, **changes):
  fields = dict(task="t", root_dir=str(tmp_path), rounds=100, clients_per_round=10)
  return registry.make_config(**{**fields, **changes})


def test_training_at_a_billion_rounds_is_refused(tmp_path):
  with pytest.raises(ValueError, match=r"--rounds=1000000000: optimizing a 4-buffer BLT"):
    budget.check_training(_config(tmp_path, rounds=10 ** 9), 1000, memory_bytes=24e9)
  assert os.listdir(tmp_path) == []


def test_training_refusal_names_rounds_that_fit(tmp_path):
  config = _config(tmp_path, rounds=5000, mechanism="bandmf", min_sep=100)
  with pytest.raises(ValueError, match="at most") as error:
    budget.check_training(config, 1000, memory_bytes=200e6)
  fits = int(str(error.value).split("at most ")[1].split()[0])
  budget.check_training(config.replace(rounds=fits), 1000, memory_bytes=200e6)
  with pytest.raises(ValueError):
    budget.check_training(config.replace(rounds=fits + 1), 1000, memory_bytes=200e6)


def test_training_with_given_params_skips_the_build(tmp_path):
  config = _config(tmp_path, rounds=3000, mechanism="bandmf", min_sep=100)
  limit = 0.5e9  # 80 n² = 720 MB to optimize, 32 n² = 288 MB to evaluate.
  with pytest.raises(ValueError, match="optimizing BandMF"):
    budget.check_training(config, 1000, memory_bytes=limit)
  estimate = budget.check_training(config.replace(mechanism_params="p.json"), 1000,
                                   memory_bytes=limit)
  assert 288e6 <= estimate.bytes < limit


def test_training_rounds_beyond_int32_and_huge_populations(tmp_path):
  with pytest.raises(ValueError, match=r"--rounds=2147483648 exceeds 2147483647"):
    budget.check_training(_config(tmp_path, rounds=2 ** 31, mechanism="dpfedavg",
                                  participation="poisson"), 1000)
  with pytest.raises(ValueError, match="participation ledger of 1000000000000 clients"):
    budget.check_training(_config(tmp_path, mechanism="dpsgd"), 10 ** 12,
                          memory_bytes=1e9)


def test_training_default_job_fits(tmp_path):
  estimate = budget.check_training(_config(tmp_path, rounds=2052, min_sep=342), 10000)
  assert 0 < estimate.bytes < resources.memory_budget()



def test_a_large_cohort_leaves_the_worker_by_default(tmp_path):
  """Issue #43: TFF's worker holds 3.4 model-sized arrays a client (measured 54 MB a client of
  the 4.05M-parameter LSTM); the default moves to the in-process runtime, flat in the cohort,
  once that passes 1 GiB, and an explicit --runtime=tff_worker beyond the memory budget is
  refused naming --runtime and the largest cohort that fits."""
  from dp_fl.training import program  # pylint: disable=g-import-not-at-top
  per_client = budget.worker_cohort_estimate(_PAPER_D, 1).bytes
  assert per_client == pytest.approx(54e6, rel=0.03)
  paper = _config(tmp_path, clients_per_round=1000)
  moved, line = program.runtime_for_cohort(paper, _PAPER_D, runtime_given=False)
  assert (paper.runtime, moved.runtime) == ("tff_worker", "xla")
  assert not moved.runtime_settings.jit_compile and moved.runtime_settings.device == "auto"
  assert "in process" in line and "1000 clients" in line and "--runtime=tff_worker" in line
  assert {k: v for k, v in moved.flags().items() if k not in ("runtime", "device",
                                                              "jit_compile")} == {
      k: v for k, v in paper.flags().items() if k != "runtime"}
  # A --device given with the default runtime (which the worker ignores) is kept on the move.
  on_cpu, _ = program.runtime_for_cohort(paper, _PAPER_D, runtime_given=False, device="cpu")
  assert (on_cpu.runtime, on_cpu.runtime_settings.device) == ("xla", "cpu")
  # Small cohorts (every preset's quick job) keep the worker: 20 paper-size clients hold
  # 1.10 GB, above 1 GiB; 19 hold 1.05 GB.
  for clients, runtime in ((19, "tff_worker"), (20, "xla")):
    chosen, _ = program.runtime_for_cohort(_config(tmp_path, clients_per_round=clients),
                                           _PAPER_D, runtime_given=False)
    assert chosen.runtime == runtime
  # Given explicitly: kept while it fits the memory budget, refused beyond it.
  kept, line = program.runtime_for_cohort(_config(tmp_path, clients_per_round=100),
                                          _PAPER_D, runtime_given=True)
  assert kept.runtime == "tff_worker" and line is None
  resources.set_budgets(memory_bytes=8e9)
  with pytest.raises(ValueError) as refused:
    program.runtime_for_cohort(paper, _PAPER_D, runtime_given=True)
  message = str(refused.value)
  assert message.startswith("--runtime=tff_worker, --clients_per_round=1000:")
  assert "--runtime=xla" in message and f"(at most {int(8e9 // per_client)} fit)" in message
  # Other runtimes are never moved.
  xla = _config(tmp_path, clients_per_round=1000, runtime="xla", device="cpu")
  assert program.runtime_for_cohort(xla, _PAPER_D, runtime_given=False) == (xla, None)



# Paper 004's StackOverflow model: 4,050,748 parameters.
_PAPER_D = 4_050_748


@pytest.mark.parametrize("mechanism, buffers, flag, fits", [
    # BandMF with 342 bands holds 341 model-sized buffers: 5.5 GB at the paper's model.
    ("bandmf", 341, "--bands=342", "(at most 46 fits)"),
    ("blt", 60, "--blt_buffers=60", "(at most 46 fits)"),
    ("dpsgd", 0, "--mechanism=dpsgd", None),
])
def test_the_models_arrays_are_checked_and_name_what_fits(tmp_path, mechanism, buffers, flag,
                                                          fits):
  config = registry.make_config(task="t", root_dir=str(tmp_path), rounds=2052,
                                clients_per_round=1000, mechanism=mechanism, min_sep=342)
  per_copy = 4.0 * _PAPER_D
  budget_bytes = per_copy * (budget.MODEL_COPIES + 46.5)
  if mechanism == "dpsgd":
    budget_bytes = per_copy * (budget.MODEL_COPIES - 1)
  with pytest.raises(ValueError) as refused:
    budget.check_model_state(config, _PAPER_D, buffers, memory_bytes=budget_bytes)
  message = str(refused.value)
  assert flag in message and "--memory_budget_gb" in message
  assert (fits in message) if fits else "at most" not in message
  # What fits passes, and the estimate is what the state holds.
  fitted = budget.check_model_state(config, _PAPER_D, 46 if buffers else 0,
                                    memory_bytes=per_copy * (budget.MODEL_COPIES + 46.5))
  assert fitted.bytes == per_copy * (budget.MODEL_COPIES + (46 if buffers else 0))
  assert budget.checkpoint_bytes(_PAPER_D, 341) == pytest.approx(5.58e9, rel=0.01)


def test_the_whole_job_is_estimated_and_refused_naming_rounds(tmp_path):
  # Paper 004's Table 3 job: 2052 rounds of 1000 clients, ≤ 256 sentences of 21 tokens, the
  # 4.05M-parameter LSTM: ≈ 1.5 s a client here (docs/BENCHMARKS.md) → ≈ 36 days.
  config = registry.make_config(task="t", root_dir=str(tmp_path), rounds=2052,
                                clients_per_round=1000, mechanism="blt", min_sep=342)
  estimate = budget.job_estimate(config, _PAPER_D, 256 * 21)
  assert estimate.seconds == pytest.approx(2052 * 1000 * (0.02 + 5376 * _PAPER_D * 7e-11))
  assert 30 < estimate.seconds / 86400 < 45
  with pytest.raises(ValueError) as refused:
    budget.check_job_time(config, _PAPER_D, 256 * 21, seconds=24 * 3600.0)
  message = str(refused.value)
  assert message.startswith("--rounds=2052, --clients_per_round=1000: training 2052 rounds")
  assert "(at most 55 fits)" in message and "--time_budget_hours" in message
  # Raised budget, or the clients split over hosts: accepted (the estimate divides).
  assert budget.check_job_time(config, _PAPER_D, 256 * 21, seconds=40 * 86400.0)
  over_ten = budget.job_estimate(config, _PAPER_D, 256 * 21, hosts=10)
  assert over_ten.seconds == pytest.approx(estimate.seconds / 10)
  assert budget.check_job_time(config, _PAPER_D, None) is None  # No model of the client.


def test_the_job_estimate_counts_its_evaluations(tmp_path):
  # The preset's 10,000 held-out clients (≈ 426 sentences of 21 tokens each in TFF's file)
  # every 100 rounds and at the end: 21 evaluations, forward only (0.3 of a trained token).
  config = registry.make_config(task="t", root_dir=str(tmp_path), rounds=2052,
                                clients_per_round=1000, mechanism="blt", min_sep=342,
                                eval_every=100)
  assert budget.evaluations(config.rounds, config.eval_every) == 21
  eval_tokens = 10_000 * 426 * 21
  training = budget.job_estimate(config, _PAPER_D, 256 * 21)
  whole = budget.job_estimate(config, _PAPER_D, 256 * 21, eval_tokens=eval_tokens)
  per_evaluation = eval_tokens * _PAPER_D * 7e-11 * 0.3
  assert whole.seconds - training.seconds == pytest.approx(21 * per_evaluation)
  assert 0.03 < (whole.seconds - training.seconds) / whole.seconds < 0.08
  assert "evaluating 21 times" in whole.what and "21 evaluations" in whole.basis
  # Split over hosts, the clients' work divides; the evaluations (run here) do not.
  hosts = budget.job_estimate(config, _PAPER_D, 256 * 21, hosts=10, eval_tokens=eval_tokens)
  assert hosts.seconds == pytest.approx(training.seconds / 10 + 21 * per_evaluation)


def test_a_task_states_its_tokens_as_any_real_count():
  import dataclasses  # pylint: disable=g-import-not-at-top
  from tests.training import toy_task  # pylint: disable=g-import-not-at-top
  task = toy_task.make_task()
  for good in (5376, 5376.0, np.float32(5376), np.int64(10), None):
    dataclasses.replace(task, client_tokens=good, eval_tokens=good)
  for bad in (-1.0, float("nan"), float("inf"), True, "5376"):
    with pytest.raises(ValueError, match="eval_tokens"):
      dataclasses.replace(task, eval_tokens=bad)


def test_the_rounds_that_fit_count_the_evaluations(tmp_path):
  # One evaluation costs as much as many rounds: the rounds that fit are those whose job,
  # ⌈R / eval_every⌉ evaluations included, is within the limit (by brute force here).
  config = registry.make_config(task="t", root_dir=str(tmp_path), rounds=100,
                                clients_per_round=10, mechanism="blt", min_sep=10,
                                eval_every=30)
  tokens, eval_tokens = 1000.0, 5e6

  def job(rounds):
    return budget.job_estimate(config.replace(rounds=rounds, eval_every=30), _PAPER_D, tokens,
                               eval_tokens=eval_tokens).seconds

  whole = job(100)
  for limit in (0.9 * whole, 0.5 * whole, 0.2 * whole):
    fits = max(r for r in range(1, 101) if job(r) <= limit) if job(1) <= limit else None
    with pytest.raises(ValueError) as refused:
      budget.check_job_time(config, _PAPER_D, tokens, seconds=limit, eval_tokens=eval_tokens)
    message = str(refused.value)
    assert "--eval_every=30" in message
    assert (f"(at most {fits} fits)" in message) if fits else "at most" not in message
  one_evaluation = eval_tokens * _PAPER_D * 7e-11 * 0.3
  with pytest.raises(ValueError) as refused:  # Less than one evaluation: nothing fits.
    budget.check_job_time(config, _PAPER_D, tokens, seconds=0.5 * one_evaluation,
                          eval_tokens=eval_tokens)
  assert "at most" not in str(refused.value)
  with pytest.raises(ValueError, match="`rounds` must be a positive integer"):
    budget.resources.training_job_estimate(0, 10, _PAPER_D, tokens)


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
