"""The mechanism and participation registries: what each name means, and no silent fallback."""

from __future__ import annotations

import dataclasses
import math
import os
import types

import numpy as np
import pytest

from dp_fl.accounting import dpfedavg
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import catalog
from dp_fl.participation import ledger as ledger_lib
from dp_fl.training import registry


def _config(tmp_path, **changes):
  values = dict(task="toy", root_dir=str(tmp_path), rounds=6, clients_per_round=2,
                mechanism="dpsgd", participation="uniform", noise_multiplier=1.5, delta=1e-5)
  values.update(changes)
  return registry.make_config(**values)


def _realized(rounds, cohorts):
  ledger = ledger_lib.ParticipationLedger(10)
  for r, ids in zip(range(rounds), cohorts):
    ledger.record(r, np.asarray(ids))
  return ledger.realized()


def test_every_entry_declares_its_settings():
  """Each name's own flags are its entry's frozen settings dataclass: valid at its defaults,
  every field a flag with help, and a mechanism's all privacy-relevant (issue #40)."""
  assert registry.non_private_names() == ("none", "clip")
  for name, entry in registry.MECHANISMS.items():
    assert entry.name == name and entry.description
    assert dataclasses.is_dataclass(entry.settings_type)
    settings = entry.settings_type()
    with pytest.raises(dataclasses.FrozenInstanceError):
      setattr(settings, "x", 1)
    assert all(f.metadata["privacy"] for f in dataclasses.fields(settings)), name
  assert registry.mechanism("blt").settings_type is registry.BltSettings
  assert registry.mechanism("bsr").settings_type is registry.BandedSettings
  assert registry.mechanism("two_band").settings_type is registry.DpFtrlSettings
  assert registry.mechanism("cpsgd").settings_type is registry.CpSgdSettings
  assert registry.mechanism("ddgauss").settings_type is registry.DistributedDpSettings
  kinds = {}
  for name, (kind, field) in registry.setting_fields().items():
    kinds.setdefault(kind, []).append(name)
    assert "help" in field.metadata, name
  assert kinds["mechanism"] == ["target_unclipped_quantile", "clip_learning_rate",
                                "clip_search_step", "clip_count_stddev", "clip_budget_share", "mechanism_params",
                                "max_participations", "blt_buffers", "bands", "cpsgd_levels",
                                "cpsgd_trials", "cpsgd_p", "cpsgd_x_max", "ddp_bits",
                                "ddp_beta"]
  assert kinds["participation"] == ["timer_hours", "round_hours", "availability",
                                    "population_sampling_rate", "sampling_probability",
                                    "warm_start"]
  assert kinds["runtime"] == ["device", "jit_compile", "workers", "worker_timeout_seconds",
                              "worker_tls_ca_cert", "worker_tls_client_cert",
                              "worker_tls_client_key"]


def test_every_family_that_trains_has_an_entry_agreeing_with_its_traits():
  """A mechanism module's family trains without a registry line (two_band has none); the
  entries that have one (their descriptions) agree with their family's traits."""
  dp_ftrl = {n: e for n, e in registry.MECHANISMS.items()
             if isinstance(e, registry.DpFtrlEntry)}
  assert set(dp_ftrl) == {n for n in catalog.names() if catalog.family(n).trains}
  assert "tree_full" in catalog.names() and "tree_full" not in registry.MECHANISMS
  assert "two_band" not in [e.name for e in registry._DP_FTRL_ENTRIES]  # pylint: disable=protected-access
  for name, entry in dp_ftrl.items():
    family = catalog.family(name)
    assert entry.banded == family.banded, name
    assert entry.settings_type is registry.SETTINGS_OF_KNOBS[family.knobs], name


def test_a_flag_is_refused_where_no_run_reads_it():
  assert registry.ignored_flags({"blt_buffers": 2}, [("blt", "uniform")]) == []
  assert registry.ignored_flags({"bands": 2}, [("blt", "uniform"), ("bsr", "uniform")]) == []
  [why] = registry.ignored_flags({"bands": 2}, [("blt", "uniform")])
  assert why.startswith("--bands=2 is read only by --mechanism=bandmf or bsr or bisr or "
                        "bandinvmf; --mechanism=blt would ignore it.")
  [why] = registry.ignored_flags({"timer_hours": 2.0}, [("blt", "uniform")])
  assert "--participation=device_timer" in why
  assert registry.ignored_flags({"device": "cpu", "rounds": 3}, [("blt", "uniform")]) == []


