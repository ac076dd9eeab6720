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
import mmap
import os
import threading
import weakref
from typing import Dict, List, Sequence, Tuple

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


# The alignment TensorFlow expects of a tensor's buffer (EIGEN_MAX_ALIGN_BYTES):
# frames gathered into such a buffer become a tensor without a copy
# (datasets.to_tensor).
ALIGNMENT = 64


def aligned_empty(shape: Sequence[int], dtype=np.uint8) -> np.ndarray:
  """An uninitialised C-contiguous array whose data is ALIGNMENT-aligned."""
  dtype = np.dtype(dtype)
  nbytes = int(np.prod(shape)) * dtype.itemsize
  raw = np.empty(nbytes + ALIGNMENT, np.uint8)
  offset = -raw.ctypes.data % ALIGNMENT
  return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def window_starts(episode_length: int, length: int, jump: int) -> range:
  """The one rule of which jumpy windows an episode has: the primitive steps
  s at which a window of `length` jumpy steps of `jump` starts, one at every
  step from the episode's first, each ending inside its episode
  (s + jump * (length - 1) < episode_length, so no window crosses an episode
  boundary). `WindowSampler` numbers its windows by it, whether its frames
  sit in RAM or in the window cache. episode_length counts observations
  (primitive steps + 1)."""
  if length < 1 or jump < 1:
    raise ValueError("window length and jump must be >= 1, given "
                     f"{length}, {jump}.")
  return range(0, max(0, episode_length - jump * (length - 1)))


