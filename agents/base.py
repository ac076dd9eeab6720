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
from typing import Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import compiled


class NetworkOutput(NamedTuple):
  policy_logits: tf.Tensor  # float32 [B, A]
  value: tf.Tensor  # float32 [B]
  extras: Dict[str, tf.Tensor]  # anything auxiliary_loss needs, [B, ...]


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

  def side_inputs(self, windows: np.ndarray,
                  envs: Optional[Sequence[object]]) -> Dict[str, np.ndarray]:
    """The side inputs [B, ...] of `windows` uint8 [B, k, H, W, C], from
    the B live environments that show them (only read, never stepped; None
    where the caller cannot reach them, e.g. an AsyncVectorEnv's); {} for
    a network without any."""
    if not self.side_input_spec():
      return {}
    raise NotImplementedError(
        f"{type(self).__name__} declares side inputs "
        f"{sorted(self.side_input_spec())} but does not compute them.")

  def act(self, windows: np.ndarray, envs: Optional[Sequence[object]]
          ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """One acting step: the policy logits float32 [B, A] of `windows` uint8
    [B, k, H, W, C] and their side inputs {name: [B, ...]} (the actor
    stores them with the unroll). Default: `side_inputs`, then the network
    in one tf.function; a network that can compute both in one graph
    overrides it (the I2A over a learned model: rollouts, encoder and heads
    in one call)."""
    side = self.side_inputs(windows, envs) if self.side_input_spec() else {}
    return self.policy_logits(windows, side), side

  def policy_logits(self, windows: np.ndarray,
                    side_inputs: Optional[Mapping[str, np.ndarray]] = None
                    ) -> np.ndarray:
    """float32 [B, A]: the policy logits of `windows` given their side
    inputs (numpy in and out), in one compiled call built on first use
    (agents/compiled.py: no tf.function dispatch per call)."""
    if getattr(self, "_policy_logits_fn", None) is None:
      self._policy_logits_fn = compiled.Compiled(
          lambda w, s: self(w, s or None).policy_logits)
    return self._policy_logits_fn(windows, dict(side_inputs or {})).numpy()

  def auxiliary_loss(self, output: NetworkOutput
                     ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """Extra loss terms (scalar) and their metrics; none by default."""
    del output
    return tf.constant(0.0), {}

  @property
  def learnable_variables(self) -> Tuple[tf.Variable, ...]:
    """The variables the learner updates (a frozen envmodel's are not)."""
    return self.trainable_variables
