"""The `--participation` registry (dp_fl/participation/schemes.py): every fact of a scheme
comes from its entry, unknown names fail with the choices, refusals name the fix."""

from __future__ import annotations

import dataclasses
import math
import types

import pytest

from dp_fl.participation import device_timer
from dp_fl.participation import schemes


def _config(participation="uniform", **settings):
  entry = schemes.scheme(participation)
  return types.SimpleNamespace(participation=participation, clients_per_round=4, rounds=12,
                               min_sep=3, seed=0, delta=1e-5,
                               participation_settings=entry.settings_from(settings))


def _mechanism(name, accounting, banded=False):
  return types.SimpleNamespace(name=name, accounting=accounting, banded=banded)


def test_the_entries_in_flag_order_with_their_analyses_and_settings():
  assert schemes.names() == ("device_timer", "min_sep_rounds", "poisson", "balls_in_bins",
                             "cyclic_poisson", "uniform", "cyclic", "b_min_sep")
  assert schemes.analyses() == ("min_sep", "poisson", "balls_in_bins", "cyclic_poisson",
                                "b_min_sep")
  assert schemes.analyses(schemes.CORRELATED) == ("min_sep", "balls_in_bins", "cyclic_poisson",
                                                  "b_min_sep")
  assert list(schemes.setting_fields()) == ["timer_hours", "round_hours", "availability",
                                            "population_sampling_rate", "sampling_probability",
                                            "warm_start"]
  assert schemes.readers("round_hours") == ("device_timer", "min_sep_rounds", "b_min_sep")
  assert schemes.readers("availability") == ("device_timer", "min_sep_rounds", "b_min_sep")
  assert schemes.readers("population_sampling_rate") == ("poisson",)
  assert schemes.readers("sampling_probability") == ("b_min_sep",)
  assert schemes.readers("bands") == ()
  privacy = {n: f.metadata["privacy"] for n, f in schemes.setting_fields().items()}
  assert privacy == {"timer_hours": False, "round_hours": False, "availability": False,
                     "population_sampling_rate": True, "sampling_probability": True,
                     "warm_start": True}
  assert [n for n, s in schemes.SCHEMES.items() if s.variable_cohorts] == [
      "poisson", "cyclic_poisson", "b_min_sep"]
  for name, entry in schemes.SCHEMES.items():
    assert entry.name == name and entry.description
    with pytest.raises(dataclasses.FrozenInstanceError):
      setattr(entry.settings_type(), "x", 1)


def test_unknown_names_and_bad_settings_fail_naming_the_flag():
  with pytest.raises(ValueError, match=r"`participation` must be one of \('device_timer', "
                     r"'min_sep_rounds', .*'b_min_sep'\); got 'round_robin'\."):
    schemes.scheme("round_robin")
  with pytest.raises(ValueError, match=r"`availability` must be one of \('always', "
                     r"'diurnal'\); got 'sometimes'"):
    schemes.DeviceTimerSettings(availability="sometimes")
  with pytest.raises(ValueError, match="timer_hours"):
    schemes.DeviceTimerSettings(timer_hours=0.0)
  with pytest.raises(ValueError, match="round_hours"):
    schemes.RoundTimerSettings(round_hours=-1.0)
  with pytest.raises(ValueError, match="population_sampling_rate"):
    schemes.PoissonSettings(population_sampling_rate=1.5)
  with pytest.raises(ValueError, match="needs a new name"):
    schemes.register(schemes.UniformScheme())
  # Flat values: each entry keeps its own fields.
  assert schemes.scheme("min_sep_rounds").settings_from(
      {"timer_hours": 3.0, "round_hours": 0.5}) == schemes.RoundTimerSettings(round_hours=0.5)


