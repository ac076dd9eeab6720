"""Rollout policies pi_r: which actions the I2A feeds its frozen envmodel.

Where it sits in the data flow: the imagination core (imagination.py) asks a
`RolloutPolicy` for the actions of every imagined model step; the I2A network
(networks.py) adds the strategy's auxiliary loss (distillation, entropy
penalty) to the actor-critic loss through `auxiliary_loss`.

Strategies (Buesing et al. 2018, "Learning to query"; config `rollout_policy`):
  'distillation'       pi_r(a | s) imitates the agent's policy: the I2A adds
                       lambda_D * H(stop_gradient(pi(.|o_t)), pi_r(.|s_t|t))
                       at the real time step (a cross-entropy FROM the
                       agent's policy, the target, TO pi_r, with a POSITIVE
                       weight); rollouts sample integer actions from pi_r
                       (no gradient flows through samples).
  'learning_to_query'  pi_r's probability vector is fed to the model as a
                       relaxed action; the policy gradient reaches pi_r
                       through the whole rollout; an entropy PENALTY pushes
                       pi_r towards one-hot actions (what the model saw in
                       training).
  'imagination_prior'  the model is an action-free sSSM whose prior was
                       swapped for a trainable p_imag; actions are
                       irrelevant (zeros of the right shape are passed), the
                       K rollouts are K samples. No rollout policy network.
  'random'             uniform random actions.

Decisions:
  * pi_r reads the abstract state features (StepOutput.features, the model
    state for state-space models: "for SSMs the rollout policy depends on
    the state only"), also when the I2A summarises rendered frames.
  * Jumpy models (spec.jump = c): pi_r outputs ONE distribution per model
    step, applied to all c primitive actions of that step (c i.i.d. samples,
    or the same probability vector c times for the relaxed query). The agent
    policy it distils acts on one primitive action, so one distribution
    has one well-defined target.
  * Samples are stateless: Gumbel-max (or uniform draws) from each row's
    noise keys (envmodels/noise.py) that the imagination core passes in, so
    the learner recomputing a rollout from the keys the actor stored draws
    exactly the actor's actions, whatever the batch.
"""

from __future__ import annotations

import abc
from typing import NamedTuple, Optional, Sequence

import sonnet as snt
import tensorflow as tf

from envmodels import noise

STRATEGIES = ("distillation", "learning_to_query", "imagination_prior",
              "random")


class RolloutActions(NamedTuple):
  actions: tf.Tensor  # int32 [N, c] or float32 [N, c, A] (relaxed)
  logits: Optional[tf.Tensor]  # float32 [N, A]: pi_r's logits, or None


class RolloutPolicyNetwork(snt.Module):
  """pi_r(a | s): a small CNN over the abstract state map -> logits [N, A].

  conv 3x3 (channels, stride 1) -> relu -> flatten -> linear(hidden) -> relu
  -> linear(num_actions).
  """

  def __init__(self, num_actions: int, channels: int = 16, hidden: int = 64,
               name: str = "rollout_policy_network"):
    super().__init__(name=name)
    if min(num_actions, channels, hidden) < 1:
      raise ValueError("RolloutPolicyNetwork: num_actions, channels and "
                       f"hidden must be >= 1, given {num_actions}, "
                       f"{channels}, {hidden}.")
    self._conv = snt.Conv2D(channels, 3, name="conv")
    self._hidden = snt.Linear(hidden, name="hidden")
    self._logits = snt.Linear(num_actions, name="logits")

  def __call__(self, features: tf.Tensor) -> tf.Tensor:
    """features float32 [N, h, w, d] -> logits float32 [N, A]."""
    hidden = tf.nn.relu(self._conv(features))  # [N, h, w, channels]
    hidden = snt.Flatten()(hidden)  # [N, h * w * channels]
    return self._logits(tf.nn.relu(self._hidden(hidden)))


