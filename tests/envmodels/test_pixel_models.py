"""Tests of the pixel-space envmodel kinds 'vae', 'ar' and 'rar'
(envmodels/pixel_models.py): the EnvModel contract on tiny frames, training
signals, and the AR/RAR efficiency claims (one encoding per step, rendering
without recomputation)."""

import json
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from envmodels import pixel_models, registry
from envmodels.base import EnvModelSpec

KINDS = ("vae", "ar", "rar")
SHAPE = (16, 16, 3)
NUM_ACTIONS = 4
CONTEXT = 3
STEPS = 3  # T
LENGTH = CONTEXT + STEPS  # L
BATCH = 2


def make_model(kind, jump=1, seed=0, action_free=False, **overrides):
  spec = EnvModelSpec(kind=kind, observation_shape=SHAPE,
                      num_actions=NUM_ACTIONS, jump=jump,
                      context_length=CONTEXT, action_free=action_free)
  hyperparameters = registry.model_class(kind).tiny_hyperparameters()
  hyperparameters.update(overrides)
  return registry.build(spec, seed=seed, **hyperparameters)


def make_batch(jump=1, batch_size=BATCH, seed=0):
  """A 4x4 bright square moving right on black frames: learnable."""
  rng = np.random.default_rng(seed)
  observation = np.zeros((batch_size, LENGTH) + SHAPE, np.uint8)
  for b in range(batch_size):
    row = rng.integers(0, SHAPE[0] - 4)
    for t in range(LENGTH):
      col = (2 * t + b) % (SHAPE[1] - 4)
      observation[b, t, row:row + 4, col:col + 4] = 255
  return {
      "observation": tf.constant(observation),
      "action": tf.constant(
          rng.integers(0, NUM_ACTIONS, (batch_size, LENGTH, jump)), tf.int32),
      "reward": tf.constant(
          rng.integers(0, 3, (batch_size, LENGTH)), tf.float32),
      "discount": tf.ones((batch_size, LENGTH), tf.float32),
  }


def rollout_actions(batch):
  return batch["action"][:, CONTEXT - 1:LENGTH - 1]  # [B, T, c]


def test_kinds_are_registered():
  assert set(KINDS) <= set(registry.kinds())
  assert registry.model_class("ar") is pixel_models.AutoregressiveModel


def test_only_ar_and_rar_use_actions_and_render_in_step():
  assert [make_model(kind).uses_actions for kind in KINDS] == [
      False, True, True]
  assert [registry.model_class(kind).RENDERS_IN_STEP for kind in KINDS] == [
      False, True, True]


@pytest.mark.parametrize("kind", KINDS)
def test_hyperparameters_rebuild_the_same_architecture(kind):
  model = make_model(kind, jump=3)
  batch = make_batch(jump=3)
  model.loss(batch)
  rebuilt = type(model)(model.spec, 1,
                        **json.loads(json.dumps(model.hyperparameters)))
  rebuilt.loss(batch)
  shapes = lambda m: sorted((v.name, tuple(v.shape)) for v in m.variables)
  assert shapes(rebuilt) == shapes(model)
  assert rebuilt.hyperparameters == model.hyperparameters


