"""The emulator oracle: the real environment behind the EnvModel interface.

Where it sits in the data flow: Buesing et al. (2018) compare
agents that query learned models with an agent that queries a perfect
simulator, the upper bound. `OracleModel` is that simulator. It is never
trained, exported or loaded: the code that owns the environments (an
agent's actor) builds it directly and hands it the environment factory,

    oracle = OracleModel(spec_for_env(env, jump=c),
                         env_fn=functools.partial(make_env, protocol))
    state = oracle.initial_state_from_envs(vector_env)  # snapshots live envs
    state, out = oracle.step(state, actions)            # true rewards, frames
    oracle.release(state)                               # frees the snapshots

(`make_env` is `i2a.environments.make_env`; envmodels imports nothing from
i2a/ or agents/, so the environment comes in by injection.)

Decisions:
  * State. `OracleState(handle, done)`: handle int64 [B] keys into a Python
    store of emulator snapshots (`Snapshot`), done bool [B] says the episode
    ended at or before this state. A snapshot holds the emulator state (ALE
    `cloneState(include_rng=True)`, so sticky actions replay exactly; or
    MiniPacman's `clone_state()`, RNG included), the numpy RNG state of an
    ALE env, the scalar attributes of every gymnasium wrapper (FrameCap's
    step counter, LifeLossTerminal's lives and game-over flag, gymnasium's
    TimeLimit and OrderEnforcing: every bool, int, float, str or None
    attribute), and the uint8 frame the agent sees in that state (ALE's
    restoreState does not restore the screen, so frames are stored). Wrapper
    state held in arrays or other objects is not captured; none of
    i2a.environments' wrappers keeps any (ObservationTransform's pad buffer
    is constant).
  * Memory. The store is a bounded LRU (`capacity` snapshots, default 4096;
    a step refreshes the handles it reads). Every `step` adds B snapshots;
    `release(state)` frees them at once, and a handle used after it was
    released or evicted raises a ValueError saying so. `rollout` stores
    nothing: it restores each snapshot once and steps on.
  * Host execution. Stepping runs the real environment on the host,
    sequentially over the batch, in one worker environment built once by
    `env_fn` into which each snapshot is restored (the environments the
    agent steps are only read, never stepped or restored). Eagerly it is a
    plain Python call; inside tf.function it is a `tf.numpy_function`
    (stateful, so calls keep program order), so errors there arrive as
    `tf.errors.InvalidArgumentError` carrying the same message. Not
    thread-parallel: a lock serialises calls.
  * Batch emulators. Where the environment has one (`BatchEmulator`;
    MiniPacman's is i2a.environments.minipacman_oracle, which
    agents.builder.make_oracle passes), the snapshots of
    `initial_state_from_envs` become rows of its arrays and every step,
    rollout and render answers all its rows in one vectorised call: the
    store then holds (rows, index) entries, and the outcomes are those of
    the worker environment, bit for bit (tested). The ALE has none.
  * Actions. Outputs are not differentiable: gradients into relaxed actions
    are None (`uses_actions` is False for that reason, although the outputs
    do depend on the actions). Relaxed actions float32 [B, c, A] are turned
    into primitive actions by argmax (`relaxed_actions='argmax'`, default)
    or sampled from them with the model's seeded generator ('sample'). The
    API's value checks apply (envmodels/base.py): an int action outside
    [0, A), or a relaxed row that is not a probability vector (e.g. all
    zero), raises a ValueError (InvalidArgumentError inside tf.function).
  * Jumpy steps and episode ends. One step runs the c = spec.jump primitive
    actions on the primitive environment (what i2a's JumpyWrapper does:
    rewards summed, the last frame kept) and stops early when the episode
    ends (terminated or truncated, e.g. a life loss under
    life_loss_terminal, or FrameCap's limit). An ended state is absorbing:
    further steps give reward 0 and the same frame.
  * Outputs. out.reward float32 [B] is the summed true reward;
    out.features float32 [B, H/8, W/8, 64 C] is space_to_depth(8) of the
    true next frame in [0, 1]: a lossless abstract map with the spatial size
    of the learned models' states, so agents' imagination encoders plug in
    unchanged. `render(state)` is the true frame float32 [B, H, W, C].
  * The oracle replays the environment's own future exactly, RNG included:
    from one snapshot the same actions always give the same outcome. It is
    the true future, not a sample from the environment's distribution
    (re-seeding would need emulator internals the ALE does not expose).
  * What it refuses, each with a ValueError saying why: `initial_state`
    from frames (emulator state cannot be recovered from pixels: use
    `initial_state_from_envs`), `loss` (nothing to train), `registry.build`
    without `env_fn`, and `envmodels.export` (an ExportError: there are no
    variables to save). It is a `LiveEnvModel` (envmodels.base: agents ask
    `isinstance(model, LiveEnvModel)`, never the kind name), registered as
    kind 'oracle' with `learned = False`, so suites over learned kinds can
    skip it.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import (Any, Callable, Dict, List, NamedTuple, Optional, Protocol,
                    Sequence, Tuple, Union)

import gymnasium as gym
import numpy as np
import sonnet as snt
import tensorflow as tf

from envmodels import base
from envmodels import registry
from envmodels.export import ExportError

KIND = "oracle"
RELAXED_ACTION_MODES = ("argmax", "sample")
# gymnasium.Wrapper's own bookkeeping (constant per environment): not state.
_WRAPPER_INTERNALS = frozenset(
    ("_action_space", "_observation_space", "_metadata", "_cached_spec",
     "_reward_range"))
_SCALARS = (bool, int, float, str, type(None), np.generic)


class OracleState(NamedTuple):
  handle: tf.Tensor  # int64 [B]: keys of the oracle's snapshot store
  done: tf.Tensor  # bool [B]: the episode ended at or before this state


@dataclasses.dataclass(frozen=True)
class Snapshot:
  """An exact copy of one environment (see the module docstring)."""
  emulator: Any  # ale_py.ALEState or MiniPacmanState
  rng_state: Optional[Dict[str, Any]]  # the ALE env's numpy RNG, if any
  wrappers: Tuple[Tuple[type, Dict[str, Any]], ...]  # outermost first
  frame: np.ndarray  # uint8 [H, W, C]: the observation in this state
  done: bool  # the episode has ended: stepping is absorbing


class BatchEmulator(Protocol):
  """Steps many snapshots of one protocol's environment as arrays.

  `from_snapshots` turns Snapshots into rows: an object with `len()`,
  `take(indices int [k])` (a copy), a static `concat(parts)`, and `frames`
  uint8 [n, H, W, C] and `done` bool [n]. `step(rows, actions int [n, c])`
  returns new rows (leaving `rows` as they were), rewards float32 [n],
  frames and done, exactly as the worker environment would: c primitive
  actions per row, stopping at the episode's end, ended rows absorbing.
  """

  def from_snapshots(self, snapshots: Sequence["Snapshot"]) -> Any:
    ...

  def step(self, rows: Any, actions: np.ndarray
           ) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    ...


class _Row(NamedTuple):
  """A store entry under a batch emulator: row `index` of `rows`."""
  rows: Any
  index: int


def _gather(entries: Sequence[_Row]) -> Any:
  """The rows of `entries`, in order, as one batch of the emulator's rows."""
  first = entries[0].rows
  if all(entry.rows is first for entry in entries):
    return first.take(np.array([entry.index for entry in entries]))
  sources: Dict[int, Any] = {}
  for entry in entries:
    sources.setdefault(id(entry.rows), entry.rows)
  offsets, total = {}, 0
  for key, rows in sources.items():
    offsets[key] = total
    total += len(rows)
  joined = type(first).concat(list(sources.values()))
  return joined.take(np.array([offsets[id(entry.rows)] + entry.index
                               for entry in entries]))


