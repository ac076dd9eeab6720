"""The n-step actor-critic loss against hand-computed numbers."""

import numpy as np
import pytest
import tensorflow as tf

from agents import losses

LN2 = 0.6931471805599453
LN4 = 2 * LN2


def test_n_step_returns_match_a_hand_computed_example():
  # gamma 0.9, rewards 1, 2, 3, the second action terminates, V(o_3) = 10:
  # G_2 = 3 + 0.9 * 10 = 12; G_1 = 2 (cut); G_0 = 1 + 0.9 * 2 = 2.8.
  returns = losses.n_step_returns(
      rewards=[[1.0], [2.0], [3.0]], discounts=[[1.0], [0.0], [1.0]],
      bootstrap_value=[10.0], gamma=0.9)
  np.testing.assert_allclose(returns.numpy(), [[2.8], [2.0], [12.0]],
                             rtol=1e-6)


def test_a_termination_cuts_the_bootstrap_and_later_rewards():
  def returns(later_reward, bootstrap):
    return losses.n_step_returns(
        rewards=[[1.0], [0.5], [later_reward]],
        discounts=[[1.0], [0.0], [1.0]], bootstrap_value=[bootstrap],
        gamma=0.99).numpy()
  a, b = returns(0.0, 0.0), returns(100.0, -50.0)
  # Steps up to the termination see nothing of what comes after it.
  np.testing.assert_allclose(a[:2], b[:2])
  np.testing.assert_allclose(a[:2, 0], [1.0 + 0.99 * 0.5, 0.5], rtol=1e-6)
  np.testing.assert_allclose(b[2, 0], 100.0 + 0.99 * -50.0, rtol=1e-6)
  # Without a termination the bootstrap flows back to the first step.
  no_end = losses.n_step_returns([[0.0], [0.0]], [[1.0], [1.0]], [1.0],
                                 gamma=0.5).numpy()
  np.testing.assert_allclose(no_end[:, 0], [0.25, 0.5])


def _example(values=(1.0, 1.0, 2.0)):
  # pi = (0.5, 0.25, 0.25) at every step; actions 0, 1, 2.
  logits = np.log(np.array([[0.5, 0.25, 0.25]] * 3, np.float32))[:, None]
  return dict(policy_logits=tf.constant(logits),  # [T=3, B=1, A=3]
              values=tf.constant(np.array(values, np.float32)[:, None]),
              actions=tf.constant([[0], [1], [2]], tf.int32),
              rewards=tf.constant([[1.0], [2.0], [3.0]]),
              discounts=tf.constant([[1.0], [0.0], [1.0]]),
              bootstrap_value=tf.constant([10.0]))


def test_actor_critic_loss_matches_a_hand_computed_example():
  out = losses.actor_critic_loss(**_example(), gamma=0.9, value_coef=0.5,
                                 entropy_coef=0.01)
  # Returns 2.8, 2, 12; values 1, 1, 2 -> advantages 1.8, 1, 10.
  # log pi(a_t) = -ln 2, -ln 4, -ln 4.
  policy_loss = (1.8 * LN2 + 1.0 * LN4 + 10.0 * LN4) / 3  # 5.4989677
  value_loss = (1.8 ** 2 + 1.0 ** 2 + 10.0 ** 2) / 3  # 34.746667
  entropy = 0.5 * LN2 + 2 * 0.25 * LN4  # 1.0397208
  metrics = {k: float(v) for k, v in out.metrics.items()}
  assert metrics["policy_loss"] == pytest.approx(5.4989677, rel=1e-6)
  assert metrics["policy_loss"] == pytest.approx(policy_loss, rel=1e-6)
  assert metrics["value_loss"] == pytest.approx(34.746667, rel=1e-6)
  assert metrics["value_loss"] == pytest.approx(value_loss, rel=1e-6)
  assert metrics["entropy"] == pytest.approx(1.0397208, rel=1e-6)
  assert metrics["entropy"] == pytest.approx(entropy, rel=1e-6)
  assert float(out.loss) == pytest.approx(
      5.4989677 + 0.5 * 34.746667 - 0.01 * 1.0397208, rel=1e-6)  # 22.8619038
  assert metrics["value_error"] == pytest.approx((1.8 + 1 + 10) / 3, rel=1e-6)
  assert metrics["return"] == pytest.approx((2.8 + 2 + 12) / 3, rel=1e-6)


def test_gradients_treat_advantages_and_bootstrap_as_constants():
  example = _example()
  values = tf.Variable(example.pop("values"))
  bootstrap = tf.Variable(example.pop("bootstrap_value"))
  logits = tf.Variable(example.pop("policy_logits"))
  with tf.GradientTape() as tape:
    out = losses.actor_critic_loss(policy_logits=logits, values=values,
                                   bootstrap_value=bootstrap, **example,
                                   gamma=0.9, value_coef=0.5,
                                   entropy_coef=0.0)
  d_values, d_bootstrap, d_logits = tape.gradient(
      out.loss, [values, bootstrap, logits])
  # Only the value loss reaches V: 0.5 * 2 * (V - G) / N.
  np.testing.assert_allclose(d_values.numpy()[:, 0],
                             0.5 * 2 * np.array([-1.8, -1.0, -10.0]) / 3,
                             rtol=1e-5)
  assert d_bootstrap is None or not np.any(d_bootstrap.numpy())
  # Policy gradient: -(onehot(a) - pi) * advantage / N.
  pi = np.array([0.5, 0.25, 0.25])
  expected = np.stack([-(np.eye(3)[a] - pi) * adv / 3
                       for a, adv in zip([0, 1, 2], [1.8, 1.0, 10.0])])
  np.testing.assert_allclose(d_logits.numpy()[:, 0], expected, rtol=1e-5,
                             atol=1e-7)


def test_batch_entries_are_independent():
  example = _example()
  doubled = {k: tf.concat([v, v * 0 + v], axis=1) if k != "bootstrap_value"
             else tf.concat([v, v], 0) for k, v in example.items()}
  single = losses.actor_critic_loss(**example)
  batch = losses.actor_critic_loss(**doubled)
  for key in single.metrics:
    assert float(batch.metrics[key]) == pytest.approx(
        float(single.metrics[key]), rel=1e-6), key
