"""The actor-critic network interface every agent in agents/ implements.

Data flow: actors (agents/acting.py) call the network on a window of each
environment's frames (`window_offsets`: the last `context_length`, or a
jumpy model's context c steps apart) to pick actions; the learner
(agents/learning.py) calls it on batches of unrolls read from the Reverb
`unrolls` queue and minimises the actor-critic loss plus the network's own
`auxiliary_loss` (e.g. the I2A's distillation loss). Networks are
feedforward over a window of frames: the I2A's LSTM reads imagined rollouts
within one step, not across time.

Side inputs: a network whose acting computes something the learner should
not (or cannot) compute again declares it in `side_input_spec()`: the
actor computes it per window with `side_inputs` (which may read the live
environments), passes it to the network when it acts and stores it with
each unroll window, and the learner passes the stored values back. The I2A
uses them for rollouts: the emulator oracle's (they start from environment
snapshots that frames cannot give) and, by default, a frozen model's when
no gradient has to pass through them. A2C has none.
"""

from __future__ import annotations

import abc
from typing import (Any, Callable, Dict, Mapping, NamedTuple, Optional,
                    Sequence, Tuple)

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import compiled
from envmodels import precision


class NetworkOutput(NamedTuple):
  policy_logits: tf.Tensor  # float32 [B, A]
  value: tf.Tensor  # float32 [B]
  extras: Dict[str, tf.Tensor]  # anything auxiliary_loss needs, [B, ...]


class ContextEncodings:
  """An actor's cache of its envmodel's encodings of recent frames.

  Where it sits: the actor (agents/acting.py) keeps one beside its frame
  windows when its network's model encodes context frames one by one
  (`ActorCriticNetwork.context_cache`; envmodels' `encodes_context_frames`).
  Each frame is then encoded once, when it is the newest frame of a window,
  instead of once per window it appears in (a state-space model's context
  of 3 frames: 3 times). The envmodel is frozen, so an encoding is a
  function of its frame alone.

  Slots are aligned with the actor's frame history (FrameWindows.history,
  offsets[0] + 1 frames per environment, in a ring here): `at_offsets(o)`
  gives the encodings of the frames seen o agent steps before the newest.
  After every frame push the actor calls `advance(new_episode)`: the
  newest slot waits for its encoding (`pending`), which the network fills
  (`fill`) when it acts or computes side inputs on that window. An
  environment that starts an episode has its history filled with its first
  frame (FrameWindows): `fresh` marks it, and `fill` writes the first
  frame's encoding into all its slots (the network uses it for the older
  context frames of that window too).
  """

  def __init__(self, history: np.ndarray):
    """history: float32 [N, L, ...], the encodings of the frame history,
    oldest first (all slots filled)."""
    self._history = np.array(history, np.float32)
    self._newest = self._history.shape[1] - 1  # ring index of offset 0
    self.fresh = np.zeros(len(self._history), bool)  # [N]
    self.pending = False

  @property
  def history(self) -> np.ndarray:
    """float32 [N, L, ...]: the encodings, oldest first."""
    return np.roll(self._history, -(self._newest + 1), axis=1)

  def at_offsets(self, offsets: Sequence[int]) -> np.ndarray:
    """float32 [N, len(offsets), ...]: the encodings of the frames seen
    `offsets` agent steps before the newest (each < L)."""
    length = self._history.shape[1]
    if any(not 0 <= o < length for o in offsets):
      raise ValueError(f"offsets must be in [0, {length}), given "
                       f"{tuple(offsets)}.")
    index = [(self._newest - o) % length for o in offsets]
    return self._history[:, index]

  def advance(self, new_episode: np.ndarray) -> None:
    """After a frame push: the newest slot now waits for its encoding;
    new_episode [N] bool: those environments start an episode."""
    self._newest = (self._newest + 1) % self._history.shape[1]
    self.fresh |= np.asarray(new_episode, bool)
    self.pending = True

  def fill(self, newest: np.ndarray) -> None:
    """newest float32 [N, ...]: the encodings of the windows' newest frames
    (into all slots of a `fresh` environment)."""
    self._history[:, self._newest] = newest
    for i in np.flatnonzero(self.fresh):
      self._history[i] = newest[i]
    self.fresh[:] = False
    self.pending = False

  def get_state(self) -> Dict[str, np.ndarray]:
    return dict(history=self.history, fresh=self.fresh.copy(),
                pending=np.array(self.pending))

  def set_state(self, state: Mapping[str, np.ndarray]) -> None:
    history = np.asarray(state["history"], np.float32)
    if history.shape != self._history.shape:
      raise ValueError(f"the saved context encodings have shape "
                       f"{history.shape}, this actor's {self._history.shape}:"
                       " another network or number of environments.")
    self._history = history.copy()
    self._newest = history.shape[1] - 1
    self.fresh = np.array(state["fresh"], bool)
    self.pending = bool(state["pending"])