# -- Environment snapshots -----------------------------------------------------


def _wrapper_chain(env: gym.Env) -> List[gym.Wrapper]:
  """The gymnasium wrappers of `env`, outermost first."""
  chain = []
  while isinstance(env, gym.Wrapper):
    chain.append(env)
    env = env.env
  return chain


def _emulator_kind(env: gym.Env) -> str:
  unwrapped = env.unwrapped
  # ALE first: ale_py's AtariEnv also has clone_state(), but it leaves the
  # RNG out by default, and sticky actions would then replay differently.
  if hasattr(unwrapped, "ale"):
    return "ale"
  if hasattr(unwrapped, "clone_state") and hasattr(unwrapped,
                                                   "restore_state"):
    return "clone_state"
  raise ValueError(
      f"the oracle cannot snapshot {type(unwrapped).__name__}: it needs an "
      "ALE env (with .ale) or an env with clone_state()/restore_state() "
      "(MiniPacman). Build environments with i2a.environments.make_env.")


def _current_frame(env: gym.Env, chain: Sequence[gym.Wrapper]) -> np.ndarray:
  """The observation `env` last returned, rebuilt from the emulator's screen
  through the chain's gymnasium ObservationWrappers (innermost first)."""
  unwrapped = env.unwrapped
  if hasattr(unwrapped, "_observation"):  # MiniPacman
    frame = unwrapped._observation()  # pylint: disable=protected-access
  elif hasattr(unwrapped, "_get_obs"):  # ale_py.AtariEnv
    frame = unwrapped._get_obs()  # pylint: disable=protected-access
  else:
    raise ValueError(
        f"cannot rebuild the current frame of {type(unwrapped).__name__}; "
        "pass the observations the agent sees to initial_state_from_envs.")
  for wrapper in reversed(chain):
    if isinstance(wrapper, gym.ObservationWrapper):
      frame = wrapper.observation(frame)
  return np.asarray(frame)


