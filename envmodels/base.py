"""The environment-model interface: what every envmodel kind provides.

Data flow: `i2a.pretrain` trains an `EnvModel` with `loss(batch)`; the trained
module is exported (`envmodels.export`) and loaded frozen by agents, which
only ever use this contract: `initial_state`, `step`, `render`, `rollout`,
`state_features`, `deterministic`, `tile_state`, optionally the context
encodings (`encodes_context_frames`, `encode_context_frames`,
`initial_state_from_encodings`) and, for a `LiveEnvModel`
(the emulator oracle), `initial_state_from_envs` / `release`. An agent never
asks for a model's class or kind name (docs/architecture.md).

Conventions (see README.md, "Sequences"):
  * A batch of sequences is a dict with
      observation uint8   [B, L, H, W, C]
      action      int32   [B, L, c]      (c = jump; action[:, i] is taken at
                                          observation[:, i])
      reward      float32 [B, L]         (reward[:, i] led to observation[:, i])
      discount    float32 [B, L]
    with L = context_length + T. The model sees observations [:, :k] as
    context (k = context_length) and predicts observations [:, k:] and
    rewards [:, k:] from actions [:, k-1:L-1].
  * One model step is one jumpy step: c primitive actions.
  * Actions come as int32 [B, c] (or [B] when c == 1), or as float32
    probabilities [B, c, A] (or [B, A] when c == 1), the relaxed query used by
    the learning-to-query rollout policy; both are encoded as a [B, c * A]
    vector tiled over the state's feature map.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import sonnet as snt
import tensorflow as tf

from envmodels import noise as noise_lib
from envmodels import precision as precision_lib

# Version of the export format (spec.json + variables). Bump on any change
# that an older `envmodels.load` could not read.
FORMAT_VERSION = 1

State = Any  # A nest of tensors, each with a leading batch axis.


@dataclasses.dataclass(frozen=True)
class EnvModelSpec:
  """What an agent needs to know about a model to use it."""
  kind: str
  observation_shape: Tuple[int, int, int]  # (H, W, C)
  num_actions: int  # primitive actions
  jump: int  # c: primitive actions per model step
  context_length: int  # number of context frames for `initial_state`
  action_free: bool = False
  version: int = FORMAT_VERSION

  def to_json(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, data: Dict[str, Any]) -> "EnvModelSpec":
    data = dict(data)
    data["observation_shape"] = tuple(data["observation_shape"])
    return cls(**data)


class StepOutput(NamedTuple):
  reward: tf.Tensor  # float32 [B]: expected reward of this (jumpy) step
  features: tf.Tensor  # float32 [B, h, w, d]: the abstract imagination


class Rollout(NamedTuple):
  features: tf.Tensor  # float32 [B, T, h, w, d]
  rewards: tf.Tensor  # float32 [B, T]
  frames: Optional[tf.Tensor]  # float32 [B, T, H, W, C] in [0, 1], or None


class LossOutput(NamedTuple):
  loss: tf.Tensor  # scalar, minimised by the trainer
  metrics: Dict[str, tf.Tensor]  # scalars for logging (nats, KL, ...)


# Value checks (docs/envmodels.md, "What is validated where"): on unless
# `value_checks(False)` is active while a function is traced or run eagerly
# (benchmarks/rollout_speed.py measures their cost that way; nothing else
# turns them off).
_VALUE_CHECKS = [True]
# How far the rows of relaxed actions may sum from 1 (and entries fall
# below 0): rounding of a float32 softmax or straight-through one-hot is far
# smaller; 16-bit probabilities round to ~1e-2, whether they come as a
# 16-bit tensor or as float32 whose graph the mixed-precision rewrite
# computes in bf16/fp16 (envmodels/precision.py: any precision but fp32
# when the check is traced).
RELAXED_TOLERANCE = 1e-3
RELAXED_TOLERANCE_16_BIT = 2e-2


@contextlib.contextmanager
def value_checks(enabled: bool) -> Iterator[None]:
  """Turns the API's value checks on or off for calls and traces inside the
  block (shape and dtype checks always run). For measuring their cost only:
  without them, bad values silently give wrong outputs."""
  previous = _VALUE_CHECKS[0]
  _VALUE_CHECKS[0] = bool(enabled)
  try:
    yield
  finally:
    _VALUE_CHECKS[0] = previous


def check_values(condition: tf.Tensor, message: List[Any]) -> List[tf.Operation]:
  """Checks a scalar bool `condition` on values, with one clear message.

  message: strings and scalar tensors (the given values), joined in order.
  Eagerly a false condition raises ValueError with the joined text; inside
  tf.function it returns an assertion op that raises
  tf.errors.InvalidArgumentError with the same pieces when it runs (the
  caller puts its outputs under tf.control_dependencies of the ops).
  Returns [] when checks are off or the condition holds eagerly.
  """
  if not _VALUE_CHECKS[0]:
    return []
  if tf.executing_eagerly():
    if not bool(condition):
      raise ValueError("".join(
          piece if isinstance(piece, str) else str(_plain(piece))
          for piece in message))
    return []
  return [tf.debugging.Assert(condition, message, summarize=8)]


def _plain(value: Any) -> Any:
  value = value.numpy() if hasattr(value, "numpy") else value
  return value.item() if hasattr(value, "item") else value


def _check_batch_size(what: str, tensor: tf.Tensor) -> List[tf.Operation]:
  """B > 0 for `tensor` [B, ...]: ValueError for a static B = 0, an
  assertion (check_values) when B is only known at run time."""
  if tensor.shape.rank is not None and tensor.shape[0] is not None:
    if tensor.shape[0] == 0:
      raise ValueError(f"{what}: expected a batch of B > 0 rows, given "
                       f"shape {tensor.shape.as_list()}. Pass at least one "
                       "row.")
    return []
  return check_values(tf.shape(tensor)[0] > 0, [
      f"{what}: expected a batch of B > 0 rows, given B = ",
      tf.shape(tensor)[0], ". Pass at least one row."])


def _after(checks: List[tf.Operation], tensor: tf.Tensor) -> tf.Tensor:
  """`tensor`, computed only after `checks` passed (identity if none)."""
  if not checks:
    return tensor
  with tf.control_dependencies(checks):
    return tf.identity(tensor)


def tile_state(state: State, multiples: int) -> State:
  """[B, ...] -> [B * K, ...] for every tensor of a state nest; row b * K + k
  is a copy of row b (K = multiples >= 1). The one implementation behind
  `EnvModel.tile_state`."""
  if isinstance(multiples, bool) or not isinstance(multiples, int) or (
      multiples < 1):
    raise ValueError(f"tile_state multiples must be a positive int, given "
                     f"{multiples!r}.")
  return tf.nest.map_structure(lambda x: tf.repeat(x, multiples, axis=0),
                               state)


def _shape_error(what: str, expected: str, given: tf.TensorShape) -> ValueError:
  return ValueError(
      f"{what}: expected shape {expected}, given {given.as_list()}. "
      "Check the model's spec (envmodels.load(...).spec).")


def check_frames_dtype(what: str, frames: tf.Tensor) -> None:
  """Frames are raw uint8 (0-255); models preprocess them themselves."""
  if frames.dtype != tf.uint8:
    raise ValueError(
        f"{what}: expected uint8 frames (0-255), given {frames.dtype.name}. "
        "Pass the raw frames the environment gives; float frames in [0, 1] "
        "would be read as 0-255 (there is no float path).")


def rollout_length(actions: tf.Tensor) -> int:
  """T of rollout actions [B, T, ...]: static and >= 1 (ValueError if not)."""
  num_steps = actions.shape[1]
  if num_steps is None:
    raise ValueError("rollout actions need a static T axis (axis 1), given "
                     f"{actions.shape.as_list()}.")
  if num_steps < 1:
    raise ValueError("rollout actions: expected T >= 1 steps (axis 1), given "
                     f"shape {actions.shape.as_list()}. Pass at least one "
                     "step of actions.")
  return num_steps


class EnvModel(snt.Module, abc.ABC):
  """Base class of every environment model kind.

  Subclasses implement `_initial_state`, `_step`, `_render` and `loss`; this
  class validates shapes and dtypes (in eager and tf.function code alike,
  from static shapes) and values (uint8 frames, action indices in [0, A),
  relaxed actions that are probability vectors, B > 0, T >= 1: ValueError
  eagerly, InvalidArgumentError with the same text inside tf.function; see
  docs/envmodels.md, "What is validated where") and encodes actions.
  """

  # False for models that are not trained (the emulator oracle): suites
  # over learned kinds, pretraining and export skip them.
  learned = True

  def __init__(self, spec: EnvModelSpec, seed: int = 0,
               name: Optional[str] = None):
    super().__init__(name=name)
    if spec.jump < 1:
      raise ValueError(f"jump must be >= 1, given {spec.jump}.")
    if spec.context_length < 1:
      raise ValueError(
          f"context_length must be >= 1, given {spec.context_length}.")
    height, width, _ = spec.observation_shape
    if height % 8 or width % 8:
      raise ValueError(
          f"observation height and width must be multiples of 8, given "
          f"{spec.observation_shape}; pick a protocol observation size "
          "such as (104, 80) or (200, 160).")
    self.spec = spec
    self._rng = tf.random.Generator.from_seed(seed)
    # Set only while `step` runs with noise keys (sample_normal reads them).
    self._noise_keys: Optional[tf.Tensor] = None
    self._noise_draws = 0

  # -- Public API (the envmodels contract) ---------------------------------

  def initial_state(self, observations: tf.Tensor) -> State:
    """uint8 [B, context_length, H, W, C] -> state."""
    return self._initial_state(self._checked_frames(
        "initial_state observations", observations,
        (self.spec.context_length,) + tuple(self.spec.observation_shape)))

  def _checked_frames(self, what: str, frames: Any,
                      expected: Tuple[int, ...]) -> tf.Tensor:
    """uint8 frames [B, *expected] with B > 0, or the contract's errors."""
    frames = tf.convert_to_tensor(frames)
    if (frames.shape.rank != 1 + len(expected) or
        not frames.shape[1:].is_compatible_with(expected)):
      raise _shape_error(what, f"[B, {', '.join(map(str, expected))}]",
                         frames.shape)
    check_frames_dtype(what, frames)
    return _after(_check_batch_size(what, frames), frames)

  # -- Context encodings (optional; docs/envmodels.md, "The contract") ----

  @property
  def encodes_context_frames(self) -> bool:
    """Whether the initial state is a function of per-frame encodings
    (`encode_context_frames`, then `initial_state_from_encodings`): an
    actor then encodes each frame once and keeps the encodings of the
    older context frames (agents/base.py ContextEncodings) instead of
    encoding all context_length frames at every step. Default False."""
    return False

  def encode_context_frames(self, frames: tf.Tensor) -> tf.Tensor:
    """uint8 [B, H, W, C] -> float32 [B, ...]: one context frame's encoding,
    the same for a frame whatever its place in the context; for models
    with `encodes_context_frames`."""
    self._check_encodes_context("encode_context_frames")
    return self._encode_context_frames(self._checked_frames(
        "encode_context_frames frames", frames,
        tuple(self.spec.observation_shape)))

  def initial_state_from_encodings(self, encodings: tf.Tensor) -> State:
    """float32 [B, context_length, ...] (encode_context_frames of the
    context frames, oldest first) -> the state initial_state gives for
    those frames."""
    encodings = tf.convert_to_tensor(encodings)
    self._check_encodes_context("initial_state_from_encodings")
    k = self.spec.context_length
    if encodings.shape.rank is None or encodings.shape.rank < 2 or (
        encodings.shape[1] is not None and encodings.shape[1] != k):
      raise _shape_error("initial_state_from_encodings encodings",
                         f"[B, {k}, ...] (context_length = {k})",
                         encodings.shape)
    return self._initial_state_from_encodings(encodings)

  def _check_encodes_context(self, what: str) -> None:
    if not self.encodes_context_frames:
      raise NotImplementedError(
          f"the {self.spec.kind!r} model does not encode its context frames "
          f"one by one ({what}): use initial_state(observations); check "
          "model.encodes_context_frames first.")

  def _encode_context_frames(self, frames: tf.Tensor) -> tf.Tensor:
    raise NotImplementedError(
        f"{type(self).__name__} says encodes_context_frames but does not "
        "implement _encode_context_frames (docs/architecture.md, \"A new "
        "model kind\").")

  def _initial_state_from_encodings(self, encodings: tf.Tensor) -> State:
    raise NotImplementedError(
        f"{type(self).__name__} says encodes_context_frames but does not "
        "implement _initial_state_from_encodings (docs/architecture.md, "
        "\"A new model kind\").")

  def step(self, state: State, actions: tf.Tensor,
           noise: Optional[tf.Tensor] = None) -> Tuple[State, StepOutput]:
    """One model step (c primitive actions): (state, actions) -> (state, out).

    noise: optional int32/uint32 [B, 2] keys, one per row. With them the
    step's random draws (a stochastic model's z) are a function of each
    row's key alone (envmodels/noise.py): the same keys reproduce the same
    step row by row, whatever the batch around it (an agent's actor and
    learner batch differently). None: the model's own seeded generator.
    """
    encoded = self.encode_actions(actions)
    if noise is None:
      return self._step(state, encoded)
    keys = noise_lib.as_keys(noise)
    previous = self._noise_keys, self._noise_draws
    self._noise_keys, self._noise_draws = keys, 0
    try:
      return self._step(state, encoded)
    finally:
      self._noise_keys, self._noise_draws = previous

  def render(self, state: State) -> tf.Tensor:
    """state -> float32 [B, H, W, C] in [0, 1] (the decoder's mean)."""
    return self._render(state)

  def rollout(self, state: State, actions: tf.Tensor,
              render: bool = False) -> Rollout:
    """Runs T steps: actions [B, T, c] int32 or [B, T, c, A] float32.

    Returns features [B, T, ...], rewards [B, T] and, with render=True,
    frames [B, T, H, W, C].
    """
    actions = tf.convert_to_tensor(actions)
    if actions.shape.rank is None or actions.shape.rank < 2:
      raise _shape_error("rollout actions", "[B, T, c] or [B, T, c, A]",
                         actions.shape)
    num_steps = rollout_length(actions)
    features, rewards, frames = [], [], []
    for t in range(num_steps):
      state, out = self.step(state, actions[:, t])
      features.append(out.features)
      rewards.append(out.reward)
      if render:
        frames.append(self.render(state))
    return Rollout(
        features=tf.stack(features, axis=1),
        rewards=tf.stack(rewards, axis=1),
        frames=tf.stack(frames, axis=1) if render else None)

  @abc.abstractmethod
  def loss(self, batch: Dict[str, tf.Tensor], **knobs: Any) -> LossOutput:
    """Training loss on a batch of sequences (see module docstring)."""

  @abc.abstractmethod
  def state_features(self, state: State) -> tf.Tensor:
    """The abstract features float32 [B, h, w, d] of a model state: what
    `StepOutput.features` gave for a state reached by a step, and for an
    initial state (s_t|t) the same kind of map (an agent's encoder reads
    both: the distillation target, the copy baseline)."""

  @property
  @abc.abstractmethod
  def deterministic(self) -> bool:
    """Whether `step`'s outputs are a function of (state, actions) alone:
    steps with different noise keys give equal outputs iff True (a planner
    then needs one sample per candidate)."""

  def tile_state(self, state: State, multiples: int) -> State:
    """Repeats every tensor of a state nest: [B, ...] -> [B * K, ...], row
    b * K + k a copy of row b (K = multiples)."""
    return tile_state(state, multiples)

  @property
  def uses_actions(self) -> bool:
    """Whether step outputs depend on the actions (so gradients reach
    relaxed actions). False for action-free models; kinds that ignore
    actions by design (the VAE baseline) override it."""
    return not self.spec.action_free

  @classmethod
  def tiny_hyperparameters(cls) -> Dict[str, Any]:
    """Hyperparameters with tiny sizes, for tests and debugging (the
    conformance suite builds every kind with them). Default: {}."""
    return {}

  def create_variables(self) -> None:
    """Creates every (lazy Sonnet) variable by running the model once.

    Runs initial_state, step, render and loss on zero inputs of the spec's
    shapes (batch 1, T = 1), so that a checkpoint can be restored into a
    freshly built model (`envmodels.load`). The random generator's state is
    put back afterwards. Kinds whose variables need other calls override it.
    """
    height, width, channels = self.spec.observation_shape
    k, c = self.spec.context_length, self.spec.jump
    rng_state = tf.identity(self._rng.state)
    state = self.initial_state(
        tf.zeros([1, k, height, width, channels], tf.uint8))
    state, _ = self.step(state, tf.zeros([1, c], tf.int32))
    self.render(state)
    length = k + 1
    self.loss({
        "observation": tf.zeros([1, length, height, width, channels],
                                tf.uint8),
        "action": tf.zeros([1, length, c], tf.int32),
        "reward": tf.zeros([1, length], tf.float32),
        "discount": tf.ones([1, length], tf.float32),
    })
    self._rng.state.assign(rng_state)

  def check_batch(self, batch: Dict[str, tf.Tensor]) -> int:
    """Validates a training batch (module docstring) and returns T.

    Needs static sequence length L = context_length + T (T >= 1); the batch
    axis may be None (tf.function with TensorSpec(None, ...)).
    """
    missing = [key for key in ("observation", "action", "reward")
               if key not in batch]
    if missing:
      raise ValueError(f"loss batch: missing keys {missing}; expected a dict "
                       "with 'observation', 'action', 'reward' (and "
                       f"'discount'), given keys {sorted(batch)}.")
    k, c = self.spec.context_length, self.spec.jump
    observation = tf.convert_to_tensor(batch["observation"])
    length = observation.shape[1] if observation.shape.rank == 5 else None
    frame = tuple(self.spec.observation_shape)
    if (observation.shape.rank != 5 or length is None or length <= k or
        not observation.shape[2:].is_compatible_with(frame)):
      raise _shape_error(
          "loss batch['observation']",
          f"[B, L, {', '.join(map(str, frame))}] with static L = "
          f"context_length + T > {k}", observation.shape)
    check_frames_dtype("loss batch['observation']", observation)
    action = tf.convert_to_tensor(batch["action"])
    if (action.shape.rank != 3 or
        not action.shape[1:].is_compatible_with([length, c])):
      raise _shape_error("loss batch['action']", f"[B, {length}, {c}]",
                         action.shape)
    if not action.dtype.is_integer:
      raise ValueError("loss batch['action']: expected int32 action indices, "
                       f"given {action.dtype.name}.")
    reward = tf.convert_to_tensor(batch["reward"])
    if (reward.shape.rank != 2 or
        not reward.shape[1:].is_compatible_with([length])):
      raise _shape_error("loss batch['reward']", f"[B, {length}]",
                         reward.shape)
    return length - k

  # -- Helpers for subclasses ------------------------------------------------

  @property
  def action_size(self) -> int:
    """Width of the encoded action vector: c * A (0 when action_free)."""
    if self.spec.action_free:
      return 0
    return self.spec.jump * self.spec.num_actions

  def encode_actions(self, actions: tf.Tensor) -> tf.Tensor:
    """int [B, c] / [B] or float [B, c, A] / [B, A] -> float32 [B, c * A].

    For action-free models the actions are checked and ignored ([B, 0]).
    """
    actions = tf.convert_to_tensor(actions)
    c, num_actions = self.spec.jump, self.spec.num_actions
    if actions.dtype.is_integer:
      if c == 1 and actions.shape.rank == 1:
        actions = actions[:, None]
      if actions.shape.rank != 2 or not actions.shape[1:].is_compatible_with(
          [c]):
        raise _shape_error("step actions (int)", f"[B, {c}]" +
                           (" or [B]" if c == 1 else ""), actions.shape)
      checks = _check_batch_size("step actions (int)", actions)
      checks += self._check_int_actions(actions)
      encoded = tf.one_hot(_after(checks, actions), num_actions,
                           dtype=tf.float32)
    elif actions.dtype.is_floating:
      if c == 1 and actions.shape.rank == 2:
        actions = actions[:, None]
      if actions.shape.rank != 3 or not actions.shape[1:].is_compatible_with(
          [c, num_actions]):
        raise _shape_error("step actions (probabilities)",
                           f"[B, {c}, {num_actions}]" +
                           (f" or [B, {num_actions}]" if c == 1 else ""),
                           actions.shape)
      checks = _check_batch_size("step actions (probabilities)", actions)
      checks += self._check_relaxed_actions(actions)
      encoded = tf.cast(_after(checks, actions), tf.float32)
    else:
      raise ValueError(
          f"step actions: expected int action indices [B, {c}] or float "
          f"probabilities [B, {c}, {num_actions}], given dtype "
          f"{actions.dtype.name}.")
    batch = tf.shape(encoded)[0]
    if self.spec.action_free:
      return tf.zeros([batch, 0], tf.float32)
    return tf.reshape(encoded, [batch, c * num_actions])

  def _check_int_actions(self, actions: tf.Tensor) -> List[tf.Operation]:
    """Indices of int [B, c] actions in [0, num_actions)."""
    if actions.shape.num_elements() == 0:
      return []
    num_actions = self.spec.num_actions
    low, high = tf.reduce_min(actions), tf.reduce_max(actions)
    return check_values(
        tf.logical_and(low >= 0, high < num_actions),
        [f"step actions (int): expected action indices in [0, {num_actions})"
         f" (spec.num_actions = {num_actions}); given out-of-range values "
         "(min ", low, ", max ", high, "). Pass indices of primitive "
         "actions, or probabilities [B, c, A] for relaxed actions."])

  def _check_relaxed_actions(self, actions: tf.Tensor) -> List[tf.Operation]:
    """Relaxed float [B, c, A] actions: finite, >= 0, rows summing to 1."""
    if actions.shape.num_elements() == 0:
      return []
    reduced = actions.dtype.size <= 2 or precision_lib.current() != "fp32"
    tolerance = RELAXED_TOLERANCE_16_BIT if reduced else RELAXED_TOLERANCE
    values = tf.cast(actions, tf.float32)
    finite = tf.math.is_finite(values)
    nonfinite = tf.reduce_sum(tf.cast(tf.logical_not(finite), tf.int32))
    values = tf.where(finite, values, tf.zeros_like(values))  # for min, sum
    low = tf.reduce_min(values)
    error = tf.reduce_max(tf.abs(tf.reduce_sum(values, axis=-1) - 1.0))
    return check_values(
        (nonfinite == 0) & (low >= -tolerance) & (error <= tolerance),
        [f"step actions (probabilities): expected probabilities over the "
         f"{self.spec.num_actions} actions: finite, >= 0, each [c] row "
         f"summing to 1 within {tolerance:g}; given ", nonfinite,
         " NaN/infinite entries, smallest finite entry ", low,
         ", rows off 1 by up to ", error, ". Pass a softmax of finite "
         "logits (or int action indices)."])

  def sample_normal(self, shape: tf.Tensor) -> tf.Tensor:
    """Standard normal noise of `shape` [B, ...]: from the step's noise keys
    while `step` runs with them (each call a new draw), else from the
    model's own seeded generator."""
    if self._noise_keys is None:
      return self._rng.normal(shape)
    counter, self._noise_draws = self._noise_draws, self._noise_draws + 1
    return noise_lib.normal(self._noise_keys, tf.convert_to_tensor(shape)[1:],
                            counter)

  def sample_gaussian(self, mean: tf.Tensor, std: tf.Tensor) -> tf.Tensor:
    """A reparameterised sample mean + std * eps of N(mean, std^2) [B, ...],
    eps as `sample_normal(tf.shape(mean))` draws it; with the step's noise
    keys the draw and the affine map run as one fused kernel
    (noise.affine_normal: the normals are never materialised)."""
    if self._noise_keys is None:
      return mean + std * self._rng.normal(tf.shape(mean))
    counter, self._noise_draws = self._noise_draws, self._noise_draws + 1
    return noise_lib.affine_normal(self._noise_keys, mean, std, counter)

  def sample_softplus_gaussian(self, mean: tf.Tensor, raw_std: tf.Tensor,
                               min_std: float) -> tf.Tensor:
    """`sample_gaussian(mean, softplus(raw_std) + min_std)`, the same draw;
    with the step's noise keys the softplus runs in the fused kernel too
    (noise.softplus_normal)."""
    if self._noise_keys is None:
      return self.sample_gaussian(mean, tf.nn.softplus(raw_std) + min_std)
    counter, self._noise_draws = self._noise_draws, self._noise_draws + 1
    return noise_lib.softplus_normal(self._noise_keys, mean, raw_std, min_std,
                                     counter)

  def reseed(self, seed: int) -> None:
    """Resets the model's random generator (for reproducible rollouts)."""
    self._rng.reset_from_seed(seed)

  @abc.abstractmethod
  def _initial_state(self, observations: tf.Tensor) -> State:
    ...

  @abc.abstractmethod
  def _step(self, state: State,
            encoded_actions: tf.Tensor) -> Tuple[State, StepOutput]:
    ...

  @abc.abstractmethod
  def _render(self, state: State) -> tf.Tensor:
    ...


class LiveEnvModel(EnvModel):
  """A model kind that starts from live environments, not from frames (the
  emulator oracle, envmodels/oracle.py). Ask with
  `isinstance(model, LiveEnvModel)`: agents snapshot their environments
  into its state (`initial_state_from_envs`), free the snapshots after use
  (`release`), and never call `initial_state(frames)`, which raises. Such a
  model is not trained or exported (`learned` is False)."""

  learned = False

  def initial_state(self, observations: tf.Tensor) -> State:
    raise ValueError(
        f"the {self.spec.kind!r} model cannot start from observations: it "
        "starts from live environments. Snapshot them instead: "
        "model.initial_state_from_envs(envs).")

  def _initial_state(self, observations: tf.Tensor) -> State:
    return self.initial_state(observations)

  @abc.abstractmethod
  def initial_state_from_envs(self, envs: Any,
                              observations: Optional[Any] = None) -> State:
    """The state of B live environments (only read, never stepped);
    observations: optional uint8 [B, H, W, C], the frames the agent sees."""

  def release(self, state: State) -> None:
    """Frees what `state` holds (snapshots); works eagerly and inside
    tf.function. Default: nothing to free."""
    del state