class ActorCriticNetwork(snt.Module, abc.ABC):
  """pi(a | o_{t-k+1..t}) and V(o_{t-k+1..t}) from a window of k frames."""

  def __init__(self, num_actions: int, context_length: int,
               name: Optional[str] = None):
    super().__init__(name=name)
    if num_actions < 1 or context_length < 1:
      raise ValueError("num_actions and context_length must be >= 1, given "
                       f"{num_actions} and {context_length}.")
    self.num_actions = num_actions
    self.context_length = context_length

  @property
  def window_offsets(self) -> Tuple[int, ...]:
    """The frames of one observation window, oldest first: how many agent
    steps before the newest frame each was seen (strictly decreasing,
    ending in 0). The actor keeps offsets[0] + 1 frames per environment and
    passes these (agents/acting.py, FrameWindows). Default: the last
    `context_length` frames, (k - 1, ..., 1, 0); the I2A over a jumpy model
    adds its model's context, c steps apart."""
    return tuple(range(self.context_length - 1, -1, -1))

  @abc.abstractmethod
  def __call__(self, observations: tf.Tensor,
               side_inputs: Optional[Mapping[str, tf.Tensor]] = None
               ) -> NetworkOutput:
    """observations: uint8 [B, len(window_offsets), H, W, C] (oldest
    first); side_inputs: {name: [B, ...]} per side_input_spec() (None if
    empty)."""

  def side_input_spec(self) -> Dict[str, tf.TensorSpec]:
    """{name: spec of one window's side input (no batch axis)}; {} if the
    network reads frames only."""
    return {}

  def context_cache(self, history: np.ndarray) -> Optional[ContextEncodings]:
    """The cache of context-frame encodings an actor keeps beside its frame
    history uint8 [N, L, H, W, C] (FrameWindows.history), with every slot
    encoded; None (the default) for a network that encodes no frames one
    by one. The actor passes it to `act` and `side_inputs`."""
    del history
    return None

  def side_inputs(self, windows: np.ndarray,
                  envs: Optional[Sequence[object]],
                  context: Optional[ContextEncodings] = None
                  ) -> Dict[str, np.ndarray]:
    """The side inputs [B, ...] of `windows` uint8 [B, k, H, W, C], from
    the B live environments that show them (only read, never stepped; None
    where the caller cannot reach them, e.g. an AsyncVectorEnv's); {} for
    a network without any. context: the actor's cache (`context_cache`),
    whose newest slot the call fills."""
    if not self.side_input_spec():
      return {}
    raise NotImplementedError(
        f"{type(self).__name__} declares side inputs "
        f"{sorted(self.side_input_spec())} but does not compute them.")

  def act(self, windows: np.ndarray, envs: Optional[Sequence[object]],
          context: Optional[ContextEncodings] = None
          ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """One acting step: the policy logits float32 [B, A] of `windows` uint8
    [B, k, H, W, C] and their side inputs {name: [B, ...]} (the actor
    stores them with the unroll). Default: `side_inputs`, then the network
    in one tf.function; a network that can compute both in one graph
    overrides it (the I2A over a learned model: rollouts, encoder and heads
    in one call). context: the actor's cache of frame encodings
    (`context_cache`), whose newest slot the call fills."""
    side = (self.side_inputs(windows, envs, context)
            if self.side_input_spec() else {})
    return self.policy_logits(windows, side), side

  def policy_logits(self, windows: np.ndarray,
                    side_inputs: Optional[Mapping[str, np.ndarray]] = None
                    ) -> np.ndarray:
    """float32 [B, A]: the policy logits of `windows` given their side
    inputs (numpy in and out), in one compiled call built on first use
    (agents/compiled.py: no tf.function dispatch per call)."""
    if getattr(self, "_policy_logits_fn", None) is None:
      self._policy_logits_fn = self.acting_call(
          lambda w, s: self(w, s or None).policy_logits)
    return self._policy_logits_fn(windows, dict(side_inputs or {})).numpy()

  # -- Acting calls: compiled, reading the actor's weight copies -------------

  def acting_call(self, fn: Callable[..., Any]) -> compiled.Compiled:
    """`fn` as one of this network's compiled acting calls (no tf.function
    dispatch per call: agents/compiled.py), traced to read the bfloat16
    weight copies of `read_weight_copies` while they are in use."""
    return compiled.Compiled(fn, trace_scope=self._acting_scope)

  def read_weight_copies(self,
                         copies: Optional[precision.WeightCopies]) -> None:
    """Acting calls read `copies` (bfloat16 copies of this network's
    weights; None: the weights themselves) whenever the precision is
    'bf16'; the caller refreshes the copies whenever the weights change
    (agents/acting.py Actor: after each pull)."""
    self._weight_copies = copies

  def _acting_scope(self) -> Tuple[Any, Any]:
    copies = getattr(self, "_weight_copies", None)
    if copies is None or precision.current() != "bf16":
      return compiled.no_scope()
    return copies.key, copies.reading()

  def auxiliary_loss(self, output: NetworkOutput
                     ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """Extra loss terms (scalar) and their metrics; none by default."""
    del output
    return tf.constant(0.0), {}

  @property
  def learnable_variables(self) -> Tuple[tf.Variable, ...]:
    """The variables the learner updates (a frozen envmodel's are not)."""
    return self.trainable_variables
