"""Writers that stream environment steps into Reverb as jumpy windows.

One `SequenceAdder` per environment of a vector env: it chunks c primitive
steps into one jumpy step (episodes.py's convention), appends it to a Reverb
TrajectoryWriter and creates a `sequences` item every `stride` jumpy steps
once `length` are available. Items reference the writer's chunks, so
overlapping windows do not duplicate frames on the wire or in the table.
`end_episode` closes the episode: no item ever spans two episodes. Which
windows exist is episodes.window_starts' rule (every = stride * jump), the
one the window sampler uses too; an item holds what episodes.window cuts.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np
import reverb

from i2a.replay import episodes
from i2a.replay import tables


class SequenceAdder:
  """Streams one environment's steps into a `sequences` table."""

  def __init__(self, client: reverb.Client, length: int, jump: int,
               stride: int = 1, table: str = tables.SEQUENCES):
    if length < 1 or jump < 1 or stride < 1:
      raise ValueError("length, jump and stride must be >= 1, given "
                       f"{length}, {jump}, {stride}.")
    self._client = client
    self._length, self._jump, self._stride = length, jump, stride
    self._table = table
    self._writer: Optional[reverb.TrajectoryWriter] = None
    self._pending_observation: Optional[np.ndarray] = None
    self._pending_reward = 0.0
    self._pending_discount = 1.0
    self._actions: List[int] = []
    self._reward_since = 0.0
    self._discount_since = 1.0
    self._num_jumpy_steps = 0
    self.items_created = 0

  def _writer_or_new(self) -> reverb.TrajectoryWriter:
    if self._writer is None:
      self._writer = self._client.trajectory_writer(
          num_keep_alive_refs=self._length)
    return self._writer

  def observe_first(self, observation: np.ndarray) -> None:
    """Starts an episode at its first observation (r_0 = 0, d_0 = 1)."""
    self._pending_observation = observation
    self._pending_reward, self._pending_discount = 0.0, 1.0
    self._actions = []
    self._reward_since, self._discount_since = 0.0, 1.0
    self._num_jumpy_steps = 0

  def observe(self, action: int, reward: float, discount: float,
              next_observation: np.ndarray) -> None:
    """One primitive step: `action` at the last observation -> the next."""
    if self._pending_observation is None:
      raise RuntimeError("observe() before observe_first().")
    self._actions.append(int(action))
    self._reward_since += float(reward)
    self._discount_since *= float(discount)
    if len(self._actions) == self._jump:
      self._append_pending()
      self._pending_observation = next_observation
      self._pending_reward = self._reward_since
      self._pending_discount = self._discount_since
      self._reward_since, self._discount_since = 0.0, 1.0

  def end_episode(self) -> None:
    """Appends the last (possibly partial) jumpy step and closes the episode."""
    if self._pending_observation is None:
      return
    self._append_pending()
    self._pending_observation = None
    if self._writer is not None:
      self._writer.end_episode(clear_buffers=True)

  def _append_pending(self) -> None:
    actions = np.zeros(self._jump, np.int32)
    actions[:len(self._actions)] = self._actions
    self._actions = []
    writer = self._writer_or_new()
    writer.append({
        "observation": self._pending_observation,
        "action": actions,
        "reward": np.float32(self._pending_reward),
        "discount": np.float32(self._pending_discount),
    })
    self._num_jumpy_steps += 1
    # The episode so far ends at primitive step (m - 1) c; the window ending
    # there would start at (m - L) c. Cut it if the shared rule has it.
    jump, steps = self._jump, self._num_jumpy_steps
    start = (steps - self._length) * jump
    if start in episodes.window_starts((steps - 1) * jump + 1, self._length,
                                       jump, every=self._stride * jump):
      history = writer.history
      writer.create_item(
          table=self._table, priority=1.0,
          trajectory={key: history[key][-self._length:] for key in (
              "observation", "action", "reward", "discount")})
      self.items_created += 1

  def flush(self) -> None:
    if self._writer is not None:
      self._writer.flush()

  def close(self) -> None:
    if self._writer is not None:
      self._writer.end_episode(clear_buffers=True)
      self._writer.close()
      self._writer = None
