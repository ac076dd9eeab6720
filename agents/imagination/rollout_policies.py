"""Rollout policies pi_r: which actions the I2A feeds its frozen envmodel.

Where it sits in the data flow: the imagination core (imagination.py) asks a
`RolloutPolicy` for the actions of every imagined model step; the I2A network
(networks.py) adds the strategy's auxiliary loss (distillation, entropy
penalty) to the actor-critic loss through `auxiliary_loss`.

A strategy is ONE class here: it owns its actions, its loss (`extras` then
`loss`), what the actor must store for it (`needs_initial_features`),
whether the policy gradient passes through the model (`through_model`), the
trainable part it attaches to the model (`attach`: p_imag), and the models
it refuses (`check_model`). The network asks the class and never compares
strategy names; `register_strategy` adds a strategy from anywhere (its name
is then a valid `config.network.rollout_policy`), built from the network
config by `from_config` (tests/agents/test_new_strategy.py defines one).

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
from typing import (Any, Dict, Mapping, NamedTuple, Optional, Tuple, Type,
                    TypeVar)

import sonnet as snt
import tensorflow as tf

from envmodels import noise

# name -> RolloutPolicy subclass, filled by register_strategy (the four of
# Buesing et al. below, and any registered from outside).
STRATEGIES: Dict[str, Type["RolloutPolicy"]] = {}


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
  """A rollout strategy: the actions of each imagined model step (one step
  = c primitive actions) and everything the I2A does differently for it.

  Attributes (class level):
    strategy: its name, a key of STRATEGIES once registered.
    relaxed: whether actions are float probabilities [N, c, A].
    needs_features: whether `actions` reads its `features` argument.
    needs_initial_features: whether it reads the features of s_t|t (the
      imagination core computes them; the actor stores them with stored
      rollouts, network side input 'initial_features').
    through_model: whether the policy gradient must pass through the
      model's rollouts (the learner then recomputes them; a model whose
      outputs carry no gradient to its actions is refused, unless the
      strategy's own `check_model` says otherwise).
  Attributes (instance): network, the trainable pi_r network, or None.
  """

  strategy: str = ""
  relaxed: bool = False
  needs_features: bool = False
  needs_initial_features: bool = False
  through_model: bool = False

  def __init__(self, num_actions: int, jump: int,
               name: Optional[str] = None):
    super().__init__(name=name)
    if num_actions < 1 or jump < 1:
      raise ValueError(f"num_actions and jump must be >= 1, given "
                       f"{num_actions} and {jump}.")
    self.num_actions = num_actions
    self.jump = jump
    self.network: Optional[RolloutPolicyNetwork] = None

  @classmethod
  def from_config(cls, num_actions: int, jump: int,
                  config: Mapping[str, Any]) -> "RolloutPolicy":
    """Builds the strategy from the I2A network config (config.network,
    configs/agents/i2a.py): the fields it reads, nothing else. Default:
    no settings."""
    del config
    return cls(num_actions, jump)

  # -- What the I2A asks the strategy ----------------------------------------

  def check_model(self, model: Any, depth: int,
                  fix_first_action: bool) -> None:
    """Raises ValueError (saying what to choose instead) for a model or
    setting this strategy cannot work with. Default: a `through_model`
    strategy refuses models whose outputs carry no gradient to actions."""
    del depth, fix_first_action
    if self.through_model and not model.uses_actions:
      raise ValueError(
          f"rollout_policy={self.strategy!r} backpropagates the policy "
          f"gradient through the model into pi_r, but this "
          f"{model.spec.kind!r} model's outputs carry no gradient to its "
          "actions (action-free, the VAE baseline, the copy model or the "
          "non-differentiable oracle); choose 'distillation' or 'random'.")

  def attach(self, model: Any, seed: int) -> Optional[snt.Module]:
    """The trainable module this strategy attaches to the frozen model (its
    variables are learnable, the model's others are not), or None
    (default)."""
    del model, seed
    return None

  def extras(self, imagined: Any, num_rollouts: int) -> Dict[str, tf.Tensor]:
    """What `loss` needs from one network call, [B, ...] each, from the
    core's Imagination (rows b * K + k). Default: nothing."""
    del imagined, num_rollouts
    return {}

  def loss(self, policy_logits: tf.Tensor, extras: Mapping[str, tf.Tensor]
           ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """The strategy's auxiliary loss (scalar) and its metrics, from the
    agent's policy logits [B, A] and `extras`. Default: 0, none."""
    del policy_logits, extras
    return tf.constant(0.0), {}

  # -- Actions ---------------------------------------------------------------

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


PolicyClass = TypeVar("PolicyClass", bound=Type[RolloutPolicy])


def register_strategy(cls: PolicyClass) -> PolicyClass:
  """Registers a RolloutPolicy subclass under `cls.strategy` (one call, from
  any module; usable as a class decorator). Its name becomes a valid
  config.network.rollout_policy."""
  if not (isinstance(cls, type) and issubclass(cls, RolloutPolicy)):
    raise ValueError(f"register_strategy takes a RolloutPolicy subclass, "
                     f"given {cls!r}.")
  if not cls.strategy:
    raise ValueError(f"{cls.__name__} has no `strategy` name; set the class "
                     "attribute strategy = 'my_strategy'.")
  known = STRATEGIES.get(cls.strategy)
  if known is not None and known is not cls:
    raise ValueError(f"rollout strategy {cls.strategy!r} is registered twice "
                     f"({known.__name__} and {cls.__name__}); pick another "
                     "name.")
  STRATEGIES[cls.strategy] = cls
  return cls


def _check_weight(name: str, value: float) -> float:
  if value < 0:
    raise ValueError(f"{name} must be >= 0 (a loss weight; the sign is built "
                     f"in), given {value}.")
  return float(value)


@register_strategy
class DistillationPolicy(RolloutPolicy):
  """'distillation': samples from pi_r, which imitates the agent's policy:
  loss lambda_D * mean H(stop_gradient(pi), pi_r(. | s_t|t)) (a positive
  weight: minimising it moves pi_r towards pi, never pi towards pi_r)."""

  strategy = "distillation"
  needs_features = True
  needs_initial_features = True

  def __init__(self, num_actions: int, jump: int, *, channels: int,
               hidden: int, weight: float):
    super().__init__(num_actions, jump, name="distillation_policy")
    self.network = RolloutPolicyNetwork(num_actions, channels, hidden)
    self.weight = _check_weight("distillation_weight", weight)

  @classmethod
  def from_config(cls, num_actions, jump, config):
    return cls(num_actions, jump, channels=config["rollout_policy_channels"],
               hidden=config["rollout_policy_hidden"],
               weight=config["distillation_weight"])

  def actions(self, features, batch_size, keys) -> RolloutActions:
    logits = self.network(features)  # [N, A]
    return RolloutActions(self._sample(logits, keys), logits)

  def extras(self, imagined, num_rollouts):
    return {"rollout_policy_logits": self.network(
        imagined.initial_features)}  # [B, A]: pi_r(. | s_t|t)

  def loss(self, policy_logits, extras):
    cross_entropy = distillation_cross_entropy(
        policy_logits, extras["rollout_policy_logits"])
    agent_entropy = tf.stop_gradient(entropy(policy_logits))
    mean = tf.reduce_mean(cross_entropy)
    return self.weight * mean, {
        "distillation_cross_entropy": mean,
        "distillation_kl": tf.reduce_mean(cross_entropy - agent_entropy)}


@register_strategy
class LearningToQueryPolicy(RolloutPolicy):
  """'learning_to_query': pi_r's probabilities as relaxed actions, trained
  by the policy gradient backpropagated through the frozen model; loss:
  penalty * mean entropy of pi_r over the K rollouts' queried steps."""

  strategy = "learning_to_query"
  relaxed = True
  needs_features = True
  through_model = True

  def __init__(self, num_actions: int, jump: int, *, channels: int,
               hidden: int, entropy_penalty: float):
    super().__init__(num_actions, jump, name="learning_to_query_policy")
    self.network = RolloutPolicyNetwork(num_actions, channels, hidden)
    self.entropy_penalty = _check_weight("query_entropy_penalty",
                                         entropy_penalty)

  @classmethod
  def from_config(cls, num_actions, jump, config):
    return cls(num_actions, jump, channels=config["rollout_policy_channels"],
               hidden=config["rollout_policy_hidden"],
               entropy_penalty=config["query_entropy_penalty"])

  def check_model(self, model, depth, fix_first_action):
    super().check_model(model, depth, fix_first_action)
    if fix_first_action and depth < 2:
      raise ValueError(
          "rollout_policy='learning_to_query' with fix_first_action and "
          f"depth {depth} never queries pi_r (the first action is fixed); "
          "use depth >= 2.")

  def actions(self, features, batch_size, keys) -> RolloutActions:
    logits = self.network(features)  # [N, A]
    probabilities = tf.nn.softmax(logits)  # differentiable
    relaxed = tf.tile(probabilities[:, None, :], [1, self.jump, 1])
    return RolloutActions(relaxed, logits)  # [N, c, A]

  def extras(self, imagined, num_rollouts):
    entropies = entropy(imagined.rollout_policy_logits)  # [B*K, n]
    return {"rollout_policy_entropy": tf.reduce_mean(
        tf.reshape(entropies, [-1, num_rollouts * entropies.shape[1]]),
        -1)}  # [B]

  def loss(self, policy_logits, extras):
    mean = tf.reduce_mean(extras["rollout_policy_entropy"])
    return self.entropy_penalty * mean, {"rollout_policy_entropy": mean}


@register_strategy
class ImaginationPriorPolicy(RolloutPolicy):
  """'imagination_prior': the action-free model ignores actions; zeros of
  the right shape keep the EnvModel interface happy. The trainable prior
  p_imag it attaches to the model gets the policy gradient through the
  rollouts."""

  strategy = "imagination_prior"
  through_model = True

  def __init__(self, num_actions: int, jump: int):
    super().__init__(num_actions, jump, name="imagination_prior_policy")

  def check_model(self, model, depth, fix_first_action):
    spec = model.spec
    if not (spec.action_free and hasattr(model, "attach_imagination_prior")):
      raise ValueError(
          "rollout_policy='imagination_prior' needs an action-free sSSM "
          f"(spec.kind 'sssm', action_free=True), given {spec}. Pretrain "
          "one with configs/envmodels/sssm_action_free.py.")

  def attach(self, model, seed):
    return model.imagination_prior or model.attach_imagination_prior(seed)

  def first_actions(self, indices: tf.Tensor) -> tf.Tensor:
    return tf.zeros([tf.shape(indices)[0], self.jump], tf.int32)

  def actions(self, features, batch_size, keys) -> RolloutActions:
    return RolloutActions(tf.zeros([batch_size, self.jump], tf.int32), None)


@register_strategy
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
                        config: Mapping[str, Any]) -> RolloutPolicy:
  """The rollout policy of `strategy` (a key of STRATEGIES), built from the
  I2A network config (config.network) by its class's `from_config`."""
  return STRATEGIES[check_strategy(strategy)].from_config(
      num_actions, jump, config)


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


def check_strategy(strategy: str) -> str:
  """`strategy` if registered, else a ValueError naming the known ones."""
  if strategy not in STRATEGIES:
    raise ValueError(f"unknown rollout_policy {strategy!r}; choose one of "
                     f"{', '.join(sorted(STRATEGIES))} (or register one: "
                     "rollout_policies.register_strategy).")
  return strategy
