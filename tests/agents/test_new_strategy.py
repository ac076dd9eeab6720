"""The recipe for a new rollout strategy, proved end to end
(docs/architecture.md, "A new rollout strategy").

A strategy lives in this file only: `MaxEntropyPolicy` ('max_entropy'),
samples from a pi_r network and an entropy BONUS on pi_r(. | s_t|t) as its
loss. It owns everything strategy-specific (rollout_policies.RolloutPolicy):
its settings from the network config (`from_config`), its loss (`extras`,
`loss`), what the actor stores for it (`needs_initial_features`), that no
gradient passes through the model (`through_model` False: the learner reads
the actor's stored rollouts), and what it refuses (`check_model`: models that
start from live environments). One call registers it; a tiny I2A then trains
with it by name (config.network.rollout_policy='max_entropy'), with no other
file touched.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from agents import training
from agents.imagination import networks
from agents.imagination import rollout_policies
from configs.agents import i2a as i2a_config
from i2a.metrics import read_column

FRAME = (16, 24, 3)
NUM_ACTIONS = 5
BONUS = 0.5


class MaxEntropyPolicy(rollout_policies.RolloutPolicy):
  """'max_entropy': pi_r samples; loss -bonus * mean H(pi_r(. | s_t|t))."""

  strategy = "max_entropy"
  needs_features = True
  needs_initial_features = True

  def __init__(self, num_actions: int, jump: int, *, channels: int,
               hidden: int, bonus: float):
    super().__init__(num_actions, jump, name="max_entropy_policy")
    self.network = rollout_policies.RolloutPolicyNetwork(num_actions,
                                                         channels, hidden)
    self.bonus = bonus

  @classmethod
  def from_config(cls, num_actions, jump, config):
    return cls(num_actions, jump, channels=config["rollout_policy_channels"],
               hidden=config["rollout_policy_hidden"], bonus=BONUS)

  def check_model(self, model, depth, fix_first_action):
    if isinstance(model, envmodels.LiveEnvModel):
      raise ValueError("rollout_policy='max_entropy' reads pi_r at s_t|t "
                       "from frames; the emulator oracle is not supported.")

  def actions(self, features, batch_size, keys):
    logits = self.network(features)  # [N, A]
    return rollout_policies.RolloutActions(self._sample(logits, keys), logits)

  def extras(self, imagined, num_rollouts):
    return {"max_entropy_logits": self.network(imagined.initial_features)}

  def loss(self, policy_logits, extras):
    mean = tf.reduce_mean(rollout_policies.entropy(
        extras["max_entropy_logits"]))
    return -self.bonus * mean, {"rollout_policy_entropy": mean}


rollout_policies.register_strategy(MaxEntropyPolicy)  # the one call


def _export(directory):
  spec = envmodels.EnvModelSpec(kind="dssm_det", observation_shape=FRAME,
                                num_actions=NUM_ACTIONS, jump=1,
                                context_length=3)
  model = envmodels.build(
      spec, seed=1, **envmodels.model_class("dssm_det").tiny_hyperparameters())
  model.create_variables()
  return envmodels.export(model, str(directory))


def _config(export, **network):
  config = i2a_config.get_config("tiny")
  config.envmodel = export
  config.network.rollout_policy = "max_entropy"
  config.network.update(network)
  return config


def test_the_network_asks_the_strategy_for_loss_and_stored_inputs(tmp_path):
  export = _export(tmp_path / "export")
  network = networks.make_network(_config(export), NUM_ACTIONS, FRAME)
  assert isinstance(network.rollout_policy, MaxEntropyPolicy)
  # No gradient through the model: 'auto' stores the actor's rollouts, with
  # the features of s_t|t the strategy reads.
  assert network.rollouts_from_actor
  assert "initial_features" in network.side_input_spec()
  windows = np.random.RandomState(0).randint(
      0, 256, (2, len(network.window_offsets)) + FRAME).astype(np.uint8)
  side = network.side_inputs(windows, None)
  output = network(tf.constant(windows), {k: tf.constant(v)
                                          for k, v in side.items()})
  loss, metrics = network.auxiliary_loss(output)
  np.testing.assert_allclose(loss.numpy(),
                             -BONUS * metrics["rollout_policy_entropy"],
                             rtol=1e-6)
  assert 0.0 < float(metrics["rollout_policy_entropy"]) <= np.log(
      NUM_ACTIONS) + 1e-5
  with pytest.raises(ValueError, match="learner_rollouts='actor' cannot"):
    networks.make_network(_config(export, rollout_policy="learning_to_query",
                                  learner_rollouts="actor"),
                          NUM_ACTIONS, FRAME)


def test_a_tiny_i2a_trains_with_the_new_strategy(tmp_path):
  config = _config(_export(tmp_path / "export"))
  config.env_steps = 6 * 3  # 3 learner steps
  workdir = str(tmp_path / "run")
  assert training.run(config, workdir)["learner_steps"] == 3
  metrics = os.path.join(workdir, "metrics.csv")
  entropy = read_column(metrics, "auxiliary/rollout_policy_entropy")
  auxiliary = read_column(metrics, "auxiliary_loss")
  assert entropy is not None and np.isfinite(entropy).all()
  np.testing.assert_allclose(auxiliary, -BONUS * entropy, rtol=1e-4)


def test_unknown_and_twice_registered_strategies_are_refused():
  with pytest.raises(ValueError, match="unknown rollout_policy 'nope'.*"
                     "max_entropy"):
    rollout_policies.check_strategy("nope")
  other = type("Other", (MaxEntropyPolicy,), {})
  with pytest.raises(ValueError, match="registered twice"):
    rollout_policies.register_strategy(other)
  with pytest.raises(ValueError, match="no `strategy` name"):
    rollout_policies.register_strategy(
        type("Nameless", (MaxEntropyPolicy,), {"strategy": ""}))