def test_builders_cohorts_and_the_separation_asked_of_the_scheduler():
  n = 60
  for name in schemes.names():
    config = _config(name)
    scheduler = schemes.scheme(name).scheduler(config, n, seed=1)
    assert scheduler.num_clients == n
    expected = schemes.scheme(name).expected_cohort(config, n)
    assert expected == pytest.approx(config.clients_per_round)  # q = m / N: qN = m.
    rule = schemes.scheme(name).rule_separation(config)
    if name in ("min_sep_rounds", "b_min_sep"):  # A rule in rows of C: the scheduler's own.
      assert rule == scheduler.enforced_min_separation == config.min_sep
    else:
      assert rule is None
  poisson = _config("poisson", population_sampling_rate=0.25)
  assert schemes.scheme("poisson").expected_cohort(poisson, n) == pytest.approx(15.0)
  assert schemes.scheme("poisson").scheduler(poisson, n, 1).sampling_probability == 0.25
  timer = _config("device_timer", timer_hours=7.0, round_hours=2.0)
  enforced = schemes.scheme("device_timer").scheduler(timer, n, 1).enforced_min_separation
  assert enforced == device_timer.DeviceTimerScheduler.separation_rule(None, 7.0, 2.0) == (
      math.ceil(7 / 2))
  bins = schemes.scheme("balls_in_bins").scheduler(_config("balls_in_bins"), n, 1)
  assert (bins.num_bins, bins.fixed_size) == (15, 4)
  groups = schemes.scheme("cyclic_poisson").scheduler(_config("cyclic_poisson"), n, 1)
  assert groups.num_groups == 3 and groups.sampling_probability == pytest.approx(0.2)
  with pytest.raises(ValueError, match=r"q = m·G/N = 4·3/10 = 1\.2 > 1"):
    schemes.scheme("cyclic_poisson").scheduler(_config("cyclic_poisson"), 10, 1)
  # b-min-sep: p from the expected cohort (stationary p N / (1 + (b − 1) p) = m), or given.
  bms = schemes.scheme("b_min_sep").scheduler(_config("b_min_sep"), n, 1)
  assert bms.min_sep == 3 and bms.sampling_probability == pytest.approx(4 / (60 - 2 * 4))
  assert bms.expected_cohort_size == pytest.approx(4.0)
  given = _config("b_min_sep", sampling_probability=0.5, warm_start=False)
  assert schemes.scheme("b_min_sep").expected_cohort(given, n) == pytest.approx(30 / 2)
  assert not schemes.scheme("b_min_sep").scheduler(given, n, 1).warm_start
  with pytest.raises(ValueError, match=r"at most 1/3 .*--clients_per_round or --min_sep"):
    schemes.scheme("b_min_sep").scheduler(_config("b_min_sep"), 11, 1)


def test_refusals_name_the_fix():
  banded = ["bandmf", "dpsgd", "bsr"]
  for name in schemes.names():  # Nothing to account: every scheme serves it.
    schemes.scheme(name).check_mechanism(_mechanism("none", schemes.NOT_PRIVATE))
  schemes.scheme("cyclic_poisson").check_mechanism(
      _mechanism("bandmf", schemes.CORRELATED, banded=True), banded)
  with pytest.raises(ValueError) as e:
    schemes.scheme("cyclic_poisson").check_mechanism(
        _mechanism("blt", schemes.CORRELATED), banded)
  assert str(e.value) == (
      "--participation=cyclic_poisson needs a banded C (--mechanism=bandmf or dpsgd or bsr); "
      "--mechanism=blt's C is not banded. Use --participation=balls_in_bins for any C.")
  with pytest.raises(ValueError, match=r"^`mechanism`='blt' is DP-FTRL; its correlated noise "
                     r"is accounted under Poisson sampling only group by group"):
    schemes.scheme("poisson").check_mechanism(_mechanism("blt", schemes.CORRELATED))
  with pytest.raises(ValueError) as e:
    schemes.scheme("uniform").check_mechanism(
        _mechanism("dpfedavg", schemes.POISSON_GAUSSIAN))
  assert str(e.value) == (
      "`mechanism`='dpfedavg' is DP-FedAvg with Poisson user sampling (paper 001); it needs "
      "--participation=poisson, got 'uniform'. For a fixed cohort use --mechanism=dpsgd.")
  for name in ("poisson", "balls_in_bins", "cyclic_poisson"):
    with pytest.raises(ValueError) as e:
      schemes.scheme(name).check_mechanism(_mechanism("cpsgd", schemes.COMPOSED))
    assert str(e.value) == (
        "--mechanism=cpsgd is accounted without amplification by sampling (its rounds "
        f"are composed); --participation={name} would suggest a sampled guarantee it "
        "does not give. Use --participation=device_timer, min_sep_rounds, uniform or cyclic.")
  with pytest.raises(ValueError, match="`accounting` of --mechanism=x must be one of"):
    schemes.scheme("uniform").check_mechanism(_mechanism("x", "made_up"))


def test_a_scheme_without_its_own_refusal_text_still_names_the_fix():
  class NoCorrelated(schemes.UniformScheme):
    name = "no_correlated"
    accounts = frozenset({schemes.COMPOSED, schemes.NOT_PRIVATE})

  with pytest.raises(ValueError) as e:
    NoCorrelated().check_mechanism(_mechanism("blt", schemes.CORRELATED))
  assert str(e.value).startswith(
      "--participation=no_correlated has no analysis for correlated noise (--mechanism=blt); "
      "use a scheme that accounts DP-FTRL: --participation=device_timer")


if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
