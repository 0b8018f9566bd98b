"""Banded matrix factorization (BandMF) for multi-participation DP-FTRL.

BandMF is the mechanism of Choquette-Choo et al. 2023, "(Amplified) Banded
Matrix Factorization" (paper 004's ref. [8]), summarized in paper 004, Sec. 2.3
("BandMF") and compared with BLTs in Table 3 and Figs. 2-5.

Notation (paper 004, Sec. 2.3): A is the n x n lower-triangular matrix of ones
(prefix sums), A = B C with a lower-triangular strategy matrix C and B = A C^{-1}.
C has `bands` bands: C[i, j] = 0 whenever i - j >= bands. For bands = 3, n = 5:

    C = [c00                ]      band = [c00   0    0 ]
        [c10 c11            ]             [c11  c10   0 ]
        [c20 c21 c22        ]             [c22  c21  c20]
        [    c31 c32 c33    ]             [c33  c32  c31]
        [        c42 c43 c44]             [c44  c43  c42]

`band[t, j] = C[t, t - j]` (row t, j-th diagonal); entries with t - j < 0 lie
outside the matrix and are 0. Inside the objective a *column layout*
`V[j, r] = C[j + r, j]` is used, because the normalization acts on columns.

Sensitivity. Under the min-separation schema Pi(b, k) (paper 004, Sec. 3.1:
at most k participations, any two at least b = `min_sep` rounds apart) and
b >= bands, the columns of C that one user touches have disjoint row supports,
so Eq. 5 gives

    sens(C)^2 = max over patterns pi of sum_{i in pi} ||C[:, i]||^2,

which is k for a column-normalized C (every column of unit L2 norm). The
optimization of a column-normalized C is therefore independent of k (paper 004,
Fig. 2 caption). For b < bands the supports overlap and this formula does not
apply: use the general bound of `dp_fl.mechanisms.sensitivity` for such b.

Errors and losses (paper 004, Sec. 3.2): MaxError(B) is the largest row norm of
B, RmsError(B)^2 = ||B||_F^2 / n, MaxLoss = sens * MaxError (Eq. 9) and
RmsLoss = sens * RmsError (Eq. 10). BandMF minimizes RmsLoss (Table 1).

The objective (`SquaredErrorObjective`; n RmsLoss^2 / k for a column-normalized C
and b >= bands), minimized by `banded_optimize.optimize_banded`, is

    f(C) = ||A C^{-1}||_F^2 = ||L^{-1}||_F^2,    L = C A^{-1},

with A^{-1} the bidiagonal difference matrix, so L is lower-triangular with
bands + 1 bands. With B = L^{-1} and P = B^T B, the gradient is
df/dL = -2 P B^T (needed on the bands of L only) and
df/dC[i, j] = df/dL[i, j] - df/dL[i, j - 1]. One evaluation is a block
inverse of the banded L (n^2 bands / 2 multiply-adds), one `lauum` (n^3 / 6)
and a band-restricted product (~n^2 bands), in float64 LAPACK/BLAS: O(n^3)
time, O(n^2) memory.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping

import numpy as np
from scipy.linalg import blas
from scipy.linalg import lapack

from dp_fl import _checks
from dp_fl.mechanisms import sensitivity
from dp_fl.mechanisms import streaming

MECHANISM_NAME = "bandmf"
_JSON_VERSION = 1

# Column block of the band-restricted product (measured: 96-128 is fastest).
_BLOCK = 112


# ---------------------------------------------------------------------------
# Settings, validation and layout helpers.


@dataclasses.dataclass(frozen=True)
class BandedSetting:
  """What a BandMF was optimized for: n rounds, `bands` bands, Pi(min_sep, k).

  `max_participations` is the effective k (<= ceil(n / min_sep)).
  """
  n: int
  bands: int
  min_sep: int
  max_participations: int

  def __post_init__(self):
    for name in ("n", "bands", "min_sep", "max_participations"):
      object.__setattr__(self, name,
                         _checks.check_positive_int(name, getattr(self, name)))
    if self.bands > self.n:
      raise ValueError(
          f"`bands` must be <= n={self.n} (C is n x n); got {self.bands}.")
    feasible, _ = sensitivity.feasible_participations(self.n, self.min_sep)
    if self.max_participations > feasible:
      raise ValueError(
          f"`max_participations` must be the effective k <= ceil(n / min_sep)="
          f"{feasible}; got {self.max_participations}.")

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def check_sizes(n: Any, bands: Any) -> tuple[int, int]:
  n = _checks.check_positive_int("n", n)
  bands = _checks.check_positive_int("bands", bands)
  if bands > n:
    raise ValueError(
        f"`bands` must be <= n={n} (C is n x n; bands=n is a full "
        f"lower-triangular C); got {bands}.")
  return n, bands


def column_mask(n: int, bands: int) -> np.ndarray:
  """mask[j, r] = (j + r < n): entry r of column j lies inside C."""
  return (np.arange(n)[:, None] + np.arange(bands)[None, :]) < n


def rows_to_columns(band: np.ndarray) -> np.ndarray:
  """band[t, r] = C[t, t - r]  ->  V[j, r] = C[j + r, j]."""
  n, bands = band.shape
  cols = np.zeros((n, bands))
  for r in range(bands):
    cols[:n - r, r] = band[r:, r]
  return cols


def columns_to_rows(cols: np.ndarray) -> np.ndarray:
  """V[j, r] = C[j + r, j]  ->  band[t, r] = C[t, t - r]."""
  n, bands = cols.shape
  band = np.zeros((n, bands))
  for r in range(bands):
    band[r:, r] = cols[:n - r, r]
  return band


def _flat_band_indices(n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
  """(mask, flat) for the entries (j + r, j), r < width, of an n x n F-array.

  mask[j, r] = (j + r < n) and flat holds the F-order flat indices
  (j + r) + j n of the valid entries in row-major (j, r) order, so that
  `dense.reshape(-1, order="F")[flat] = layout[mask]` writes whole column
  segments (contiguous in memory) at once.
  """
  mask = column_mask(n, width)
  j, r = np.nonzero(mask)
  return mask, (j + r) + j * n


def normalize_columns(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  norms = np.sqrt(np.einsum("ij,ij->i", cols, cols))
  return cols / norms[:, None], norms


def _difference_columns(cols: np.ndarray) -> np.ndarray:
  """Columns of L = C A^{-1}: L[j + r, j] = C[j + r, j] - C[j + r, j + 1].

  In column layout C[j + r, j + 1] = V[j + 1, r - 1], so L has bands + 1 bands.
  """
  n, bands = cols.shape
  out = np.zeros((n, bands + 1))
  out[:, :bands] = cols
  out[:n - 1, 1:] -= cols[1:, :]
  return out


def sqrt_a_coefficients(bands: int) -> np.ndarray:
  """c_j = binom(2j, j) / 4^j, j < bands: C = LtToep(c) satisfies C^2 = A (the power series
  of (1 - x)^(-1/2)); positive and decreasing, computed as the product of (2j - 1) / (2j)."""
  j = np.arange(1, bands)
  return np.concatenate([[1.0], np.cumprod((2 * j - 1) / (2 * j))])


def sqrt_a_start(n: int, bands: int) -> np.ndarray:
  """Column layout of the truncated, column-normalized square root of A."""
  n, bands = check_sizes(n, bands)
  cols = np.tile(sqrt_a_coefficients(bands), (n, 1)) * column_mask(n, bands)
  return normalize_columns(cols)[0]


def square_root_factorization(n: int, bands: int) -> "BandedMF":
  """The banded square root of A: C = the `bands`-banded truncation of A^(1/2) =
  LtToep(sqrt_a_coefficients) with every column scaled to unit L2 norm (the BSR of Kalinin and
  Lampert, NeurIPS 2024, arXiv 2405.13763, in the column normalization BandMF uses for
  multiple participations; BandMF's coarsest start). Closed form, no optimization."""
  return BandedMF(columns_to_rows(sqrt_a_start(n, bands)))


# ---------------------------------------------------------------------------
# The objective f(C) = ||A C^{-1}||_F^2 and its gradient.


def _banded_lower_inverse(lower: np.ndarray, width: int) -> np.ndarray:
  """L^{-1} for an F-ordered lower-triangular L with L[i, j] = 0 if i - j > width.

  Blocks of size s >= width make L block-bidiagonal with upper-triangular
  sub-diagonal blocks, so block row I of the inverse is
  -L_II^{-1} L_{I,I-1} (block row I-1), restricted to the columns left of
  block I: two triangular products (dtrmm) per block, n^2 s / 2 multiply-adds
  instead of dtrtri's n^3 / 6.
  """
  n = lower.shape[0]
  s = max(width, _BLOCK)
  if 2 * s >= n:
    inv, info = lapack.dtrtri(lower, lower=1, overwrite_c=0)
    if info != 0:
      raise np.linalg.LinAlgError(f"C is singular (dtrtri info={info}).")
    return inv
  inv = np.zeros((n, n), order="F")
  for a0 in range(0, n, s):
    a1 = min(a0 + s, n)
    diag, info = lapack.dtrtri(lower[a0:a1, a0:a1], lower=1)
    if info != 0:
      raise np.linalg.LinAlgError(f"C is singular (dtrtri info={info}).")
    inv[a0:a1, a0:a1] = diag
    if a0 == 0:
      continue
    prev = inv[a0 - s:a0, :a0]
    coupling = lower[a0:a1, a0 - s:a0]
    if a1 - a0 == s:  # Square, upper-triangular coupling block.
      tmp = blas.dtrmm(1.0, coupling, prev, lower=0)
    else:
      tmp = coupling @ prev
    inv[a0:a1, :a0] = blas.dtrmm(-1.0, diag, tmp, lower=1)
  return inv


class SquaredErrorObjective:
  """f and df/dV for column-normalized C = V / ||V_j|| (see module docstring).

  Holds the dense n x n work arrays so repeated evaluations allocate little.
  """

  def __init__(self, n: int, bands: int):
    self.n = n
    self.bands = bands
    self.mask = column_mask(n, bands)
    self._l = np.zeros((n, n), order="F")
    self._l_flat = self._l.reshape(-1, order="F")  # A view (F-contiguous).
    self._grad = np.zeros((n, n), order="F")
    self._grad_flat = self._grad.reshape(-1, order="F")
    self._wide_mask, self._wide_index = _flat_band_indices(n, bands + 1)

  def inverse_of_l(self, cols_normalized: np.ndarray) -> np.ndarray:
    """B = L^{-1} = A C^{-1} as an F-ordered lower-triangular array."""
    lcols = _difference_columns(cols_normalized)
    self._l_flat[self._wide_index] = lcols[self._wide_mask]
    return _banded_lower_inverse(self._l, self.bands)

  def value_and_grad(self, cols: np.ndarray) -> tuple[float, np.ndarray]:
    """(f, df/dV) for the (unnormalized) column layout `cols` (n x bands)."""
    n, bands = self.n, self.bands
    cols_n, norms = normalize_columns(cols * self.mask)
    b = self.inverse_of_l(cols_n)
    f = float(np.einsum("ij,ij->", b, b))
    p, info = lapack.dlauum(b, lower=1, overwrite_c=0)  # lower(B^T B).
    if info != 0:
      raise np.linalg.LinAlgError(f"dlauum failed (info={info}).")
    # G_L[i, j] = sum_{m <= j} P[i, m] B[j, m] for 0 <= i - j <= bands; only
    # the lower triangle of P is used (m <= j <= i), and B[j, m] = 0 for m > j.
    g = self._grad
    for j0 in range(0, n, _BLOCK):
      j1 = min(j0 + _BLOCK, n)
      i1 = min(j1 + bands, n)
      np.matmul(p[j0:i1, :j1], b[j0:j1, :j1].T, out=g[j0:i1, j0:j1])
    gl = np.zeros((n + 1, bands + 1))
    gl[1:][self._wide_mask] = self._grad_flat[self._wide_index]
    # df/dC[j + r, j] = -2 (G_L[j + r, j] - G_L[j + r, j - 1]).
    gc = -2.0 * (gl[1:, :bands] - gl[:-1, 1:]) * self.mask
    gc -= cols_n * np.einsum("ij,ij->i", cols_n, gc)[:, None]
    gc /= norms[:, None]
    return f, gc



# ---------------------------------------------------------------------------
# The mechanism.


@dataclasses.dataclass(frozen=True)
class BandedEvaluation:
  """Sensitivity (Eq. 5, b >= bands), errors and losses (Eqs. 9-10)."""
  n: int
  min_sep: int
  max_participations: int
  sensitivity: float
  max_error: float
  rms_error: float
  max_loss: float
  rms_loss: float
  message: str | None = None  # Why k was reduced (None when it fit as given).


@dataclasses.dataclass(frozen=True, eq=False)
class BandedMF:
  """A banded lower-triangular strategy matrix C (BandMF, paper 004 ref. [8]).

  band: (n, bands) array with band[t, j] = C[t, t - j] (module docstring);
    entries with t - j < 0 must be 0 and the diagonal band[:, 0] positive.
  setting: the (n, bands, min_sep, max_participations) it was optimized for
    by `banded_optimize.optimize_banded` (None for a hand-made C).

  BandMF is defined for the n rounds it was built for only (paper 004, Sec. 4.2,
  Fig. 5: "BandMF mechanisms can only be used up to the n they are optimized
  for"); methods taking a number of rounds accept at most `n`.
  """
  band: np.ndarray
  setting: BandedSetting | None = None

  def __post_init__(self):
    band = streaming.check_band(self.band, name="band")
    n, bands = band.shape
    diag = band[:, 0]
    if not np.all(diag > 0):
      bad = int(np.flatnonzero(~(diag > 0))[0])
      raise ValueError(
          f"`band[:, 0]` (the diagonal of C) must be positive so that C is "
          f"invertible; got band[{bad}, 0]={diag[bad]!r}.")
    if self.setting is not None:
      if not isinstance(self.setting, BandedSetting):
        raise ValueError(
            f"`setting` must be a BandedSetting or None; got {self.setting!r}.")
      if (self.setting.n, self.setting.bands) != (n, bands):
        raise ValueError(
            f"`setting` (n={self.setting.n}, bands={self.setting.bands}) must "
            f"match the shape of `band` {band.shape}.")
    band = np.array(band, dtype=np.float64)
    band.setflags(write=False)
    object.__setattr__(self, "band", band)

  def __eq__(self, other: Any) -> bool:
    if not isinstance(other, BandedMF):
      return NotImplemented
    return (np.array_equal(self.band, other.band) and
            self.setting == other.setting)

  __hash__ = None  # Mutable-looking array content: not hashable.

  # -- construction ---------------------------------------------------------

  @classmethod
  def from_dense(cls, matrix: Any, bands: int | None = None,
                 setting: BandedSetting | None = None) -> "BandedMF":
    """BandedMF of a dense lower-triangular C; refuses entries outside the band.

    `bands` defaults to the smallest band count holding all non-zeros.
    """
    return cls(streaming.band_from_dense(matrix, bands, name="matrix"), setting)

  # -- structure ------------------------------------------------------------

  @property
  def n(self) -> int:
    return self.band.shape[0]

  @property
  def bands(self) -> int:
    return self.band.shape[1]

  def columns(self) -> np.ndarray:
    """Column layout: V[j, r] = C[j + r, j] (0 where j + r >= n)."""
    return rows_to_columns(self.band)

  def dense(self) -> np.ndarray:
    """C as an (n, n) array."""
    n = self.n
    c = np.zeros((n, n))
    for r in range(self.bands):
      idx = np.arange(r, n)
      c[idx, idx - r] = self.band[r:, r]
    return c

  def column_norms(self) -> np.ndarray:
    """||C[:, j]||_2 for j = 0..n-1 (all 1 for BandMF)."""
    cols = self.columns()
    return np.sqrt(np.einsum("ij,ij->i", cols, cols))

  def _rounds(self, n: Any) -> int:
    if n is None:
      return self.n
    n = _checks.check_positive_int("n", n)
    if n > self.n:
      raise ValueError(
          f"`n` must be <= {self.n}: BandMF is not defined beyond the n={self.n} "
          f"rounds it was optimized for (paper 004, Fig. 5); got n={n}. "
          f"Optimize a BandMF for n={n} rounds instead.")
    return n

  def inverse_apply(self, z: Any) -> np.ndarray:
    """C[:m, :m]^{-1} z for z of shape (m, ...) with m <= n.

    Forward substitution over the bands (the streaming noise of Alg. 1,
    C^{-1} Z): x_t = (z_t - sum_{j=1}^{bands-1} band[t, j] x_{t-j}) / band[t, 0].
    """
    z = _checks.check_finite_array("z", z)
    if z.ndim < 1:
      raise ValueError(f"`z` must have at least one dimension (rounds); got a "
                       f"scalar {z!r}.")
    m = self._rounds(z.shape[0])
    flat = z.reshape(m, -1)
    # LAPACK's lower band storage: ab[r, j] = C[j + r, j], kd = width - 1.
    ab = np.asfortranarray(self.columns()[:m, :min(self.bands, m)].T)
    x, info = lapack.dtbtrs(ab, flat, uplo="L")
    if info != 0:
      raise np.linalg.LinAlgError(f"dtbtrs failed (info={info}).")
    return x.reshape(z.shape)

  # -- errors, sensitivity and losses ---------------------------------------

  def per_query_squared_error(self, n: int | None = None) -> np.ndarray:
    """Squared row norms of B = A C^{-1} for the first n rounds (n <= self.n).

    Rows of A C^{-1} up to round n only involve C[:n, :n] (lower-triangular).
    """
    n = self._rounds(n)
    objective = SquaredErrorObjective(n, min(self.bands, n))
    b = objective.inverse_of_l(self.columns()[:n, :min(self.bands, n)])
    return np.einsum("ij,ij->i", b, b)

  def max_error(self, n: int | None = None) -> float:
    """MaxError(B): the largest row norm of B = A C^{-1} (paper 004, Sec. 3.2)."""
    return float(np.sqrt(np.max(self.per_query_squared_error(n))))

  def rms_error(self, n: int | None = None) -> float:
    """RmsError(B) = ||B||_F / sqrt(n) (paper 004, Sec. 3.2)."""
    return float(np.sqrt(np.mean(self.per_query_squared_error(n))))

  def sensitivity(self, n: int | None, min_sep: int,
                  max_participations: int | None) -> float:
    """sens under Pi(min_sep, k) for the first n rounds; needs min_sep >= bands.

    With b = min_sep >= bands the columns of one pattern have disjoint row
    supports, so Eq. 5 gives sens^2 = max_pi sum_{i in pi} ||C[:, i]||^2
    exactly, for any signs of C (computed by dynamic programming over the
    columns, O(n k)); sqrt(k) for a column-normalized C. `n` is required
    (None: this C's own n); k is capped at ceil(n / b)
    (`sensitivity.feasible_participations`; None: as many as fit). For
    min_sep < bands the supports overlap: use the general bound of
    `dp_fl.mechanisms.sensitivity`.
    """
    n = self._rounds(n)
    min_sep = _checks.check_positive_int("min_sep", min_sep)
    k, _ = sensitivity.feasible_participations(n, min_sep, max_participations)
    return self._sensitivity(n, min_sep, k)

  def _sensitivity(self, n: int, min_sep: int, k: int) -> float:
    if min_sep < self.bands:
      raise ValueError(
          f"`min_sep` must be >= bands={self.bands} for the column-norm "
          f"sensitivity of a banded C; got {min_sep}. Use the general bound of "
          f"dp_fl.mechanisms.sensitivity for min_sep < bands.")
    # Column norms of the leading n x n block (columns are cut at row n).
    cols = self.columns()[:n]
    cols = cols * column_mask(n, self.bands)
    sq = np.einsum("ij,ij->i", cols, cols)
    return math.sqrt(_max_separated_sum(sq, min_sep, k))

  def evaluate(self, n: int | None, min_sep: int,
               max_participations: int | None) -> BandedEvaluation:
    """Sensitivity, MaxError, RmsError, MaxLoss (Eq. 9) and RmsLoss (Eq. 10).

    Arguments as in `sensitivity`; the result's `message` says if k was reduced.
    """
    n = self._rounds(n)
    min_sep = _checks.check_positive_int("min_sep", min_sep)
    k, message = sensitivity.feasible_participations(n, min_sep, max_participations)
    sens = self._sensitivity(n, min_sep, k)
    err = self.per_query_squared_error(n)
    max_err = float(np.sqrt(np.max(err)))
    rms_err = float(np.sqrt(np.mean(err)))
    return BandedEvaluation(n, min_sep, k, sens, max_err, rms_err,
                            sens * max_err, sens * rms_err, message)

  def max_loss(self, n: int | None, min_sep: int,
               max_participations: int | None) -> float:
    """MaxLoss = sens * MaxError (paper 004, Eq. 9)."""
    return self.evaluate(n, min_sep, max_participations).max_loss

  def rms_loss(self, n: int | None, min_sep: int,
               max_participations: int | None) -> float:
    """RmsLoss = sens * RmsError (paper 004, Eq. 10)."""
    return self.evaluate(n, min_sep, max_participations).rms_loss

  # -- serialization --------------------------------------------------------

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready dict; floats keep their exact value through json (repr)."""
    return {
        "mechanism": MECHANISM_NAME,
        "version": _JSON_VERSION,
        "band": self.band.tolist(),
        "setting": None if self.setting is None else self.setting.to_dict(),
    }

  def to_json(self) -> str:
    return json.dumps(self.to_dict())

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> "BandedMF":
    """Inverse of `to_dict`; refuses the parameters of any other mechanism."""
    if not isinstance(data, Mapping):
      raise ValueError(
          f"BandMF parameters must be a JSON object; got {type(data).__name__}.")
    mech = data.get("mechanism")
    if mech != MECHANISM_NAME:
      raise ValueError(
          f"`mechanism` must be {MECHANISM_NAME!r} to load a BandMF; got "
          f"{mech!r}. Load it with the module of that mechanism (or "
          f"dp_fl.mechanisms.catalog.from_dict).")
    version = data.get("version")
    if version != _JSON_VERSION:
      raise ValueError(
          f"`version` of the BandMF parameters must be {_JSON_VERSION}; got "
          f"{version!r}.")
    if "band" not in data:
      raise ValueError(
          f"BandMF parameters lack the field 'band'; got keys {sorted(data)}.")
    try:
      band = np.array(data["band"], dtype=np.float64)
    except (TypeError, ValueError) as e:
      raise ValueError(
          f"`band` must be a rectangular list of lists of numbers ({e}).") from e
    setting = data.get("setting")
    if setting is not None:
      if not isinstance(setting, Mapping):
        raise ValueError(
            f"`setting` must be an object or null; got {setting!r}.")
      fields = {f.name for f in dataclasses.fields(BandedSetting)}
      if set(setting) != fields:
        raise ValueError(
            f"`setting` must have exactly the keys {sorted(fields)}; got "
            f"{sorted(setting)}.")
      setting = BandedSetting(**setting)
    return cls(band, setting)

  @classmethod
  def from_json(cls, text: str) -> "BandedMF":
    if not isinstance(text, (str, bytes, bytearray)):
      raise ValueError(f"`text` must be a JSON string; got {type(text).__name__}.")
    try:
      data = json.loads(text)
    except json.JSONDecodeError as e:
      raise ValueError(f"`text` is not valid JSON ({e}).") from e
    return cls.from_dict(data)


def _max_separated_sum(values: np.ndarray, min_sep: int, k: int) -> float:
  """max over index sets pi, |pi| <= k, gaps >= min_sep, of sum values[pi].

  Dynamic programming: best[m][t] = best sum of at most m picks among
  indices >= t; picking t moves on to t + min_sep. O(n k).
  """
  n = values.size
  prev = np.zeros(n + min_sep + 1)  # m - 1 picks; zero beyond the end.
  for _ in range(k):
    cur = np.zeros(n + min_sep + 1)
    for t in range(n - 1, -1, -1):
      cur[t] = max(cur[t + 1], values[t] + prev[t + min_sep])
    prev = cur
  return float(prev[0])


# ---------------------------------------------------------------------------
# The objective as a function of the band (RmsLoss, Eq. 10).


def rms_loss_and_grad(band: Any, max_participations: int = 1
                      ) -> tuple[float, np.ndarray]:
  """RmsLoss of the column-normalized C built from `band`, and its gradient.

  `band` (n, bands) in the row layout of BandedMF, any non-zero column norms;
  C = band's matrix with every column scaled to unit norm, so (b >= bands)
  sens = sqrt(k) and RmsLoss = sqrt(k) * ||A C^{-1}||_F / sqrt(n) (Eq. 10).
  This is the objective `banded_optimize.optimize_banded` minimizes; the gradient is with
  respect to the entries of `band` (0 outside the matrix).
  """
  band = _checks.check_finite_array("band", band, ndim=2)
  n, bands = check_sizes(band.shape[0], band.shape[1])
  k = _checks.check_positive_int("max_participations", max_participations)
  cols = rows_to_columns(band)
  if not np.all(cols[:, 0] != 0):
    raise ValueError("`band[:, 0]` (the diagonal of C) must be non-zero.")
  f, grad_cols = SquaredErrorObjective(n, bands).value_and_grad(cols)
  loss = math.sqrt(k * f / n)
  return loss, columns_to_rows(grad_cols) * (k / (2.0 * n * loss))
