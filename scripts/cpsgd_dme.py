"""Paper 000's distributed mean estimation (DME) study: MSE vs bits per coordinate vs ε.

n clients hold X_i ∈ R^d with ‖X_i‖₂ <= D (D = 1: every MSE ratio is invariant to it); the
server estimates X̄ = (1/n) Σ_i X_i, and one client's vector may be replaced (replace-one
neighbours, n public). At every target ε, the same total δ for all methods, one round
(participations = 1) and each number of quantization levels k:

* `gaussian` — each client adds N(0, σ²I), σ = 2D√(2 log(1.25/δ))/(√n ε) (Thm. 2);
* `cpsgd_norot` — s_k(Bin(m, p)) with X_max = D (Thm. 3, Cor. 2);
* `cpsgd_rot` — Rot(s_k(Bin(m, p)), HA) with X_max = D√(2 log(2nd'/δ)/d') (Thm. 4, Cor. 3);
* `cpsgd_norot_small_xmax` — an ablation: s_k(Bin(m, p)) at Thm. 4's X_max *without* the
  rotation that makes that X_max safe (what rotation buys on skewed inputs);
* `dgauss` — TFF 0.87's distributed discrete Gaussian (`DistributedDpSumFactory`, 'hd'
  rotation; Kairouz, Liu & Steinke 2021) at B bits, run in TFF.

cpSGD: p = 1/2 (paper 000, Fig. 2) and m the smallest number of Binomial trials (to 0.1 %)
whose (ε, δ) — the Binomial mechanism's Rényi DP with Eq. 10's sensitivities,
`dp_fl.accounting.cpsgd.trials_for_epsilon` — reaches the target. Reported: bits per
coordinate ⌈log₂(k + m)⌉ (Thm. 3/4's communication: a client's message without secure
aggregation), the secure-sum width
⌈log₂(n(k−1+m)+1)⌉ (what each client sends per coordinate *under* secure aggregation), the
MSE bound (`Protocol.mse_bound`) and the measured MSE (mean ± std over --trials runs), and
both as ratios to Thm. 2's Gaussian MSE dσ²/n (the paper's reference; the exactly calibrated
Gaussian, Balle & Wang 2018, is reported beside it as `gaussian_exact_mse`).

**Measured MSE.** One run of a cpSGD protocol is `cpsgd.Protocol.mean_estimate` computed in
an order that shares work: per repetition the public rotation is drawn once and every client
chunk is clipped and rotated once, then quantized by s_k for every k (`cpsgd.quantize`), the
level indices summed; for each ε the noise of the sum, Σ_i Bin(m, p) = Bin(nm, p) per
coordinate, is added, the sum reduced modulo 2^b (secure aggregation; nothing wraps) and
decoded (`Protocol.decode`). This has exactly the distribution of `mean_estimate` (tested);
rows at one k share the quantization draw. The Gaussian is measured as X̄ + N(0, σ²/n · I).

**Distributed discrete Gaussian** (`tff.aggregators.DistributedDpSumFactory` in TFF 0.87,
mechanism 'distributed_dgauss', rotation 'hd', β = 0, modclip_prob = 1e-4). With noise
multiplier z, each client rotates, clips to c = D, scales by γ⁻¹ (`_heuristic_scale_factor`:
k_stddevs = 3.9 standard deviations of the aggregate fit in 2^B), rounds stochastically to
integers (L2 norm <= c/γ + √d' after rounding, the "inflated" bound), adds discrete Gaussian
noise N_Z(0, σ²) with σ = ⌈z c/(γ√n)⌉ (TFF's sampler rounds the scale up), and the sum is
taken modulo 2^B. TFF states no guarantee (its DP event is `UnsupportedDpEvent`); we account
it by Prop. 14 of Kairouz, Liu & Steinke (arXiv:2102.06387) for the sum of n independent
N_Z(0, σ²) shares, with replace-one sensitivities Δ₂ = 2 × TFF's scaled inflated L2 bound and
Δ₁ = 2 × its scaled L1 bound:

    RDP(α) = min{ α/2 · μ₂² + τ d',  α/2 (μ₂² + 2μ₁τ + τ² d'),  α/2 (μ₂ + τ√d')² },
    μ_q = Δ_q/(√n σ),   τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k+1)),

converted to (ε, δ) at the same δ by dp_accounting's RDP conversion, and z is the smallest
noise multiplier reaching the target ε (`dgauss_setting`). Bits per coordinate = B (the
client's message and the secure-sum modulus are both B bits). The TFF run uses the test C++
context (secure-sum intrinsics compiled to plain sums) on the first input of --inputs (its
'hd' rotation makes its error input-independent up to modular wrap-around), --dgauss_trials
times; TFF draws its own seeds (not --seed). Its MSE "bound" is d'(σ² + 1/4)/(n γ⁻²), the
discrete Gaussian's variance (<= σ²) plus stochastic rounding's (<= 1/4), without wraps.

Writes table.json, table.md and dme.png to --out_dir; prints the Markdown table (or JSON
with --format json). Default run: n = 1000, d = 2^14, ε ∈ {1, 2, 4}, δ = 1e-5, 3 repetitions,
about 13 minutes on a busy 2-core machine (9 of them calibrating the 54 values of m by the
Rényi accountant, each once for all inputs):

  .venv/bin/python -m scripts.cpsgd_dme --out_dir docs/results/cpsgd_dme
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import sys
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from dp_fl import _checks
from dp_fl import exits
from dp_fl import files
from dp_fl import runtime
from dp_fl.accounting import cpsgd as cpsgd_accounting
from dp_fl.accounting import zcdp
from dp_fl.mechanisms import cpsgd
from dp_fl.training import figures

CLIP_NORM = 1.0  # D. Every MSE ratio below is invariant to it.
BINOMIAL_P = 0.5  # p of paper 000's experiments (Fig. 2).
PARTICIPATIONS = 1  # One DME round.
GAUSSIAN = "gaussian"
DGAUSS = "dgauss"
# Rows of clients processed at once: about 2^19 float64 coordinates (4 MB, cache-friendly).
_CHUNK_COORDINATES = 1 << 19
_INPUT_MEMORY_LIMIT_BYTES = 4 << 30  # The inputs are held as float32 (n × d).
# TFF 0.87's DistributedDpSumFactory settings we keep at their defaults.
DGAUSS_MODCLIP_PROB = 1e-4
DGAUSS_BETA = 0.0
DGAUSS_MAX_BITS = 22  # TFF's own limit (float32 arithmetic inside).
# RDP orders of the discrete Gaussian accounting (integers, as in the DDG paper's code).
_DGAUSS_ORDERS = tuple(float(a) for a in range(2, 257)) + (320.0, 384.0, 512.0, 768.0,
                                                           1024.0, 2048.0, 4096.0)
_DGAUSS_NOISE_MULTIPLIER_RANGE = (1e-3, 1e4)


# ----------------------------------------------------------------------------- inputs

def _sphere(rng: np.random.Generator, num_clients: int, dimension: int) -> np.ndarray:
  out = np.empty((num_clients, dimension), np.float32)
  chunk_rows = max(1, _CHUNK_COORDINATES // dimension)
  for start in range(0, num_clients, chunk_rows):
    g = rng.standard_normal((min(chunk_rows, num_clients - start), dimension))
    out[start:start + chunk_rows] = g * (CLIP_NORM / np.linalg.norm(g, axis=1, keepdims=True))
  return out


def _spike(rng: np.random.Generator, num_clients: int, dimension: int) -> np.ndarray:
  del rng  # Deterministic.
  out = np.zeros((num_clients, dimension), np.float32)
  out[:, 0] = CLIP_NORM
  return out


def _skewed(rng: np.random.Generator, num_clients: int, dimension: int) -> np.ndarray:
  out = _sphere(rng, num_clients, dimension) * np.float32(math.sqrt(0.1))
  heavy = rng.integers(0, min(4, dimension), size=num_clients)
  out[np.arange(num_clients), heavy] += np.float32(math.sqrt(0.9) * CLIP_NORM)
  return out * (CLIP_NORM / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class InputKind:
  """A synthetic data set: n vectors of L2 norm D."""
  name: str
  description: str
  make: Callable[[np.random.Generator, int, int], np.ndarray]


INPUTS = {i.name: i for i in (
    InputKind("sphere", "uniform on the sphere of radius D (every coordinate ~ D/√d)", _sphere),
    InputKind("spike", "every client holds D·e₁ (the whole norm on one coordinate)", _spike),
    InputKind("skewed", "90% of the squared norm on one of 4 coordinates, the rest uniform "
              "on the sphere", _skewed),
)}


# ----------------------------------------------------------------------------- cpSGD

@dataclasses.dataclass(frozen=True)
class Variant:
  """One cpSGD protocol family: whether it rotates, and which X_max it uses."""
  name: str
  label: str
  rotate: bool
  rotated_x_max: bool  # Thm. 4's X_max (True) or X_max = D (False).
  source: str

  def x_max(self, num_clients: int, dimension: int, delta: float) -> float:
    if self.rotated_x_max:
      return cpsgd.rotated_x_max(CLIP_NORM, num_clients, dimension, delta)
    return CLIP_NORM

  def accounting_dimension(self, dimension: int) -> int:
    """The dimension of the integer query: d' (padded) with rotation, d without."""
    return cpsgd.padded_dimension(dimension) if self.rotate else dimension


