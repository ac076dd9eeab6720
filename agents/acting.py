"""The actor: a network steps a vector env and writes unrolls into Reverb.

Data flow (docs/agents.md, "Data flow"): before each unroll the actor pulls the
newest weights from the Reverb `variables` table (`VariableClient`), then
steps its `num_envs` environments for `unroll_length` steps, sampling
actions from the network's policy over each environment's frame window
(the frames seen `network.window_offsets` agent steps ago: the last k, or
a jumpy model's context c steps apart), and writes the unrolls into the
`unrolls` queue (`write_unrolls`) as items of U = `unrolls_per_item`
consecutive environments' unrolls, each field with a leading [U] axis (U =
1: an item per unroll, no such axis; the runtimes choose U, up to the whole
batch N: i2a/run/train.py `unrolls_per_item`). One unroll
(`unroll_signature`):

  observation      uint8 [n + 1, k, H, W, C]  frame windows o_0 .. o_n
                                              (k = len(window_offsets))
  action           int32 [n]                  a_t taken at o_t
  reward           float32 [n]                r_t after a_t
  discount         float32 [n]                0 if a_t ended the episode by
                                              termination, else 1
  behaviour_logits float32 [n, A]             the actor's pi(. | o_t)
  <side input>     [n + 1, ...]                the network's side inputs of
                                              each window, if it declares
                                              any (agents/base.py)

Where the network's envmodel encodes its context frames one by one (the
I2A over a state-space model), the actor also keeps their encodings beside
the frame history (`network.context_cache`, agents/base.py
ContextEncodings): each frame is encoded once, when it is a window's newest.

In one process with the learner (the embedded runtime) the actor may put
each unroll batch {field: [N, ...]} whole into an in-process queue instead
(`sink`, agents/learning.py LocalUnrolls): the same items, no Reverb.

Under 'bf16' an actor that pulls its weights keeps bfloat16 copies of its
network's weights (envmodels/precision.py WeightCopies), refreshed when a
pull changes them: its acting calls read those instead of casting every
weight at every step (the same values).

Consecutive unrolls of an environment share their boundary window (o_n of
one is o_0 of the next). The vector env resets an environment on the step
that ends its episode (same-step autoreset): the next window is that new
episode's first frame repeated, so no window mixes two episodes. A
truncated episode keeps discount 1: its return bootstraps from the value of
the next window, the new episode's first (an approximation OpenAI baselines
makes too; terminations, the episodes' usual end here, are exact).
"""

from __future__ import annotations

import pickle
from typing import (Any, Dict, List, Mapping, NamedTuple, Optional, Protocol,
                    Sequence, Tuple, Union)

import gymnasium as gym
import numpy as np
import reverb
import tensorflow as tf
from absl import logging

from agents.base import ActorCriticNetwork
from agents.variables import LocalVariables, VariableClient
from envmodels import precision
from i2a.replay import tables


class UnrollSink(Protocol):
  """Takes an actor's unroll batches whole (agents/learning.py LocalUnrolls)."""

  def put(self, batch: Mapping[str, np.ndarray]) -> None:
    """batch: {field: [N, ...]}, unroll_signature with an env axis."""


class Episode(NamedTuple):
  """A finished episode of one environment."""
  episode_return: float
  length: int
  terminated: bool  # False: truncated (episode cap)