def num_window_starts(episode_length: int, length: int, jump: int) -> int:
  """How many windows of `length` jumpy steps fit in `episode_length` steps
  (one per step: `window_starts`)."""
  return len(window_starts(episode_length, length, jump))


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

  The frames live in one or more arrays, each holding whole episodes in
  order ("shards"): one in-RAM array (`WindowSampler(episodes, ...)`, the
  episodes concatenated once), or the read-only np.memmap arrays of a
  dataset's window cache (`from_arrays`, i2a/replay/cache.py), whose frames
  stay on disk. RAM holds only the per-step actions, discounts and
  cumulative rewards (16 bytes a step) and per-episode boundaries: a window's
  episode and start are found from its index by a binary search over the
  episodes' window counts. A batch is a handful of vectorised gathers and one
  frame copy per window, into a buffer a tensor can share (numpy releases
  the GIL while copying); `will_need` has the OS read a batch's frames
  ahead (datasets.gathered).

  Window indices are the same whatever the storage: window i of the k-th
  episode with windows starts at that episode's step i - (windows of the
  episodes before it), so in-RAM and disk-backed samplers over the same
  episodes gather identical batches for the same indices (and the same seed).
  """

  # Frames copied out of memory-mapped shards between two releases of their
  # mapped pages (madvise MADV_DONTNEED): the pages stay in the OS page cache,
  # but the process's resident set does not grow with the frames it has read
  # (it maps up to ~4x this: the kernel maps pages around each one touched).
  RELEASE_BYTES = 32 << 20

  def __init__(self, episodes: List[Episode], length: int, jump: int):
    if not episodes:
      raise ValueError("WindowSampler needs at least one episode.")
    self._setup(
        observations=[np.concatenate([e.observation for e in episodes])],
        episode_length=np.array([len(e) for e in episodes]),
        action=np.concatenate([e.action for e in episodes]),
        reward=np.concatenate([e.reward for e in episodes]),
        discount=np.concatenate([e.discount for e in episodes]),
        length=length, jump=jump)

  @classmethod
  def from_arrays(cls, observations: Sequence[np.ndarray],
                  episode_length: np.ndarray, action: np.ndarray,
                  reward: np.ndarray, discount: np.ndarray, length: int,
                  jump: int) -> "WindowSampler":
    """A sampler over episodes whose frames are split over several arrays.

    Args:
      observations: uint8 [N_k, H, W, C] arrays (in RAM or np.memmap), each
        holding whole episodes, in episode order.
      episode_length: int [E], the steps of every episode, in order; they
        sum to sum(N_k) and no episode straddles two arrays.
      action: int32 [sum N_k], all episodes' steps concatenated (likewise
        `reward` and `discount`, float32).
      length: window length L (jumpy steps).
      jump: the jump c (primitive steps per jumpy step).
    """
    sampler = cls.__new__(cls)
    sampler._setup(observations, episode_length, action, reward, discount,
                   length, jump)
    return sampler

  def _setup(self, observations: Sequence[np.ndarray],
             episode_length: np.ndarray, action: np.ndarray,
             reward: np.ndarray, discount: np.ndarray, length: int,
             jump: int) -> None:
    self.length, self.jump = length, jump
    lengths = np.asarray(episode_length, np.int64)
    if not len(lengths) or not len(observations):
      raise ValueError("WindowSampler needs at least one episode.")
    sizes = np.array([len(o) for o in observations], np.int64)
    total = int(lengths.sum())
    if int(sizes.sum()) != total or not (len(action) == len(reward) ==
                                         len(discount) == total):
      raise ValueError(
          f"the episodes hold {total} steps, the frames {int(sizes.sum())}, "
          f"actions {len(action)}, rewards {len(reward)} and discounts "
          f"{len(discount)}.")
    episode_end = np.cumsum(lengths)
    if not np.all(np.isin(np.cumsum(sizes), episode_end)):
      raise ValueError("an episode straddles two observation arrays.")
    shapes = {tuple(o.shape[1:]) for o in observations}
    if len(shapes) != 1:
      raise ValueError(f"observation arrays of different shapes: {shapes}.")
    self._observations = list(observations)
    self._shard_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]
                                         ).astype(np.int64)
    # Memory-mapped shards (all or none are): their mmap objects, and for
    # read-ahead hints a descriptor of each file and the file offset of its
    # first frame.
    self._mapped = [getattr(o, "_mmap", None) for o in observations]
    if any(m is None for m in self._mapped):
      self._mapped = []
    self._files: List[int] = []
    self._file_offsets = np.zeros(len(observations), np.int64)
    if self._mapped and all(o.flags.c_contiguous and o.filename
                            for o in observations):
      for k, (o, mapped) in enumerate(zip(observations, self._mapped)):
        fd = os.open(o.filename, os.O_RDONLY)
        weakref.finalize(self, os.close, fd)
        self._files.append(fd)
        # np.memmap maps from the allocation granule below its offset.
        map_start = o.offset - o.offset % mmap.ALLOCATIONGRANULARITY
        address = np.frombuffer(mapped, np.uint8, count=1).ctypes.data
        self._file_offsets[k] = map_start + o.ctypes.data - address
    self._read_bytes = 0
    self._lock = threading.Lock()
    self.action = np.concatenate([np.asarray(action, np.int32),
                                  np.zeros(jump, np.int32)])
    self._reward_cumsum = np.concatenate([[0.0], np.cumsum(reward,
                                                           dtype=np.float64)])
    self.discount = np.asarray(discount, np.float32)
    offsets = episode_end - lengths
    counts = np.array([num_window_starts(int(n), length, jump)
                       for n in lengths], np.int64)
    used = counts > 0
    if not used.any():
      raise ValueError(
          f"no episode is long enough for a window of {length} jumpy steps "
          f"of {jump} (needs {jump * (length - 1) + 1} steps; the longest "
          f"has {lengths.max()}). Collect longer episodes or shorten the "
          "sequences.")
    # Per episode with windows: its first and last step, and its windows'
    # first index (window_offsets[-1] is the number of windows).
    self._episode_first = offsets[used]
    self._episode_last = (episode_end - 1)[used]
    self._window_offsets = np.concatenate([[0], np.cumsum(counts[used])])

  @property
  def num_windows(self) -> int:
    return int(self._window_offsets[-1])

  @property
  def observation_shape(self) -> Tuple[int, ...]:
    return tuple(self._observations[0].shape[1:])

  @property
  def observation_shards(self) -> Tuple[np.ndarray, ...]:
    """The arrays holding the frames (np.memmap when disk-backed)."""
    return tuple(self._observations)

  @property
  def index_nbytes(self) -> int:
    """Bytes of the in-RAM arrays besides the frames (actions, rewards, ...)."""
    return sum(a.nbytes for a in (
        self.action, self._reward_cumsum, self.discount, self._episode_first,
        self._episode_last, self._window_offsets, self._shard_offsets))

  def _locate(self, window_ids: np.ndarray
              ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window indices -> (start, episode's first step, episode's last step)."""
    ids = np.asarray(window_ids, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= self.num_windows):
      raise IndexError(f"window indices must be in [0, {self.num_windows}).")
    episode = np.searchsorted(self._window_offsets, ids, side="right") - 1
    first = self._episode_first[episode]
    return (first + (ids - self._window_offsets[episode]), first,
            self._episode_last[episode])

  def _gather_observations(self, obs_idx: np.ndarray) -> np.ndarray:
    """Frames at global steps obs_idx [B, L] (each row within one episode)."""
    out = aligned_empty((*obs_idx.shape, *self.observation_shape))
    if len(self._observations) == 1:
      # mode="clip" writes into `out` directly (indices are checked above).
      np.take(self._observations[0], obs_idx, axis=0, out=out, mode="clip")
    else:
      shard = np.searchsorted(self._shard_offsets, obs_idx[:, 0],
                              side="right") - 1
      local = obs_idx - self._shard_offsets[shard][:, None]
      for row, (s, index) in enumerate(zip(shard, local)):
        np.take(self._observations[s], index, axis=0, out=out[row],
                mode="clip")
    if self._mapped:
      self._release_pages(out.nbytes)
    return out

  def will_need(self, window_ids: np.ndarray) -> None:
    """Asks the OS to start reading these windows' frames from disk.

    For memory-mapped shards only (a no-op in RAM): one asynchronous
    posix_fadvise(WILLNEED) per frame (without the GIL), so the frames of
    the batches gathered next are read with many requests in flight instead
    of one page fault at a time when `gather` copies them. Indices out of
    range are left to `gather` to refuse.
    """
    ids = np.asarray(window_ids, np.int64)
    ids = ids[(ids >= 0) & (ids < self.num_windows)]
    if not self._files or not ids.size:
      return
    start, _, _ = self._locate(ids)
    obs_idx = start[:, None] + self.jump * np.arange(self.length)  # [B, L]
    shard = np.searchsorted(self._shard_offsets, start, side="right") - 1
    frame = int(np.prod(self.observation_shape))
    begin = (self._file_offsets[shard][:, None]
             + (obs_idx - self._shard_offsets[shard][:, None]) * frame)
    for s, row in zip(shard.tolist(), begin.tolist()):
      fd = self._files[s]
      for offset in row:
        os.posix_fadvise(fd, offset, frame, os.POSIX_FADV_WILLNEED)

  def _release_pages(self, nbytes: int) -> None:
    with self._lock:
      self._read_bytes += nbytes
      if self._read_bytes < self.RELEASE_BYTES:
        return
      self._read_bytes = 0
    for mapped in self._mapped:
      mapped.madvise(mmap.MADV_DONTNEED)

  def gather(self, window_ids: np.ndarray) -> Dict[str, np.ndarray]:
    """Windows by index in [0, num_windows) -> batch dict [B, L, ...]."""
    start, first, last = self._locate(window_ids)  # [B]
    jump, length = self.jump, self.length
    obs_idx = start[:, None] + jump * np.arange(length)  # [B, L]
    act_idx = obs_idx[:, :, None] + np.arange(jump)  # [B, L, c]
    action = np.where(act_idx <= last[:, None, None],
                      self.action[np.minimum(act_idx, last[:, None, None])], 0)
    # Rewards summed over (i - c, i], clipped to the episode's own steps.
    low = np.maximum(obs_idx - jump, first[:, None] - 1)  # exclusive
    reward = self._reward_cumsum[obs_idx + 1] - self._reward_cumsum[low + 1]
    return {
        "observation": self._gather_observations(obs_idx),
        "action": action.astype(np.int32),
        "reward": reward.astype(np.float32),
        "discount": self.discount[obs_idx],
    }

  def distinct_rewards(self, first: int = 0) -> np.ndarray:
    """The distinct values of reward[first:] over all windows, float32 sorted.

    With `first` = context_length these are exactly the reward targets a
    model is trained on (`gather`'s values: sums of c primitive rewards),
    computed position by position, a million windows at a time.
    """
    if not 0 <= first < self.length:
      raise ValueError(f"first must be in [0, {self.length}), given {first}.")
    values = []
    for lo in range(0, self.num_windows, 1 << 20):
      start, episode_first, _ = self._locate(
          np.arange(lo, min(lo + (1 << 20), self.num_windows)))
      for j in range(first, self.length):
        index = start + self.jump * j
        low = np.maximum(index - self.jump, episode_first - 1)  # exclusive
        reward = self._reward_cumsum[index + 1] - self._reward_cumsum[low + 1]
        values.append(np.unique(reward.astype(np.float32)))
    return np.unique(np.concatenate(values))

  def sample(self, rng: np.random.Generator,
             batch_size: int) -> Dict[str, np.ndarray]:
    return self.gather(rng.integers(0, self.num_windows, batch_size))
