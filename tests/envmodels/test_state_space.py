"""Behaviour specific to the state-space models (dSSM-DET, dSSM-VAE, sSSM).

The shared contract is checked for every kind by test_conformance.py; these
tests check what distinguishes the three kinds (where samples of z_t go), the
loss knobs, and the action-free sSSM with its learned imagination prior.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from envmodels import losses, networks, state_space

FRAME = (16, 16, 3)
NUM_ACTIONS = 5
CONTEXT = 3
BATCH = 2
STEPS = 3


def make_model(kind: str, jump: int = 1, action_free: bool = False,
               seed: int = 0) -> state_space.StateSpaceModel:
  spec = envmodels.EnvModelSpec(kind=kind, observation_shape=FRAME,
                                num_actions=NUM_ACTIONS, jump=jump,
                                context_length=CONTEXT,
                                action_free=action_free)
  model = envmodels.build(spec, seed=seed,
                          **state_space.StateSpaceModel.tiny_hyperparameters())
  model.create_variables()
  return model


def make_context(seed: int = 0) -> np.ndarray:
  rng = np.random.RandomState(seed)
  return rng.randint(0, 256, (BATCH, CONTEXT) + FRAME).astype(np.uint8)


def make_actions(jump: int = 1, seed: int = 0) -> np.ndarray:
  rng = np.random.RandomState(seed)
  return rng.randint(0, NUM_ACTIONS, (BATCH, STEPS, jump)).astype(np.int32)


def make_batch(seed: int = 0):
  rng = np.random.RandomState(seed)
  length = CONTEXT + STEPS
  return {
      "observation": rng.randint(0, 256, (BATCH, length) + FRAME).astype(
          np.uint8),
      "action": rng.randint(0, NUM_ACTIONS, (BATCH, length, 1)).astype(
          np.int32),
      "reward": rng.choice([0.0, 1.0], (BATCH, length)).astype(np.float32),
      "discount": np.ones((BATCH, length), np.float32),
  }


def rollout(model, seed=None, actions=None):
  if seed is not None:
    model.reseed(seed)
  actions = make_actions() if actions is None else actions
  result = model.rollout(model.initial_state(make_context()), actions,
                         render=True)
  return result.features.numpy(), result.rewards.numpy(), result.frames.numpy()


def op_types(function, *args):
  graph = tf.function(function, autograph=False).get_concrete_function(
      *args).graph
  return {op.type for op in graph.get_operations()}


# -- The three kinds -----------------------------------------------------------


def test_the_three_kinds_share_one_generative_architecture():
  shapes = {}
  for kind in state_space.KINDS:
    model = make_model(kind)
    assert type(model) is state_space.StateSpaceModel
    shapes[kind] = [(v.name.split("/", 1)[1], v.shape) for v in model.variables
                    if "/posterior/" not in v.name]
  assert shapes["dssm_det"] == shapes["dssm_vae"] == shapes["sssm"]


def test_dssm_det_rollouts_are_deterministic_without_reseeding():
  model = make_model("dssm_det")
  first, second = rollout(model), rollout(model)
  for a, b in zip(first, second):
    np.testing.assert_array_equal(a, b)


def test_dssm_det_step_and_render_contain_no_random_ops():
  model = make_model("dssm_det")
  state = model.initial_state(make_context())
  ops = op_types(model.step, state, make_actions()[:, 0])
  ops |= op_types(model.render, state)
  assert not [op for op in ops if "Random" in op or "Rng" in op], ops


def test_sssm_rollouts_differ_across_seeds_and_repeat_after_reseed():
  model = make_model("sssm")
  first = rollout(model, seed=1)
  other = rollout(model, seed=2)
  again = rollout(model, seed=1)
  assert not np.allclose(first[0], other[0])  # the states themselves differ
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)


def test_dssm_vae_transition_ignores_the_sample_but_renders_differ():
  model = make_model("dssm_vae")
  first = rollout(model, seed=1)
  other = rollout(model, seed=2)
  np.testing.assert_array_equal(first[0], other[0])  # same states s_t
  assert not np.allclose(first[2], other[2])  # decoder sees a sample


def op_scopes(function, *args):
  graph = tf.function(function, autograph=False).get_concrete_function(
      *args).graph
  return {scope for op in graph.get_operations()
          for scope in op.name.split("/")[:-1]}


def test_step_does_not_run_the_decoder():
  model = make_model("sssm")
  state = model.initial_state(make_context())
  assert "decoder" not in op_scopes(model.step, state, make_actions()[:, 0])
  assert "decoder" in op_scopes(model.render, state)


def test_step_features_are_the_new_state():
  model = make_model("sssm")
  state, out = model.step(model.initial_state(make_context()),
                          make_actions()[:, 0])
  np.testing.assert_array_equal(out.features.numpy(), state.state.numpy())
  assert out.features.shape == (BATCH, 2, 2, 8)  # [B, H/8, W/8, S]


def test_jumpy_model_takes_c_primitive_actions_per_step():
  model = make_model("sssm", jump=3)
  actions = make_actions(jump=3)
  features, rewards, frames = rollout(model, seed=0, actions=actions)
  assert features.shape[:2] == rewards.shape == (BATCH, STEPS)
  assert frames.shape == (BATCH, STEPS) + FRAME
  changed = actions.copy()
  changed[:, :, 2] = (changed[:, :, 2] + 1) % NUM_ACTIONS  # last of the c
  other = rollout(model, seed=0, actions=changed)
  assert not np.allclose(features, other[0])


# -- Loss and knobs ------------------------------------------------------------


def loss_metrics(model, seed=3, **knobs):
  model.reseed(seed)
  output = model.loss(make_batch(), **knobs)
  return {name: float(value) for name, value in output.metrics.items()}


def test_dssm_det_loss_is_the_likelihood_of_the_deterministic_rollout():
  metrics = loss_metrics(make_model("dssm_det"))
  assert metrics["kl"] == 0.0
  assert metrics["log_likelihood_per_frame"] == metrics["image_log_prob"]
  expected = -(metrics["image_log_prob"] + metrics["reward_log_prob"])
  assert metrics["loss"] == pytest.approx(expected, rel=1e-5)


def test_the_bernoulli_log_prob_is_the_negated_sigmoid_cross_entropy():
  """Values and gradients as TensorFlow's, including logits far in the
  tails (where a naive log(sigmoid) under- or overflows)."""
  rng = np.random.RandomState(0)
  logits = tf.constant(np.concatenate([
      rng.randn(1000) * 4, [-200.0, -60.0, -1e-3, 0.0, 1e-3, 60.0, 200.0]]),
                       tf.float32)
  targets = tf.constant(rng.rand(1007), tf.float32)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(logits)
    ours = losses.bernoulli_log_prob(logits, targets)
    theirs = -tf.nn.sigmoid_cross_entropy_with_logits(labels=targets,
                                                      logits=logits)
  assert np.all(np.isfinite(ours.numpy()))
  np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6,
                             atol=1e-5)
  np.testing.assert_allclose(tape.gradient(ours, logits).numpy(),
                             tape.gradient(theirs, logits).numpy(),
                             atol=1e-6)
  # Equal sums over a frame's worth of elements, as the loss reads them.
  assert float(tf.reduce_sum(ours)) == pytest.approx(
      float(tf.reduce_sum(theirs)), rel=1e-6)



@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_the_fused_frame_log_prob_is_the_per_pixel_sum(dtype):
  """`bernoulli_frame_log_prob` (one XLA kernel forward, one backward) sums
  `bernoulli_log_prob` over each frame in float32, whatever the logits'
  dtype, with its gradient; the tails stay finite."""
  rng = np.random.RandomState(1)
  logits = rng.randn(2, 3, 6, 5, 3).astype(np.float32) * 4
  logits[0, 0, 0, 0] = [-200.0, 200.0, 60.0]
  logits = tf.cast(tf.constant(logits), dtype)
  targets = tf.constant(rng.rand(2, 3, 6, 5, 3), tf.float32)
  upstream = tf.constant(rng.randn(2, 3), tf.float32)
  exact_logits = tf.cast(logits, tf.float32)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([logits, exact_logits])
    ours = losses.bernoulli_frame_log_prob(logits, targets)  # [2, 3]
    reference = tf.reduce_sum(losses.bernoulli_log_prob(
        exact_logits, targets), axis=[-3, -2, -1])
    ours_weighted = tf.reduce_sum(ours * upstream)
    reference_weighted = tf.reduce_sum(reference * upstream)
  assert ours.dtype == tf.float32 and ours.shape == (2, 3)
  assert np.all(np.isfinite(ours.numpy()))
  np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-6)
  gradient = tape.gradient(ours_weighted, logits)
  assert gradient.dtype == dtype
  expected = tape.gradient(reference_weighted, exact_logits).numpy()
  tolerance = 1e-6 if dtype == tf.float32 else 1e-2 * np.abs(expected).max()
  np.testing.assert_allclose(tf.cast(gradient, tf.float32).numpy(), expected,
                             atol=tolerance)
  assert tape.gradient(ours_weighted, targets) is None
  # image_log_prob reads it for the Bernoulli likelihood.
  np.testing.assert_array_equal(
      losses.image_log_prob(logits, targets).numpy(), ours.numpy())

@pytest.mark.parametrize("kind", ["dssm_vae", "sssm"])
def test_latent_loss_is_the_negative_elbo_per_frame(kind):
  metrics = loss_metrics(make_model(kind))
  assert metrics["kl"] > 0.0
  assert metrics["log_likelihood_per_frame"] == pytest.approx(
      metrics["image_log_prob"] - metrics["kl"], rel=1e-5)
  expected = -(metrics["image_log_prob"] + metrics["reward_log_prob"] -
               metrics["kl"])
  assert metrics["loss"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("kind", ["dssm_vae", "sssm"])
def test_free_nats_clamp_the_kl_term(kind):
  model = make_model(kind)
  plain = loss_metrics(model)
  free_nats = 1e4  # far above the KL of every step
  clamped = loss_metrics(model, free_nats=free_nats)
  assert clamped["kl"] == pytest.approx(plain["kl"], rel=1e-6)  # before
  assert clamped["kl_after_free_nats"] == pytest.approx(free_nats)  # after
  assert clamped["loss"] - plain["loss"] == pytest.approx(
      free_nats - plain["kl"], abs=2e-3)
  # The clamped KL is constant: no KL gradient reaches the prior's output.
  batch = make_batch()
  with tf.GradientTape() as tape:
    model.reseed(3)
    loss = model.loss(batch, free_nats=free_nats, kl_scale=1.0).loss
  with tf.GradientTape() as plain_tape:
    model.reseed(3)
    unscaled = model.loss(batch, free_nats=free_nats, kl_scale=0.0).loss
  for g1, g2 in zip(tape.gradient(loss, model.trainable_variables),
                    plain_tape.gradient(unscaled, model.trainable_variables)):
    np.testing.assert_allclose(g1.numpy(), g2.numpy(), rtol=1e-4, atol=1e-6)


def test_free_nats_per_step_position_or_unit_clamp_those_sums():
  rng = np.random.default_rng(0)
  units = rng.exponential(0.5, (2, 3, 4, 5)).astype(np.float32)
  free = 0.4
  expected = {
      "step": np.maximum(units.sum(axis=(1, 2, 3)), free),
      "position": np.maximum(units.sum(-1), free).sum(axis=(1, 2)),
      "unit": np.maximum(units, free).sum(axis=(1, 2, 3)),
  }
  for per, value in expected.items():
    np.testing.assert_allclose(
        losses.free_nats_kl(tf.constant(units), free, per).numpy(), value,
        rtol=1e-6, err_msg=per)
  # The gradient reaches exactly the units above their free nats.
  variable = tf.Variable(units)
  with tf.GradientTape() as tape:
    term = tf.reduce_sum(losses.free_nats_kl(variable, free, "unit"))
  gradient = tape.gradient(term, variable).numpy()
  assert 0 < np.sum(units < free) < units.size
  np.testing.assert_array_equal(gradient, (units > free).astype(np.float32))


@pytest.mark.parametrize("kind", ["dssm_vae", "sssm"])
def test_per_unit_free_nats_clamp_each_latent_unit_of_the_loss(kind):
  model = make_model(kind)
  batch = make_batch()
  model.reseed(3)
  filtered = model._filter(batch, STEPS)  # pylint: disable=protected-access
  units = np.stack([state_space.gaussian_kl_units(q, p).numpy() for q, p in
                    zip(filtered.posteriors, filtered.priors)], 1)
  free = float(np.median(units))  # half the units under the threshold
  plain = loss_metrics(model)
  clamped = loss_metrics(model, free_nats=free, free_nats_per="unit")
  expected = np.maximum(units, free).sum(axis=(2, 3, 4)).mean()  # per step
  assert clamped["kl"] == pytest.approx(plain["kl"], rel=1e-5)
  assert clamped["kl_after_free_nats"] == pytest.approx(expected, rel=1e-5)
  assert clamped["loss"] - plain["loss"] == pytest.approx(
      expected - plain["kl"], abs=2e-3)
  # Per step, the same threshold would be far below the summed KL: no-op.
  per_step = loss_metrics(model, free_nats=free)
  assert per_step["kl_after_free_nats"] == pytest.approx(plain["kl"],
                                                         rel=1e-5)
  # All units under the threshold: the KL term is constant, no gradient.
  with tf.GradientTape() as tape:
    model.reseed(3)
    loss = model.loss(batch, free_nats=1e3, free_nats_per="unit").loss
  with tf.GradientTape() as plain_tape:
    model.reseed(3)
    unscaled = model.loss(batch, kl_scale=0.0).loss
  for g1, g2 in zip(tape.gradient(loss, model.trainable_variables),
                    plain_tape.gradient(unscaled, model.trainable_variables)):
    np.testing.assert_allclose(g1.numpy(), g2.numpy(), rtol=1e-4, atol=1e-6)


def test_kl_scale_and_global_kl_scale_weigh_their_terms():
  model = make_model("sssm")
  plain = loss_metrics(model)
  no_kl = loss_metrics(model, kl_scale=0.0)
  # Differences of losses of ~500 nats: float32 leaves ~1e-4 absolute error.
  assert plain["loss"] - no_kl["loss"] == pytest.approx(plain["kl"], abs=2e-3)
  global_kl = loss_metrics(model, global_kl_scale=0.5)
  assert plain["global_kl"] > 0.0
  assert global_kl["loss"] - plain["loss"] == pytest.approx(
      0.5 * plain["global_kl"], abs=2e-3)


@pytest.mark.parametrize("kind", ["dssm_vae", "sssm"])
def test_overshooting_adds_multistep_prior_kl_terms(kind):
  model = make_model(kind)
  plain = loss_metrics(model)
  assert plain["overshooting_kl"] == 0.0
  with tf.GradientTape() as tape:
    model.reseed(3)
    output = model.loss(make_batch(), overshooting=2)
  assert float(output.metrics["overshooting_kl"]) > 0.0
  assert np.isfinite(float(output.loss))
  gradients = tape.gradient(output.loss, model.trainable_variables)
  assert all(g is not None and np.all(np.isfinite(g.numpy()))
             for g in gradients)
  if kind == "dssm_vae":
    # Its states do not depend on samples, so the open-loop prior of z_t from
    # any s_{t-d} is the one-step prior: the terms (start j, distance d) for
    # T = 3 and depth 2 are the one-step KLs of t = 1 (j=0, d=2), t = 2
    # (j=0, d=3) and t = 2 (j=1, d=2).
    # pylint: disable-next=protected-access
    filtered = model._filter(make_batch(), STEPS)
    kl = [state_space.gaussian_kl(q, p).numpy() for q, p in
          zip(filtered.posteriors, filtered.priors)]
    expected = np.mean((kl[1] + 2 * kl[2]) / 3)
    assert float(output.metrics["overshooting_kl"]) == pytest.approx(
        expected, rel=1e-4)


def test_unknown_or_negative_loss_knobs_raise_value_error():
  model = make_model("sssm")
  with pytest.raises(ValueError, match="unknown loss knobs.*free_bits"):
    model.loss(make_batch(), free_bits=3.0)
  with pytest.raises(ValueError, match="free_nats"):
    model.loss(make_batch(), free_nats=-1.0)
  with pytest.raises(ValueError, match="overshooting"):
    model.loss(make_batch(), overshooting=1.5)
  with pytest.raises(ValueError, match="free_nats_per must be one of"):
    model.loss(make_batch(), free_nats_per="frame")
  with pytest.raises(ValueError, match="free_nats_per must be one of"):
    make_model("dssm_det").loss(make_batch(), free_nats_per="frame")


def test_loss_batch_of_wrong_shape_raises_value_error_naming_shapes():
  model = make_model("sssm")
  batch = make_batch()
  batch["action"] = batch["action"][:, :-1]
  with pytest.raises(ValueError, match=r"expected shape \[B, 6, 1\], "
                     r"given \[2, 5, 1\]"):
    model.loss(batch)


@pytest.mark.parametrize("name,value", [("kind", None),
                                        ("likelihood", "laplace"),
                                        ("state_channels", 0)])
def test_bad_constructor_arguments_raise_value_error(name, value):
  spec = envmodels.EnvModelSpec("sssm", FRAME, NUM_ACTIONS, 1, CONTEXT)
  if name == "kind":
    spec = envmodels.EnvModelSpec("ar", FRAME, NUM_ACTIONS, 1, CONTEXT)
    with pytest.raises(ValueError, match="kind"):
      state_space.StateSpaceModel(spec)
    return
  with pytest.raises(ValueError, match=name):
    state_space.StateSpaceModel(spec, **{name: value})


# -- Action-free sSSM and the learned imagination prior ------------------------


def test_action_free_model_ignores_actions():
  model = make_model("sssm", action_free=True)
  assert not model.uses_actions
  first = rollout(model, seed=1, actions=make_actions(seed=0))
  other = rollout(model, seed=1, actions=make_actions(seed=1))
  for a, b in zip(first, other):
    np.testing.assert_array_equal(a, b)


def test_attach_imagination_prior_makes_exactly_its_variables_trainable():
  model = make_model("sssm", action_free=True)
  learned = {v.ref() for v in model.variables}
  prior = model.attach_imagination_prior(seed=0)
  assert model.imagination_prior is prior
  trainable = {v.ref() for v in model.trainable_variables}
  assert trainable == {v.ref() for v in prior.trainable_variables}
  assert trainable and not trainable & learned
  # Same shapes as the learned prior it replaces, seeded initialisation.
  # pylint: disable-next=protected-access
  learned_prior = [v.shape for v in model._prior.variables]
  assert [v.shape for v in prior.variables] == learned_prior
  twin = make_model("sssm", action_free=True).attach_imagination_prior(seed=0)
  for a, b in zip(prior.variables, twin.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_rollouts_sample_from_the_attached_imagination_prior():
  model = make_model("sssm", action_free=True)
  before = rollout(model, seed=1)
  model.attach_imagination_prior(seed=0)
  after = rollout(model, seed=1)
  assert not np.allclose(before[0], after[0])


def test_imagination_prior_of_a_loaded_model_gets_the_only_gradients(tmp_path):
  envmodels.export(make_model("sssm", action_free=True), str(tmp_path / "m"))
  model = envmodels.load(str(tmp_path / "m"), seed=0)
  frozen = list(model.variables)
  prior = model.attach_imagination_prior(seed=0)
  assert [v.ref() for v in model.trainable_variables] == [
      v.ref() for v in prior.trainable_variables]

  @tf.function(autograph=False)
  def gradients(context, actions):
    with tf.GradientTape(persistent=True) as tape:
      result = model.rollout(model.initial_state(context), actions,
                             render=True)
      total = (tf.reduce_sum(result.features) + tf.reduce_sum(result.rewards)
               + tf.reduce_sum(result.frames))
    return (tape.gradient(total, model.trainable_variables),
            tape.gradient(total, frozen))

  to_prior, to_frozen = gradients(make_context(), make_actions())
  assert all(g is not None and np.all(np.isfinite(g.numpy()))
             and np.any(g.numpy()) for g in to_prior)
  assert all(g is None for g in to_frozen)


@pytest.mark.parametrize("kind,action_free", [("sssm", False),
                                              ("dssm_det", True),
                                              ("dssm_vae", True)])
def test_attach_imagination_prior_needs_an_action_free_sssm(kind, action_free):
  model = make_model(kind, action_free=action_free)
  with pytest.raises(ValueError, match="action-free sSSM"):
    model.attach_imagination_prior(seed=0)


def test_attaching_a_second_imagination_prior_raises_value_error():
  model = make_model("sssm", action_free=True)
  model.attach_imagination_prior(seed=0)
  with pytest.raises(ValueError, match="already attached"):
    model.attach_imagination_prior(seed=1)


@pytest.mark.parametrize("kind", ["sssm", "dssm_vae"])
def test_a_keyed_rollout_step_draws_the_priors_own_sample(kind):
  """A rollout step draws z with the std's softplus fused into the noise
  kernel (`_generate(with_prior=False)`): the sample of the prior
  Gaussian itself, as training's path draws it with the same keys."""
  model = make_model(kind)
  state = model.initial_state(make_context()).state
  encoded = model.encode_actions(make_actions()[:, 0])
  keys = tf.constant(np.arange(2 * BATCH).reshape(BATCH, 2), tf.int32)
  results = []
  for with_prior in (True, False):
    model._noise_keys, model._noise_draws = keys, 0  # pylint: disable=protected-access
    try:
      new_state, prior = model._generate(state, encoded, with_prior=with_prior)  # pylint: disable=protected-access
    finally:
      model._noise_keys = None  # pylint: disable=protected-access
    assert (prior is None) == (not with_prior)
    results.append(new_state)
  for a, b in zip(*results):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)
  assert np.all(np.isfinite(results[1].latent.numpy()))


