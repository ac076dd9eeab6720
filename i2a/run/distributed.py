"""The distributed mode's roles: Reverb server, actor and learner processes.

Data flow (docs/agents.md, "Data flow"; docs/distributed.md): the server process
holds the tables; actor processes (`run_actor`, rank R) step their own
environments with the same `Actor` as the embedded mode, write unrolls into
the `unrolls` queue and the episodes they finish into `episodes`, and pull
the learner's weights from `variables` (authenticated: agents/variables.py);
the learner process (`run_learner`) runs the embedded mode's learner loop
(i2a/run/train.py `LearnerLoop`) without an actor: it owns the workdir,
checkpoints and resumes exactly as `python -m i2a.train` does (minus the
actor state: actors are stateless and reseed when they start).

Rate limiting: `unrolls` is a bounded queue (config.queue_size): actors
block when it is full, the learner blocks when it is empty. The time the
learner waits is measured, so the logs say how busy it is
(`learner_utilisation`, `learner_data_wait`).

Stopping (SIGTERM): the learner trains in a worker thread while the main
thread takes the signals. An update in progress finishes and the loop
writes its final checkpoint; a learner waiting for data is parked there
(between updates) and the main thread checkpoints it, as it does after
`stop_grace_s` for a learner blocked publishing to a server that is gone
(a Reverb client then blocks for ever). Either way the last update is
saved.

Losing the server (`ServerWatch`): actors and learner look at their server
every second; when it stops answering they retry with exponential backoff
(counted and logged) for up to `connect_timeout_s`, while Reverb's own
clients wait and carry on once it answers again on the same address. A
server that comes back restarted has empty tables: the learner counts the
unrolls its queue held as lost (WORKDIR/server.json) and republishes its
weights, so actors (blocked waiting for weights) act again. A server that
does not come back ends the role with EXIT_SERVER_LOST (the learner after
a checkpoint); its supervisor decides what next.

`python -m i2a.launch` runs these roles as processes (i2a/run/launch.py)
or as Ray actors (i2a/run/ray_backend.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import ml_collections
import numpy as np
import reverb
import tensorflow as tf
import tree
from absl import logging

from agents import builder, learning
from agents import variables as variables_lib
from agents.acting import Actor, Episode
from agents.base import ActorCriticNetwork
from agents.variables import VariableClient, VariablePublisher
from i2a import environments, io_utils, runs
from i2a.progress import Progress
from i2a.replay import tables
from i2a.run import evaluate as evaluation
from i2a.run import exports
from i2a.run import train as training

EPISODES = "episodes"  # finished episodes, actors -> learner (for the logs)
EPISODES_MAX_SIZE = 10_000
CONNECT_TIMEOUT_S = 120.0
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 8.0  # reconnection backoff
EXIT_SERVER_LOST = 75  # a role whose server did not come back (EX_TEMPFAIL)
SERVER_FILE = "server.json"  # the learner's count of server losses
LEARNER_FILE = "learner.json"  # the learner's generation, host and pid


# -- Tables --------------------------------------------------------------------

def episodes_signature() -> Dict[str, tf.TensorSpec]:
  return {
      "episode_return": tf.TensorSpec([], tf.float32, "episode_return"),
      "episode_length": tf.TensorSpec([], tf.int32, "episode_length"),
      "terminated": tf.TensorSpec([], tf.bool, "terminated"),
  }


def episodes_table(max_size: int = EPISODES_MAX_SIZE) -> reverb.Table:
  """Finished episodes: each read once; never blocks a writer (the oldest go)."""
  return reverb.Table(
      name=EPISODES, sampler=reverb.selectors.Fifo(),
      remover=reverb.selectors.Fifo(), max_size=max_size,
      max_times_sampled=1, rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=episodes_signature())


class _Setup:
  """What every role derives from the config: protocol, shapes, networks."""

  def __init__(self, config: ml_collections.ConfigDict):
    training.check_config(config)
    builder.check_agent(config)
    runs.use_precision(config)  # every role computes in it
    self.config = config
    self.protocol = runs.protocol_from_config(config)
    self.num_actions = environments.num_actions(self.protocol)
    self.observation_shape = tuple(self.protocol.observation_shape)

  def identity(self) -> Dict[str, runs.Identity]:
    """The workdir's identity record of this run: the envmodel export's
    fingerprint, after checking its protocol (exports.check_export)."""
    if not self.config.envmodel:
      return {}
    return {exports.ENVMODEL_IDENTITY: exports.check_export(self.config,
                                                            self.protocol)}

  def network(self, role: str, seed_offset: int = 0) -> ActorCriticNetwork:
    """The network with its variables (role: learner or actor), over the
    role's envmodel copy (the embedded trainer's `role_envmodel`; actor i's
    seed offset by i)."""
    model = training.role_envmodel(self.config, self.protocol, role,
                                   seed_offset=seed_offset)
    return training.role_network(self.config, self.protocol, model)

  def unrolls_queue(self, network: ActorCriticNetwork
                    ) -> Tuple[Dict[str, tf.TensorSpec], int]:
    """The `unrolls` table's signature and unrolls per item
    (training.unrolls_queue)."""
    return training.unrolls_queue(self.config, network,
                                  self.observation_shape, self.num_actions)

  def unrolls_per_item(self, network: ActorCriticNetwork) -> int:
    return self.unrolls_queue(network)[1]

  def signatures(self, network: ActorCriticNetwork) -> Dict[str, Any]:
    return {
        tables.UNROLLS: self.unrolls_queue(network)[0],
        tables.VARIABLES: variables_lib.signature(
            network.learnable_variables),
        EPISODES: episodes_signature(),
    }


def server_tables(config: ml_collections.ConfigDict) -> List[reverb.Table]:
  """The tables of the distributed mode's server for `config`."""
  setup = _Setup(config)
  network = setup.network("learner")
  signatures = setup.signatures(network)
  return [
      tables.unrolls_table(
          signatures[tables.UNROLLS],
          max_size=config.queue_size // setup.unrolls_per_item(network)),
      tables.variables_table(signatures[tables.VARIABLES]),
      episodes_table(),
  ]


def serve(config: ml_collections.ConfigDict, port: int,
          stop: threading.Event) -> None:
  """Runs the server on `port` (all interfaces) until `stop` is set."""
  tables_ = server_tables(config)
  items = next(t.info.max_size for t in tables_ if t.name == tables.UNROLLS)
  server = tables.start_server(tables_, port=port)
  print(f"Reverb server listening on port {server.port} (all interfaces, no "
        f"authentication: docs/distributed.md); `{tables.UNROLLS}` queue of "
        f"{config.queue_size} unrolls ({items} items of "
        f"{config.queue_size // items})", flush=True)
  try:
    while not stop.wait(0.5):
      pass
  finally:
    server.stop()


def _leaves(structure) -> List[Tuple[Tuple[int, ...], str]]:
  return [(tuple(s.shape.as_list()), tf.as_dtype(s.dtype).name)
          for s in tree.flatten(structure)]


def check_server_tables(client: reverb.Client, address: str,
                        expected: Dict[str, Any]) -> None:
  """ValueError unless the server has these tables with these signatures."""
  info = client.server_info(timeout=30)
  for name, signature in expected.items():
    if name not in info:
      raise ValueError(
          f"the Reverb server at {address} has no table {name!r} (it has "
          f"{sorted(info)}): start it with python -m i2a.launch "
          "--role=server and the same --config.")
    theirs = info[name].signature
    if theirs is None or _leaves(theirs) != _leaves(signature):
      raise ValueError(
          f"the Reverb server at {address} holds a {name!r} table made for "
          f"another config: {_leaves(theirs) if theirs else None} there, "
          f"{_leaves(signature)} here. Start the server, the actors and the "
          "learner with the same --config.")


def backoff_s(attempt: int, first_s: float = RETRY_FIRST_S,
              max_s: float = RETRY_MAX_S) -> float:
  """The wait before retry `attempt` (0, 1, ...): first_s doubling to max_s."""
  return min(first_s * 2.0 ** min(attempt, 30), max_s)


def connect(address: str, timeout_s: float = CONNECT_TIMEOUT_S,
            stop: Optional[threading.Event] = None) -> reverb.Client:
  """tables.connect, retried with backoff until `timeout_s` (the server may
  start later)."""
  deadline = time.monotonic() + timeout_s
  attempt = 0
  while True:
    try:
      return tables.connect(address, timeout_s=5)
    except ConnectionError:
      if time.monotonic() > deadline or (stop is not None and stop.is_set()):
        raise
      logging.info("waiting for the Reverb server at %s (attempt %d)",
                   address, attempt + 1)
      time.sleep(backoff_s(attempt))
      attempt += 1


class ServerWatch:
  """A role's view of its Reverb server: losses, reconnections, restarts.

  `check()` (called every second or so by the role) asks the server for its
  tables' info (`server_info`, with a timeout: it never blocks for ever).
  When the server stops answering it is *lost*: the watch then retries
  with exponential backoff (`backoff_s`), counting and logging each
  attempt, until it answers again or `give_up_after_s` has passed
  (`check()` then returns False: the role ends and its supervisor
  restarts it). Reverb's own clients (the actors' writers, the learner's
  dataset) block while the server is gone and carry on once it answers on
  the same address.

  A server that answers with fresh tables (the `unrolls` insert count went
  down, or the weights it held are gone) was *restarted*: the unrolls the
  old one held are gone. Their number is the queue's size at the last
  check (a lower bound: that check is one interval of the role's checks
  old), counted in `unrolls_lost`: in unrolls, each of the queue's items
  holding `unrolls_per_item` (training.unrolls_per_item). `on_restart()` is
  then called (the learner republishes its weights).
  """

  def __init__(self, client: reverb.Client, address: str, name: str, *,
               give_up_after_s: float = CONNECT_TIMEOUT_S,
               on_restart: Optional[Callable[[], None]] = None,
               timeout_s: int = 2, unrolls_per_item: int = 1):
    self._client = client
    self._unrolls_per_item = unrolls_per_item
    self.address = address
    self._name = name
    self._give_up_after_s = give_up_after_s
    self._on_restart = on_restart
    self._timeout_s = timeout_s
    self.losses = 0  # times the server stopped answering
    self.restarts = 0  # times it came back with fresh tables
    self.attempts = 0  # failed reconnection attempts, all losses together
    self.unrolls_lost = 0  # in the queue of a server that restarted
    self.lost_since: Optional[float] = None  # None: the server answers
    self._attempt = 0  # of the current loss
    self._next_attempt = 0.0
    self._queue_size = 0
    self._inserts = 0
    self._published = False  # the `variables` table held weights

  @property
  def up(self) -> bool:
    return self.lost_since is None

  def counts(self) -> Dict[str, int]:
    return dict(server_losses=self.losses, server_restarts=self.restarts,
                reconnect_attempts=self.attempts,
                unrolls_lost=self.unrolls_lost)

  def _info(self) -> Optional[Any]:
    try:
      return self._client.server_info(timeout=self._timeout_s)
    except (reverb.errors.DeadlineExceededError, tf.errors.OpError,
            RuntimeError, ConnectionError):
      return None

  def check(self) -> bool:
    """One look at the server (or a retry if it is lost, when due); False
    once it has been lost for longer than `give_up_after_s`."""
    now = time.monotonic()
    if not self.up and now < self._next_attempt:
      return now - self.lost_since <= self._give_up_after_s
    info = self._info()
    if info is None:
      if self.up:
        self.losses += 1
        self.lost_since, self._attempt = now, 0
        print(f"{self._name}: lost the Reverb server at {self.address} (its "
              f"queue held {self._queue_size} unrolls at the last check); "
              f"reconnecting with backoff for up to "
              f"{self._give_up_after_s:g}s", flush=True)
      else:
        self.attempts += 1
        self._attempt += 1
        print(f"{self._name}: reconnection attempt {self._attempt} to the "
              f"Reverb server at {self.address} failed "
              f"({now - self.lost_since:.0f}s since it was lost)", flush=True)
      self._next_attempt = now + backoff_s(self._attempt)
      return now - self.lost_since <= self._give_up_after_s
    self._seen(info, now)
    return True

  def _seen(self, info, now: float) -> None:
    unrolls = info.get(tables.UNROLLS)
    inserts = (unrolls.rate_limiter_info.insert_stats.completed
               if unrolls is not None else 0)
    variables = info.get(tables.VARIABLES)
    published = variables is not None and variables.current_size > 0
    # A fresh server: fewer inserts than seen, or its weights gone.
    restarted = inserts < self._inserts or (self._published and not published)
    if not self.up:
      print(f"{self._name}: reconnected to the Reverb server at "
            f"{self.address} after {self._attempt} attempts, "
            f"{now - self.lost_since:.1f}s", flush=True)
      self.lost_since = None
    if restarted:
      self.restarts += 1
      self.unrolls_lost += self._queue_size
      print(f"{self._name}: the Reverb server was restarted: "
            f"{self._queue_size} unrolls lost with its queue "
            f"({self.unrolls_lost} in all over {self.restarts} restarts)",
            flush=True)
    self._inserts, self._published = inserts, published
    self._queue_size = (unrolls.current_size * self._unrolls_per_item
                        if unrolls is not None else 0)  # in unrolls
    if restarted and self._on_restart is not None:
      self._on_restart()


def watch_server(watch: ServerWatch, stop: threading.Event,
                 interval_s: float = 1.0, exit_code: int = 0) -> threading.Thread:
  """`watch.check()` every `interval_s` in a daemon thread; a server lost
  for good (check() False) ends the process with `exit_code` (its
  supervisor restarts it: Reverb calls would block for ever)."""

  def loop():
    while not stop.wait(interval_s):
      if not watch.check():
        print(f"the Reverb server at {watch.address} did not come back: "
              f"giving up ({watch.counts()})", flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)  # pylint: disable=protected-access

  thread = threading.Thread(target=loop, name="server-watch", daemon=True)
  thread.start()
  return thread


# -- Episodes, actors -> learner -------------------------------------------------

class EpisodeWriter:
  """An actor's finished episodes into the `episodes` table."""

  def __init__(self, client: reverb.Client):
    self._writer = client.trajectory_writer(num_keep_alive_refs=1)

  def write(self, episodes: List[Episode]) -> None:
    for episode in episodes:
      self._writer.append({
          "episode_return": np.float32(episode.episode_return),
          "episode_length": np.int32(episode.length),
          "terminated": np.bool_(episode.terminated)})
      self._writer.create_item(
          EPISODES, priority=1.0,
          trajectory={k: c[-1] for k, c in self._writer.history.items()})
    if episodes:
      self._writer.flush()

  def close(self) -> None:
    self._writer.close()


def drain_episodes(client: reverb.Client,
                   timeout_s: int = 30) -> List[Episode]:
  """Every episode waiting in the `episodes` table (each is read once)."""
  size = client.server_info(timeout=timeout_s)[EPISODES].current_size
  if not size:
    return []
  names = sorted(episodes_signature())  # the flat order of an item
  episodes = []
  for sample in client.sample(EPISODES, num_samples=size,
                              emit_timesteps=False):
    item = dict(zip(names, sample.data))
    episodes.append(Episode(float(item["episode_return"]),
                            int(item["episode_length"]),
                            bool(item["terminated"])))
  return episodes


# -- Stopping ------------------------------------------------------------------

def stop_on_signals(stop: threading.Event, hurry_after_s: float = 2.0) -> None:
  """SIGINT and SIGTERM set `stop`; another one `hurry_after_s` later ends
  the process at once.

  (Signals closer together count as one: the kernel can deliver a dying
  launcher's PR_SET_PDEATHSIG more than once, as its threads go.)
  """
  first: List[float] = []

  def handler(signum, frame):
    del frame
    now = time.monotonic()
    if first and now - first[0] >= hurry_after_s:
      signal.signal(signum, signal.SIG_DFL)
      os.kill(os.getpid(), signum)
    if not first:
      first.append(now)
      logging.info("signal %d: stopping", signum)
    stop.set()

  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, handler)


