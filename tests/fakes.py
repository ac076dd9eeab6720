"""Tiny fake environments for fast, exact tests, the tiny A2C network the
actor tests act with (`tiny_a2c_network`), and the mark of tests that need
a CPU computing bfloat16 (`needs_bf16`).

`CountingEnv` makes every observation say where it is: channel 0 holds the
step index within the episode, channel 1 the episode index (both mod 256),
and the reward of a step is the index of the step it leads to. Episodes end
(terminated) after a length drawn from [min_length, max_length].
"""

from __future__ import annotations

from typing import Optional, Tuple

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from agents import builder
from agents.a2c import networks
from envmodels import precision

# Tests of the bf16 rewrite: they run where the CPU computes bfloat16 and
# no GPU takes the graphs.
needs_bf16 = pytest.mark.skipif(
    not precision.cpu_has_bf16() or tf.config.list_physical_devices("GPU"),
    reason="the CPU has no native bfloat16 (AMX-BF16 / AVX512-BF16)")


class CountingEnv(gym.Env):
  metadata = {"render_modes": []}

  def __init__(self, shape: Tuple[int, int, int] = (16, 16, 3),
               num_actions: int = 3, min_length: int = 5,
               max_length: int = 30):
    self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
    self.action_space = gym.spaces.Discrete(num_actions)
    self._shape = shape
    self._lengths = (min_length, max_length)
    self._episode = -1
    self._step = 0
    self._length = 0

  def _observation(self) -> np.ndarray:
    obs = np.zeros(self._shape, np.uint8)
    obs[..., 0] = self._step % 256
    obs[..., 1] = self._episode % 256
    return obs

  def reset(self, *, seed: Optional[int] = None, options=None):
    super().reset(seed=seed)
    self._episode += 1
    self._step = 0
    self._length = int(self.np_random.integers(*self._lengths, endpoint=True))
    return self._observation(), {}

  def step(self, action):
    self._step += 1
    terminated = self._step >= self._length
    return self._observation(), float(self._step), terminated, False, {}


def counting_vector_env(num_envs: int, **kwargs) -> gym.vector.VectorEnv:
  return gym.vector.SyncVectorEnv(
      [lambda: CountingEnv(**kwargs) for _ in range(num_envs)],
      autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def tiny_a2c_network(seed: int = 0, shape: Tuple[int, int, int] = (16, 16, 3),
                     num_actions: int = 3) -> networks.A2CNetwork:
  """An A2C network of one 4-channel convolution and 8 hidden units over
  windows of 3 frames of `shape`, its variables created from `seed`."""
  tf.random.set_seed(seed)
  network = networks.A2CNetwork(num_actions, 3, conv_channels=(4,),
                                conv_kernels=(3,), conv_strides=(2,),
                                hidden=8)
  builder.create_variables(network, shape)
  return network
