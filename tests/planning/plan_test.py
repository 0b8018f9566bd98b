"""scripts/plan and dp_fl.planning.plan: the prediction a training run then realizes, ε equal
to scripts/privacy's, the equal-noise comparison, robustness and bad flags."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from dp_fl.execution import runtime
from dp_fl.mechanisms import catalog
from dp_fl.planning import plan as plan_lib
from dp_fl.training import program
from scripts import plan as plan_script
from scripts import privacy as privacy_script
from tests.training import toy_program
from tests.training import toy_task

# pt-BR-like (paper 004 Table 4, BLT-16.1: ⌊N/m⌋ = 1383 optimistic, 1181 realized), scaled to
# a toy population: N/m = 140, a timer of 59 h at 0.5 h rounds, diurnal availability.
PT_BR_LIKE = dict(population=280, report_goal=2, rounds=200, timer_hours=59.0, round_hours=0.5,
                  availability="diurnal", seed=3)


def _run_plan(capsys, tmp_path, *flags):
  code = plan_script.main([*flags, "--format", "json", f"--out_dir={tmp_path / 'plan'}"])
  out, err = capsys.readouterr()
  assert code == 0, err
  return json.loads(out)


def _flags(settings: dict) -> list[str]:
  return [f"--{k}={v}" for k, v in settings.items()]


def test_training_realizes_the_min_sep_the_plan_predicts(tmp_path):
  settings = plan_lib.PlanSettings(**PT_BR_LIKE, noise_multiplier=8.0, trials=20,
                                   mechanisms=("blt",))
  plan = plan_lib.make_plan(settings)
  predicted = plan.prediction.to_dict()
  assert predicted["min_sep_range"] is not None
  low, high = predicted["min_sep_range"]
  assert predicted["min_sep"] == low < predicted["optimistic_min_sep"]
  params = tmp_path / "blt.json"
  params.write_text(json.dumps(plan.mechanisms[0].params))
  config = toy_program.toy_config(
      str(tmp_path / "run"), settings.rounds, "blt", mechanism_params=str(params),
      noise_multiplier=plan.mechanisms[0].noise_multiplier, participation="device_timer",
      clients_per_round=settings.report_goal, timer_hours=settings.timer_hours,
      round_hours=settings.round_hours, availability=settings.availability,
      seed=settings.seed, delta=settings.delta, min_sep=plan.prediction.planned_min_sep,
      eval_every=settings.rounds, checkpoint_every=settings.rounds,
      reproducible_noise_seed=11)
  with runtime.execution_context():
    program.run(toy_task.make_task(num_clients=settings.population), config,
                progress_stream=open(os.devnull, "w", encoding="utf-8"))
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  realized = summary["realized_participation"]
  assert realized["num_rounds"] == settings.rounds
  assert low <= realized["min_separation"] <= high, (realized, predicted)
  k_low, k_high = predicted["max_participations_range"]
  assert k_low <= realized["max_participations"] <= k_high
  # The run is accounted from what it realized, within the plan's worst case.
  assert summary["epsilon"] <= plan.mechanisms[0].planned.epsilon * (1 + 1e-9)


def test_epsilon_equals_scripts_privacy_and_params_feed_training(capsys, tmp_path):
  data = _run_plan(capsys, tmp_path, *_flags(PT_BR_LIKE), "--noise_multiplier=8",
                   "--trials=3", "--mechanisms=blt,bandmf,tree,dpsgd")
  prediction = data["prediction"]
  assert [m["name"] for m in data["mechanisms"]] == ["blt", "bandmf", "tree", "dpsgd"]
  for m in data["mechanisms"]:
    path = data["mechanism_params"][m["name"]]
    assert catalog.load(path, m["name"]).to_dict() == m["params"]
    code = privacy_script.main([
        f"--mechanism={m['name']}", f"--params_in={path}", f"--rounds={PT_BR_LIKE['rounds']}",
        f"--min_sep={prediction['planned_min_sep']}",
        f"--max_participations={prediction['max_participations']}",
        f"--noise_multiplier={m['noise_multiplier']!r}", "--delta=1e-10", "--format=json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["epsilon"] == m["planned"]["epsilon"], m["name"]
  assert os.path.getsize(tmp_path / "plan" / plan_script.EPSILON_PNG) > 10_000
  saved = json.loads((tmp_path / "plan" / plan_script.PLAN_JSON).read_text())
  assert saved["prediction"] == prediction
  # The printed training flags carry the plan's settings exactly (repr, not rounded).
  flags = dict(f[2:].split("=", 1) for f in data["training_flags"]["blt"])
  blt = data["mechanisms"][0]
  assert float(flags["noise_multiplier"]) == blt["noise_multiplier"]
  assert float(flags["timer_hours"]) == PT_BR_LIKE["timer_hours"]
  assert float(flags["round_hours"]) == PT_BR_LIKE["round_hours"]
  assert float(flags["delta"]) == 1e-10 and flags["mechanism_params"].endswith("blt.json")
  assert int(flags["min_sep"]) == prediction["planned_min_sep"]


def test_equal_rms_noise_comparison_and_target_epsilon():
  base = dict(PT_BR_LIKE, trials=2, mechanisms=("blt", "tree", "dpsgd"))
  plan = plan_lib.make_plan(plan_lib.PlanSettings(**base, noise_multiplier=6.0))
  first = plan.mechanisms[0]
  assert first.noise_multiplier == 6.0
  for m in plan.mechanisms[1:]:  # σ rounded up: equal noise to 1e-6, never less.
    assert first.rms_noise <= m.rms_noise <= first.rms_noise * (1 + 1e-5)
  same = plan_lib.make_plan(plan_lib.PlanSettings(**base, noise_multiplier=6.0,
                                                  compare="noise_multiplier"))
  assert {m.noise_multiplier for m in same.mechanisms} == {6.0}
  calibrated = plan_lib.make_plan(plan_lib.PlanSettings(**base, target_epsilon=2.0))
  for m in calibrated.mechanisms:
    assert 2.0 * (1 - 1e-4) <= m.planned.epsilon <= 2.0
  # DP-SGD (C = I) needs the most noise for the same ε in this multi-participation setting.
  assert calibrated.mechanisms[-1].rms_noise > calibrated.mechanisms[0].rms_noise


def test_b_min_sep_estimates_what_amplification_would_buy(capsys):
  settings = dict(population=400, report_goal=20, rounds=40, timer_hours=4.0, round_hours=1.0,
                  trials=1, delta=1e-4, mechanisms=("blt", "dpsgd"), target_epsilon=4.0)
  plan = plan_lib.make_plan(plan_lib.PlanSettings(**settings, b_min_sep=True,
                                                  b_min_sep_samples=2 ** 15))
  for m in plan.mechanisms:
    a = m.b_min_sep
    assert a["min_sep"] <= 400 // 20 and 0 < a["sampling_probability"] <= 1
    assert a["epsilon"] == pytest.approx(m.planned.epsilon)
    assert 0 < a["noise_multiplier"] < m.noise_multiplier  # Amplified: less noise.
    assert a["noise_reduction_percent"] > 0
  assert plan.mechanisms[1].b_min_sep["exact_likelihood_ratio"]  # C = I.
  text = plan_lib.format_table(plan)
  assert "With b-min-sep sampling" in text and "less noise than" in text
  assert plan_lib.make_plan(plan_lib.PlanSettings(**settings)).mechanisms[0].b_min_sep is None


def test_b_min_sep_estimate_under_diurnal_availability_lowers_b_until_reachable():
  settings = dict(population=400, report_goal=80, rounds=24, timer_hours=40.0, round_hours=2.0,
                  trials=1, delta=1e-4, mechanisms=("dpsgd",), target_epsilon=4.0,
                  availability="diurnal", b_min_sep=True, b_min_sep_samples=2 ** 15)
  plan = plan_lib.make_plan(plan_lib.PlanSettings(**settings))
  a = plan.mechanisms[0].b_min_sep
  assert a["availability_classes"] >= 2
  # Diurnal windows (8 h of 24, half the devices a day) cap the reachable rate: b is lowered.
  assert a["min_sep"] < min(plan.prediction.planned_min_sep, 400 // 80)
  assert 0 < a["noise_multiplier"] < plan.mechanisms[0].noise_multiplier
  assert "availability classes" in plan_lib.format_table(plan)


def test_robustness_and_epsilon_curve():
  plan = plan_lib.make_plan(plan_lib.PlanSettings(**PT_BR_LIKE, noise_multiplier=8.0, trials=2,
                                                  mechanisms=("blt",)))
  m, b = plan.mechanisms[0], plan.prediction.planned_min_sep
  assert [r.min_sep for r in m.robustness] == sorted(
      {math.floor(f * b) for f in plan_lib.DEFAULT_ROBUSTNESS}, reverse=True)
  mechanism = catalog.from_dict(m.params)
  for r in m.robustness:
    assert r.epsilon >= m.planned.epsilon
    evaluation = catalog.evaluate(mechanism, PT_BR_LIKE["rounds"], r.min_sep)
    assert r.rms_loss == pytest.approx(evaluation.rms_loss, rel=1e-12)
    assert r.max_participations == evaluation.max_participations
  rounds, eps = zip(*m.epsilon_vs_rounds)
  assert rounds[-1] == PT_BR_LIKE["rounds"] and eps[-1] == pytest.approx(m.planned.epsilon)
  assert all(a <= b + 1e-12 for a, b in zip(eps, eps[1:]))  # ε never decreases with rounds.


def test_training_flags_only_for_trainable_mechanisms():
  plan = plan_lib.make_plan(plan_lib.PlanSettings(**PT_BR_LIKE, noise_multiplier=8.0, trials=1,
                                                  mechanisms=("blt", "tree_full")))
  table = plan_lib.format_table(plan, {"blt": "b.json", "tree_full": "t.json"})
  assert "--mechanism=blt --mechanism_params=b.json --noise_multiplier=8.0" in table
  assert "--mechanism=tree_full" not in table and "tree_full: not trainable" in table


def test_warnings_for_skipped_rounds_and_disagreeing_trials():
  stalled = plan_lib.make_plan(plan_lib.PlanSettings(
      population=100, report_goal=10, rounds=60, timer_hours=50.0, round_hours=1.0,
      noise_multiplier=5.0, trials=2, mechanisms=("blt",)))
  assert any("skipped (no row of C)" in w and "10 h" in w for w in stalled.warnings())
  spread = plan_lib.make_plan(plan_lib.PlanSettings(
      population=5000, report_goal=1, rounds=100, timer_hours=1.0, round_hours=1.0,
      noise_multiplier=5.0, trials=3, mechanisms=("blt",)))
  assert any("trials disagree" in w for w in spread.warnings())


def test_bandmf_is_skipped_with_the_reason_when_too_slow():
  plan = plan_lib.make_plan(plan_lib.PlanSettings(**PT_BR_LIKE, noise_multiplier=8.0, trials=1,
                                                  mechanisms=("blt", "bandmf"),
                                                  bandmf_max_seconds=1e-3))
  assert [m.name for m in plan.mechanisms] == ["blt"]
  assert plan.skipped[0][0] == "bandmf" and "--bandmf_max_seconds" in plan.skipped[0][1]


@pytest.mark.parametrize("flags,named", [
    (["--report_goal=500"], "--report_goal=500"),
    (["--noise_multiplier=8", "--target_epsilon=1"], "exactly one"),
    ([], "exactly one"),
    (["--mechanisms=blt,nope"], "--mechanisms"),
    (["--timer_hours=-1"], "--timer_hours"),
    (["--trials=0"], "--trials"),
    (["--robustness=0.5,1.5"], "robustness"),
    (["--robustness=half"], "--robustness"),
    (["--delta=0.5"], "--delta"),
    (["--mechanisms=blt,blt"], "twice"),
    (["--target_epsilon=1", "--compare=noise_multiplier"], "--compare"),
    (["--seed=-1"], "--seed"),
    (["--robustness=0"], "--robustness"),
    (["--out_dir="], "--out_dir"),
    (["--rounds=0"], "--rounds"),
    (["--client_tokens=5376"], "--model_dimension"),
    (["--client_tokens=0", "--model_dimension=10"], "--client_tokens"),
])
def test_bad_flags_exit_2_naming_the_flag(capsys, flags, named):
  base = {k: v for k, v in PT_BR_LIKE.items()}
  given = {f.split("=")[0] for f in flags}
  args = [f for f in _flags(base) if f.split("=")[0] not in given] + flags
  if named != "exactly one" and not any(f.startswith(("--noise", "--target")) for f in flags):
    args.append("--noise_multiplier=8")
  assert plan_script.main(args) == 2
  assert named in capsys.readouterr().err


def test_an_emulation_beyond_the_time_budget_is_refused_naming_the_flags(capsys):
  code = plan_script.main([*_flags(dict(PT_BR_LIKE, population=10**7, report_goal=6500)),
                           "--noise_multiplier=8", "--time_budget_hours=0.01"])
  err = capsys.readouterr().err
  assert code == 2 and "--population" in err and "time budget" in err


def test_a_hundred_million_rounds_are_refused_at_once_naming_rounds(capsys):
  # Found by a hostile-input pass (#43): estimated at 22 min and 1 MB (the per-device cost
  # only), it then grew by MB/s for hours without a progress line. The per-round cost
  # (1.7 ms, ~200 B of ledger record) now counts.
  start = time.monotonic()
  code = plan_script.main(["--population=1000", "--report_goal=10", "--rounds=100000000",
                           "--timer_hours=24", "--noise_multiplier=1"])
  err = capsys.readouterr().err
  assert code == 2 and err.startswith("error: --rounds=100000000") and "GB" in err
  assert time.monotonic() - start < 30
  cost = plan_lib.emulation_cost(plan_lib.PlanSettings(
      population=1000, report_goal=10, rounds=10 ** 8, timer_hours=24, round_hours=1.0, noise_multiplier=1.0))
  assert cost.bytes > 1.6e10 and cost.seconds > 5 * 1e8 * 1e-3


def test_the_emulation_prints_progress_with_an_eta(capsys, monkeypatch):
  from dp_fl import resources  # pylint: disable=g-import-not-at-top
  clock = iter(range(0, 10 ** 6, 7))  # Each reading 7 s later: every update prints.
  real = resources.Progress.__init__

  def fast(self, *args, **kwargs):
    real(self, *args, **{**kwargs, "clock": lambda: float(next(clock))})

  monkeypatch.setattr(resources.Progress, "__init__", fast)
  plan_lib.predict(plan_lib.PlanSettings(population=200, report_goal=10, rounds=3000,
                                         timer_hours=2.0, round_hours=0.2,
                                         noise_multiplier=1.0, trials=2))
  err = capsys.readouterr().err
  assert "emulating the device timer (2 trial(s) of 3000 rounds): 50% after" in err
  assert "left" in err and "done in" in err


def test_unwritable_out_dir_is_refused_before_work(capsys, tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  code = plan_script.main([*_flags(PT_BR_LIKE), "--noise_multiplier=8",
                           f"--out_dir={blocker}/sub"])
  assert code == 2 and "--out_dir" in capsys.readouterr().err


def test_model_dimension_states_the_noise_against_the_signal_and_warns():
  base = dict(population=358, report_goal=20, rounds=100, timer_hours=2.4, round_hours=0.2,
              delta=1e-5, trials=1, mechanisms=("blt", "dpsgd"), target_epsilon=8.0)
  quiet = plan_lib.make_plan(plan_lib.PlanSettings(**base))
  assert all(m.signal_to_noise is None for m in quiet.mechanisms)
  plan = plan_lib.make_plan(plan_lib.PlanSettings(**base, model_dimension=365_588))
  blt, dpsgd = plan.mechanisms
  # The StackOverflow run (358 users, 20 a round, min-sep 12, ε = 8) that ended at
  # loss 230: its summed noise exceeds the signal; independent noise (C = I) even more so.
  assert 1.0 < blt.signal_to_noise.prefix_noise < dpsgd.signal_to_noise.prefix_noise
  assert dpsgd.signal_to_noise.prefix_noise == pytest.approx(
      dpsgd.noise_multiplier * math.sqrt(365_588) / 20 / math.sqrt(100))
  warnings_ = [w for w in plan.warnings() if "summed updates" in w]
  assert len(warnings_) == 2 and "devices per round" in warnings_[0]
  # The cohort that brings the summed noise to half its limit.
  assert f"about {math.ceil(20 * blt.signal_to_noise.prefix_noise / 0.5)} devices" in (
      warnings_[0])
  assert "Noise against signal" in plan_lib.format_table(plan)
  assert plan.to_dict()["mechanisms"][0]["signal_to_noise"]["prefix_noise"] > 1


def test_the_job_time_is_the_training_binaries_estimate(capsys):
  # Paper 004's Table 3 job (2052 rounds of 1000 clients of 256 × 21 tokens on the
  # 4,050,748-parameter LSTM): the same ≈ 36 days `budget.check_job_time` refuses with.
  flags = ["--population=342477", "--report_goal=1000", "--rounds=2052", "--timer_hours=342",
           "--noise_multiplier=1", "--mechanisms=blt", "--trials=1", "--model_dimension=4050748",
           "--client_tokens=5376", "--format=json"]
  assert plan_script.main(flags) == 0
  job = json.loads(capsys.readouterr().out)["job_estimate"]
  expected = 2052 * 1000 * (0.02 + 5376 * 4050748 * 7e-11)
  assert job["seconds"] == pytest.approx(expected)
  assert 30 < job["seconds"] / 86400 < 45 and "2052 rounds of 1000 clients" in job["what"]
  assert plan_script.main(flags[:-1]) == 0
  assert "Training time on this machine" in capsys.readouterr().out
  assert plan_script.main(flags[:-3]) == 0  # Without the client's size: no estimate.
  assert "Training time" not in capsys.readouterr().out


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
