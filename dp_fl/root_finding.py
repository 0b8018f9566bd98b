"""The one calibrator: bracket where a monotone function crosses a target, then find it.

Every calibration in dp_fl is a search for the point where a monotone function crosses a
target: σ (or z) for a target ε (zCDP, DP-FedAvg, cyclic Poisson, balls-in-bins), ε for a
target δ, cpSGD's number of Binomial trials m, the discrete Gaussian's noise multiplier, the
largest size whose estimate fits a budget. This module is the one place such a search is
written, in two steps as dp_accounting's `mechanism_calibration.calibrate_dp_mechanism` does
them — bracket the parameter, then find the crossing inside the bracket:

* **bracket**: `expand_up` (grow [lo, hi] geometrically until hi meets the target, refusing
  past a limit), `expand_down` (shrink until lo falls short), `expand_both`;
* **continuous root**: `brent` (Brent's method on f(x) = 0 in a sign-changing bracket, to
  `xtol` + `rtol`·|x|; Brent 1973, "Algorithms for Minimization without Derivatives", ch. 4,
  as scipy's `brentq`) and `bisect` (bisection in log x of a monotone predicate, to a relative
  tolerance, returning the end of the final bracket that meets the target: conservative);
* **integer**: `smallest_integer` (the smallest integer x with f(x) <= target, exactly by
  bisection or to a relative tolerance by regula falsi on log f against log x) and
  `first_integer` (the same for a predicate).

Predicates. A search for "the smallest x meeting the target" takes `short(x)`, True where x
falls short of it (e.g. ε(σ) > target: σ too small), or `meets(x)`, True where x meets it;
callers pass the comparison they mean (`<`, `<=`), so the boundary case is theirs to decide.

Unreachable targets raise `UnreachableTargetError` (a `ValueError`), whose message the caller
may write (`unreachable`): it names the parameter, the limit and the fix.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

from scipy import optimize

Number = Union[int, float]
# The message of an unreachable target, from the bracket [lo, hi] reached when giving up.
Unreachable = Union[str, Callable[[Number, Number], str], None]

BISECT = "bisect"
REGULA_FALSI = "regula_falsi"
INTEGER_METHODS = (BISECT, REGULA_FALSI)


class UnreachableTargetError(ValueError):
  """No point of the searched range meets the target (a `ValueError`: a bad argument)."""


def _unreachable(unreachable: Unreachable, lo: Number, hi: Number,
                 default: str) -> UnreachableTargetError:
  if callable(unreachable):
    return UnreachableTargetError(unreachable(lo, hi))
  return UnreachableTargetError(default if unreachable is None else unreachable)


def _check_factor(factor: Number) -> Number:
  if not factor > 1:
    raise ValueError(f"`factor` must be > 1; got {factor!r}.")
  return factor


def expand_up(short: Callable[[Number], bool], lo: Number, hi: Number, *,
              factor: Number = 2.0, limit: Optional[Number] = None,
              clamp_to_limit: bool = False,
              unreachable: Unreachable = None) -> tuple[Number, Number]:
  """Grows [lo, hi] to [hi, factor·hi] while `short(hi)`: a bracket whose hi meets the target.

  Args:
    short: True where x falls short of the target (non-increasing in truth: once x meets the
      target, every larger x does).
    lo, hi: the starting bracket (`lo` is only carried: it becomes the last short hi).
    factor: growth per step (> 1; an int keeps integer brackets integer).
    limit: the largest x searched (None: unbounded). Without `clamp_to_limit`, a grown
      hi > limit is refused before `short` is evaluated there (for functions that overflow
      beyond it); with it, hi grows to at most `limit`, which is evaluated, and refused if
      still short.
    clamp_to_limit: see `limit`.
    unreachable: the error message when the limit is passed: a string, or a function of the
      bracket (lo, hi) reached.

  Returns:
    (lo, hi) with not short(hi); lo is the previous hi (short) or the given lo.

  Raises:
    UnreachableTargetError: no x up to `limit` meets the target.
  """
  factor = _check_factor(factor)
  if clamp_to_limit and limit is None:
    raise ValueError("`clamp_to_limit` needs a `limit`.")
  default = f"no point up to {limit!r} meets the target"
  while short(hi):
    if clamp_to_limit:
      if hi >= limit:
        raise _unreachable(unreachable, lo, hi, default)
      lo, hi = hi, min(limit, hi * factor)
    else:
      lo, hi = hi, hi * factor
      if limit is not None and hi > limit:
        raise _unreachable(unreachable, lo, hi, default)
  return lo, hi


def expand_down(meets: Callable[[Number], bool], lo: Number, hi: Number, *,
                factor: Number = 2.0, floor: Number = 0) -> tuple[Number, Number]:
  """Shrinks [lo, hi] to [lo/factor, lo] while lo > floor and `meets(lo)`.

  For a hi known to meet the target: the result's lo falls short of it, or is <= floor (then
  nothing below was tried; `meets` is not evaluated at or below the floor). Integer lo and
  factor divide with floor division (lo // factor), so integer brackets stay integer.
  """
  factor = _check_factor(factor)
  integer = isinstance(lo, int) and isinstance(factor, int)
  while lo > floor and meets(lo):
    lo, hi = (lo // factor if integer else lo / factor), lo
  return lo, hi


def expand_both(short: Callable[[Number], bool], meets: Callable[[Number], bool],
                lo: Number, hi: Number, *, factor: Number = 2.0, max_steps: int = 200,
                unreachable: Unreachable = None) -> tuple[Number, Number]:
  """Moves [lo, hi] up ([hi, factor·hi]) while `short(hi)`, else down ([lo/factor, lo]) while
  `meets(lo)`, until short(lo) and meets(hi) — at most `max_steps` moves.

  Raises:
    UnreachableTargetError: no bracket after `max_steps` moves (`unreachable` as in
      `expand_up`, given the last bracket).
  """
  factor = _check_factor(factor)
  for _ in range(max_steps):
    if short(hi):
      lo, hi = hi, hi * factor
    elif meets(lo):
      lo, hi = lo / factor, lo
    else:
      return lo, hi
  raise _unreachable(unreachable, lo, hi, f"no bracket of the target after {max_steps} moves, "
                     f"the last [{lo!r}, {hi!r}]")


def brent(f: Callable[[float], float], lo: float, hi: float, *, xtol: float, rtol: float,
          maxiter: int = 100) -> float:
  """The root of f in [lo, hi] by Brent's method (scipy `brentq`), to xtol + rtol·|x|.

  f(lo) and f(hi) must have opposite signs (a bracket from `expand_up` & co.).

  Raises:
    UnreachableTargetError: f does not change sign on [lo, hi].
  """
  try:
    return float(optimize.brentq(f, lo, hi, xtol=xtol, rtol=rtol, maxiter=maxiter))
  except ValueError as e:
    if "different signs" not in str(e):
      raise
    raise UnreachableTargetError(
        f"f does not change sign on [{lo!r}, {hi!r}] (f = {f(lo)!r}, {f(hi)!r}): the target "
        "is not crossed there; widen the bracket") from e


def bisect(short: Callable[[float], bool], lo: float, hi: float, *,
           relative_tolerance: float) -> float:
  """Bisection in log x (geometric midpoints √(lo·hi)) of a bracket 0 < lo < hi with
  short(lo) and not short(hi), until hi/lo − 1 <= `relative_tolerance`; returns hi, the end
  that meets the target (a conservative calibration: never short).

  Neither end is evaluated.
  """
  while hi / lo - 1.0 > relative_tolerance:
    mid = math.sqrt(lo * hi)
    if short(mid):
      lo = mid
    else:
      hi = mid
  return hi


def first_integer(meets: Callable[[int], bool], lo: int, hi: int) -> int:
  """The smallest integer x in (lo, hi] with meets(x), by bisection on integers (mid =
  ⌊(lo + hi)/2⌋), for not meets(lo) and meets(hi) (neither evaluated) and meets monotone.

  The largest x in [a, b] with fits(x) (fits(a) true) is first_integer(not fits, a, b + 1) − 1.
  """
  while hi - lo > 1:
    mid = (lo + hi) // 2
    if meets(mid):
      hi = mid
    else:
      lo = mid
  return hi


def smallest_integer(f: Callable[[int], float], target: float, lo: int, hi: int, *,
                     method: str = BISECT, relative_tolerance: float = 0.0) -> int:
  """An integer x in (lo, hi] with f(x) <= target, at most max(1, ⌊tol·x⌋) above the smallest.

  For f non-increasing with f(lo) > target >= f(hi) (lo = 0 stands for f(0) = ∞ and is not
  evaluated). The bracket shrinks until hi − lo <= max(1, ⌊relative_tolerance · hi⌋); hi is
  returned (so f(hi) <= target always: conservative).

  Args:
    f: the non-increasing function (e.g. ε of m Binomial trials).
    target: the value to reach.
    lo, hi: the bracket (integers, 0 <= lo < hi).
    method: "bisect" (mid = ⌊(lo + hi)/2⌋; exact with `relative_tolerance` 0), or
      "regula_falsi": false position on log f against log x (for f positive and close to a
      power of x, as ε(m) is), each step kept in the bracket's middle 80 % so that it
      shrinks; bisection while lo = 0 or f(lo) is not finite.
    relative_tolerance: see above (0: the smallest x exactly).

  Raises:
    UnreachableTargetError: f(hi) > target (no x in the bracket reaches it).
  """
  if method not in INTEGER_METHODS:
    raise ValueError(f"`method` must be one of {INTEGER_METHODS}; got {method!r}.")
  f_lo = f(lo) if lo >= 1 else math.inf
  f_hi = f(hi)
  if f_hi > target:
    raise UnreachableTargetError(
        f"f({hi}) = {f_hi!r} > target {target!r}: no integer up to {hi} reaches the target.")
  while hi - lo > max(1, int(relative_tolerance * hi)):
    if method == REGULA_FALSI and lo >= 1 and math.isfinite(f_lo) and f_hi > 0:
      slope = (math.log(f_hi) - math.log(f_lo)) / (math.log(hi) - math.log(lo))
      guess = math.exp(math.log(lo) + (math.log(target) - math.log(f_lo)) / slope)
      margin = 0.1 * (hi - lo)
      mid = int(min(max(guess, lo + margin), hi - margin))
      mid = min(max(mid, lo + 1), hi - 1)
    else:
      mid = (lo + hi) // 2
    value = f(mid)
    if value <= target:
      hi, f_hi = mid, value
    else:
      lo, f_lo = mid, value
  return hi
