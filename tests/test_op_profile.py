"""benchmarks/op_profile.py: the profiler's trace summed by op type."""

import numpy as np
import tensorflow as tf

from benchmarks import op_profile


def test_the_trace_sums_each_ops_kernel_time_per_call_by_type_and_name():
  x = tf.constant(np.ones([64, 64], np.float32))

  @tf.function
  def step(x):
    return tf.reduce_sum(tf.cast(tf.matmul(x, x) > 0.0, tf.float32))

  call = lambda: step(x).numpy()
  call()
  by_type, by_name, count = op_profile.trace(call, calls=3)
  # One product and one cast per call, whatever the kernels' names.
  products = [t for t in by_type if "MatMul" in t]
  assert products, sorted(by_type)
  assert np.isclose(count["Cast"], 1)
  assert np.isclose(sum(count[t] for t in products), 1)
  assert all(v > 0 for v in by_type.values())
  assert not set(by_type) & set(op_profile.WRAPPERS)  # kernels only
  # The instances add up to the types.
  assert np.isclose(sum(by_name.values()), sum(by_type.values()))
  assert any(name.endswith(":Cast") for name in by_name)
