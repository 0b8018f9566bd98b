"""Test-wide setup: dp_fl.runtime's exit hook settles TFF's executor objects in every test
process (no "Exception ignored in ServiceManager.__del__" at exit, no worker left behind)."""

from dp_fl import runtime  # pylint: disable=unused-import
