"""Learning check: every model kind learns MiniPacman's dynamics (slow lane).

A random-policy MiniPacman dataset is collected; each kind is trained at a
tiny size for 1000 steps (about a minute each on 2 cores) and must (a) bring
its held-out loss below a quarter of its initial value and (b) predict
open-loop frames with a mean squared error at least 10% below copying the
last context frame.
"""

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

import envmodels
from configs import collect as collect_config
from i2a.replay import datasets, files
from i2a.run import collect as collection

pytestmark = pytest.mark.slow

KINDS = ("vae", "ar", "rar", "dssm_det", "dssm_vae", "sssm")
CONTEXT, T, STEPS = 3, 4, 1000
SMALL = dict(state_channels=16, hidden_channels=16, encoder_channels=16,
             reward_bits=8, reward_scale=10.0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  config = collect_config.get_config("minipacman")
  config.train_steps, config.test_steps, config.num_envs = 6000, 1000, 4
  workdir = tmp_path_factory.mktemp("collect")
  collection.run(config, str(workdir))
  length = CONTEXT + T
  train = datasets.window_sampler(
      files.split_path(str(workdir / "dataset"), "train"), length, 1)
  test = datasets.window_sampler(
      files.split_path(str(workdir / "dataset"), "test"), length, 1)
  return train, test


@pytest.mark.parametrize("kind", KINDS)
def test_model_learns_and_beats_copying_the_last_frame(kind, data):
  train, test = data
  spec = envmodels.EnvModelSpec(kind, (16, 24, 3), 5, 1, CONTEXT)
  hyper = dict(SMALL)
  if kind not in ("ar", "rar"):
    hyper["latent_channels"] = 8
  model = envmodels.build(spec, seed=0, **hyper)
  optimizer = snt.optimizers.Adam(1e-3)
  held_out = test.gather(np.arange(min(64, test.num_windows)))

  @tf.function
  def train_step(batch):
    with tf.GradientTape() as tape:
      loss = model.loss(batch).loss
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply(grads, model.trainable_variables)
    return loss

  evaluate = tf.function(lambda batch: model.loss(batch).loss)
  before = float(evaluate(held_out))
  rng = np.random.default_rng(0)
  for _ in range(STEPS):
    train_step(train.sample(rng, 16))
  after = float(evaluate(held_out))
  assert after < 0.25 * before, (kind, before, after)

  truth = held_out["observation"][:, CONTEXT:].astype(np.float32) / 255.0
  predicted = model.diagnostics(held_out)["open_loop"].numpy()
  copy = np.repeat(held_out["observation"][:, CONTEXT - 1:CONTEXT], T,
                   axis=1).astype(np.float32) / 255.0
  model_mse = np.mean((predicted - truth) ** 2)
  copy_mse = np.mean((copy - truth) ** 2)
  print(f"{kind}: held-out loss {before:.1f} -> {after:.1f}; open-loop MSE "
        f"{model_mse:.5f} vs copy-last-frame {copy_mse:.5f}")
  # Measured: 0.0030-0.0033 against 0.0044 for copying (1000 steps).
  assert model_mse < 0.9 * copy_mse, (kind, model_mse, copy_mse)
