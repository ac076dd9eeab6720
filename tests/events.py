"""Reads a run's TensorBoard event files back, for tests of what was logged."""

from __future__ import annotations

import glob
import os
from typing import List, Tuple

import tensorflow as tf


def summary_steps(tb_dir: str) -> List[Tuple[str, int]]:
  """(tag, step) of every summary value in the event files of `tb_dir`, in
  file and write order (a step logged twice appears twice)."""
  pairs = []
  for path in sorted(glob.glob(os.path.join(tb_dir, "*tfevents*"))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        pairs.append((value.tag, int(event.step)))
  return pairs


def duplicates(pairs: List[Tuple[str, int]]) -> List[Tuple[str, int]]:
  seen, twice = set(), []
  for pair in pairs:
    if pair in seen:
      twice.append(pair)
    seen.add(pair)
  return twice
