"""Pixel-space environment models of Buesing et al. (2018): VAE, AR and RAR.

Where this sits in the data flow: `i2a.pretrain` builds one of these kinds by
name (`envmodels.build(spec)` with spec.kind 'vae', 'ar' or 'rar'), trains it
with `loss(batch)` and exports it; `i2a.evaluate_models` compares their
held-out `log_likelihood_per_frame` and rollout time with the state-space
models of `state_space.py` (the paper's Table 1: the VAE is the likelihood
baseline, AR the rollout-time baseline). Agents can query them through the
same `EnvModel` interface, though the paper found I2As with AR models too
expensive to run.

The kinds (o: frames, a: chunked actions, k = context_length, e: encoder):
  'vae'  Frames independent given the k context frames: a conditional VAE per
         future frame t, z_t ~ p(z_t | c, t) (prior learned from the context
         encoding c and a one-hot of t), o_t ~ p(o_t | f_t) with the feature
         map f_t = g(c, z_t, t), posterior q(z_t | c, t, e(o_t), prior
         statistics). Actions are ignored, as in the paper ("models frames as
         independent (conditioned on three initial frames)"), so gradients
         with respect to relaxed actions are zero (tape.gradient returns
         None; `uses_actions` is False). Trained on the ELBO;
         `log_likelihood_per_frame` is the ELBO per frame (image log-prob
         minus KL).
  'ar'   o_t ~ p(o_t | o_{t-k..t-1}, a_{t-1}): the encodings of the window are
         concatenated, mixed like the state-space models' initial-state
         network, then passed with the action through the transition block
         (res_conv, relu, pool-and-inject, res_conv) to a map that the
         decoder and the reward head read. MLE with teacher forcing.
         Efficient rollouts (the paper: "reuses costly vision
         pre-processing"): the state keeps e(o) of the k frames of the
         window, so a step encodes only its newly rendered frame, once.
  'rar'  The dSSM-DET of state_space.py with the transition s_{t+1} =
         g(s_t, mu_{t+1}, a_t, e(o_t)) (the paper's definition): mu_{t+1} is
         the prior mean from (s_t, a_t); decoder and reward head read
         (s_{t+1}, mu_{t+1}), as in the dSSM-DET. MLE; o_t is the true frame
         in training (teacher forcing), the rendered prediction in rollouts.

Choices and departures, with reasons:
  * AR and RAR feed back the decoder's mean, not a sample: the contract's
    `render` is the decoder mean, a Bernoulli sample is a binary image unlike
    any training input of the encoder, and it makes rollouts deterministic
    (as in Weber et al. 2017's pixel environment models). Rendering is part
    of their step (that is why they are slow: `RENDERS_IN_STEP = True`);
    `render(state)` returns the stored frame without recomputation.
  * `out.features`: 'ar' the encoding e(o_t) of the rendered frame (computed
    anyway for the next step), 'rar' the state s_t, 'vae' f_t.
  * The VAE's generator needs the step index t (frame 1 and frame 10
    differ): a one-hot over `max_horizon` (the paper's T = 10) tiled over
    the map; steps beyond max_horizon reuse the last code. Its state keeps
    the last context frame so that `render(initial_state)` is that frame, as
    for AR and RAR (the paper does not define a VAE rollout).
  * Sizes and hyperparameter names follow state_space.py (docs/envmodels.md):
    encoder e (encoder_channels), decoder and reward head from `networks`,
    the k-frame mixing conv_stack((1,3,3),(D,D,D)) of its initial state,
    prior/posterior stacks conv_stack((1,3,3),(hidden,hidden,.)) with a
    softplus + min_std std, and its transition block, so compute comparisons
    are fair. The RAR's prior stack outputs only mu (latent_channels), the
    dSSM-DET's also a std it never uses.
Loss knobs: every kind accepts the latent-model knobs (LATENT_KNOBS, the
names and defaults of state_space.LOSS_KNOBS) so a trainer can pass one set
to any kind; the VAE uses kl_scale, free_nats and free_nats_per (granted
to each frame's KL, to each of its spatial positions or to each latent unit)
and global_kl_scale (its posterior's KL to N(0, I)); overshooting does not
apply to it (no transition); the MLE kinds ignore them all (every kind
validates free_nats and free_nats_per).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Tuple

import sonnet as snt
import tensorflow as tf

from envmodels import losses, networks, registry
from envmodels.base import EnvModel, EnvModelSpec, LossOutput, StepOutput

# Knobs of the ELBO-trained kinds, accepted by every kind of this file.
LATENT_KNOBS = ("kl_scale", "free_nats", "free_nats_per", "global_kl_scale",
                "overshooting")


class VAEState(NamedTuple):
  context: tf.Tensor  # [B, h, w, D]: encoding c of the context frames
  step: tf.Tensor  # int32 [B]: future frames generated so far
  features: tf.Tensor  # [B, h, w, D]: f_t of the last step (zeros at step 0)
  last_frame: tf.Tensor  # [B, H, W, C]: last context frame, rendered at step 0


class ARState(NamedTuple):
  encodings: tf.Tensor  # [B, h, w, k * E]: e(o) of the window, oldest first
  frame: tf.Tensor  # [B, H, W, C]: newest frame of the window, in [0, 1]


class RARState(NamedTuple):
  abstract_state: tf.Tensor  # [B, h, w, D]: s_t
  frame_encoding: tf.Tensor  # [B, h, w, E]: e(o_t)
  frame: tf.Tensor  # [B, H, W, C]: o_t, in [0, 1]


class Transition(snt.Module):
  """The transition block g of the state-space models (docs/envmodels.md):
  res_conv -> relu -> pool-and-inject -> res_conv. The input's first D
  channels are the residual path; pool-and-inject has hidden_channels.
  [B, h, w, D + n] (or its parts, networks.conv_parts) -> [B, h, w, D]."""

  def __init__(self, state_channels: int, hidden_channels: int,
               name: str = "transition"):
    super().__init__(name=name)
    self._res1 = networks.ResConv(state_channels, hidden_channels, name="res1")
    self._pool = networks.PoolAndInject(hidden_channels, name="pool_and_inject")
    self._res2 = networks.ResConv(state_channels, hidden_channels, name="res2")

  def __call__(self, x: networks.Parts) -> tf.Tensor:
    hidden = tf.nn.relu(self._res1(x))
    return self._res2(self._pool(hidden), residual=hidden)


def _diag_normal_kl_units(mean1: tf.Tensor, std1: tf.Tensor,
                          mean2: tf.Tensor, std2: tf.Tensor) -> tf.Tensor:
  """KL(N(mean1, std1) || N(mean2, std2)) per latent unit -> [N, h, w, Z]."""
  return (tf.math.log(std2 / std1) +
          (tf.square(std1) + tf.square(mean1 - mean2)) /
          (2.0 * tf.square(std2)) - 0.5)


def _diag_normal_kl(mean1: tf.Tensor, std1: tf.Tensor, mean2: tf.Tensor,
                    std2: tf.Tensor) -> tf.Tensor:
  """KL(N(mean1, std1) || N(mean2, std2)) summed over [h, w, Z] -> [N]."""
  return tf.reduce_sum(_diag_normal_kl_units(mean1, std1, mean2, std2),
                       axis=[1, 2, 3])


def _window(encodings: tf.Tensor) -> tf.Tensor:
  """[N, n, h, w, D] -> [N, h, w, n * D], frames oldest first on channels."""
  shape = tf.shape(encodings)
  stacked = tf.transpose(encodings, [0, 2, 3, 1, 4])  # [N, h, w, n, D]
  return tf.reshape(stacked, tf.concat(
      [shape[:1], shape[2:4], [shape[1] * shape[4]]], 0))


class _PixelModel(EnvModel):
  """What the three kinds share: hyperparameter checks, encoder e, decoder,
  reward head, frame preprocessing, batch checks, likelihood terms and the
  diagnostics."""

  KIND = ""
  RENDERS_IN_STEP = False  # True where `step` runs the decoder (AR, RAR)

  def __init__(self, spec: EnvModelSpec, seed: int,
               hyperparameters: Dict[str, Any]):
    super().__init__(spec, seed=seed, name=f"{self.KIND}_model")
    if spec.kind != self.KIND:
      raise ValueError(f"{type(self).__name__} is the envmodel kind "
                       f"{self.KIND!r}, given a spec of kind {spec.kind!r}; "
                       "build models with envmodels.build(spec).")
    for key, value in hyperparameters.items():
      if key.endswith(("_channels", "_bits", "_horizon")) and (
          isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{key} must be a positive int, given {value!r}.")
    if hyperparameters["likelihood"] not in losses.LIKELIHOODS:
      raise ValueError(f"likelihood must be one of {losses.LIKELIHOODS}, "
                       f"given {hyperparameters['likelihood']!r}.")
    if not 1 <= hyperparameters["bit_depth"] <= 8:
      raise ValueError("bit_depth must be in [1, 8], given "
                       f"{hyperparameters['bit_depth']!r}.")
    for key in ("image_std", "reward_scale", "min_std"):
      if key in hyperparameters and not hyperparameters[key] > 0:
        raise ValueError(f"{key} must be > 0, given {hyperparameters[key]!r}.")
    # Stored privately: tf.Module would wrap a public dict attribute in a
    # tracking proxy that json.dumps (C encoder) rejects.
    self._hyperparameters = dict(hyperparameters)
    self._encoder_channels = hyperparameters["encoder_channels"]
    self._encoder = networks.Encoder(self._encoder_channels, name="encoder")
    self._decoder = networks.Decoder(spec.observation_shape[2], name="decoder")
    self._reward_head = networks.RewardHead(
        hyperparameters["reward_bits"], hyperparameters["reward_scale"],
        name="reward_head")

  @property
  def hyperparameters(self) -> Dict[str, Any]:
    """The constructor's hyperparameters, a plain JSON-able dict:
    `type(model)(model.spec, seed, **model.hyperparameters)` rebuilds the
    architecture (that is how exports are reloaded)."""
    return dict(self._hyperparameters)

  @classmethod
  def tiny_hyperparameters(cls) -> Dict[str, Any]:
    """Small sizes for tests and debugging."""
    tiny = dict(state_channels=8, hidden_channels=8, encoder_channels=8,
                reward_bits=3)
    if "latent_channels" in cls.__init__.__kwdefaults__:
      tiny["latent_channels"] = 4
    return tiny

  # -- Frames ----------------------------------------------------------------

  def encode_frames(self, frames: tf.Tensor) -> tf.Tensor:
    """The encoder e: float [N, H, W, C] in [0, 1] -> [N, h, w, E].

    Every frame the model encodes goes through this method, one call per
    batch of frames (tests count the frames encoded per step through it).
    """
    return self._encoder(frames)

  def _encode_sequence(self, frames: tf.Tensor) -> tf.Tensor:
    """float [B, n, H, W, C] -> [B, n, h, w, E] with one encoder call."""
    merged, lead = networks.merge_leading(frames)
    return networks.split_leading(self.encode_frames(merged), lead)

  def _preprocess(self, frames: tf.Tensor) -> tf.Tensor:
    return losses.preprocess_frames(frames, self._hyperparameters["bit_depth"])

  def _context_frames(self, observations: tf.Tensor) -> tf.Tensor:
    """uint8 [B, k, H, W, C] -> float [B, k, H, W, C] (the dtype is checked
    by `initial_state` and `check_batch`)."""
    return self._preprocess(observations)

  def _frame_mean(self, decoder_output: tf.Tensor) -> tf.Tensor:
    return losses.decoder_mean(decoder_output,
                               self._hyperparameters["likelihood"])

  def _image_log_prob(self, decoder_blocks: tf.Tensor,
                      targets: tf.Tensor) -> tf.Tensor:
    """[N, H/4, W/4, 16 C] logits or means in the decoder's blocks
    (`networks.Decoder.blocks`), targets in [0, 1] arranged alike -> [N]
    nats (a sum over pixels, whatever their arrangement)."""
    return losses.image_log_prob(decoder_blocks, targets,
                                 self._hyperparameters["likelihood"],
                                 self._hyperparameters["image_std"])

  def _reward(self, features: tf.Tensor) -> tf.Tensor:
    """[B, h, w, d] -> float32 [B], the expected reward."""
    return self._reward_head.expected_reward(self._reward_head.logits(features))

  # -- Batches and knobs -------------------------------------------------------

  def _check_batch(self, batch: Mapping[str, tf.Tensor]) -> Tuple[int, int]:
    """Checks a batch of sequences (see base.py) -> (L, T)."""
    num_steps = self.check_batch(batch)  # keys, shapes and dtypes
    return self.spec.context_length + num_steps, num_steps

  @staticmethod
  def _check_knobs(knobs: Mapping[str, Any]) -> None:
    unknown = sorted(set(knobs) - set(LATENT_KNOBS))
    if unknown:
      raise ValueError(f"unknown loss knobs {unknown}: expected some of "
                       f"{list(LATENT_KNOBS)}.")
    losses.check_free_nats(knobs.get("free_nats", 0.0),
                           knobs.get("free_nats_per", "step"))

  def _teacher_actions(self, batch: Mapping[str, tf.Tensor],
                       t: int) -> tf.Tensor:
    """Encoded action leading to target t (0-based): [B, c * A]."""
    k = self.spec.context_length
    return self.encode_actions(
        tf.cast(batch["action"][:, k - 1 + t], tf.int32))

  def _mle_terms(self, decoder_blocks: tf.Tensor, reward_logits: tf.Tensor,
                 batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Per predicted frame terms over B * T (batch-major), from the decoder's
    blocks [B * T, H/4, W/4, 16 C]: image and reward log-probs [B * T] and
    the reward squared error [B * T]."""
    k = self.spec.context_length
    targets = networks.target_blocks(batch["observation"], k,
                                     self._hyperparameters["bit_depth"])
    rewards = tf.reshape(tf.cast(batch["reward"][:, k:], tf.float32), [-1])
    expected = self._reward_head.expected_reward(reward_logits)
    return {
        "image_log_prob": self._image_log_prob(decoder_blocks, targets),
        "reward_log_prob": self._reward_head.log_prob(reward_logits, rewards),
        "reward_mse": tf.square(expected - rewards),
    }

  # -- Diagnostics -------------------------------------------------------------

  def diagnostics(self, batch: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Pictures: 'closed_loop', 'one_step_prior', 'open_loop' [B, T, H, W, C]
    in [0, 1]; 'open_loop_reward', 'true_reward' [B, T]."""
    length, _ = self._check_batch(batch)
    k = self.spec.context_length
    closed_loop, one_step_prior = self._teacher_forced_frames(batch)
    rollout = self.rollout(
        self.initial_state(batch["observation"][:, :k]),
        tf.cast(batch["action"][:, k - 1:length - 1], tf.int32), render=True)
    return {
        "closed_loop": closed_loop,
        "one_step_prior": one_step_prior,
        "open_loop": rollout.frames,
        "open_loop_reward": rollout.rewards,
        "true_reward": tf.cast(batch["reward"][:, k:], tf.float32),
    }

  def _teacher_forced_frames(
      self, batch: Mapping[str, tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
    """(closed_loop, one_step_prior) frames [B, T, H, W, C]."""
    raise NotImplementedError


@registry.register("vae")
class VAEBaseline(_PixelModel):
  """The VAE baseline: future frames independent given the context frames."""

  KIND = "vae"

  def __init__(self, spec: EnvModelSpec, seed: int = 0, *,
               state_channels: int = 64, latent_channels: int = 32,
               hidden_channels: int = 32, encoder_channels: int = 64,
               min_std: float = 0.1, max_horizon: int = 10,
               likelihood: str = "bernoulli", image_std: float = 0.1,
               bit_depth: int = 8, reward_bits: int = 8,
               reward_scale: float = 1.0):
    """state_channels D of c and f_t, latent_channels of z_t,
    hidden_channels of the prior/posterior stacks, res_conv and
    pool-and-inject, encoder_channels E of e(o), min_std the floor of the
    latent stds, max_horizon the steps with their own time code; the rest
    as in the module docstring. Defaults as state_space.py's."""
    super().__init__(spec, seed, dict(
        state_channels=state_channels, latent_channels=latent_channels,
        hidden_channels=hidden_channels, encoder_channels=encoder_channels,
        min_std=min_std, max_horizon=max_horizon, likelihood=likelihood,
        image_std=image_std, bit_depth=bit_depth, reward_bits=reward_bits,
        reward_scale=reward_scale))
    d = state_channels
    self._context_net = networks.ConvStack((1, 3, 3), (d, d, d),
                                           name="context_net")
    self._prior_net = networks.ConvStack(
        (1, 3, 3), (hidden_channels, hidden_channels, 2 * latent_channels),
        name="prior_net")
    self._posterior_net = networks.ConvStack(
        (1, 3, 3), (hidden_channels, hidden_channels, 2 * latent_channels),
        name="posterior_net")
    self._generator = Transition(d, hidden_channels, name="generator")

  @property
  def uses_actions(self) -> bool:
    """False: the baseline's frames depend on the context frames only."""
    return False

  def _time_code(self, step: tf.Tensor) -> tf.Tensor:
    """int32 [N] steps (1 = first future frame) -> [N, max_horizon], the
    one-hot code the networks read broadcast over the map (a vector part,
    networks.conv_parts)."""
    horizon = self._hyperparameters["max_horizon"]
    return tf.one_hot(tf.minimum(step, horizon) - 1, horizon, dtype=tf.float32)

  def _normal(self, stats: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """[N, h, w, 2Z] -> mean, std (softplus + min_std), each [N, h, w, Z]."""
    mean, raw_std = tf.split(stats, 2, axis=-1)
    return mean, tf.nn.softplus(raw_std) + self._hyperparameters["min_std"]

  def _prior(self, context: tf.Tensor,
             time: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    return self._normal(self._prior_net([context, time]))

  def _generate(self, context: tf.Tensor, z: tf.Tensor,
                time: tf.Tensor) -> tf.Tensor:
    """f_t = g(c, z_t, t): [N, h, w, D]."""
    return self._generator([context, z, time])

  def _initial_state(self, observations: tf.Tensor) -> VAEState:
    frames = self._context_frames(observations)  # [B, k, H, W, C]
    context = self._context_net(_window(self._encode_sequence(frames)))
    return VAEState(context=context,
                    step=tf.zeros(tf.shape(context)[:1], tf.int32),
                    features=tf.zeros_like(context), last_frame=frames[:, -1])

  deterministic = False  # z ~ p(z_t | c, t) at every step

  def state_features(self, state: VAEState) -> tf.Tensor:
    """The context encoding c for an initial state (step 0), else the last
    step's f_t [B, h, w, D]."""
    initial = tf.equal(state.step, 0)[:, None, None, None]  # [B, 1, 1, 1]
    return tf.where(initial, state.context, state.features)

  def _step(self, state: VAEState,
            encoded_actions: tf.Tensor) -> Tuple[VAEState, StepOutput]:
    del encoded_actions  # Frames are independent of the actions.
    step = state.step + 1
    time = self._time_code(step)
    mean, std = self._prior(state.context, time)
    z = self.sample_gaussian(mean, std)
    features = self._generate(state.context, z, time)  # [B, h, w, D]
    new_state = VAEState(state.context, step, features, state.last_frame)
    return new_state, StepOutput(reward=self._reward(features),
                                 features=features)

  def _render(self, state: VAEState) -> tf.Tensor:
    decoded = self._frame_mean(self._decoder(state.features))
    at_start = tf.equal(state.step, 0)[:, None, None, None]
    return tf.where(at_start, state.last_frame, decoded)

  def _posterior_pass(self, batch: Mapping[str, tf.Tensor]) -> Dict[str, Any]:
    """Context, time codes, prior and one posterior sample for every target
    frame, all merged over B * T (batch-major)."""
    _, num_steps = self._check_batch(batch)
    k = self.spec.context_length
    frames = self._preprocess(batch["observation"])  # [B, L, H, W, C]
    # Split once: each slice's gradient would be a zero-filled [B, L, ...].
    context_encodings, target_encodings = tf.split(
        self._encode_sequence(frames), [k, num_steps], axis=1)  # [B, k|T, ..]
    context = self._context_net(_window(context_encodings))  # [B, h, w, D]
    context = tf.repeat(context[:, None], num_steps, axis=1)
    context, lead = networks.merge_leading(context)  # [B * T, h, w, D]
    targets, _ = networks.merge_leading(target_encodings)  # [B * T, h, w, E]
    step = tf.reshape(tf.broadcast_to(
        tf.range(1, num_steps + 1, dtype=tf.int32), lead), [-1])
    time = self._time_code(step)
    prior_mean, prior_std = self._prior(context, time)
    post_mean, post_std = self._normal(self._posterior_net(
        [context, time, targets, prior_mean, prior_std]))
    z = post_mean + post_std * self.sample_normal(tf.shape(post_mean))
    return dict(lead=lead, context=context, time=time, prior_mean=prior_mean,
                prior_std=prior_std, post_mean=post_mean, post_std=post_std,
                features=self._generate(context, z, time))

  def loss(self, batch: Mapping[str, tf.Tensor], **knobs: Any) -> LossOutput:
    """Negative ELBO per frame (image + reward) with the knobs kl_scale
    (default 1), free_nats (0) granted per free_nats_per ('step': each
    frame's KL; 'position', 'unit': see losses.free_nats_kl) and
    global_kl_scale (0). overshooting is accepted and unused (no transition
    to overshoot)."""
    self._check_knobs(knobs)
    kl_scale = knobs.get("kl_scale", 1.0)
    free_nats = knobs.get("free_nats", 0.0)
    free_nats_per = knobs.get("free_nats_per", "step")
    global_kl_scale = knobs.get("global_kl_scale", 0.0)
    p = self._posterior_pass(batch)
    terms = self._mle_terms(self._decoder.blocks(p["features"]),
                            self._reward_head.logits(p["features"]), batch)
    kl_units = _diag_normal_kl_units(p["post_mean"], p["post_std"],
                                     p["prior_mean"], p["prior_std"])
    kl = tf.reduce_sum(kl_units, axis=[1, 2, 3])  # [B * T]
    kl_global = _diag_normal_kl(p["post_mean"], p["post_std"],
                                tf.zeros_like(p["post_mean"]),
                                tf.ones_like(p["post_std"]))
    loss = tf.reduce_mean(-terms["image_log_prob"] - terms["reward_log_prob"]
                          + kl_scale * losses.free_nats_kl(
                              kl_units, free_nats, free_nats_per)
                          + global_kl_scale * kl_global)
    metrics = {name: tf.reduce_mean(value) for name, value in terms.items()}
    metrics.update(
        loss=loss, kl=tf.reduce_mean(kl), kl_global=tf.reduce_mean(kl_global),
        log_likelihood_per_frame=tf.reduce_mean(terms["image_log_prob"] - kl))
    return LossOutput(loss, metrics)

  def _teacher_forced_frames(
      self, batch: Mapping[str, tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
    """Reconstructions (posterior z) and prior samples given the context."""
    p = self._posterior_pass(batch)
    z = p["prior_mean"] + p["prior_std"] * self.sample_normal(
        tf.shape(p["prior_mean"]))
    prior_features = self._generate(p["context"], z, p["time"])
    frames = [networks.split_leading(self._frame_mean(self._decoder(f)),
                                     p["lead"])
              for f in (p["features"], prior_features)]
    return frames[0], frames[1]


class _TeacherForcedModel(_PixelModel):
  """The MLE kinds (AR, RAR): trained with teacher forcing; the latent knobs
  are accepted and ignored. Subclasses implement `_teacher_forced`."""

  def _teacher_forced(self, batch: Mapping[str, tf.Tensor]) -> Dict[str, Any]:
    """-> {'lead': [B, T], 'decoder_blocks': [B * T, H/4, W/4, 16 C] (the
    decoder's blocks, `networks.Decoder.blocks`),
    'reward_logits': [B * T, bits + 2]} from the true previous frames."""
    raise NotImplementedError

  def loss(self, batch: Mapping[str, tf.Tensor], **knobs: Any) -> LossOutput:
    """Negative log-likelihood per frame (image + reward), teacher forced."""
    self._check_knobs(knobs)
    out = self._teacher_forced(batch)
    terms = self._mle_terms(out["decoder_blocks"], out["reward_logits"], batch)
    metrics = {name: tf.reduce_mean(value) for name, value in terms.items()}
    loss = -metrics["image_log_prob"] - metrics["reward_log_prob"]
    metrics.update(loss=loss,
                   log_likelihood_per_frame=metrics["image_log_prob"])
    return LossOutput(loss, metrics)

  def _teacher_forced_frames(
      self, batch: Mapping[str, tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
    """Teacher-forced predictions are the one-step predictions: both."""
    out = self._teacher_forced(batch)
    decoder_output = networks.depth_to_space(out["decoder_blocks"],
                                             networks.Decoder.BLOCK)
    frames = networks.split_leading(self._frame_mean(decoder_output),
                                    out["lead"])
    return frames, frames


@registry.register("ar")
class AutoregressiveModel(_TeacherForcedModel):
  """AR: o_t ~ p(o_t | o_{t-k..t-1}, a_{t-1}), predictions fed back."""

  KIND = "ar"
  RENDERS_IN_STEP = True

  def __init__(self, spec: EnvModelSpec, seed: int = 0, *,
               state_channels: int = 64, hidden_channels: int = 32,
               encoder_channels: int = 64, likelihood: str = "bernoulli",
               image_std: float = 0.1, bit_depth: int = 8,
               reward_bits: int = 8, reward_scale: float = 1.0):
    """state_channels D of the predictive map, hidden_channels of res_conv
    and pool-and-inject, encoder_channels E of e(o); the rest as in the
    module docstring."""
    super().__init__(spec, seed, dict(
        state_channels=state_channels, hidden_channels=hidden_channels,
        encoder_channels=encoder_channels, likelihood=likelihood,
        image_std=image_std, bit_depth=bit_depth, reward_bits=reward_bits,
        reward_scale=reward_scale))
    d = state_channels
    self._window_net = networks.ConvStack((1, 3, 3), (d, d, d),
                                          name="window_net")
    self._core = Transition(d, hidden_channels, name="core")

  def _predict(self, encodings: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    """Window encodings [N, h, w, k * E], actions [N, c * A] -> [N, h, w, D],
    the map the next frame and its reward are decoded from."""
    mixed = self._window_net(encodings)
    return self._core([mixed, actions])

  def _initial_state(self, observations: tf.Tensor) -> ARState:
    frames = self._context_frames(observations)  # [B, k, H, W, C]
    encodings = _window(self._encode_sequence(frames))  # [B, h, w, k * E]
    return ARState(encodings=encodings, frame=frames[:, -1])

  deterministic = True  # the decoder's mean frame is fed back

  def state_features(self, state: ARState) -> tf.Tensor:
    """e(o_t) of the newest frame [B, h, w, E], what a step gives."""
    return state.encodings[..., -self._encoder_channels:]

  def _step(self, state: ARState,
            encoded_actions: tf.Tensor) -> Tuple[ARState, StepOutput]:
    predictive = self._predict(state.encodings, encoded_actions)
    frame = self._frame_mean(self._decoder(predictive))  # [B, H, W, C]
    encoding = self.encode_frames(frame)  # [B, h, w, E], the only encoding
    encodings = tf.concat(
        [state.encodings[..., self._encoder_channels:], encoding], -1)
    return ARState(encodings, frame), StepOutput(
        reward=self._reward(predictive), features=encoding)

  def _render(self, state: ARState) -> tf.Tensor:
    return state.frame

  def _teacher_forced(self, batch: Mapping[str, tf.Tensor]) -> Dict[str, Any]:
    """Decoder outputs and reward logits of every target frame from the true
    previous frames: [B * T, ...] batch-major."""
    length, num_steps = self._check_batch(batch)
    k = self.spec.context_length
    frames = self._preprocess(batch["observation"][:, :length - 1])
    encodings = self._encode_sequence(frames)  # [B, L - 1, h, w, E]
    windows = tf.signal.frame(encodings, k, 1, axis=1)  # [B, T, k, h, w, E]
    windows, lead = networks.merge_leading(windows)
    actions = tf.stack([self._teacher_actions(batch, t)
                        for t in range(num_steps)], axis=1)  # [B, T, c * A]
    actions, _ = networks.merge_leading(actions)
    predictive = self._predict(_window(windows), actions)  # [B * T, h, w, D]
    return dict(lead=lead, decoder_blocks=self._decoder.blocks(predictive),
                reward_logits=self._reward_head.logits(predictive))


@registry.register("rar")
class RecurrentAutoregressiveModel(_TeacherForcedModel):
  """RAR: the dSSM-DET with s_{t+1} = g(s_t, mu_{t+1}, a_t, e(o_t))."""

  KIND = "rar"
  RENDERS_IN_STEP = True

  def __init__(self, spec: EnvModelSpec, seed: int = 0, *,
               state_channels: int = 64, latent_channels: int = 32,
               hidden_channels: int = 32, encoder_channels: int = 64,
               likelihood: str = "bernoulli", image_std: float = 0.1,
               bit_depth: int = 8, reward_bits: int = 8,
               reward_scale: float = 1.0):
    """state_channels D of s_t, latent_channels of the prior mean mu,
    hidden_channels of the prior stack, res_conv and pool-and-inject,
    encoder_channels E of e(o); the rest as in the module docstring.
    Defaults as state_space.py's dSSM-DET."""
    super().__init__(spec, seed, dict(
        state_channels=state_channels, latent_channels=latent_channels,
        hidden_channels=hidden_channels, encoder_channels=encoder_channels,
        likelihood=likelihood, image_std=image_std, bit_depth=bit_depth,
        reward_bits=reward_bits, reward_scale=reward_scale))
    d = state_channels
    self._initial_net = networks.ConvStack((1, 3, 3), (d, d, d),
                                           name="initial_net")
    self._prior_net = networks.ConvStack(
        (1, 3, 3), (hidden_channels, hidden_channels, latent_channels),
        name="prior_net")
    self._transition = Transition(d, hidden_channels)

  def _transition_step(self, state: tf.Tensor, frame_encoding: tf.Tensor,
                       actions: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """(s_t, e(o_t), a_t) -> (s_{t+1}, mu_{t+1}), both [B, h, w, .]."""
    mu = self._prior_net([state, actions])
    next_state = self._transition([state, actions, mu, frame_encoding])
    return next_state, mu

  def _initial_state(self, observations: tf.Tensor) -> RARState:
    frames = self._context_frames(observations)  # [B, k, H, W, C]
    encodings = self._encode_sequence(frames)  # [B, k, h, w, E]
    return RARState(abstract_state=self._initial_net(_window(encodings)),
                    frame_encoding=encodings[:, -1], frame=frames[:, -1])

  deterministic = True  # the prior's mean, the decoder's mean frame

  def state_features(self, state: RARState) -> tf.Tensor:
    """s_t [B, h, w, D], what a step gives."""
    return state.abstract_state

  def _step(self, state: RARState,
            encoded_actions: tf.Tensor) -> Tuple[RARState, StepOutput]:
    next_state, mu = self._transition_step(
        state.abstract_state, state.frame_encoding, encoded_actions)
    decoder_inputs = tf.concat([next_state, mu], -1)  # [B, h, w, D + Z]
    frame = self._frame_mean(self._decoder(decoder_inputs))
    encoding = self.encode_frames(frame)  # [B, h, w, E], used next step
    return RARState(next_state, encoding, frame), StepOutput(
        reward=self._reward(decoder_inputs), features=next_state)

  def _render(self, state: RARState) -> tf.Tensor:
    return state.frame

  def _teacher_forced(self, batch: Mapping[str, tf.Tensor]) -> Dict[str, Any]:
    """Unrolls s_t over the true frames; decoder outputs and reward logits
    of every target frame, [B * T, ...] batch-major."""
    length, num_steps = self._check_batch(batch)
    k = self.spec.context_length
    frames = self._preprocess(batch["observation"][:, :length - 1])
    encodings = self._encode_sequence(frames)  # [B, L - 1, h, w, E]
    # Unstacked once: a slice per step (or of the context) would cost a
    # zero-filled gradient.
    steps = tf.unstack(encodings, length - 1, 1)  # (L - 1) x [B, h, w, E]
    state = self._initial_net(_window(tf.stack(steps[:k], 1)))
    states, mus = [], []
    for t in range(num_steps):
      state, mu = self._transition_step(state, steps[k - 1 + t],
                                        self._teacher_actions(batch, t))
      states.append(state)
      mus.append(mu)
    states, lead = networks.merge_leading(tf.stack(states, 1))  # [B * T, ...]
    mus, _ = networks.merge_leading(tf.stack(mus, 1))
    decoder_inputs = tf.concat([states, mus], -1)  # [B * T, h, w, D + Z]
    return dict(lead=lead, decoder_blocks=self._decoder.blocks(decoder_inputs),
                reward_logits=self._reward_head.logits(decoder_inputs))