VARIANTS = {v.name: v for v in (
    Variant("cpsgd_rot", "Rot(s_k(Bin(m,p)), HA)", True, True, "Thm. 4"),
    Variant("cpsgd_norot", "s_k(Bin(m,p)), X_max = D", False, False, "Thm. 3"),
    Variant("cpsgd_norot_small_xmax", "s_k(Bin(m,p)), Thm. 4's X_max, no rotation", False,
            True, "ablation"),
)}


def cpsgd_mean_estimates(vectors: np.ndarray, protocols: Sequence[cpsgd.Protocol],
                         rng: np.random.Generator) -> tuple[list[np.ndarray], int]:
  """One run of every protocol on `vectors`: the server's estimates of the mean, in order.

  The protocols must share `rotate`, `x_max` and `clip_norm` (one `Variant`); they may differ
  in k, m and p. Same distribution as `protocol.mean_estimate(vectors, rng)` for each (see
  the module docstring); also returns how many (client, coordinate) values s_k clipped to
  ±X_max.
  """
  first = protocols[0]
  if any((p.rotate, p.x_max, p.clip_norm) != (first.rotate, first.x_max, first.clip_norm)
         for p in protocols):
    raise ValueError("cpsgd_mean_estimates needs protocols of one variant (same rotate, "
                     "x_max and clip_norm).")
  n, d = vectors.shape
  signs = cpsgd.rademacher_signs(rng, d) if first.rotate else None
  width = cpsgd.padded_dimension(d) if first.rotate else d
  levels = sorted({p.num_levels for p in protocols})
  level_sums = {k: np.zeros(width, np.int64) for k in levels}
  clipped = 0
  chunk_rows = max(1, _CHUNK_COORDINATES // width)
  for start in range(0, n, chunk_rows):
    chunk = cpsgd.clip_l2(vectors[start:start + chunk_rows].astype(np.float64),
                          first.clip_norm)
    if signs is not None:
      chunk = cpsgd.rotate(chunk, signs)
    clipped += int(np.count_nonzero(np.abs(chunk) > first.x_max))
    for k in levels:  # s_k of every client in the chunk (Eq. 8), summed.
      level_sums[k] += cpsgd.quantize(chunk, k, first.x_max, rng).sum(axis=0)
  estimates = []
  for protocol in protocols:
    k, m = protocol.num_levels, protocol.num_trials
    noise = rng.binomial(n * m, protocol.p, size=width) if m else 0  # Σ_i Bin(m, p).
    message_sum = (level_sums[k] + noise) % (1 << cpsgd.secure_sum_bits(n, k, m))
    estimates.append(protocol.decode(message_sum, n, float(n), d, signs))
  return estimates, clipped


# ----------------------------------------------------------------------------- DGauss

@dataclasses.dataclass(frozen=True)
class DgaussSetting:
  """What TFF's distributed discrete Gaussian aggregator does at one noise multiplier.

  Attributes:
    noise_multiplier: z (central noise std / c, before scaling and rounding up).
    bits: B.
    scale_factor: γ⁻¹ of `_heuristic_scale_factor`, capped at `MAX_SCALE_FACTOR`.
    scaled_inflated_l2: TFF's norm bound on a client's rounded, scaled vector.
    scaled_l1: TFF's L1 bound, ⌈L2 · min(√d', L2)⌉.
    local_stddev: z c/√n · γ⁻¹, the local noise scale TFF states.
    sampled_stddev: ⌈local_stddev⌉, the scale its discrete Gaussian sampler uses.
    padded_dimension: d'.
    epsilon: ε at δ by Prop. 14 of arXiv:2102.06387 (replace-one), `dgauss_epsilon`.
    rdp_order: the Rényi order achieving it.
    tau: τ of Prop. 14.
  """
  noise_multiplier: float
  bits: int
  scale_factor: float
  scaled_inflated_l2: float
  scaled_l1: float
  local_stddev: float
  sampled_stddev: int
  padded_dimension: int
  epsilon: float
  rdp_order: float
  tau: float

  def mse_bound(self, num_clients: int) -> float:
    """d'(σ² + 1/4)/(n γ⁻²): noise (variance <= σ²) and rounding (<= 1/4), no wraps."""
    return (self.padded_dimension * (self.sampled_stddev ** 2 + 0.25)
            / (num_clients * self.scale_factor ** 2))


def dgauss_epsilon(l2_sensitivity: float, l1_sensitivity: float, sampled_stddev: float,
                   num_clients: int, dimension: int, delta: float
                   ) -> tuple[float, float, float]:
  """(ε, order, τ) of the sum of n shares N_Z(0, σ²)^d at δ (Prop. 14 of arXiv:2102.06387).

  Args:
    l2_sensitivity, l1_sensitivity: Δ₂, Δ₁ of the integer sum between neighbours.
    sampled_stddev: σ of each client's discrete Gaussian share.
    num_clients: n, the number of shares.
    dimension: d' (coordinates of the sum).
    delta: δ.
  """
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  n = _checks.check_positive_int("num_clients", num_clients)
  sigma = _checks.check_positive("sampled_stddev", sampled_stddev)
  shares = np.arange(1, n, dtype=np.float64)
  tau = 10.0 * float(np.sum(np.exp(-2.0 * math.pi ** 2 * sigma ** 2 * shares / (shares + 1))))
  mu2 = l2_sensitivity / (math.sqrt(n) * sigma)
  mu1 = l1_sensitivity / (math.sqrt(n) * sigma)
  alpha = np.asarray(_DGAUSS_ORDERS)
  rdp = np.minimum.reduce([
      alpha / 2 * mu2 ** 2 + tau * dimension,
      alpha / 2 * (mu2 ** 2 + 2 * mu1 * tau + tau ** 2 * dimension),
      alpha / 2 * (mu2 + math.sqrt(dimension) * tau) ** 2])
  epsilon, order = rdp_privacy_accountant.compute_epsilon(alpha, rdp, delta)
  return float(epsilon), float(order), tau


def dgauss_parameters(noise_multiplier: float, num_clients: int, dimension: int, bits: int,
                      delta: float) -> DgaussSetting:
  """What `DistributedDpSumFactory(noise_multiplier, n, bits, c, mechanism=
  'distributed_dgauss', rotation_type='hd')` will use, by TFF 0.87's own functions, and its ε.
  """
  from tensorflow_federated.python.aggregators import discretization  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
  padded = cpsgd.padded_dimension(dimension)
  local = noise_multiplier * CLIP_NORM / math.sqrt(num_clients)
  k_stddevs = distributed_dp._clip_prob_to_num_stddevs(DGAUSS_MODCLIP_PROB)  # pylint: disable=protected-access
  scale = float(distributed_dp._heuristic_scale_factor(  # pylint: disable=protected-access
      local, CLIP_NORM, bits, num_clients, padded, k_stddevs).numpy())
  if not scale > 0:  # NaN when 2^(2B) < n k_stddevs² (TFF's factory rejects those too).
    raise ValueError(f"B = {bits} bits cannot hold {k_stddevs:.2f} standard deviations of "
                     f"the sum of {num_clients} clients (TFF needs 2^(2B) >= n·k²); use "
                     "more bits.")
  scale = min(scale, distributed_dp.MAX_SCALE_FACTOR)
  inflated = float(discretization.inflated_l2_norm_bound(
      l2_norm_bound=CLIP_NORM, gamma=1.0 / scale, beta=DGAUSS_BETA, dim=padded).numpy())
  scaled_l2 = (inflated + 1e-5) * scale  # TFF's leeway included, as in its DP query.
  scaled_l1 = float(math.ceil(scaled_l2 * min(math.sqrt(padded), scaled_l2)))
  local_scaled = float(np.float32(local * scale))  # TFF's query state is float32.
  sampled = max(1, math.ceil(local_scaled))
  epsilon, order, tau = dgauss_epsilon(2.0 * scaled_l2, 2.0 * scaled_l1, sampled, num_clients,
                                       padded, delta)
  return DgaussSetting(noise_multiplier, bits, scale, scaled_l2, scaled_l1, local_scaled,
                       sampled, padded, epsilon, order, tau)


def dgauss_setting(epsilon: float, delta: float, num_clients: int, dimension: int,
                   bits: int) -> DgaussSetting:
  """The smallest noise multiplier z (to 0.1%) whose `dgauss_parameters` reach ε at δ.

  ε is non-increasing in z (the scaled sensitivity falls and ⌈σ⌉ grows), so a bisection on
  log z keeps the upper end, whose ε is <= the target.

  Raises:
    ValueError: when no z up to 1e4 reaches ε: B bits leave too coarse a grid (TFF's
      rounding inflates the sensitivity by √d' grid steps).
  """
  low, high = _DGAUSS_NOISE_MULTIPLIER_RANGE
  best = dgauss_parameters(high, num_clients, dimension, bits, delta)
  if best.epsilon > epsilon:
    raise ValueError(
        f"no noise multiplier <= {high:g} reaches ε = {epsilon:g} at B = {bits} bits "
        f"(n = {num_clients}, d' = {best.padded_dimension}): the grid is too coarse "
        f"(scale {best.scale_factor:.3g}, rounding inflates the L2 bound to "
        f"{best.scaled_inflated_l2 / best.scale_factor:.3g}·c); use more bits.")
  while high / low > 1.001:
    middle = math.sqrt(low * high)
    candidate = dgauss_parameters(middle, num_clients, dimension, bits, delta)
    if candidate.epsilon <= epsilon:
      high, best = middle, candidate
    else:
      low = middle
  return best


def dgauss_sum(setting: DgaussSetting, vectors: np.ndarray) -> np.ndarray:
  """One round of TFF's distributed discrete Gaussian aggregator: the decoded noisy sum.

  Checks that the process TFF built uses the scale, norm bound and noise `setting` was
  accounted with.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
  n, d = vectors.shape
  factory = distributed_dp.DistributedDpSumFactory(
      noise_multiplier=setting.noise_multiplier, expected_clients_per_round=n,
      bits=setting.bits, l2_clip=CLIP_NORM, modclip_prob=DGAUSS_MODCLIP_PROB,
      beta=DGAUSS_BETA, mechanism="distributed_dgauss", rotation_type="hd")
  process = factory.create(tff.TensorType(np.float32, [d]))
  state = process.initialize()
  _, discrete, dp_state = factory._unpack_state(state)  # pylint: disable=protected-access
  query = dp_state.query_state
  built = (float(discrete["scale_factor"]), float(query.l2_norm_bound),
           float(query.local_stddev))
  expected = (setting.scale_factor, setting.scaled_inflated_l2, setting.local_stddev)
  if not np.allclose(built, expected, rtol=1e-4):
    raise RuntimeError(f"TFF's DistributedDpSumFactory built (scale, scaled L2 bound, local "
                       f"stddev) = {built}, but the accounting assumed {expected}.")
  output = process.next(state, list(vectors))
  return np.asarray(output.result, np.float64)


# ----------------------------------------------------------------------------- the study

@dataclasses.dataclass(frozen=True)
class Study:
  """The flags of one run, validated."""
  dimension: int
  clients: int
  epsilons: tuple[float, ...]
  levels: tuple[int, ...]
  delta: float
  repetitions: int
  inputs: tuple[str, ...]
  seed: int
  dgauss_bits: tuple[int, ...]
  dgauss_repetitions: int
  bounds_only: bool = False


def _summary(runs: Sequence[float]) -> tuple[Optional[float], Optional[float]]:
  if not runs:
    return None, None
  return float(np.mean(runs)), (float(np.std(runs, ddof=1)) if len(runs) > 1 else None)


def _finish(row: dict[str, Any]) -> dict[str, Any]:
  """Mean ± std of the measured MSE and both MSEs as ratios to Thm. 2's Gaussian."""
  row["mse_measured"], row["mse_measured_std"] = _summary(row["mse_runs"])
  row["repetitions"] = len(row["mse_runs"])
  row["clipped_values"] = (float(np.mean(row["clipped_runs"])) if row["clipped_runs"]
                           else None)
  g = row["gaussian_mse"]
  for key in ("mse_bound", "mse_measured", "mse_measured_std"):
    value = row[key]
    row["ratio" + key[3:]] = None if value is None else value / g
  return row


def _base_row(study: Study, input_name: str, method: str, epsilon: float) -> dict[str, Any]:
  n, d = study.clients, study.dimension
  return dict(
      input=input_name, method=method, epsilon=epsilon, delta=study.delta, levels=None,
      binomial_trials=None, p=None, x_max=None, bits_per_coordinate=None, secure_sum_bits=None,
      epsilon_reached=None, mse_bound=None, mse_runs=[], clipped_runs=[],
      gaussian_mse=cpsgd.gaussian_mse(CLIP_NORM, n, d, epsilon, study.delta),
      gaussian_exact_mse=d * (CLIP_NORM * zcdp.noise_multiplier_for_epsilon(
          2.0, epsilon, study.delta)) ** 2 / n ** 2,
      note="")


@functools.lru_cache(maxsize=None)
def _calibrate(levels: int, x_max: float, dimension: int, clients: int, epsilon: float,
               delta: float) -> tuple[int, float]:
  """(m, the ε it reaches): the same for every input (and for variants sharing X_max and
  d), so each is computed once — the Rényi accountant takes seconds per calibration."""
  m = cpsgd_accounting.trials_for_epsilon(levels, BINOMIAL_P, x_max, CLIP_NORM, dimension,
                                          clients, PARTICIPATIONS, epsilon, delta)
  guarantee = cpsgd_accounting.composed_epsilon(levels, m, BINOMIAL_P, x_max, CLIP_NORM,
                                                dimension, clients, PARTICIPATIONS, delta)
  return m, guarantee.epsilon


def plan_cpsgd(study: Study, input_name: str) -> dict[str, list[tuple[dict, Any]]]:
  """Per variant, (row, Protocol or None) for every (ε, k): m calibrated, bounds computed."""
  n, d, delta = study.clients, study.dimension, study.delta
  plans: dict[str, list[tuple[dict, Any]]] = {}
  for variant in VARIANTS.values():
    x_max = variant.x_max(n, d, delta)
    dim = variant.accounting_dimension(d)
    plans[variant.name] = []
    for epsilon in study.epsilons:
      for k in study.levels:
        row = _base_row(study, input_name, variant.name, epsilon)
        row.update(levels=k, p=BINOMIAL_P, x_max=x_max, note=variant.source)
        try:
          m, epsilon_reached = _calibrate(k, x_max, dim, n, epsilon, delta)
        except ValueError as e:
          row["note"] = f"{variant.source}; not reachable: {e}"
          plans[variant.name].append((row, None))
          continue
        protocol = cpsgd.Protocol(k, m, BINOMIAL_P, x_max, CLIP_NORM, variant.rotate)
        row.update(binomial_trials=m, bits_per_coordinate=protocol.bits_per_coordinate,
                   secure_sum_bits=cpsgd.secure_sum_bits(n, k, m),
                   epsilon_reached=epsilon_reached,
                   mse_bound=protocol.mse_bound(n, d, delta))
        plans[variant.name].append((row, protocol))
  return plans


def _progress(message: str) -> None:
  print(f"[cpsgd_dme {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _measure(vectors: np.ndarray, gaussian_rows: list[dict[str, Any]],
             plans: dict[str, list[tuple[dict, Any]]], seeds: Sequence[np.random.SeedSequence],
             progress: Callable[[str], None]) -> None:
  """Appends one measured MSE per repetition to every Gaussian and cpSGD row."""
  n, d = vectors.shape
  mean = vectors.astype(np.float64).mean(axis=0)
  for rep, seed in enumerate(seeds):
    progress(f"{gaussian_rows[0]['input']}: repetition {rep + 1}/{len(seeds)} (n = {n}, "
             f"d = {d})")
    rng = np.random.default_rng(seed)
    for row in gaussian_rows:  # X̄ + N(0, σ²/n · I): per coordinate variance MSE/d.
      noise = rng.normal(0.0, math.sqrt(row["gaussian_mse"] / d), size=d)
      row["mse_runs"].append(float(noise @ noise))
    for plan in plans.values():
      ready = [(row, protocol) for row, protocol in plan if protocol is not None]
      if not ready:
        continue
      estimates, clipped = cpsgd_mean_estimates(vectors, [p for _, p in ready], rng)
      for (row, _), estimate in zip(ready, estimates):
        error = estimate - mean
        row["mse_runs"].append(float(error @ error))
        row["clipped_runs"].append(clipped)


def run(study: Study, progress: Callable[[str], None] = _progress) -> dict[str, Any]:
  """Every row of the study (see the module docstring), with the configuration."""
  n, d = study.clients, study.dimension
  started = time.perf_counter()
  rows: list[dict[str, Any]] = []
  root = np.random.SeedSequence(study.seed)
  dgauss_input = None
  for input_index, (input_name, seeds) in enumerate(
      zip(study.inputs, root.spawn(len(study.inputs)))):
    gaussian_rows = [_base_row(study, input_name, GAUSSIAN, e) for e in study.epsilons]
    for row in gaussian_rows:
      row.update(mse_bound=row["gaussian_mse"], epsilon_reached=row["epsilon"],
                 note="Thm. 2 (classical Gaussian mechanism bound)")
      if row["gaussian_exact_mse"] > row["gaussian_mse"]:  # Large ε: Lemma 1 needs ε < 1.
        row["note"] += ("; NOT a valid (ε, δ) calibration here: its σ is below the exact "
                        "Gaussian's")
    plans = plan_cpsgd(study, input_name)
    if not study.bounds_only:
      data_seed, *rep_seeds = seeds.spawn(1 + study.repetitions)
      vectors = INPUTS[input_name].make(np.random.default_rng(data_seed), n, d)
      _measure(vectors, gaussian_rows, plans, rep_seeds, progress)
      if input_index == 0:
        dgauss_input = vectors
      del vectors
    rows += gaussian_rows
    for plan in plans.values():
      rows += [row for row, _ in plan]
  if study.dgauss_bits:
    rows += run_dgauss(study, study.inputs[0], dgauss_input, progress=progress)
  return {
      "setting": dict(dimension=d, padded_dimension=cpsgd.padded_dimension(d), clients=n,
                      epsilons=list(study.epsilons), levels=list(study.levels),
                      delta=study.delta, repetitions=study.repetitions,
                      inputs=list(study.inputs),
                      seed=study.seed, dgauss_bits=list(study.dgauss_bits),
                      dgauss_repetitions=study.dgauss_repetitions,
                      bounds_only=study.bounds_only, clip_norm=CLIP_NORM,
                      binomial_p=BINOMIAL_P, participations=PARTICIPATIONS),
      "inputs": {name: INPUTS[name].description for name in study.inputs},
      "rows": [_finish(row) for row in rows],
      "seconds": round(time.perf_counter() - started, 1),
  }


def run_dgauss(study: Study, input_name: str, vectors: Optional[np.ndarray],
               progress: Callable[[str], None] = _progress) -> list[dict[str, Any]]:
  """The `dgauss` rows: z calibrated per (ε, B), measured in TFF on `vectors` (if given)."""
  n, d = study.clients, study.dimension
  rows = []
  with (runtime.execution_context() if vectors is not None else contextlib.nullcontext()):
    for epsilon in study.epsilons:
      for bits in study.dgauss_bits:
        row = _base_row(study, input_name, DGAUSS, epsilon)
        row.update(bits_per_coordinate=bits, secure_sum_bits=bits,
                   note="TFF DistributedDpSumFactory('distributed_dgauss', 'hd')")
        rows.append(row)
        try:
          setting = dgauss_setting(epsilon, study.delta, n, d, bits)
        except ValueError as e:
          row["note"] = f"not reachable: {e}"
          continue
        row.update(epsilon_reached=setting.epsilon, mse_bound=setting.mse_bound(n),
                   dgauss=dataclasses.asdict(setting))
        if vectors is None:
          continue
        mean = vectors.astype(np.float64).mean(axis=0)
        for rep in range(study.dgauss_repetitions):
          progress(f"{input_name}: TFF distributed discrete Gaussian, ε = {epsilon:g}, "
                   f"B = {bits}, z = {setting.noise_multiplier:.4g} ({rep + 1}/"
                   f"{study.dgauss_repetitions})")
          error = dgauss_sum(setting, vectors) / n - mean
          row["mse_runs"].append(float(error @ error))
  return rows


# ----------------------------------------------------------------------------- output

def _fmt(value: Optional[float], spec: str = ".3g") -> str:
  return "—" if value is None else format(value, spec)


def _pm(mean: Optional[float], std: Optional[float]) -> str:
  if mean is None:
    return "—"
  return _fmt(mean) + ("" if std is None else f" ± {std:.2g}")


def markdown(output: dict[str, Any]) -> str:
  s = output["setting"]
  lines = [f"# DME: MSE vs bits vs ε (paper 000, Sec. 4) — n = {s['clients']}, d = "
           f"{s['dimension']}, δ = {s['delta']:g}, p = {s['binomial_p']}, "
           f"{s['repetitions']} repetitions", ""]
  for name, description in output["inputs"].items():
    lines.append(f"- input `{name}`: {description}")
  for variant in VARIANTS.values():
    lines.append(f"- `{variant.name}`: {variant.label} ({variant.source})")
  lines.append(f"- `{DGAUSS}`: TFF's distributed discrete Gaussian at B bits (ε by Prop. 14 "
               "of arXiv:2102.06387)")
  lines += ["", "Ratios are to Thm. 2's Gaussian MSE (ratio 1); `bits` = bits per coordinate "
            "of a client's message (⌈log₂(k+m)⌉ for cpSGD, B for dgauss), `SecAgg` = the "
            "secure-sum width.", ""]
  for input_name in output["inputs"]:
    for epsilon in s["epsilons"]:
      rows = [r for r in output["rows"]
              if r["input"] == input_name and r["epsilon"] == epsilon]
      if not rows:
        continue
      lines += [f"## `{input_name}`, ε = {epsilon:g} (Gaussian MSE "
                f"{rows[0]['gaussian_mse']:.4g}; exactly calibrated Gaussian "
                f"{rows[0]['gaussian_exact_mse']:.4g})", "",
                "| method | k | m | bits | SecAgg | ε reached | MSE measured | MSE bound | "
                "ratio measured | ratio bound | clipped | note |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
      for r in rows:
        lines.append(
            f"| {r['method']} | {_fmt(r['levels'], 'd')} | {_fmt(r['binomial_trials'], 'd')} | "
            f"{_fmt(r['bits_per_coordinate'], 'd')} | {_fmt(r['secure_sum_bits'], 'd')} | "
            f"{_fmt(r['epsilon_reached'], '.4g')} | "
            f"{_pm(r['mse_measured'], r['mse_measured_std'])} | {_fmt(r['mse_bound'])} | "
            f"{_pm(r['ratio_measured'], r['ratio_measured_std'])} | "
            f"{_fmt(r['ratio_bound'])} | {_fmt(r['clipped_values'])} | "
            f"{r['note'][:160]} |")
      lines.append("")
  lines.append(f"({output['seconds']:.0f} s)")
  return "\n".join(lines) + "\n"


_STYLES = {"cpsgd_rot": ("-", "o"), "cpsgd_norot": ("--", "s"),
           "cpsgd_norot_small_xmax": (":", "^"), DGAUSS: ("-.", "D")}


def figure(output: dict[str, Any]) -> Any:
  """Measured MSE ratio to Thm. 2's Gaussian vs bits per coordinate (left: a client's
  message, right: the secure-sum width), one curve per (method, ε), one row per input.
  With --bounds_only, the ratio of the MSE bounds."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  s = output["setting"]
  ratio_key = "ratio_bound" if s["bounds_only"] else "ratio_measured"
  inputs = list(output["inputs"])
  fig = Figure(figsize=(12.0, 0.6 + 4.0 * len(inputs)))
  axes = fig.subplots(len(inputs), 2, squeeze=False)
  colors = {e: f"C{i}" for i, e in enumerate(s["epsilons"])}
  for row_axes, input_name in zip(axes, inputs):
    for ax, bits_key, xlabel in zip(
        row_axes, ("bits_per_coordinate", "secure_sum_bits"),
        ("bits per coordinate of a client's message (cpSGD: ⌈log₂(k+m)⌉; DGauss: B)",
         "secure-aggregation width per coordinate (cpSGD: ⌈log₂(n(k−1+m)+1)⌉; DGauss: B)")):
      for method, (line, marker) in _STYLES.items():
        for epsilon in s["epsilons"]:
          points = sorted((r[bits_key], r[ratio_key]) for r in output["rows"]
                          if r["input"] == input_name and r["method"] == method
                          and r["epsilon"] == epsilon and r[ratio_key] is not None)
          if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, line, marker=marker, color=colors[epsilon], markersize=4,
                    label=f"{method}, ε = {epsilon:g}")
      for epsilon in s["epsilons"]:
        exact = [r for r in output["rows"] if r["epsilon"] == epsilon][0]
        ax.axhline(exact["gaussian_exact_mse"] / exact["gaussian_mse"], color=colors[epsilon],
                   lw=0.7, alpha=0.6)
      ax.axhline(1.0, color="black", lw=1.0, label="Gaussian (Thm. 2) = 1")
      ax.set_yscale("log")
      ax.set_xlabel(xlabel, fontsize=8)
      ax.set_ylabel("MSE / Gaussian MSE" + (" (bounds)" if s["bounds_only"] else
                                            " (measured)"), fontsize=8)
      ax.set_title(f"input `{input_name}`", fontsize=9)
      ax.grid(alpha=0.3, which="both")
  fig.suptitle(f"DME (paper 000, Sec. 4): n = {s['clients']}, d = {s['dimension']}, "
               f"δ = {s['delta']:g}, p = {s['binomial_p']}; thin lines: exactly calibrated "
               "Gaussian (Balle & Wang) at each ε", fontsize=10)
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7,
             bbox_to_anchor=(0.5, -0.07 if len(inputs) > 1 else -0.16))
  fig.tight_layout()
  return fig


# ----------------------------------------------------------------------------- flags

def _list_of(kind: Callable[[str], Any], what: str) -> Callable[[str], tuple]:
  def parse(text: str) -> tuple:
    if text.strip().lower() == "none" and what == "bit widths":
      return ()
    try:
      values = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
      raise argparse.ArgumentTypeError(
          f"{text!r} is not a comma-separated list of {what}") from None
    if not values:
      raise argparse.ArgumentTypeError(f"{text!r} is empty; give a comma-separated list of "
                                       f"{what}")
    return values
  return parse


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dimension", type=int, default=1 << 14, help="d (default 2^14)")
  parser.add_argument("--clients", type=int, default=1000, help="n (default 1000)")
  parser.add_argument("--epsilons", type=_list_of(float, "numbers"), default=(1.0, 2.0, 4.0),
                      help="target ε values, comma-separated")
  parser.add_argument("--levels", type=_list_of(int, "integers"),
                      default=(2, 4, 8, 16, 32, 64, 128, 256, 1024),
                      help="quantization levels k, comma-separated")
  parser.add_argument("--delta", type=float, default=1e-5,
                      help="total δ of every method's (ε, δ)")
  parser.add_argument("--trials", type=int, default=3,
                      help="repetitions of each measured cpSGD/Gaussian MSE")
  parser.add_argument("--inputs", type=_list_of(str, "input names"), default=("sphere", "spike"),
                      help=f"synthetic inputs, comma-separated, from {sorted(INPUTS)}")
  parser.add_argument("--seed", type=int, default=0, help="seed of the data and the protocols")
  parser.add_argument("--dgauss_bits", type=_list_of(int, "bit widths"),
                      default=(12, 14, 16, 20),
                      help="bit widths B of TFF's distributed discrete Gaussian, "
                           f"comma-separated (<= {DGAUSS_MAX_BITS}); 'none' skips it")
  parser.add_argument("--dgauss_trials", type=int, default=1,
                      help="TFF runs per (ε, B) of the distributed discrete Gaussian")
  parser.add_argument("--bounds_only", action="store_true",
                      help="calibrate m (and DGauss's z) and report the MSE bounds without "
                           "measuring anything (fast, any n and d)")
  parser.add_argument("--out_dir", default=None,
                      help="write table.json, table.md and dme.png here")
  parser.add_argument("--format", choices=("table", "json"), default="table")
  exits.add_debug_flag(parser)
  return parser.parse_args(argv)


def study_from_flags(args: argparse.Namespace) -> Study:
  """Validates the flags (ValueError naming the flag, its value and the fix)."""
  d = _checks.check_in_range("--dimension", args.dimension, 2, 1 << 20, integer=True)
  n = _checks.check_in_range("--clients", args.clients, 2, 10 ** 6, integer=True)
  if not args.bounds_only and n * d * 4 > _INPUT_MEMORY_LIMIT_BYTES:
    raise ValueError(f"--clients={n} × --dimension={d} float32 inputs take "
                     f"{n * d * 4 / 2 ** 30:.1f} GiB (> {_INPUT_MEMORY_LIMIT_BYTES >> 30} "
                     "GiB); lower --clients or --dimension (or pass --bounds_only).")
  epsilons = tuple(_checks.check_in_range("--epsilons", e, 1e-3, 100.0)
                   for e in args.epsilons)
  levels = tuple(_checks.check_in_range("--levels", k, 2, 1 << 20, integer=True,
                                        why="k >= 2 quantization levels")
                 for k in args.levels)
  delta = _checks.check_delta(args.delta, "--delta")
  repetitions = _checks.check_in_range("--trials", args.trials, 1, 1000, integer=True)
  unknown = [name for name in args.inputs if name not in INPUTS]
  if unknown:
    raise ValueError(f"--inputs: unknown input(s) {unknown}; choose from {sorted(INPUTS)}.")
  bits = tuple(_checks.check_in_range("--dgauss_bits", b, 1, DGAUSS_MAX_BITS, integer=True,
                                      why="TFF's DistributedDpSumFactory limit")
               for b in args.dgauss_bits)
  if bits and min(bits) < math.log2(n):
    raise ValueError(f"--dgauss_bits={','.join(map(str, bits))}: TFF needs B >= "
                     f"log2(--clients) = {math.log2(n):.2f}; raise B or pass 'none'.")
  dgauss_repetitions = _checks.check_in_range("--dgauss_trials", args.dgauss_trials, 1, 100,
                                              integer=True)
  return Study(d, n, tuple(sorted(set(epsilons))), tuple(sorted(set(levels))), delta,
               repetitions, tuple(dict.fromkeys(args.inputs)), args.seed,
               tuple(sorted(set(bits))), dgauss_repetitions, args.bounds_only)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  runtime.configure_logging(0)
  runtime.install_signal_handlers()

  def body() -> int:
    study = study_from_flags(args)
    output = run(study)
    if args.out_dir:  # Relative to where `bazel run` was called from, if it was.
      out_dir = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), args.out_dir)
      os.makedirs(out_dir, exist_ok=True)
      files.atomic_write_json(os.path.join(out_dir, "table.json"), output, indent=1)
      files.atomic_write_text(os.path.join(out_dir, "table.md"),
                              markdown(output) + "\n![MSE ratio vs bits](dme.png)\n")
      figures.save_figure(figure(output), os.path.join(out_dir, "dme.png"))
    print(json.dumps(output, indent=1) if args.format == "json" else markdown(output))
    return exits.COMPLETED

  return exits.guarded(body, debug=args.debug)


if __name__ == "__main__":
  sys.exit(main())
