"""Privacy of a training run so far, from the mechanism used and the participation realized.

DP-FTRL (paper 004): ρ = sens² / (2σ²) with sens the mechanism's sensitivity for the rounds run
so far under the *realized* participation of the ledger — the smallest separation between two
participations of any client (b) and the most participations of any client (k) — never the
configured schedule. DP-FedAvg (paper 001): the Poisson-subsampled Gaussian over the rounds run.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from dp_fl.accounting import dpfedavg
from dp_fl.accounting import report as report_lib
from dp_fl.participation import ledger as ledger_lib
from dp_fl.training import config as config_lib


def participation_from_realized(realized: ledger_lib.RealizedParticipation
                                ) -> Optional[report_lib.Participation]:
  """The (n, b, k) the guarantee covers; None before anyone took part.

  With no client taking part twice, any b >= n describes the schedule; n is used.
  """
  if realized.num_rounds == 0 or realized.max_participations == 0:
    return None
  n = realized.num_rounds
  b = realized.min_separation if realized.min_separation is not None else n
  return report_lib.Participation(n, b, realized.max_participations, source="realized",
                                  clients_seen=realized.num_participants)


class PrivacyTracker:
  """ε so far for the run's mechanism; `report` for the App. C privacy report."""

  def __init__(self, mechanism_name: str, mechanism: Any, noise_multiplier: float,
               clip_norm: float, clients_per_round: float, delta: float,
               population: Optional[int] = None):
    """Args: mechanism_name (config.MECHANISMS), mechanism (a dp_fl.mechanisms.catalog
    Mechanism for DP-FTRL, else None), noise_multiplier σ (z for DP-FedAvg), clip_norm,
    clients_per_round (m, or C̃ for Poisson), delta, population (K, DP-FedAvg only)."""
    self._name = mechanism_name
    self._mechanism = mechanism
    self._sigma = noise_multiplier
    self._clip = clip_norm
    self._m = clients_per_round
    self._delta = delta
    self._population = population

  def report(self, realized: ledger_lib.RealizedParticipation) -> Optional[Any]:
    """The privacy report after the rounds in `realized`; None when nothing is private."""
    if self._name in config_lib.NONPRIVATE_MECHANISMS:
      return None
    if self._name == "dpfedavg":
      if realized.num_rounds == 0:
        return None
      return report_lib.dpfedavg_report(self._population, self._m, self._sigma,
                                        realized.num_rounds, self._delta,
                                        clip_norm=self._clip)
    participation = participation_from_realized(realized)
    if participation is None:
      return None
    return report_lib.matrix_mechanism_report(
        self._mechanism, self._sigma, participation, self._delta, clip_norm=self._clip,
        clients_per_round=self._m)

  @property
  def progress_accountant(self) -> str:
    """How `epsilon` bounds ε when it differs from the reports' method ("" when the same)."""
    return "RDP" if self._name == "dpfedavg" else ""

  @property
  def report_accountant(self) -> str:
    """How `report(...).epsilon` is computed when `epsilon` uses another method, else ""."""
    return "PLD" if self._name == "dpfedavg" else ""

  def epsilon(self, realized: ledger_lib.RealizedParticipation) -> float:
    """ε at δ so far (0 before anyone took part, inf without privacy).

    For DP-FedAvg this uses the RDP accountant (fast, a valid upper bound); the reports use
    the tighter PLD.
    """
    if self._name in config_lib.NONPRIVATE_MECHANISMS:
      return math.inf
    if self._name == "dpfedavg":
      if realized.num_rounds == 0:
        return 0.0
      return dpfedavg.dpfedavg_epsilon(self._population, self._m, self._sigma,
                                       realized.num_rounds, self._delta,
                                       method=dpfedavg.RDP).epsilon
    participation = participation_from_realized(realized)
    if participation is None:
      return 0.0
    return self.report(realized).epsilon
