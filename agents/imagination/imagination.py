"""The I2A's model-based path: imagination core and rollout encoder.

Where it sits in the data flow: the I2A network (networks.py) calls the
`ImaginationCore` on each window of frames (in the actor's and the learner's
tf.function): the frozen envmodel gives the initial state s_t|t from the
context frames, then K rollouts of depth tau are run, batched on ONE batch
axis [B * K] (row b * K + k is rollout k of sample b), one `model.step` per
depth step; where each op runs on one thread, contiguous slices of those
rows run as independent chains side by side, the same arithmetic per row
(row branches, envmodels/branches.py). The `RolloutEncoder` summarises
each rollout (a CNN per imagined step plus the predicted reward, read by an
LSTM from the LAST imagined step back to the FIRST, as in Weber et al.
2017), and the network concatenates the K summaries (the aggregator) with
the model-free features.
`to_side_inputs` / `from_side_inputs` convert rollouts to the form the
actor stores with its unrolls and back (networks.py, `learner_rollouts`).

Imaginations (config `imagination`):
  'abstract'  out.features, the model's abstract state (cheap; `render` is
              never called);
  'pixels'    model.render(state) after every step, summarised by a CNN
              with extra strided convolutions (Buesing et al.: "strengthen
              the summarizer").

Baselines that behave like models (same architecture and encoder compute):
  `CopyModel`          every imagination is the initial state: features of
                       s_t|t (abstract) or the last real frame (pixels),
                       reward 0. It does NOT spend the model's step compute
                       (nothing to compute); the agent's own compute (rollout
                       policy, encoder, LSTM over K x tau steps) is the same.
  `untrained_envmodel` the same kind, spec and hyperparameters, randomly
                       initialised, frozen by export and load.
  the emulator oracle  envmodels.oracle.OracleModel, a LiveEnvModel: the
                       initial state is passed in as `model_state` (it
                       cannot start from frames); in training its rollouts
                       are side inputs (networks.py).

Only the envmodel contract is used (envmodels/base.py): the features of
s_t|t come from `model.state_features`, the [B*K] batch from
`model.tile_state`, and whether the model starts from live environments
from `isinstance(model, envmodels.LiveEnvModel)`.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from typing import (Any, Dict, Mapping, NamedTuple, Optional, Sequence,
                    Tuple)

import numpy as np
import sonnet as snt
import tensorflow as tf

import envmodels
from envmodels import branches
from envmodels import noise
from agents.imagination import rollout_policies

IMAGINATIONS = ("abstract", "pixels")
# How the rollout encoder reads imagined rewards (RolloutEncoder).
REWARD_TRANSFORMS = ("symlog", "none")


def symlog(x: tf.Tensor) -> tf.Tensor:
  """sign(x) log(1 + |x|): bounded growth, sign and order kept."""
  return tf.sign(x) * tf.math.log1p(tf.abs(x))


# -- Baseline models ---------------------------------------------------------


class CopyState(NamedTuple):
  features: tf.Tensor  # float32 [B, h, w, d]: features of s_t|t
  frame: tf.Tensor  # float32 [B, H, W, C]: the last real frame, in [0, 1]


class CopyModel(envmodels.EnvModel):
  """The copy-model baseline: every imagined state equals the initial state.

  Wraps a (frozen) model for its initial state s_t|t; `step` returns the
  same state, its features and reward 0; `render` returns the last real
  context frame (the model "returns its input").
  """

  def __init__(self, model: envmodels.EnvModel):
    super().__init__(dataclasses.replace(model.spec, kind="copy"),
                     name="copy_model")
    self.inner = model

  @property
  def uses_actions(self) -> bool:
    return False

  deterministic = True  # every step returns its input

  def _initial_state(self, observations: tf.Tensor) -> CopyState:
    state = self.inner.initial_state(observations)
    frame = tf.cast(observations[:, -1], tf.float32) / 255.0  # [B, H, W, C]
    return CopyState(self.inner.state_features(state), frame)

  def _step(self, state: CopyState, encoded_actions: tf.Tensor
            ) -> Tuple[CopyState, envmodels.StepOutput]:
    reward = tf.zeros(tf.shape(state.features)[:1], tf.float32)  # [B]
    return state, envmodels.StepOutput(reward=reward, features=state.features)

  def _render(self, state: CopyState) -> tf.Tensor:
    return state.frame

  def state_features(self, state: CopyState) -> tf.Tensor:
    return state.features

  def loss(self, batch, **knobs):
    raise ValueError("the copy model is a baseline wrapper: it has no loss; "
                     "train the model it wraps instead.")


def untrained_envmodel(model: envmodels.EnvModel, seed: int = 0
                       ) -> envmodels.EnvModel:
  """A randomly initialised, frozen model of `model`'s kind, spec and
  hyperparameters (the untrained-model baseline), frozen by envmodels.export
  then envmodels.load (through a temporary directory).

  The weights are a function of `seed` alone (Sonnet's default
  initialisation drawn from a seeded generator: kernels
  TruncatedNormal(1 / sqrt(fan_in)), biases 0), so the actor's and the
  learner's copies, built apart, hold the same untrained model.
  """
  hyperparameters = getattr(model, "hyperparameters", None)
  if hyperparameters is None or not model.learned:
    raise ValueError(f"cannot rebuild a {type(model).__name__} untrained: "
                     "pass a learned envmodel (envmodels.load(EXPORT_DIR)).")
  fresh = envmodels.build(model.spec, seed=seed, **hyperparameters)
  fresh.create_variables()
  rng = tf.random.Generator.from_seed(seed)
  for variable in fresh.variables:  # a deterministic order
    if not variable.dtype.is_floating:
      continue
    if variable.shape.rank >= 2:  # kernels: [..., fan_in, out]
      fan_in = float(np.prod(variable.shape[:-1]))
      variable.assign(rng.truncated_normal(
          variable.shape, stddev=1.0 / math.sqrt(fan_in),
          dtype=variable.dtype))
    else:
      variable.assign(tf.zeros_like(variable))
  with tempfile.TemporaryDirectory(prefix="untrained_envmodel_") as tmp:
    return envmodels.load(envmodels.export(fresh, tmp + "/export"), seed=seed)


# -- Rollout encoder --------------------------------------------------------


class RolloutEncoder(snt.Module):
  """Summarises each rollout: [N, T, ...] imaginations and [N, T] rewards ->
  [N, lstm_size], the LSTM's output after reading step T-1, ..., 0.

  Per step: convs (3x3, `channels`, `strides`, relu) over the imagination,
  flattened, concatenated with the predicted reward after
  `reward_transform` (the `embed` features): 'symlog', sign(r) log(1 + |r|),
  keeps game points (MsPacman: 10 to 1,600 per jumpy step) in the range of
  the other features without losing their sign or order; 'none' feeds them
  as predicted;
  the LSTM reads them in REVERSE order, so its final output (after the first
  imagined step) is the rollout's summary.
  """

  def __init__(self, channels: Sequence[int], strides: Sequence[int],
               lstm_size: int, reward_transform: str = "symlog",
               name: str = "rollout_encoder"):
    super().__init__(name=name)
    if reward_transform not in REWARD_TRANSFORMS:
      raise ValueError(f"reward_transform must be one of {REWARD_TRANSFORMS},"
                       f" given {reward_transform!r}.")
    self.reward_transform = reward_transform
    if len(channels) != len(strides) or not channels:
      raise ValueError("RolloutEncoder: channels and strides must be "
                       f"non-empty and of equal length, given {channels} and "
                       f"{strides}.")
    self._convs = [snt.Conv2D(c, 3, stride=s, name=f"conv_{i}")
                   for i, (c, s) in enumerate(zip(channels, strides))]
    self.core = snt.LSTM(lstm_size, name="lstm")
    self.lstm_size = lstm_size

  def embed(self, imaginations: tf.Tensor, rewards: tf.Tensor) -> tf.Tensor:
    """[N, T, h, w, d], [N, T] -> per-step features [N, T, E]."""
    shape = tf.shape(imaginations)
    merged = tf.reshape(imaginations,
                        tf.concat([[-1], shape[2:]], 0))  # [N * T, h, w, d]
    merged.set_shape([None] + imaginations.shape[2:].as_list())
    hidden = merged
    for conv in self._convs:
      hidden = tf.nn.relu(conv(hidden))
    flat = snt.Flatten()(hidden)  # [N * T, F]
    flat = tf.reshape(flat, tf.concat([shape[:2], [flat.shape[-1]]], 0))
    rewards = tf.cast(rewards, tf.float32)
    if self.reward_transform == "symlog":
      rewards = symlog(rewards)
    return tf.concat([flat, rewards[..., None]], -1)  # [N, T, F + 1]

  def __call__(self, imaginations: tf.Tensor,
               rewards: tf.Tensor) -> tf.Tensor:
    embedded = self.embed(imaginations, rewards)  # [N, T, E]
    num_steps = embedded.shape[1]
    if num_steps is None:
      raise ValueError("RolloutEncoder needs a static depth (axis 1), given "
                       f"{embedded.shape.as_list()}.")
    state = self.core.initial_state(tf.shape(embedded)[0])
    output = None
    # One unstack rather than a slice per step: the slices' gradients are
    # each a zero-filled [N, T, E] tensor, the unstack's one stack.
    steps = tf.unstack(embedded, num_steps, axis=1)  # T x [N, E]
    for t in reversed(range(num_steps)):  # last imagined step first
      output, state = self.core(steps[t], state)
    return output  # [N, lstm_size]


# -- Imagination core -------------------------------------------------------


class Imagination(NamedTuple):
  """K rollouts of depth tau for each of B samples, batched as [B * K]."""
  imaginations: tf.Tensor  # [B*K, tau, h, w, d] features or [.., H, W, C]
  rewards: tf.Tensor  # float32 [B*K, tau]: predicted rewards
  first_actions: tf.Tensor  # int32 [B*K]: rollout k's first action index
  rollout_policy_logits: Optional[tf.Tensor]  # [B*K, n, A]: pi_r where it
  #                                             chose (n = tau or tau - 1)
  initial_features: Optional[tf.Tensor]  # [B, h, w, d]: features of s_t|t


class ImaginationCore(snt.Module):
  """Runs K rollouts of depth tau through a frozen envmodel, batched [B*K].

  Args:
    model: an EnvModel (frozen).
    rollout_policy: a rollout_policies.RolloutPolicy.
    num_rollouts: K. Rollout k's first model step takes primitive action
      k mod A (held for the c primitive actions of that step) when
      fix_first_action; later steps come from the rollout policy.
    depth: tau, model steps per rollout (tau * c primitive actions).
    imagination: 'abstract' (out.features) or 'pixels' (model.render).
    fix_first_action: see num_rollouts; if False every step is pi_r's.
    want_initial_features: also return the features of s_t|t.
    seed: seeds the generator of window keys, drawn when a call gets none.

  Noise: every random draw of the rollouts (pi_r's samples, a stochastic
  model's z) is stateless, a function of the window's key (`keys`, uint32
  or int32 [B, 2]): rollout k of window b, step t draws from
  fold(fold(key_b, k), t) (envmodels/noise.py), the model with stream 0
  and pi_r with stream 1. The actor stores each window's key with its
  unroll, so the learner recomputing a rollout reproduces the imagination
  the actor acted on, whatever the batch.
  """

  def __init__(self, model: envmodels.EnvModel,
               rollout_policy: rollout_policies.RolloutPolicy,
               num_rollouts: int, depth: int, imagination: str = "abstract",
               fix_first_action: bool = True,
               want_initial_features: bool = False, seed: int = 0,
               name: str = "imagination_core"):
    super().__init__(name=name)
    if num_rollouts < 1 or depth < 1:
      raise ValueError(f"num_rollouts (K) and depth (tau) must be >= 1, given "
                       f"{num_rollouts} and {depth}.")
    if imagination not in IMAGINATIONS:
      raise ValueError(f"imagination must be one of {IMAGINATIONS}, given "
                       f"{imagination!r}.")
    self.model = model
    self.rollout_policy = rollout_policy
    self.num_rollouts = num_rollouts
    self.depth = depth
    self.imagination = imagination
    self.fix_first_action = fix_first_action
    self.want_initial_features = want_initial_features
    self._rng = tf.random.Generator.from_seed(seed)

  def window_keys(self, batch_size: Any) -> tf.Tensor:
    """Fresh noise keys int32 [B, 2] for B windows, from the core's seeded
    generator (what the actor draws and stores per window)."""
    return self._rng.uniform_full_int([batch_size, 2], tf.int32)

  def __call__(self, observations: tf.Tensor, model_state: Any = None,
               keys: Optional[tf.Tensor] = None) -> Imagination:
    """observations uint8 [B, context_length, H, W, C]; model_state: the
    initial state to use instead of model.initial_state(observations) (the
    oracle's, from live environments); keys int32/uint32 [B, 2]: the
    windows' noise keys (None: fresh ones from window_keys)."""
    model, policy = self.model, self.rollout_policy
    k, num_actions = self.num_rollouts, policy.num_actions
    live = isinstance(model, envmodels.LiveEnvModel)
    if model_state is None and live:
      raise ValueError(
          f"the {model.spec.kind!r} model cannot start from frames: pass its "
          "initial state, network(observations, model_state="
          "model.initial_state_from_envs(envs)), or the side inputs "
          "network.side_inputs(windows, envs) computes.")
    initial = (model.initial_state(observations) if model_state is None
               else model_state)
    initial_features = None
    if self.want_initial_features or (not self.fix_first_action and
                                      policy.needs_features):
      initial_features = model.state_features(initial)  # [B, h, w, d]
    batch = tf.shape(observations)[0]
    rows = batch * k
    if keys is None:
      keys = self.window_keys(batch)
    row_keys = noise.fold(tf.repeat(noise.as_keys(keys), k, axis=0),
                          tf.tile(tf.range(k), [batch]))  # [B*K, 2]
    state = model.tile_state(initial, k)  # [B*K, ...]
    first_actions = tf.tile(tf.range(k, dtype=tf.int32) % num_actions,
                            [batch])  # [B*K]: 0, 1, .., K-1, 0, 1, ..
    features = None  # abstract features of the current state, [B*K, ...]
    if not self.fix_first_action and policy.needs_features:
      features = model.tile_state(initial_features, k)
    inputs = (state, first_actions, row_keys, features)
    if live:  # its states are the environments' snapshots: one chain
      imaginations, rewards, logits = self._rollouts(*inputs, rows=rows)
    else:  # rows are independent: row branches run side by side
      row_count = (rows if observations.shape[0] is None  # a tensor
                   else observations.shape[0] * k)  # known when traced
      imaginations, rewards, logits = branches.split_rows(
          self._rollouts, inputs, row_count,
          row_work=int(np.prod(model.spec.observation_shape)))
    return Imagination(
        imaginations=imaginations,  # [B*K, tau, ...]
        rewards=rewards,  # [B*K, tau]
        first_actions=first_actions,
        rollout_policy_logits=logits,  # [B*K, n, A] or None
        initial_features=initial_features)

  def _rollouts(self, state: Any, first_actions: tf.Tensor,
                row_keys: tf.Tensor, features: Optional[tf.Tensor],
                rows: Any) -> Tuple[tf.Tensor, tf.Tensor,
                                    Optional[tf.Tensor]]:
    """The tau steps of R rows (R = `rows`: all B*K, or a branch's slice):
    (imaginations [R, tau, ...], rewards [R, tau], the rollout policy's
    logits [R, n, A] or None)."""
    model, policy = self.model, self.rollout_policy
    imaginations, rewards, logits, produced = [], [], [], []
    for t in range(self.depth):
      step_keys = noise.fold(row_keys, t)  # [R, 2]
      if t == 0 and self.fix_first_action:
        actions = policy.first_actions(first_actions)
      else:
        chosen = policy.actions(features, rows, noise.fold(step_keys, 1))
        actions = chosen.actions
        if chosen.logits is not None:
          logits.append(chosen.logits)
      state, out = model.step(state, actions, noise=noise.fold(
          step_keys, 0))  # one call for the R rows
      produced.append(state)
      features = out.features  # [R, h, w, d]
      rewards.append(out.reward)
      imaginations.append(features if self.imagination == "abstract"
                          else model.render(state))  # [R, H, W, C]
    if isinstance(model, envmodels.LiveEnvModel):  # the steps' snapshots
      for state in produced:
        model.release(state)
    return (_stack_steps(imaginations), _stack_steps(rewards),
            _stack_steps(logits) if logits else None)


def _stack_steps(steps: Sequence[tf.Tensor]) -> tf.Tensor:
  """tau x [R, ...] -> [R, tau, ...]: tf.stack on axis 1, except that one
  tensor repeated (a model that returns its input: the copy model) is
  tiled. TF 2.15's Grappler rewrites a stack of one repeated tensor
  (ArithmeticOptimizer, ReplacePackWithTileReshape) into a reshape to a
  shape it can infer wrongly when the rows run as branches (a reshape of
  3 rows' values to 2 rows' shape fails at run time); a tile has no
  reshape to get wrong."""
  first = steps[0]
  if len(steps) > 1 and all(step is first for step in steps):
    expanded = first[:, None]  # [R, 1, ...]
    return tf.tile(expanded, [1, len(steps)] + [1] * (expanded.shape.rank - 2))
  return tf.stack(steps, axis=1)


# -- Stored rollouts (side inputs) -----------------------------------------

# How a learned model's stored features travel (network.stored_features):
# 'bfloat16' halves the bytes the actor writes and the learner reads (the
# features of a bf16 run are bfloat16 values already); Reverb carries no
# bfloat16, so the values go as their 16 bits in uint16 arrays. 'float32'
# keeps them exact.
STORED_FEATURES = ("bfloat16", "float32")


def stored_dtype(stored_features: str) -> tf.DType:
  """The dtype of stored features in the unrolls (STORED_FEATURES)."""
  if stored_features not in STORED_FEATURES:
    raise ValueError(f"stored_features must be one of {STORED_FEATURES}, "
                     f"given {stored_features!r}.")
  return tf.uint16 if stored_features == "bfloat16" else tf.float32


def _store(features: tf.Tensor, stored_features: str) -> tf.Tensor:
  if stored_features == "bfloat16":
    return tf.bitcast(tf.cast(features, tf.bfloat16), tf.uint16)
  return features


def _unstore(stored: tf.Tensor) -> tf.Tensor:
  stored = tf.convert_to_tensor(stored)
  if stored.dtype == tf.uint16:  # bfloat16 bits
    return tf.cast(tf.bitcast(stored, tf.bfloat16), tf.float32)
  return tf.cast(stored, tf.float32)


def to_side_inputs(imagined: Imagination, num_rollouts: int,
                   frame_shape: Optional[Sequence[int]] = None,
                   abstract: bool = True,
                   with_initial_features: bool = False,
                   stored_features: str = "float32"
                   ) -> Dict[str, tf.Tensor]:
  """The stored form of B samples' rollouts (rows b * K + k -> [B, K, ...]).

  Learned models: imagined_features [B, K, tau, ...] as the core gives
  them, and initial_features [B, h, w, d] if asked, as `stored_features`
  (STORED_FEATURES: float32, or bfloat16 bits in uint16). The emulator
  oracle (`frame_shape` = (H, W, C) given): imagined_frames uint8
  [B, K, tau, H, W, C], the frames its features are space_to_depth(8) of
  ('abstract') or equal to ('pixels'), the same values 4x smaller. Both:
  imagined_rewards float32 [B, K, tau].
  """
  k = num_rollouts
  depth = imagined.rewards.shape[1]
  side = {"imagined_rewards": tf.reshape(imagined.rewards, [-1, k, depth])}
  if frame_shape is None:
    side["imagined_features"] = _store(tf.reshape(
        imagined.imaginations, [-1, k, *imagined.imaginations.shape[1:]]),
                                       stored_features)
    if with_initial_features:
      side["initial_features"] = _store(imagined.initial_features,
                                        stored_features)
    return side
  steps = tf.reshape(imagined.imaginations,
                     [-1, *imagined.imaginations.shape[2:]])
  if abstract:
    steps = tf.nn.depth_to_space(steps, 8)  # [B*K*tau, H, W, C] in [0, 1]
  side["imagined_frames"] = tf.reshape(
      tf.cast(tf.round(steps * 255.0), tf.uint8),
      [-1, k, depth, *frame_shape])
  return side


def from_side_inputs(side_inputs: Mapping[str, tf.Tensor],
                     observations: tf.Tensor, num_rollouts: int,
                     num_actions: int,
                     frame_shape: Optional[Sequence[int]] = None,
                     abstract: bool = True,
                     with_initial_features: bool = False) -> Imagination:
  """Inverse of to_side_inputs: the Imagination the core gave (rows
  b * K + k). For oracle frames the features of s_t|t are those of the
  last real frame, space_to_depth(observations[:, -1] / 255, 8)."""
  rewards = tf.cast(side_inputs["imagined_rewards"], tf.float32)
  depth = rewards.shape[-1]
  initial_features = None
  if frame_shape is None:
    features = _unstore(side_inputs["imagined_features"])
    imaginations = tf.reshape(features, [-1, *features.shape[2:]])
    if with_initial_features:
      initial_features = _unstore(side_inputs["initial_features"])
  else:
    frames = tf.convert_to_tensor(side_inputs["imagined_frames"])
    steps = tf.cast(tf.reshape(frames, [-1, *frame_shape]),
                    tf.float32) / 255.0  # [B*K*tau, H, W, C]
    if abstract:
      steps = tf.nn.space_to_depth(steps, 8)
    imaginations = tf.reshape(steps, [-1, depth, *steps.shape[1:]])
    if with_initial_features:
      initial_features = tf.nn.space_to_depth(
          tf.cast(observations[:, -1], tf.float32) / 255.0, 8)
  batch = tf.shape(observations)[0]
  return Imagination(
      imaginations=imaginations,  # [B*K, tau, ...]
      rewards=tf.reshape(rewards, [-1, depth]),  # [B*K, tau]
      first_actions=tf.tile(tf.range(num_rollouts, dtype=tf.int32) %
                            num_actions, [batch]),
      rollout_policy_logits=None, initial_features=initial_features)


def split_rollouts(summaries: tf.Tensor, num_rollouts: int) -> tf.Tensor:
  """The aggregator: [B*K, L] -> [B, K * L], rollout k's summary at
  [:, k * L:(k + 1) * L]."""
  size = summaries.shape[-1]
  return tf.reshape(summaries, [-1, num_rollouts * size])