def test_unknown_names_fail_with_the_known_ones():
  with pytest.raises(ValueError, match=r"one of \('blt', 'bandmf'.*got 'bogus'"):
    registry.mechanism("bogus")
  fake = types.SimpleNamespace(participation="round_robin")
  with pytest.raises(ValueError, match=r"`participation` must be one of .*'cyclic'.*"
                                       r"got 'round_robin'"):
    registry.scheduler(fake, 10, 0)


@pytest.mark.parametrize("name,kind", [
    ("device_timer", "DeviceTimerScheduler"), ("min_sep_rounds", "DeviceTimerScheduler"),
    ("poisson", "PoissonScheduler"), ("balls_in_bins", "BallsInBinsScheduler"),
    ("uniform", "UniformScheduler"), ("cyclic", "CyclicScheduler"),
    ("cyclic_poisson", "CyclicPoissonScheduler")])
def test_each_participation_builds_its_scheduler(tmp_path, name, kind):
  mechanism = "dpfedavg" if name == "poisson" else "dpsgd"
  config = _config(tmp_path, participation=name, mechanism=mechanism, timer_hours=2.0,
                   min_sep=2)
  scheduler = registry.scheduler(config, 12, seed=7)
  assert scheduler.KIND == kind and scheduler.seed == 7


def test_weighting_privacy_and_participation_rules(tmp_path):
  assert registry.mechanism("dpfedavg").weighting == registry.NUM_EXAMPLES
  assert {registry.mechanism(n).weighting for n in ("blt", "bandmf", "tree", "dpsgd", "none",
                                                    "clip")} == {registry.UNIFORM}
  with pytest.raises(ValueError, match="needs --participation=poisson"):
    _config(tmp_path, mechanism="dpfedavg", participation="uniform")
  with pytest.raises(ValueError, match="--participation=cyclic_poisson"):
    _config(tmp_path, mechanism="blt", participation="poisson")
  with pytest.raises(ValueError, match="σ = 0 gives no privacy.*--mechanism=none or "
                                       "--mechanism=clip"):
    _config(tmp_path, noise_multiplier=0.0)
  assert not registry.mechanism("none").private
  with pytest.raises(ValueError, match="--mechanism=clip has no noise to calibrate"):
    registry.mechanism("clip").calibrate(_config(tmp_path, mechanism="clip"), 1.0)


def test_accountants(tmp_path):
  realized = _realized(4, [[0, 1], [2, 3], [0, 4], [1, 5]])  # k = 2, b = 2.
  none = registry.mechanism("none").accountant(_config(tmp_path, mechanism="none"), None, 10)
  assert none.report(realized) is None and math.isinf(none.epsilon(realized))

  config = _config(tmp_path)
  dpsgd = registry.mechanism("dpsgd").accountant(config, catalog.DpSgdMechanism(), 10)
  expected = zcdp.matrix_mechanism_guarantee(math.sqrt(2), 1.5, 1e-5).epsilon
  assert dpsgd.epsilon(realized) == pytest.approx(expected, rel=1e-12)
  assert dpsgd.epsilon(_realized(0, [])) == 0.0

  poisson = _config(tmp_path, mechanism="dpfedavg", participation="poisson",
                    population_sampling_rate=0.2)
  accountant = registry.mechanism("dpfedavg").accountant(poisson, None, 10)
  assert accountant.progress_accountant == "RDP" and accountant.report_accountant == "PLD"
  rdp = dpfedavg.dpfedavg_epsilon(10, 2.0, 1.5, 4, 1e-5, method=dpfedavg.RDP).epsilon
  assert accountant.epsilon(realized) == pytest.approx(rdp, rel=1e-12)
  assert accountant.report(realized).epsilon <= rdp * (1 + 1e-9)


def test_dp_ftrl_entries_build_save_and_reload_their_mechanism(tmp_path):
  config = _config(tmp_path, mechanism="blt", participation="min_sep_rounds", min_sep=2,
                   blt_buffers=1)
  entry = registry.mechanism("blt")
  built = entry.load_or_build(config)
  assert not os.path.exists(os.path.join(tmp_path, registry.MECHANISM_FILE))  # Writes nothing.
  catalog.save(built, os.path.join(tmp_path, registry.MECHANISM_FILE))  # As the program does.
  again = entry.load_or_build(config)  # From mechanism.json now.
  assert again.to_dict() == built.to_dict()
  other = _config(tmp_path, mechanism="dpsgd", participation="min_sep_rounds")
  with pytest.raises(ValueError, match="holds a 'blt' mechanism, but --mechanism=dpsgd"):
    registry.mechanism("dpsgd").load_or_build(other)



