"""Compiled calls without tf.function's per-call dispatch.

Where it sits: the actor's per-step network calls (agents/base.py
`policy_logits`, the I2A's fused act) and the learner's update on a fed
batch (agents/learning.py) go through `Compiled`. On MiniPacman's small
networks a call computes for about a millisecond, and a tf.function's
dispatch (canonicalising the arguments, looking up the trace by their
types) took a third of a millisecond more per call
(docs/performance.md, "Training throughput"). `Compiled` keeps the
concrete function of each input signature (the nested structure, shapes
and dtypes of its tensor arguments: traced once each, as tf.function
traces) and calls it directly.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import tensorflow as tf
import tree


class Compiled:
  """`fn` compiled once per input signature, called without re-dispatch.

  Arguments are nested structures (dicts, tuples, lists) of tf.Tensors or
  numpy arrays (converted); every leaf is a tensor input. Values are the
  same as `tf.function(fn)`'s: the same graph is traced.
  """

  def __init__(self, fn: Callable[..., Any], jit_compile: bool = False):
    self._function = tf.function(fn, jit_compile=jit_compile)
    self._concrete: Dict[Tuple[Any, ...], Any] = {}

  @property
  def python_function(self) -> Callable[..., Any]:
    return self._function.python_function

  def __call__(self, *args: Any) -> Any:
    args = tree.map_structure(tf.convert_to_tensor, args)
    key = tuple((path, tuple(t.shape), t.dtype)
                for path, t in tree.flatten_with_path(args))
    concrete = self._concrete.get(key)
    if concrete is None:
      concrete = self._function.get_concrete_function(*args)
      self._concrete[key] = concrete
    return concrete(*args)
