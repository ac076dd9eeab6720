"""agents/compiled.py: a tf.function called through its concrete functions."""

import numpy as np
import tensorflow as tf

from agents.compiled import Compiled


def test_compiled_gives_tf_function_values_and_traces_once_per_signature():
  traces = []

  def fn(x, extras):
    traces.append(x.shape.as_list())
    return x * 2 + tf.cast(tf.reduce_sum(extras["y"]), x.dtype)

  compiled = Compiled(fn)
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  y = np.ones([4], np.int32)
  want = tf.function(fn)(x, {"y": y}).numpy()
  traces.clear()
  np.testing.assert_array_equal(compiled(x, {"y": y}).numpy(), want)
  np.testing.assert_array_equal(
      compiled(tf.constant(x + 1), {"y": y}).numpy(), want + 2)
  assert traces == [[2, 3]]  # numpy or tensor: the same concrete function
  compiled(np.zeros([5, 3], np.float32), {"y": y})  # another shape: traced
  compiled(np.zeros([5, 3], np.float64), {"y": y})  # another dtype: traced
  assert traces == [[2, 3], [5, 3], [5, 3]]
  assert compiled.python_function is fn


def test_compiled_tells_structures_apart_by_their_keys():
  compiled = Compiled(lambda d: d.get("a", tf.zeros([1])) + 1)
  one = np.ones([1], np.float32)
  np.testing.assert_array_equal(compiled({"a": one}).numpy(), [2.0])
  np.testing.assert_array_equal(compiled({"b": one}).numpy(), [1.0])


def test_compiled_traces_each_scope_key_inside_its_scope():
  entered = []
  key = ["plain"]

  class Scope:
    def __enter__(self):
      entered.append(key[0])

    def __exit__(self, *exc):
      entered.append("exit")

  def fn(x):
    return x + (10.0 if entered and entered[-1] == "scaled" else 0.0)

  compiled = Compiled(fn, trace_scope=lambda: (key[0], Scope()))
  x = np.ones([2], np.float32)
  np.testing.assert_array_equal(compiled(x).numpy(), [1.0, 1.0])
  key[0] = "scaled"
  np.testing.assert_array_equal(compiled(x).numpy(), [11.0, 11.0])
  compiled(x)  # traced already under this key: no scope entered
  key[0] = "plain"
  np.testing.assert_array_equal(compiled(x).numpy(), [1.0, 1.0])
  assert entered == ["plain", "exit", "scaled", "exit"]