def snapshot_env(env: gym.Env, observation: Optional[np.ndarray] = None,
                 done: Optional[bool] = None) -> Snapshot:
  """An exact copy of a live environment; `env` itself is only read.

  Args:
    env: an environment built like the oracle's `env_fn` builds them
      (possibly with extra outer wrappers such as i2a's JumpyWrapper, whose
      state is then kept but not restored).
    observation: the uint8 [H, W, C] observation the agent sees now; by
      default rebuilt from the emulator's screen through the wrappers.
    done: whether the episode has ended; by default the emulator's own
      game-over flag (a vector env's sub-envs are always mid-episode).
  """
  chain = _wrapper_chain(env)
  unwrapped = env.unwrapped
  rng_state = None
  if _emulator_kind(env) == "clone_state":
    emulator = unwrapped.clone_state()
    game_over = bool(getattr(emulator, "terminated", False))
  else:
    emulator = unwrapped.ale.cloneState(include_rng=True)
    game_over = bool(unwrapped.ale.game_over())
    if getattr(unwrapped, "_np_random", None) is not None:
      rng_state = unwrapped.np_random.bit_generator.state
  wrappers = tuple(
      (type(wrapper), {key: value for key, value in vars(wrapper).items()
                       if isinstance(value, _SCALARS) and
                       key not in _WRAPPER_INTERNALS})
      for wrapper in chain)
  if observation is None:
    observation = _current_frame(env, chain)
  frame = np.array(observation, dtype=np.uint8)  # a copy
  return Snapshot(emulator=emulator, rng_state=rng_state, wrappers=wrappers,
                  frame=frame, done=game_over if done is None else bool(done))


def restore_env(env: gym.Env, snapshot: Snapshot) -> None:
  """Puts `env` exactly into `snapshot`'s state.

  `env`'s wrapper chain must equal the innermost wrappers of the snapshotted
  env's chain (outer extras of the snapshot, e.g. a JumpyWrapper, are
  skipped).
  """
  chain = _wrapper_chain(env)
  saved = snapshot.wrappers[len(snapshot.wrappers) - len(chain):]
  if (len(chain) > len(snapshot.wrappers) or
      [type(w) for w in chain] != [cls for cls, _ in saved]):
    raise ValueError(
        "the oracle's worker env and the snapshotted env are built "
        "differently: worker wrappers "
        f"{[type(w).__name__ for w in chain]}, snapshot wrappers "
        f"{[cls.__name__ for cls, _ in snapshot.wrappers]}. Pass an env_fn "
        "that builds the agent's protocol without the JumpyWrapper, e.g. "
        "functools.partial(i2a.environments.make_env, protocol).")
  for wrapper, (_, attributes) in zip(chain, saved):
    for key, value in attributes.items():
      setattr(wrapper, key, value)
  unwrapped = env.unwrapped
  if _emulator_kind(env) == "clone_state":
    unwrapped.restore_state(snapshot.emulator)
  else:
    unwrapped.ale.restoreState(snapshot.emulator)
    if snapshot.rng_state is not None:
      unwrapped.np_random.bit_generator.state = snapshot.rng_state


