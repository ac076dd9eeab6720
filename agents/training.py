"""The runtime of `python -m i2a.train` in the embedded mode.

Data flow (DESIGN.md, "train"): one process runs a Reverb server with the
`unrolls` queue and the `variables` table, one `Actor` (agents/acting.py)
and one `Learner` (agents/learning.py), the same classes that run as
separate processes in the distributed mode. They alternate: the actor
pulls the newest weights and writes batch_size // num_envs unrolls, the
learner reads them as one batch, updates, and publishes its weights. The
alternation makes a run deterministic for a seed.

The run lives in a workdir: config.json / protocol.json (a different
config is refused on resume), checkpoints/ (network, optimizer, learner
step, env-step counter, and the actor's state: environments, frame windows,
RNG; the last N kept), TensorBoard events and metrics.csv, and
images/learning_curve.png (episode return vs environment steps). Running
again in the same workdir resumes from the newest complete checkpoint and
reproduces, update for update, the run that was not interrupted.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import pickle
import time
from typing import Any, Dict, List, Optional

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging

import envmodels
from agents import builder, learning
from agents.acting import Actor, Episode, unroll_signature
from agents.variables import VariableClient, VariablePublisher
from agents import variables as variables_lib
from i2a import environments, io_utils, pictures, runs
from i2a.metrics import MetricsLog, read_column
from i2a.progress import Progress
from i2a.replay import tables

CHECKPOINTS = "checkpoints"
ACTOR_STATE = "actor-{step}.pkl"  # next to the TF checkpoint of that step
LEARNING_CURVE = "learning_curve.png"
# Fields a resumed run may change (budgets, cadence); configs/agents/common.py.
RESUMABLE_FIELDS = ("env_steps", "log_every", "checkpoint_every",
                    "keep_checkpoints", "plot_every", "eval_episodes")
# The embedded learner never waits longer than this for unrolls.
EMBEDDED_TIMEOUT_MS = 120_000


def check_config(config: ml_collections.ConfigDict) -> None:
  """ValueError for settings the embedded runtime cannot run."""
  for name in ("num_envs", "unroll_length", "batch_size", "queue_size",
               "log_every", "checkpoint_every", "keep_checkpoints",
               "plot_every", "context_length"):
    if int(config[name]) < 1:
      raise ValueError(f"config.{name} must be >= 1, given {config[name]}.")
  if config.batch_size % config.num_envs:
    raise ValueError(
        f"config.batch_size ({config.batch_size}) must be a multiple of "
        f"config.num_envs ({config.num_envs}): each update reads "
        "batch_size // num_envs unrolls of every environment.")
  if config.queue_size < config.batch_size:
    raise ValueError(f"config.queue_size ({config.queue_size}) must hold a "
                     f"batch (config.batch_size = {config.batch_size}).")


def envmodel_seed(config: ml_collections.ConfigDict, role: str) -> int:
  """Seeds of the envmodel copies (stochastic models sample with them)."""
  return config.seed * 1_000_003 + {"learner": 1, "actor": 2, "eval": 3}[role]


class Trainer:
  """One training run in `workdir` (resumes what is there)."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str):
    check_config(config)
    builder.check_agent(config)
    self.config = config
    self.protocol = runs.protocol_from_config(config)
    self.num_actions = environments.num_actions(self.protocol)
    self.observation_shape = tuple(self.protocol.observation_shape)
    # The envmodel is loaded and checked before anything is written, so a
    # refused model leaves no workdir behind to block the corrected run.
    learner_model = actor_model = None
    if config.envmodel:
      learner_model = builder.load_envmodel(
          config.envmodel, self.protocol, self.num_actions,
          seed=envmodel_seed(config, "learner"))
      actor_model = envmodels.load(config.envmodel,
                                   seed=envmodel_seed(config, "actor"))
    self.workdir = runs.prepare_workdir(workdir, config, self.protocol,
                                        ignore=RESUMABLE_FIELDS)
    tf.random.set_seed(config.seed)
    self._exit = contextlib.ExitStack()
    try:
      self._build(learner_model, actor_model)
    except BaseException:
      self._exit.close()
      raise

  def _build(self, learner_model, actor_model) -> None:
    config = self.config
    network = builder.build_network(config, self.num_actions,
                                    self.observation_shape, learner_model)
    builder.create_variables(network, self.observation_shape)
    self.server = tables.start_server([
        tables.unrolls_table(
            unroll_signature(config.unroll_length, config.context_length,
                             self.observation_shape, self.num_actions),
            max_size=config.queue_size),
        tables.variables_table(
            variables_lib.signature(network.learnable_variables)),
    ])
    self._exit.callback(self.server.stop)
    client = self.server.localhost_client()
    publisher = VariablePublisher(client, network.learnable_variables)
    self._exit.callback(publisher.close)
    self.learner = learning.Learner(
        network,
        learning.unroll_dataset(f"localhost:{self.server.port}",
                                config.batch_size,
                                timeout_ms=EMBEDDED_TIMEOUT_MS),
        learning.rmsprop(config.optimizer.learning_rate,
                         config.optimizer.decay, config.optimizer.epsilon),
        discount=config.loss.discount, value_coef=config.loss.value_coef,
        entropy_coef=config.loss.entropy_coef,
        clip_norm=config.optimizer.clip_norm,
        publisher=publisher)
    acting_network = builder.build_network(
        config, self.num_actions, self.observation_shape, actor_model)
    builder.create_variables(acting_network, self.observation_shape)
    self.actor = Actor(
        acting_network,
        environments.make_vector_env(self.protocol, config.num_envs),
        config.unroll_length, seed=config.seed, client=client,
        variable_client=VariableClient(client,
                                       acting_network.learnable_variables))
    self._exit.callback(self.actor.close)
    self.env_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 name="env_steps")
    self.episodes = tf.Variable(0, dtype=tf.int64, trainable=False,
                                name="episodes")
    self.checkpoint = tf.train.Checkpoint(
        env_steps=self.env_steps, episodes=self.episodes,
        **self.learner.checkpointables())
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self.checkpoint_dir,
        max_to_keep=config.keep_checkpoints)
    self.log = MetricsLog(self.workdir)

  @property
  def checkpoint_dir(self) -> str:
    return os.path.join(self.workdir, CHECKPOINTS)

  def close(self) -> None:
    self._exit.close()

  # -- Checkpoints -----------------------------------------------------------

  def _actor_state_path(self, checkpoint_path: str) -> str:
    step = checkpoint_path.rsplit("-", 1)[-1]
    return os.path.join(self.checkpoint_dir, ACTOR_STATE.format(step=step))

  def save(self) -> str:
    """Actor state first (atomic), then the TF checkpoint and its pointer.

    The CheckpointManager updates `checkpoint` (the 'latest' pointer,
    written atomically) only after the checkpoint's files are complete, and
    the actor's state is on disk before that: a crash at any point leaves
    'latest' on a complete checkpoint.
    """
    step = int(self.learner.learner_step.numpy())
    self.env_steps.assign(self.actor.env_steps)
    actor_path = os.path.join(self.checkpoint_dir,
                              ACTOR_STATE.format(step=step))
    with io_utils.atomic_path(actor_path) as tmp:
      with open(tmp, "wb") as f:
        pickle.dump(self.actor.get_state(), f)
        f.flush()
        os.fsync(f.fileno())
    path = self.manager.save(checkpoint_number=step)
    kept = {os.path.basename(self._actor_state_path(p))
            for p in self.manager.checkpoints}
    for name in os.listdir(self.checkpoint_dir):
      if name.startswith("actor-") and name.endswith(".pkl") \
          and name not in kept:
        os.remove(os.path.join(self.checkpoint_dir, name))
    return path

  def _readable(self, path: str) -> Optional[Dict[str, Any]]:
    """The actor state of a complete, readable checkpoint; None otherwise."""
    try:
      reader = tf.train.load_checkpoint(path)
      for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
      with open(self._actor_state_path(path), "rb") as f:
        return pickle.load(f)
    except Exception as e:  # pylint: disable=broad-except  (any damage)
      logging.warning("checkpoint %s is incomplete or unreadable (%s)", path,
                      e)
      return None

  def restore(self) -> int:
    """Restores the newest complete checkpoint; returns its learner step."""
    candidates = list(reversed(self.manager.checkpoints))
    for path in candidates:
      actor_state = self._readable(path)
      if actor_state is None:
        continue
      status = self.checkpoint.restore(path)
      status.assert_existing_objects_matched()
      # The optimizer's slots are created, and restored, at the first update.
      status.expect_partial()
      self.actor.set_state(actor_state)
      step = int(self.learner.learner_step.numpy())
      logging.info("resumed from %s (learner step %d, %d env steps)", path,
                   step, self.actor.env_steps)
      if path != candidates[0]:
        print(f"resumed from {path}: newer checkpoints were incomplete",
              flush=True)
      self.log.truncate_after(step)
      return step
    if candidates:
      raise ValueError(
          f"no readable checkpoint in {self.checkpoint_dir} (tried "
          f"{candidates}); delete the workdir to start over.")
    self.log.truncate_after(0)
    return 0

  # -- Logs and pictures -----------------------------------------------------

  def plot_learning_curve(self) -> Optional[str]:
    metrics = os.path.join(self.workdir, "metrics.csv")
    env_steps = read_column(metrics, "env_steps")
    returns = read_column(metrics, "episode_return")
    if env_steps is None or returns is None:
      return None
    keep = np.isfinite(returns)
    if not keep.any():
      return None
    path = os.path.join(self.workdir, "images", LEARNING_CURVE)
    pictures.line_plot(
        path, {self.config.agent: (env_steps[keep], returns[keep])},
        xlabel="environment steps", ylabel="episode return",
        title=f"{self.config.agent} on {self.protocol.env_id}")
    return path

  # -- The loop --------------------------------------------------------------

  def train(self) -> Dict[str, Any]:
    """Trains to config.env_steps (resuming); returns a summary."""
    config = self.config
    start_step = self.restore()
    self.learner.publish()  # The actor starts from the learner's weights.
    unrolls_per_update = config.batch_size // config.num_envs
    progress = Progress(f"train {config.agent}", config.env_steps,
                        "env steps", initial=self.actor.env_steps)
    recent_returns = collections.deque(maxlen=100)
    window: Dict[str, List[float]] = collections.defaultdict(list)
    episodes: List[Episode] = []
    started = time.monotonic()
    start_env_steps = self.actor.env_steps
    interval_start, interval_env_steps = started, self.actor.env_steps
    interval_learner_steps = start_step
    step = start_step
    while self.actor.env_steps < config.env_steps:
      for _ in range(unrolls_per_update):
        _, finished = self.actor.unroll()
        episodes.extend(finished)
        recent_returns.extend(e.episode_return for e in finished)
        self.episodes.assign_add(len(finished))
      for key, value in self.learner.step().items():
        window[key].append(value)
      step = int(self.learner.learner_step.numpy())
      final = self.actor.env_steps >= config.env_steps
      if step % config.log_every == 0 or final:
        now = time.monotonic()
        elapsed = max(now - interval_start, 1e-9)
        row = {k: float(np.mean(v)) for k, v in window.items()}
        row.update(
            env_steps=self.actor.env_steps,
            episodes=int(self.episodes.numpy()),
            episode_return=(float(np.mean([e.episode_return
                                           for e in episodes]))
                            if episodes else math.nan),
            episode_length=(float(np.mean([e.length for e in episodes]))
                            if episodes else math.nan),
            env_steps_per_s=(self.actor.env_steps - interval_env_steps)
            / elapsed,
            learner_steps_per_s=(step - interval_learner_steps) / elapsed)
        self.log.write(step, row)
        extras = dict(step=step,
                      learner_steps_per_s=row["learner_steps_per_s"])
        if recent_returns:
          extras["return"] = float(np.mean(recent_returns))
        progress.update(self.actor.env_steps - progress.done, force=True,
                        **extras)
        window.clear()
        episodes = []
        interval_start, interval_env_steps = now, self.actor.env_steps
        interval_learner_steps = step
      if step % config.checkpoint_every == 0 or final:
        self.save()
      if step % config.plot_every == 0 or final:
        self.log.flush()
        self.plot_learning_curve()
    self.log.flush()
    if step == start_step:
      print(f"training already reached its budget ({self.actor.env_steps:,} "
            f"of {config.env_steps:,} env steps) at learner step {step}",
            flush=True)
    progress.close()
    elapsed = time.monotonic() - started
    curve = self.plot_learning_curve()
    return dict(
        workdir=self.workdir, learner_steps=step,
        env_steps=self.actor.env_steps, episodes=int(self.episodes.numpy()),
        recent_return=(float(np.mean(recent_returns)) if recent_returns
                       else math.nan),
        env_steps_per_s=(self.actor.env_steps - start_env_steps)
        / max(elapsed, 1e-9),
        learner_steps_per_s=(step - start_step) / max(elapsed, 1e-9),
        learning_curve=curve)


def run(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, Any]:
  """Trains in `workdir` (resuming) and returns the run's summary."""
  trainer = Trainer(config, workdir)
  try:
    return trainer.train()
  finally:
    trainer.close()
