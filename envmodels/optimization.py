"""Guarded optimizer updates, shared by pretraining and the agents' learner.

Where it sits in the data flow: `i2a.pretrain`'s train step and the agents'
learner step (agents/learning.py) compute gradients in a tf.function and
apply them through `apply_if_finite`: an update whose loss or gradient norm
is not finite is skipped in-graph (the weights and the optimizer's state
stay as they were), and the caller counts it and stops after several in a
row. `create_slots` makes the optimizer's variables beforehand, so the
skipped branch never has to create them.

`apply_updates` is Sonnet's `optimizer.apply` in one fused kernel per
variable (`ResourceApplyAdam`, `ResourceApplyRMSProp`) on the optimizer's
own slots, so checkpoints are unchanged: the same update in one pass over
each variable, where Sonnet's builds some twenty elementwise ops and casts
per variable (docs/performance.md, "Fused optimizer updates").
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence

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
    apply_updates(optimizer, gradients, variables)
    return tf.constant(True)
  tf.cond(finite, apply, lambda: tf.constant(False))
  return finite


def apply_updates(optimizer: snt.Optimizer,
                  gradients: Sequence[Optional[tf.Tensor]],
                  variables: Sequence[tf.Variable]) -> None:
  """`optimizer.apply(gradients, variables)`, fused where it can be.

  Sonnet's Adam and (uncentred) RMSProp on dense float gradients run as
  TensorFlow's fused kernels on the optimizer's slots and step; anything
  else (another optimizer, a centred RMSProp, sparse gradients) goes
  through `optimizer.apply`. Inside a branch (`apply_if_finite`) the slots
  must exist beforehand (`create_slots`).
  Adam: Sonnet's update lr m_hat / (sqrt(v_hat) + eps) is the kernel's
  lr_t m / (sqrt(v) + eps_t) with lr_t = lr sqrt(1 - beta2^t) /
  (1 - beta1^t) and eps_t = eps sqrt(1 - beta2^t): the same update, not
  the kernel's usual eps placement.
  """
  if len(gradients) != len(variables) or not variables:
    raise ValueError(
        f"apply_updates needs one gradient per variable (None where a "
        f"variable has none); given {len(gradients)} gradients for "
        f"{len(variables)} variables.")
  dense = all(g is None or (isinstance(g, tf.Tensor) and g.dtype == v.dtype
                            and v.dtype.is_floating)
              for g, v in zip(gradients, variables))
  if isinstance(optimizer, snt.optimizers.Adam) and dense:
    _fused_adam(optimizer, gradients, variables)
  elif (isinstance(optimizer, snt.optimizers.RMSProp) and dense and
        not optimizer.centered):
    _fused_rmsprop(optimizer, gradients, variables)
  else:
    optimizer.apply(gradients, variables)


def _slots(optimizer: snt.Optimizer, name: str,
           variables: Sequence[tf.Variable]) -> Sequence[tf.Variable]:
  """The optimizer's slot list `name` (made on first use, as Sonnet's
  `apply` makes it), one per variable."""
  create_slots(optimizer, variables)
  slots = getattr(optimizer, name)
  if len(slots) != len(variables):
    raise ValueError(
        f"the optimizer holds slots for {len(slots)} variables, the update "
        f"names {len(variables)}: create its slots for these variables "
        "(optimization.create_slots) and apply every update to them.")
  return slots


def _fused_adam(optimizer: snt.optimizers.Adam,
                gradients: Sequence[Optional[tf.Tensor]],
                variables: Sequence[tf.Variable]) -> None:
  optimizer.step.assign_add(1)

  def scalars(dtype: tf.DType) -> Dict[str, tf.Tensor]:
    t = tf.cast(optimizer.step, dtype)
    beta1 = tf.cast(optimizer.beta1, dtype)
    beta2 = tf.cast(optimizer.beta2, dtype)
    beta2_power = tf.pow(beta2, t)
    return dict(beta1_power=tf.pow(beta1, t), beta2_power=beta2_power,
                lr=tf.cast(optimizer.learning_rate, dtype), beta1=beta1,
                beta2=beta2, epsilon=tf.cast(optimizer.epsilon, dtype) *
                tf.sqrt(1.0 - beta2_power))
  _apply_kernel(tf.raw_ops.ResourceApplyAdam, optimizer, dict(m="m", v="v"),
                scalars, gradients, variables)


def _fused_rmsprop(optimizer: snt.optimizers.RMSProp,
                   gradients: Sequence[Optional[tf.Tensor]],
                   variables: Sequence[tf.Variable]) -> None:
  def scalars(dtype: tf.DType) -> Dict[str, tf.Tensor]:
    return dict(lr=tf.cast(optimizer.learning_rate, dtype),
                rho=tf.cast(optimizer.decay, dtype),
                momentum=tf.cast(optimizer.momentum, dtype),
                epsilon=tf.cast(optimizer.epsilon, dtype))
  _apply_kernel(tf.raw_ops.ResourceApplyRMSProp, optimizer,
                dict(ms="ms", mom="mom"), scalars, gradients, variables)


def _apply_kernel(kernel: Callable[..., Any], optimizer: snt.Optimizer,
                  slot_args: Dict[str, str],
                  scalars: Callable[[tf.DType], Dict[str, tf.Tensor]],
                  gradients: Sequence[Optional[tf.Tensor]],
                  variables: Sequence[tf.Variable]) -> None:
  """`kernel` once per variable with a gradient: its slots (kernel
  argument -> the optimizer's slot list) and `scalars(dtype)`, built once
  per dtype."""
  slots = {arg: _slots(optimizer, name, variables)
           for arg, name in slot_args.items()}
  per_dtype: Dict[tf.DType, Dict[str, tf.Tensor]] = {}
  for i, (gradient, variable) in enumerate(zip(gradients, variables)):
    if gradient is None:
      continue
    if variable.dtype not in per_dtype:
      per_dtype[variable.dtype] = scalars(variable.dtype)
    kernel(var=variable.handle, grad=gradient,
           **{arg: slot[i].handle for arg, slot in slots.items()},
           **per_dtype[variable.dtype])


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
