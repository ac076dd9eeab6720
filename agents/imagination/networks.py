"""The I2A network (Weber et al. 2017; Buesing et al. 2018, Fig. 2).

Where it sits in the data flow: registered as 'i2a' in agents.builder;
actors (agents/acting.py) call it on each environment's frame window
(`window_offsets`), the learner (agents/learning.py) on batches of unrolls and
adds `auxiliary_loss` (the rollout strategy's: distillation, the
learning-to-query entropy penalty, none) to the actor-critic loss, updating
`learnable_variables` only: the envmodel's weights never change (a loaded
model has no trainable variables; a module the strategy attaches, the
imagination prior p_imag, is the exception, by design).

The network asks its rollout strategy (rollout_policies.RolloutPolicy) for
everything strategy-specific (loss, stored side inputs, gradients through
the model, refusals) and the envmodel contract (envmodels/base.py) for
everything model-specific: it compares no strategy or kind names.

  window            the frames seen `window_offsets` agent steps ago: the
                    model's context, c = spec.jump steps apart as in its
                    training windows (offsets (k-1)c, ..., c, 0), and the
                    latest `model_free_frames` frames
  model-free path   ConvTorso (agents/a2c) over the latest
                    `model_free_frames` frames -> [B, F]
  model-based path  ImaginationCore: s_t|t from the context frames, K
                    rollouts of depth tau batched [B*K] -> RolloutEncoder
                    (CNN + reward, LSTM read last step -> first) ->
                    aggregator (concatenate the K summaries) [B, K * L]
  heads             concat -> linear(head_hidden) -> ReLU -> policy logits
                    [B, A], value [B]

Baselines as options (`model`): 'pretrained' (the export), 'untrained' (same
kind/spec/hyperparameters, random weights, frozen), 'copy' (imaginations are
the initial state), 'oracle' (the emulator).

Stored rollouts (`learner_rollouts`): the network may declare its rollouts
as side inputs (agents/base.py): the actor runs the K rollouts
(`side_inputs`), acts on them and stores them with the unroll; the learner
reads them instead of querying the model again. Always so for the oracle,
which cannot start from frames (the actor snapshots its live environments;
its abstract features are space_to_depth(8) of its frames, so uint8 frames
carry them losslessly); by default also for a learned model's abstract
rollouts under 'distillation' or 'random', where no gradient passes through
the model and recomputing them would double the envmodel's compute.
Where the learner recomputes them instead, the actor stores each window's
noise key (`rollout_keys` int32 [2]): every random draw of the rollouts is
a function of it (imagination.ImaginationCore), so the learner's
imagination is the one the actor acted on.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import ml_collections
import numpy as np
import sonnet as snt
import tensorflow as tf

import envmodels
from envmodels import branches
from agents import builder
from agents.a2c.networks import ConvTorso, frames_on_channels
from agents.base import ActorCriticNetwork, ContextEncodings, NetworkOutput
from agents.imagination import imagination as imagination_lib
from agents.imagination import rollout_policies

MODELS = ("pretrained", "untrained", "copy", "oracle")
# Who runs the rollouts the learner reads (docs/agents.md, "Stored
# rollouts"): 'actor' stores them with the unrolls, 'recompute' has the
# learner run the imagination core again, 'auto' picks 'actor' unless a
# gradient must pass through the model or the rollouts are cheap or large.
LEARNER_ROLLOUTS = ("auto", "actor", "recompute")


class I2ANetwork(ActorCriticNetwork):
  """pi(a | o) and V(o) from a model-free path and K imagined rollouts.

  Args:
    model: a frozen EnvModel (envmodels.load), or a CopyModel / a
      LiveEnvModel (the oracle). Its spec must match the environment:
      num_actions and observation_shape.
    num_actions, observation_shape: the environment's.
    rollout_policy: a rollout_policies.RolloutPolicy for num_actions and
      the model's jump (make_network builds it from config.network:
      rollout_policies.make_rollout_policy); it owns its settings (pi_r's
      sizes, loss weights).
  Every argument is required (keyword-only): the defaults live in one
  place, configs/agents/i2a.py, read by make_network.
    num_rollouts: K (0: one per action).
    depth: tau, model steps per rollout.
    imagination: 'abstract' (model features) or 'pixels' (rendered frames).
    fix_first_action: rollout k's first action is action k.
    model_free_frames: latest frames read by the model-free path.
    conv_channels, conv_kernels, conv_strides, hidden: its ConvTorso.
    encoder_channels, encoder_strides: the rollout encoder's 3x3 convs.
    pixel_encoder_channels: extra stride-2 3x3 convs in front of them for
      'pixels' imaginations.
    lstm_size: L, the rollout encoder's LSTM.
    reward_transform: how it reads imagined rewards
      (imagination.REWARD_TRANSFORMS: 'symlog' or 'none').
    head_hidden: the layer before the policy and value heads.
    learner_rollouts: LEARNER_ROLLOUTS: 'actor' stores the actor's
      rollouts with each unroll (side inputs) and the learner reads them
      instead of querying the model again; 'recompute' reruns them in the
      learner; 'auto' is 'actor' for the emulator oracle (which the learner
      cannot query) and for abstract imaginations of a learned model under
      a strategy whose gradient does not pass through the model
      (`through_model` False: distillation, random), else 'recompute'.
    stored_features: how stored learned-model features travel
      (imagination.STORED_FEATURES): 'bfloat16' (half the bytes; the
      learner reads them back as float32) or 'float32' (exact).
    seed: seeds the rollouts' noise keys and p_imag's initialisation.
  """

  def __init__(self, model: envmodels.EnvModel, num_actions: int,
               observation_shape: Sequence[int], *,
               rollout_policy: rollout_policies.RolloutPolicy,
               num_rollouts: int, depth: int, imagination: str,
               fix_first_action: bool, model_free_frames: int,
               conv_channels: Sequence[int], conv_kernels: Sequence[int],
               conv_strides: Sequence[int], hidden: int,
               encoder_channels: Sequence[int],
               encoder_strides: Sequence[int],
               pixel_encoder_channels: Sequence[int], lstm_size: int,
               head_hidden: int, reward_transform: str,
               learner_rollouts: str, stored_features: str, seed: int,
               name: Optional[str] = "i2a_network"):
    spec = model.spec
    super().__init__(num_actions, spec.context_length, name=name)
    builder.check_envmodel_fits(spec, num_actions, observation_shape)
    if not isinstance(rollout_policy, rollout_policies.RolloutPolicy):
      raise ValueError(
          "rollout_policy: expected a rollout_policies.RolloutPolicy (e.g. "
          "rollout_policies.make_rollout_policy(name, num_actions, jump, "
          f"config.network)), given {type(rollout_policy).__name__} "
          f"{rollout_policy!r}.")
    if (rollout_policy.num_actions != num_actions or
        rollout_policy.jump != spec.jump):
      raise ValueError(
          f"the rollout policy acts on {rollout_policy.num_actions} actions, "
          f"{rollout_policy.jump} per model step; the model takes "
          f"{num_actions}, {spec.jump} per step: build it with the model's "
          "num_actions and spec.jump.")
    if not 1 <= model_free_frames <= spec.context_length:
      raise ValueError(f"model_free_frames must be in [1, context_length = "
                       f"{spec.context_length}], given {model_free_frames}.")
    num_rollouts = num_rollouts or num_actions
    rollout_policy.check_model(model, depth, fix_first_action)
    # The trainable part the strategy attaches to the model (p_imag), if any.
    self.attached = rollout_policy.attach(model, seed)
    _check_frozen(model, self.attached)

    self.model = model
    self.rollout_policy = rollout_policy
    self.num_rollouts = num_rollouts
    self.depth = depth
    self.imagination = imagination
    self.rollouts_from_actor = _rollouts_from_actor(
        learner_rollouts, rollout_policy, imagination, model)
    self._observation_shape = tuple(observation_shape)
    self.stored_features = stored_features
    self._stored_dtype = imagination_lib.stored_dtype(stored_features)
    # The model's context frames are c agent steps apart, as in the windows
    # it was trained on (i2a/replay/episodes.py); the model-free path reads
    # the latest frames. The window holds the union, oldest first.
    k, c = spec.context_length, spec.jump
    self._model_offsets = tuple((k - 1 - i) * c for i in range(k))
    free_offsets = tuple(range(model_free_frames - 1, -1, -1))
    self._window_offsets = tuple(sorted(
        set(self._model_offsets) | set(free_offsets), reverse=True))
    self._model_index = [self._window_offsets.index(o)
                         for o in self._model_offsets]
    self._free_index = [self._window_offsets.index(o) for o in free_offsets]
    self._stored_shapes: Optional[Dict[str, Tuple[int, ...]]] = None
    self.model_free_frames = model_free_frames
    self.imagination_core = imagination_lib.ImaginationCore(
        model, self.rollout_policy, num_rollouts, depth,
        imagination=imagination, fix_first_action=fix_first_action,
        want_initial_features=rollout_policy.needs_initial_features,
        seed=seed)
    strides = tuple(encoder_strides)
    channels = tuple(encoder_channels)
    if imagination == "pixels":  # a stronger summariser for frames
      channels = tuple(pixel_encoder_channels) + channels
      strides = (2,) * len(pixel_encoder_channels) + strides
    self.rollout_encoder = imagination_lib.RolloutEncoder(
        channels, strides, lstm_size, reward_transform=reward_transform)
    self.model_free_torso = ConvTorso(conv_channels, conv_kernels,
                                      conv_strides, hidden,
                                      name="model_free_torso")
    self._head = snt.Linear(head_hidden, name="head_hidden")
    self._policy_head = snt.Linear(num_actions, name="policy_logits")
    self._value_head = snt.Linear(1, name="value")

  @property
  def needs_env_states(self) -> bool:
    """Whether the model starts from live environments (a LiveEnvModel: the
    emulator oracle): the actor passes its environments and stores the
    rollouts as side inputs."""
    return isinstance(self.model, envmodels.LiveEnvModel)

  def __call__(self, observations: tf.Tensor,
               side_inputs: Optional[Mapping[str, tf.Tensor]] = None,
               model_state: Any = None) -> NetworkOutput:
    """observations: uint8 [B, len(window_offsets), H, W, C], oldest first.

    side_inputs: what `side_inputs` computed (per side_input_spec()): the
    stored rollouts (the oracle's imagined_frames, or a learned model's
    imagined_features and initial_features; imagined_rewards), which
    replace the imagination core's, or the windows' rollout_keys, from
    which the core recomputes them. None: the core runs with fresh keys.
    model_state: optional initial model state for the B samples, used
    instead of model.initial_state(observations) (e.g. the oracle's,
    oracle.initial_state_from_envs(envs), when not using side inputs).
    """
    observations = self._check_window(observations)
    model_free = self.model_free_torso(frames_on_channels(tf.gather(
        observations, self._free_index, axis=1)))  # [B, hidden]
    if side_inputs:
      self._check_side_inputs(side_inputs)
    if side_inputs and self.rollouts_from_actor:
      imagined = self._stored_imagination(observations, side_inputs)
    else:
      keys = side_inputs["rollout_keys"] if side_inputs else None
      imagined = self.imagination_core(self.model_context(observations),
                                       model_state, keys)
    summaries = self.rollout_encoder(imagined.imaginations,
                                     imagined.rewards)  # [B*K, L]
    aggregated = imagination_lib.split_rollouts(
        summaries, self.num_rollouts)  # [B, K * L]
    hidden = tf.nn.relu(self._head(tf.concat([model_free, aggregated], -1)))
    extras = self.rollout_policy.extras(imagined, self.num_rollouts)
    return NetworkOutput(
        policy_logits=self._policy_head(hidden),  # [B, A]
        value=tf.squeeze(self._value_head(hidden), -1),  # [B]
        extras=extras)

  # -- Windows ---------------------------------------------------------------

  @property
  def window_offsets(self) -> Tuple[int, ...]:
    """The model's context, c agent steps apart ((k-1)c, ..., c, 0), and
    the model-free path's latest frames, oldest first."""
    return self._window_offsets

  def model_context(self, windows: tf.Tensor) -> tf.Tensor:
    """uint8 [B, len(window_offsets), H, W, C] -> the model's context
    frames [B, context_length, H, W, C], c agent steps apart."""
    if self._model_index == list(range(len(self._window_offsets))):
      return windows
    return tf.gather(windows, self._model_index, axis=1)

  def _check_window(self, observations: Any) -> tf.Tensor:
    observations = tf.convert_to_tensor(observations)
    length = len(self._window_offsets)
    if observations.shape.rank != 5 or observations.shape[1] != length:
      raise ValueError(
          f"I2A observations: expected [B, {length}, H, W, C] (the frames "
          f"{self._window_offsets} agent steps before the newest: "
          "network.window_offsets), given shape "
          f"{observations.shape.as_list()}.")
    return observations

  # -- Pictures ------------------------------------------------------------

  def imagined_frames(self, windows: np.ndarray,
                      envs: Optional[Sequence[object]] = None
                      ) -> Dict[str, np.ndarray]:
    """What the agent imagines from `windows` [B, len(window_offsets), H, W,
    C], as pictures
    (`python -m i2a.evaluate` draws them): frames float32 [B, K, tau, H, W,
    C] in [0, 1] (the model's rendering of every imagined state), rewards
    [B, K, tau] and first_actions [K] (-1 where pi_r chose it).

    The K rollouts are run afresh, eagerly, with the agent's rollout policy
    (a fresh sample where pi_r or the model samples); the emulator oracle
    starts from the B environments `envs`, which are only read.
    """
    windows = np.asarray(windows)
    core = imagination_lib.ImaginationCore(
        self.model, self.rollout_policy, self.num_rollouts, self.depth,
        imagination="pixels",
        fix_first_action=self.imagination_core.fix_first_action)
    keys = self.imagination_core.window_keys(len(windows))
    state = None
    if self.needs_env_states:
      if envs is None or len(envs) != len(windows):
        raise ValueError(
            "the emulator oracle imagines from live environments: pass one "
            f"per window, given {0 if envs is None else len(envs)} for "
            f"{len(windows)} windows.")
      state = self.model.initial_state_from_envs(
          envs, observations=windows[:, -1])
    try:
      imagined = core(self.model_context(self._check_window(windows)), state,
                      keys)
    finally:
      if state is not None:
        self.model.release(state)
    frames = imagined.imaginations.numpy()  # [B*K, tau, H, W, C]
    k = self.num_rollouts
    first = (imagined.first_actions.numpy()[:k]
             if core.fix_first_action else np.full([k], -1))
    return dict(
        frames=frames.reshape([-1, k, *frames.shape[1:]]),
        rewards=imagined.rewards.numpy().reshape([-1, k, self.depth]),
        first_actions=first)

  # -- Side inputs: rollouts the actor ran, stored with the unrolls --------

  def side_input_spec(self) -> Dict[str, tf.TensorSpec]:
    """The emulator oracle: imagined_frames uint8 [K, tau, H, W, C] (its
    features are space_to_depth(frame / 255, 8), the same values: 4x
    smaller as uint8 than as float32). A learned model: imagined_features
    float32 [K, tau, ...] (as the core gives them) and, for distillation,
    initial_features [h, w, d]. Both: imagined_rewards [K, tau]. Where
    the learner recomputes the rollouts: rollout_keys int32 [2], the
    window's noise key."""
    if not self.rollouts_from_actor:
      return {"rollout_keys": tf.TensorSpec([2], tf.int32, "rollout_keys")}
    k, tau = self.num_rollouts, self.depth
    spec = {"imagined_rewards": tf.TensorSpec([k, tau], tf.float32,
                                              "imagined_rewards")}
    if self.needs_env_states:
      spec["imagined_frames"] = tf.TensorSpec(
          [k, tau, *self._observation_shape], tf.uint8, "imagined_frames")
      return spec
    for name, shape in self._stored_feature_shapes().items():
      spec[name] = tf.TensorSpec(shape, self._stored_dtype, name)
    return spec

  def _stored_feature_shapes(self) -> Dict[str, Tuple[int, ...]]:
    """Static shapes of the stored features, read off one probe rollout."""
    if self._stored_shapes is None:
      probe = self.imagination_core(tf.zeros(
          [1, self.context_length, *self._observation_shape],
          tf.uint8), keys=tf.zeros([1, 2], tf.int32))  # the model's context
      shapes = {"imagined_features": (self.num_rollouts, self.depth,
                                      *probe.imaginations.shape[2:])}
      if self.rollout_policy.needs_initial_features:
        shapes["initial_features"] = tuple(probe.initial_features.shape[1:])
      self._stored_shapes = shapes
    return self._stored_shapes

  # -- Context encodings: each frame encoded once by the actor ------------

  @property
  def caches_context(self) -> bool:
    """Whether an actor keeps its model's context-frame encodings
    (`context_cache`): for a learned model that encodes its context frames
    one by one (envmodels' `encodes_context_frames`)."""
    return self.model.encodes_context_frames and not self.needs_env_states

  def context_cache(self, history: np.ndarray
                    ) -> Optional[ContextEncodings]:
    if not self.caches_context:
      return None
    history = np.asarray(history)  # [N, L, H, W, C]
    if getattr(self, "_encode_fn", None) is None:
      self._encode_fn = self.acting_call(self.model.encode_context_frames)
    encoded = self._encode_fn(
        history.reshape((-1,) + history.shape[2:])).numpy()  # [N * L, ...]
    return ContextEncodings(encoded.reshape(history.shape[:2] +
                                            encoded.shape[1:]))

  def _cached_initial_state(self, windows: tf.Tensor, older: tf.Tensor,
                            fresh: tf.Tensor) -> Tuple[Any, tf.Tensor]:
    """The initial model state of `windows` from the encodings `older`
    [B, k - 1, ...] of its older context frames (ContextEncodings
    .at_offsets) and its newest frame, encoded here; where `fresh` [B]
    (an episode's first window: its context is that frame repeated) the
    newest encoding stands for all. Returns (state, newest [B, ...])."""
    newest = self.model.encode_context_frames(windows[:, -1])
    mask = tf.reshape(fresh, [-1] + [1] * (older.shape.rank - 1))
    older = tf.where(mask, newest[:, None], older)  # [B, k - 1, ...]
    return (self.model.initial_state_from_encodings(
        tf.concat([older, newest[:, None]], axis=1)), newest)

  def _context_arguments(self, windows: np.ndarray,
                         context: ContextEncodings
                         ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(windows, older encodings, fresh): a cached call's arguments."""
    return (windows, context.at_offsets(self._model_offsets[:-1]),
            context.fresh)

  def side_inputs(self, windows: np.ndarray,
                  envs: Optional[Sequence[object]],
                  context: Optional[ContextEncodings] = None
                  ) -> Dict[str, np.ndarray]:
    """The actor's K rollouts for `windows` [B, len(window_offsets), H, W,
    C]: from the learned model, or from the B live environments `envs` for
    the oracle (only read: snapshots are restored into the oracle's own
    worker env). Where the learner recomputes them: fresh noise keys
    rollout_keys [B, 2], from which the actor and the learner both run
    them. context: the actor's cache of frame encodings (its newest slot
    is filled here)."""
    windows = np.asarray(windows)
    self._check_window(windows)
    if context is not None and self.caches_context:
      if getattr(self, "_cached_side_fn", None) is None:
        self._cached_side_fn = self.acting_call(self._cached_side_inputs)
      side, newest = self._cached_side_fn(
          *self._context_arguments(windows, context))
      context.fill(newest.numpy())
      return {name: value.numpy() for name, value in side.items()}
    if not self.rollouts_from_actor:
      return {"rollout_keys":
              self.imagination_core.window_keys(len(windows)).numpy()}
    if not self.needs_env_states:
      return {name: value.numpy() for name, value in
              self._model_rollouts(tf.constant(windows)).items()}
    state = self.model.initial_state_from_envs(
        envs, observations=windows[:, -1])
    try:
      return {name: value.numpy() for name, value in
              self._oracle_rollouts(tf.constant(windows), state).items()}
    finally:
      self.model.release(state)

  def act(self, windows: np.ndarray, envs: Optional[Sequence[object]],
          context: Optional[ContextEncodings] = None
          ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """One acting step in one tf.function for a learned model: the initial
    state (from the actor's cached encodings of the older context frames
    and the newest frame's, which fills `context`, where the actor keeps
    them), the K rollouts (or the window keys the learner will rerun them
    from), the rollout encoder and the heads, in row branches of the
    windows where they pay (envmodels/branches.py); the emulator oracle,
    which reads the live environments, takes the two calls of the base
    class."""
    if self.needs_env_states:
      return super().act(windows, envs)
    windows = np.asarray(windows)
    self._check_window(windows)
    if context is not None and self.caches_context:
      if getattr(self, "_cached_act_fn", None) is None:
        self._cached_act_fn = self.acting_call(self._cached_act)
      logits, side, newest = self._cached_act_fn(
          *self._context_arguments(windows, context))
      context.fill(newest.numpy())
    else:
      if getattr(self, "_fused_act_fn", None) is None:
        # One compiled call per step, without tf.function's dispatch.
        self._fused_act_fn = self.acting_call(self._branched_act)
      logits, side = self._fused_act_fn(windows)
    return logits.numpy(), {name: value.numpy()
                            for name, value in side.items()}

  def _fused_act(self, windows: tf.Tensor, model_state: Any = None,
                 keys: Optional[tf.Tensor] = None
                 ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """One chain of the act: (policy logits [B, A], side inputs); keys
    int32 [B, 2]: the windows' noise keys (None: drawn here)."""
    if keys is None:
      keys = self.imagination_core.window_keys(tf.shape(windows)[0])
    if self.rollouts_from_actor:
      side = self._rollout_side_inputs(windows, model_state, keys)
      return self(windows, side).policy_logits, side
    side = {"rollout_keys": keys}
    return self(windows, side, model_state=model_state).policy_logits, side

  def _in_window_branches(self, chain: Any, windows: tf.Tensor,
                          *per_window: tf.Tensor) -> Any:
    """chain(windows, *per_window, keys, rows=...) over row branches of the
    windows (envmodels/branches.py: where they pay; each branch all of the
    act, one chain), the noise keys [B, 2] drawn once for all of them."""
    keys = self.imagination_core.window_keys(tf.shape(windows)[0])
    return branches.split_rows(
        chain, (windows, *per_window, keys), windows.shape[0],
        row_work=self.num_rollouts *
        int(np.prod(self.model.spec.observation_shape)))  # K rows a window

  def _branched_act(self, windows: tf.Tensor
                    ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """_fused_act in row branches of the windows."""
    return self._in_window_branches(
        lambda w, k, rows: self._fused_act(w, None, k), windows)

  def _cached_act(self, windows: tf.Tensor, older: tf.Tensor,
                  fresh: tf.Tensor
                  ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor], tf.Tensor]:
    """The act with the actor's cached context encodings, in row branches
    of the windows: (logits, side inputs, the newest frames' encodings)."""
    return self._in_window_branches(self._cached_act_rows, windows, older,
                                    fresh)

  def _cached_act_rows(self, windows: tf.Tensor, older: tf.Tensor,
                       fresh: tf.Tensor, keys: tf.Tensor, rows: Any = None
                       ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor], tf.Tensor]:
    """One chain of `_cached_act`, for `rows` of its windows."""
    del rows
    state, newest = self._cached_initial_state(windows, older, fresh)
    logits, side = self._fused_act(windows, state, keys)
    return logits, side, newest

  def _cached_side_inputs(self, windows: tf.Tensor, older: tf.Tensor,
                          fresh: tf.Tensor
                          ) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
    if not self.rollouts_from_actor:
      return ({"rollout_keys": self.imagination_core.window_keys(
          tf.shape(windows)[0])},
              self.model.encode_context_frames(windows[:, -1]))
    state, newest = self._cached_initial_state(windows, older, fresh)
    return self._rollout_side_inputs(windows, state), newest

  @tf.function
  def _model_rollouts(self, windows: tf.Tensor) -> Dict[str, tf.Tensor]:
    return self._rollout_side_inputs(windows)

  def _rollout_side_inputs(self, windows: tf.Tensor, model_state: Any = None,
                           keys: Optional[tf.Tensor] = None
                           ) -> Dict[str, tf.Tensor]:
    """The stored rollouts of `windows` (from `model_state`, or from the
    model's initial state of their context frames; from noise `keys` [B, 2],
    or fresh ones)."""
    return imagination_lib.to_side_inputs(
        self.imagination_core(self.model_context(windows), model_state,
                              keys),
        self.num_rollouts,
        with_initial_features=self.rollout_policy.needs_initial_features,
        stored_features=self.stored_features)

  @tf.function
  def _oracle_rollouts(self, windows: tf.Tensor, state: Any
                       ) -> Dict[str, tf.Tensor]:
    return imagination_lib.to_side_inputs(
        self.imagination_core(self.model_context(windows), state),
        self.num_rollouts, frame_shape=self._observation_shape,
        abstract=self.imagination == "abstract")

  def _stored_imagination(self, observations: tf.Tensor,
                          side_inputs: Mapping[str, tf.Tensor]
                          ) -> imagination_lib.Imagination:
    """The Imagination of stored rollouts, as the core would give it."""
    return imagination_lib.from_side_inputs(
        side_inputs, observations, self.num_rollouts, self.num_actions,
        frame_shape=self._observation_shape if self.needs_env_states
        else None, abstract=self.imagination == "abstract",
        with_initial_features=self.rollout_policy.needs_initial_features)

  def _check_side_inputs(self, side_inputs: Mapping[str, tf.Tensor]) -> None:
    """Refuses side inputs other than side_input_spec()'s."""
    expected = self.side_input_spec()
    unknown = sorted(set(side_inputs) - set(expected))
    if unknown:
      raise ValueError(
          f"the I2A takes the side inputs {sorted(expected)} (learner_"
          f"rollouts resolved to "
          f"{'actor' if self.rollouts_from_actor else 'recompute'}), given "
          f"unknown {unknown}.")
    for name, spec in expected.items():
      if name not in side_inputs:
        raise ValueError(f"the I2A's side inputs lack {name!r}: expected "
                         f"{sorted(expected)}, given {sorted(side_inputs)}.")
      given = tf.convert_to_tensor(side_inputs[name]).shape
      if given[1:] != spec.shape:
        raise ValueError(f"{name}: expected [B, "
                         f"{', '.join(map(str, spec.shape))}], given "
                         f"{given.as_list()}.")

  def auxiliary_loss(self, output: NetworkOutput
                     ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """The rollout strategy's loss (rollout_policies: distillation, the
    learning-to-query entropy penalty, or 0) and its metrics."""
    return self.rollout_policy.loss(output.policy_logits, output.extras)

  @property
  def learnable_variables(self) -> Tuple[tf.Variable, ...]:
    """Trainable variables minus every envmodel variable (those of the
    module the strategy attached, p_imag, kept)."""
    frozen = {v.ref() for v in self.model.variables}
    attached = ({v.ref() for v in self.attached.trainable_variables}
                if self.attached is not None else set())
    return tuple(v for v in self.trainable_variables
                 if v.ref() not in frozen or v.ref() in attached)


def _rollouts_from_actor(learner_rollouts: str,
                         policy: rollout_policies.RolloutPolicy,
                         imagination: str, model: Any) -> bool:
  """Whether the learner reads the actor's stored rollouts (see
  LEARNER_ROLLOUTS), refusing the combinations that cannot work."""
  if learner_rollouts not in LEARNER_ROLLOUTS:
    raise ValueError(f"learner_rollouts must be one of {LEARNER_ROLLOUTS}, "
                     f"given {learner_rollouts!r}.")
  live = isinstance(model, envmodels.LiveEnvModel)
  if learner_rollouts == "recompute" and live:
    raise ValueError(
        "learner_rollouts='recompute' cannot work with the emulator oracle: "
        "the learner has no environment snapshots to start its rollouts "
        "from; use 'auto' (or 'actor').")
  if learner_rollouts == "actor" and policy.through_model:
    raise ValueError(
        f"learner_rollouts='actor' cannot work with rollout_policy="
        f"{policy.strategy!r}: its policy gradient must pass through the "
        "model's rollouts in the learner; use 'auto' (or 'recompute').")
  if learner_rollouts != "auto":
    return learner_rollouts == "actor"
  # Copy-model rollouts cost nothing to recompute; rendered frames are
  # large to store.
  return live or (not policy.through_model and imagination == "abstract" and
                  not isinstance(model, imagination_lib.CopyModel))


def _check_frozen(model: Any, prior: Optional[snt.Module]) -> None:
  allowed = ({v.ref() for v in prior.trainable_variables}
             if prior is not None else set())
  trainable = [v.name for v in model.variables
               if v.trainable and v.ref() not in allowed]
  if trainable:
    raise ValueError(
        f"the envmodel must be frozen, but {len(trainable)} of its variables "
        f"are trainable (e.g. {trainable[:3]}); load it with "
        "envmodels.load(EXPORT_DIR) (or export and load a built model).")


def make_envmodel(config: ml_collections.ConfigDict,
                  envmodel: Optional[envmodels.EnvModel] = None) -> Any:
  """The model the I2A queries, per `config.network.model` (MODELS): the
  frozen `envmodel` (default: envmodels.load(config.envmodel)), its
  untrained twin, the copy baseline around it, or the emulator oracle for
  `config.protocol` (which ignores `envmodel`)."""
  net = config.network
  if net.model not in MODELS:
    raise ValueError(f"network.model must be one of {MODELS}, given "
                     f"{net.model!r}.")
  if net.model == "oracle":
    if config.envmodel:
      raise ValueError(
          "network.model='oracle' queries the emulator, not an export, but "
          f"config.envmodel is {config.envmodel!r}; drop --config.envmodel "
          "(or choose network.model='pretrained' to use that export).")
    from i2a.environments import Protocol  # pylint: disable=import-outside-toplevel
    return builder.make_oracle(Protocol.from_json(config.protocol.to_dict()),
                               jump=net.oracle_jump,
                               context_length=config.context_length,
                               seed=config.seed)
  if envmodel is None:
    if not config.envmodel:
      raise ValueError(
          "the I2A needs an environment model export: pass "
          "--config.envmodel=EXPORT_DIR (python -m i2a.pretrain writes "
          f"WORKDIR/export); network.model={net.model!r} uses it too.")
    envmodel = envmodels.load(config.envmodel, seed=config.seed)
  if net.model == "untrained":
    return imagination_lib.untrained_envmodel(envmodel, seed=config.seed)
  if net.model == "copy":
    return imagination_lib.CopyModel(envmodel)
  return envmodel


def make_network(config: ml_collections.ConfigDict, num_actions: int,
                 observation_shape: Tuple[int, int, int],
                 envmodel: Optional[envmodels.EnvModel] = None
                 ) -> I2ANetwork:
  """The factory registered as 'i2a' in agents.builder (config:
  configs/agents/i2a.py). `envmodel`: the frozen model of config.envmodel
  (agents.builder.load_envmodel), loaded here when not given."""
  model = make_envmodel(config, envmodel)
  if model.spec.context_length != config.context_length:
    raise ValueError(
        f"config.context_length={config.context_length} but the envmodel "
        f"reads {model.spec.context_length} context frames; pass "
        f"--config.context_length={model.spec.context_length}.")
  net = config.network
  return I2ANetwork(
      model, num_actions, observation_shape,
      rollout_policy=rollout_policies.make_rollout_policy(
          net.rollout_policy, num_actions, model.spec.jump, net),
      num_rollouts=net.num_rollouts,
      depth=net.depth, imagination=net.imagination,
      fix_first_action=net.fix_first_action,
      model_free_frames=net.model_free_frames,
      conv_channels=tuple(net.conv_channels),
      conv_kernels=tuple(net.conv_kernels),
      conv_strides=tuple(net.conv_strides), hidden=net.hidden,
      encoder_channels=tuple(net.encoder_channels),
      encoder_strides=tuple(net.encoder_strides),
      pixel_encoder_channels=tuple(net.pixel_encoder_channels),
      lstm_size=net.lstm_size, head_hidden=net.head_hidden,
      reward_transform=net.reward_transform,
      learner_rollouts=net.learner_rollouts,
      stored_features=net.stored_features, seed=config.seed)