# -- the non-private references (issue #19) --------------------------------------------------

def _aggregate(factory, client_values):
  import collections  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  value_type = tff.types.to_type(collections.OrderedDict(w=tff.TensorType(np.float32, [3])))
  process = factory.create(value_type)
  values = [collections.OrderedDict(w=np.asarray(v, np.float32)) for v in client_values]
  return process.next(process.initialize(), values).result["w"]


def test_clip_is_the_dp_estimator_without_the_noise(tmp_path):
  # Clipped updates summed over the cohort and divided by the report goal m, as DP-FTRL does
  # (paper 004, Alg. 1): a clip-only run differs from a DP run by the noise alone. (It used
  # TFF's mean over the realized cohort: with cohorts below m its step was up to m/|cohort|
  # times the DP runs', which server momentum then amplified; docs/RESULTS.md.)
  from dp_fl.aggregators import dp_ftrl  # pylint: disable=g-import-not-at-top
  config = _config(tmp_path, mechanism="clip", noise_multiplier=0.0, clients_per_round=4,
                   clip_norm=1.0)
  clients = [[3.0, 4.0, 0.0], [0.0, 0.3, 0.4], [np.nan, 1.0, 1.0]]  # 2 valid, 1 non-finite
  clip = _aggregate(registry.mechanism("clip").aggregator(config, None, 10), clients)
  np.testing.assert_allclose(clip, (np.array([0.6, 0.8, 0.0]) + [0.0, 0.3, 0.4]) / 4,
                             rtol=1e-6)
  dp = _aggregate(dp_ftrl.DPFTRLFactory.dpsgd(clip_norm=1.0, noise_multiplier=0.0,
                                              clients_per_round=4, seed=1), clients)
  np.testing.assert_allclose(clip, dp, rtol=1e-6)


@pytest.mark.parametrize("mechanism", ["none", "clip"])
def test_non_private_rounds_without_clients_leave_the_model_unchanged(tmp_path, mechanism):
  # An empty round gave 0/0 = NaN with TFF's mean; the finalizer refused it and the run
  # stopped "non-finite server update" (docs/RESULTS.md: both non-private runs, round 47).
  config = _config(tmp_path, mechanism=mechanism, noise_multiplier=0.0)
  update = _aggregate(registry.mechanism(mechanism).aggregator(config, None, 10), [])
  np.testing.assert_array_equal(update, np.zeros(3, np.float32))


def test_none_is_the_mean_over_the_clients_that_reported(tmp_path):
  config = _config(tmp_path, mechanism="none", noise_multiplier=0.0, clients_per_round=4)
  update = _aggregate(registry.mechanism("none").aggregator(config, None, 10),
                      [[3.0, 0.0, 0.0], [1.0, 2.0, 0.0]])
  np.testing.assert_allclose(update, [2.0, 1.0, 0.0])


def test_clip_under_poisson_divides_by_the_expected_cohort(tmp_path):
  config = _config(tmp_path, mechanism="clip", noise_multiplier=0.0, participation="poisson",
                   clients_per_round=5, population_sampling_rate=0.25)
  assert registry.expected_cohort(config, 40) == pytest.approx(10.0)
  update = _aggregate(registry.mechanism("clip").aggregator(config, None, 40),
                      [[0.5, 0.0, 0.0]])
  np.testing.assert_allclose(update, [0.05, 0.0, 0.0], rtol=1e-6)