@pytest.mark.parametrize("jump", [1, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_shapes_and_dtypes(kind, jump):
  model = make_model(kind, jump=jump)
  batch = make_batch(jump=jump)
  state = model.initial_state(batch["observation"][:, :CONTEXT])
  assert model.render(state).shape == (BATCH,) + SHAPE
  new_state, out = model.step(state, batch["action"][:, CONTEXT - 1])
  assert out.reward.shape == (BATCH,) and out.reward.dtype == tf.float32
  assert out.features.shape.rank == 4 and out.features.dtype == tf.float32
  assert out.features.shape[:3] == (BATCH, SHAPE[0] // 8, SHAPE[1] // 8)
  frame = model.render(new_state)
  assert frame.shape == (BATCH,) + SHAPE and frame.dtype == tf.float32
  assert 0.0 <= float(tf.reduce_min(frame)) <= float(tf.reduce_max(frame)) <= 1
  probabilities = tf.fill([BATCH, jump, NUM_ACTIONS], 1.0 / NUM_ACTIONS)
  _, relaxed = model.step(state, probabilities)
  assert relaxed.features.shape == out.features.shape

  rollout = model.rollout(state, rollout_actions(batch), render=True)
  assert rollout.features.shape == (BATCH, STEPS) + tuple(
      out.features.shape[1:])
  assert rollout.rewards.shape == (BATCH, STEPS)
  assert rollout.frames.shape == (BATCH, STEPS) + SHAPE
  assert model.rollout(state, rollout_actions(batch)).frames is None

  output = model.loss(batch)
  for name in ("loss", "image_log_prob", "reward_log_prob",
               "log_likelihood_per_frame", "reward_mse"):
    assert output.metrics[name].shape == () and np.isfinite(
        output.metrics[name].numpy()), name
  diagnostics = model.diagnostics(batch)
  for name in ("closed_loop", "one_step_prior", "open_loop"):
    assert diagnostics[name].shape == (BATCH, STEPS) + SHAPE, name
    assert diagnostics[name].dtype == tf.float32
  for name in ("open_loop_reward", "true_reward"):
    assert diagnostics[name].shape == (BATCH, STEPS), name


@pytest.mark.parametrize("kind", KINDS)
def test_render_of_initial_state_is_the_last_context_frame(kind):
  model = make_model(kind)
  observation = make_batch()["observation"]
  state = model.initial_state(observation[:, :CONTEXT])
  np.testing.assert_allclose(model.render(state),
                             observation[:, CONTEXT - 1].numpy() / 255.0)


def test_ar_works_action_free():
  model = make_model("ar", action_free=True)
  batch = make_batch()
  state = model.initial_state(batch["observation"][:, :CONTEXT])
  assert model.rollout(state, rollout_actions(batch)).rewards.shape == (
      BATCH, STEPS)
  assert np.isfinite(model.loss(batch).loss.numpy())


def test_gaussian_likelihood_and_bit_depth():
  model = make_model("ar", likelihood="gaussian", image_std=0.2, bit_depth=5)
  assert np.isfinite(model.loss(make_batch()).loss.numpy())


@pytest.mark.parametrize("kind", KINDS)
def test_loss_and_gradients_are_finite_for_every_variable(kind):
  model = make_model(kind, jump=3)
  batch = make_batch(jump=3)
  model.loss(batch)  # builds the variables
  with tf.GradientTape() as tape:
    loss = model.loss(batch, kl_scale=0.5, free_nats=1.0).loss
  gradients = tape.gradient(loss, model.trainable_variables)
  assert np.isfinite(loss.numpy())
  for variable, gradient in zip(model.trainable_variables, gradients):
    assert gradient is not None, variable.name
    assert np.all(np.isfinite(tf.convert_to_tensor(gradient).numpy())), (
        variable.name)


def test_vae_likelihood_is_the_elbo_per_frame():
  metrics = make_model("vae").loss(make_batch()).metrics
  np.testing.assert_allclose(
      metrics["log_likelihood_per_frame"],
      metrics["image_log_prob"] - metrics["kl"], rtol=1e-5)
  assert float(metrics["kl"]) >= 0.0


def test_vae_per_unit_free_nats_clamp_each_latent_unit():
  model = make_model("vae")
  batch = make_batch()

  def loss(**knobs):
    model.reseed(3)
    return model.loss(batch, **knobs).loss

  loss()  # builds the variables
  model.reseed(3)
  # pylint: disable=protected-access
  p = model._posterior_pass(batch)
  units = pixel_models._diag_normal_kl_units(
      p["post_mean"], p["post_std"], p["prior_mean"], p["prior_std"]).numpy()
  # pylint: enable=protected-access
  free = float(np.median(units))
  expected = np.maximum(units, free).sum(axis=(1, 2, 3)).mean()
  without_kl = float(loss(kl_scale=0.0))
  assert float(loss(free_nats=free, free_nats_per="unit")) - without_kl == (
      pytest.approx(expected, abs=2e-3))
  # Every unit under the threshold: a constant term, no gradient.
  with tf.GradientTape() as tape:
    clamped = loss(free_nats=1e3, free_nats_per="unit")
  assert float(clamped) - without_kl == pytest.approx(
      1e3 * units[0].size, rel=1e-5)
  with tf.GradientTape() as plain_tape:
    unscaled = loss(kl_scale=0.0)
  for g1, g2 in zip(tape.gradient(clamped, model.trainable_variables),
                    plain_tape.gradient(unscaled, model.trainable_variables)):
    np.testing.assert_allclose(tf.convert_to_tensor(g1).numpy(),
                               tf.convert_to_tensor(g2).numpy(),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_free_nats_knobs_are_validated_by_every_kind(kind):
  model = make_model(kind)
  with pytest.raises(ValueError, match="free_nats_per must be one of"):
    model.loss(make_batch(), free_nats_per="frame")
  with pytest.raises(ValueError, match="free_nats must be >= 0"):
    model.loss(make_batch(), free_nats=-1.0)


@pytest.mark.parametrize("kind", ["ar", "rar"])
def test_relaxed_actions_are_differentiable(kind):
  model = make_model(kind, jump=3)
  batch = make_batch(jump=3)
  state = model.initial_state(batch["observation"][:, :CONTEXT])
  logits = tf.Variable(tf.random.normal([BATCH, STEPS, 3, NUM_ACTIONS]))
  with tf.GradientTape() as tape:
    rollout = model.rollout(state, tf.nn.softmax(logits), render=True)
    total = tf.reduce_sum(rollout.rewards) + tf.reduce_sum(
        rollout.features) + tf.reduce_sum(rollout.frames)
  gradient = tape.gradient(total, logits)
  assert gradient is not None
  assert np.all(np.isfinite(gradient.numpy()))
  assert float(tf.reduce_max(tf.abs(gradient))) > 0.0


@pytest.mark.parametrize("kind", KINDS)
def test_tf_function_with_batch_agnostic_signatures(kind):
  jump = 3
  model = make_model(kind, jump=jump)
  model.loss(make_batch(jump=jump))  # builds the variables
  batch_signature = {
      "observation": tf.TensorSpec([None, LENGTH] + list(SHAPE), tf.uint8),
      "action": tf.TensorSpec([None, LENGTH, jump], tf.int32),
      "reward": tf.TensorSpec([None, LENGTH], tf.float32),
      "discount": tf.TensorSpec([None, LENGTH], tf.float32),
  }
  loss_fn = tf.function(lambda batch: model.loss(batch).metrics,
                        input_signature=[batch_signature])
  rollout_fn = tf.function(
      lambda observation, actions: model.rollout(
          model.initial_state(observation), actions, render=True),
      input_signature=[
          tf.TensorSpec([None, CONTEXT] + list(SHAPE), tf.uint8),
          tf.TensorSpec([None, STEPS, jump, NUM_ACTIONS], tf.float32)])
  for batch_size in (2, 3):
    batch = make_batch(jump=jump, batch_size=batch_size)
    assert np.isfinite(loss_fn(batch)["loss"].numpy())
    actions = tf.one_hot(rollout_actions(batch), NUM_ACTIONS)
    rollout = rollout_fn(batch["observation"][:, :CONTEXT], actions)
    assert rollout.frames.shape == (batch_size, STEPS) + SHAPE
  assert loss_fn.experimental_get_tracing_count() == 1
  assert rollout_fn.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("kind", ["ar", "rar"])
def test_ar_and_rar_rollouts_are_deterministic(kind):
  model = make_model(kind)
  batch = make_batch()
  state = model.initial_state(batch["observation"][:, :CONTEXT])
  first = model.rollout(state, rollout_actions(batch), render=True)
  model.reseed(123)  # no sampling: the generator must not matter
  second = model.rollout(state, rollout_actions(batch), render=True)
  for a, b in zip(first, second):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_vae_rollouts_are_reproducible_after_reseed():
  model = make_model("vae")
  batch = make_batch()
  state = model.initial_state(batch["observation"][:, :CONTEXT])
  rollouts = []
  for seed in (7, 7, 8):
    model.reseed(seed)
    rollouts.append(model.rollout(state, rollout_actions(batch)).features)
  np.testing.assert_array_equal(rollouts[0].numpy(), rollouts[1].numpy())
  assert not np.allclose(rollouts[0].numpy(), rollouts[2].numpy())


@pytest.mark.parametrize("kind", ["ar", "rar"])
def test_step_encodes_and_decodes_one_frame_and_render_reuses_it(kind):
  model = make_model(kind)
  batch = make_batch()
  model.loss(batch)  # builds the variables
  with mock.patch.object(model, "encode_frames",
                         wraps=model.encode_frames) as encode, \
       mock.patch.object(model, "_decoder", wraps=model._decoder) as decode:
    state = model.initial_state(batch["observation"][:, :CONTEXT])
    # The context: one encoder call for all B * k frames, no decoding.
    assert [c.args[0].shape[0] for c in encode.call_args_list] == [
        BATCH * CONTEXT]
    assert decode.call_count == 0
    for t in range(STEPS):
      encode.reset_mock()
      decode.reset_mock()
      state, _ = model.step(state, batch["action"][:, CONTEXT - 1 + t])
      # Only the newly rendered frame is encoded, once; one decoding.
      assert [c.args[0].shape[0] for c in encode.call_args_list] == [BATCH]
      assert decode.call_count == 1
    decode.reset_mock()
    frame = model.render(state)
    assert decode.call_count == 0 and encode.call_count == 1
  assert frame is state.frame


def test_vae_step_does_not_decode():
  model = make_model("vae")
  batch = make_batch()
  model.loss(batch)  # builds the variables
  with mock.patch.object(model, "_decoder", wraps=model._decoder) as decode:
    state = model.initial_state(batch["observation"][:, :CONTEXT])
    state, _ = model.step(state, batch["action"][:, CONTEXT - 1])
    assert decode.call_count == 0
    model.render(state)
    assert decode.call_count == 1


@pytest.mark.parametrize("kind", KINDS)
def test_loss_decreases_on_a_fixed_batch(kind):
  model = make_model(kind)
  batch = make_batch()
  optimizer = tf.keras.optimizers.Adam(3e-3)

  @tf.function
  def train_step():
    with tf.GradientTape() as tape:
      loss = model.loss(batch).loss
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  def evaluate():
    model.reseed(0)
    return float(model.loss(batch).loss)

  before = evaluate()
  for _ in range(30):
    train_step()
  after = evaluate()
  assert after < 0.5 * before, (before, after)


# -- Errors a user can cause -------------------------------------------------


def test_bad_initial_observations_raise_with_shapes():
  model = make_model("ar")
  frames = make_batch()["observation"]
  with pytest.raises(ValueError, match=r"expected shape.*given \[2, 3, 8, 8"):
    model.initial_state(frames[:, :CONTEXT, :8, :8])
  with pytest.raises(ValueError, match=r"expected shape.*given \[2, 2, 16"):
    model.initial_state(frames[:, :2])
  with pytest.raises(ValueError, match="expected uint8.*given float32"):
    model.initial_state(tf.cast(frames[:, :CONTEXT], tf.float32))


@pytest.mark.parametrize("kind", KINDS)
def test_bad_actions_raise_with_shapes(kind):
  model = make_model(kind, jump=3)
  batch = make_batch(jump=3)
  state = model.initial_state(batch["observation"][:, :CONTEXT])
  with pytest.raises(ValueError,
                     match=r"expected shape \[B, 3\].*given \[2, 2\]"):
    model.step(state, tf.zeros([BATCH, 2], tf.int32))
  with pytest.raises(ValueError, match=r"\[B, 3, 4\].*given \[2, 3, 5\]"):
    model.step(state, tf.zeros([BATCH, 3, 5], tf.float32))


@pytest.mark.parametrize("kind", KINDS)
def test_bad_batches_raise_with_shapes(kind):
  model = make_model(kind)
  batch = make_batch()
  wrong_frames = dict(batch, observation=batch["observation"][:, :, :8])
  with pytest.raises(ValueError, match=r"expected shape \[B, L, 16, 16, 3\]"
                     r".*given \[2, 6, 8, 16, 3\]"):
    model.loss(wrong_frames)
  too_short = {key: value[:, :CONTEXT] for key, value in batch.items()}
  with pytest.raises(ValueError, match=r"T > 3, given \[2, 3, 16"):
    model.loss(too_short)
  with pytest.raises(ValueError,
                     match=r"expected shape \[B, 6, 1\], given \[2, 6, 2\]"):
    model.loss(dict(batch, action=tf.zeros([BATCH, LENGTH, 2], tf.int32)))
  with pytest.raises(ValueError, match="missing"):
    model.loss({"observation": batch["observation"]})
  with pytest.raises(ValueError, match="expected uint8.*given float32"):
    model.loss(dict(batch, observation=tf.cast(batch["observation"],
                                               tf.float32)))
  with pytest.raises(ValueError, match="unknown loss knobs"):
    model.loss(batch, kl_sclae=1.0)


def test_bad_hyperparameters_and_specs_raise():
  with pytest.raises(ValueError, match="likelihood"):
    make_model("ar", likelihood="poisson")
  with pytest.raises(ValueError, match="state_channels"):
    make_model("rar", state_channels=0)
  spec = EnvModelSpec("rar", SHAPE, NUM_ACTIONS, 1, CONTEXT)
  with pytest.raises(ValueError, match="kind 'ar'.*'rar'"):
    pixel_models.AutoregressiveModel(
        spec, **pixel_models.AutoregressiveModel.tiny_hyperparameters())


@pytest.mark.parametrize("kind", ["vae", "rar"])
def test_the_encoded_sequence_is_split_not_sliced(kind):
  """The loss reads the context's and the targets' encodings of the one
  encoded sequence [B, L, h, w, E] through a split (or one unstack): a
  slice of it would cost its gradient a zero-filled [B, L, h, w, E]
  (`StridedSliceGrad` of rank 5) per slice (docs/performance.md)."""
  model, batch = make_model(kind), make_batch()
  model.loss(batch)  # creates the variables

  @tf.function
  def gradients(batch):
    with tf.GradientTape() as tape:
      loss = model.loss(batch).loss
    return tape.gradient(loss, model.trainable_variables)
  graph = gradients.get_concrete_function(batch).graph
  sequence_slices = [op.name for op in graph.get_operations()
                     if op.type == "StridedSliceGrad" and
                     op.outputs[0].shape.rank == 5]
  assert sequence_slices == []