def call_within(function, timeout_s: float) -> bool:
  """Runs `function` in a daemon thread; False if it did not return in time.

  For Reverb calls that block for ever once their server is gone.
  """
  worker = threading.Thread(target=function, daemon=True)
  worker.start()
  worker.join(timeout_s)
  return not worker.is_alive()


# -- Actor -----------------------------------------------------------------------

def actor_seed(config: ml_collections.ConfigDict, rank: int) -> int:
  """Actor `rank`'s seed: its env i is seeded actor_seed + i, disjoint ranks."""
  return config.seed + rank * config.num_envs


def wait_for_weights(variable_client: VariableClient,
                     stop: threading.Event, retry_s: float = 1.0) -> None:
  """Blocks until the client holds authentic weights (or `stop`)."""
  while not stop.is_set():
    if variable_client.update() or variable_client.learner_step >= 0:
      return
    time.sleep(retry_s)  # Refused: wait for the learner's next publish.


def run_actor(config: ml_collections.ConfigDict, address: str, rank: int,
              key: bytes, stop: Optional[threading.Event] = None,
              log_every_s: float = 10.0,
              connect_timeout_s: float = CONNECT_TIMEOUT_S) -> Dict[str, Any]:
  """Acts until `stop` (or for ever): weights in, unrolls and episodes out."""
  stop = stop or threading.Event()
  setup = _Setup(config)
  seed = actor_seed(config, rank)
  tf.random.set_seed(seed)
  network = setup.network("actor", seed_offset=rank)
  client = connect(address, connect_timeout_s, stop)
  check_server_tables(client, address, setup.signatures(network))
  per_item = setup.unrolls_per_item(network)
  watch = ServerWatch(client, address, f"actor {rank}",
                      give_up_after_s=connect_timeout_s,
                      unrolls_per_item=per_item)
  watch_server(watch, stop, exit_code=EXIT_SERVER_LOST)
  variable_client = VariableClient(client, network.learnable_variables,
                                   key=key)
  actor = Actor(network,
                environments.make_vector_env(setup.protocol, config.num_envs),
                config.unroll_length, seed=seed, client=client,
                variable_client=variable_client, unrolls_per_item=per_item)
  episodes = EpisodeWriter(client)
  print(f"actor {rank}: seed {seed}, {config.num_envs} envs, waiting for "
        f"the learner's weights at {address}", flush=True)
  wait_for_weights(variable_client, stop)
  progress = Progress(f"actor {rank}", None, "env steps",
                      interval_s=log_every_s)
  returns: List[float] = []
  try:
    while not stop.is_set():
      _, finished = actor.unroll()
      episodes.write(finished)
      returns = (returns + [e.episode_return for e in finished])[-100:]
      extras = dict(generation=variable_client.generation,
                    weights_step=variable_client.learner_step,
                    refusals=variable_client.refusals,
                    server_losses=watch.losses)
      if returns:
        extras["return"] = float(np.mean(returns))
      progress.update(config.num_envs * config.unroll_length, **extras)
  finally:
    episodes.close()
    actor.close()
  return dict(env_steps=actor.env_steps, refusals=variable_client.refusals,
              **watch.counts())


