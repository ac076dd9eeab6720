"""Batches of jumpy windows from a dataset on disk (model pretraining).

Batches are dicts of windows (episodes.py's convention), as tensors:
  observation uint8 [B, L, H, W, C], action int32 [B, L, c],
  reward float32 [B, L], discount float32 [B, L].
Frames are read through the split's memory-mapped window cache (cache.py)
and batches are gathered by background threads ahead of the train step
(`Batches`): uniformly sampled for training (`sampled_batches`), a fixed
held-out set for evaluation (`evaluation_batches`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import threading
from typing import Any, Deque, Dict, Iterable, Iterator, Optional

import numpy as np
import tensorflow as tf

from i2a.replay import cache, episodes, files
from i2a.replay.episodes import WindowSampler


def window_sampler(split_dir: str, length: int, jump: int,
                   in_memory: bool = False, cache_dir: Optional[str] = None,
                   verify: bool = True) -> WindowSampler:
  """All windows of a split on disk.

  Args:
    split_dir: a split directory of a dataset (files.py).
    length: window length L (jumpy steps).
    jump: the jump c.
    in_memory: load every episode into RAM (files.load_episodes; 2x the
      frames' size while loading) instead of reading frames through the
      split's memory-mapped window cache (cache.py; the default, built on
      first use). Both sample identical windows.
    cache_dir: where the window cache lives (cache.cache_dir's default:
      $I2A_DATASET_CACHE, else SPLIT/.cache).
    verify: check every shard against its sha256.
  """
  if in_memory:
    return WindowSampler(files.load_episodes(split_dir, verify=verify),
                         length, jump)
  shards = cache.open_split(split_dir, cache_dir, verify=verify)

  def joined(name: str) -> np.ndarray:
    return np.concatenate([getattr(shard, name) for shard in shards])
  return WindowSampler.from_arrays(
      [shard.observation for shard in shards], joined("episode_length"),
      joined("action"), joined("reward"), joined("discount"), length, jump)


def gathered(sampler: WindowSampler, id_batches: Iterable[np.ndarray],
             workers: int = 0, read_ahead: int = 8
             ) -> Iterator[Dict[str, np.ndarray]]:
  """`sampler.gather` of each index batch, in order, reading ahead.

  The next `read_ahead` index batches are drawn early and their frames
  announced to the OS (`sampler.will_need`: asynchronous reads of
  memory-mapped frames, many in flight), so gathers rarely wait on the disk
  one page fault at a time (read_ahead=0: no announcements). With `workers`
  > 0, that many threads gather (numpy copies frames without the GIL), one
  batch each in flight beyond the one awaited; with 0, the calling thread
  does. On 2 cores, announcing pays and more threads do not
  (benchmarks/dataset_memory.py); the batches are the same either way.
  """
  source = iter(id_batches)
  announced: Deque[np.ndarray] = collections.deque()
  futures: Deque[concurrent.futures.Future] = collections.deque()
  pool = (concurrent.futures.ThreadPoolExecutor(
      workers, thread_name_prefix="gather") if workers > 0 else None)

  def announce() -> None:
    while len(announced) < max(1, read_ahead):
      ids = next(source, None)
      if ids is None:
        return
      if read_ahead > 0:
        sampler.will_need(ids)
      announced.append(ids)
  try:
    while True:
      announce()
      if pool is None:
        if not announced:
          return
        yield sampler.gather(announced.popleft())
        continue
      while announced and len(futures) <= workers:
        futures.append(pool.submit(sampler.gather, announced.popleft()))
        announce()
      if not futures:
        return
      yield futures.popleft().result()
  finally:
    if pool is not None:
      for future in futures:
        future.cancel()
      pool.shutdown(wait=True)


_END = object()


def to_tensor(array: np.ndarray) -> tf.Tensor:
  """A CPU tensor of `array`: for aligned frames, their buffer itself (DLPack;
  the tensor keeps the array alive), otherwise a copy."""
  if (array.dtype == np.uint8 and array.size and array.flags.c_contiguous
      and array.flags.writeable
      and array.ctypes.data % episodes.ALIGNMENT == 0):
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())
  return tf.convert_to_tensor(array)


class _Failure:

  def __init__(self, error: BaseException):
    self.error = error


def _put(out: "queue.Queue", item: Any, stop: threading.Event) -> bool:
  """Puts `item` unless `stop` is set first; whether it was put."""
  while not stop.is_set():
    try:
      out.put(item, timeout=0.1)
      return True
    except queue.Full:
      pass
  return False


def _produce(sampler: WindowSampler, id_batches: Iterator[np.ndarray],
             workers: int, read_ahead: int, out: "queue.Queue",
             stop: threading.Event) -> None:
  source = gathered(sampler, id_batches, workers, read_ahead)
  try:
    for batch in source:
      tensors = {k: to_tensor(v) for k, v in batch.items()}
      if not _put(out, tensors, stop):
        return
    _put(out, _END, stop)
  except BaseException as e:  # pylint: disable=broad-except
    _put(out, _Failure(e), stop)
  finally:
    source.close()


class Batches:
  """Batches of windows made ahead by a background thread: an iterator.

  The thread gathers each batch (announcing the frames of the next
  `read_ahead` batches to the OS, with `workers` more threads if asked:
  `gathered`) and makes it tf.Tensors (the frames without a copy:
  `to_tensor`), keeping `prefetch` of them ready; next() only takes one from
  a queue, so the train step waits for nothing the input does in Python.
  (tf.data's from_generator, used before, hands every batch over through a
  py_func, which cost the consumer 1 to 3 ms a batch even with its prefetch
  buffer full: benchmarks/dataset_memory.py.) An error in the thread is
  raised by next(). `close()` (or leaving a `with` block, or dropping the
  object) stops the threads.
  """

  def __init__(self, sampler: WindowSampler,
               id_batches: Iterable[np.ndarray], prefetch: int = 2,
               workers: int = 0, read_ahead: int = 8):
    self._queue: "queue.Queue" = queue.Queue(maxsize=max(1, prefetch))
    self._stop = threading.Event()
    self._done = False
    # The thread holds the queue and the event, not `self`: dropping the
    # last reference to this object closes it.
    self._thread = threading.Thread(
        target=_produce, name="batches", daemon=True,
        args=(sampler, iter(id_batches), workers, read_ahead,
              self._queue, self._stop))
    self._thread.start()

  def __iter__(self) -> "Batches":
    return self

  def __next__(self) -> Dict[str, tf.Tensor]:
    if self._done:
      raise StopIteration
    item = self._queue.get()
    if item is _END:
      self._done = True
      raise StopIteration
    if isinstance(item, _Failure):
      self._done = True
      raise item.error
    return item

  def close(self) -> None:
    """Stops the background threads (after the gathers in flight)."""
    self._done = True
    self._stop.set()
    self._thread.join()

  def __enter__(self) -> "Batches":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def __del__(self):
    stop = getattr(self, "_stop", None)
    if stop is not None:
      stop.set()


def sampled_batches(sampler: WindowSampler, batch_size: int, seed: int,
                    prefetch: int = 2, workers: int = 0,
                    read_ahead: int = 8) -> Batches:
  """An endless iterator of uniformly sampled batches (training).

  The window indices are drawn in order from one generator seeded with
  `seed` (the batches of `sampler.sample` called repeatedly), however many
  `workers` gather them and `read_ahead` batches are announced to the OS
  (`gathered`); `prefetch` batches wait ready, as tf.Tensors, for the train
  step (`Batches`).
  """
  def ids() -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    while True:
      yield rng.integers(0, sampler.num_windows, batch_size)
  return Batches(sampler, ids(), prefetch, workers, read_ahead)


def evaluation_batches(sampler: WindowSampler, batch_size: int,
                       num_windows: int, seed: int = 0, workers: int = 0,
                       read_ahead: int = 8) -> Batches:
  """A fixed, finite set of windows (held-out evaluation, same every call).

  Iterate it once (`Batches`): every call makes the same batches anew.
  """
  rng = np.random.default_rng(seed)
  count = min(num_windows, sampler.num_windows)
  ids = np.sort(rng.choice(sampler.num_windows, count, replace=False))
  return Batches(sampler, (ids[i:i + batch_size]
                           for i in range(0, count, batch_size)),
                 workers=workers, read_ahead=read_ahead)
