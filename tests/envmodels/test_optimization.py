"""Tests of the guarded, fused optimizer updates (envmodels/optimization.py):
the fused kernels make Sonnet's Adam and RMSProp updates, on Sonnet's own
slots, and a non-finite update is skipped."""

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

from envmodels import optimization

SHAPES = [(3, 3, 4, 8), (8,), (5, 2)]


def _variables(seed: int):
  rng = np.random.default_rng(seed)
  return [tf.Variable(rng.normal(size=s).astype(np.float32)) for s in SHAPES]


def _gradients(rng: np.random.Generator, step: int):
  # Some gradients tiny, where Adam's epsilon matters, and one None now
  # and then (a variable without a gradient this step).
  scale = 1e-7 if step % 4 == 0 else 1.0
  gradients = [tf.constant(scale * rng.normal(size=s).astype(np.float32))
               for s in SHAPES]
  if step % 3 == 0:
    gradients[1] = None
  return gradients


@pytest.mark.parametrize("make", [
    lambda: snt.optimizers.Adam(1e-2),
    lambda: snt.optimizers.Adam(3e-3, beta1=0.5, beta2=0.9, epsilon=1e-4),
    lambda: snt.optimizers.RMSProp(1e-2, decay=0.99, epsilon=1e-5),
    lambda: snt.optimizers.RMSProp(1e-2, decay=0.9, momentum=0.9,
                                   epsilon=0.1),
], ids=["adam", "adam_knobs", "rmsprop", "rmsprop_momentum"])
def test_fused_updates_equal_sonnets_on_its_own_slots(make):
  sonnet_vars, fused_vars = _variables(0), _variables(0)
  sonnet_opt, fused_opt = make(), make()
  optimization.create_slots(fused_opt, fused_vars)
  fused_apply = tf.function(
      lambda g: optimization.apply_updates(fused_opt, g, fused_vars))
  rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
  for step in range(12):
    sonnet_opt.apply(_gradients(rng_a, step), sonnet_vars)
    fused_apply(_gradients(rng_b, step))
  for a, b in zip(sonnet_vars, fused_vars):
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-7)
  # The state lives in the optimizer's slots, as Sonnet's (checkpoints of
  # either resume the other).
  slots = ("m", "v") if isinstance(sonnet_opt, snt.optimizers.Adam) else (
      "ms", "mom")
  for name in slots:
    for a, b in zip(getattr(sonnet_opt, name), getattr(fused_opt, name)):
      np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-7)
  if isinstance(sonnet_opt, snt.optimizers.Adam):
    assert int(fused_opt.step.numpy()) == int(sonnet_opt.step.numpy()) == 12


def test_other_optimizers_go_through_sonnets_apply():
  sonnet_vars, ours = _variables(0), _variables(0)
  sonnet_opt = snt.optimizers.RMSProp(1e-2, centered=True)
  our_opt = snt.optimizers.RMSProp(1e-2, centered=True)
  rng = np.random.default_rng(2)
  gradients = [tf.constant(rng.normal(size=s).astype(np.float32))
               for s in SHAPES]
  sonnet_opt.apply(gradients, sonnet_vars)
  optimization.apply_updates(our_opt, gradients, ours)
  for a, b in zip(sonnet_vars, ours):
    np.testing.assert_array_equal(b.numpy(), a.numpy())
  assert len(our_opt.mg) == len(SHAPES)  # the centred slots were used


def test_a_gradient_list_of_the_wrong_length_is_refused():
  variables = _variables(0)
  with pytest.raises(ValueError, match="one gradient per variable.*given 2 "
                     "gradients for 3 variables"):
    optimization.apply_updates(snt.optimizers.Adam(1e-3),
                               [tf.zeros(s) for s in SHAPES[:2]], variables)


def test_a_non_finite_update_is_skipped_and_leaves_the_state():
  variables = _variables(0)
  optimizer = snt.optimizers.Adam(1e-2)
  optimization.create_slots(optimizer, variables)
  before = [v.numpy() for v in variables]
  gradients = [tf.fill(s, np.float32(np.nan)) for s in SHAPES]

  @tf.function
  def update(loss):
    return optimization.apply_if_finite(optimizer, gradients, variables,
                                        loss, tf.constant(1.0))

  assert not bool(update(tf.constant(np.inf)))
  for b, v in zip(before, variables):
    np.testing.assert_array_equal(v.numpy(), b)
  assert int(optimizer.step.numpy()) == 0
  assert all(not np.any(m.numpy()) for m in optimizer.m)
