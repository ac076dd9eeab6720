"""Likelihood and divergence terms shared by every envmodel kind's `loss`.

The knobs practitioners of latent models use (documented in
docs/envmodels.md): decoder likelihood (Bernoulli per pixel and channel, or a
Gaussian with fixed std), image bit-depth reduction, KL scale, free nats, a KL
scale towards a fixed global N(0, 1) prior, and latent overshooting.
All log-probabilities are in nats and summed over a frame's pixels and
channels, so "nats per frame" is comparable across models.
"""

from __future__ import annotations

import math

import tensorflow as tf

LIKELIHOODS = ("bernoulli", "gaussian")


def preprocess_frames(frames: tf.Tensor, bit_depth: int = 8) -> tf.Tensor:
  """uint8 [..., C] -> float32 in [0, 1], quantised to `bit_depth` bits.

  Bit-depth reduction (PlaNet): keeps the top `bit_depth` bits of each
  channel, then centres the value inside its bin.
  """
  if not 1 <= bit_depth <= 8:
    raise ValueError(f"bit_depth must be in [1, 8], given {bit_depth}.")
  frames = tf.cast(frames, tf.float32)
  if bit_depth == 8:
    return frames / 255.0
  bins = 2.0**bit_depth
  quantised = tf.floor(frames / 2.0**(8 - bit_depth))
  return (quantised + 0.5) / bins


def bernoulli_log_prob(logits: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
  """Elementwise Bernoulli log-likelihood of `targets` in [0, 1] under
  `logits`: z x - softplus(x), the negated sigmoid cross-entropy.

  The same values as `-tf.nn.sigmoid_cross_entropy_with_logits` (which
  builds them from two selects, a log1p and an exp) in one fused,
  stable softplus kernel whose gradient is sigmoid(x) - z: 1.2-1.7x
  faster forward and backward over a pretraining batch's frames
  (docs/performance.md, "Pretraining").
  """
  return targets * logits - tf.nn.softplus(logits)


@tf.function(jit_compile=True)
def _bernoulli_frame_sum(logits: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
  """[..., H, W, C] -> float32 [...]: sum of z x - softplus(x), one XLA
  pass (the per-pixel terms are never written out)."""
  logits = tf.cast(logits, tf.float32)
  return tf.reduce_sum(targets * logits - tf.nn.softplus(logits),
                       axis=[-3, -2, -1])


@tf.function(jit_compile=True)
def _bernoulli_frame_sum_grad(logits: tf.Tensor, targets: tf.Tensor,
                              upstream: tf.Tensor) -> tf.Tensor:
  """d/dlogits of `_bernoulli_frame_sum` times `upstream` [...]: (z -
  sigmoid(x)) upstream, in the logits' dtype, one XLA pass."""
  per_pixel = targets - tf.sigmoid(tf.cast(logits, tf.float32))
  return tf.cast(upstream[..., None, None, None] * per_pixel, logits.dtype)


@tf.custom_gradient
def bernoulli_frame_log_prob(logits: tf.Tensor, targets: tf.Tensor):
  """Bernoulli log-likelihood of frames [..., H, W, C] (`targets` float32
  in [0, 1]) under `logits`, summed over each frame: float32 [...] nats.

  The values of `bernoulli_log_prob` summed, in float32 whatever the
  logits' dtype, with the sum and its gradient each one fused XLA kernel:
  in the `small` dSSM-DET's pretraining step the elementwise softplus and
  its sigmoid gradient alone were 14% of the kernels' time
  (docs/performance.md, "Pretraining"). No gradient flows to the targets
  (they are data).
  """
  value = _bernoulli_frame_sum(logits, targets)

  def gradient(upstream: tf.Tensor):
    return _bernoulli_frame_sum_grad(logits, targets, upstream), None
  return value, gradient


def image_log_prob(decoder_output: tf.Tensor, targets: tf.Tensor,
                   likelihood: str = "bernoulli",
                   std: float = 0.1) -> tf.Tensor:
  """Log-likelihood of frames [B, H, W, C] in [0, 1] -> [B] nats per frame.

  bernoulli: `decoder_output` are logits (the paper's choice; targets are
  intensities in [0, 1]). gaussian: `decoder_output` are means, fixed std.
  """
  if likelihood == "bernoulli":
    return bernoulli_frame_log_prob(decoder_output, targets)
  if likelihood == "gaussian":
    per_pixel = (-0.5 * tf.square((targets - decoder_output) / std) -
                 math.log(std) - 0.5 * math.log(2.0 * math.pi))
  else:
    raise ValueError(f"likelihood must be one of {LIKELIHOODS}, given "
                     f"{likelihood!r}.")
  return tf.reduce_sum(per_pixel, axis=[-3, -2, -1])


def decoder_mean(decoder_output: tf.Tensor, likelihood: str) -> tf.Tensor:
  """The frame a decoder output predicts, float32 in [0, 1]."""
  if likelihood == "bernoulli":
    return tf.sigmoid(decoder_output)
  return tf.clip_by_value(decoder_output, 0.0, 1.0)


# What `free_nats` is granted to (the `free_nats_per` loss knob): the KL of a
# whole step (summed over the latent map, PlaNet's form for a vector
# latent), of each spatial position (summed over the latent channels: PlaNet's
# per-step vector is one such position), or of each latent unit.
FREE_NATS_PER = ("step", "position", "unit")


def check_free_nats(free_nats: float, free_nats_per: str) -> None:
  """ValueError unless free_nats >= 0 and free_nats_per is known."""
  if not float(free_nats) >= 0:
    raise ValueError(f"free_nats must be >= 0, given {free_nats!r}.")
  if free_nats_per not in FREE_NATS_PER:
    raise ValueError(f"free_nats_per must be one of {FREE_NATS_PER}, given "
                     f"{free_nats_per!r}.")


def free_nats_kl(kl_units: tf.Tensor, free_nats: float,
                 free_nats_per: str = "step") -> tf.Tensor:
  """The KL term after free nats: [N, h, w, Z] KL per latent unit -> [N].

  'step':     max(sum_{h,w,Z} kl, free_nats)
  'position': sum_{h,w} max(sum_Z kl, free_nats)
  'unit':     sum_{h,w,Z} max(kl, free_nats)
  Below the threshold the term is constant: no gradient reaches the units
  (or positions, or the step) that use fewer nats than granted.
  """
  check_free_nats(free_nats, free_nats_per)
  if free_nats_per == "step":
    return tf.maximum(tf.reduce_sum(kl_units, axis=[1, 2, 3]), free_nats)
  if free_nats_per == "position":
    return tf.reduce_sum(tf.maximum(tf.reduce_sum(kl_units, -1), free_nats),
                         axis=[1, 2])
  return tf.reduce_sum(tf.maximum(kl_units, free_nats), axis=[1, 2, 3])