# -- Learner -----------------------------------------------------------------------

class LearnerTiming:
  """Where the learner's time goes: waiting for data or updating."""

  def __init__(self):
    self._lock = threading.Lock()
    self.wait_s = 0.0  # in the dataset, waiting for unrolls
    self.step_s = 0.0  # in Learner.step (update + publish + the wait)
    self.started = time.monotonic()
    self._last = (self.started, 0.0, 0.0)

  def add_wait(self, seconds: float) -> None:
    with self._lock:
      self.wait_s += seconds

  def add_step(self, seconds: float) -> None:
    with self._lock:
      self.step_s += seconds

  def interval(self) -> Dict[str, float]:
    """Fractions of the wall time since the last call (logged columns)."""
    with self._lock:
      now, wait_s, step_s = time.monotonic(), self.wait_s, self.step_s
    last_time, last_wait, last_step = self._last
    self._last = (now, wait_s, step_s)
    wall = max(now - last_time, 1e-9)
    wait = wait_s - last_wait
    return dict(learner_utilisation=max(step_s - last_step - wait, 0.0) / wall,
                learner_data_wait=wait / wall)

  def totals(self) -> Dict[str, float]:
    with self._lock:
      wall = max(time.monotonic() - self.started, 1e-9)
      return dict(wall_s=wall, update_s=max(self.step_s - self.wait_s, 0.0),
                  data_wait_s=self.wait_s)