def test_res_conv_given_the_state_as_residual_adds_the_same_values():
  """The transition passes the state as ResConv's residual (so that the
  add fuses under bf16): the same as slicing it out of the input."""
  block = networks.ResConv(state_channels=4, hidden=3)
  rng = np.random.RandomState(0)
  state = tf.constant(rng.randn(2, 3, 5, 4), tf.float32)
  inputs = tf.concat([state, tf.constant(rng.randn(2, 3, 5, 6),
                                         tf.float32)], -1)
  np.testing.assert_array_equal(block(inputs, residual=state).numpy(),
                                block(inputs).numpy())


@pytest.mark.parametrize("shape,block", [((2, 104, 80, 3), 4),
                                         ((3, 26, 20, 16), 2),
                                         ((1, 16, 8, 5), 8)])
def test_the_encoders_space_to_depth_and_back_are_tensorflows(shape, block):
  """networks.space_to_depth / depth_to_space (a reshape and a transpose)
  give tf.nn's values and gradients exactly, in a tf.function with an
  unknown batch too."""
  x = tf.constant(np.random.RandomState(0).randn(*shape), tf.float32)
  weights = tf.constant(np.random.RandomState(1).randn(*shape), tf.float32)
  unknown_batch = tf.TensorSpec([None, *shape[1:]], tf.float32)
  ours = tf.function(lambda x: networks.space_to_depth(x, block),
                     input_signature=[unknown_batch])(x)
  np.testing.assert_array_equal(ours.numpy(),
                                tf.nn.space_to_depth(x, block).numpy())
  np.testing.assert_array_equal(networks.depth_to_space(ours, block).numpy(),
                                x.numpy())
  depth = tf.nn.space_to_depth(x, block)
  for ours_fn, theirs_fn, arg in (
      (networks.space_to_depth, tf.nn.space_to_depth, x),
      (networks.depth_to_space, tf.nn.depth_to_space, depth)):
    grads = []
    for fn in (ours_fn, theirs_fn):
      with tf.GradientTape() as tape:
        tape.watch(arg)
        out = fn(arg, block)
        loss = tf.reduce_sum(out * tf.reshape(weights, tf.shape(out)))
      grads.append(tape.gradient(loss, arg).numpy())
    np.testing.assert_array_equal(*grads)


