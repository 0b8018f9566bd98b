"""Restores any participation scheduler from the bytes of its `to_bytes()`.

Schedulers serialize configuration and state together (see `base.Scheduler`),
so a training checkpoint only needs the blob; this module dispatches on the
kind recorded in it.
"""

from __future__ import annotations

from dp_fl.participation import _state_io
from dp_fl.participation import base
from dp_fl.participation import device_timer
from dp_fl.participation import sampling

_SCHEDULERS: dict[str, type[base.Scheduler]] = {
    cls.KIND: cls for cls in (
        device_timer.DeviceTimerScheduler, sampling.PoissonScheduler,
        sampling.UniformScheduler, sampling.BallsInBinsScheduler, sampling.CyclicScheduler,
        sampling.CyclicPoissonScheduler)
}


def register(cls: type[base.Scheduler]) -> None:
  """Makes `cls` restorable (a scheduler added with its participation scheme)."""
  if not cls.KIND or _SCHEDULERS.get(cls.KIND, cls) is not cls:
    raise ValueError(f"A scheduler class needs a KIND of its own; {cls.__name__} has "
                     f"{cls.KIND!r} (taken: {sorted(_SCHEDULERS)}).")
  _SCHEDULERS[cls.KIND] = cls


def restore_scheduler(blob: bytes) -> base.Scheduler:
  """Rebuilds the scheduler saved in `blob`; it continues exactly where it stopped."""
  kind, _, _ = _state_io.unpack(blob)
  cls = _SCHEDULERS.get(kind)
  if cls is None:
    raise ValueError(f"`blob` holds a {kind!r} state, which is not a scheduler; known kinds: "
                     f"{sorted(_SCHEDULERS)}.")
  return cls.from_bytes(blob)