def unroll_signature(unroll_length: int, window_length: int,
                     observation_shape: Tuple[int, int, int],
                     num_actions: int,
                     side_inputs: Optional[Mapping[str, tf.TensorSpec]] = None,
                     unrolls_per_item: int = 1
                     ) -> Dict[str, tf.TensorSpec]:
  """The item signature of the `unrolls` queue; `window_length`: frames per
  window (len(network.window_offsets)); `side_inputs`: the network's
  side_input_spec(), one per window; `unrolls_per_item`: 1, one unroll
  (no batch axis), or U > 1, U environments' unrolls of an actor's batch,
  every field with a leading [U] axis (`write_unrolls`)."""
  check_unrolls_per_item(unrolls_per_item)
  n = unroll_length
  side = {name: tf.TensorSpec([n + 1, *spec.shape], spec.dtype, name)
          for name, spec in (side_inputs or {}).items()}
  clash = sorted(set(side) & {"observation", "action", "reward", "discount",
                              "behaviour_logits"})
  if clash:
    raise ValueError(f"side inputs may not reuse the unroll fields {clash}; "
                     "rename them in the network's side_input_spec().")
  signature = {
      "observation": tf.TensorSpec([n + 1, window_length, *observation_shape],
                                   tf.uint8, "observation"),
      "action": tf.TensorSpec([n], tf.int32, "action"),
      "reward": tf.TensorSpec([n], tf.float32, "reward"),
      "discount": tf.TensorSpec([n], tf.float32, "discount"),
      "behaviour_logits": tf.TensorSpec([n, num_actions], tf.float32,
                                        "behaviour_logits"),
      **side,
  }
  if unrolls_per_item == 1:
    return signature
  return {name: tf.TensorSpec([unrolls_per_item, *spec.shape], spec.dtype,
                              name) for name, spec in signature.items()}


def check_unrolls_per_item(unrolls_per_item: int) -> int:
  """Validates a count of unrolls per `unrolls` item (>= 1)."""
  if int(unrolls_per_item) != unrolls_per_item or unrolls_per_item < 1:
    raise ValueError("unrolls_per_item must be an integer >= 1 (1: an item "
                     "per unroll; U: items of U environments' unrolls), "
                     f"given {unrolls_per_item!r}.")
  return int(unrolls_per_item)


def write_unrolls(writer: reverb.TrajectoryWriter, table: str,
                  batch: Mapping[str, np.ndarray],
                  unrolls_per_item: int) -> None:
  """Writes an actor's unroll batch {field: [N, ...]} into `table` and
  flushes: N / U items of U = `unrolls_per_item` consecutive environments'
  unrolls each (fields [U, ...]; U = 1: one unroll per item, no such axis),
  U dividing N. Whatever U, the queue gives the unrolls back in the same
  order (agents/learning.py `unroll_dataset`)."""
  sizes = {len(value) for value in batch.values()}
  if len(sizes) != 1:
    raise ValueError("an unroll batch needs one leading size across its "
                     f"fields, given {sorted(sizes)}.")
  num_envs = sizes.pop()
  if unrolls_per_item < 1 or num_envs % unrolls_per_item:
    raise ValueError(f"an unroll batch of {num_envs} environments cannot be "
                     f"written as items of {unrolls_per_item} unrolls: the "
                     "`unrolls` table's unrolls_per_item must divide the "
                     "actor's num_envs.")
  if unrolls_per_item == 1:
    items = [{key: value[i] for key, value in batch.items()}
             for i in range(num_envs)]
  else:  # Views of the batch, [U, ...] each: no copy here.
    items = [{key: value[i:i + unrolls_per_item]
              for key, value in batch.items()}
             for i in range(0, num_envs, unrolls_per_item)]
  for item in items:
    # One append holds a whole item; the item is that (squeezed) step.
    writer.append(item)
    writer.create_item(table, priority=1.0,
                       trajectory={key: column[-1]
                                   for key, column in writer.history.items()})
  writer.flush()


def consecutive_offsets(length: int) -> Tuple[int, ...]:
  """The offsets of a window of the last `length` frames: (length - 1, ...,
  1, 0)."""
  return tuple(range(length - 1, -1, -1))


def check_offsets(offsets: Sequence[int]) -> Tuple[int, ...]:
  """Validates window offsets: non-empty, strictly decreasing, ending in 0."""
  offsets = tuple(int(o) for o in offsets)
  if (not offsets or offsets[-1] != 0 or
      any(a <= b for a, b in zip(offsets, offsets[1:]))):
    raise ValueError("window offsets must be strictly decreasing agent-step "
                     "offsets ending in 0 (the newest frame), e.g. (6, 3, 0),"
                     f" given {offsets}.")
  return offsets