class BlockingCalls:
  """The learner's Reverb calls that can block for ever: data, publishing.

  A Reverb client whose server is gone blocks for ever. In both calls the
  learner is between updates (waiting for the next batch, or publishing
  the update just made), so another thread can checkpoint it: inside
  `held_if_blocked` the blocked call cannot return.
  """

  DATA, PUBLISH = "data", "publish"

  def __init__(self, timing: LearnerTiming):
    self._timing = timing
    self._lock = threading.Lock()
    self._since: Dict[str, float] = {}

  @contextlib.contextmanager
  def blocking(self, what: str) -> Iterator[None]:
    with self._lock:
      self._since[what] = time.monotonic()
    try:
      yield
    finally:
      with self._lock:  # Held by `held_if_blocked`: the call stays here.
        elapsed = time.monotonic() - self._since.pop(what)
      if what == self.DATA:
        self._timing.add_wait(elapsed)

  def blocked_s(self, what: str) -> Optional[float]:
    """How long the current `what` call has lasted; None if none."""
    with self._lock:
      since = self._since.get(what)
    return None if since is None else time.monotonic() - since

  @contextlib.contextmanager
  def held_if_blocked(self, kinds: Tuple[str, ...] = (DATA, PUBLISH)
                      ) -> Iterator[List[str]]:
    """Yields the `kinds` of calls the learner is blocked in (it stays)."""
    with self._lock:
      yield [what for what in kinds if what in self._since]


