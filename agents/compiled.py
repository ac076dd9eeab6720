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

A trace scope (`trace_scope`) is entered while a signature is traced: an
actor's network traces its acting calls inside its bfloat16 weight
copies' `reading()` where the actor keeps them (agents/base.py
`read_weight_copies`); each scope key gets traces of its own.
"""

from __future__ import annotations

import contextlib
from typing import (Any, Callable, ContextManager, Dict, Hashable, Optional,
                    Tuple)

import tensorflow as tf
import tree


TraceScope = Callable[[], Tuple[Hashable, ContextManager[Any]]]


def no_scope() -> Tuple[Hashable, ContextManager[Any]]:
  return None, contextlib.nullcontext()


class Compiled:
  """`fn` compiled once per input signature, called without re-dispatch.

  Arguments are nested structures (dicts, tuples, lists) of tf.Tensors or
  numpy arrays (converted); every leaf is a tensor input. Values are the
  same as `tf.function(fn)`'s: the same graph is traced.

  trace_scope: called at every call, returns (key, context manager): a
  signature not yet traced under that key is traced inside the context
  manager, by a tf.function of that key's own.
  """

  def __init__(self, fn: Callable[..., Any], jit_compile: bool = False,
               trace_scope: Optional[TraceScope] = None):
    self._fn = fn
    self._jit_compile = jit_compile
    self._trace_scope = trace_scope or no_scope
    self._functions: Dict[Hashable, Any] = {}
    self._concrete: Dict[Tuple[Any, ...], Any] = {}

  @property
  def python_function(self) -> Callable[..., Any]:
    return self._fn

  def __call__(self, *args: Any) -> Any:
    scope_key, scope = self._trace_scope()
    args = tree.map_structure(tf.convert_to_tensor, args)
    key = (scope_key,) + tuple((path, tuple(t.shape), t.dtype)
                               for path, t in tree.flatten_with_path(args))
    concrete = self._concrete.get(key)
    if concrete is None:
      function = self._functions.get(scope_key)
      if function is None:
        function = tf.function(self._fn, jit_compile=self._jit_compile)
        self._functions[scope_key] = function
      with scope:
        concrete = function.get_concrete_function(*args)
      self._concrete[key] = concrete
    return concrete(*args)
