"""Lower-triangular Toeplitz factorizations A = B C: inverse, decoder and errors.

Paper 004 ("A Hassle-free Algorithm for Private Learning in Practice"),
Sec. 2.3 and Prop. 3.3. Notation: A is the n x n lower-triangular matrix of
ones, A = B C, and C = LtToep(c) is the lower-triangular Toeplitz matrix with
first column c = (c_0, ..., c_{n-1}), c_0 != 0:

            [ c_0                ]
    C   =   [ c_1  c_0           ]      C[i, j] = c_{i-j}  (i >= j).
            [ c_2  c_1  c_0      ]
            [ c_3  c_2  c_1  c_0 ]

Products of lower-triangular Toeplitz matrices are lower-triangular Toeplitz,
and LtToep(a) LtToep(b) = LtToep(a * b) with `*` the truncated convolution, i.e.
the product of the power series a(x) = sum_t a_t x^t and b(x) modulo x^n. So
C^{-1} = LtToep(c_hat) with c_hat(x) = 1 / c(x) mod x^n (Prop. 3.3), and the
decoder B = A C^{-1} = LtToep(b) with b_t = sum_{s <= t} c_hat_s, because A is
LtToep of the all-ones sequence 1 / (1 - x).

`inverse_coef` computes c_hat by Newton's iteration for power-series
inversion, g <- g - g (c g - 1), which doubles the number of correct
coefficients per step; both products per step are FFT convolutions, so the
whole inverse costs O(n log n) (a constant number of FFTs of total length
~2n). Its accuracy is that of an FFT convolution: entrywise absolute errors of
a few ulp of max|c_hat| (norm-wise relative error ~1e-15 .. 1e-13), not
entrywise relative accuracy for coefficients many orders of magnitude below
the largest. `inverse_coef_direct` is the O(n^2) forward-substitution
recurrence, for small n and as a reference.

Sensitivity of LtToep(c) under the min-separation schema (Thm. 3.1) lives in
`dp_fl.mechanisms.sensitivity.toeplitz_sensitivity`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.fft

from dp_fl import _checks

# Below this many coefficients the inverse is computed by the O(n^2)
# recurrence (also the seed of Newton's iteration).
_DIRECT_INVERSE_MAX = 64
# `convolve` uses np.convolve (exact summation order, O(len(a) len(b))) when
# the shorter input has at most this many terms or the product is small.
_DIRECT_CONVOLVE_MIN_LEN = 32
_DIRECT_CONVOLVE_MAX_WORK = 1 << 15


# ---------------------------------------------------------------------------
# Validation.


def _check_coef(coef: Any, name: str = "coef") -> np.ndarray:
  """`coef` as a non-empty 1-D float64 array of finite numbers with c_0 != 0."""
  c = _check_sequence(coef, name)
  if c[0] == 0:
    raise ValueError(
        f"`{name}[0]` (c_0, the diagonal of C = LtToep(c)) must be non-zero so "
        f"that C is invertible; got {c[0]!r}. Drop leading zeros or use a "
        f"mechanism with a non-zero diagonal.")
  return c


def _check_sequence(value: Any, name: str) -> np.ndarray:
  """`value` as a non-empty 1-D float64 array of finite numbers."""
  try:
    arr = _checks.check_finite_array(name, value, ndim=1)
  except (TypeError, ValueError) as e:
    if str(e).startswith(f"`{name}`"):
      raise
    raise ValueError(f"`{name}` must be a 1-D array of real numbers; got "
                     f"{value!r:.80} ({e}).") from e
  if arr.size < 1:
    raise ValueError(f"`{name}` must hold at least one coefficient; got [].")
  return arr


# ---------------------------------------------------------------------------
# Dense form and convolution.


def dense(coef: Any) -> np.ndarray:
  """The n x n matrix LtToep(c), C[i, j] = c_{i-j} for i >= j (Sec. 2.3).

  O(n^2) memory: meant for tests and small n.
  """
  c = _check_sequence(coef, "coef")
  n = c.size
  diff = np.arange(n)[:, None] - np.arange(n)[None, :]
  return np.where(diff >= 0, c[np.maximum(diff, 0)], 0.0)


def _fft_product(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
  """First n coefficients of a * b by real FFTs (no wrap-around)."""
  length = scipy.fft.next_fast_len(a.size + b.size - 1, real=True)
  prod = scipy.fft.irfft(
      scipy.fft.rfft(a, length) * scipy.fft.rfft(b, length), length)
  return prod[:n]


def convolve(a: Any, b: Any, n: int | None = None) -> np.ndarray:
  """First n coefficients of the power-series product a(x) b(x).

  LtToep(a) LtToep(b) = LtToep(convolve(a, b, n)) for n x n matrices
  (Sec. 2.3). By default n = len(a) + len(b) - 1 (the full product); a larger
  n pads with zeros. Short inputs use direct summation, long ones real FFTs
  (absolute error a few ulp of ||a|| ||b||).

  Args:
    a: 1-D finite coefficients, a[t] of x^t.
    b: 1-D finite coefficients.
    n: number of output coefficients (>= 1) or None.

  Returns:
    float64 array of length n.
  """
  a = _check_sequence(a, "a")
  b = _check_sequence(b, "b")
  full = a.size + b.size - 1
  n = full if n is None else _checks.check_positive_int("n", n)
  a, b = a[:n], b[:n]
  out = np.zeros(n)
  m = min(n, a.size + b.size - 1)
  shorter = min(a.size, b.size)
  if (shorter <= _DIRECT_CONVOLVE_MIN_LEN or
      a.size * b.size <= _DIRECT_CONVOLVE_MAX_WORK):
    out[:m] = np.convolve(a, b)[:m]
  else:
    out[:m] = _fft_product(a, b, m)
  return out


# ---------------------------------------------------------------------------
# Inverse (Prop. 3.3: C^{-1} = LtToep(c_hat)).


def _direct_inverse(f: np.ndarray, n: int) -> np.ndarray:
  """Forward substitution for g = 1 / f mod x^n; f[0] = 1, f.size >= n (O(n^2))."""
  g = np.zeros(n)
  g[0] = 1.0
  for t in range(1, n):
    g[t] = -np.dot(f[1:t + 1], g[t - 1::-1])
  return g


def inverse_coef_direct(coef: Any) -> np.ndarray:
  """First column c_hat of C^{-1} by the O(n^2) recurrence (Prop. 3.3).

  Forward substitution on C c_hat = e_0: c_hat_0 = 1 / c_0 and
  c_hat_t = -(sum_{s=1}^{t} c_s c_hat_{t-s}) / c_0. Reference for small n;
  use `inverse_coef` for large n.
  """
  c = _check_coef(coef)
  return _direct_inverse(c / c[0], c.size) / c[0]


def _newton_inverse(f: np.ndarray) -> np.ndarray:
  """g = 1 / f mod x^n (n = f.size, f[0] = 1) by Newton's iteration.

  With f g = 1 + e and e = O(x^m), the update g' = g - g e is correct to
  O(x^{2m}). Target sizes are n, ceil(n/2), ... down to the direct seed, so
  no step computes coefficients beyond n. A step from m to m' <= 2m needs

    e[m:m'] = (f[:m'] g)[m:m']  cyclic FFT product of length L >= m': the
              wrapped-around terms land on indices <= m - 2 (not needed);
    g[m:m'] = -(g e[m:m'])[:m' - m]  linear product of length m' - 1 < L,

  so the FFT of g is shared by both products: five real FFTs of length ~m'.
  """
  n = f.size
  sizes = []
  m = n
  while m > _DIRECT_INVERSE_MAX:
    sizes.append(m)
    m = (m + 1) // 2
  g = _direct_inverse(f[:m], m)
  rfft, irfft = scipy.fft.rfft, scipy.fft.irfft
  for target in reversed(sizes):
    length = scipy.fft.next_fast_len(target, real=True)
    g_hat = rfft(g, length)
    resid = irfft(rfft(f[:target], length) * g_hat, length)[m:target]
    corr = irfft(rfft(resid, length) * g_hat, length)[:target - m]
    g = np.concatenate([g, -corr])
    m = target
  return g


def inverse_coef(coef: Any) -> np.ndarray:
  """First column c_hat of C^{-1} for C = LtToep(c); C^{-1} = LtToep(c_hat).

  Prop. 3.3 (the inverse of a lower-triangular Toeplitz matrix is
  lower-triangular Toeplitz): c_hat(x) = 1 / c(x) mod x^n. Computed in
  O(n log n) by Newton's iteration with FFT products (see `_newton_inverse`),
  seeded by the direct recurrence for the first <= 64 coefficients; n <= 64
  uses the recurrence only. Accuracy: entrywise absolute error a few ulp of
  max|c_hat| for well-conditioned c (e.g. BLT coefficients, Eq. 2).

  Args:
    coef: c, 1-D, finite, non-empty, c_0 != 0.

  Returns:
    c_hat, float64 array of the same length.
  """
  c = _check_coef(coef)
  f = c / c[0]
  if c.size <= _DIRECT_INVERSE_MAX:
    g = _direct_inverse(f, c.size)
  else:
    g = _newton_inverse(f)
  return g / c[0]


# ---------------------------------------------------------------------------
# Decoder B = A C^{-1} and its errors (Prop. 3.3, Sec. 3.2).


def b_coef(coef: Any) -> np.ndarray:
  """First column b of B = A C^{-1} = LtToep(b): b_t = sum_{s<=t} c_hat_s.

  Prop. 3.3 (A = LtToep(1, 1, ..., 1), so B's coefficients are the prefix
  sums of C^{-1}'s).
  """
  return np.cumsum(inverse_coef(coef))


def per_query_squared_error(coef: Any) -> np.ndarray:
  """Squared row norms of B = LtToep(b): row t has sum_{s<=t} b_s^2.

  Row t of B Z is the noise on the t-th prefix sum (Sec. 3.2), so entry t is
  its variance for unit-variance Z. Non-decreasing in t.
  """
  b = b_coef(coef)
  return np.cumsum(b * b)


def max_error(coef: Any) -> float:
  """MaxError(B) = max_t ||B[t, :]|| = sqrt(sum_t b_t^2) (Prop. 3.3).

  The last row of LtToep(b) has the largest norm.
  """
  b = b_coef(coef)
  return float(np.sqrt(np.sum(b * b)))


def rms_error(coef: Any) -> float:
  """RmsError(B) = ||B||_F / sqrt(n) = sqrt(sum_t (n - t) b_t^2 / n) (Prop. 3.3).

  b_t appears in the n - t rows t..n-1 of LtToep(b).
  """
  b = b_coef(coef)
  n = b.size
  weights = (n - np.arange(n, dtype=np.float64)) / n
  return float(np.sqrt(np.sum(weights * b * b)))
