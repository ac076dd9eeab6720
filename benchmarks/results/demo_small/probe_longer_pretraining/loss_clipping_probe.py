"""The loss-clipping probe of docs/results.md ("The demo's models predict"):
`python -m i2a.pretrain` with the Bernoulli likelihood's gradient dropped
per pixel where the KL from the target's Bernoulli to the prediction's is
below PIXEL_CLIP nats (the loss clipping of model-based Atari work, meant
to keep small moving objects from being drowned by the static
background). The reported likelihood stays the true one; only the
gradient changes. Not part of the library: the probe found no sprites.

  PIXEL_CLIP=0.3 PYTHONPATH=. python \
      benchmarks/results/demo_small/probe_longer_pretraining/loss_clipping_probe.py \
      --config=configs/envmodels/dssm_det.py:small --config.data=COLLECT/dataset \
      --workdir=RUN --config.learning_rate=1e-3 --config.train_steps=800 \
      --config.eval_every=400 --config.image_every=400 --config.eval_windows=64 \
      --config.threads=1,1
"""

import os

from absl import app
import tensorflow as tf

from envmodels import losses
from i2a import pretrain

CLIP = float(os.environ["PIXEL_CLIP"])


@tf.function(jit_compile=True)
def _clipped_gradient(logits: tf.Tensor, targets: tf.Tensor,
                      upstream: tf.Tensor) -> tf.Tensor:
  x = tf.cast(logits, tf.float32)
  z = tf.clip_by_value(targets, 1e-6, 1 - 1e-6)
  kl = (z * (tf.math.log(z) - tf.math.log_sigmoid(x)) +
        (1 - z) * (tf.math.log(1 - z) - tf.math.log_sigmoid(-x)))  # per pixel
  per_pixel = (targets - tf.sigmoid(x)) * tf.cast(kl > CLIP, tf.float32)
  return tf.cast(upstream[..., None, None, None] * per_pixel, logits.dtype)


@tf.custom_gradient
def _clipped_frame_log_prob(logits: tf.Tensor, targets: tf.Tensor):
  value = losses._bernoulli_frame_sum(logits, targets)  # pylint: disable=protected-access

  def gradient(upstream: tf.Tensor):
    return _clipped_gradient(logits, targets, upstream), None
  return value, gradient


losses.bernoulli_frame_log_prob = _clipped_frame_log_prob

if __name__ == "__main__":
  app.run(pretrain.main)
