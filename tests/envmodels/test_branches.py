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


def test_inferred_branches_are_dropped_where_their_work_is_small(
    monkeypatch):
  """The number inferred from the thread pools keeps only branches that
  imagine MIN_BRANCH_WORK frame elements each; a number given (a scope,
  the environment variable, `n`) is taken as it is."""
  monkeypatch.delenv(branches.ENV, raising=False)
  monkeypatch.setattr(branches, "branches", lambda: 4)  # inferred: 4
  assert not branches.given()
  mspacman, paper, minipacman = 104 * 80 * 3, 200 * 160 * 3, 16 * 24 * 3
  # 16 windows x K = 5 rows of MsPacman: 2.0M elements, 3 branches' worth.
  assert branches.row_sizes(80, row_work=mspacman) == [27, 27, 26]
  assert branches.row_sizes(16, row_work=5 * mspacman) == [6, 5, 5]
  assert branches.row_sizes(5, row_work=paper) is None  # one window: 0.5M
  assert branches.row_sizes(80, row_work=minipacman) is None  # 92k
  assert branches.row_sizes(80) == [20, 20, 20, 20]  # no work given
  assert branches.row_sizes(80, 2, row_work=minipacman) == [40, 40]
  monkeypatch.undo()  # branches() as it is: a scope's, the variable's
  monkeypatch.delenv(branches.ENV, raising=False)
  with branches.scope(2):
    assert branches.given()
    assert branches.row_sizes(80, row_work=minipacman) == [40, 40]
  monkeypatch.setenv(branches.ENV, "2")
  assert branches.given()
  assert branches.row_sizes(5, row_work=paper) == [3, 2]


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
