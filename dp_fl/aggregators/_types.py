"""Value-type checks and TFF-struct helpers shared by the dp_fl aggregators."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

SUPPORTED_DTYPES = (np.float32, np.float64)


def _leaves(value_type: Any, path: str) -> list[tuple[str, Any]]:
  if isinstance(value_type, tff.TensorType):
    return [(path, value_type)]
  if isinstance(value_type, tff.StructType):
    out = []
    for i, (name, member) in enumerate(tff.structure.iter_elements(value_type)):
      out.extend(_leaves(member, f"{path}.{name if name else i}"))
    return out
  raise ValueError(
      f"`value_type` must be a tff.TensorType or a (nested) tff.StructType of them; "
      f"`{path}` is {value_type}. Aggregate model updates (tensors), not "
      f"{type(value_type).__name__}.")


def tensor_specs(value_type: Any) -> list[tf.TensorSpec]:
  """Flat list of TensorSpecs of a structure of float32/float64 tensors, fully shaped.

  Raises ValueError (naming the offending member) for anything the streaming noise
  cannot handle: non-tensor members, integer/half-precision dtypes, unknown shapes.
  """
  specs = []
  for path, leaf in _leaves(value_type, "value"):
    if leaf.dtype.type not in SUPPORTED_DTYPES:
      raise ValueError(
          f"`value_type` member `{path}` has dtype {leaf.dtype}; the DP aggregators need "
          f"float32 or float64 tensors (cast the model update before aggregation).")
    if not tff.types.is_shape_fully_defined(leaf.shape):
      raise ValueError(
          f"`value_type` member `{path}` has shape {leaf.shape}, not fully defined; the "
          f"noise buffers need a static shape.")
    specs.append(tf.TensorSpec(leaf.shape, tf.as_dtype(leaf.dtype)))
  if not specs:
    raise ValueError(f"`value_type` {value_type} has no tensors to aggregate.")
  return specs


def flatten(value: Any) -> list[Any]:
  """Leaves of a TF-computation argument (tensor, tff Struct or Python container)."""
  if isinstance(value, tff.structure.Struct):
    return tff.structure.flatten(value)
  return tf.nest.flatten(value)


def pack_as(template: Any, leaves: list[Any]) -> Any:
  """Inverse of `flatten` for the container type of `template`."""
  if isinstance(template, tff.structure.Struct):
    return tff.structure.pack_sequence_as(template, leaves)
  return tf.nest.pack_sequence_as(template, leaves)


def num_parameters(specs: list[tf.TensorSpec]) -> int:
  return int(sum(np.prod(s.shape.as_list(), dtype=np.int64) for s in specs))


def record_aggregation_factory(factory: Any) -> tff.aggregators.UnweightedAggregationFactory:
  """The factory that sums clipped updates: `factory`, or TFF's SumFactory when None."""
  if factory is None:
    return tff.aggregators.SumFactory()
  if not isinstance(factory, tff.aggregators.UnweightedAggregationFactory):
    raise ValueError(
        f"`record_aggregation_factory` must be a tff.aggregators."
        f"UnweightedAggregationFactory; got {type(factory).__name__}.")
  return factory