class FrameWindows:
  """Each environment's window: the frames seen `offsets` agent steps ago.

  `offsets` (oldest first, ending in 0; a network's `window_offsets`): e.g.
  (2, 1, 0) for the last 3 frames, (6, 3, 0) for a jumpy model's 3 context
  frames c = 3 steps apart. The history keeps the last offsets[0] + 1
  frames of each environment; at an episode start it is filled with that
  episode's first frame, so no window ever mixes two episodes (the model
  sees a still context, as at the start of every training episode).
  """

  def __init__(self, first_frames: np.ndarray, offsets: Sequence[int]):
    """first_frames: uint8 [N, H, W, C], each env's episode's first frame."""
    self.offsets = check_offsets(offsets)
    self.history = np.repeat(first_frames[:, None], self.offsets[0] + 1,
                             axis=1)  # [N, offsets[0] + 1, H, W, C]
    self._index = np.array([self.offsets[0] - o for o in self.offsets])

  @property
  def frames(self) -> np.ndarray:
    """uint8 [N, len(offsets), H, W, C]: the windows, oldest first."""
    return self.history[:, self._index]

  def push(self, frames: np.ndarray, new_episode: np.ndarray) -> None:
    """frames [N, H, W, C] after a step; new_episode [N] bool: they start one."""
    self.history = np.concatenate([self.history[:, 1:], frames[:, None]],
                                  axis=1)
    for i in np.flatnonzero(new_episode):
      self.history[i] = frames[i]  # Broadcast: the first frame throughout.


def sample_actions(logits: np.ndarray, rng: np.random.Generator,
                   greedy: bool = False) -> np.ndarray:
  """logits float [N, A] -> int32 [N], sampled from softmax (or argmax)."""
  logits = np.asarray(logits, np.float64)
  if greedy:
    return np.argmax(logits, axis=-1).astype(np.int32)
  probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
  cumulative = np.cumsum(probabilities, axis=-1)
  draws = rng.random(len(logits)) * cumulative[:, -1]  # [N]
  actions = (cumulative <= draws[:, None]).sum(axis=-1)
  return np.minimum(actions, logits.shape[-1] - 1).astype(np.int32)


def uniform_actions(num_actions: int, count: int,
                    rng: np.random.Generator) -> np.ndarray:
  """The uniform random policy: int32 [count] actions, each uniform over
  `num_actions`, drawn from `rng` (one draw per action). Collection's
  'random' policy and its epsilon mixing, and the planner's random baseline
  (which `python -m i2a.evaluate`'s baseline plays too) all draw here."""
  return rng.integers(0, num_actions, count, dtype=np.int32)


def random_generators(network: tf.Module) -> List[tf.random.Generator]:
  """The tf.random.Generators inside `network` (e.g. an I2A's rollout
  policy and envmodel samplers), in a fixed order. Their states are the
  acting network's own: the learner's weights do not carry them."""
  return list(network._flatten(  # pylint: disable=protected-access
      predicate=lambda m: isinstance(m, tf.random.Generator)))


def imagine_quietly(network: ActorCriticNetwork, windows: np.ndarray,
                    envs: Optional[Sequence[object]]
                    ) -> Optional[Dict[str, np.ndarray]]:
  """What `network` imagines from `windows` (an I2A's `imagined_frames`,
  for pictures), without drawing random numbers of the run: its generators
  are put back, so acting goes on as if no picture had been taken. None
  for a network that imagines nothing (A2C), or for the emulator oracle
  without its environments (an async vector env keeps them elsewhere)."""
  imagine = getattr(network, "imagined_frames", None)
  if imagine is None or (envs is None and
                         getattr(network, "needs_env_states", False)):
    return None
  generators = random_generators(network)
  states = [generator.state.numpy() for generator in generators]
  try:
    return imagine(windows, envs)
  finally:
    for generator, state in zip(generators, states):
      generator.state.assign(state)


