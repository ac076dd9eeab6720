"""The learner: batches of unrolls from Reverb -> actor-critic update -> weights.

Data flow (docs/agents.md, "Data flow"): `unroll_dataset` reads the Reverb `unrolls`
queue through tf.data (reverb.TrajectoryDataset, in insertion order) in
batches of `batch_size` unrolls (items of several unrolls merged);
`Learner.step()` runs one update in the private tf.function `_step()` (the
network over all n + 1 windows of every unroll, with their stored side inputs if it declares any;
`agents.losses.actor_critic_loss` on the clipped rewards (`reward_clipping`)
bootstrapped from the last window's value, plus `network.auxiliary_loss`; global-norm clipped RMSProp on
`network.learnable_variables`), counts and times it, and publishes the new
weights to the `variables` table for the actors.

In one process (the embedded runtime, i2a/run/train.py) the unrolls may
skip Reverb: the actor puts its batches into a `LocalUnrolls` queue, and a
Learner given one feeds each batch of `batch_size` unrolls (the same
unrolls in the same order as the Reverb queue would give them) to the
tf.function `_update(batch)`; the update itself is the same function
either way.

Finiteness: an update whose loss or gradient norm is not finite is skipped
(the weights and the optimizer's state stay as they were), counted
(`nonfinite_update` in its metrics, `skipped_updates`) and logged; after
`max_nonfinite_updates` in a row the learner stops with a
FloatingPointError. Malformed unrolls (`valid_unrolls`) are dropped; a
batch with none left is skipped the same way (`nonfinite_update` 1) but
does not count towards that stop, nor break a run of non-finite updates:
it says nothing about the learner's weights, and the unrolls are not
authenticated. Weights are published only when every value is finite,
so actors never load a NaN.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Deque, Dict, Mapping, Optional, Union

import numpy as np
import reverb
import sonnet as snt
import tensorflow as tf
from absl import logging

from agents import compiled, losses
from agents.acting import check_unrolls_per_item
from agents.base import ActorCriticNetwork
from agents.variables import VariablePublisher
from envmodels import optimization
from i2a.replay import tables

Logger = Callable[[int, Mapping[str, float]], None]

# What the loss sees of the environment's rewards (config.loss.reward_clipping):
# 'sign' clips them to {-1, 0, 1} as the A2C and I2A papers train on Atari
# (scores range from 10 to 1,600 per step on MsPacman); 'none' uses them as
# stored. Unrolls keep the unclipped rewards; episode returns are game points.
REWARD_CLIPPINGS = ("sign", "none")


def clip_rewards(rewards: tf.Tensor, reward_clipping: str) -> tf.Tensor:
  """The rewards the loss trains on, per REWARD_CLIPPINGS."""
  if reward_clipping == "sign":
    return tf.sign(rewards)
  if reward_clipping == "none":
    return rewards
  raise ValueError(f"reward_clipping must be one of {REWARD_CLIPPINGS}, "
                   f"given {reward_clipping!r}.")


# Rewards beyond this magnitude mark an unroll as malformed (game scores
# stay far below it: MsPacman's largest single reward is 5,000).
MAX_ABS_REWARD = 1e6


def valid_unrolls(batch: Mapping[str, tf.Tensor],
                  num_actions: int) -> tf.Tensor:
  """bool [B]: the unrolls whose actions lie in [0, num_actions), whose
  rewards are finite and within MAX_ABS_REWARD, discounts in [0, 1],
  behaviour logits and floating side inputs finite."""
  def per_unroll(ok: tf.Tensor) -> tf.Tensor:  # [B, ...] -> [B]
    return tf.reduce_all(tf.reshape(ok, [tf.shape(ok)[0], -1]), axis=1)
  action = batch["action"]
  reward, discount = batch["reward"], batch["discount"]
  checks = [
      per_unroll(tf.logical_and(action >= 0, action < num_actions)),
      per_unroll(tf.logical_and(tf.math.is_finite(reward),
                                tf.abs(reward) <= MAX_ABS_REWARD)),
      per_unroll(tf.logical_and(discount >= 0.0, discount <= 1.0)),
  ]
  for name, value in batch.items():
    if name not in ("action", "reward", "discount") and value.dtype.is_floating:
      checks.append(per_unroll(tf.math.is_finite(value)))
  return tf.reduce_all(tf.stack(checks, axis=1), axis=1)


def sanitized(batch: Mapping[str, tf.Tensor],
              num_actions: int) -> Dict[str, tf.Tensor]:
  """The batch with values every op accepts: actions clipped into range,
  discounts into [0, 1], non-finite floats zeroed. Only malformed unrolls
  change, and `Learner` never learns from those."""
  out = {}
  for name, value in batch.items():
    if name == "action":
      value = tf.clip_by_value(value, 0, num_actions - 1)
    elif value.dtype.is_floating:
      value = tf.where(tf.math.is_finite(value), value, tf.zeros_like(value))
      if name == "discount":
        value = tf.clip_by_value(value, 0.0, 1.0)
    out[name] = value
  return out


def unroll_dataset(server_address: str, batch_size: int,
                   table: str = tables.UNROLLS,
                   timeout_ms: int = -1,
                   unrolls_per_item: int = 1) -> tf.data.Dataset:
  """Batches {field: [B, ...]} of unrolls from the `unrolls` queue, in order.

  One worker keeps the queue's order, so a run is reproducible. With
  `timeout_ms` >= 0 the dataset ends (OutOfRangeError) when no unroll comes
  for that long instead of waiting for ever. `unrolls_per_item`: the
  table's (agents/acting.py `unroll_signature`); with U > 1 each batch is
  batch_size // U items of [U, ...] unrolls, their leading axes merged
  (item by item, environment by environment: the order one item per
  unroll would give), so `batch_size` must be a multiple of U.
  """
  check_unrolls_per_item(unrolls_per_item)
  if batch_size < 1 or batch_size % unrolls_per_item:
    raise ValueError(
        f"a batch of {batch_size} unrolls cannot be read from a queue whose "
        f"items hold {unrolls_per_item} unrolls each (of one actor's "
        "environments): make config.batch_size a positive multiple of "
        "config.num_envs (i2a/run/train.py check_config), or read batches "
        f"of a multiple of {unrolls_per_item}.")
  items = batch_size // unrolls_per_item
  dataset = reverb.TrajectoryDataset.from_table_signature(
      server_address=server_address, table=table,
      max_in_flight_samples_per_worker=items,
      num_workers_per_iterator=1, rate_limiter_timeout_ms=timeout_ms)
  dataset = dataset.map(lambda sample: sample.data)
  dataset = dataset.batch(items, drop_remainder=True)
  if unrolls_per_item > 1:  # [items, U, ...] -> [batch_size, ...]
    dataset = dataset.map(lambda batch: {
        name: tf.reshape(value, [batch_size, *value.shape[2:]])
        for name, value in batch.items()})
  return dataset.prefetch(1)


class LocalUnrolls:
  """An in-process `unrolls` queue: an actor and a learner in one process.

  The actor `put`s each unroll batch {field: [N, ...]} (`Actor.unroll`'s,
  unroll_signature with a leading environment axis); the learner `take`s
  `batch_size` unrolls {field: [batch_size, ...]}, in insertion order,
  environment by environment: the batch the Reverb `unrolls` queue
  (`unroll_dataset`) would give for the same writes, without the
  items, serialisation and sampling. `put` past `capacity` unrolls or
  `take` of more than are queued raise (an actor and a learner that
  alternate, or that overlap by one update as i2a/run/train.py's
  `overlap_acting` does, never do), where Reverb would block; `put` and
  `take` may come from two threads.
  """

  def __init__(self, capacity: int):
    if capacity < 1:
      raise ValueError(f"capacity must be >= 1 unrolls, given {capacity}.")
    self.capacity = capacity
    self._batches: Deque[Dict[str, np.ndarray]] = collections.deque()
    self._size = 0
    self._lock = threading.Lock()

  def __len__(self) -> int:
    """Unrolls queued."""
    return self._size

  def put(self, batch: Mapping[str, np.ndarray]) -> None:
    """Queues the unrolls of `batch` ({field: [N, ...]}, N >= 1)."""
    sizes = {name: len(value) for name, value in batch.items()}
    if len(set(sizes.values())) != 1:
      raise ValueError("an unroll batch needs one leading size across its "
                       f"fields, given {sizes}.")
    size = next(iter(sizes.values()))
    with self._lock:
      self._put(batch, size)

  def _put(self, batch: Mapping[str, np.ndarray], size: int) -> None:
    if self._size + size > self.capacity:
      raise RuntimeError(
          f"the local unrolls queue holds {self._size} of {self.capacity} "
          f"unrolls and cannot take {size} more: the learner must take a "
          "batch before the actor writes again (raise config.queue_size, or "
          "alternate actor and learner as i2a/run/train.py does).")
    self._batches.append(dict(batch))
    self._size += size

  def take(self, count: int) -> Dict[str, np.ndarray]:
    """The oldest `count` unrolls as one batch {field: [count, ...]}."""
    with self._lock:
      return self._take(count)

  def _take(self, count: int) -> Dict[str, np.ndarray]:
    if count > self._size:
      raise RuntimeError(
          f"the learner needs {count} unrolls and the local unrolls queue "
          f"holds {self._size}: the actor must write "
          f"{count - self._size} more before the learner steps.")
    parts = []
    needed = count
    while needed:
      batch = self._batches[0]
      size = len(next(iter(batch.values())))
      if size <= needed:
        parts.append(self._batches.popleft())
        needed -= size
      else:  # split: the rest stays at the front
        parts.append({k: v[:needed] for k, v in batch.items()})
        self._batches[0] = {k: v[needed:] for k, v in batch.items()}
        needed = 0
    self._size -= count
    if len(parts) == 1:
      return parts[0]
    return {name: np.concatenate([part[name] for part in parts])
            for name in parts[0]}


def _merge_batch_and_time(x: tf.Tensor) -> tf.Tensor:
  """[B, T, ...] -> [B * T, ...]."""
  shape = tf.shape(x)
  merged = tf.reshape(x, tf.concat([[-1], shape[2:]], 0))
  merged.set_shape([None] + x.shape[2:].as_list())
  return merged


def rmsprop(learning_rate: float, decay: float,
            epsilon: float) -> snt.Optimizer:
  """RMSProp as A2C uses it: ms = decay ms + (1 - decay) g^2, g / sqrt(ms + eps)."""
  return snt.optimizers.RMSProp(learning_rate=learning_rate, decay=decay,
                                epsilon=epsilon)


class Learner:
  """Updates a network from batches of unrolls and publishes its weights."""

  def __init__(self, network: ActorCriticNetwork,
               dataset: Union[tf.data.Dataset, LocalUnrolls],
               optimizer: snt.Optimizer, *, discount: float,
               value_coef: float, entropy_coef: float, clip_norm: float,
               reward_clipping: str = "sign",
               max_nonfinite_updates: int = 10,
               publisher: Optional[VariablePublisher] = None,
               logger: Optional[Logger] = None,
               batch_size: Optional[int] = None):
    """
    Args:
      network: the learner's network (its variables created).
      dataset: batches of unrolls (unroll_dataset), fields [B, n(+1), ...],
        or a LocalUnrolls queue the learner takes `batch_size` unrolls from
        per step (in one process with the actor).
      batch_size: unrolls per update; required with a LocalUnrolls queue
        (a dataset's batches carry their size).
      optimizer: applied to network.learnable_variables.
      discount, value_coef, entropy_coef: agents.losses.actor_critic_loss.
      clip_norm: global gradient norm clip.
      reward_clipping: REWARD_CLIPPINGS: what the loss sees of the rewards.
      max_nonfinite_updates: this many skipped (non-finite) updates in a
        row stop the learner (FloatingPointError); batches with no valid
        unroll are skipped without counting.
      publisher: writes the weights to the `variables` table after each step.
      logger: called as logger(learner_step, metrics) after each step.
    """
    self.network = network
    self.optimizer = optimizer
    self._loss_args = dict(gamma=discount, value_coef=value_coef,
                           entropy_coef=entropy_coef)
    self._clip_norm = clip_norm
    clip_rewards(tf.zeros([1]), reward_clipping)  # refuses unknown modes
    self._reward_clipping = reward_clipping
    self._publisher = publisher
    self._logger = logger
    if isinstance(dataset, LocalUnrolls):
      if batch_size is None or batch_size < 1:
        raise ValueError("a Learner fed from a LocalUnrolls queue needs "
                         f"batch_size >= 1 unrolls per update, given "
                         f"{batch_size}.")
      self._local: Optional[LocalUnrolls] = dataset
      self._iterator = None
    else:
      self._local = None
      self._iterator = iter(dataset)
    self._batch_size = batch_size
    if max_nonfinite_updates < 1:
      raise ValueError("max_nonfinite_updates must be >= 1, given "
                       f"{max_nonfinite_updates}.")
    self._max_nonfinite = max_nonfinite_updates
    self.skipped_updates = 0  # this process's, not checkpointed
    self.dropped_unrolls = 0
    self._nonfinite_in_a_row = 0
    self.learner_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                    name="learner_step")
    optimization.create_slots(optimizer, network.learnable_variables)
    self.last_step_time_s = 0.0
    # Traced once per learner: the dataset's next batch read in the graph,
    # or a fed batch (its shapes never change).
    self._step = tf.function(self._step)
    self._update = compiled.Compiled(self._update)

  @property
  def variables(self):
    return self.network.learnable_variables

  def checkpointables(self) -> Dict[str, tf.Module]:
    """What a checkpoint of this learner holds."""
    return dict(network=self.network, optimizer=self.optimizer,
                learner_step=self.learner_step)

  def _step(self) -> Dict[str, tf.Tensor]:
    """One update on the dataset's next batch."""
    return self._update.python_function(next(self._iterator))

  def _update(self, batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """One update on `batch` ({field: [B, ...]}, unroll_signature)."""
    # Unrolls are not authenticated (docs/distributed.md): malformed ones
    # are dropped here, before an out-of-range action can crash an op.
    valid = valid_unrolls(batch, self.network.num_actions)  # [B]
    dropped = tf.reduce_sum(1.0 - tf.cast(valid, tf.float32))
    any_valid = tf.reduce_any(valid)

    def drop_malformed() -> Dict[str, tf.Tensor]:
      # With none valid, the sanitised batch runs and its update is skipped.
      keep = tf.logical_or(valid, tf.logical_not(any_valid))
      return {name: tf.boolean_mask(value, keep)
              for name, value in sanitized(
                  batch, self.network.num_actions).items()}
    # The usual case copies nothing.
    batch = tf.cond(tf.reduce_all(valid), lambda: dict(batch),
                    drop_malformed)
    observations = batch["observation"]  # [B, n + 1, k, H, W, C]
    shape = tf.shape(observations)
    batch_size, length = shape[0], shape[1]
    flat = _merge_batch_and_time(observations)  # [B * (n + 1), k, H, W, C]
    side = {name: _merge_batch_and_time(batch[name])  # [B * (n + 1), ...]
            for name in self.network.side_input_spec()} or None
    with tf.GradientTape() as tape:
      output = self.network(flat, side)  # [B * (n + 1), ...]
      logits = tf.reshape(output.policy_logits,
                          [batch_size, length,
                           self.network.num_actions])  # [B, n + 1, A]
      values = tf.reshape(output.value, [batch_size, length])  # [B, n + 1]
      to_time_major = lambda x: tf.transpose(
          x, tf.concat([[1, 0], tf.range(2, tf.rank(x))], 0))
      out = losses.actor_critic_loss(
          policy_logits=to_time_major(logits[:, :-1]),  # [n, B, A]
          values=to_time_major(values[:, :-1]),  # [n, B]
          actions=to_time_major(batch["action"]),
          rewards=to_time_major(clip_rewards(batch["reward"],
                                             self._reward_clipping)),
          discounts=to_time_major(batch["discount"]),
          bootstrap_value=values[:, -1],  # [B]
          **self._loss_args)
      auxiliary_loss, auxiliary_metrics = self.network.auxiliary_loss(output)
      loss = out.loss + auxiliary_loss
    variables = self.network.learnable_variables
    gradients = tape.gradient(loss, variables)
    clipped, norm = tf.clip_by_global_norm(gradients, self._clip_norm)
    finite = optimization.apply_if_finite(self.optimizer, clipped, variables,
                                          loss, norm, allowed=any_valid)
    self.learner_step.assign_add(1)
    weights_finite = tf.reduce_all(tf.stack(
        [tf.reduce_all(tf.math.is_finite(v)) for v in variables]))
    # How far the learner's policy is from the one that acted (on-policy: ~0).
    behaviour = tf.nn.log_softmax(batch["behaviour_logits"])  # [B, n, A]
    current = tf.nn.log_softmax(logits[:, :-1])
    behaviour_kl = tf.reduce_mean(tf.reduce_sum(
        tf.exp(behaviour) * (behaviour - current), -1))
    metrics = dict(out.metrics)
    metrics.update({f"auxiliary/{k}": v for k, v in auxiliary_metrics.items()})
    metrics.update(total_loss=loss, auxiliary_loss=auxiliary_loss,
                   gradient_norm=norm, behaviour_kl=behaviour_kl,
                   nonfinite_update=1.0 - tf.cast(finite, tf.float32),
                   dropped_unrolls=dropped,
                   nonfinite_weights=1.0 - tf.cast(weights_finite,
                                                   tf.float32),
                   _no_valid_unroll=1.0 - tf.cast(any_valid, tf.float32),
                   batch_reward=tf.reduce_mean(batch["reward"]))
    return metrics

  def step(self) -> Dict[str, float]:
    """One update: returns its metrics (floats) and publishes the weights."""
    start = time.perf_counter()
    try:
      if self._local is not None:
        batch = self._local.take(self._batch_size)
        metrics = self._update(batch)
      else:
        metrics = self._step()
      metrics = {k: float(v) for k, v in metrics.items()}
    except (tf.errors.OutOfRangeError, StopIteration) as e:
      raise RuntimeError(
          "the learner waited for unrolls that never came (the Reverb "
          "`unrolls` queue stayed empty past its timeout): are the actors "
          "running and writing to this server?") from e
    step = int(self.learner_step.numpy())
    # Not a metric: whether the update was skipped for want of data.
    no_valid_unroll = bool(metrics.pop("_no_valid_unroll"))
    if metrics["dropped_unrolls"]:
      self.dropped_unrolls += int(metrics["dropped_unrolls"])
      logging.warning("learner step %d dropped %d malformed unrolls (%d in "
                      "all): actions out of range, or non-finite or "
                      "out-of-bounds values", step,
                      int(metrics["dropped_unrolls"]), self.dropped_unrolls)
    if no_valid_unroll:
      # Forged or corrupt data, not a diverging learner: skipped, but it
      # neither counts towards max_nonfinite_updates nor resets the count
      # (else anyone who can write to the queue could stop the learner).
      self.skipped_updates += 1
      logging.warning("learner step %d skipped: every unroll of its batch "
                      "was malformed (%d skipped in all)", step,
                      self.skipped_updates)
    elif metrics["nonfinite_update"]:
      self.skipped_updates += 1
      self._nonfinite_in_a_row += 1
      logging.warning(
          "learner step %d skipped: loss %s, gradient norm %s (%d in a row, "
          "%d in all)", step, metrics["total_loss"], metrics["gradient_norm"],
          self._nonfinite_in_a_row, self.skipped_updates)
      if self._nonfinite_in_a_row >= self._max_nonfinite:
        raise FloatingPointError(
            f"{self._nonfinite_in_a_row} learner updates in a row had a "
            f"non-finite loss or gradient (the last at learner step {step}: "
            f"loss {metrics['total_loss']}, gradient norm "
            f"{metrics['gradient_norm']}); none was applied and no non-finite "
            "weights were published or saved. Lower "
            "--config.optimizer.learning_rate (or check the rewards: "
            "--config.loss.reward_clipping) and resume from the last "
            "checkpoint.")
    else:
      self._nonfinite_in_a_row = 0
    if metrics["nonfinite_weights"]:  # a finite update that overflowed
      optimization.check_finite(self.network.learnable_variables, "publish")
    self._publish()
    self.last_step_time_s = time.perf_counter() - start
    if self._logger is not None:
      self._logger(step, metrics)
    return metrics

  def publish(self) -> None:
    """Writes the current weights to the `variables` table (if publishing
    and every value is finite; otherwise FloatingPointError)."""
    if self._publisher is not None:
      optimization.check_finite(self.network.learnable_variables, "publish")
      self._publish()

  def _publish(self) -> None:  # after `step` checked the weights in-graph
    if self._publisher is not None:
      self._publisher.publish(int(self.learner_step.numpy()))
