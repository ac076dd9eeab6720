"""Row branches (envmodels/branches.py): how rows are split, the
environment variable and scopes, and split_rows' order and nesting. That
the I2A's rollouts are the same in branches: tests/agents/
test_imagination.py."""

import numpy as np
import pytest
import tensorflow as tf

from envmodels import branches


def test_row_sizes_split_static_rows_only():
  assert branches.row_sizes(80, 2) == [40, 40]
  assert branches.row_sizes(25, 3) == [9, 8, 8]
  assert branches.row_sizes(3, 4) == [1, 1, 1]  # no empty branch
  assert branches.row_sizes(80, 1) is None
  assert branches.row_sizes(1, 2) is None
  assert branches.row_sizes(None, 2) is None  # unknown at trace time
  with pytest.raises(ValueError, match="positive integer"):
    with branches.scope(0):
      pass
  with branches.scope(2):
    assert branches.parse_counts("1,auto,1") == [1, 2]
  with pytest.raises(ValueError, match="given '1,two'"):
    branches.parse_counts("1,two")


def test_the_environment_variable_sets_the_branches(monkeypatch):
  monkeypatch.setenv(branches.ENV, "3")
  assert branches.branches() == 3
  with branches.scope(1):  # a scope overrides it
    assert branches.branches() == 1
  monkeypatch.setenv(branches.ENV, "two")
  with pytest.raises(ValueError, match="I2A_ROW_BRANCHES must be a "
                     "positive integer.*given 'two'"):
    branches.branches()


def test_split_rows_concatenates_in_order_and_does_not_nest():
  x = tf.reshape(tf.range(10, dtype=tf.float32), [5, 2])
  seen = []

  def fn(a, b, rows):
    seen.append((rows, branches.branches()))
    return {"sum": a + b, "none": None}, a[:, :1] * 2

  out = branches.split_rows(fn, (x, x + 1), 5, n=2)
  assert seen == [(3, 1), (2, 1)]  # inside a branch: one chain
  np.testing.assert_array_equal(out[0]["sum"].numpy(), (2 * x + 1).numpy())
  assert out[0]["none"] is None
  np.testing.assert_array_equal(out[1].numpy(), (x[:, :1] * 2).numpy())
  seen.clear()
  whole = branches.split_rows(fn, (x, x), tf.constant(5), n=2)  # unknown
  assert len(seen) == 1 and whole[1].shape[0] == 5