def spec_for_env(env: gym.Env, jump: int = 1, context_length: int = 1
                 ) -> base.EnvModelSpec:
  """The oracle's spec for environments like `env` (observation shape and
  primitive actions read from it; a JumpyWrapper on top is looked through)."""
  space = env.action_space
  if isinstance(space, gym.spaces.Discrete):
    num_actions = int(space.n)
  elif isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.size:
    num_actions = int(space.nvec.reshape(-1)[0])
  else:
    raise ValueError(f"the oracle needs discrete actions, given {space}.")
  return base.EnvModelSpec(
      kind=KIND, observation_shape=tuple(int(d) for d in
                                         env.observation_space.shape),
      num_actions=num_actions, jump=jump, context_length=context_length)


class _SnapshotStore:
  """handle -> Snapshot (or _Row), least recently used first, at most
  `capacity`.

  A plain object (not a dict attribute) so Sonnet's variable walk and TF's
  attribute tracking never look inside it.
  """

  def __init__(self, capacity: int):
    self.capacity = capacity
    self._snapshots: "collections.OrderedDict[int, Snapshot]" = (
        collections.OrderedDict())
    self._next_handle = 1  # never reused, so a stale handle is detected

  def __len__(self) -> int:
    return len(self._snapshots)

  def add(self, snapshot: Union[Snapshot, _Row]) -> int:
    handle = self._next_handle
    self._next_handle += 1
    self._snapshots[handle] = snapshot
    while len(self._snapshots) > self.capacity:
      self._snapshots.popitem(last=False)
    return handle

  def get(self, handle: int) -> Union[Snapshot, _Row]:
    try:
      self._snapshots.move_to_end(handle)
    except KeyError:
      raise ValueError(
          f"oracle state handle {handle} is unknown: it was released, or "
          f"evicted from the store (capacity {self.capacity} snapshots, least "
          "recently used first), or made by another OracleModel. Raise "
          "capacity= or keep fewer oracle states alive.") from None
    return self._snapshots[handle]

  def release(self, handles: np.ndarray) -> None:
    for handle in np.asarray(handles).reshape(-1).tolist():
      self._snapshots.pop(handle, None)


def _host_call(function: Callable[..., Tuple[np.ndarray, ...]],
               inputs: Sequence[tf.Tensor], dtypes: Sequence[tf.DType]
               ) -> List[tf.Tensor]:
  """Runs a numpy function: directly when eager, else as tf.numpy_function."""
  if tf.executing_eagerly():
    outputs = function(*[np.asarray(x) for x in inputs])
    return [tf.convert_to_tensor(y, dtype) for y, dtype in zip(outputs,
                                                                 dtypes)]
  return tf.numpy_function(function, list(inputs), list(dtypes),
                           stateful=True)


def _frame(entry: Union[Snapshot, _Row]) -> np.ndarray:
  """The observation uint8 [H, W, C] in a store entry's state."""
  if isinstance(entry, _Row):
    return entry.rows.frames[entry.index]
  return entry.frame