class LearnerBatches:
  """Batches of unrolls (learning.unroll_dataset) whose waits are measured.

  The learner asks for a batch, this waits for it as a
  `calls.blocking(DATA)` (the dataset runs only when asked: tf.data would
  prefetch one ahead and hide the learner's waits). Once `stop` is set it
  hands out no more batches: it parks the learner in that wait, between
  updates, where its process checkpoints it and ends
  (`DistributedLearner.checkpoint_if_blocked`).
  """

  def __init__(self, address: str, batch_size: int, stop: threading.Event,
               calls: BlockingCalls, unrolls_per_item: int = 1):
    self._stop = stop
    self._calls = calls
    self._unrolls = learning.unroll_dataset(
        address, batch_size, unrolls_per_item=unrolls_per_item)
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    self.dataset = tf.data.Dataset.from_generator(
        self._generate, output_signature=self._unrolls.element_spec
    ).with_options(options)

  def _park_if_stopped(self) -> None:
    if self._stop.is_set():
      threading.Event().wait()  # Until the process ends.

  def _generate(self):
    with self._calls.blocking(BlockingCalls.DATA):
      iterator = iter(self._unrolls)
      self._park_if_stopped()
    while True:
      with self._calls.blocking(BlockingCalls.DATA):
        batch = next(iterator)
        self._park_if_stopped()
      yield tree.map_structure(lambda t: t.numpy(), batch)


