"""State-space environment models: dSSM-DET, dSSM-VAE and sSSM.

Buesing et al. (2018), "Learning and Querying Fast Generative Models for
Reinforcement Learning", section "State-space models". Where it sits in the
data flow: `i2a.pretrain` trains one of these with `loss(batch)`, exports it
(`envmodels.export`), and the I2A agent rolls it out frozen through the
`EnvModel` interface (`initial_state`, `step`, `render`, `rollout`).

The three kinds are ONE class with the same parameters and compute; they
differ only in where samples of the latent z_t are used:

  prior       z_t ~ p(z_t | s_{t-1}, a_{t-1}) = N(mu_t, sigma_t)
  transition  s_t = g(s_{t-1}, z_t, a_{t-1})
  decoder     o_t ~ p(o_t | s_t, z_t);   reward head on (s_t, z_t)

  kind        z fed to g       z fed to decoder/reward   trained by
  dssm_det    mu_t             mu_t (no sampling at all)   MLE
  dssm_vae    mu_t             sample z_t                  ELBO
  sssm        sample z_t       the same sample z_t         ELBO

The posterior q(z_t | s_{t-1}, a_{t-1}, o_t) (filtering, diagonal Gaussian)
shares parameters with the prior through the state: it sees the state, the
action, the encoded observation e(o_t) and the prior's statistics.

States s_t are feature maps [B, h, w, state_channels] at 1/8 of the frame
size; latents z_t are spatial diagonal Gaussians [B, h, w, latent_channels].
The abstract imagination an agent reads (`StepOutput.features`) is s_t.

Action-free (unconditional) sSSM: with `spec.action_free`, actions are inputs
nowhere (the encoded action is [B, 0]). `attach_imagination_prior(seed)`
swaps the prior p(z_t | s_{t-1}) for a freshly initialised module of the
same shape, the learned imagination prior p_imag (paper, "Learning to query
by imagination prior"), whose variables are then the model's only trainable
ones.

Departures from the paper (reasons in docs/envmodels.md): the state that
`initial_state` returns carries z_0 = 0 (the context has no latent; render of
an initial state shows the decoder's guess from s_0 alone); the prior and
posterior conv stacks output 2 * latent_channels channels (mean and
pre-softplus std) from one stack; the std has a floor `min_std` (PlaNet).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import sonnet as snt
import tensorflow as tf

from envmodels import base
from envmodels import losses
from envmodels import networks
from envmodels import registry

KINDS = ("dssm_det", "dssm_vae", "sssm")

# Knobs of `loss` and their defaults (docs/envmodels.md, "Loss knobs").
LOSS_KNOBS: Dict[str, Any] = {
    "kl_scale": 1.0,
    "free_nats": 0.0,
    "free_nats_per": "step",
    "global_kl_scale": 0.0,
    "overshooting": 0,
}


class SSMState(NamedTuple):
  """The rollout state of a state-space model."""
  state: tf.Tensor  # float32 [B, h, w, state_channels]: s_t
  latent: tf.Tensor  # float32 [B, h, w, latent_channels]: z_t as the decoder
  #                    and reward head see it (0 for the initial state)


class Gaussian(NamedTuple):
  """A diagonal Gaussian over a latent map."""
  mean: tf.Tensor  # [B, h, w, latent_channels]
  std: tf.Tensor  # [B, h, w, latent_channels]


def gaussian_kl_units(q: Gaussian, p: Gaussian) -> tf.Tensor:
  """KL(q || p) of diagonal Gaussians per latent unit -> [B, h, w, Z]."""
  ratio = tf.square(q.std / p.std)
  mahalanobis = tf.square((q.mean - p.mean) / p.std)
  return 0.5 * (ratio + mahalanobis - 1.0 - tf.math.log(ratio))


def gaussian_kl(q: Gaussian, p: Gaussian) -> tf.Tensor:
  """KL(q || p) of diagonal Gaussians, summed over the latent map -> [B]."""
  return tf.reduce_sum(gaussian_kl_units(q, p), axis=[1, 2, 3])


def standard_normal_like(q: Gaussian) -> Gaussian:
  return Gaussian(tf.zeros_like(q.mean), tf.ones_like(q.std))


def _force_trainable(next_creator, **kwargs):
  kwargs["trainable"] = True
  return next_creator(**kwargs)


class _Filtered(NamedTuple):
  """Everything the filtering pass over a training batch computes."""
  starts: List[tf.Tensor]  # T x [B, h, w, S]: s_{t-1} before each step
  actions: List[tf.Tensor]  # T x [B, c * A]: a_{t-1}
  priors: List[Optional[Gaussian]]  # T x p(z_t | s_{t-1}, a_{t-1}); None
  #                                   for dssm_det (its mean only is used)
  posteriors: Optional[List[Gaussian]]  # T x q(z_t | ...); None for det
  decoder_inputs: tf.Tensor  # [B, T, h, w, S + Z]: concat(s_t, z_t)


class StateSpaceModel(base.EnvModel):
  """dSSM-DET, dSSM-VAE and sSSM (chosen by `spec.kind`), one architecture.

  Hyperparameters (JSON-able; the `hyperparameters` property returns them):
    state_channels: channels of the state s_t (paper 64).
    latent_channels: channels of the latent z_t (32: the prior's last conv
      has 64 = 2 * 32 outputs, mean and std, as in the appendix figure).
    hidden_channels: channels inside the transition (res_conv,
      pool-and-inject) and the prior/posterior stacks (paper 32).
    encoder_channels: channels of the observation encoder e (paper 64).
    min_std: floor added to the softplus std of prior and posterior.
    likelihood: decoder likelihood, 'bernoulli' (paper) or 'gaussian'.
    image_std: std of the 'gaussian' likelihood.
    bit_depth: bits per channel the frames are reduced to (8 = none).
    reward_bits, reward_scale: the reward head's coding (networks.RewardHead).
  """

  def __init__(self, spec: base.EnvModelSpec, seed: int = 0,
               state_channels: int = 64, latent_channels: int = 32,
               hidden_channels: int = 32, encoder_channels: int = 64,
               min_std: float = 0.1, likelihood: str = "bernoulli",
               image_std: float = 0.1, bit_depth: int = 8,
               reward_bits: int = 8, reward_scale: float = 1.0):
    super().__init__(spec, seed=seed, name=spec.kind)
    if spec.kind not in KINDS:
      raise ValueError(f"StateSpaceModel builds kinds {KINDS}, given spec "
                       f"with kind {spec.kind!r}.")
    for key, value in (("state_channels", state_channels),
                       ("latent_channels", latent_channels),
                       ("hidden_channels", hidden_channels),
                       ("encoder_channels", encoder_channels),
                       ("reward_bits", reward_bits)):
      if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
          or value < 1):
        raise ValueError(f"{key} must be a positive integer, given {value!r}.")
    if likelihood not in losses.LIKELIHOODS:
      raise ValueError(f"likelihood must be one of {losses.LIKELIHOODS}, "
                       f"given {likelihood!r}.")
    if min_std <= 0 or image_std <= 0 or reward_scale <= 0:
      raise ValueError("min_std, image_std and reward_scale must be > 0, "
                       f"given {min_std}, {image_std}, {reward_scale}.")
    if not 1 <= bit_depth <= 8:
      raise ValueError(f"bit_depth must be in [1, 8], given {bit_depth}.")
    self._hyperparameters = dict(
        state_channels=int(state_channels),
        latent_channels=int(latent_channels),
        hidden_channels=int(hidden_channels),
        encoder_channels=int(encoder_channels), min_std=float(min_std),
        likelihood=likelihood, image_std=float(image_std),
        bit_depth=int(bit_depth), reward_bits=int(reward_bits),
        reward_scale=float(reward_scale))
    self._state_channels = int(state_channels)
    self._latent_channels = int(latent_channels)
    self._hidden_channels = int(hidden_channels)
    self._min_std = float(min_std)
    self._likelihood = likelihood
    self._image_std = float(image_std)
    self._bit_depth = int(bit_depth)

    self._encoder = networks.Encoder(encoder_channels, name="encoder")
    self._initial = networks.ConvStack(
        (1, 3, 3), (state_channels,) * 3, name="initial_state")
    self._prior = self._make_prior("prior")
    self._posterior = networks.ConvStack(
        (1, 3, 3), (hidden_channels, hidden_channels, 2 * latent_channels),
        name="posterior")
    self._transition_in = networks.ResConv(state_channels, hidden_channels,
                                           name="transition_res_conv_in")
    self._pool_and_inject = networks.PoolAndInject(hidden_channels,
                                                   name="pool_and_inject")
    self._transition_out = networks.ResConv(state_channels, hidden_channels,
                                            name="transition_res_conv_out")
    self._decoder = networks.Decoder(spec.observation_shape[-1],
                                     name="decoder")
    self._reward_head = networks.RewardHead(reward_bits, reward_scale,
                                            name="reward_head")
    self._imagination_prior: Optional[networks.ConvStack] = None

  @property
  def hyperparameters(self) -> Dict[str, Any]:
    """The constructor's hyperparameters as a plain JSON-able dict:
    `StateSpaceModel(spec, seed, **model.hyperparameters)` rebuilds it."""
    return dict(self._hyperparameters)

  @classmethod
  def tiny_hyperparameters(cls) -> Dict[str, Any]:
    """Small sizes for tests and debugging."""
    return dict(state_channels=8, latent_channels=4, hidden_channels=8,
                encoder_channels=8, reward_bits=3)

  # -- Building blocks ------------------------------------------------------

  @property
  def kind(self) -> str:
    return self.spec.kind

  @property
  def imagination_prior(self) -> Optional[snt.Module]:
    """The attached imagination prior p_imag, or None."""
    return self._imagination_prior

  def _make_prior(self, name: str) -> networks.ConvStack:
    hidden = self._hidden_channels
    return networks.ConvStack((1, 3, 3),
                              (hidden, hidden, 2 * self._latent_channels),
                              name=name)

  def _gaussian(self, raw: tf.Tensor) -> Gaussian:
    mean, raw_std = tf.split(raw, 2, axis=-1)
    return Gaussian(mean, tf.nn.softplus(raw_std) + self._min_std)

  @staticmethod
  def _prior_inputs(state: tf.Tensor, action: tf.Tensor) -> List[tf.Tensor]:
    """concat(s_{t-1}, a_{t-1} tiled), as its parts (networks.conv_parts):
    what the prior stack reads."""
    return [state, action]

  def _prior_raw(self, state: tf.Tensor, action: tf.Tensor,
                 module: Optional[snt.Module] = None) -> tf.Tensor:
    """The prior stack's output [B, h, w, 2Z]: mean and pre-softplus std."""
    module = self._prior if module is None else module
    return module(self._prior_inputs(state, action))

  def _prior_dist(self, state: tf.Tensor, action: tf.Tensor,
                  module: Optional[snt.Module] = None) -> Gaussian:
    """p(z_t | s_{t-1}, a_{t-1}): [B, h, w, S], [B, cA] -> Gaussian."""
    return self._gaussian(self._prior_raw(state, action, module))

  def _posterior_dist(self, state: tf.Tensor, action: tf.Tensor,
                      embedded: tf.Tensor, prior: Gaussian) -> Gaussian:
    """q(z_t | s_{t-1}, a_{t-1}, o_t), sharing the state with the prior."""
    return self._gaussian(self._posterior(
        [state, action, embedded, prior.mean, prior.std]))

  def _transition(self, state: tf.Tensor, action: tf.Tensor,
                  latent: tf.Tensor) -> tf.Tensor:
    """g: concat(s, a tiled, z) -> res_conv -> relu -> pool-and-inject ->
    res_conv -> s_t [B, h, w, S]."""
    hidden = tf.nn.relu(self._transition_in([state, action, latent],
                                            residual=state))
    return self._transition_out(self._pool_and_inject(hidden),
                                residual=hidden)

  def _sample(self, dist: Gaussian) -> tf.Tensor:
    return self.sample_gaussian(dist.mean, dist.std)

  def _prior_mean(self, state: tf.Tensor, action: tf.Tensor) -> tf.Tensor:
    """The mean of p(z_t | s_{t-1}, a_{t-1}) alone [B, h, w, Z]: the
    prior stack's std outputs are not computed (dSSM-DET never uses them)."""
    return self._prior(self._prior_inputs(state, action),
                       out_channels=self._latent_channels)

  def _generate(self, state: tf.Tensor, action: tf.Tensor,
                prior_module: Optional[snt.Module] = None,
                with_prior: bool = True
                ) -> Tuple[SSMState, Optional[Gaussian]]:
    """One generative step from s_{t-1}, sampling z_t as the kind says.
    Returns the new state and the prior (None for dssm_det, which computes
    only the prior's mean, and where `with_prior` is False: a rollout
    needs only the sample, drawn with the std's softplus in the noise's
    fused kernel)."""
    if self.kind == "dssm_det":
      mean = self._prior_mean(state, action)
      new_state = self._transition(state, action, mean)
      return SSMState(new_state, mean), None
    raw = self._prior_raw(state, action, prior_module)
    if with_prior:
      prior = self._gaussian(raw)
      sample = self._sample(prior)
      mean = prior.mean
    else:
      prior = None
      mean, raw_std = tf.split(raw, 2, axis=-1)
      sample = self.sample_softplus_gaussian(mean, raw_std, self._min_std)
    if self.kind == "dssm_vae":
      to_transition, to_decoder = mean, sample
    else:  # sssm
      to_transition = to_decoder = sample
    new_state = self._transition(state, action, to_transition)
    return SSMState(new_state, to_decoder), prior

  def _reward_logits(self, decoder_inputs: tf.Tensor) -> tf.Tensor:
    return self._reward_head.logits(decoder_inputs)

  # -- EnvModel -------------------------------------------------------------

  def _initial_state(self, observations: tf.Tensor) -> SSMState:
    merged, lead = networks.merge_leading(observations)  # [B * k, H, W, C]
    return self._initial_state_from_encodings(networks.split_leading(
        self._encode_context_frames(merged), lead))  # [B, k, h, w, D]

  @property
  def encodes_context_frames(self) -> bool:
    return True

  def _encode_context_frames(self, frames: tf.Tensor) -> tf.Tensor:
    """uint8 [B, H, W, C] -> [B, h, w, D]: the encoder of one frame."""
    return self._encoder(losses.preprocess_frames(frames, self._bit_depth))

  def _initial_state_from_encodings(self, encodings: tf.Tensor) -> SSMState:
    # [B, k, h, w, D] -> [B, h, w, k * D]: context encodings side by side.
    stacked = tf.concat(tf.unstack(encodings, axis=1), axis=-1)
    state = self._initial(stacked)  # [B, h, w, S]
    latent = tf.zeros(tf.concat([tf.shape(state)[:3],
                                 [self._latent_channels]], 0))
    return SSMState(state, latent)

  def _step(self, state: SSMState, encoded_actions: tf.Tensor
            ) -> Tuple[SSMState, base.StepOutput]:
    new_state, _ = self._generate(state.state, encoded_actions,
                                  self._imagination_prior, with_prior=False)
    decoder_inputs = tf.concat([new_state.state, new_state.latent], -1)
    reward = self._reward_head.expected_reward(
        self._reward_logits(decoder_inputs))
    return new_state, base.StepOutput(reward=reward, features=new_state.state)

  def state_features(self, state: SSMState) -> tf.Tensor:
    """s_t [B, h, w, state_channels], what a step gives as features."""
    return state.state

  @property
  def deterministic(self) -> bool:
    """dSSM-DET only: dSSM-VAE samples the decoder's z (rewards and frames
    vary), sSSM samples the transition's."""
    return self.kind == "dssm_det"

  def _render(self, state: SSMState) -> tf.Tensor:
    decoder_inputs = tf.concat([state.state, state.latent], -1)
    return losses.decoder_mean(self._decoder(decoder_inputs),
                               self._likelihood)

  # -- Training -------------------------------------------------------------

  def _filter(self, batch: Dict[str, tf.Tensor], num_steps: int) -> _Filtered:
    """Runs the model over a batch: posterior samples for the latent kinds
    (filtering), the deterministic rollout from the context for dSSM-DET."""
    k = self.spec.context_length
    observation = tf.convert_to_tensor(batch["observation"])
    action = tf.convert_to_tensor(batch["action"])
    state = self._initial_state(observation[:, :k]).state
    latent_model = self.kind != "dssm_det"
    if latent_model:
      targets = losses.preprocess_frames(observation[:, k:], self._bit_depth)
      merged, lead = networks.merge_leading(targets)  # [B * T, H, W, C]
      embedded = tf.unstack(  # T x [B, h, w, D]: one gradient, not T
          networks.split_leading(self._encoder(merged), lead), num_steps, 1)
    starts, actions, priors, posteriors, decoder_inputs = [], [], [], [], []
    for t in range(num_steps):
      encoded = self.encode_actions(action[:, k - 1 + t])  # [B, cA]
      starts.append(state)
      actions.append(encoded)
      if latent_model:
        prior = self._prior_dist(state, encoded)
        posterior = self._posterior_dist(state, encoded, embedded[t], prior)
        latent = self._sample(posterior)  # reparameterised, one sample
        to_transition = latent if self.kind == "sssm" else prior.mean
        state = self._transition(state, encoded, to_transition)
        posteriors.append(posterior)
      else:
        new_state, prior = self._generate(state, encoded)
        state, latent = new_state.state, new_state.latent
      priors.append(prior)
      decoder_inputs.append(tf.concat([state, latent], -1))
    return _Filtered(starts, actions, priors,
                     posteriors if latent_model else None,
                     tf.stack(decoder_inputs, axis=1))

  def _overshooting_kl(self, filtered: _Filtered, depth: int,
                       free_nats: float, free_nats_per: str
                       ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Latent overshooting (PlaNet): KL(sg(q_t) || p(z_t | s_{t-d})) for
    d = 2 .. depth + 1, the prior rolled open-loop from the filtered state
    s_{t-d} with the true actions. Returns the sum over terms [B] after free
    nats, and the number of terms."""
    num_steps = len(filtered.starts)
    total, count = 0.0, 0
    for start in range(num_steps):
      state = filtered.starts[start]
      prior = filtered.priors[start]
      for distance in range(2, depth + 2):
        t = start + distance - 1
        if t >= num_steps:
          break
        to_transition = (self._sample(prior) if self.kind == "sssm"
                         else prior.mean)
        state = self._transition(state, filtered.actions[t - 1], to_transition)
        prior = self._prior_dist(state, filtered.actions[t])
        posterior = Gaussian(*map(tf.stop_gradient, filtered.posteriors[t]))
        total += losses.free_nats_kl(gaussian_kl_units(posterior, prior),
                                     free_nats, free_nats_per)
        count += 1
    return total, count

  def loss(self, batch: Dict[str, tf.Tensor], **knobs: Any) -> base.LossOutput:
    """MLE (dssm_det) or ELBO (dssm_vae, sssm) per predicted frame.

    Knobs (docs/envmodels.md): kl_scale=1.0, free_nats=0.0 and
    free_nats_per='step' (free nats granted to the KL of each step summed
    over the latent map; 'position': of each spatial position, summed over
    the latent channels; 'unit': of each latent unit), global_kl_scale=0.0
    (KL of the posterior to N(0, 1)), overshooting=0 (latent overshooting
    depth; 0 is the standard ELBO). They do nothing for dssm_det, which has
    no latent.
    """
    unknown = sorted(set(knobs) - set(LOSS_KNOBS))
    if unknown:
      raise ValueError(f"unknown loss knobs {unknown} for kind {self.kind!r}; "
                       f"known knobs and defaults: {LOSS_KNOBS}.")
    knobs = {**LOSS_KNOBS, **knobs}
    kl_scale = float(knobs["kl_scale"])
    free_nats = float(knobs["free_nats"])
    free_nats_per = knobs["free_nats_per"]
    global_kl_scale = float(knobs["global_kl_scale"])
    overshooting = knobs["overshooting"]
    if min(kl_scale, free_nats, global_kl_scale) < 0:
      raise ValueError("kl_scale, free_nats and global_kl_scale must be >= 0, "
                       f"given {kl_scale}, {free_nats}, {global_kl_scale}.")
    losses.check_free_nats(free_nats, free_nats_per)
    if int(overshooting) != overshooting or overshooting < 0:
      raise ValueError("overshooting must be an integer >= 0 (0 = standard "
                       f"ELBO), given {overshooting!r}.")
    num_steps = self.check_batch(batch)
    k = self.spec.context_length
    filtered = self._filter(batch, num_steps)

    # In the decoder's blocks (Decoder.blocks): the same sum over pixels.
    targets = networks.target_blocks(batch["observation"], k,
                                     self._bit_depth)  # [B * T, H/4, W/4, 16C]
    merged, lead = networks.merge_leading(filtered.decoder_inputs)
    image_log_prob = networks.split_leading(losses.image_log_prob(
        self._decoder.blocks(merged), targets, self._likelihood,
        self._image_std), lead)  # [B, T]
    reward_logits = self._reward_logits(merged)
    true_reward = tf.cast(batch["reward"][:, k:], tf.float32)  # [B, T]
    reward_log_prob = networks.split_leading(
        self._reward_head.log_prob(reward_logits,
                                   tf.reshape(true_reward, [-1])), lead)
    predicted_reward = networks.split_leading(
        self._reward_head.expected_reward(reward_logits), lead)

    zeros = tf.zeros_like(image_log_prob)  # [B, T]
    if filtered.posteriors is None:  # dssm_det: log p(o, r | context, a)
      kl = kl_after_free_nats = global_kl = zeros
      divergence = tf.zeros_like(image_log_prob[:, 0])
      overshooting_kl = tf.constant(0.0)
    else:
      kl_units = [gaussian_kl_units(q, p) for q, p in
                  zip(filtered.posteriors, filtered.priors)]
      kl = tf.stack([tf.reduce_sum(units, axis=[1, 2, 3])
                     for units in kl_units], 1)  # [B, T]
      kl_after_free_nats = tf.stack([
          losses.free_nats_kl(units, free_nats, free_nats_per)
          for units in kl_units], 1)  # [B, T]
      global_kl = tf.stack([gaussian_kl(q, standard_normal_like(q))
                            for q in filtered.posteriors], 1)
      divergence = tf.reduce_sum(kl_after_free_nats, 1)  # [B]
      overshooting_kl = tf.constant(0.0)
      if overshooting > 0:
        extra, count = self._overshooting_kl(filtered, int(overshooting),
                                             free_nats, free_nats_per)
        # PlaNet eq. 7: the average over distances d = 1 .. overshooting + 1.
        divergence = (divergence + extra) / (overshooting + 1)
        if count:
          overshooting_kl = tf.reduce_mean(extra) / count

    per_sequence = (-tf.reduce_sum(image_log_prob + reward_log_prob, 1) +
                    kl_scale * divergence +
                    global_kl_scale * tf.reduce_sum(global_kl, 1))  # [B]
    loss = tf.reduce_mean(per_sequence) / num_steps
    metrics = {
        "loss": loss,
        "image_log_prob": tf.reduce_mean(image_log_prob),
        "reward_log_prob": tf.reduce_mean(reward_log_prob),
        "kl": tf.reduce_mean(kl),
        "kl_after_free_nats": tf.reduce_mean(kl_after_free_nats),
        "global_kl": tf.reduce_mean(global_kl),
        "overshooting_kl": overshooting_kl,
        "log_likelihood_per_frame": tf.reduce_mean(image_log_prob - kl),
        "reward_mse": tf.reduce_mean(tf.square(predicted_reward -
                                               true_reward)),
    }
    if filtered.posteriors is not None:
      metrics["prior_std"] = tf.reduce_mean(
          tf.stack([p.std for p in filtered.priors]))
      metrics["posterior_std"] = tf.reduce_mean(
          tf.stack([q.std for q in filtered.posteriors]))
    return base.LossOutput(loss, metrics)

  def diagnostics(self, batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Pictures for summaries (see the shared contract): closed_loop
    (posterior reconstructions), one_step_prior, open_loop (rollout from the
    context with the true actions), open_loop_reward, true_reward."""
    num_steps = self.check_batch(batch)
    k = self.spec.context_length
    filtered = self._filter(batch, num_steps)
    merged, lead = networks.merge_leading(filtered.decoder_inputs)
    closed_loop = networks.split_leading(
        losses.decoder_mean(self._decoder(merged), self._likelihood), lead)
    one_step = []
    for start, action in zip(filtered.starts, filtered.actions):
      new_state, _ = self._generate(start, action)
      one_step.append(self._render(new_state))
    state = self._initial_state(batch["observation"][:, :k])
    frames, rewards = [], []
    for t in range(num_steps):
      encoded = self.encode_actions(batch["action"][:, k - 1 + t])
      state, _ = self._generate(state.state, encoded)
      frames.append(self._render(state))
      rewards.append(self._reward_head.expected_reward(self._reward_logits(
          tf.concat([state.state, state.latent], -1))))
    return {
        "closed_loop": closed_loop,
        "one_step_prior": tf.stack(one_step, 1),
        "open_loop": tf.stack(frames, 1),
        "open_loop_reward": tf.stack(rewards, 1),
        "true_reward": tf.cast(batch["reward"][:, k:], tf.float32),
    }

  # -- Learned imagination prior (action-free sSSM) -------------------------

  def attach_imagination_prior(self, seed: int = 0) -> snt.Module:
    """Replaces p(z_t | s_{t-1}) by a fresh module p_imag of the same shape.

    Only for action-free sSSM models. Call eagerly, before tracing any
    tf.function that steps the model. From then on `step`/`rollout` sample
    z_t from p_imag, and `trainable_variables` holds p_imag's variables only
    (a model from `envmodels.load` has no other trainable variables at all,
    so no gradient is even computed for the frozen weights). `loss` and
    `diagnostics` keep using the learned prior. Returns p_imag; its weights
    are drawn with Sonnet's default initialisation from `seed`.
    """
    if self.kind != "sssm" or not self.spec.action_free:
      raise ValueError(
          "attach_imagination_prior needs an action-free sSSM (spec.kind "
          "'sssm' with action_free=True), given kind "
          f"{self.kind!r} with action_free={self.spec.action_free}. Pretrain "
          "an unconditional sSSM to query it with a learned prior.")
    if self._imagination_prior is not None:
      raise ValueError("an imagination prior is already attached to this "
                       "model; load the model again to attach a fresh one.")
    height, width, _ = self.spec.observation_shape
    prior = self._make_prior("imagination_prior")
    with tf.variable_creator_scope(_force_trainable):
      prior(tf.zeros([1, height // 8, width // 8, self._state_channels]))
    rng = tf.random.Generator.from_seed(seed)
    for variable in prior.variables:
      # Conv kernels: Sonnet's TruncatedNormal(1 / sqrt(fan_in)); biases 0.
      if variable.shape.rank == 4:
        fan_in = float(np.prod(variable.shape[:-1]))
        variable.assign(rng.truncated_normal(variable.shape,
                                             stddev=1.0 / math.sqrt(fan_in)))
      else:
        variable.assign(tf.zeros_like(variable))
    self._imagination_prior = prior
    return prior

  @property
  def trainable_variables(self) -> Tuple[tf.Variable, ...]:
    """All trainable variables, or only p_imag's once it is attached."""
    if self._imagination_prior is not None:
      return tuple(self._imagination_prior.trainable_variables)
    return super().trainable_variables


for _kind in KINDS:
  registry.register(_kind)(StateSpaceModel)
