"""Every test here that runs TFF computations does so inside dp_fl's execution context."""

import pytest

from dp_fl.execution import runtime


@pytest.fixture(scope="module", autouse=True)
def tff_execution_context():
  with runtime.execution_context():
    yield
