"""The runtime of `python -m i2a.train` in the embedded mode.

Data flow (docs/agents.md, "Data flow"): one process runs one `Actor`
(agents/acting.py) and one `Learner` (agents/learning.py), the same classes
that run as separate processes in the distributed mode. They alternate:
the actor pulls the newest weights and writes batch_size // num_envs
unrolls, the learner reads them as one batch, updates, and publishes its
weights. The alternation makes a run deterministic for a seed. Unrolls and
weights pass in-process by default (`TRANSPORTS`: an in-process unrolls
queue and an in-graph weight copy); transport 'reverb' runs a Reverb
server with the `unrolls` queue and the `variables` table instead, as the
distributed mode does, for the same data.

The run lives in a workdir: config.json / protocol.json (a different
config is refused on resume), identity.json (the envmodel export's
fingerprint: another export is refused on resume; its protocol must agree
with the run's, i2a/run/exports.py `check_export`; all checked before
anything is written), checkpoints/ (network, optimizer, learner
step, env-step counter, and the actor's state: environments, frame windows,
RNG; the last N kept), TensorBoard events (agent summaries at environment
steps: docs/agents.md, "TensorBoard") and metrics.csv, episodes.csv (each
training episode's return and length), eval.csv (evaluation
during training every config.eval_every env steps: i2a/run/evaluate.py
`TrainingEvaluation`), and images/learning_curve.png (episode return vs
environment steps) and, for an I2A, images/imagination.png (what it
imagines now). Running
again in the same workdir resumes from the newest complete checkpoint and
reproduces, update for update, the run that was not interrupted.

`LearnerLoop` is the learner's side of a run (budget, logs, checkpoints,
plots, resume), shared with the distributed learner (i2a/run/distributed.py,
`python -m i2a.launch`), which runs it without an actor in its process.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import pickle
import time
from concurrent import futures
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging

import envmodels
from envmodels import optimization
from agents import builder, learning
from agents.acting import Actor, Episode, imagine_quietly, unroll_signature
from agents.base import ActorCriticNetwork
from agents.variables import VariableClient, VariablePublisher
from agents import variables as variables_lib
from i2a import environments, io_utils, pictures, runs
from i2a.metrics import MetricsLog, read_column
from i2a.progress import Progress
from i2a.replay import tables
from i2a.run import exports

CHECKPOINTS = "checkpoints"
ACTOR_STATE = "actor-{step}.pkl"  # next to the TF checkpoint of that step
LEARNING_CURVE = "learning_curve.png"
IMAGINATION = "imagination.png"
# Fields a resumed run may change (budgets, cadence); configs/agents/common.py.
# Evaluation during training changes nothing of the training (agents/
# evaluation.py TrainingEvaluation), so its settings may change too.
RESUMABLE_FIELDS = ("env_steps", "log_every", "checkpoint_every",
                    "keep_checkpoints", "plot_every", "eval_episodes",
                    "eval_every", "eval_greedy")
# Fields added to the agents' configs since runs were first made, with the
# value that reproduces those runs exactly (i2a/runs.py): an old A2C run
# resumes with --config.loss.reward_clipping=none
# --config.network.head_hidden=0. I2A runs made before the context of jumpy
# models was spaced and rollout noise seeded have no such path (the
# network.reward_transform field is new to them and has no legacy value).
LEGACY_VALUES = {"loss.reward_clipping": "none", "network.head_hidden": 0,
                 "precision": "fp32", "allow_protocol_mismatch": False,
                 "overlap_acting": False}
# The embedded learner never waits longer than this for unrolls.
EMBEDDED_TIMEOUT_MS = 120_000


def check_config(config: ml_collections.ConfigDict) -> None:
  """ValueError for settings the embedded runtime cannot run."""
  for name in ("num_envs", "unroll_length", "batch_size", "queue_size",
               "log_every", "checkpoint_every", "keep_checkpoints",
               "plot_every", "context_length"):
    if int(config[name]) < 1:
      raise ValueError(f"config.{name} must be >= 1, given {config[name]}.")
  if int(config.get("eval_every", 0)) < 0:
    raise ValueError(f"config.eval_every must be >= 0 environment steps (0: "
                     f"no evaluation during training), given "
                     f"{config.eval_every}.")
  if int(config.get("eval_every", 0)) and int(config.eval_episodes) < 1:
    raise ValueError(f"config.eval_episodes must be >= 1 when "
                     f"config.eval_every > 0, given {config.eval_episodes}; "
                     "or turn evaluation during training off with "
                     "--config.eval_every=0.")
  if config.batch_size % config.num_envs:
    raise ValueError(
        f"config.batch_size ({config.batch_size}) must be a multiple of "
        f"config.num_envs ({config.num_envs}): each update reads "
        "batch_size // num_envs unrolls of every environment.")
  if config.queue_size < config.batch_size:
    raise ValueError(f"config.queue_size ({config.queue_size}) must hold a "
                     f"batch (config.batch_size = {config.batch_size}).")
  if (config.get("overlap_acting", False) and
      config.queue_size < 2 * config.batch_size):
    raise ValueError(
        f"config.overlap_acting acts the next batch while the learner "
        f"takes this one: config.queue_size ({config.queue_size}) must hold "
        f"two batches ({2 * config.batch_size}); raise it or turn "
        "overlap_acting off.")
  if config.queue_size % config.num_envs:
    raise ValueError(
        f"config.queue_size ({config.queue_size}) must be a multiple of "
        f"config.num_envs ({config.num_envs}): the Reverb `unrolls` queue "
        "holds whole unroll batches of an actor (unrolls_per_item).")


# The most bytes of unrolls the runtimes put into one item of the Reverb
# `unrolls` queue. Small unrolls cost per item (an append, a create_item, a
# chunk): an actor's whole unroll batch goes as one item, 0.3-0.5x the
# time of an item per unroll for batches up to 2.3 MB. Large ones cost per
# byte, and more as larger items (x0.9-1.2 at 3.9 MB, x1.4-3 at 31 MB: the
# learner's dataset no longer reads one item while the next is written):
# they are split (docs/performance.md, "Reverb writes").
MAX_ITEM_BYTES = 3 * 2**20


def unrolls_per_item(config: ml_collections.ConfigDict,
                     signature: Mapping[str, tf.TensorSpec]) -> int:
  """Unrolls per item of the Reverb `unrolls` queue (both modes): the
  largest divisor U of config.num_envs whose U unrolls (`signature`: one
  unroll's, agents/acting.py `unroll_signature`) fit in MAX_ITEM_BYTES,
  at least 1. An actor writes its unroll batch as num_envs / U items
  (agents/acting.py `write_unrolls`); the queue's capacity and the
  learner's batches are stated in unrolls (config.queue_size,
  config.batch_size: multiples of num_envs, `check_config`)."""
  unroll_bytes = sum(spec.shape.num_elements() * spec.dtype.size
                     for spec in signature.values())
  num_envs = int(config.num_envs)
  return max(u for u in range(1, num_envs + 1)
             if num_envs % u == 0 and (u == 1 or
                                       u * unroll_bytes <= MAX_ITEM_BYTES))


def unrolls_queue(config: ml_collections.ConfigDict,
                  network: ActorCriticNetwork,
                  observation_shape: Tuple[int, int, int], num_actions: int
                  ) -> Tuple[Dict[str, tf.TensorSpec], int]:
  """The Reverb `unrolls` table's item signature for `network`'s unrolls
  and its unrolls per item U (`unrolls_per_item`), as both modes build the
  table, write and read it."""
  def signature(per_item: int) -> Dict[str, tf.TensorSpec]:
    return unroll_signature(config.unroll_length,
                            len(network.window_offsets), observation_shape,
                            num_actions, network.side_input_spec(), per_item)
  per_item = unrolls_per_item(config, signature(1))
  return signature(per_item), per_item


def envmodel_seed(config: ml_collections.ConfigDict, role: str) -> int:
  """Seeds of the envmodel copies (stochastic models sample with them)."""
  return config.seed * 1_000_003 + {"learner": 1, "actor": 2, "eval": 3}[role]


def role_envmodel(config: ml_collections.ConfigDict,
                  protocol: environments.Protocol, role: str,
                  export_dir: str = "", seed_offset: int = 0
                  ) -> Optional[envmodels.EnvModel]:
  """The envmodel copy of `role` (learner, actor or eval): the export
  `export_dir` (default config.envmodel) loaded with the role's seed
  (`envmodel_seed`, + 1000 * seed_offset for the distributed mode's actor
  copies) and checked against the environment; None for a model-free run."""
  export_dir = export_dir or config.envmodel
  if not export_dir:
    return None
  return builder.load_envmodel(
      export_dir, protocol, environments.num_actions(protocol),
      seed=envmodel_seed(config, role) + 1_000 * seed_offset)


def role_network(config: ml_collections.ConfigDict,
                 protocol: environments.Protocol,
                 envmodel: Optional[envmodels.EnvModel]
                 ) -> ActorCriticNetwork:
  """The network of config.agent over `envmodel` (a `role_envmodel`), its
  variables created: what every role (learner, actor, evaluation) acts or
  learns with."""
  observation_shape = tuple(protocol.observation_shape)
  network = builder.build_network(config, environments.num_actions(protocol),
                                  observation_shape, envmodel)
  builder.create_variables(network, observation_shape)
  return network


# How the embedded actor and learner exchange unrolls and weights: 'local'
# (the default) hands the actor's unroll batches to the learner through an
# in-process queue and copies the published weights in-graph
# (learning.LocalUnrolls, variables.LocalVariables); 'reverb' goes through
# an embedded Reverb server's `unrolls` queue and signed `variables` table,
# as the distributed mode does. The same unrolls, weights and updates
# either way (tests/agents/test_training.py); 'local' skips the
# per-unroll items, serialisation and weight signing.
TRANSPORTS = ("local", "reverb")


class Trainer:
  """One training run in `workdir` (resumes what is there): the learner
  and actor and what passes between them (`transport`: in-process, or an
  embedded Reverb server), and the `loop` (LearnerLoop) that runs them to
  the budget and owns the counters, checkpoints and logs."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str,
               transport: str = "local"):
    if transport not in TRANSPORTS:
      raise ValueError(f"transport must be one of {TRANSPORTS}, given "
                       f"{transport!r}.")
    self.transport = transport
    check_config(config)
    builder.check_agent(config)
    self.config = config
    self.protocol = runs.protocol_from_config(config)
    self.num_actions = environments.num_actions(self.protocol)
    self.observation_shape = tuple(self.protocol.observation_shape)
    # The envmodel is loaded and checked before anything is written, so a
    # refused model leaves no workdir behind to block the corrected run.
    runs.use_precision(config)
    identity = {}
    if config.envmodel:
      identity[exports.ENVMODEL_IDENTITY] = exports.check_export(
          config, self.protocol)
    learner_model = role_envmodel(config, self.protocol, "learner")
    actor_model = role_envmodel(config, self.protocol, "actor")
    self.workdir = runs.prepare_workdir(workdir, config, self.protocol,
                                        ignore=RESUMABLE_FIELDS,
                                        legacy=LEGACY_VALUES,
                                        identity=identity)
    tf.random.set_seed(config.seed)
    self._exit = contextlib.ExitStack()
    try:
      self._build(learner_model, actor_model)
    except BaseException:
      self._exit.close()
      raise

  def _build(self, learner_model, actor_model) -> None:
    config = self.config
    network = role_network(config, self.protocol, learner_model)
    acting_network = role_network(config, self.protocol, actor_model)
    optimizer = learning.rmsprop(config.optimizer.learning_rate,
                                 config.optimizer.decay,
                                 config.optimizer.epsilon)
    loss_args = dict(
        discount=config.loss.discount, value_coef=config.loss.value_coef,
        entropy_coef=config.loss.entropy_coef,
        reward_clipping=config.loss.reward_clipping,
        clip_norm=config.optimizer.clip_norm)
    envs = environments.make_vector_env(self.protocol, config.num_envs)
    if self.transport == "local":
      self.server = None
      unrolls = learning.LocalUnrolls(config.queue_size)
      weights = variables_lib.LocalVariables(
          network.learnable_variables, acting_network.learnable_variables)
      self.learner = learning.Learner(
          network, unrolls, optimizer, publisher=weights,
          batch_size=config.batch_size, **loss_args)
      self.actor = Actor(acting_network, envs, config.unroll_length,
                         seed=config.seed, variable_client=weights,
                         sink=unrolls)
    else:
      self._build_reverb(network, acting_network, optimizer, loss_args, envs)
    self._exit.callback(self.actor.close)
    # Imported here: i2a/run/evaluate.py imports this module.
    from i2a.run import evaluate as evaluation  # pylint: disable=import-outside-toplevel
    self.loop = LearnerLoop(
        config, self.workdir, self.learner, actor=self.actor,
        evaluator=evaluation.training_evaluation(config, self.protocol,
                                                 network))
    self._exit.callback(self.loop.close)

  def _build_reverb(self, network: Any, acting_network: Any, optimizer: Any,
                    loss_args: Dict[str, Any], envs: Any) -> None:
    """The learner and actor of transport 'reverb': an embedded server."""
    config = self.config
    signature, per_item = unrolls_queue(config, network,
                                        self.observation_shape,
                                        self.num_actions)
    self.server = tables.start_server([
        tables.unrolls_table(signature,
                             max_size=config.queue_size // per_item),
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
                                timeout_ms=EMBEDDED_TIMEOUT_MS,
                                unrolls_per_item=per_item),
        optimizer, publisher=publisher, **loss_args)
    self.actor = Actor(
        acting_network, envs, config.unroll_length, seed=config.seed,
        client=client, unrolls_per_item=per_item,
        variable_client=VariableClient(client,
                                       acting_network.learnable_variables))

  def close(self) -> None:
    self._exit.close()

  def train(self) -> Dict[str, Any]:
    """Trains to config.env_steps (resuming); returns a summary."""
    return self.loop.train()


class LearnerLoop:
  """A learner's run to the budget: counters, checkpoints, logs and plots.

  Shared by both modes. Embedded (`Trainer`): `actor` is this process's
  actor; before each update it writes batch_size // num_envs unrolls, and
  its state is saved with every checkpoint (`actor-N.pkl`). Distributed
  (i2a/run/distributed.py): no actor here; actor processes fill the queue,
  `episodes()` returns the episodes they finished (read at each log), the
  env-step counter advances by what each update consumes (batch_size *
  unroll_length), and `should_stop()` ends the run early with a final log
  and checkpoint (a learner that waits for data when asked to stop is
  checkpointed by its process instead: i2a/run/distributed.py).
  """

  def __init__(self, config: ml_collections.ConfigDict, workdir: str,
               learner: learning.Learner, *, actor: Optional[Actor] = None,
               episodes: Optional[Callable[[], List[Episode]]] = None,
               extra_metrics: Optional[Callable[[], Dict[str, float]]] = None,
               evaluator: Optional[Callable[[], Any]] = None):
    """
    Args:
      config: the run's config (budget, cadence, batch).
      workdir: the prepared workdir (runs.prepare_workdir).
      learner: the learner; its checkpointables are saved.
      actor: the embedded actor (None in the distributed mode).
      episodes: returns newly finished episodes (distributed mode).
      extra_metrics: more columns for each logged row.
      evaluator: runs evaluation episodes of the learner's newest weights
        and returns their `evaluation.Episodes` (i2a/run/evaluate.py
        `training_evaluation`), every config.eval_every env steps and at
        the end of the budget; None: no evaluation during training.
    """
    self.config = config
    self.protocol = runs.protocol_from_config(config)
    self.action_names = environments.action_names(self.protocol)
    self.evaluator = evaluator
    # config.overlap_acting: the embedded actor acts the next update's
    # unrolls in this thread pool while the learner steps (`update`).
    self._overlap = (actor is not None and
                     bool(config.get("overlap_acting", False)))
    self._acting = (futures.ThreadPoolExecutor(1, "actor") if self._overlap
                    else None)
    self._acted_ahead = False  # the queue holds the next update's unrolls
    self.workdir = workdir
    self.learner = learner
    self.actor = actor
    self._drain_episodes = episodes
    self._extra_metrics = extra_metrics
    self.env_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 name="env_steps")
    self.episodes = tf.Variable(0, dtype=tf.int64, trainable=False,
                                name="episodes")
    self.checkpoint = tf.train.Checkpoint(
        env_steps=self.env_steps, episodes=self.episodes,
        **learner.checkpointables())
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self.checkpoint_dir,
        max_to_keep=config.keep_checkpoints)
    self.log = MetricsLog(workdir)

  @property
  def checkpoint_dir(self) -> str:
    return os.path.join(self.workdir, CHECKPOINTS)

  def close(self) -> None:
    if self._acting is not None:
      self._acting.shutdown(wait=True)

  def _act(self, pull: bool) -> List[Episode]:
    """The embedded actor's unrolls of one update (batch_size // num_envs);
    the episodes they finished."""
    finished: List[Episode] = []
    for _ in range(self.config.batch_size // self.config.num_envs):
      finished.extend(self.actor.unroll(pull=pull)[1])
    return finished

  def update(self) -> Tuple[Dict[str, Any], List[Episode]]:
    """One update: the learner's step, and the embedded actor's unrolls
    that feed it. Returns the step's metrics and the episodes the actor
    finished.

    Sequential (the default): the actor pulls the newest weights and acts
    the unrolls, then the learner steps on them (A2C's synchronous loop).
    With config.overlap_acting the actor acts the next update's unrolls
    in a thread while the learner steps on this update's, on the weights
    it pulled before that step: a policy lag of one update, as actors of
    the distributed runtime have, for both cores of a small machine busy
    at once. The actor's pull happens here, before the step starts, so
    which weights it acts on never depends on thread timing. No unrolls
    are acted ahead when the step ends at a checkpoint or at the budget,
    so a checkpoint never leaves acted but unlearned unrolls behind (a
    resume then continues exactly); a stop request between checkpoints
    drops the unrolls acted ahead (their env steps stay counted).
    """
    if self.actor is None:
      return self.learner.step(), []
    if not self._overlap:
      finished = self._act(pull=True)
      return self.learner.step(), finished
    finished = [] if self._acted_ahead else self._act(pull=True)
    self._acted_ahead = False
    step_after = int(self.learner.learner_step.numpy()) + 1
    ahead = (self.env_steps_done < self.config.env_steps and
             step_after % self.config.checkpoint_every != 0)
    if not ahead:
      return self.learner.step(), finished
    self.actor.update()  # the weights of the update before this one
    acting = self._acting.submit(self._act, False)
    try:
      metrics = self.learner.step()
    finally:
      ahead_finished = acting.result()  # re-raises the actor's error
    self._acted_ahead = True
    return metrics, finished + ahead_finished

  @property
  def budget_reached(self) -> bool:
    """Whether the run has learned from its env-step budget."""
    return self.env_steps_done >= self.config.env_steps

  @property
  def env_steps_done(self) -> int:
    """Environment steps so far (the embedded actor's, or consumed); with
    overlap_acting, not those acted ahead for the next update."""
    if self.actor is not None:
      ahead = (self.config.batch_size * self.config.unroll_length
               if self._acted_ahead else 0)
      return self.actor.env_steps - ahead
    return int(self.env_steps.numpy())

  def frames(self, env_steps: int) -> int:
    """Emulator frames in `env_steps` agent steps (protocol.action_repeat
    each; MiniPacman: 1)."""
    return env_steps * self.protocol.action_repeat

  def budget_line(self) -> str:
    """What config.env_steps counts, said once at the start of a run."""
    repeat = self.protocol.action_repeat
    line = (f"budget: config.env_steps={self.config.env_steps:,} agent "
            "(environment) steps over all environments")
    if repeat > 1:
      line += (f" = {self.frames(self.config.env_steps):,} emulator frames "
               f"(action_repeat {repeat}; papers count frames)")
    return line + ("; TensorBoard's x axis is env steps, its frames scalar "
                   "emulator frames")

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
    # A non-finite value never reaches a checkpoint, so a bad one can never
    # rotate the last good one out.
    optimization.check_finite(self.learner.network.variables, "checkpoint")
    if self.actor is not None:
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

  def _readable(self, path: str) -> Tuple[bool, Optional[Dict[str, Any]]]:
    """(complete and readable, the actor state if there is an actor)."""
    damage = runs.checkpoint_damage(path)
    if damage is None and self.actor is None:
      return True, None
    if damage is None:
      try:
        with open(self._actor_state_path(path), "rb") as f:
          return True, pickle.load(f)
      except Exception as e:  # pylint: disable=broad-except  (any damage)
        damage = f"actor state: {type(e).__name__}: {e}"
    logging.warning("checkpoint %s is incomplete or unreadable (%s)", path,
                    damage)
    return False, None

  def restore(self) -> int:
    """Restores the newest complete checkpoint; returns its learner step."""
    candidates = list(reversed(self.manager.checkpoints))
    for path in candidates:
      readable, actor_state = self._readable(path)
      if not readable:
        continue
      status = self.checkpoint.restore(path)
      status.assert_existing_objects_matched()
      # The optimizer's slots are created, and restored, at the first update.
      status.expect_partial()
      if self.actor is not None:
        self.actor.set_state(actor_state)
      step = int(self.learner.learner_step.numpy())
      logging.info("resumed from %s (learner step %d, %d env steps)", path,
                   step, self.env_steps_done)
      if path != candidates[0]:
        print(f"resumed from {path}: newer checkpoints were incomplete",
              flush=True)
      # TensorBoard's axis is environment steps (docs/agents.md).
      self.log.truncate_after(step, summary_step=self.env_steps_done)
      return step
    if candidates:
      if self.actor is not None and not any(
          os.path.exists(self._actor_state_path(p)) for p in candidates):
        raise ValueError(
            f"the checkpoints in {self.checkpoint_dir} hold no actor state "
            f"({ACTOR_STATE.format(step='N')}): the distributed learner "
            "(python -m i2a.launch) wrote them. Continue this run with "
            "python -m i2a.launch, or train in another --workdir.")
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
        title=f"{self.config.agent} on {self.config.protocol.env_id}")
    return path

  def draw_imagination(self, step: int) -> Optional[str]:
    """images/imagination.png (the newest) and TensorBoard `imagination`:
    what the acting I2A imagines from its first environment's current
    window. Embedded mode only (the distributed learner holds no
    environments); None for agents that imagine nothing. Draws no random
    numbers of the run (acting.imagine_quietly): resuming stays exact."""
    if self.actor is None:
      return None
    envs = self.actor.environments
    network = self.actor.network
    windows = self.actor.windows[:1]  # [1, k, H, W, C]
    imagined = imagine_quietly(network, windows,
                               None if envs is None else envs[:1])
    if imagined is None:
      return None
    path = os.path.join(self.workdir, "images", IMAGINATION)
    jump = network.model.spec.jump
    image = pictures.imagination_figure(
        path, [windows[0, -1]], imagined["frames"][0], imagined["rewards"][0],
        imagined["first_actions"], jump,
        title=f"{self.config.agent} at learner step {step}: imagination "
        "from environment 0 (its future is still unknown)",
        action_names=self.action_names)
    at = self.env_steps_done
    self.log.image(at, "imagination", image)
    self.log.animation(
        at, "imagination_animated", pictures.imagination_frames(
            [windows[0, -1]], imagined["frames"][0],
            imagined["first_actions"], jump, self.action_names),
        duration_ms=500, description=f"learner step {step}: the imagined "
        "rollouts from environment 0, one model step per frame")
    return path

  def evaluate(self, step: int) -> Optional[Dict[str, float]]:
    """Evaluation during training (self.evaluator) at learner step `step`:
    a row of eval.csv and `eval/...` scalars at the env step, and the first
    episode as the animation `eval/episode`. None without an evaluator."""
    if self.evaluator is None:
      return None
    result = self.evaluator()
    at = self.env_steps_done
    row = dict(result.summary(), env_steps=at, frames=self.frames(at))
    values = self.log.write(step, row, split="eval", summary_step=at)
    self.log.animation(
        at, "eval/episode", result.animation(self.action_names),
        duration_ms=80, description=f"the first evaluation episode at "
        f"learner step {step}")
    return values

  # -- The loop --------------------------------------------------------------

  def train(self, should_stop: Callable[[], bool] = lambda: False
            ) -> Dict[str, Any]:
    """Trains to config.env_steps (resuming) or until `should_stop()`.

    `should_stop()` is checked after each update: the update that sees it
    is logged, checkpointed and plotted as the last.
    """
    config = self.config
    start_step = self.restore()
    self.learner.publish()  # Actors start from the learner's weights.
    env_steps_per_update = config.batch_size * config.unroll_length
    progress = Progress(f"train {config.agent}", config.env_steps,
                        "env steps", initial=self.env_steps_done)
    print(self.budget_line(), flush=True)
    eval_every = int(config.get("eval_every", 0))
    recent_returns = collections.deque(maxlen=100)
    window: Dict[str, List[float]] = collections.defaultdict(list)
    episodes: List[Episode] = []
    started = time.monotonic()
    start_env_steps = self.env_steps_done
    interval_start, interval_env_steps = started, self.env_steps_done
    interval_learner_steps = start_step
    step = start_step

    def add_episodes(finished: List[Episode]) -> None:
      episodes.extend(finished)
      recent_returns.extend(e.episode_return for e in finished)
      self.episodes.assign_add(len(finished))

    # `should_stop()` is read once per update: the update that sees it is
    # the last, and is checkpointed (a second read could see a stop the
    # first missed and end the loop without the final checkpoint).
    final = self.budget_reached or should_stop()
    while not final:
      before = self.env_steps_done
      metrics, finished = self.update()
      add_episodes(finished)
      for key, value in metrics.items():
        window[key].append(value)
      if self.actor is None:
        self.env_steps.assign_add(env_steps_per_update)
      step = int(self.learner.learner_step.numpy())
      final = self.budget_reached or should_stop()
      if step % config.log_every == 0 or final:
        if self._drain_episodes is not None:
          add_episodes(self._drain_episodes())
        now = time.monotonic()
        elapsed = max(now - interval_start, 1e-9)
        row = {k: float(np.mean(v)) for k, v in window.items()}
        row.update(
            env_steps=self.env_steps_done,
            frames=self.frames(self.env_steps_done),
            episodes=int(self.episodes.numpy()),
            episode_return=(float(np.mean([e.episode_return
                                           for e in episodes]))
                            if episodes else math.nan),
            episode_length=(float(np.mean([e.length for e in episodes]))
                            if episodes else math.nan),
            env_steps_per_s=(self.env_steps_done - interval_env_steps)
            / elapsed,
            learner_steps_per_s=(step - interval_learner_steps) / elapsed)
        if self._extra_metrics is not None:
          row.update(self._extra_metrics())
        self.log.write(step, row, summary_step=self.env_steps_done)
        self.log.write_episodes(step, self.env_steps_done, episodes)
        extras = dict(step=step,
                      learner_steps_per_s=row["learner_steps_per_s"])
        if self.protocol.action_repeat > 1:
          extras["frames"] = row["frames"]
        if recent_returns:
          extras["return"] = float(np.mean(recent_returns))
        progress.update(self.env_steps_done - progress.done, force=True,
                        **extras)
        window.clear()
        episodes = []
        interval_start, interval_env_steps = now, self.env_steps_done
        interval_learner_steps = step
      # Every eval_every env steps (when an update crosses a multiple) and
      # at the budget's end; rows after a resume's checkpoint are dropped
      # (MetricsLog.truncate_after) and computed again, identically.
      if eval_every and (
          self.env_steps_done // eval_every > before // eval_every or
          self.env_steps_done >= config.env_steps):
        self.evaluate(step)
      if step % config.checkpoint_every == 0 or final:
        self.save()
      if step % config.plot_every == 0 or final:
        self.draw_imagination(step)
        self.log.flush()
        self.plot_learning_curve()
    self.log.flush()
    if step == start_step and not should_stop():
      print(f"training already reached its budget ({self.env_steps_done:,} "
            f"of {config.env_steps:,} env steps) at learner step {step}",
            flush=True)
    progress.close()
    elapsed = time.monotonic() - started
    curve = self.plot_learning_curve()
    return dict(
        workdir=self.workdir, learner_steps=step,
        env_steps=self.env_steps_done, episodes=int(self.episodes.numpy()),
        recent_return=(float(np.mean(recent_returns)) if recent_returns
                       else math.nan),
        env_steps_per_s=(self.env_steps_done - start_env_steps)
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
