"""The model of paper 000's experiment (Sec. 5) in NumPy: an MLP with three hidden layers of 60
ReLU units and a 10-way softmax, with per-example gradients (one example = one client).

The parameters live in one flat float64 vector θ (the vector the clients' updates and the
server's mean estimate are), laid out layer by layer as (W₁, b₁, W₂, b₂, …), W_l of shape
(fan_in, fan_out). At the paper's sizes on 8 × 8 digits, d = 64·60+60 + 2·(60·60+60) +
60·10+10 = 11,830 (d' = 16,384 after padding for the Walsh–Hadamard rotation).

    mlp = Mlp((64, 60, 60, 60, 10))
    theta = mlp.init(rng)                              # He-normal weights, zero biases
    grads = mlp.per_example_gradients(theta, x, y)     # (n, d): client i's gradient, row i
    mlp.accuracy(theta, x_test, y_test)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dp_fl import _checks

PAPER_HIDDEN_LAYERS = (60, 60, 60)  # Paper 000, Sec. 5: "three-layer model (60 hidden nodes)".


@dataclasses.dataclass(frozen=True)
class Mlp:
  """Fully connected ReLU network; `layer_sizes` = (inputs, hidden…, classes)."""
  layer_sizes: tuple[int, ...]

  def __post_init__(self):
    if len(self.layer_sizes) < 2:
      raise ValueError(f"`layer_sizes` needs inputs and classes at least; got "
                       f"{self.layer_sizes!r}.")
    for i, size in enumerate(self.layer_sizes):
      _checks.check_positive_int(f"layer_sizes[{i}]", size)

  @property
  def shapes(self) -> list[tuple[int, ...]]:
    """Shapes of W₁, b₁, W₂, b₂, … in the order of the flat vector."""
    out: list[tuple[int, ...]] = []
    for fan_in, fan_out in zip(self.layer_sizes[:-1], self.layer_sizes[1:]):
      out += [(fan_in, fan_out), (fan_out,)]
    return out

  @property
  def dimension(self) -> int:
    """d, the number of parameters."""
    return sum(math.prod(shape) for shape in self.shapes)

  def unflatten(self, theta: np.ndarray) -> list[np.ndarray]:
    """Views of θ as [W₁, b₁, W₂, b₂, …]."""
    out, start = [], 0
    for shape in self.shapes:
      size = math.prod(shape)
      out.append(theta[start:start + size].reshape(shape))
      start += size
    return out

  def init(self, rng: np.random.Generator) -> np.ndarray:
    """θ₀: He-normal weights (std √(2/fan_in)), zero biases."""
    parts = []
    for fan_in, fan_out in zip(self.layer_sizes[:-1], self.layer_sizes[1:]):
      parts += [rng.normal(0.0, math.sqrt(2.0 / fan_in), size=fan_in * fan_out),
                np.zeros(fan_out)]
    return np.concatenate(parts)

  def _activations(self, theta: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
    """[x, h₁, …, logits]: ReLU after every layer but the last."""
    params = self.unflatten(theta)
    layers = len(self.layer_sizes) - 1
    out = [np.asarray(x, dtype=np.float64)]
    for l in range(layers):
      z = out[-1] @ params[2 * l] + params[2 * l + 1]
      out.append(np.maximum(z, 0.0) if l < layers - 1 else z)
    return out

  def logits(self, theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    return self._activations(theta, x)[-1]

  def accuracy(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.argmax(self.logits(theta, x), axis=1) == y))

  def loss(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """Mean softmax cross-entropy."""
    z = self.logits(theta, x)
    z = z - z.max(axis=1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-np.mean(log_probs[np.arange(len(y)), y]))

  def per_example_gradients(self, theta: np.ndarray, x: np.ndarray,
                            y: np.ndarray) -> np.ndarray:
    """(n, d): row i is ∇θ of example i's cross-entropy (client i's update before clipping)."""
    acts = self._activations(theta, x)
    params = self.unflatten(theta)
    n = len(y)
    z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
    delta = np.exp(z)
    delta /= delta.sum(axis=1, keepdims=True)
    delta[np.arange(n), y] -= 1.0  # ∂loss/∂logits = softmax − onehot.
    grads: list[np.ndarray] = [np.empty(0)] * len(params)
    for l in range(len(self.layer_sizes) - 2, -1, -1):
      grads[2 * l] = np.einsum("ni,nj->nij", acts[l], delta).reshape(n, -1)
      grads[2 * l + 1] = delta
      if l:
        delta = (delta @ params[2 * l].T) * (acts[l] > 0)
    return np.concatenate(grads, axis=1)
