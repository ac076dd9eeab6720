"""tf.data pipelines of jumpy windows: from a dataset on disk or from Reverb.

Both yield dicts of batched windows (episodes.py's convention):
  observation uint8 [B, L, H, W, C], action int32 [B, L, c],
  reward float32 [B, L], discount float32 [B, L].
"""

from __future__ import annotations

from typing import Dict, Iterator, Optional

import numpy as np
import reverb
import tensorflow as tf

from i2a.replay import files, tables
from i2a.replay.episodes import WindowSampler


def window_sampler(split_dir: str, length: int, jump: int) -> WindowSampler:
  """All windows of a split on disk (episodes loaded into memory once)."""
  return WindowSampler(files.load_episodes(split_dir), length, jump)


def _signature(sampler: WindowSampler, batch_size: Optional[int]):
  shape = sampler.observation.shape[1:]
  spec = tables.sequence_signature(tuple(shape), sampler.length, sampler.jump)
  return {k: tf.TensorSpec([batch_size, *v.shape], v.dtype, k)
          for k, v in spec.items()}


def sampled_batches(sampler: WindowSampler, batch_size: int, seed: int,
                    prefetch: int = 2) -> tf.data.Dataset:
  """An endless dataset of uniformly sampled batches (training)."""
  def generate() -> Iterator[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    while True:
      yield sampler.sample(rng, batch_size)
  return tf.data.Dataset.from_generator(
      generate, output_signature=_signature(sampler, batch_size)).prefetch(
          prefetch)


def evaluation_batches(sampler: WindowSampler, batch_size: int,
                       num_windows: int, seed: int = 0) -> tf.data.Dataset:
  """A fixed, finite set of windows (held-out evaluation, same every call)."""
  rng = np.random.default_rng(seed)
  count = min(num_windows, sampler.num_windows)
  ids = np.sort(rng.choice(sampler.num_windows, count, replace=False))

  def generate() -> Iterator[Dict[str, np.ndarray]]:
    for i in range(0, count, batch_size):
      yield sampler.gather(ids[i:i + batch_size])
  return tf.data.Dataset.from_generator(
      generate, output_signature=_signature(sampler, None))


def reverb_sequences(server_address: str, batch_size: int,
                     table: str = tables.SEQUENCES,
                     max_in_flight: int = 2) -> tf.data.Dataset:
  """Batches sampled from a Reverb `sequences` table (uses its signature)."""
  dataset = reverb.TrajectoryDataset.from_table_signature(
      server_address=server_address, table=table,
      max_in_flight_samples_per_worker=max_in_flight * batch_size)
  dataset = dataset.map(lambda sample: sample.data)
  return dataset.batch(batch_size, drop_remainder=True).prefetch(
      tf.data.AUTOTUNE)
