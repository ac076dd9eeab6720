"""Episodes of primitive steps, and the jumpy windows cut from them.

Convention (README.md, "Sequences"): step i of an episode holds observation
o_i, the action a_i taken at o_i, and the reward r_i and discount d_i that led
to o_i (r_0 = 0, d_0 = 1; d_n = 0 at a terminal observation, 1 at a
truncation). The final observation has no action (stored as 0).

A jumpy window (jump c, length L) starting at step s holds, for j < L,
  observation[j] = o_{s + jc}
  action[j]      = a_{s + jc : s + jc + c}        (zero-padded past the end)
  reward[j]      = sum of r over (s + (j-1)c, s + jc]  (within the episode)
  discount[j]    = d_{s + jc}
so a window never crosses an episode boundary, and models read
observation[:k] as context and predict observation[k:], reward[k:] from
action[k-1:L-1] (Buesing et al. 2018: c actions chunked, rewards summed,
observations subsampled).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List

import numpy as np


@dataclasses.dataclass
class Episode:
  """One episode (or the recorded part of one) at primitive-step level."""
  observation: np.ndarray  # uint8 [n + 1, H, W, C]
  action: np.ndarray  # int32 [n + 1] (the last is 0: no action taken)
  reward: np.ndarray  # float32 [n + 1]
  discount: np.ndarray  # float32 [n + 1]
  complete: bool  # False when collection stopped inside the episode

  def __len__(self) -> int:
    return len(self.observation)


class EpisodeBuffer:
  """Accumulates one environment's steps until its episode ends."""

  def __init__(self, first_observation: np.ndarray):
    self.observations: List[np.ndarray] = [first_observation]
    self.actions: List[int] = []
    self.rewards: List[float] = [0.0]
    self.discounts: List[float] = [1.0]

  def add(self, action: int, reward: float, discount: float,
          next_observation: np.ndarray) -> None:
    self.actions.append(int(action))
    self.rewards.append(float(reward))
    self.discounts.append(float(discount))
    self.observations.append(next_observation)

  def __len__(self) -> int:
    return len(self.observations)

  def to_episode(self, complete: bool) -> Episode:
    return Episode(
        observation=np.stack(self.observations).astype(np.uint8, copy=False),
        action=np.asarray(self.actions + [0], np.int32),
        reward=np.asarray(self.rewards, np.float32),
        discount=np.asarray(self.discounts, np.float32),
        complete=complete)


def num_window_starts(episode_length: int, length: int, jump: int) -> int:
  """How many windows of `length` jumpy steps fit in `episode_length` steps."""
  return max(0, episode_length - jump * (length - 1))


def window(episode: Episode, start: int, length: int,
           jump: int) -> Dict[str, np.ndarray]:
  """The jumpy window starting at primitive step `start` (reference version)."""
  n = len(episode)
  last = start + jump * (length - 1)
  if start < 0 or last >= n:
    raise ValueError(f"window [{start}, {last}] does not fit an episode of "
                     f"{n} steps.")
  obs_idx = start + jump * np.arange(length)
  act_idx = obs_idx[:, None] + np.arange(jump)
  padded = np.concatenate([episode.action, np.zeros(jump, np.int32)])
  rewards = np.zeros(length, np.float32)
  for j, i in enumerate(obs_idx):
    rewards[j] = episode.reward[max(0, i - jump + 1):i + 1].sum()
  return {
      "observation": episode.observation[obs_idx],
      "action": padded[act_idx].astype(np.int32),
      "reward": rewards,
      "discount": episode.discount[obs_idx].astype(np.float32),
  }


class WindowSampler:
  """Samples jumpy windows from many episodes with vectorised numpy gathers.

  All episodes are concatenated once; a batch is a handful of fancy-index
  gathers, so sampling keeps up with any model's training step.
  """

  def __init__(self, episodes: List[Episode], length: int, jump: int):
    if not episodes:
      raise ValueError("WindowSampler needs at least one episode.")
    self.length, self.jump = length, jump
    lengths = np.array([len(e) for e in episodes])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    self.observation = np.concatenate([e.observation for e in episodes])
    self.action = np.concatenate([e.action for e in episodes] +
                                 [np.zeros(jump, np.int32)])
    reward = np.concatenate([e.reward for e in episodes])
    self._reward_cumsum = np.concatenate([[0.0], np.cumsum(reward,
                                                           dtype=np.float64)])
    self.discount = np.concatenate([e.discount for e in episodes])
    starts, episode_first, episode_last = [], [], []
    for offset, n in zip(offsets, lengths):
      count = num_window_starts(n, length, jump)
      starts.append(offset + np.arange(count))
      episode_first.append(np.full(count, offset))
      episode_last.append(np.full(count, offset + n - 1))
    self.starts = np.concatenate(starts).astype(np.int64)
    self._first = np.concatenate(episode_first).astype(np.int64)
    self._last = np.concatenate(episode_last).astype(np.int64)
    if not len(self.starts):
      raise ValueError(
          f"no episode is long enough for a window of {length} jumpy steps "
          f"of {jump} (needs {jump * (length - 1) + 1} steps; the longest "
          f"has {lengths.max()}). Collect longer episodes or shorten the "
          "sequences.")

  @property
  def num_windows(self) -> int:
    return len(self.starts)

  def gather(self, window_ids: np.ndarray) -> Dict[str, np.ndarray]:
    """Windows by index in [0, num_windows) -> batch dict [B, L, ...]."""
    start = self.starts[window_ids]  # [B]
    first, last = self._first[window_ids], self._last[window_ids]
    jump, length = self.jump, self.length
    obs_idx = start[:, None] + jump * np.arange(length)  # [B, L]
    act_idx = obs_idx[:, :, None] + np.arange(jump)  # [B, L, c]
    action = np.where(act_idx <= last[:, None, None],
                      self.action[np.minimum(act_idx, last[:, None, None])], 0)
    # Rewards summed over (i - c, i], clipped to the episode's own steps.
    low = np.maximum(obs_idx - jump, first[:, None] - 1)  # exclusive
    reward = self._reward_cumsum[obs_idx + 1] - self._reward_cumsum[low + 1]
    return {
        "observation": self.observation[obs_idx],
        "action": action.astype(np.int32),
        "reward": reward.astype(np.float32),
        "discount": self.discount[obs_idx],
    }

  def distinct_rewards(self, first: int = 0) -> np.ndarray:
    """The distinct values of reward[first:] over all windows, float32 sorted.

    With `first` = context_length these are exactly the reward targets a
    model is trained on (`gather`'s values: sums of c primitive rewards),
    computed position by position in O(windows) memory.
    """
    if not 0 <= first < self.length:
      raise ValueError(f"first must be in [0, {self.length}), given {first}.")
    values = []
    for j in range(first, self.length):
      index = self.starts + self.jump * j
      low = np.maximum(index - self.jump, self._first - 1)  # exclusive
      reward = self._reward_cumsum[index + 1] - self._reward_cumsum[low + 1]
      values.append(np.unique(reward.astype(np.float32)))
    return np.unique(np.concatenate(values))

  def sample(self, rng: np.random.Generator,
             batch_size: int) -> Dict[str, np.ndarray]:
    return self.gather(rng.integers(0, self.num_windows, batch_size))
