"""gymnasium wrappers that implement the protocol, and the jumpy wrapper.

`make_env` (i2a/environments/factory.py) stacks these in a fixed order; the
JumpyWrapper is the temporal abstraction of Buesing et al. (2018): one jumpy
step runs c primitive actions, sums their rewards and returns the last
observation.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
from PIL import Image


# Wrappers record their constructor arguments, so gymnasium can re-create
# them (its env checker and `gym.make` from a spec need this).
_Recorded = gym.utils.RecordConstructorArgs


class ObservationTransform(gym.ObservationWrapper, _Recorded):
  """Crop, then resize ('area' / 'nearest') or zero-pad ('pad') to a size."""

  def __init__(self, env: gym.Env, size: Tuple[int, int],
               crop: Optional[Tuple[int, int, int, int]] = None,
               mode: str = "area", grayscale: bool = False):
    _Recorded.__init__(self, size=size, crop=crop, mode=mode,
                       grayscale=grayscale)
    super().__init__(env)
    in_shape = env.observation_space.shape
    if len(in_shape) == 2:
      in_shape = in_shape + (1,)
    self._crop = crop
    if crop is not None:
      top, bottom, left, right = crop
      if bottom > in_shape[0] or right > in_shape[1]:
        raise ValueError(
            f"crop {crop} exceeds the native frame {in_shape[:2]} of "
            f"{env.spec.id if env.spec else env}.")
      in_shape = (bottom - top, right - left, in_shape[2])
    height, width = size
    if mode == "pad" and (height < in_shape[0] or width < in_shape[1]):
      raise ValueError(f"resize='pad' needs observation_size >= the frame "
                       f"{in_shape[:2]}, given {size}.")
    self._size = (height, width)
    self._mode = mode
    self._grayscale = grayscale
    channels = 1 if grayscale else in_shape[2]
    self._channels_in = in_shape[2]
    self.observation_space = gym.spaces.Box(
        0, 255, (height, width, channels), np.uint8)
    self._pad_buffer = np.zeros((height, width, in_shape[2]), np.uint8)

  def observation(self, observation: np.ndarray) -> np.ndarray:
    if observation.ndim == 2:
      observation = observation[..., None]
    if self._crop is not None:
      top, bottom, left, right = self._crop
      observation = observation[top:bottom, left:right]
    height, width = self._size
    if self._mode == "pad":
      out = self._pad_buffer.copy()
      out[:observation.shape[0], :observation.shape[1]] = observation
    elif observation.shape[:2] == (height, width):
      out = observation
    else:
      squeeze = observation.shape[2] == 1
      image = Image.fromarray(observation[..., 0] if squeeze else observation)
      in_height, in_width = observation.shape[:2]
      if (self._mode == "area" and in_height % height == 0 and
          in_width % width == 0):  # Integer factors: a box filter, 2x faster.
        image = image.reduce((in_width // width, in_height // height))
      else:
        resample = Image.BOX if self._mode == "area" else Image.NEAREST
        image = image.resize((width, height), resample)
      out = np.asarray(image)
      if squeeze:
        out = out[..., None]
    if self._grayscale and out.shape[2] == 3:
      out = np.round(out @ np.array([0.299, 0.587, 0.114]))[..., None]
    return np.ascontiguousarray(out, dtype=np.uint8)


class MaxPoolFrames(gym.Wrapper, _Recorded):
  """Action repeat whose observation is the max of its last two frames.

  Wraps an ALE env built with frameskip=1: one step repeats the action
  `repeat` times (each frame sticky on its own, as ALE's own frameskip) and
  returns the elementwise max of the last two raw frames, the summed reward
  and the last frame's flags and info. Like ale_py's frameskip it runs every
  frame of the repeat even after the game ends inside it (the emulator
  stands still then), so the dynamics equal frameskip=`repeat`'s; only the
  observation differs. Both pooled frames belong to the step (none is kept
  across steps, so an emulator snapshot restores the wrapper's behaviour
  exactly); with repeat 1 the frame is returned as it is. A reset returns
  its frame as it is.
  """

  def __init__(self, env: gym.Env, repeat: int):
    _Recorded.__init__(self, repeat=repeat)
    super().__init__(env)
    if repeat < 1:
      raise ValueError(f"repeat must be >= 1, given {repeat}.")
    self._repeat = repeat

  def step(self, action: Any):
    total = 0.0
    previous = observation = None
    terminated = truncated = False
    info: Dict[str, Any] = {}
    for _ in range(self._repeat):
      previous = observation
      observation, reward, terminated, truncated, info = self.env.step(action)
      total += float(reward)
    if previous is not None:
      observation = np.maximum(previous, observation)
    return observation, total, terminated, truncated, info


class ActionSubset(gym.ActionWrapper, _Recorded):
  """Exposes a subset of the wrapped env's discrete actions, in a given order."""

  def __init__(self, env: gym.Env, indices: Sequence[int]):
    _Recorded.__init__(self, indices=list(indices))
    super().__init__(env)
    self._indices = np.asarray(indices, np.int64)
    self.action_space = gym.spaces.Discrete(len(indices))

  def action(self, action: Any) -> int:
    return int(self._indices[action])


class CheckedActions(gym.Wrapper, _Recorded):
  """Refuses an action outside the action space with a clear ValueError."""

  def __init__(self, env: gym.Env):
    _Recorded.__init__(self)
    super().__init__(env)

  def step(self, action: Any):
    space = self.env.action_space
    if not space.contains(action) and not (
        isinstance(space, gym.spaces.Discrete) and isinstance(
            action, (int, np.integer)) and 0 <= int(action) < space.n):
      raise ValueError(f"action {action!r} is out of range: expected an int "
                       f"in [0, {space.n}) for {self._name()}.")
    return self.env.step(action)

  def _name(self) -> str:
    return self.env.spec.id if self.env.spec else type(self.env).__name__


class NoopReset(gym.Wrapper, _Recorded):
  """Up to `noop_max` random NOOP (action 0) steps after every reset."""

  def __init__(self, env: gym.Env, noop_max: int):
    _Recorded.__init__(self, noop_max=noop_max)
    super().__init__(env)
    self._noop_max = noop_max

  def reset(self, **kwargs):
    observation, info = self.env.reset(**kwargs)
    for _ in range(int(self.np_random.integers(0, self._noop_max + 1))):
      observation, _, terminated, truncated, info = self.env.step(0)
      if terminated or truncated:
        observation, info = self.env.reset()
    return observation, info


class LifeLossTerminal(gym.Wrapper, _Recorded):
  """Reports a lost life as termination; the game resumes at the next reset."""

  def __init__(self, env: gym.Env):
    _Recorded.__init__(self)
    super().__init__(env)
    self._lives = 0
    self._game_over = True

  def reset(self, **kwargs):
    if self._game_over:
      observation, info = self.env.reset(**kwargs)
    else:  # Continue the same game after a life loss.
      observation, _, terminated, truncated, info = self.env.step(0)
      if terminated or truncated:
        observation, info = self.env.reset(**kwargs)
    self._lives = self.env.unwrapped.ale.lives()
    self._game_over = False
    return observation, info

  def step(self, action):
    observation, reward, terminated, truncated, info = self.env.step(action)
    self._game_over = terminated or truncated
    lives = self.env.unwrapped.ale.lives()
    if 0 < lives < self._lives:
      terminated = True
    self._lives = lives
    return observation, reward, terminated, truncated, info


class ClipReward(gym.RewardWrapper, _Recorded):
  """Rewards clipped to their sign, {-1, 0, 1}."""

  def __init__(self, env: gym.Env):
    _Recorded.__init__(self)
    super().__init__(env)

  def reward(self, reward: float) -> float:
    return float(np.sign(reward))


class FrameCap(gym.Wrapper, _Recorded):
  """Truncates an episode after `max_frames` primitive emulator frames."""

  def __init__(self, env: gym.Env, max_frames: int, frames_per_step: int):
    _Recorded.__init__(self, max_frames=max_frames,
                       frames_per_step=frames_per_step)
    super().__init__(env)
    self._max_steps = max(1, max_frames // frames_per_step)
    self._steps = 0

  def reset(self, **kwargs):
    self._steps = 0
    return self.env.reset(**kwargs)

  def step(self, action):
    observation, reward, terminated, truncated, info = self.env.step(action)
    self._steps += 1
    if self._steps >= self._max_steps:
      truncated = True
    return observation, reward, terminated, truncated, info


def encode_jumpy_action(actions: Sequence[int], num_actions: int) -> int:
  """c primitive actions -> one index in [0, A^c) (first action most significant)."""
  index = 0
  for action in actions:
    index = index * num_actions + int(action)
  return index


def decode_jumpy_action(index: int, num_actions: int, jump: int) -> np.ndarray:
  """Inverse of encode_jumpy_action: -> int64 [c]."""
  actions = np.zeros(jump, np.int64)
  for i in reversed(range(jump)):
    index, actions[i] = divmod(int(index), num_actions)
  return actions


class JumpyWrapper(gym.Wrapper, _Recorded):
  """One jumpy step = c primitive actions (Buesing et al. 2018, 'jumpy models').

  The jumpy action is the c primitive actions, as an int array [c] or as one
  index in [0, A^c). Rewards are summed, the last observation is returned. If
  the episode ends inside the chunk, the remaining actions are not executed
  and info['primitive_steps'] (< c) reports how many were.
  """

  def __init__(self, env: gym.Env, jump: int):
    _Recorded.__init__(self, jump=jump)
    super().__init__(env)
    if not isinstance(env.action_space, gym.spaces.Discrete):
      raise ValueError("JumpyWrapper needs a Discrete action space, given "
                       f"{env.action_space}.")
    if jump < 1:
      raise ValueError(f"jump must be >= 1, given {jump}.")
    self.jump = jump
    self.num_primitive_actions = int(env.action_space.n)
    self.action_space = gym.spaces.MultiDiscrete(
        [self.num_primitive_actions] * jump)

  def _primitive_actions(self, action: Any) -> np.ndarray:
    num_actions, jump = self.num_primitive_actions, self.jump
    array = np.asarray(action)
    if array.ndim == 0:
      if not 0 <= int(array) < num_actions**jump:
        raise ValueError(f"jumpy action index {int(array)} is out of range: "
                         f"expected [0, {num_actions**jump}) "
                         f"(A={num_actions}, c={jump}).")
      return decode_jumpy_action(int(array), num_actions, jump)
    if array.shape != (jump,):
      raise ValueError(f"jumpy action must be int [{jump}] or one index, "
                       f"given shape {array.shape}.")
    if array.min() < 0 or array.max() >= num_actions:
      raise ValueError(f"jumpy action {array.tolist()} has primitive actions "
                       f"out of range [0, {num_actions}).")
    return array

  def step(self, action: Any):
    total = 0.0
    rewards = []
    info: Dict[str, Any] = {}
    terminated = truncated = False
    observation = None
    for primitive in self._primitive_actions(action):
      observation, reward, terminated, truncated, info = self.env.step(
          int(primitive))
      total += float(reward)
      rewards.append(float(reward))
      if terminated or truncated:
        break
    info = dict(info)
    info["primitive_steps"] = len(rewards)
    info["primitive_rewards"] = rewards
    return observation, total, terminated, truncated, info
