"""Guarded optimizer updates, shared by pretraining and the agents' learner.

Where it sits in the data flow: `i2a.pretrain`'s train step and the agents'
learner step (agents/learning.py) compute gradients in a tf.function and
apply them through `apply_if_finite`: an update whose loss or gradient norm
is not finite is skipped in-graph (the weights and the optimizer's state
stay as they were), and the caller counts it and stops after several in a
row. `create_slots` makes the optimizer's variables beforehand, so the
skipped branch never has to create them.
"""

from __future__ import annotations

from typing import Optional, Sequence

import sonnet as snt
import tensorflow as tf


def create_slots(optimizer: snt.Optimizer,
                 variables: Sequence[tf.Variable]) -> None:
  """Creates a Sonnet optimizer's slots (Adam's m and v, RMSProp's mean
  square) without updating anything, so that an update skipped inside a
  tf.function (`apply_if_finite`) never has to create them in a branch."""
  optimizer._initialize(variables)  # pylint: disable=protected-access


def apply_if_finite(optimizer: snt.Optimizer, gradients: Sequence[tf.Tensor],
                    variables: Sequence[tf.Variable], loss: tf.Tensor,
                    gradient_norm: tf.Tensor,
                    allowed: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Applies `gradients` only when `loss` and `gradient_norm` are finite
  (and `allowed`, a bool scalar, holds), in graph; the slots must exist
  (`create_slots`). Returns whether it applied them: a skipped update
  leaves the weights and the optimizer's state as they were."""
  finite = tf.logical_and(tf.reduce_all(tf.math.is_finite(loss)),
                          tf.math.is_finite(gradient_norm))
  if allowed is not None:
    finite = tf.logical_and(finite, allowed)

  def apply() -> tf.Tensor:
    optimizer.apply(gradients, variables)
    return tf.constant(True)
  tf.cond(finite, apply, lambda: tf.constant(False))
  return finite


def check_finite(variables: Sequence[tf.Variable], what: str) -> None:
  """FloatingPointError naming the (floating) variables with a NaN or an
  infinity; `what` is the refused action ('checkpoint', 'publish')."""
  bad = [v.name for v in variables if v.dtype.is_floating and
         not bool(tf.reduce_all(tf.math.is_finite(v)).numpy())]
  if bad:
    raise FloatingPointError(
        f"refusing to {what}: {len(bad)} variables hold NaN or infinite "
        f"values (e.g. {bad[:3]}); lower the learning rate and resume "
        "from the last checkpoint.")