def test_amplifying_participations_check_the_mechanism_and_the_population(tmp_path):
  """cyclic_poisson needs a C with at most min_sep bands and q = m·G/N <= 1; balls-in-bins
  needs a square C (not TreeAgg-Full's)."""
  cyclic = registry.PARTICIPATIONS["cyclic_poisson"].amplification
  with pytest.raises(ValueError, match="needs a banded C"):  # In the configuration already.
    _config(tmp_path, mechanism="blt", participation="cyclic_poisson", min_sep=4)
  config = _config(tmp_path, mechanism="blt", participation="balls_in_bins", min_sep=4)
  with pytest.raises(ValueError, match="needs a banded C"):
    cyclic.check(config, registry.mechanism("blt").load_or_build(config), 100)
  config = _config(tmp_path, mechanism="bandmf", participation="cyclic_poisson", min_sep=4,
                   bands=6)
  with pytest.raises(ValueError, match="at most 4 bands"):
    cyclic.check(config, registry.mechanism("bandmf").load_or_build(config), 100)
  config = _config(tmp_path, mechanism="dpsgd", participation="cyclic_poisson", min_sep=4)
  with pytest.raises(ValueError, match="q = m·G/N"):
    registry.scheduler(config, config.clients_per_round * 3, seed=1)
  scheduler = registry.scheduler(config, 400, seed=1)
  assert scheduler.num_groups == 4
  assert scheduler.expected_cohort_size == pytest.approx(config.clients_per_round)



# Adaptive clipping (issue #42): the settings, what each entry composes, calibration.


def test_adaptive_clipping_flags_need_a_target_and_amplified_schemes_refuse_it(tmp_path):
  with pytest.raises(ValueError, match="target_unclipped_quantile"):
    _config(tmp_path, clip_count_stddev=2.0)
  with pytest.raises(ValueError, match="target_unclipped_quantile"):
    _config(tmp_path, clip_learning_rate=0.5)
  with pytest.raises(ValueError, match="target_unclipped_quantile"):
    _config(tmp_path, target_unclipped_quantile=1.5)
  with pytest.raises(ValueError, match="amplified analysis"):
    _config(tmp_path, target_unclipped_quantile=0.5, participation="balls_in_bins",
            clients_per_round=2)
  # Mechanisms without the estimator (cpSGD, the non-private ones) do not read the flag.
  assert registry.ignored_flags({"target_unclipped_quantile": 0.5}, [("cpsgd", "uniform")])
  assert not registry.ignored_flags({"target_unclipped_quantile": 0.5},
                                    [("dpfedavg", "poisson")])


def test_each_entry_charges_the_counts_under_its_adjacency(tmp_path):
  from dp_fl.accounting import adaptive_clipping  # pylint: disable=g-import-not-at-top
  ftrl = _config(tmp_path, mechanism="blt", target_unclipped_quantile=0.5,
                 clip_count_stddev=3.0, participation="min_sep_rounds", min_sep=2)
  estimator = registry.mechanism("blt").clip_estimator(ftrl, 10)
  assert estimator.adjacency == adaptive_clipping.ZERO_OUT and estimator.noise_multiplier == 3
  fedavg = _config(tmp_path, mechanism="dpfedavg", participation="poisson",
                   population_sampling_rate=0.2, target_unclipped_quantile=0.5,
                   clip_count_stddev=3.0)
  entry = registry.mechanism("dpfedavg")
  assert entry.clip_estimator(fedavg).noise_multiplier == 6.0  # ½ under add/remove.
  assert entry.effective_noise_multiplier(fedavg) == pytest.approx(
      (1.5 ** -2 + 6.0 ** -2) ** -0.5)
  assert registry.mechanism("blt").clip_estimator(
      _config(tmp_path, mechanism="blt", participation="min_sep_rounds", min_sep=2), 10) is None


def test_the_start_search_is_a_setting_of_the_adaptive_clip_norm(tmp_path):
  with pytest.raises(ValueError, match="--clip_search_step=1.0.*target_unclipped_quantile"):
    _config(tmp_path, clip_search_step=1.0)
  for bad in (-1.0, 11.0, float("nan")):
    with pytest.raises(ValueError, match="clip_search_step"):
      _config(tmp_path, target_unclipped_quantile=0.5, clip_search_step=bad)
  for given, expected in ((None, 2.0), (0.0, 0.0), (3.0, 3.0)):
    extra = {} if given is None else {"clip_search_step": given}
    config = _config(tmp_path, mechanism="blt", participation="min_sep_rounds", min_sep=2,
                     target_unclipped_quantile=0.5, clip_count_stddev=3.0, **extra)
    estimator = registry.quantile_estimator(
        config, registry.mechanism("blt").clip_estimator(config, 10), 2.0)
    assert estimator.search_step == expected and estimator.learning_rate == 0.2