class RolloutPolicy(snt.Module, abc.ABC):
  """The actions of each imagined model step (one step = c primitive actions).

  Attributes:
    strategy: one of STRATEGIES.
    network: the trainable pi_r network, or None.
    relaxed: whether actions are float probabilities [N, c, A].
    needs_features: whether `actions` reads its `features` argument.
  """

  strategy: str = ""
  relaxed: bool = False
  needs_features: bool = False

  def __init__(self, num_actions: int, jump: int,
               name: Optional[str] = None):
    super().__init__(name=name)
    if num_actions < 1 or jump < 1:
      raise ValueError(f"num_actions and jump must be >= 1, given "
                       f"{num_actions} and {jump}.")
    self.num_actions = num_actions
    self.jump = jump
    self.network: Optional[RolloutPolicyNetwork] = None

  def first_actions(self, indices: tf.Tensor) -> tf.Tensor:
    """The fixed first step: primitive action `indices` [N] held for all c
    actions of the step -> int32 [N, c] (float one-hot [N, c, A] if
    relaxed)."""
    actions = tf.tile(tf.cast(indices, tf.int32)[:, None], [1, self.jump])
    if self.relaxed:
      return tf.one_hot(actions, self.num_actions, dtype=tf.float32)
    return actions  # [N, c]

  @abc.abstractmethod
  def actions(self, features: Optional[tf.Tensor], batch_size: tf.Tensor,
              keys: tf.Tensor) -> RolloutActions:
    """Actions for one model step from the abstract features [N, h, w, d]
    of the current imagined state (None if `needs_features` is False);
    batch_size N as a scalar tensor; keys uint32 [N, 2]: this step's noise
    keys of each row (envmodels/noise.py)."""

  def _sample(self, logits: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
    """c i.i.d. samples from softmax(logits [N, A]) -> int32 [N, c]
    (Gumbel-max from the rows' keys; no gradient)."""
    logits = tf.stop_gradient(logits)
    gumbel = noise.gumbel(keys, [self.jump, self.num_actions])  # [N, c, A]
    return tf.argmax(logits[:, None, :] + gumbel, axis=-1,
                     output_type=tf.int32)


class DistillationPolicy(RolloutPolicy):
  """'distillation': samples from pi_r, which imitates the agent's policy
  (the loss lives in the I2A network's auxiliary_loss)."""

  strategy = "distillation"
  needs_features = True

  def __init__(self, num_actions: int, jump: int, channels: int = 16,
               hidden: int = 64):
    super().__init__(num_actions, jump, name="distillation_policy")
    self.network = RolloutPolicyNetwork(num_actions, channels, hidden)

  def actions(self, features, batch_size, keys) -> RolloutActions:
    logits = self.network(features)  # [N, A]
    return RolloutActions(self._sample(logits, keys), logits)


class LearningToQueryPolicy(RolloutPolicy):
  """'learning_to_query': pi_r's probabilities as relaxed actions, trained
  by the policy gradient backpropagated through the frozen model."""

  strategy = "learning_to_query"
  relaxed = True
  needs_features = True

  def __init__(self, num_actions: int, jump: int, channels: int = 16,
               hidden: int = 64):
    super().__init__(num_actions, jump, name="learning_to_query_policy")
    self.network = RolloutPolicyNetwork(num_actions, channels, hidden)

  def actions(self, features, batch_size, keys) -> RolloutActions:
    logits = self.network(features)  # [N, A]
    probabilities = tf.nn.softmax(logits)  # differentiable
    relaxed = tf.tile(probabilities[:, None, :], [1, self.jump, 1])
    return RolloutActions(relaxed, logits)  # [N, c, A]


class ImaginationPriorPolicy(RolloutPolicy):
  """'imagination_prior': the action-free model ignores actions; zeros of
  the right shape keep the EnvModel interface happy."""

  strategy = "imagination_prior"

  def __init__(self, num_actions: int, jump: int):
    super().__init__(num_actions, jump, name="imagination_prior_policy")

  def first_actions(self, indices: tf.Tensor) -> tf.Tensor:
    return tf.zeros([tf.shape(indices)[0], self.jump], tf.int32)

  def actions(self, features, batch_size, keys) -> RolloutActions:
    return RolloutActions(tf.zeros([batch_size, self.jump], tf.int32), None)


class UniformRandomPolicy(RolloutPolicy):
  """'random': uniform random primitive actions."""

  strategy = "random"

  def __init__(self, num_actions: int, jump: int):
    super().__init__(num_actions, jump, name="uniform_random_policy")

  def actions(self, features, batch_size, keys) -> RolloutActions:
    uniform = noise.uniform(keys, [self.jump])  # [N, c] in (0, 1)
    actions = tf.minimum(tf.cast(uniform * self.num_actions, tf.int32),
                         self.num_actions - 1)
    return RolloutActions(actions, None)  # [N, c]


def make_rollout_policy(strategy: str, num_actions: int, jump: int,
                        channels: int = 16, hidden: int = 64
                        ) -> RolloutPolicy:
  """The rollout policy of `strategy` (one of STRATEGIES)."""
  if strategy in ("distillation", "learning_to_query"):
    cls = (DistillationPolicy if strategy == "distillation"
           else LearningToQueryPolicy)
    return cls(num_actions, jump, channels=channels, hidden=hidden)
  if strategy == "imagination_prior":
    return ImaginationPriorPolicy(num_actions, jump)
  if strategy == "random":
    return UniformRandomPolicy(num_actions, jump)
  raise ValueError(f"unknown rollout_policy {strategy!r}; choose one of "
                   f"{', '.join(STRATEGIES)}.")


def entropy(logits: tf.Tensor) -> tf.Tensor:
  """Entropy of softmax(logits) over the last axis: [..., A] -> [...]."""
  log_probabilities = tf.nn.log_softmax(logits)
  return -tf.reduce_sum(tf.exp(log_probabilities) * log_probabilities, -1)


def distillation_cross_entropy(agent_logits: tf.Tensor,
                               rollout_logits: tf.Tensor) -> tf.Tensor:
  """H(stop_gradient(pi), pi_r) = -sum_a pi(a) log pi_r(a): [..., A] -> [...].

  The agent's policy pi is the target (no gradient reaches it); minimising
  this moves pi_r towards pi. KL(pi || pi_r) = this - H(pi).
  """
  target = tf.stop_gradient(tf.nn.softmax(agent_logits))
  return -tf.reduce_sum(target * tf.nn.log_softmax(rollout_logits), -1)


def check_strategy(strategy: str, known: Sequence[str] = STRATEGIES) -> str:
  if strategy not in known:
    raise ValueError(f"unknown rollout_policy {strategy!r}; choose one of "
                     f"{', '.join(known)}.")
  return strategy