class GuardedPublisher:
  """A VariablePublisher whose publish is a `calls.blocking(PUBLISH)`."""

  def __init__(self, publisher: VariablePublisher, calls: BlockingCalls):
    self.publisher = publisher
    self._calls = calls

  def publish(self, step: int) -> None:
    with self._calls.blocking(BlockingCalls.PUBLISH):
      self.publisher.publish(step)

  def close(self) -> None:
    self.publisher.close()


def next_generation(workdir: str) -> int:
  """A generation larger than every earlier learner's of this workdir.

  Stored in WORKDIR/learner.json before the first publish; the wall clock
  in nanoseconds keeps it growing even if the workdir was wiped.
  """
  path = os.path.join(workdir, LEARNER_FILE)
  previous = 0
  if os.path.exists(path):
    try:
      previous = int(io_utils.read_json(path)["generation"])
    except (ValueError, KeyError, TypeError):
      logging.warning("%s is unreadable: starting a new generation", path)
  generation = max(previous + 1, time.time_ns())
  io_utils.atomic_write_json(path, dict(
      generation=generation, host=socket.gethostname(), pid=os.getpid(),
      started=time.strftime("%Y-%m-%dT%H:%M:%S")))
  return generation


def check_learner(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Every check the learner makes before it writes into `workdir` (config,
  envmodel export and its protocol, environment, workdir compatibility),
  writing nothing: `python -m i2a.launch` runs it (--role=check) before the
  launcher writes logs/ into the workdir. ValueError says what is wrong."""
  setup = _Setup(config)
  identity = setup.identity()
  setup.network("learner")
  runs.check_workdir(workdir, config, setup.protocol,
                     ignore=training.RESUMABLE_FIELDS,
                     legacy=training.LEGACY_VALUES, identity=identity)


_WATCH_FIELDS = dict(server_losses="losses", server_restarts="restarts",
                     reconnect_attempts="attempts",
                     unrolls_lost="unrolls_lost")


class DistributedLearner:
  """The learner process's parts: network, Reverb, LearnerLoop (no actor)."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str,
               address: str, key: bytes, stop: threading.Event, *,
               connect_timeout_s: float = CONNECT_TIMEOUT_S):
    self._stop = stop
    setup = _Setup(config)
    tf.random.set_seed(config.seed)
    # Built (its envmodel loaded and checked) before the workdir is written.
    identity = setup.identity()
    network = setup.network("learner")
    self.workdir = runs.prepare_workdir(workdir, config, setup.protocol,
                                        ignore=training.RESUMABLE_FIELDS,
                                        legacy=training.LEGACY_VALUES,
                                        identity=identity)
    self.client = connect(address, connect_timeout_s, stop)
    check_server_tables(self.client, address, setup.signatures(network))
    per_item = setup.unrolls_per_item(network)
    self.generation = next_generation(self.workdir)
    self.watch = ServerWatch(self.client, address, "learner",
                             give_up_after_s=connect_timeout_s,
                             on_restart=self._republish,
                             unrolls_per_item=per_item)
    self._server_file = os.path.join(self.workdir, SERVER_FILE)
    if os.path.exists(self._server_file):  # an earlier learner's counts
      for name, value in io_utils.read_json(self._server_file).items():
        if name in self.watch.counts():
          setattr(self.watch, _WATCH_FIELDS[name], int(value))
    self.timing = LearnerTiming()
    self.calls = BlockingCalls(self.timing)
    self.publisher = GuardedPublisher(VariablePublisher(
        self.client, network.learnable_variables, key=key,
        generation=self.generation), self.calls)
    self.batches = LearnerBatches(address, config.batch_size, stop,
                                  self.calls, per_item)
    self.learner = learning.Learner(
        network, self.batches.dataset,
        learning.rmsprop(config.optimizer.learning_rate,
                         config.optimizer.decay, config.optimizer.epsilon),
        discount=config.loss.discount, value_coef=config.loss.value_coef,
        entropy_coef=config.loss.entropy_coef,
        reward_clipping=config.loss.reward_clipping,
        clip_norm=config.optimizer.clip_norm, publisher=self.publisher,
        logger=lambda step, metrics: self.timing.add_step(
            self.learner.last_step_time_s))
    # Evaluation during training runs here, in the learner's process: the
    # learner waits for it (the actors go on filling the queue).
    self.loop = training.LearnerLoop(
        config, self.workdir, self.learner, episodes=self._episodes,
        extra_metrics=self.timing.interval,
        evaluator=evaluation.training_evaluation(config, setup.protocol,
                                                 network))
    print(f"learner: generation {self.generation}, workdir {self.workdir}, "
          f"server {address}", flush=True)

  def check_server(self) -> bool:
    """The learner's `ServerWatch.check()`; its counts into
    WORKDIR/server.json when they change."""
    before = self.watch.counts()
    alive = self.watch.check()
    if self.watch.counts() != before:
      io_utils.atomic_write_json(self._server_file, dict(
          self.watch.counts(), address=self.watch.address))
    return alive

  def _republish(self) -> None:
    """After a server restart: the weights again, so actors can act.

    A learner waiting for data is held there (between updates: its
    variables do not move) while this thread publishes; one that is
    updating publishes when its update ends.
    """
    with self.calls.held_if_blocked((BlockingCalls.DATA,)) as blocked:
      if blocked:
        step = self.learner_step
        self.publisher.publisher.publish(step)
        print(f"learner: republished the weights of learner step {step} to "
              "the restarted Reverb server", flush=True)

  def _episodes(self) -> List[Episode]:
    if self._stop.is_set():
      return []  # Their server may be gone; they are only for the logs.
    try:
      return drain_episodes(self.client, timeout_s=5)
    except (reverb.errors.DeadlineExceededError, tf.errors.OpError,
            RuntimeError) as e:
      logging.warning("could not read the actors' episodes (%s)", e)
      return []

  @property
  def learner_step(self) -> int:
    return int(self.learner.learner_step.numpy())

  def train(self) -> Dict[str, Any]:
    """Trains to config.env_steps or until `stop` (a final checkpoint)."""
    summary = self.loop.train(should_stop=self._stop.is_set)
    summary.update(self.timing.totals(), generation=self.generation,
                   stopped=self._stop.is_set(), **self.watch.counts())
    return summary

  def checkpoint_if_blocked(self, kinds: Tuple[str, ...] = (
      BlockingCalls.DATA, BlockingCalls.PUBLISH), exit_code: int = 0) -> bool:
    """If the learner is blocked in one of `kinds` of Reverb calls:
    checkpoints it and ends the process.

    Returns False (and does nothing) if it is not blocked so.
    """
    with self.calls.held_if_blocked(kinds) as blocked:
      if not blocked:
        return False
      step = self.learner_step
      # What the updates so far consumed (a step that is publishing has not
      # been counted by the loop yet).
      config = self.loop.config
      self.loop.env_steps.assign(step * config.batch_size *
                                 config.unroll_length)
      latest = self.loop.manager.latest_checkpoint
      if latest is None or int(latest.rsplit("-", 1)[-1]) != step:
        self.loop.save()
      self.loop.log.flush()
      print(f"learner stopped at learner step {step} "
            f"({int(self.loop.env_steps.numpy()):,} env steps), blocked "
            f"{' and '.join(blocked)}; checkpoint written", flush=True)
      sys.stderr.flush()
      os._exit(exit_code)  # pylint: disable=protected-access  (see above)

  def close(self) -> None:
    self.publisher.close()


