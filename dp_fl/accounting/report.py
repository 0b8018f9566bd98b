"""Privacy reports following the checklist of paper 004, App. C (after Ponomareva et al. Sec. 5.3).

A report is produced from the mechanism actually used, its noise multiplier, and the
participation actually *realized* (from the participation ledger), never from the configured
schedule alone. Its ε is never smaller than the truth: where the exact sensitivity is not known
(paper 004, Remark 3.2 gives only a lower bound, as for TreeAgg under multiple participations)
ρ and ε come from a valid upper bound on the sensitivity, and the ε of the lower bound is shown
next to it, labelled (what paper 004 reports for TreeAgg).

Besides the numbers a report says what is released, what the guarantee covers and what it
assumes (`scope`), and lists caveats that weaken the claim (`caveats`, e.g. a noise seed that
is written in the configuration).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Optional

from dp_fl import _checks
from dp_fl.accounting import adaptive_clipping
from dp_fl.accounting import amplification
from dp_fl.accounting import dpfedavg
from dp_fl.accounting import zcdp


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


def _markdown(rows: list[tuple[str, str]], checklist: dict[str, str],
              notes: tuple[str, ...], scope: tuple[tuple[str, str], ...] = (),
              caveats: tuple[str, ...] = ()) -> str:
  """A report as Markdown: caveats, the quantities, the scope, the App. C checklist, notes."""
  lines = ["# Privacy report", ""]
  lines += [f"> **Caveat:** {c}" for c in caveats]
  if caveats:
    lines.append("")
  lines += ["| quantity | value |", "| --- | --- |"]
  lines += [f"| {k} | {v} |" for k, v in rows]
  if scope:
    lines += ["", "## What is released, what is covered, what is assumed", ""]
    lines += [f"- **{k}**: {v}" for k, v in scope]
  lines += ["", "## Checklist (paper 004, App. C)", ""]
  lines += [f"- **{k.replace('_', ' ')}**: {v}" for k, v in checklist.items()]
  if notes:
    lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
  return "\n".join(lines) + "\n"


def _scope_dict(scope: tuple[tuple[str, str], ...]) -> dict[str, str]:
  return {k: v for k, v in scope}


def _report_dict(report: Any, **extra: Any) -> dict[str, Any]:
  """A report dataclass as JSON-ready dict: lists for tuples, the scope as a mapping, the
  checklist filled in, and `extra` fields (computed or overridden)."""
  d = dataclasses.asdict(report)
  d["notes"] = list(report.notes)
  d["caveats"] = list(report.caveats)
  d["scope"] = _scope_dict(report.scope)
  d.update(extra)
  d["checklist"] = report.checklist()
  return d


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
  """The DP statement of one training run (paper 004, App. C).

  `sensitivity`, `rho` and `epsilon` are guarantees: from the exact sensitivity
  (`sensitivity_kind` "exact") or from a valid upper bound ("upper_bound"), in which case
  `sensitivity_lower_bound` / `epsilon_lower_bound` bracket the truth from below.
  """
  mechanism: str
  mechanism_description: str
  noise_multiplier: float
  sensitivity: float
  sensitivity_kind: str
  participation: Participation
  rho: float
  epsilon: float
  delta: float
  conversion: str
  accounting_method: str
  clip_norm: Optional[float] = None
  clients_per_round: Optional[int] = None
  notes: tuple[str, ...] = ()
  sensitivity_lower_bound: Optional[float] = None
  epsilon_lower_bound: Optional[float] = None
  scope: tuple[tuple[str, str], ...] = ()
  caveats: tuple[str, ...] = ()
  adaptive_clipping: Optional[adaptive_clipping.EstimatorCost] = None

  @property
  def sensitivity_is_lower_bound(self) -> bool:
    """True when the exact sensitivity is unknown (only bracketed; paper 004 Remark 3.2)."""
    return self.sensitivity_kind != "exact"

  def to_dict(self) -> dict[str, Any]:
    return _report_dict(self, sensitivity_is_lower_bound=self.sensitivity_is_lower_bound)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=False)

  def checklist(self) -> dict[str, str]:
    """The App. C checklist, filled in for this run."""
    p = self.participation
    bound = (f"an UPPER bound on the sensitivity ({self.sensitivity:.6g}; the exact value is "
             f"not known, it is at least {self.sensitivity_lower_bound:.6g} by paper 004, "
             "Remark 3.2), so the ε below is a guarantee but may be loose"
             if self.sensitivity_is_lower_bound
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
        "accounting": f"{self.accounting_method}; (ε, δ) from ρ by {self.conversion}."
                      + _estimator_accounting(self.adaptive_clipping),
        "accounting_assumptions": (
            f"{p.source.capitalize()} participation over {p.rounds} rounds: every client took "
            f"part at most {p.max_participations} times, any two participations at least "
            f"{p.min_sep} rounds apart; sensitivity is {bound}."),
        "formal_statement": (
            f"{self.mechanism} with noise multiplier {self.noise_multiplier:g} satisfies "
            f"ρ = {self.rho:.4g}-zCDP and (ε = {self.epsilon:.4g}, δ = {self.delta:g})-DP"
            + (" (from an upper bound on the sensitivity)" if self.sensitivity_is_lower_bound
               else "") + "." + "".join(f" Caveat: {c}" for c in self.caveats)),
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
        ("sensitivity", f"{self.sensitivity:.6g}" + (
            f" (upper bound; lower bound {self.sensitivity_lower_bound:.6g})"
            if self.sensitivity_is_lower_bound else "")),
        ("ρ (zCDP)", f"{self.rho:.6g}"),
        (f"ε at δ = {self.delta:g}", f"{self.epsilon:.6g}" + (
            f" (upper bound; ε of the lower bound {self.epsilon_lower_bound:.6g})"
            if self.sensitivity_is_lower_bound else "")),
    ] + _estimator_rows(self.adaptive_clipping)
    return _markdown(rows, self.checklist(), self.notes, self.scope, self.caveats)


def _estimator_rows(cost: Optional[adaptive_clipping.EstimatorCost]) -> list[tuple[str, str]]:
  if cost is None:
    return [("clip norm", "fixed")]
  return [("clip norm", "adaptive, from ζ₀ above (Andrew et al. 2021)"),
          ("adaptive clipping", cost.describe())]


def _estimator_accounting(cost: Optional[adaptive_clipping.EstimatorCost]) -> str:
  if cost is None:
    return ""
  return (" The adaptive clip norm's noised counts are a second Gaussian mechanism on the "
          "same participations, composed with the updates' (dp_fl/accounting/"
          f"adaptive_clipping.py): {cost.describe()}.")


def gaussian_claim(report: Any) -> bool:
  """Whether `report`'s ε is the (ε, δ) of a μ-GDP claim: the Gaussian matrix mechanism's
  report (DP-FTRL, DP-SGD: the privacy loss of a Gaussian shift of norm ≤ sens, μ = sens/σ).
  Sampled, amplified and Binomial reports are not Gaussian curves."""
  return isinstance(report, PrivacyReport)


def matrix_mechanism_report(mechanism, noise_multiplier: float, participation: Participation,
                            delta: float, *, clip_norm: Optional[float] = None,
                            clients_per_round: Optional[int] = None,
                            scope: tuple[tuple[str, str], ...] = (),
                            caveats: tuple[str, ...] = (),
                            clip_estimator: Optional[adaptive_clipping.ClipEstimator] = None
                            ) -> PrivacyReport:
  """The privacy report of a DP-FTRL run (paper 004, Sec. 3.1 and App. C).

  ρ = sens² / (2σ²) with sens the mechanism's sensitivity under the participation given
  (pass the *realized* participation from the ledger) — exact, or a valid upper bound where
  only a lower bound is known (then the ε of the lower bound is reported next to it); ε at δ
  by the exact Gaussian conversion (what paper 004 reports). `scope` and `caveats`: see the
  module docstring.

  Args:
    mechanism: a `dp_fl.mechanisms.catalog.Mechanism`.
    noise_multiplier: σ, noise std / clip norm.
    participation: rounds, min-sep and max participations the guarantee covers.
    delta: δ.
    clip_norm: ζ, for the record.
    clients_per_round: the fixed denominator, for the record.
    clip_estimator: the adaptive clip norm's estimator (None: fixed ζ); its counts are
      composed in for the participation's k (dp_fl/accounting/adaptive_clipping.py).

  Returns:
    A `PrivacyReport`.
  """
  sens = mechanism.sensitivity(participation.rounds, participation.min_sep,
                               participation.max_participations)
  guarantee = _composed(zcdp.matrix_mechanism_guarantee(sens.guaranteed, noise_multiplier,
                                                        delta),
                        clip_estimator, participation.max_participations)
  lower = None
  notes = [f"Sensitivity by {sens.method}."]
  cost = None
  if clip_estimator is not None:
    estimator_rho = clip_estimator.rho(participation.max_participations)
    cost = clip_estimator.cost(participation.max_participations, estimator_rho,
                               estimator_rho / guarantee.rho)
    notes.append(
        f"ρ = {guarantee.rho - estimator_rho:.6g} (the updates, sens² / 2σ²) + "
        f"{estimator_rho:.6g} (the adaptive clip norm's counts, k / 2z_b² with k = "
        f"{participation.max_participations}, z_b = {clip_estimator.noise_multiplier:.4g}).")
  if not sens.is_exact:
    lower = _composed(zcdp.matrix_mechanism_guarantee(sens.value, noise_multiplier, delta),
                      clip_estimator, participation.max_participations)
    notes.append(
        f"The exact sensitivity is not known: {sens.value:.6g} (a lower bound, {sens.method}) "
        f"≤ sens ≤ {sens.guaranteed:.6g} (an upper bound, {sens.upper_method}). ρ and ε are "
        f"computed from the upper bound, so they are a guarantee; the ε of the lower bound, "
        f"{lower.epsilon:.4g}, is what the truth is at least (paper 004 reports TreeAgg so).")
  notes.append(f"Classical conversions for comparison: ε = {guarantee.epsilon_cks:.4g} "
               f"(Canonne-Kamath-Steinke), ε = {guarantee.epsilon_bun_steinke:.4g} "
               "(Bun-Steinke ρ + 2√(ρ log 1/δ)).")
  return PrivacyReport(
      mechanism=mechanism.name, mechanism_description=mechanism.description,
      noise_multiplier=guarantee.noise_multiplier, sensitivity=guarantee.sensitivity,
      sensitivity_kind="exact" if sens.is_exact else "upper_bound",
      participation=participation,
      rho=guarantee.rho, epsilon=guarantee.epsilon, delta=guarantee.delta,
      conversion="the exact Gaussian (ε, δ) curve with μ = √(2ρ)",
      accounting_method="ρ-zCDP of the Gaussian matrix mechanism (sens² / 2σ²)",
      clip_norm=clip_norm, clients_per_round=clients_per_round, notes=tuple(notes),
      sensitivity_lower_bound=None if lower is None else sens.value,
      epsilon_lower_bound=None if lower is None else lower.epsilon,
      scope=tuple(scope), caveats=tuple(caveats), adaptive_clipping=cost)


def _composed(guarantee: zcdp.ZcdpGuarantee,
              clip_estimator: Optional[adaptive_clipping.ClipEstimator],
              participations: int) -> zcdp.ZcdpGuarantee:
  """`guarantee` with the adaptive clip norm's counts composed in (zCDP: ρ adds; the pair
  is one Gaussian mechanism, so the exact conversion of the sum stays valid)."""
  if clip_estimator is None:
    return guarantee
  rho = guarantee.rho + clip_estimator.rho(participations)
  delta = guarantee.delta
  return dataclasses.replace(
      guarantee, rho=rho, epsilon=zcdp.epsilon_from_rho(rho, delta),
      epsilon_cks=zcdp.epsilon_from_rho_cks(rho, delta),
      epsilon_bun_steinke=zcdp.epsilon_from_rho_bun_steinke(rho, delta), epsilon_pld=None)


@dataclasses.dataclass(frozen=True)
class MinSepGuarantee:
  """ρ and ε of a matrix mechanism under Π(b, k) over n rounds (paper 004, Sec. 3.1).

  Attributes:
    sensitivity: the mechanism's `Sensitivity` (value, kind, method, upper bound).
    max_participations: k as used: capped at ⌈n/b⌉ (`feasible_participations`).
    participation_note: why k was capped, or None.
    guarantee: the guarantee from `sensitivity.guaranteed` (an upper bound on the truth).
    lower: where the sensitivity is only bracketed, the (optimistic) guarantee of its lower
      bound; None when exact.
    calibrated: True when σ was calibrated for a target ε (rounded up to 6 digits).
  """
  sensitivity: Any
  max_participations: int
  participation_note: Optional[str]
  guarantee: zcdp.ZcdpGuarantee
  lower: Optional[zcdp.ZcdpGuarantee]
  calibrated: bool

  @property
  def noise_multiplier(self) -> float:
    return self.guarantee.noise_multiplier


def check_noise_or_target(noise_multiplier: Optional[float],
                          target_epsilon: Optional[float]) -> None:
  """Refuses anything but exactly one of --noise_multiplier and --target_epsilon."""
  if (noise_multiplier is None) == (target_epsilon is None):
    raise ValueError("Pass exactly one of --noise_multiplier and --target_epsilon.")


def min_sep_guarantee(mechanism, rounds: int, min_sep: int, max_participations: Optional[int],
                      delta: float, *, noise_multiplier: Optional[float] = None,
                      target_epsilon: Optional[float] = None) -> MinSepGuarantee:
  """The guarantee of `mechanism` at σ, or σ (rounded up to 6 digits) for `target_epsilon`.

  The one computation behind `scripts/privacy` and `scripts/plan`: sensitivity under
  Π(b, k) with k capped at ⌈n/b⌉, ρ = sens²/(2σ²) from the guaranteed (upper-bound)
  sensitivity, ε at δ by the exact Gaussian curve.

  Raises:
    ValueError: not exactly one of σ and the target given, or no finite upper bound.
  """
  from dp_fl.mechanisms import sensitivity as sensitivity_lib  # pylint: disable=g-import-not-at-top
  check_noise_or_target(noise_multiplier, target_epsilon)
  k, note = sensitivity_lib.feasible_participations(rounds, min_sep, max_participations)
  sens = mechanism.sensitivity(rounds, min_sep, k)
  guaranteed = sens.guaranteed
  if not math.isfinite(guaranteed):
    raise ValueError(
        f"--mechanism={mechanism.name} has no finite sensitivity upper bound for --rounds="
        f"{rounds}, --min_sep={min_sep}, k={k} (only the lower bound {sens.value:.6g}, "
        f"{sens.method}); use a mechanism with exact sensitivity (blt, dpsgd, or bandmf with "
        "--min_sep >= bands).")
  if noise_multiplier is None:
    noise_multiplier = amplification.round_up(
        zcdp.noise_multiplier_for_epsilon(guaranteed, target_epsilon, delta))
  guarantee = zcdp.matrix_mechanism_guarantee(guaranteed, noise_multiplier, delta)
  lower = (None if sens.is_exact
           else zcdp.matrix_mechanism_guarantee(sens.value, noise_multiplier, delta))
  return MinSepGuarantee(sens, k, note, guarantee, lower, target_epsilon is not None)


@dataclasses.dataclass(frozen=True)
class SampledPrivacyReport:
  """The DP statement of a DP-FedAvg run with Poisson user sampling (paper 001, Sec. 2).

  `epsilon` is the tightest of the valid bounds computed (PLD); the moments accountant
  (paper 001's own, integer orders 1..32) and RDP values are reported next to it.
  """
  mechanism: str
  noise_multiplier: float
  population: int
  expected_clients_per_round: float
  sampling_probability: float
  rounds: int
  delta: float
  epsilon: float
  epsilon_rdp: float
  epsilon_moments_accountant: float
  pld_value_discretization_interval: float
  clip_norm: Optional[float] = None
  notes: tuple[str, ...] = ()
  rho: float = float("nan")  # Not a zCDP statement; kept for a uniform interface.
  sensitivity_is_lower_bound: bool = False
  scope: tuple[tuple[str, str], ...] = ()
  caveats: tuple[str, ...] = ()
  epsilon_lower_bound: Optional[float] = None  # The PLD ε is a guarantee: no bracket.
  adaptive_clipping: Optional[adaptive_clipping.EstimatorCost] = None
  update_noise_multiplier: Optional[float] = None  # z_Δ, when `noise_multiplier` is effective.

  def to_dict(self) -> dict[str, Any]:
    return _report_dict(self, rho=None)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=False)

  def checklist(self) -> dict[str, str]:
    return {
        "dp_setting": ("Central DP: the server is trusted to sample users, clip, aggregate "
                       "and add noise correctly."),
        "data_accesses_covered": ("Every round of this single training run; hyper-parameter "
                                  "tuning and checkpoint selection are not covered."),
        "final_mechanism_output": "Every intermediate model (the whole sequence of updates).",
        "unit_of_privacy": "User-level: all data of one user.",
        "adjacency": "Add/remove one user (paper 001, Sec. 2).",
        "accounting": ("Poisson-subsampled Gaussian composed over the rounds: PLD (reported ε), "
                       "RDP and the moments accountant (paper 001) for comparison."
                       + ("" if self.adaptive_clipping is None else
                          f" Each round is the updates' Gaussian (z_Δ = "
                          f"{self.update_noise_multiplier:g}) and the adaptive clip norm's "
                          "count together, one Gaussian with the effective z = "
                          f"{self.noise_multiplier:.6g} (Andrew et al. 2021, Thm. 1): "
                          f"{self.adaptive_clipping.describe()}.")),
        "accounting_assumptions": (
            f"Each of the {self.population} users is selected independently with probability "
            f"q = {self.sampling_probability:.6g} in each of {self.rounds} rounds; noise "
            f"multiplier z = {self.noise_multiplier:g} relative to the estimator's sensitivity "
            "(paper 001, Lemma 1)."),
        "formal_statement": (
            f"DP-FedAvg satisfies (ε = {self.epsilon:.4g}, δ = {self.delta:g})-DP (PLD; RDP "
            f"{self.epsilon_rdp:.4g}, moments accountant {self.epsilon_moments_accountant:.4g})."
            + "".join(f" Caveat: {c}" for c in self.caveats)),
    }

  def to_markdown(self) -> str:
    rows = [
        ("mechanism", f"{self.mechanism} — DP-FedAvg, Poisson user sampling (paper 001)"),
        ("noise multiplier z", f"{self.noise_multiplier:g}"),
        ("clip norm S", "—" if self.clip_norm is None else f"{self.clip_norm:g}"),
        ("population K", str(self.population)),
        ("expected clients per round C̃", f"{self.expected_clients_per_round:g}"),
        ("rounds T", str(self.rounds)),
        (f"ε at δ = {self.delta:g} (PLD)", f"{self.epsilon:.6g}"),
        ("ε (RDP)", f"{self.epsilon_rdp:.6g}"),
        ("ε (moments accountant, paper 001)", f"{self.epsilon_moments_accountant:.6g}"),
        ("PLD discretization interval", f"{self.pld_value_discretization_interval:g}"),
    ] + _estimator_rows(self.adaptive_clipping)
    if self.update_noise_multiplier is not None:
      rows[1] = ("noise multiplier z (effective; updates z_Δ)",
                 f"{self.noise_multiplier:.6g} (z_Δ = {self.update_noise_multiplier:.6g})")
    return _markdown(rows, self.checklist(), self.notes, self.scope, self.caveats)


def dpfedavg_report(population: int, expected_clients_per_round: float,
                    noise_multiplier: float, rounds: int, delta: float, *,
                    clip_norm: Optional[float] = None,
                    scope: tuple[tuple[str, str], ...] = (),
                    caveats: tuple[str, ...] = (),
                    clip_estimator: Optional[adaptive_clipping.ClipEstimator] = None,
                    update_noise_multiplier: Optional[float] = None) -> SampledPrivacyReport:
  """The privacy report of T rounds of DP-FedAvg with Poisson user sampling (paper 001).

  With adaptive clipping, `noise_multiplier` is the effective z of the updates (z_Δ =
  `update_noise_multiplier`) and the clip norm's counts (`clip_estimator`) together.
  """
  cost = None
  if clip_estimator is not None:
    if update_noise_multiplier is None:
      raise ValueError("`update_noise_multiplier` (z_Δ) is required with `clip_estimator`.")
    expected = adaptive_clipping.effective_noise_multiplier(update_noise_multiplier,
                                                            clip_estimator.noise_multiplier)
    if not math.isclose(expected, noise_multiplier, rel_tol=1e-9):
      raise ValueError(f"`noise_multiplier`={noise_multiplier} is not the effective z = "
                       f"{expected} of z_Δ = {update_noise_multiplier} and the counts' z_b.")
    cost = clip_estimator.cost(share=(noise_multiplier / clip_estimator.noise_multiplier) ** 2)
  results = {m: dpfedavg.dpfedavg_epsilon(population, expected_clients_per_round,
                                          noise_multiplier, rounds, delta, method=m)
             for m in (dpfedavg.PLD, dpfedavg.RDP, dpfedavg.MOMENTS_ACCOUNTANT)}
  pld = results[dpfedavg.PLD]
  notes = ("The moments accountant reproduces paper 001's printed numbers; RDP and PLD are "
           "tighter valid bounds of the same mechanism (dp_fl/accounting/README.md).",)
  if not pld.pld_consistent:
    notes += ("The PLD on the finer grid exceeded the coarser one (floating-point error in "
              "the FFT composition suspected); the coarser, valid bound is reported.",)
  return SampledPrivacyReport(
      mechanism="dpfedavg", noise_multiplier=float(noise_multiplier),
      population=int(population), expected_clients_per_round=float(expected_clients_per_round),
      sampling_probability=pld.sampling_probability, rounds=int(rounds), delta=pld.delta,
      epsilon=pld.epsilon, epsilon_rdp=results[dpfedavg.RDP].epsilon,
      epsilon_moments_accountant=results[dpfedavg.MOMENTS_ACCOUNTANT].epsilon,
      pld_value_discretization_interval=pld.pld_value_discretization_interval,
      clip_norm=clip_norm, notes=notes, scope=tuple(scope), caveats=tuple(caveats),
      adaptive_clipping=cost,
      update_noise_multiplier=None if cost is None else float(update_noise_multiplier))


@dataclasses.dataclass(frozen=True)
class AmplifiedPrivacyReport:
  """The DP statement of a DP-FTRL run whose sampling amplifies its privacy.

  Two valid (ε, δ) bounds of the same run at the same δ: the amplified one of the sampling
  scheme (`amplified`: balls-in-bins Monte Carlo, paper 003; or cyclic Poisson for banded C)
  and the unamplified one from the realized participation (`unamplified`, paper 004 Sec. 3.1,
  which holds whatever the sampling). `epsilon` is the smaller of those that hold; the
  amplified one holds only when its release was verified, the run followed the analysed
  schedule (no discarded draw) and the sampling is secret — `amplified_holds` and
  `why_not_amplified` say so.
  """
  scheme: str
  mechanism: str
  noise_multiplier: float
  delta: float
  epsilon: float
  epsilon_amplified: Optional[float]
  amplified_holds: bool
  why_not_amplified: str
  amplified_method: str
  sampling_assumption: str
  amplified: dict
  unamplified: PrivacyReport
  notes: tuple[str, ...] = ()
  scope: tuple[tuple[str, str], ...] = ()
  caveats: tuple[str, ...] = ()
  rho: float = float("nan")  # The amplified bound is not a zCDP statement.
  epsilon_lower_bound: Optional[float] = None  # Both bounds are guarantees.

  @property
  def epsilon_unamplified(self) -> float:
    return self.unamplified.epsilon

  @property
  def sensitivity_is_lower_bound(self) -> bool:
    return False  # The unamplified ε is computed from a valid upper bound when needed.

  def to_dict(self) -> dict[str, Any]:
    return _report_dict(self, rho=None, unamplified=self.unamplified.to_dict(),
                        epsilon_unamplified=self.epsilon_unamplified)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str)

  def checklist(self) -> dict[str, str]:
    base = self.unamplified.checklist()
    which = ("the amplified bound" if self.amplified_holds
             and self.epsilon == self.epsilon_amplified else "the unamplified bound")
    return {
        **base,
        "accounting": (f"Two bounds of the same run at δ = {self.delta:g}: amplified by "
                       f"{self.scheme} ({self.amplified_method}) and unamplified "
                       f"({base['accounting']}); the reported ε is {which}."),
        "accounting_assumptions": (
            f"Amplified: {self.sampling_assumption} Unamplified: "
            f"{base['accounting_assumptions']}"),
        "formal_statement": (
            f"{self.mechanism} with noise multiplier {self.noise_multiplier:g} satisfies "
            f"(ε = {self.epsilon:.4g}, δ = {self.delta:g})-DP"
            + (f" (amplified by {self.scheme}; without amplification ε = "
               f"{self.epsilon_unamplified:.4g})" if which == "the amplified bound" else
               f" (unamplified; {self.why_not_amplified})")
            + "." + "".join(f" Caveat: {c}" for c in self.caveats)),
    }

  def to_markdown(self) -> str:
    amplified = ("—" if self.epsilon_amplified is None
                 else f"{self.epsilon_amplified:.6g}"
                 + ("" if self.amplified_holds else " (does not hold for this run)"))
    rows = [
        ("mechanism", f"{self.mechanism} — {self.unamplified.mechanism_description}"),
        ("sampling", self.scheme),
        ("noise multiplier σ", f"{self.noise_multiplier:g}"),
        (f"ε at δ = {self.delta:g} (reported)", f"{self.epsilon:.6g}"),
        (f"ε amplified ({self.amplified_method})", amplified),
        ("ε without amplification (realized participation)",
         f"{self.epsilon_unamplified:.6g}"),
    ]
    rows += [(f"amplification: {k}", f"{v:.6g}" if isinstance(v, float) else str(v))
             for k, v in self.amplified.items() if k not in ("scheme",)]
    notes = self.notes + (() if self.amplified_holds else
                          (f"No amplified ε is claimed: {self.why_not_amplified}",))
    return _markdown(rows, self.checklist(), notes + self.unamplified.notes, self.scope,
                     self.caveats)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _DistributedReport:
  """What every distributed-DP report has beside its mechanism's quantities (cpSGD's,
  the distributed discrete Gaussian's and Skellam's): a Rényi DP statement, not zCDP."""
  notes: tuple[str, ...] = ()
  rho: float = float("nan")  # Not a zCDP statement; kept for a uniform interface.
  sensitivity_is_lower_bound: bool = False
  scope: tuple[tuple[str, str], ...] = ()
  caveats: tuple[str, ...] = ()
  epsilon_lower_bound: Optional[float] = None

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=2, sort_keys=False)


@dataclasses.dataclass(frozen=True)
class BinomialPrivacyReport(_DistributedReport):
  """The DP statement of a cpSGD run, Rot(s_k(Bin(m, p)), HA) (paper 000, Sec. 4; accounted by
  `dp_fl.accounting.cpsgd`).

  `epsilon` covers each client's `participations` rounds (realized, plus every round that may
  have been released twice by a resume), each charged at the smallest cohort any round had.
  """
  mechanism: str
  num_levels: int
  num_trials: int
  p: float
  x_max: float
  clip_norm: float
  dimension: int
  cohort: int
  participations: int
  replayed_participations: int
  rounds: int
  epsilon: float
  delta: float
  round_epsilon: float
  round_delta: float
  composition: str
  bits_per_coordinate: int
  secure_sum_bits: int
  noise_multiplier: float

  def to_dict(self) -> dict[str, Any]:
    return _report_dict(self, rho=None)

  def checklist(self) -> dict[str, str]:
    return {
        "dp_setting": ("Distributed DP: every client adds its own Bin(m, p) share and secure "
                       "aggregation sums the clients' integer messages, so the guarantee on "
                       "that sum holds against the server too (paper 000, Sec. 1.3). The sum "
                       "is the only noised release: what else the server receives (un-noised "
                       "counts and metrics; with remote workers, each worker's partial sum) is "
                       "named in the scope and not covered."),
        "data_accesses_covered": ("Every round of this single training run; hyper-parameter "
                                  "tuning and checkpoint selection are not covered."),
        "final_mechanism_output": "Every round's aggregate (hence every intermediate model).",
        "unit_of_privacy": "User-level: all data of one client.",
        "adjacency": ("Replace one client's update within a cohort of public size (paper 000, "
                      "Sec. 3.2); each update is clipped to L2 norm D."),
        "accounting": (
            "Rényi DP of the Binomial mechanism, computed numerically with every "
            "approximation rounded up (dp_fl/accounting/binomial_rdp.py: each shift reduced "
            "to shifts of one lattice step, the worst shift allowed by Eq. 10's sensitivities "
            "bounded by a certified linear program), per round with N = n·m trials; a "
            "client's rounds composed by adding their Rényi curves (" + self.composition
            + " here), the sensitivities' failure probability added to δ; converted to "
            "(ε, δ) by Canonne, Kamath & Steinke (2020), Prop. 12. Paper 000's Thm. 1 is not "
            "used: it is proved for ε < 1 only. No amplification by sampling is claimed."),
        "accounting_assumptions": (
            f"At least n = {self.cohort} clients add their shares in every round a client "
            f"takes part in (the smallest realized cohort); at most k = {self.participations} "
            "rounds per client. A client that drops out after it was selected adds no share "
            "and sends nothing: the guarantee assumes the secure aggregation only completes "
            "with the shares of all clients whose messages it sums."),
        "formal_statement": (
            f"cpSGD satisfies (ε = {self.epsilon:.4g}, δ = {self.delta:g})-DP for each "
            f"client (one round alone: ε = {self.round_epsilon:.4g} at δ = {self.round_delta:g})."
            + "".join(f" Caveat: {c}" for c in self.caveats)),
    }

  def to_markdown(self) -> str:
    rows = [
        ("mechanism", f"{self.mechanism} — Rot(s_k(Bin(m, p)), HA) (paper 000)"),
        ("quantization levels k", str(self.num_levels)),
        ("Binomial trials per client m, p", f"{self.num_trials}, {self.p:g}"),
        ("X_max (rotated coordinate clip)", f"{self.x_max:.6g}"),
        ("clip norm D", f"{self.clip_norm:g}"),
        ("rotated dimension d'", str(self.dimension)),
        ("bits per coordinate per client", str(self.bits_per_coordinate)),
        ("secure-sum bit width", str(self.secure_sum_bits)),
        ("Gaussian-equivalent noise multiplier", f"{self.noise_multiplier:.6g}"),
        ("smallest cohort n", str(self.cohort)),
        ("rounds", str(self.rounds)),
        ("computations per client k, applied or not (most not applied, of one client)",
         f"{self.participations} ({self.replayed_participations})"),
        (f"ε at δ = {self.delta:g}", f"{self.epsilon:.6g}"),
        ("ε of one round alone (at δ)",
         f"{self.round_epsilon:.6g} ({self.round_delta:g})"),
    ]
    return _markdown(rows, self.checklist(), self.notes, self.scope, self.caveats)


@dataclasses.dataclass(frozen=True)
class DistributedDpPrivacyReport(_DistributedReport):
  """The DP statement of a distributed discrete Gaussian or distributed Skellam run (TFF's
  `DistributedDpSumFactory`; accounted by Kairouz, Liu & Steinke 2021, Prop. 14, or Agarwal,
  Kairouz & Liu 2021, Thm. 3.5: `dp_fl.aggregators.distributed_dp`).

  `epsilon` covers each client's `participations` releases (realized, plus every round that
  may have been computed twice by a resume), each a sum of between `fewest_clients` and
  `most_clients` shares.
  """
  mechanism: str
  noise_multiplier: float
  clip_norm: float
  bits: int
  dimension: int
  padded_dimension: int
  scale_factor: float
  local_stddev: float
  sampled_stddev: float
  l2_sensitivity: float
  l1_sensitivity: float
  tau: float
  fewest_clients: int
  most_clients: int
  participations: int
  replayed_participations: int
  rounds: int
  epsilon: float
  delta: float
  rdp_order: float
  round_epsilon: float
  rounding_beta: float = 0.0

  NAMES = {"ddgauss": ("the distributed discrete Gaussian",
                       "Kairouz, Liu & Steinke 2021 (arXiv:2102.06387), Prop. 14"),
           "skellam": ("the distributed Skellam mechanism",
                       "Agarwal, Kairouz & Liu 2021 (arXiv:2110.04995), Thm. 3.5")}

  @property
  def secure_aggregation_bits(self) -> int:
    """Bits a secure aggregation field needs to hold the un-wrapped sum of the most clients'
    B-bit messages: B + ⌈log₂ n⌉ (TFF's `federated_secure_sum_bitwidth` sums B-bit inputs and
    the server reduces modulo 2^B)."""
    return self.bits + max(0, math.ceil(math.log2(self.most_clients)))

  def to_dict(self) -> dict[str, Any]:
    return _report_dict(self, rho=None, secure_aggregation_bits=self.secure_aggregation_bits,
                        bits_per_coordinate=self.bits)  # cpSGD's report's key too.

  def checklist(self) -> dict[str, str]:
    name, source = self.NAMES[self.mechanism]
    noise = ("N_Z(0, σ²) with σ = ⌈local stddev⌉ (TFF's sampler)" if self.mechanism == "ddgauss"
             else "Sk(σ²/2, σ²/2), variance σ², seeded from OS entropy")
    return {
        "dp_setting": ("Distributed DP: every client adds its own integer noise share and "
                       "secure aggregation sums the clients' integer messages modulo 2^B, so "
                       "the guarantee on that sum holds against the server too. The sum is the "
                       "only noised release: what else the server receives (un-noised counts "
                       "and metrics; with remote workers, each worker's partial sum) is named "
                       "in the scope and not covered."),
        "data_accesses_covered": ("Every round of this single training run; hyper-parameter "
                                  "tuning and checkpoint selection are not covered."),
        "final_mechanism_output": "Every round's aggregate (hence every intermediate model).",
        "unit_of_privacy": "User-level: all data of one client.",
        "adjacency": (
            "Zero-out: neighbouring datasets differ by replacing all contributions of one "
            "client with zeros (as dp_fl's DP-FTRL; the client still adds its noise share). "
            f"Each update is clipped to L2 norm c = {self.clip_norm:g}, rotated (randomized "
            "Hadamard, public seed), scaled by γ⁻¹ and rounded to integers by TFF, whose bound "
            "on the rounded vector's norm (the 'inflated' bound) is the sensitivity Δ₂ (Δ₁ its "
            "L1 bound): " + (
                "the worst case of unconditional rounding (β = 0)" if not self.rounding_beta
                else f"enforced by conditional rounding (β = {self.rounding_beta:.4g}: a "
                "rounding whose norm exceeds it is redrawn, Kairouz, Liu & Steinke 2021, "
                "Sec. 4)")
            + "; a zero update stays zero. Replace-one neighbours would double both."),
        "accounting": (
            f"Rényi DP of {name} ({source}): each client adds {noise}; the sum of n shares is "
            "accounted with μ at the fewest shares of any of the client's rounds and (discrete "
            "Gaussian) τ at the most; a client's rounds composed by adding Rényi curves at "
            "integer orders; converted to (ε, δ) by Canonne, Kamath & Steinke (2020) "
            "(dp_accounting's RDP conversion). No amplification by sampling is claimed. Modular "
            "wrap-around (TFF's modclip probability 1e-4 per coordinate) affects accuracy only: "
            "the release is post-processing of the noisy sum."),
        "accounting_assumptions": (
            f"At least n = {self.fewest_clients} and at most {self.most_clients} clients add "
            f"their shares in every round a client takes part in; at most k = "
            f"{self.participations} rounds per client. A client that drops out after it was "
            "selected adds no share and sends nothing: the guarantee assumes the secure "
            "aggregation only completes with the shares of all clients whose messages it sums. "
            f"The secure aggregation's field must hold B + ⌈log₂ n⌉ = "
            f"{self.secure_aggregation_bits} bits if it sums without reducing modulo 2^B."),
        "formal_statement": (
            f"{self.mechanism} satisfies (ε = {self.epsilon:.4g}, δ = {self.delta:g})-DP for "
            f"each client (one round alone: ε = {self.round_epsilon:.4g})."
            + "".join(f" Caveat: {c}" for c in self.caveats)),
    }

  def to_markdown(self) -> str:
    name, source = self.NAMES[self.mechanism]
    rows = [
        ("mechanism", f"{self.mechanism} — {name} ({source}), TFF's DistributedDpSumFactory"),
        ("noise multiplier z (central noise std / c)", f"{self.noise_multiplier:.6g}"),
        ("clip norm c", f"{self.clip_norm:g}"),
        ("bits per coordinate B (message and secure-sum modulus 2^B)", str(self.bits)),
        ("secure aggregation field without modular reduction", f"{self.secure_aggregation_bits} bits"),
        ("model dimension d, rotated (padded) d'", f"{self.dimension}, {self.padded_dimension}"),
        ("scale γ⁻¹", f"{self.scale_factor:.6g}"),
        ("each client's noise scale (scaled): stated, sampled",
         f"{self.local_stddev:.6g}, {self.sampled_stddev:.6g}"),
        ("stochastic rounding β (0: unconditional; > 0: conditional)",
         f"{self.rounding_beta:.4g}"),
        ("sensitivities of the integer sum Δ₂, Δ₁ (zero-out)",
         f"{self.l2_sensitivity:.6g}, {self.l1_sensitivity:.6g}"),
        ("τ (Prop. 14; 0 for Skellam)", f"{self.tau:.3g}"),
        ("cohorts accounted: fewest, most", f"{self.fewest_clients}, {self.most_clients}"),
        ("rounds", str(self.rounds)),
        ("computations per client k, applied or not (most not applied, of one client)",
         f"{self.participations} ({self.replayed_participations})"),
        (f"ε at δ = {self.delta:g}", f"{self.epsilon:.6g} (Rényi order {self.rdp_order:g})"),
        ("ε of one round alone (at δ)", f"{self.round_epsilon:.6g}"),
    ]
    return _markdown(rows, self.checklist(), self.notes, self.scope, self.caveats)
