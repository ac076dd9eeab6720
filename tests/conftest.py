"""Test setup: quiet TensorFlow logs, deterministic seeds."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402  (after the environment variable)


@pytest.fixture(autouse=True)
def _seeded():
  """Every test starts from the same seeds, whichever worker runs it and
  whatever ran before it there: a test's randomly initialised networks are
  the same on every run, so a result is reproducible where it is read."""
  import random  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  random.seed(0)
  np.random.seed(0)
  tf.random.set_seed(0)
  yield


@pytest.fixture(autouse=True)
def _fp32_between_tests():
  """The compute precision is process-wide (envmodels/precision.py): a test
  whose runtime chose another one must not change the next test's."""
  yield
  from envmodels import precision  # pylint: disable=import-outside-toplevel
  if precision.current() != "fp32":
    precision.set_precision("fp32")


# The files whose tests take longest (minutes of binaries run as
# subprocesses), longest first. `make test` hands whole files to its
# workers in collection order (pytest-xdist's --dist loadfile), so these
# are collected first: they start at once instead of ending the run alone.
_LONGEST_FILES = ("test_sweep.py", "test_training.py", "test_demo.py",
                  "test_sweep_archive.py", "test_ray_launch.py",
                  "test_pretrain.py", "test_launch.py")


def pytest_collection_modifyitems(items):
  def rank(item) -> int:
    name = item.path.name
    return (_LONGEST_FILES.index(name) if name in _LONGEST_FILES
            else len(_LONGEST_FILES))

  items.sort(key=rank)  # stable: each file's tests keep their order
