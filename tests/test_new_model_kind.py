"""The recipe for a new envmodel kind, proved end to end (docs/architecture.md,
"A new model kind").

A toy kind lives in this file only: `ToyLinearModel`, 1x1 convolutions over
space_to_depth(8) of the newest frame, registered with ONE call from outside
the package (`envmodels.register(KIND)(ToyLinearModel)`). It then

  * passes the whole conformance suite: the suite's tests are imported here
    and parametrized over CONFORMANCE_KINDS (tests/envmodels/
    test_conformance.py, `pytest_generate_tests`), the export test loading it
    in a fresh process that imports this module (CONFORMANCE_IMPORTS);
  * is exported, loaded frozen and trained inside the I2A for a few updates
    (configs/agents/i2a.py:tiny on MiniPacman, agents.training.run).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Tuple

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

import envmodels
from agents import training
from configs.agents import i2a as i2a_config
from i2a.metrics import read_column
# The conformance suite, run over CONFORMANCE_KINDS below.
from tests.envmodels.test_conformance import *  # noqa: F401,F403 pylint: disable=wildcard-import,unused-wildcard-import

KIND = "toy_linear"


class ToyLinearModel(envmodels.EnvModel):
  """A deterministic toy kind.

  state    s = conv1x1(space_to_depth(o_t / 255, 8))   [B, H/8, W/8, channels]
  step     s' = tanh(conv1x1([s, actions tiled]))       (features: s')
  reward   linear(mean of s' over space)                [B]
  render   sigmoid(depth_to_space(conv1x1(s), 8))       [B, H, W, C]
  loss     one-step teacher forcing: squared errors of frames and rewards
           (unit-variance Gaussian log-likelihoods, constants dropped).
  """

  deterministic = True

  def __init__(self, spec: envmodels.EnvModelSpec, seed: int = 0,
               channels: int = 8):
    super().__init__(spec, seed=seed, name=KIND)
    if isinstance(channels, bool) or not isinstance(channels, int) or (
        channels < 1):
      raise ValueError(f"channels must be a positive int, given {channels!r}.")
    self._hyperparameters = {"channels": channels}
    frame_channels = spec.observation_shape[-1]
    self._encoder = snt.Conv2D(channels, 1, name="encoder")
    self._transition = snt.Conv2D(channels, 1, name="transition")
    self._reward_head = snt.Linear(1, name="reward")
    self._decoder = snt.Conv2D(64 * frame_channels, 1, name="decoder")

  @property
  def hyperparameters(self) -> Dict[str, Any]:
    return dict(self._hyperparameters)

  @classmethod
  def tiny_hyperparameters(cls) -> Dict[str, Any]:
    return {"channels": 4}

  # -- The contract ------------------------------------------------------------

  def _encode(self, frames: tf.Tensor) -> tf.Tensor:
    """uint8 [N, H, W, C] -> state [N, H/8, W/8, channels]."""
    return self._encoder(tf.nn.space_to_depth(
        tf.cast(frames, tf.float32) / 255.0, 8))

  def _next(self, state: tf.Tensor, encoded_actions: tf.Tensor) -> tf.Tensor:
    height, width = state.shape[1], state.shape[2]
    tiled = tf.tile(encoded_actions[:, None, None, :], [1, height, width, 1])
    return tf.tanh(self._transition(tf.concat([state, tiled], -1)))

  def _reward(self, state: tf.Tensor) -> tf.Tensor:
    return tf.squeeze(self._reward_head(tf.reduce_mean(state, [1, 2])), -1)

  def _initial_state(self, observations: tf.Tensor) -> tf.Tensor:
    return self._encode(observations[:, -1])

  def _step(self, state: tf.Tensor, encoded_actions: tf.Tensor
            ) -> Tuple[tf.Tensor, envmodels.StepOutput]:
    new_state = self._next(state, encoded_actions)
    return new_state, envmodels.StepOutput(reward=self._reward(new_state),
                                           features=new_state)

  def _render(self, state: tf.Tensor) -> tf.Tensor:
    return tf.sigmoid(tf.nn.depth_to_space(self._decoder(state), 8))

  def state_features(self, state: tf.Tensor) -> tf.Tensor:
    return state

  # -- Training ----------------------------------------------------------------

  def _one_step(self, batch: Mapping[str, tf.Tensor]
                ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Frames [B, T, H, W, C] and rewards [B, T] predicted one step from
    the true previous frames."""
    steps = self.check_batch(batch)
    k, jump = self.spec.context_length, self.spec.jump
    observation = tf.convert_to_tensor(batch["observation"])
    previous = observation[:, k - 1:k - 1 + steps]  # [B, T, H, W, C]
    actions = tf.cast(batch["action"], tf.int32)[:, k - 1:k - 1 + steps]
    frame_shape = list(self.spec.observation_shape)
    state = self._encode(tf.reshape(previous, [-1] + frame_shape))
    new_state = self._next(state, self.encode_actions(
        tf.reshape(actions, [-1, jump])))
    frames = tf.reshape(self._render(new_state), [-1, steps] + frame_shape)
    rewards = tf.reshape(self._reward(new_state), [-1, steps])
    return frames, rewards

  def loss(self, batch: Dict[str, tf.Tensor], **knobs: Any
           ) -> envmodels.LossOutput:
    del knobs  # no latent variables: nothing to tune
    k = self.spec.context_length
    frames, rewards = self._one_step(batch)
    target = tf.cast(batch["observation"][:, k:], tf.float32) / 255.0
    image_log_prob = -0.5 * tf.reduce_mean(tf.reduce_sum(
        tf.square(frames - target), [2, 3, 4]))
    reward_mse = tf.reduce_mean(tf.square(
        rewards - tf.cast(batch["reward"][:, k:], tf.float32)))
    reward_log_prob = -0.5 * reward_mse
    log_likelihood = image_log_prob + reward_log_prob
    return envmodels.LossOutput(loss=-log_likelihood, metrics={
        "loss": -log_likelihood, "image_log_prob": image_log_prob,
        "reward_log_prob": reward_log_prob,
        "log_likelihood_per_frame": log_likelihood, "reward_mse": reward_mse})

  def diagnostics(self, batch: Mapping[str, tf.Tensor]
                  ) -> Dict[str, tf.Tensor]:
    """Pictures as every kind gives them (i2a.pretrain draws them)."""
    k = self.spec.context_length
    one_step, _ = self._one_step(batch)
    length = batch["observation"].shape[1]
    rollout = self.rollout(
        self.initial_state(batch["observation"][:, :k]),
        tf.cast(batch["action"][:, k - 1:length - 1], tf.int32), render=True)
    return {"closed_loop": one_step, "one_step_prior": one_step,
            "open_loop": rollout.frames, "open_loop_reward": rollout.rewards,
            "true_reward": tf.cast(batch["reward"][:, k:], tf.float32)}


# The one call that makes the kind known (envmodels.build / envmodels.load).
envmodels.register(KIND)(ToyLinearModel)

# The conformance suite's tests imported above run over this kind only; the
# export test's fresh process imports this module to register it.
CONFORMANCE_KINDS = (KIND,)
CONFORMANCE_IMPORTS = (__name__,)


def test_the_toy_kind_is_registered_from_outside_and_builds_by_name():
  assert KIND in envmodels.kinds()
  assert envmodels.model_class(KIND) is ToyLinearModel
  spec = envmodels.EnvModelSpec(kind=KIND, observation_shape=(16, 24, 3),
                                num_actions=5, jump=1, context_length=3)
  model = envmodels.build(spec, channels=2)
  assert model.hyperparameters == {"channels": 2}
  with pytest.raises(ValueError, match="registered twice"):
    envmodels.register(KIND)(type("Other", (ToyLinearModel,), {}))


def test_the_toy_kind_trains_inside_the_i2a(tmp_path):
  """Exported, loaded frozen and queried by the I2A of the tiny preset
  (distillation: state_features of s_t|t, stored rollouts) for 3 learner
  steps on MiniPacman."""
  spec = envmodels.EnvModelSpec(kind=KIND, observation_shape=(16, 24, 3),
                                num_actions=5, jump=1, context_length=3)
  model = envmodels.build(spec, seed=0,
                          **ToyLinearModel.tiny_hyperparameters())
  model.create_variables()
  export = envmodels.export(model, str(tmp_path / "export"))
  config = i2a_config.get_config("tiny")
  config.envmodel = export
  config.env_steps = 6 * 3  # 2 envs x 3-step unrolls per learner step
  workdir = str(tmp_path / "run")
  summary = training.run(config, workdir)
  assert summary["learner_steps"] == 3
  metrics = os.path.join(workdir, "metrics.csv")
  for column in ("loss", "auxiliary_loss",
                 "auxiliary/distillation_cross_entropy"):
    values = read_column(metrics, column)
    assert values is not None and np.isfinite(values).all(), column
