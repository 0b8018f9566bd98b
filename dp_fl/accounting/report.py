"""Privacy reports following the checklist of paper 004, App. C (after Ponomareva et al. Sec. 5.3).

A report is produced from the mechanism actually used, its noise multiplier, and the
participation actually *realized* (from the participation ledger), never from the configured
schedule alone. Where only a lower bound on the sensitivity is available (paper 004, Remark 3.2,
as for TreeAgg under multiple participations) the report says so: the resulting ε is then a
lower bound on the true ε, not a guarantee.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from dp_fl import _checks


@dataclasses.dataclass(frozen=True)
class Participation:
  """Participation that the guarantee assumes.

  Attributes:
    rounds: Training rounds covered (n).
    min_sep: Minimum separation (in rounds) between two participations of a client (b).
    max_participations: Maximum participations of any client (k).
    source: Where the numbers come from: "realized" (the participation ledger of the run) or
      "configured" (a plan, e.g. for extrapolation).
    clients_seen: Number of distinct clients that took part, when known.
  """
  rounds: int
  min_sep: int
  max_participations: int
  source: str = "realized"
  clients_seen: Optional[int] = None

  def __post_init__(self):
    _checks.check_positive_int("rounds", self.rounds)
    _checks.check_positive_int("min_sep", self.min_sep)
    _checks.check_positive_int("max_participations", self.max_participations)
    if self.source not in ("realized", "configured"):
      raise ValueError(
          f"`source` must be 'realized' or 'configured'; got {self.source!r}.")


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
  """The DP statement of one training run (paper 004, App. C)."""
  mechanism: str
  mechanism_description: str
  noise_multiplier: float
  sensitivity: float
  sensitivity_is_lower_bound: bool
  participation: Participation
  rho: float
  epsilon: float
  delta: float
  conversion: str
  accounting_method: str
  clip_norm: Optional[float] = None
  clients_per_round: Optional[int] = None
  notes: tuple[str, ...] = ()

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["notes"] = list(self.notes)
    d["checklist"] = self.checklist()
    return d

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=False)

  def checklist(self) -> dict[str, str]:
    """The App. C checklist, filled in for this run."""
    p = self.participation
    bound = ("a LOWER BOUND on the sensitivity (paper 004, Remark 3.2): the ε below is a lower "
             "bound on the true ε, not a guarantee" if self.sensitivity_is_lower_bound
             else "the exact sensitivity for this participation schema")
    return {
        "dp_setting": ("Central DP: the server is trusted to clip, aggregate and add noise "
                       "correctly."),
        "data_accesses_covered": (
            "All well-behaved clients of this single training run (clients that follow the "
            "participation limits; a misbehaving client is refused at check-in and cannot "
            "weaken the others' guarantee). Hyper-parameter tuning and checkpoint selection "
            "are not covered."),
        "final_mechanism_output": (
            "The whole sequence of privatized aggregates, hence every intermediate model."),
        "unit_of_privacy": ("Device-level (user-level for single-device users): a client's "
                            "entire local dataset."),
        "adjacency": ("Zero-out: neighbouring datasets differ by replacing all contributions of "
                      "one client with zeros."),
        "accounting": f"{self.accounting_method}; (ε, δ) from ρ by {self.conversion}.",
        "accounting_assumptions": (
            f"{p.source.capitalize()} participation over {p.rounds} rounds: every client took "
            f"part at most {p.max_participations} times, any two participations at least "
            f"{p.min_sep} rounds apart; sensitivity is {bound}."),
        "formal_statement": (
            f"{self.mechanism} with noise multiplier {self.noise_multiplier:g} satisfies "
            f"ρ = {self.rho:.4g}-zCDP and (ε = {self.epsilon:.4g}, δ = {self.delta:g})-DP"
            + (" (lower bound)" if self.sensitivity_is_lower_bound else "") + "."),
    }

  def to_markdown(self) -> str:
    p = self.participation
    rows = [
        ("mechanism", f"{self.mechanism} — {self.mechanism_description}"),
        ("noise multiplier σ", f"{self.noise_multiplier:g}"),
        ("clip norm ζ", "—" if self.clip_norm is None else f"{self.clip_norm:g}"),
        ("clients per round", "—" if self.clients_per_round is None else str(self.clients_per_round)),
        ("rounds n", str(p.rounds)),
        (f"min-sep b ({p.source})", str(p.min_sep)),
        (f"max participations k ({p.source})", str(p.max_participations)),
        ("sensitivity", f"{self.sensitivity:.6g}" + (" (lower bound)" if self.sensitivity_is_lower_bound else "")),
        ("ρ (zCDP)", f"{self.rho:.6g}"),
        (f"ε at δ = {self.delta:g}", f"{self.epsilon:.6g}"),
    ]
    lines = ["# Privacy report", "", "| quantity | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "## Checklist (paper 004, App. C)", ""]
    lines += [f"- **{k.replace('_', ' ')}**: {v}" for k, v in self.checklist().items()]
    if self.notes:
      lines += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
    return "\n".join(lines) + "\n"