@registry.register(KIND)
@snt.allow_empty_variables
class OracleModel(base.LiveEnvModel):
  """The real environment as an EnvModel (see the module docstring).

  Args:
    spec: the oracle's spec (`spec_for_env(env, jump=c)`): kind 'oracle',
      the protocol's observation shape and primitive action count.
    env_fn: builds one primitive-action environment of the agent's protocol
      (functools.partial(i2a.environments.make_env, protocol)); called once,
      for the worker env.
    seed: seeds the worker env's reset and the generator used by
      relaxed_actions='sample'.
    capacity: most snapshots kept (least recently used are evicted).
    relaxed_actions: 'argmax' or 'sample', how probability actions become
      primitive actions.
    batch_emulator: steps the snapshots as arrays (`BatchEmulator`, e.g.
      i2a.environments.minipacman_oracle.batch_emulator(protocol)), with
      the outcomes of env_fn's environments; None steps them one by one.
  """

  # A LiveEnvModel: not learned (no variables, no loss, no export), started
  # from live environments. It replays the environment's own future.
  deterministic = True

  def __init__(self, spec: base.EnvModelSpec,
               env_fn: Optional[Callable[[], gym.Env]] = None, seed: int = 0,
               capacity: int = 4096, relaxed_actions: str = "argmax",
               batch_emulator: Optional[BatchEmulator] = None):
    super().__init__(spec, seed=seed, name="oracle")
    if env_fn is None:
      raise ValueError(
          "the 'oracle' model runs the real emulator and needs env_fn, a "
          "callable that builds one environment of the agent's protocol; "
          "given none (registry.build / envmodels.load cannot supply it). "
          "Construct it directly: OracleModel(spec, env_fn=functools.partial("
          "i2a.environments.make_env, protocol)).")
    if not callable(env_fn):
      raise ValueError(f"env_fn must be a callable that returns a gymnasium "
                       f"env, given {type(env_fn).__name__} {env_fn!r}; call "
                       "OracleModel(spec, env_fn=..., seed=...).")
    if spec.kind != KIND:
      raise ValueError(f"the oracle's spec must have kind {KIND!r}, given "
                       f"{spec.kind!r}; use envmodels.oracle.spec_for_env(env,"
                       " jump) or dataclasses.replace(spec, kind='oracle').")
    if not isinstance(capacity, int) or capacity < 1:
      raise ValueError(f"capacity must be a positive int (snapshots kept), "
                       f"given {capacity!r}.")
    if relaxed_actions not in RELAXED_ACTION_MODES:
      raise ValueError(f"relaxed_actions must be one of "
                       f"{RELAXED_ACTION_MODES}, given {relaxed_actions!r}.")
    if batch_emulator is not None and not (
        callable(getattr(batch_emulator, "from_snapshots", None)) and
        callable(getattr(batch_emulator, "step", None))):
      raise ValueError(
          "batch_emulator must have from_snapshots(snapshots) and "
          "step(rows, actions) (envmodels.oracle.BatchEmulator), given "
          f"{type(batch_emulator).__name__}; pass None to step the "
          "environments one by one.")
    self._batch = batch_emulator
    self._hyperparameters = dict(capacity=capacity,
                                 relaxed_actions=relaxed_actions)
    self._relaxed_actions = relaxed_actions
    self._store = _SnapshotStore(capacity)
    self._lock = threading.Lock()
    self._worker = env_fn()  # the one env every query is restored into
    try:
      _emulator_kind(self._worker)  # refuses envs it cannot snapshot
      self._check_worker(self._worker)
    except ValueError:
      self._worker.close()
      raise
    self._worker.reset(seed=seed)

  def _check_worker(self, env: gym.Env) -> None:
    if not isinstance(env.action_space, gym.spaces.Discrete):
      raise ValueError(
          f"env_fn must build primitive-action environments (Discrete "
          f"actions), given action space {env.action_space}; build them "
          "without jump (make_env(protocol)): the oracle runs spec.jump "
          "primitive actions per step itself.")
    shape = tuple(env.observation_space.shape)
    if (shape != tuple(self.spec.observation_shape) or
        int(env.action_space.n) != self.spec.num_actions):
      raise ValueError(
          f"env_fn's environments have observations {shape} and "
          f"{int(env.action_space.n)} actions, the spec says "
          f"{tuple(self.spec.observation_shape)} and {self.spec.num_actions}; "
          "build the spec from the env: envmodels.oracle.spec_for_env(env, "
          "jump).")

  @property
  def hyperparameters(self) -> Dict[str, Any]:
    """The constructor's JSON-able hyperparameters (env_fn excluded)."""
    return dict(self._hyperparameters)

  # -- What the oracle refuses -----------------------------------------------

  def initial_state(self, observations: tf.Tensor) -> OracleState:
    raise ValueError(
        "the oracle cannot start from observations: emulator state (RAM, RNG,"
        " ghost timers) cannot be recovered from frames. Snapshot the live "
        "environments instead: oracle.initial_state_from_envs(envs).")

  def _initial_state(self, observations: tf.Tensor) -> OracleState:
    return self.initial_state(observations)

  def loss(self, batch: Dict[str, tf.Tensor], **knobs: Any) -> base.LossOutput:
    raise ValueError(
        "the oracle model is the real emulator: it has no variables and "
        "cannot be trained (no loss). Train a learned kind "
        f"({', '.join(k for k in registry.kinds() if k != KIND)}) instead.")

  def create_variables(self) -> None:
    raise ExportError(
        "the oracle model cannot be exported or loaded: it has no variables "
        "and runs the real emulator. Build it where the environments are: "
        "OracleModel(spec, env_fn=...).")

  # -- States --------------------------------------------------------------

  def state_features(self, state: OracleState) -> tf.Tensor:
    """space_to_depth(8) of the state's frame: float32 [B, H/8, W/8, 64 C]
    in [0, 1], what a step gives as features."""
    return tf.nn.space_to_depth(self.render(state), 8)

  @property
  def uses_actions(self) -> bool:
    """False: the oracle's outputs depend on the actions, but gradients do
    not reach relaxed actions (the emulator is not differentiable)."""
    return False

  @property
  def store_size(self) -> int:
    """The number of snapshots currently held."""
    return len(self._store)

  @property
  def capacity(self) -> int:
    return self._store.capacity

  def initial_state_from_envs(
      self, envs: Union[gym.Env, Sequence[Union[gym.Env, Snapshot]]],
      observations: Optional[np.ndarray] = None) -> OracleState:
    """Snapshots live environments (only read) into an oracle state.

    Args:
      envs: a gymnasium SyncVectorEnv (its .envs), or a sequence of
        environments built like env_fn's and/or `Snapshot`s.
      observations: optional uint8 [B, H, W, C], the frames the agent sees
        now; by default rebuilt from each emulator's screen.
    Returns:
      OracleState with handle int64 [B] and done bool [B].
    """
    if hasattr(envs, "envs") and not isinstance(envs, (list, tuple)):
      envs = list(envs.envs)
    elif isinstance(envs, (gym.Env, Snapshot)):
      envs = [envs]
    if not isinstance(envs, Sequence) or not envs:
      raise ValueError("initial_state_from_envs needs a non-empty sequence of "
                       "environments or Snapshots, or a SyncVectorEnv (an "
                       "AsyncVectorEnv's envs live in other processes), "
                       f"given {type(envs).__name__}.")
    frame_shape = tuple(self.spec.observation_shape)
    if observations is not None:
      observations = np.asarray(observations)
      if observations.shape != (len(envs),) + frame_shape:
        raise ValueError(
            f"initial_state_from_envs observations: expected shape "
            f"{[len(envs), *frame_shape]}, given {list(observations.shape)}.")
    snapshots = []
    for i, env in enumerate(envs):
      if isinstance(env, Snapshot):
        snapshot = env
      elif isinstance(env, gym.Env):
        snapshot = snapshot_env(
            env, None if observations is None else observations[i])
      else:
        raise ValueError(f"initial_state_from_envs: element {i} is a "
                         f"{type(env).__name__}; expected a gymnasium env or "
                         "an envmodels.oracle.Snapshot.")
      if snapshot.frame.shape != frame_shape:
        raise ValueError(f"environment {i} has frames of shape "
                         f"{snapshot.frame.shape}, the spec says "
                         f"{frame_shape}; build the spec with spec_for_env.")
      snapshots.append(snapshot)
    self._check_capacity(len(snapshots))
    with self._lock:
      if self._batch is not None:
        rows = self._batch.from_snapshots(snapshots)
        entries = [_Row(rows, i) for i in range(len(snapshots))]
      else:
        entries = snapshots
      handles = np.array([self._store.add(e) for e in entries], np.int64)
    return OracleState(handle=tf.constant(handles),
                       done=tf.constant([s.done for s in snapshots]))

  def release(self, state: Union[OracleState, tf.Tensor, np.ndarray]) -> None:
    """Frees the snapshots of `state` (unknown handles are ignored). Works
    eagerly and inside tf.function."""
    handles = state.handle if isinstance(state, OracleState) else state
    if isinstance(handles, tf.Tensor) and not tf.executing_eagerly():
      tf.numpy_function(self._release_host, [handles], [], stateful=True)
    else:
      self._release_host(np.asarray(handles))

  def _release_host(self, handles: np.ndarray) -> Tuple[()]:
    with self._lock:
      self._store.release(handles)
    return ()

  def _check_capacity(self, batch: int) -> None:
    if batch > self._store.capacity:
      raise ValueError(f"a batch of {batch} oracle states does not fit the "
                       f"store's capacity of {self._store.capacity} "
                       "snapshots; build the oracle with a larger capacity=.")

  def close(self) -> None:
    """Closes the worker environment."""
    self._worker.close()

  # -- Stepping --------------------------------------------------------------

  def _check_state(self, state: Any) -> OracleState:
    if not isinstance(state, OracleState):
      raise ValueError(
          "oracle state: expected an envmodels.oracle.OracleState (from "
          "initial_state_from_envs or step), given "
          f"{type(state).__name__}. States of other models do not work here.")
    return state

  def _primitive_actions(self, encoded_actions: tf.Tensor) -> tf.Tensor:
    """float32 [B, c * A] -> int32 [B, c]; -1 where a row is all zero."""
    c, num_actions = self.spec.jump, self.spec.num_actions
    probabilities = tf.reshape(encoded_actions, [-1, c, num_actions])
    if self._relaxed_actions == "sample":
      seed = self._rng.make_seeds(1)[:, 0]
      logits = tf.math.log(tf.reshape(probabilities, [-1, num_actions]))
      chosen = tf.reshape(
          tf.random.stateless_categorical(logits, 1, seed, dtype=tf.int32),
          [-1, c])
    else:
      chosen = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    valid = tf.reduce_max(probabilities, axis=-1) > 0
    return tf.where(valid, chosen, -tf.ones_like(chosen))  # [B, c]

  def _run(self, snapshot: Snapshot, actions: np.ndarray, keep_last: bool
           ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[Snapshot]]:
    """Steps the worker through actions int [T, c] from `snapshot`.

    Returns rewards [T], frames uint8 [T, H, W, C], done [T] and, with
    keep_last, the snapshot after the last step.
    """
    steps = actions.shape[0]
    rewards = np.zeros(steps, np.float32)
    frames = np.empty((steps,) + snapshot.frame.shape, np.uint8)
    dones = np.zeros(steps, bool)
    frame, done = snapshot.frame, snapshot.done
    if not done:
      restore_env(self._worker, snapshot)
    for t in range(steps):
      total = 0.0
      for action in actions[t]:
        if done:
          break
        frame, reward, terminated, truncated, _ = self._worker.step(
            int(action))
        total += float(reward)
        done = bool(terminated or truncated)
      rewards[t], frames[t], dones[t] = total, frame, done
    last = None
    if keep_last:
      if snapshot.done:
        last = snapshot
      else:
        last = snapshot_env(self._worker, observation=frame, done=done)
    return rewards, frames, dones, last

  def _check_actions(self, actions: np.ndarray) -> None:
    if actions.size and actions.min() < 0:
      raise ValueError(
          f"oracle actions: expected int actions in [0, "
          f"{self.spec.num_actions}) or probability rows with a positive "
          "entry; given an out-of-range int action or an all-zero row.")

  def _step_host(self, handles: np.ndarray, actions: np.ndarray
                 ) -> Tuple[np.ndarray, ...]:
    """handles int64 [B], actions int32 [B, c] -> new handles [B], done [B],
    rewards float32 [B], frames uint8 [B, H, W, C]."""
    self._check_actions(actions)
    if self._batch is not None:
      return self._step_rows(handles, actions)
    with self._lock:
      self._check_capacity(len(handles))
      snapshots = [self._store.get(int(h)) for h in handles]
      results = [self._run(s, a[None], keep_last=True)
                 for s, a in zip(snapshots, actions)]
      new_handles = np.array([self._store.add(last)
                              for _, _, _, last in results], np.int64)
    frame_shape = tuple(self.spec.observation_shape)
    return (new_handles,
            np.array([last.done for _, _, _, last in results], bool),
            np.array([r[0] for r, _, _, _ in results], np.float32),
            np.stack([f[0] for _, f, _, _ in results]) if results else
            np.zeros((0,) + frame_shape, np.uint8))

  def _step_rows(self, handles: np.ndarray, actions: np.ndarray
                 ) -> Tuple[np.ndarray, ...]:
    """_step_host through the batch emulator: one call for every row."""
    if not len(handles):
      return (np.zeros(0, np.int64), np.zeros(0, bool),
              np.zeros(0, np.float32),
              np.zeros((0,) + tuple(self.spec.observation_shape), np.uint8))
    with self._lock:
      self._check_capacity(len(handles))
      rows = _gather([self._store.get(int(h)) for h in handles])
      rows, rewards, frames, done = self._batch.step(rows, actions)
      new_handles = np.array([self._store.add(_Row(rows, i))
                              for i in range(len(handles))], np.int64)
    return new_handles, done, rewards, frames

  def _rollout_host(self, handles: np.ndarray, actions: np.ndarray
                    ) -> Tuple[np.ndarray, np.ndarray]:
    """handles int64 [B], actions int32 [B, T, c] -> rewards float32 [B, T],
    frames uint8 [B, T, H, W, C]; stores nothing."""
    self._check_actions(actions)
    batch, steps = actions.shape[:2]
    rewards = np.zeros((batch, steps), np.float32)
    frames = np.zeros((batch, steps) + tuple(self.spec.observation_shape),
                      np.uint8)
    if self._batch is not None and batch:
      with self._lock:
        rows = _gather([self._store.get(int(h)) for h in handles])
        for t in range(steps):
          rows, rewards[:, t], frames[:, t], _ = self._batch.step(
              rows, actions[:, t])
      return rewards, frames
    with self._lock:
      snapshots = [self._store.get(int(h)) for h in handles]
      for i, snapshot in enumerate(snapshots):
        rewards[i], frames[i], _, _ = self._run(snapshot, actions[i],
                                                keep_last=False)
    return rewards, frames

  def _render_host(self, handles: np.ndarray) -> Tuple[np.ndarray]:
    with self._lock:
      frames = [_frame(self._store.get(int(h))) for h in handles]
    if not frames:
      return (np.zeros((0,) + tuple(self.spec.observation_shape), np.uint8),)
    return (np.stack(frames),)

  def _features(self, frames: tf.Tensor) -> tf.Tensor:
    """uint8 [N, H, W, C] -> float32 [N, H/8, W/8, 64 C] in [0, 1]."""
    return tf.nn.space_to_depth(tf.cast(frames, tf.float32) / 255.0, 8)

  def _frame_shape(self, batch_shape: Sequence[Optional[int]]
                   ) -> tf.TensorShape:
    return tf.TensorShape(list(batch_shape) +
                          list(self.spec.observation_shape))

  def _step(self, state: OracleState, encoded_actions: tf.Tensor
            ) -> Tuple[OracleState, base.StepOutput]:
    state = self._check_state(state)
    actions = self._primitive_actions(encoded_actions)  # [B, c]
    handle, done, reward, frame = _host_call(
        self._step_host, [state.handle, actions],
        [tf.int64, tf.bool, tf.float32, tf.uint8])
    batch = state.handle.shape[:1]
    handle.set_shape(batch)
    done.set_shape(batch)
    reward.set_shape(batch)
    frame.set_shape(self._frame_shape(batch))
    return (OracleState(handle=handle, done=done),
            base.StepOutput(reward=reward, features=self._features(frame)))

  def _render(self, state: OracleState) -> tf.Tensor:
    state = self._check_state(state)
    frame, = _host_call(self._render_host, [state.handle], [tf.uint8])
    frame.set_shape(self._frame_shape(state.handle.shape[:1]))
    return tf.cast(frame, tf.float32) / 255.0  # [B, H, W, C]

  def rollout(self, state: OracleState, actions: tf.Tensor,
              render: bool = False) -> base.Rollout:
    """Like EnvModel.rollout, in one host call that stores no snapshots."""
    state = self._check_state(state)
    actions = tf.convert_to_tensor(actions)
    if actions.shape.rank is None or actions.shape.rank < 2:
      raise base._shape_error(  # pylint: disable=protected-access
          "rollout actions", "[B, T, c] or [B, T, c, A]", actions.shape)
    num_steps = base.rollout_length(actions)
    primitive = tf.stack(
        [self._primitive_actions(self.encode_actions(actions[:, t]))
         for t in range(num_steps)], axis=1)  # [B, T, c]
    rewards, frames = _host_call(self._rollout_host,
                                 [state.handle, primitive],
                                 [tf.float32, tf.uint8])
    batch = state.handle.shape[:1]
    rewards.set_shape(batch.concatenate([num_steps]))
    frames.set_shape(self._frame_shape(batch.as_list() + [num_steps]))
    height, width, channels = self.spec.observation_shape
    features = tf.reshape(
        self._features(tf.reshape(frames, [-1, height, width, channels])),
        tf.concat([tf.shape(frames)[:2],
                   [height // 8, width // 8, 64 * channels]], 0))
    features.set_shape(frames.shape[:2].concatenate(
        [height // 8, width // 8, 64 * channels]))
    return base.Rollout(
        features=features,  # [B, T, H/8, W/8, 64 C]
        rewards=rewards,  # [B, T]
        frames=tf.cast(frames, tf.float32) / 255.0 if render else None)
