"""Who takes part in round t: participation schedulers and the realized-participation ledger.

Pure NumPy; no TensorFlow (the `tff_adapter` module only calls methods of the
TFF client data it is given).

Modules:
  ledger         realized participation: per-client first/last round, counts,
                 realized min-sep b and max participations k (paper 004 Sec. 3.1)
  base           `Scheduler` interface, `RoundSelection`, seeded per-round RNG
  availability   device availability: always, or diurnal windows with time zones
  device_timer   min-sep via device timers / round-based separation (paper 004
                 Alg. 1, Sec. 1, App. C), check-in API, shortfall handling
  sampling       Poisson (paper 001), balls-in-bins (paper 003 Def. 3.1 and
                 Sec. 5.2.1), cyclic Poisson (amplified BandMF), uniform, cyclic
                 epochs
  checkpoint     `restore_scheduler(bytes)` for any scheduler kind
  extrapolation  predicted realized (b, k) for a planned run (paper 004 Sec. 5)
  tff_adapter    per-round client ids and datasets for a TFF training loop

Notation (public names / symbols in the papers):
  num_devices, num_clients, population   N
  report_goal, clients_per_round         m (paper 004 Alg. 1)
  planned_rounds, num_rounds             n
  min_separation (rounds)                b (min-sep)
  max_participations                     k
  min_separation_hours                   the device timer (e.g. 72 h)
  sampling_probability                   q (paper 001)
  num_bins                               NB (= b of paper 003 Def. 3.1)
  fixed_size                             B (paper 003 Sec. 5.2.1)
  num_groups                             G (cyclic Poisson; = --min_sep)
"""