def run_learner(config: ml_collections.ConfigDict, workdir: str,
                address: str, key: bytes,
                stop: Optional[threading.Event] = None, *,
                connect_timeout_s: float = CONNECT_TIMEOUT_S,
                stop_grace_s: float = 10.0,
                warn_after_s: float = 60.0,
                check_server_every_s: float = 1.0) -> Dict[str, Any]:
  """The learner process: trains until the budget or `stop`.

  Resumes from the workdir's newest complete checkpoint and writes a final
  one when stopped. Training runs in a worker thread; this (main) thread
  takes the signals and warns when no data comes for `warn_after_s`. After
  a stop request it checkpoints a learner parked waiting for data, and one
  still blocked publishing `stop_grace_s` later, and ends the process
  itself (module docstring). Every `check_server_every_s` it looks at the
  Reverb server (`ServerWatch`): after a restart it republishes the
  weights; a server lost for longer than `connect_timeout_s` makes it
  checkpoint where it is blocked and exit with EXIT_SERVER_LOST. Otherwise returns the loop's summary plus the
  learner's timing.
  """
  stop = stop or threading.Event()
  learner = DistributedLearner(config, workdir, address, key, stop,
                               connect_timeout_s=connect_timeout_s)
  result: Dict[str, Any] = {}

  def work():
    try:
      result["summary"] = learner.train()
    except BaseException as e:  # pylint: disable=broad-except  (re-raised)
      result["error"] = e

  worker = threading.Thread(target=work, name="learner", daemon=True)
  worker.start()
  stop_requested_at, last_warning = None, time.monotonic()
  last_check = time.monotonic()
  while worker.is_alive():
    worker.join(0.5)
    now = time.monotonic()
    if now - last_check >= check_server_every_s and not stop.is_set():
      last_check = now
      if not learner.check_server():
        # Lost for good: checkpoint where it is blocked, end; the
        # supervisor restarts it (it resumes from the checkpoint).
        print(f"learner: the Reverb server at {address} did not come back "
              f"({learner.watch.counts()}): stopping", flush=True)
        learner.checkpoint_if_blocked(exit_code=EXIT_SERVER_LOST)
    if stop.is_set():
      stop_requested_at = stop_requested_at or now
      # Waiting for data, it is parked for good; publishing, its server
      # may be gone (a Reverb client then blocks for ever).
      learner.checkpoint_if_blocked((BlockingCalls.DATA,))
      if now - stop_requested_at > stop_grace_s:
        learner.checkpoint_if_blocked()
      continue
    waiting = learner.calls.blocked_s(BlockingCalls.DATA)
    if waiting is not None and waiting > warn_after_s \
        and now - last_warning > warn_after_s:
      last_warning = now
      print(f"learner: no unrolls for {waiting:.0f}s at learner step "
            f"{learner.learner_step}: are the actors running, and is the "
            f"Reverb server at {address} up?", flush=True)
  if not call_within(learner.close, 5.0):
    logging.warning("the Reverb server did not answer the learner's last "
                    "close (it may be gone)")
  if "error" in result:
    raise result["error"]
  return result["summary"]