@pytest.mark.parametrize("likelihood", ["bernoulli", "gaussian"])
def test_the_likelihood_in_the_decoders_blocks_is_the_frames(likelihood):
  """The losses compare `Decoder.blocks` with `frame_blocks` of the
  targets: the same nats per frame as the full-resolution frames give."""
  rng = np.random.RandomState(2)
  decoder = networks.Decoder(3)
  features = tf.constant(rng.randn(2, 6, 5, 8), tf.float32)
  frames = tf.constant(rng.randint(0, 256, (2, 48, 40, 3)), tf.uint8)
  blocks = networks.frame_blocks(frames)
  np.testing.assert_array_equal(blocks.numpy(),
                                tf.nn.space_to_depth(frames, 4).numpy())
  np.testing.assert_array_equal(
      decoder(features).numpy(),
      tf.nn.depth_to_space(decoder.blocks(features), 4).numpy())
  full = losses.image_log_prob(decoder(features),
                               losses.preprocess_frames(frames), likelihood)
  in_blocks = losses.image_log_prob(decoder.blocks(features),
                                    losses.preprocess_frames(blocks),
                                    likelihood)
  assert full.shape == in_blocks.shape == (2,)
  # The same 5,760 float32 terms per frame, summed in another order: the
  # sums agree to a few float32 ulps of the magnitudes summed (about 1e-6
  # relative was seen), not to 1e-6 always.
  np.testing.assert_allclose(in_blocks.numpy(), full.numpy(), rtol=1e-5)