@pytest.mark.parametrize("mechanism, extra", [
    ("blt", dict(participation="min_sep_rounds", min_sep=2)),
    ("dpsgd", dict(participation="min_sep_rounds", min_sep=3)),
    ("dpfedavg", dict(participation="poisson", population_sampling_rate=0.2)),
])
@pytest.mark.parametrize("stddev", [None, 4.0])
def test_calibration_splits_the_budget_and_the_report_reaches_the_target(tmp_path, mechanism,
                                                                        extra, stddev):
  config = _config(tmp_path, mechanism=mechanism, rounds=12, target_unclipped_quantile=0.5,
                   clip_count_stddev=stddev, **extra)
  entry = registry.mechanism(mechanism)
  fixed = _config(tmp_path, mechanism=mechanism, rounds=12, **extra)
  sigma_fixed = entry.calibrate(fixed, 4.0, num_clients=10)
  sigma = entry.calibrate(config, 4.0, num_clients=10)
  assert sigma > sigma_fixed  # The counts take part of the budget.
  calibrated = config.replace(noise_multiplier=sigma)
  if mechanism == "dpfedavg":
    accountant = entry.accountant(calibrated, None, 50)
    rounds = 12
    report = accountant.report(types.SimpleNamespace(num_rounds=rounds))
    epsilon = dpfedavg.dpfedavg_epsilon(50, 10, entry.effective_noise_multiplier(calibrated),
                                        rounds, 1e-5, method=dpfedavg.RDP).epsilon
    assert epsilon <= 4.0 * (1 + 1e-9) and epsilon >= 4.0 * 0.999
    assert report.adaptive_clipping is not None
  else:
    planned = registry.planned_participation(calibrated, 10)
    mech = entry.load_or_build(calibrated)
    from dp_fl.accounting import report as report_lib  # pylint: disable=g-import-not-at-top
    report = report_lib.matrix_mechanism_report(
        mech, sigma, report_lib.Participation(12, planned.min_sep, planned.max_participations),
        1e-5, clip_estimator=entry.clip_estimator(calibrated, 10))
    assert 4.0 * 0.999 <= report.epsilon <= 4.0
    if stddev is None:  # The count takes 10 % of z⁻²: of ρ in proportion k : sens².
      k, counts = planned.max_participations, planned.max_participations * 0.1 / 0.9
      assert report.adaptive_clipping.share == pytest.approx(
          counts / (report.sensitivity ** 2 + counts), rel=1e-6)
      if mechanism == "dpsgd":  # sens² = k.
        assert report.sensitivity ** 2 == pytest.approx(k)
        assert report.adaptive_clipping.share == pytest.approx(0.1, rel=1e-6)


def test_a_count_noise_that_spends_the_budget_is_refused(tmp_path):
  config = _config(tmp_path, mechanism="dpsgd", participation="min_sep_rounds", min_sep=3,
                   rounds=12, target_unclipped_quantile=0.5, clip_count_stddev=0.3)
  with pytest.raises(ValueError, match="clip_count_stddev"):
    registry.mechanism("dpsgd").calibrate(config, 2.0, num_clients=10)
  fedavg = _config(tmp_path, mechanism="dpfedavg", participation="poisson",
                   population_sampling_rate=0.2, target_unclipped_quantile=0.5,
                   clip_count_stddev=0.1)
  with pytest.raises(ValueError, match="clip_count_stddev"):
    registry.mechanism("dpfedavg").calibrate(fedavg, 2.0, num_clients=10)



def test_compared_rows_name_an_adaptive_variant():
  assert registry.variant("blt") == ("blt", {})
  name, settings = registry.variant("dpfedavg" + registry.ADAPTIVE_VARIANT)
  assert name == "dpfedavg" and settings == registry.ADAPTIVE_SETTINGS
  with pytest.raises(ValueError, match="no adaptive clip norm"):
    registry.variant("cpsgd+adaptive")
  with pytest.raises(ValueError, match="mechanism"):
    registry.variant("nope+adaptive")


def test_the_default_count_noise_survives_a_resume_with_more_rounds(tmp_path):
  """σ_b may not depend on the planned participation: a resume may raise --rounds, and a σ_b
  that grew with it would under-charge the counts already released."""
  config = _config(tmp_path, mechanism="blt", participation="min_sep_rounds", min_sep=2,
                   target_unclipped_quantile=0.5)
  entry = registry.mechanism("blt")
  assert entry.count_stddev(config) == entry.count_stddev(config.replace(rounds=60))
  assert entry.count_stddev(config) == pytest.approx(1.5 * 3.0)  # σ √((1 − 0.1)/0.1).

if __name__ == "__main__":
  raise SystemExit(pytest.main([__file__, "-q"]))