class Actor:
  """Steps a vector env with a network's policy; writes unrolls to Reverb."""

  def __init__(self, network: ActorCriticNetwork, envs: gym.vector.VectorEnv,
               unroll_length: int, seed: int,
               client: Optional[reverb.Client] = None,
               variable_client: Optional[Union[VariableClient,
                                               LocalVariables]] = None,
               table: str = tables.UNROLLS, greedy: bool = False,
               sink: Optional["UnrollSink"] = None,
               unrolls_per_item: int = 1, weight_copies: bool = True):
    """
    Args:
      network: the acting copy of the network (its variables created).
      envs: a vector env with same-step autoreset (make_vector_env); sub-env
        i is reset with seed + i.
      unroll_length: n, steps per unroll.
      seed: seeds the environments and the action sampling.
      client: where unrolls go (None: nothing is written, e.g. evaluation).
      variable_client: pulls the learner's weights before each unroll (None:
        the network is used as it is).
      table: the unrolls queue.
      greedy: argmax actions instead of sampling.
      sink: where unrolls go instead of Reverb, in one process with the
        learner: each unroll batch {field: [N, ...]} is `sink.put` whole
        (agents/learning.py LocalUnrolls). Not with `client`.
      unrolls_per_item: how the unrolls go into Reverb (`write_unrolls`):
        items of this many environments' unrolls (a divisor of num_envs;
        the runtimes choose it: i2a/run/train.py `unrolls_per_item`); the
        table's signature must agree (`unroll_signature`).
      weight_copies: with a variable client, act on bfloat16 copies of the
        network's weights under 'bf16' (refreshed after each pull that
        changes them); False: the rewrite casts the weights at every step.
    """
    if client is not None and sink is not None:
      raise ValueError("an Actor writes its unrolls to Reverb (client) or "
                       "to an in-process sink, not both: pass one.")
    if unroll_length < 1:
      raise ValueError(f"unroll_length must be >= 1, given {unroll_length}.")
    if envs.autoreset_mode != gym.vector.AutoresetMode.SAME_STEP:
      raise ValueError("the actor needs a vector env with same-step "
                       "autoreset (i2a.environments.make_vector_env), given "
                       f"{envs.autoreset_mode}.")
    check_unrolls_per_item(unrolls_per_item)
    if envs.num_envs % unrolls_per_item:
      raise ValueError(f"an actor of {envs.num_envs} environments writes "
                       "items of a number of unrolls that divides "
                       f"{envs.num_envs}, given unrolls_per_item="
                       f"{unrolls_per_item}.")
    self.network = network
    self.unroll_length = unroll_length
    self.unrolls_per_item = unrolls_per_item
    self._envs = envs
    self._client = client
    self._sink = sink
    self._variable_client = variable_client
    self._table = table
    self._greedy = greedy
    self._rng = np.random.default_rng(seed)
    self._writer: Optional[reverb.TrajectoryWriter] = None
    self.num_envs = envs.num_envs
    self._weight_copies: Optional[precision.WeightCopies] = None
    self._copied_updates = -1  # the client's `updates` the copies hold
    self.use_weight_copies(weight_copies)
    observations, _ = envs.reset(seed=seed)
    self._windows = FrameWindows(observations, network.window_offsets)
    # The model's encodings of the frame history, where the network keeps
    # them (each frame encoded once: agents/base.py ContextEncodings).
    self._context = network.context_cache(self._windows.history)
    self._returns = np.zeros(self.num_envs)
    self._lengths = np.zeros(self.num_envs, np.int64)
    self.env_steps = 0  # steps over all envs, since this actor started
    self.unrolls = 0
    self._side_spec = network.side_input_spec()
    # The side inputs of the current windows, computed for the last window
    # of an unroll and reused as the first of the next (same env states).
    self._side_cache: Optional[Dict[str, np.ndarray]] = None

  @property
  def windows(self) -> np.ndarray:
    """uint8 [N, k, H, W, C]: what the policy sees next."""
    return self._windows.frames

  @property
  def environments(self) -> Optional[List[gym.Env]]:
    """The N environments, where this process holds them (a SyncVectorEnv's;
    an async one's live in worker processes: None)."""
    envs = getattr(self._envs, "envs", None)
    return None if envs is None else list(envs)

  def policy_logits(self, windows: np.ndarray,
                    side_inputs: Optional[Dict[str, np.ndarray]] = None
                    ) -> np.ndarray:
    return self.network.policy_logits(windows, side_inputs)  # [N, A]

  def _act(self) -> Tuple[np.ndarray, Optional[Dict[str, np.ndarray]]]:
    """The policy logits [N, A] of the current windows and their side
    inputs: one `network.act` call, or, for the window an unroll starts
    with, the side inputs the last unroll computed (the same environment
    states) and the logits under the newly pulled weights."""
    if not self._side_spec or self._side_cache is not None:
      side = self._current_side_inputs()
      return self.policy_logits(self._windows.frames, side), side
    logits, self._side_cache = self.network.act(
        self._windows.frames, self.environments, self._context)
    return logits, self._side_cache

  def _current_side_inputs(self) -> Optional[Dict[str, np.ndarray]]:
    """The side inputs of the current windows ({name: [N, ...]}), or None
    for a network without any."""
    if not self._side_spec:
      return None
    if self._side_cache is None:
      self._side_cache = self.network.side_inputs(
          self._windows.frames, self.environments, self._context)
    return self._side_cache

  def update(self) -> None:
    """Pulls the learner's newest weights (if there is a variable client)."""
    if self._variable_client is not None:
      self._variable_client.update()

  def use_weight_copies(self, on: bool) -> None:
    """Acts on bfloat16 copies of the weights under 'bf16' (on, with a
    variable client: the frozen envmodel's copied once, now, the learnable
    weights again after each pull, `_refresh_copies`), or on the weights
    (off: the rewrite casts them at every step)."""
    on = on and self._variable_client is not None
    if on and self._weight_copies is None:
      self._weight_copies = precision.WeightCopies(
          self.network.variables, refreshed=self.network.learnable_variables)
    self._copies_on = on
    self.network.read_weight_copies(self._weight_copies if on else None)

  def _refresh_copies(self) -> None:
    """Brings the bfloat16 weight copies up to the weights the variable
    client assigned last (whoever called its `update`), under 'bf16'."""
    if (self._copies_on
        and self._copied_updates != self._variable_client.updates
        and precision.current() == "bf16"):
      self._weight_copies.refresh()
      self._copied_updates = self._variable_client.updates

  def unroll(self, pull: bool = True
             ) -> Tuple[Dict[str, np.ndarray], List[Episode]]:
    """Runs n steps on every env; writes their unrolls (`write_unrolls`).

    pull: first pull the learner's newest weights (`update`); False acts on
    the weights held (a caller that pulled them itself, e.g. the embedded
    loop acting beside the learner's step: i2a/run/train.py).
    Returns the unrolls as a batch ({field: [N, ...]}, unroll_signature) and
    the episodes that finished during them.
    """
    if pull:
      self.update()
    self._refresh_copies()  # the weights change between unrolls only
    n, num_envs = self.unroll_length, self.num_envs
    windows = self._windows.frames
    batch = {
        "observation": np.empty((num_envs, n + 1) + windows.shape[1:],
                                np.uint8),
        "action": np.empty((num_envs, n), np.int32),
        "reward": np.empty((num_envs, n), np.float32),
        "discount": np.empty((num_envs, n), np.float32),
        "behaviour_logits": None,
    }
    for name, spec in self._side_spec.items():
      batch[name] = np.empty((num_envs, n + 1, *spec.shape),
                             spec.dtype.as_numpy_dtype)
    logits_steps = []
    finished: List[Episode] = []
    for t in range(n):
      batch["observation"][:, t] = self._windows.frames
      logits, side = self._act()  # [N, A], {name: [N, ...]}
      for name in self._side_spec:
        batch[name][:, t] = side[name]
      actions = sample_actions(logits, self._rng, self._greedy)  # [N]
      observations, rewards, terminated, truncated, _ = self._envs.step(
          actions)
      done = np.logical_or(terminated, truncated)  # [N]
      batch["action"][:, t] = actions
      batch["reward"][:, t] = rewards
      batch["discount"][:, t] = np.where(terminated, 0.0, 1.0)
      logits_steps.append(logits.astype(np.float32))
      self._returns += rewards
      self._lengths += 1
      for i in np.flatnonzero(done):
        finished.append(Episode(float(self._returns[i]),
                                int(self._lengths[i]), bool(terminated[i])))
        self._returns[i], self._lengths[i] = 0.0, 0
      self._windows.push(observations, done)
      if self._context is not None:
        self._context.advance(done)
      self._side_cache = None  # the environments moved on
    batch["observation"][:, n] = self._windows.frames
    side = self._current_side_inputs()  # kept for the next unroll's o_0
    for name in self._side_spec:
      batch[name][:, n] = side[name]
    batch["behaviour_logits"] = np.stack(logits_steps, axis=1)  # [N, n, A]
    self.env_steps += n * num_envs
    self.unrolls += 1
    if self._sink is not None:
      self._sink.put(batch)
    elif self._client is not None:
      self._write(batch)
    return batch, finished

  def _write(self, batch: Dict[str, np.ndarray]) -> None:
    if self._writer is None:
      self._writer = self._client.trajectory_writer(num_keep_alive_refs=1)
    write_unrolls(self._writer, self._table, batch, self.unrolls_per_item)

  # -- Checkpointing ---------------------------------------------------------

  def get_state(self) -> Dict[str, Any]:
    """Everything needed to continue exactly where this actor is (picklable).

    The environments are pickled with it (MiniPacman and ALE envs both
    pickle); an env that cannot be pickled is left out and `set_state`
    keeps the freshly reset one (the resumed run is then not bit-exact).
    """
    try:
      envs = pickle.dumps(self._envs)
    except (TypeError, pickle.PicklingError, AttributeError) as e:
      logging.warning("the actor's environments cannot be pickled (%s): a "
                      "resumed run restarts their episodes.", e)
      envs = None
    return dict(envs=envs, history=self._windows.history.copy(),
                side_cache=self._side_cache,
                context=(None if self._context is None
                         else self._context.get_state()),
                network_generators=[generator.state.numpy() for generator
                                    in random_generators(self.network)],
                rng=self._rng.bit_generator.state,
                returns=self._returns.copy(), lengths=self._lengths.copy(),
                env_steps=self.env_steps, unrolls=self.unrolls)

  def set_state(self, state: Dict[str, Any]) -> None:
    if state["envs"] is not None:
      envs = pickle.loads(state["envs"])
      if envs.num_envs != self.num_envs:
        raise ValueError(f"the saved actor ran {envs.num_envs} environments, "
                         f"this one runs {self.num_envs}.")
      self._envs.close()
      self._envs = envs
      # Actors saved before window offsets kept their (consecutive) window.
      history = np.array(state.get("history", state.get("windows")))
      if history.shape != self._windows.history.shape:
        raise ValueError(
            f"the saved actor kept frame histories of shape {history.shape}, "
            f"this one keeps {self._windows.history.shape}: a network with "
            "other window offsets.")
      self._windows.history = history
      if self._context is not None:
        if state.get("context") is not None:
          self._context.set_state(state["context"])
        else:  # an actor saved before the cache: encode its history
          self._context = self.network.context_cache(history)
      self._returns = np.array(state["returns"])
      self._lengths = np.array(state["lengths"])
      self._side_cache = state.get("side_cache")
    else:
      self._side_cache = None
    self._rng.bit_generator.state = state["rng"]
    generators = random_generators(self.network)
    saved = state.get("network_generators")
    if saved is None:  # an actor saved before generators were kept
      saved = [generator.state.numpy() for generator in generators]
    if len(saved) != len(generators):
      raise ValueError(f"the saved actor's network had {len(saved)} random "
                       f"generators, this one has {len(generators)}: a "
                       "different network.")
    for generator, value in zip(generators, saved):
      generator.state.assign(value)
    self.env_steps = int(state["env_steps"])
    self.unrolls = int(state["unrolls"])

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
      self._writer = None
    self._envs.close()
