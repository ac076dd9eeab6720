"""Learner -> actors: a network's variables through the Reverb `variables` table.

Data flow: the learner's `VariablePublisher` writes one item holding the
learner step and every learnable variable (in `network.learnable_variables`
order) into the `variables` table (max_size 1: only the newest weights);
each actor's `VariableClient` samples it and assigns the values to its own
copy of the network when the step is newer than what it holds. The same code
works in the embedded mode (one process) and across processes or hosts.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import reverb
import tensorflow as tf
import tree

from i2a.replay import tables

STEP = "learner_step"
VARIABLES = "variables"


def signature(variables: Sequence[tf.Variable]) -> Dict[str, object]:
  """The `variables` table signature: {learner_step: int64 [], variables: (...)}."""
  return {
      STEP: tf.TensorSpec([], tf.int64, STEP),
      VARIABLES: tuple(tf.TensorSpec(v.shape, v.dtype, f"variable_{i}")
                       for i, v in enumerate(variables)),
  }


def flatten(step: int, variables: Sequence[tf.Variable]) -> Dict[str, object]:
  """The item of `signature(variables)` holding their current values."""
  return {STEP: np.int64(step),
          VARIABLES: tuple(v.numpy() for v in variables)}


def unflatten(data: Sequence[np.ndarray],
              variables: Sequence[tf.Variable]) -> Tuple[int, List[np.ndarray]]:
  """A sampled item's flat data -> (learner step, values per variable)."""
  item = tree.unflatten_as(signature(variables), list(data))
  return int(item[STEP]), list(item[VARIABLES])


def check_compatible(variables: Sequence[tf.Variable],
                     specs: Sequence[tf.TensorSpec]) -> None:
  """ValueError unless the variables have the published shapes and dtypes."""
  mine = [(tuple(v.shape), v.dtype.name) for v in variables]
  theirs = [(tuple(s.shape), s.dtype.name) for s in specs]
  if mine != theirs:
    raise ValueError(
        "the actor's network does not match the learner's published "
        f"variables: {len(mine)} variables {mine} here, {len(theirs)} "
        f"published {theirs}. Build both from the same config.")


class VariablePublisher:
  """Writes the learner's variables into the `variables` table."""

  def __init__(self, client: reverb.Client, variables: Sequence[tf.Variable],
               table: str = tables.VARIABLES):
    self._client = client
    self._variables = tuple(variables)
    self._table = table
    self._writer: Optional[reverb.TrajectoryWriter] = None

  def publish(self, step: int) -> None:
    """Replaces the table's item with the variables at learner step `step`."""
    if self._writer is None:
      self._writer = self._client.trajectory_writer(num_keep_alive_refs=1)
    self._writer.append(flatten(step, self._variables))
    self._writer.create_item(
        self._table, priority=1.0,
        trajectory=tree.map_structure(lambda c: c[-1], self._writer.history))
    self._writer.flush()  # Actors see these weights from now on.

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._writer = None


class VariableClient:
  """Pulls the newest published variables into an actor's network."""

  def __init__(self, client: reverb.Client, variables: Sequence[tf.Variable],
               table: str = tables.VARIABLES):
    self._client = client
    self._variables = tuple(variables)
    self._table = table
    self.learner_step = -1  # the step of the values this network holds
    self._checked = False

  def update(self) -> bool:
    """Assigns the newest values if they are newer; True if it did.

    Blocks until the learner has published once.
    """
    sample = next(iter(self._client.sample(self._table, num_samples=1,
                                           emit_timesteps=False)))
    if not self._checked:
      check_compatible(self._variables, tuple(
          tables.table_signature(self._client, self._table)[VARIABLES]))
      self._checked = True
    step, values = unflatten(sample.data, self._variables)
    if step <= self.learner_step:
      return False
    for variable, value in zip(self._variables, values):
      variable.assign(value)
    self.learner_step = step
    return True
