"""Test-wide setup: dp_fl.execution.runtime's exit hook settles TFF's executor objects in every
test process (no "Exception ignored in ServiceManager.__del__" at exit, no worker left behind),
and Bazel's test sharding. Every py_test depends on `//tests:conftest` so that this file is in
its runfiles: without it each shard of a sharded target ran every test."""

import os

try:  # Under Bazel a test without TFF work has no dp_fl.execution in its runfiles.
  from dp_fl.execution import runtime  # pylint: disable=unused-import
except ModuleNotFoundError as error:
  if not (error.name or "").startswith("dp_fl"):
    raise


def pytest_collection_modifyitems(config, items):
  """Bazel test sharding (`shard_count` in a BUILD file): shard i of n runs every n-th test.

  Bazel sets TEST_TOTAL_SHARDS / TEST_SHARD_INDEX and expects the runner to touch
  TEST_SHARD_STATUS_FILE to say it shards; plain pytest runs see neither and run everything.
  """
  total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
  if total <= 1:
    return
  index = int(os.environ.get("TEST_SHARD_INDEX", "0"))
  status = os.environ.get("TEST_SHARD_STATUS_FILE")
  if status:
    with open(status, "a", encoding="utf-8"):
      pass
  keep = [item for i, item in enumerate(items) if i % total == index]
  config.hook.pytest_deselected(items=[item for item in items if item not in keep])
  items[:] = keep
