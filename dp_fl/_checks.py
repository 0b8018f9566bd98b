"""Argument validation shared by every dp_fl module.

Every check raises ``ValueError`` whose message names the parameter, the value
that was passed and what to do instead. Never use ``assert`` for validation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _fail(name: str, value: Any, requirement: str) -> None:
  raise ValueError(f"`{name}` must be {requirement}; got {value!r}.")


def check_positive_int(name: str, value: Any) -> int:
  """Returns `value` as an int, requiring an integer >= 1."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    _fail(name, value, "a positive integer (>= 1)")
  if value < 1:
    _fail(name, value, "a positive integer (>= 1)")
  return int(value)


def check_nonnegative_int(name: str, value: Any) -> int:
  """Returns `value` as an int, requiring an integer >= 0."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    _fail(name, value, "a non-negative integer (>= 0)")
  if value < 0:
    _fail(name, value, "a non-negative integer (>= 0)")
  return int(value)


def check_finite(name: str, value: Any) -> float:
  """Returns `value` as a float, requiring a finite real number."""
  try:
    x = float(value)
  except (TypeError, ValueError):
    _fail(name, value, "a finite real number")
  if not math.isfinite(x):
    _fail(name, value, "a finite real number")
  return x


def check_positive(name: str, value: Any) -> float:
  """Returns `value` as a float, requiring a finite number > 0."""
  x = check_finite(name, value)
  if x <= 0:
    _fail(name, value, "a finite number > 0")
  return x


def check_nonnegative(name: str, value: Any) -> float:
  """Returns `value` as a float, requiring a finite number >= 0."""
  x = check_finite(name, value)
  if x < 0:
    _fail(name, value, "a finite number >= 0")
  return x


def check_open_unit(name: str, value: Any) -> float:
  """Returns `value` as a float, requiring 0 < value < 1 (e.g. delta)."""
  x = check_finite(name, value)
  if not 0 < x < 1:
    _fail(name, value, "strictly between 0 and 1")
  return x


def check_delta(value: Any, name: str = "delta") -> float:
  """Returns δ of an (ε, δ) guarantee as a float, requiring 0 < δ < 1."""
  x = check_finite(name, value)
  if not 0 < x < 1:
    raise ValueError(
        f"`{name}` must be strictly between 0 and 1; got {value!r}. Pass the δ of the (ε, δ) "
        "guarantee: e.g. 1e-5, 1e-10 as in paper 004, or 1/population^1.1 as in paper 001.")
  return x


def check_half_open_unit(name: str, value: Any) -> float:
  """Returns `value` as a float, requiring 0 < value <= 1 (e.g. a sampling rate)."""
  x = check_finite(name, value)
  if not 0 < x <= 1:
    _fail(name, value, "in (0, 1]")
  return x


def check_finite_array(name: str, value: Any, ndim: int | None = None) -> np.ndarray:
  """Returns `value` as a float64 array, requiring all entries finite."""
  arr = np.asarray(value, dtype=np.float64)
  if ndim is not None and arr.ndim != ndim:
    _fail(name, f"array of shape {arr.shape}", f"a {ndim}-dimensional array")
  if not np.all(np.isfinite(arr)):
    bad = arr[~np.isfinite(arr)].ravel()[:3]
    _fail(name, f"array containing {bad.tolist()}", "an array of finite numbers")
  return arr


def check_lower_triangular(name: str, matrix: Any) -> np.ndarray:
  """Returns `matrix` as a float64 array, requiring a finite, non-empty, square,
  lower-triangular matrix (a strategy matrix C of A = B C, paper 004 Sec. 2.3).
  """
  c = check_finite_array(name, matrix, ndim=2)
  if c.shape[0] < 1 or c.shape[0] != c.shape[1]:
    _fail(name, f"array of shape {c.shape}", "a non-empty square n x n matrix")
  above = np.argwhere(np.triu(c, 1) != 0)
  if above.size:
    i, j = (int(x) for x in above[0])
    raise ValueError(
        f"`{name}` must be lower-triangular ({name}[i, j] = 0 for j > i, as the strategy "
        f"matrix C of A = B C); got {len(above)} non-zero entries above the diagonal, the "
        f"first {name}[{i}, {j}]={c[i, j]!r}. Pass the lower-triangular C (not Cᵀ).")
  return c


def check_in_range(name: str, value: Any, low: float, high: float, *, integer: bool = False,
                   why: str = "") -> float | int:
  """Returns `value` (an int if `integer`), requiring low <= value <= high.

  For values whose extremes underflow, overflow or make a computation meaningless (a noise
  multiplier whose square underflows, a δ that guarantees nothing); `why` says what goes
  wrong outside the range.
  """
  kind = "an integer" if integer else "a number"
  bounds = f"[{int(low)}, {int(high)}]" if integer else f"[{low:g}, {high:g}]"
  requirement = f"{kind} in {bounds}" + (f" ({why})" if why else "")
  if integer:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
      _fail(name, value, requirement)
    out: float | int = int(value)
  else:
    try:
      out = float(value)
    except (TypeError, ValueError):
      _fail(name, value, requirement)
  if not (math.isfinite(out) and low <= out <= high):
    _fail(name, value, requirement)
  return out
