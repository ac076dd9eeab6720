"""The n-step advantage actor-critic loss, as pure functions (trfl-style).

Data flow: the learner (agents/learning.py) runs the network over a batch of
unrolls from the Reverb `unrolls` queue and calls `actor_critic_loss` on the
time-major outputs; the loss returns its diagnostics with it (`LossOutput`),
so the learner logs what the loss knows. No variables, no state.

With rewards r_t, discounts d_t (0 where the action ended the episode by
termination) and gamma, the bootstrapped n-step return is
  G_t = r_t + gamma * d_t * G_{t+1},   G_n = V(o_n)  (the bootstrap value)
and the loss, averaged over time and batch, is
  policy_loss  = -log pi(a_t | o_t) * stop_gradient(G_t - V(o_t))
  value_loss   = (G_t - V(o_t))^2
  entropy      = -sum_a pi(a | o_t) log pi(a | o_t)
  loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
(the A2C of OpenAI baselines; value_coef 0.5 and entropy_coef 0.01 by default).
"""

from __future__ import annotations

from typing import Dict, NamedTuple

import tensorflow as tf


class LossOutput(NamedTuple):
  loss: tf.Tensor  # scalar
  metrics: Dict[str, tf.Tensor]  # scalars


def n_step_returns(rewards: tf.Tensor, discounts: tf.Tensor,
                   bootstrap_value: tf.Tensor, gamma: float) -> tf.Tensor:
  """G_t = r_t + gamma * d_t * G_{t+1}, G_T = bootstrap_value.

  Args:
    rewards: float32 [T, B].
    discounts: float32 [T, B], 0 where step t ended the episode (termination):
      the return then stops there and nothing after it leaks in.
    bootstrap_value: float32 [B], V of the observation after the last step.
    gamma: the discount factor.

  Returns:
    float32 [T, B].
  """
  rewards = tf.convert_to_tensor(rewards, tf.float32)
  discounts = tf.convert_to_tensor(discounts, tf.float32)
  bootstrap_value = tf.convert_to_tensor(bootstrap_value, tf.float32)
  def backward(following, elements):
    reward, discount = elements
    return reward + gamma * discount * following
  return tf.scan(backward, (rewards, discounts), initializer=bootstrap_value,
                 reverse=True)  # [T, B]


def actor_critic_loss(policy_logits: tf.Tensor, values: tf.Tensor,
                      actions: tf.Tensor, rewards: tf.Tensor,
                      discounts: tf.Tensor, bootstrap_value: tf.Tensor,
                      gamma: float = 0.99, value_coef: float = 0.5,
                      entropy_coef: float = 0.01) -> LossOutput:
  """The n-step advantage actor-critic loss of one batch of unrolls.

  Args (time-major):
    policy_logits: float32 [T, B, A], pi(. | o_t) of the learner's network.
    values: float32 [T, B], V(o_t).
    actions: int32 [T, B], the actions taken at o_t.
    rewards: float32 [T, B], the rewards after each action.
    discounts: float32 [T, B], 0 where the action ended the episode.
    bootstrap_value: float32 [B], V(o_T) (gradients do not flow into it).
    gamma, value_coef, entropy_coef: see the module docstring.

  Returns:
    LossOutput(loss, metrics) with metrics loss, policy_loss, value_loss,
    entropy, value_error (mean |G - V|), advantage (mean), return (mean G),
    value (mean V).
  """
  values = tf.convert_to_tensor(values, tf.float32)
  returns = tf.stop_gradient(n_step_returns(
      rewards, discounts, tf.stop_gradient(bootstrap_value), gamma))  # [T, B]
  errors = returns - values  # [T, B]
  advantages = tf.stop_gradient(errors)  # [T, B]
  log_probs = tf.nn.log_softmax(policy_logits)  # [T, B, A]
  log_prob_taken = tf.gather(log_probs, tf.cast(actions, tf.int32),
                             batch_dims=2)  # [T, B]
  policy_loss = -tf.reduce_mean(log_prob_taken * advantages)
  value_loss = tf.reduce_mean(tf.square(errors))
  entropy = tf.reduce_mean(-tf.reduce_sum(tf.exp(log_probs) * log_probs,
                                          axis=-1))
  loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
  metrics = {
      "loss": loss,
      "policy_loss": policy_loss,
      "value_loss": value_loss,
      "entropy": entropy,
      "value_error": tf.reduce_mean(tf.abs(advantages)),
      "advantage": tf.reduce_mean(advantages),
      "return": tf.reduce_mean(returns),
      "value": tf.reduce_mean(values),
  }
  return LossOutput(loss, metrics)
