"""Test setup: quiet TensorFlow logs, deterministic seeds."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402  (after the environment variable)


@pytest.fixture(autouse=True)
def _fp32_between_tests():
  """The compute precision is process-wide (envmodels/precision.py): a test
  whose runtime chose another one must not change the next test's."""
  yield
  from envmodels import precision  # pylint: disable=import-outside-toplevel
  if precision.current() != "fp32":
    precision.set_precision("fp32")
