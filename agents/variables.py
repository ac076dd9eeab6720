"""Learner -> actors: a network's variables through the Reverb `variables` table.

Data flow: the learner's `VariablePublisher` writes one item holding the
learner step, the learner's generation, every learnable variable (in
`network.learnable_variables` order) and an HMAC-SHA256 tag over all of
them into the `variables` table (max_size 1: only the newest weights); each
actor's `VariableClient` samples it and assigns the values to its own copy
of the network when they are newer than what it holds and their tag checks
out. The same code works in the embedded mode (one process) and across
processes or hosts.

Authentication. The Reverb server has none: anyone who reaches its port can
write to any table. So the learner signs what it publishes with a key that
only the run's processes hold (`I2A_WEIGHTS_KEY`, required in the
distributed mode: `key_from_environment(required=True)`; a process without
it gets a random per-process key, enough for the embedded mode where the
publisher and the client share the process). The tag covers the
generation, the learner step and every variable's dtype, shape and bytes,
so an attacker can neither forge weights nor relabel old ones as new.
A client refuses (logs, counts in `refusals`, keeps its weights):
  missing_tag  the table's items carry no tag (an unauthenticated table);
  bad_tag      the tag does not match (another key, altered values);
  replayed     an authentic item older than the one it holds.
Items are ordered by (generation, learner_step): a learner raises its
generation each time it starts, so actors take a restarted learner's
weights at once even though its step went back to its last checkpoint.

In one process (the embedded runtime, i2a/run/train.py) `LocalVariables`
is the publisher and the client at once: `publish` copies the learner's
variables into a snapshot and the actor's `update` copies the snapshot into
its network, each in one compiled call, with no table, serialisation or
tag (nothing outside the process can reach the snapshot). The actor sees
exactly the values the Reverb path would give it, at the same moments.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import struct
import threading
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import reverb
import tensorflow as tf
import tree
from absl import logging

from i2a.replay import tables

STEP = "learner_step"
VARIABLES = "variables"
GENERATION = "generation"
TAG = "tag"
TAG_BYTES = hashlib.sha256().digest_size  # 32
KEY_ENV = "I2A_WEIGHTS_KEY"
MIN_KEY_BYTES = 16
REFUSALS = ("missing_tag", "bad_tag", "replayed")
_DOMAIN = b"i2a/variables/hmac-sha256/v1\0"
_KEY_HELP = (
    f"Set {KEY_ENV} to the same secret on every process of the run, e.g. "
    f"export {KEY_ENV}=$(python -c 'import secrets; "
    "print(secrets.token_hex(32))')")

_process_key: Optional[bytes] = None
_process_key_lock = threading.Lock()


# -- Keys ----------------------------------------------------------------------

def key_from_environment(required: bool = True) -> Optional[bytes]:
  """The weights key in $I2A_WEIGHTS_KEY (its UTF-8 bytes).

  ValueError if it is too short, or missing while `required` (the
  distributed mode: actors must be able to authenticate the learner).
  """
  value = os.environ.get(KEY_ENV)
  if not value:
    if required:
      raise ValueError(
          f"{KEY_ENV} is not set. In the distributed mode the learner signs "
          "the weights it publishes and actors refuse weights they cannot "
          f"authenticate, so every process needs the key. {_KEY_HELP}")
    return None
  key = value.encode("utf-8")
  if len(key) < MIN_KEY_BYTES:
    raise ValueError(f"{KEY_ENV} holds {len(key)} bytes; use at least "
                     f"{MIN_KEY_BYTES} (random). {_KEY_HELP}")
  return key


def default_key() -> bytes:
  """$I2A_WEIGHTS_KEY if set, else a random key made once per process."""
  key = key_from_environment(required=False)
  if key is not None:
    return key
  global _process_key
  with _process_key_lock:
    if _process_key is None:
      _process_key = os.urandom(32)
    return _process_key


def weights_tag(key: bytes, step: int, generation: int,
                values: Sequence[np.ndarray]) -> bytes:
  """HMAC-SHA256 over (generation, learner step, each value's dtype, shape, bytes)."""
  mac = hmac.new(key, _DOMAIN, hashlib.sha256)
  mac.update(struct.pack(">qqq", int(generation), int(step), len(values)))
  for value in values:
    value = np.ascontiguousarray(value)
    header = f"{value.dtype.str}{tuple(value.shape)}".encode()
    mac.update(struct.pack(">q", len(header)))
    mac.update(header)
    mac.update(struct.pack(">q", value.nbytes))
    mac.update(memoryview(value).cast("B") if value.nbytes else b"")
  return mac.digest()


# -- Items ---------------------------------------------------------------------

def signature(variables: Sequence[tf.Variable],
              authenticated: bool = True) -> Dict[str, object]:
  """The `variables` table signature.

  {generation: int64 [], learner_step: int64 [], tag: uint8 [32],
  variables: (...)}; `authenticated=False` leaves out generation and tag
  (the old layout, whose items every VariableClient refuses).
  """
  spec = {
      STEP: tf.TensorSpec([], tf.int64, STEP),
      VARIABLES: tuple(tf.TensorSpec(v.shape, v.dtype, f"variable_{i}")
                       for i, v in enumerate(variables)),
  }
  if authenticated:
    spec[GENERATION] = tf.TensorSpec([], tf.int64, GENERATION)
    spec[TAG] = tf.TensorSpec([TAG_BYTES], tf.uint8, TAG)
  return spec


def flatten(step: int, variables: Sequence[tf.Variable], *,
            key: Optional[bytes] = None,
            generation: int = 0) -> Dict[str, object]:
  """The item of `signature(variables)` holding their current values, signed."""
  values = tuple(v.numpy() for v in variables)
  tag = weights_tag(key if key is not None else default_key(), step,
                    generation, values)
  return {STEP: np.int64(step), GENERATION: np.int64(generation),
          TAG: np.frombuffer(tag, np.uint8).copy(), VARIABLES: values}


class PublishedVariables(NamedTuple):
  """A sampled `variables` item."""
  step: int
  generation: int
  values: List[np.ndarray]
  tag: Optional[bytes]  # None: the item has no tag field

  @property
  def version(self) -> Tuple[int, int]:
    return self.generation, self.step


def unflatten_item(data: Sequence[np.ndarray],
                   variables: Sequence[tf.Variable]) -> PublishedVariables:
  """A sampled item's flat data (either layout) -> PublishedVariables."""
  data = list(data)
  if len(data) == len(variables) + 1:
    item = tree.unflatten_as(signature(variables, authenticated=False), data)
    return PublishedVariables(int(item[STEP]), 0, list(item[VARIABLES]),
                              None)
  if len(data) != len(variables) + 3:
    raise ValueError(
        f"a `variables` item holds {len(data)} tensors; this network has "
        f"{len(variables)} variables (expected {len(variables) + 3}, or "
        f"{len(variables) + 1} without a tag). Build both from the same "
        "config.")
  item = tree.unflatten_as(signature(variables), data)
  return PublishedVariables(int(item[STEP]), int(item[GENERATION]),
                            list(item[VARIABLES]),
                            np.asarray(item[TAG], np.uint8).tobytes())


def unflatten(data: Sequence[np.ndarray],
              variables: Sequence[tf.Variable]) -> Tuple[int, List[np.ndarray]]:
  """A sampled item's flat data -> (learner step, values per variable)."""
  item = unflatten_item(data, variables)
  return item.step, item.values


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


# -- Publisher and client ------------------------------------------------------

class VariablePublisher:
  """Writes the learner's variables, signed, into the `variables` table."""

  def __init__(self, client: reverb.Client, variables: Sequence[tf.Variable],
               table: str = tables.VARIABLES, *, key: Optional[bytes] = None,
               generation: Optional[int] = None):
    """
    Args:
      client: a client of the server holding `table`.
      variables: the learner's variables, in the actors' order.
      table: the `variables` table (signature(variables)).
      key: the HMAC key; None: default_key() ($I2A_WEIGHTS_KEY or a random
        per-process key).
      generation: this learner's generation; None: time.time_ns(), larger
        than any earlier learner's on this clock. A learner that restarts
        must publish with a larger generation than before.
    """
    self._client = client
    self._variables = tuple(variables)
    self._table = table
    self._key = key if key is not None else default_key()
    self.generation = time.time_ns() if generation is None else int(
        generation)
    self._writer: Optional[reverb.TrajectoryWriter] = None

  def _check_table(self) -> None:
    spec = tables.table_signature(self._client, self._table)
    if spec is None or TAG not in spec or GENERATION not in spec:
      raise ValueError(
          f"the Reverb table {self._table!r} was created without the "
          f"`{GENERATION}` and `{TAG}` fields (signature {spec}); actors "
          "refuse unauthenticated weights. Create it with "
          "tables.variables_table(agents.variables.signature(variables)).")

  def publish(self, step: int) -> None:
    """Replaces the table's item with the variables at learner step `step`."""
    if self._writer is None:
      self._check_table()
      self._writer = self._client.trajectory_writer(num_keep_alive_refs=1)
    self._writer.append(flatten(step, self._variables, key=self._key,
                                generation=self.generation))
    self._writer.create_item(
        self._table, priority=1.0,
        trajectory=tree.map_structure(lambda c: c[-1], self._writer.history))
    self._writer.flush()  # Actors see these weights from now on.

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._writer = None


class VariableClient:
  """Pulls the newest authentic published variables into an actor's network."""

  def __init__(self, client: reverb.Client, variables: Sequence[tf.Variable],
               table: str = tables.VARIABLES, *, key: Optional[bytes] = None,
               log_every_s: float = 10.0):
    """
    Args:
      client: a client of the server holding `table`.
      variables: the actor's copy of the learner's variables.
      table: the `variables` table.
      key: the HMAC key; None: default_key().
      log_every_s: refusals are logged at most this often (all are counted).
    """
    self._client = client
    self._variables = tuple(variables)
    self._table = table
    self._key = key if key is not None else default_key()
    self._log_every_s = log_every_s
    self._last_log = -float("inf")
    self.learner_step = -1  # the step of the values this network holds
    self.generation = -1  # and the generation of the learner that made them
    self.refusals = 0
    self.refusals_by_reason: Dict[str, int] = collections.Counter()
    self.updates = 0  # times `update` assigned new values
    self._checked = False

  @property
  def version(self) -> Tuple[int, int]:
    """(generation, learner step) of the values held; (-1, -1): none yet."""
    return self.generation, self.learner_step

  def update(self) -> bool:
    """Assigns the newest values if they are newer and authentic; True if it did.

    Blocks until the learner has published once. Refused items (see the
    module docstring) leave the network as it is.
    """
    sample = next(iter(self._client.sample(self._table, num_samples=1,
                                           emit_timesteps=False)))
    if not self._checked:
      check_compatible(self._variables, tuple(
          tables.table_signature(self._client, self._table)[VARIABLES]))
      self._checked = True
    item = unflatten_item(sample.data, self._variables)
    if item.tag is not None and item.version == self.version:
      return False  # Nothing newer.
    if item.tag is None:
      return self._refuse("missing_tag", item)
    if item.version < self.version:
      return self._refuse("replayed", item)
    expected = weights_tag(self._key, item.step, item.generation, item.values)
    if not hmac.compare_digest(expected, item.tag):
      return self._refuse("bad_tag", item)
    for variable, value in zip(self._variables, item.values):
      variable.assign(value)
    self.generation, self.learner_step = item.version
    self.updates += 1
    return True

  def _refuse(self, reason: str, item: PublishedVariables) -> bool:
    self.refusals += 1
    self.refusals_by_reason[reason] += 1
    now = time.monotonic()
    if now - self._last_log >= self._log_every_s:
      self._last_log = now
      logging.warning(
          "refused published weights (%s: generation %d, learner step %d; "
          "holding generation %d, step %d; %d refusals so far: %s). Keeping "
          "the current weights. bad_tag/missing_tag: the learner and this "
          "actor hold different %s, or someone else writes to the Reverb "
          "server.", reason, item.generation, item.step, self.generation,
          self.learner_step, self.refusals, dict(self.refusals_by_reason),
          KEY_ENV)
    return False


class LocalVariables:
  """Publisher and client in one process: learner -> snapshot -> actor.

  `publish(step)` (the learner's side, as `VariablePublisher.publish`)
  copies `source` (the learner's learnable variables) into a snapshot;
  `update()` (the actor's side, as `VariableClient.update`) copies the
  snapshot into `target` (the actor's copy) when it is newer than what the
  target holds. Each is one tf.function over all variables.
  """

  def __init__(self, source: Sequence[tf.Variable],
               target: Sequence[tf.Variable]):
    self._source = tuple(source)
    self._target = tuple(target)
    check_compatible(self._target, [tf.TensorSpec(v.shape, v.dtype)
                                    for v in self._source])
    self._snapshot = tuple(
        tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                    name=f"published_{i}")
        for i, v in enumerate(self._source))
    self.published_step = -1  # the learner step of the snapshot
    self.learner_step = -1  # the step of the values `target` holds
    self._publications = 0  # publish() calls so far
    self._held = 0  # the publication `target` holds (0: none)
    self.updates = 0  # times `update` assigned new values
    self._copy_in = tf.function(lambda: self._copy(self._source,
                                                   self._snapshot))
    self._copy_out = tf.function(lambda: self._copy(self._snapshot,
                                                    self._target))

  @staticmethod
  def _copy(source: Sequence[tf.Variable],
            target: Sequence[tf.Variable]) -> None:
    for to, value in zip(target, source):
      to.assign(value)

  @property
  def version(self) -> Tuple[int, int]:
    """(0, learner step) of the values held; (-1, -1): none yet."""
    return ((-1, -1) if self.learner_step < 0 else (0, self.learner_step))

  def publish(self, step: int) -> None:
    """The learner's variables become the newest, at learner step `step`."""
    self._copy_in()
    self.published_step = int(step)
    self._publications += 1

  def update(self) -> bool:
    """Assigns the newest published values if newer; True if it did.
    RuntimeError if nothing was published yet (a Reverb client would wait
    for ever in one process)."""
    if not self._publications:
      raise RuntimeError("the actor asked for weights before the learner "
                         "published any: call learner.publish() first.")
    if self._held == self._publications:
      return False
    self._copy_out()
    self._held = self._publications
    self.learner_step = self.published_step
    self.updates += 1
    return True

  def close(self) -> None:
    """Nothing to release (the publisher's interface)."""
