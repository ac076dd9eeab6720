"""Tests of the I2A network (agents/imagination): every rollout strategy and
baseline runs and gives finite outputs and losses; the envmodel stays frozen
while gradients reach pi_r (learning to query) and p_imag (imagination
prior); the distillation loss has the right sign; the rollout encoder reads
the last imagined step first; the K rollouts are one [B*K] batch with one
model call per depth step and rollout k starts with action k; models that do
not fit the environment are refused. Tiny MiniPacman-sized models (16x24x3
frames, 5 actions), exported and loaded so they are frozen."""

import functools
import importlib

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from agents import builder
from agents import losses
from agents.imagination import imagination as imagination_lib
from agents.imagination import networks
from agents.imagination import rollout_policies
from configs.agents import i2a as i2a_config
from envmodels import branches

FRAME = (16, 24, 3)
NUM_ACTIONS = 5
CONTEXT = 3
BATCH = 2


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
  """Export directories of tiny models: action-conditioned dSSM-DET (jump 1
  and 2) and an action-free sSSM."""
  root = tmp_path_factory.mktemp("envmodels")
  made = {}
  for name, kind, jump, action_free in (("det", "dssm_det", 1, False),
                                        ("det_jump2", "dssm_det", 2, False),
                                        ("action_free", "sssm", 1, True),
                                        ("sssm", "sssm", 1, False)):
    spec = envmodels.EnvModelSpec(kind=kind, observation_shape=FRAME,
                                  num_actions=NUM_ACTIONS, jump=jump,
                                  context_length=CONTEXT,
                                  action_free=action_free)
    model = envmodels.build(
        spec, seed=1, **envmodels.model_class(kind).tiny_hyperparameters())
    made[name] = envmodels.export(model, str(root / name))
  return made


def load(exports, name="det"):
  return envmodels.load(exports[name], seed=0)


def tiny_config(**network):
  config = i2a_config.get_config("tiny")
  config.network.update(network)
  return config


def make(envmodel, **network):
  """The I2A of the tiny preset around `envmodel` (through the factory)."""
  return networks.make_network(tiny_config(**network), NUM_ACTIONS, FRAME,
                               envmodel=envmodel)


def observations(batch=BATCH, seed=0):
  rng = np.random.RandomState(seed)
  return tf.constant(rng.randint(0, 256, (batch, CONTEXT) + FRAME),
                     tf.uint8)  # [B, k, H, W, C]


def full_loss(network, unroll_obs, actions, rewards):
  """What agents/learning.py minimises: n-step A2C + auxiliary loss.
  unroll_obs uint8 [B, n + 1, k, H, W, C]; actions, rewards [B, n]."""
  batch, length = unroll_obs.shape[:2]
  output = network(tf.reshape(unroll_obs, (-1,) + tuple(unroll_obs.shape[2:])))
  logits = tf.reshape(output.policy_logits, [batch, length, -1])
  values = tf.reshape(output.value, [batch, length])
  time_major = lambda x: tf.transpose(
      x, [1, 0] + list(range(2, len(x.shape))))
  out = losses.actor_critic_loss(
      time_major(logits[:, :-1]), time_major(values[:, :-1]),
      time_major(actions), time_major(rewards),
      tf.ones_like(time_major(rewards)), values[:, -1])
  auxiliary, metrics = network.auxiliary_loss(output)
  return out.loss + auxiliary, auxiliary, metrics


def unroll_batch(seed=0):
  rng = np.random.RandomState(seed)
  obs = tf.constant(rng.randint(0, 256, (BATCH, 2, CONTEXT) + FRAME),
                    tf.uint8)  # n = 1
  actions = tf.constant(rng.randint(0, NUM_ACTIONS, (BATCH, 1)), tf.int32)
  rewards = tf.constant(rng.randn(BATCH, 1), tf.float32)
  return obs, actions, rewards


def model_variables(network):
  """The model's variables that are NOT an attached imagination prior."""
  prior = (set() if network.attached is None else
           {v.ref() for v in network.attached.variables})
  return [v for v in network.model.variables if v.ref() not in prior]


CASES = {
    # name: (export, network overrides)
    "distillation": ("det", dict(rollout_policy="distillation")),
    "learning_to_query": ("det", dict(rollout_policy="learning_to_query")),
    "imagination_prior": ("action_free",
                          dict(rollout_policy="imagination_prior")),
    "random": ("det", dict(rollout_policy="random")),
    "jumpy_learning_to_query": ("det_jump2",
                                dict(rollout_policy="learning_to_query")),
    "jumpy_distillation": ("det_jump2", dict(rollout_policy="distillation")),
    "pixels": ("det", dict(imagination="pixels")),
    "copy": ("det", dict(model="copy")),
    "copy_pixels": ("det", dict(model="copy", imagination="pixels",
                                rollout_policy="random")),
    "untrained": ("det", dict(model="untrained",
                              rollout_policy="learning_to_query")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_strategy_and_baseline_gives_finite_outputs_and_losses(
    exports, case):
  export, overrides = CASES[case]
  network = make(load(exports, export), **overrides)
  output = network(observations())
  assert output.policy_logits.shape == (BATCH, NUM_ACTIONS)
  assert output.value.shape == (BATCH,)
  for value in (output.policy_logits, output.value,
                *output.extras.values()):
    assert np.all(np.isfinite(value.numpy()))
  with tf.GradientTape() as tape:
    loss, auxiliary, _ = full_loss(network, *unroll_batch())
  gradients = tape.gradient(loss, network.learnable_variables)
  assert np.isfinite(loss.numpy()) and np.isfinite(auxiliary.numpy())
  present = [g for g in gradients if g is not None]
  assert present and all(np.all(np.isfinite(g.numpy())) for g in present)


@pytest.mark.parametrize("strategy,export", [
    ("distillation", "det"), ("learning_to_query", "det"),
    ("imagination_prior", "action_free")])
def test_rollouts_run_inside_the_callers_tf_function(
    exports, strategy, export):
  network = make(load(exports, export), rollout_policy=strategy)
  obs = observations()
  network(obs)  # variables

  @tf.function(input_signature=[tf.TensorSpec(
      [None, CONTEXT] + list(FRAME), tf.uint8)])  # batch-agnostic
  def forward(batch):
    output = network(batch)
    auxiliary, _ = network.auxiliary_loss(output)
    return output.policy_logits, auxiliary

  logits, auxiliary = forward(obs)
  assert logits.shape == (BATCH, NUM_ACTIONS)
  assert np.all(np.isfinite(logits.numpy())) and np.isfinite(auxiliary)
  assert forward(observations(batch=3))[0].shape == (3, NUM_ACTIONS)


@pytest.mark.parametrize("strategy,export", [
    ("learning_to_query", "det"), ("imagination_prior", "action_free"),
    ("distillation", "det")])
def test_envmodel_weights_are_bit_identical_after_optimizer_steps(
    exports, strategy, export):
  network = make(load(exports, export), rollout_policy=strategy)
  unroll_obs, actions, rewards = unroll_batch()
  network(observations())  # creates the variables
  frozen = model_variables(network)
  before = [v.numpy().copy() for v in frozen]
  learnable_before = [v.numpy().copy() for v in network.learnable_variables]
  assert not {v.ref() for v in frozen} & {
      v.ref() for v in network.learnable_variables}
  optimizer = tf.keras.optimizers.RMSprop(1e-2)
  for _ in range(3):
    with tf.GradientTape() as tape:
      loss, _, _ = full_loss(network, unroll_obs, actions, rewards)
    variables = network.learnable_variables
    gradients = tape.gradient(loss, variables)
    optimizer.apply_gradients(
        [(g, v) for g, v in zip(gradients, variables) if g is not None])
  for variable, value in zip(frozen, before):
    np.testing.assert_array_equal(variable.numpy(), value,
                                  err_msg=variable.name)
  assert any(not np.array_equal(v.numpy(), b) for v, b in
             zip(network.learnable_variables, learnable_before))


def test_gradients_reach_the_rollout_policy_through_the_model_in_learning_to_query(
    exports):
  model = load(exports)
  network = make(model, rollout_policy="learning_to_query")
  unroll_obs, actions, rewards = unroll_batch()
  network(observations())
  assert not model.trainable_variables
  with tf.GradientTape() as tape:
    output = network(observations())
    # The actor-critic part alone: pi_r gets no auxiliary help here.
    loss = tf.reduce_sum(output.policy_logits[:, 0]) + tf.reduce_sum(
        output.value)
  policy_variables = network.rollout_policy.network.trainable_variables
  gradients = tape.gradient(loss, policy_variables)
  assert all(g is not None for g in gradients)
  assert sum(float(tf.norm(g)) for g in gradients) > 0
  learnable = {v.ref() for v in network.learnable_variables}
  assert all(v.ref() in learnable for v in policy_variables)
  assert not learnable & {v.ref() for v in model.variables}


def test_gradients_reach_the_imagination_prior_but_no_other_model_weight(
    exports):
  model = load(exports, "action_free")
  network = make(model, rollout_policy="imagination_prior")
  with tf.GradientTape() as tape:
    output = network(observations())
    loss = tf.reduce_sum(output.policy_logits[:, 0]) + tf.reduce_sum(
        output.value)
  prior = network.attached.trainable_variables
  assert prior and model.trainable_variables == tuple(prior)
  gradients = tape.gradient(loss, prior)
  assert all(g is not None for g in gradients)
  assert sum(float(tf.norm(g)) for g in gradients) > 0
  learnable = {v.ref() for v in network.learnable_variables}
  assert {v.ref() for v in prior} <= learnable
  assert not learnable & {v.ref() for v in model_variables(network)}
  assert network.rollout_policy.network is None


def test_distillation_loss_falls_and_never_touches_the_agent_policy(exports):
  network = make(load(exports), rollout_policy="distillation",
                 distillation_weight=2.0)
  obs = observations(batch=4)
  output = network(obs)
  # An agent policy far from pi_r's near-uniform start, whatever the init.
  network._policy_head.b.assign([2.0, 0.0, -1.0, 0.0, 1.0])  # pylint: disable=protected-access
  pi_r = network.rollout_policy.network.trainable_variables
  pi_r_refs = {v.ref() for v in pi_r}
  others = [v for v in network.learnable_variables if v.ref() not in pi_r_refs]
  with tf.GradientTape() as tape:
    output = network(obs)
    auxiliary, metrics = network.auxiliary_loss(output)
  # A positive weight on the cross-entropy FROM pi (target) TO pi_r.
  np.testing.assert_allclose(auxiliary.numpy(),
                             2.0 * metrics["distillation_cross_entropy"],
                             rtol=1e-6)
  gradients = tape.gradient(auxiliary, others + list(pi_r))
  for variable, gradient in zip(others, gradients[:len(others)]):
    assert gradient is None or not np.any(gradient.numpy()), variable.name
  assert all(g is not None for g in gradients[len(others):])

  agent_before = [v.numpy().copy() for v in others]
  optimizer = tf.keras.optimizers.SGD(0.5)
  kls = []
  for _ in range(20):
    with tf.GradientTape() as tape:
      output = network(obs)
      auxiliary, metrics = network.auxiliary_loss(output)
    kls.append(float(metrics["distillation_kl"]))
    gradients = tape.gradient(auxiliary, network.learnable_variables)
    optimizer.apply_gradients(
        [(g, v) for g, v in zip(gradients, network.learnable_variables)
         if g is not None])
  # pi_r moved towards pi; the agent's parameters (policy head, torso,
  # encoder) did not move at all.
  assert kls[-1] < 0.5 * kls[0], kls
  for variable, value in zip(others, agent_before):
    np.testing.assert_array_equal(variable.numpy(), value,
                                  err_msg=variable.name)


def test_distillation_cross_entropy_sign_moves_pi_r_towards_pi():
  agent = tf.constant([[2.0, 0.0, -1.0]])
  rollout = tf.Variable([[0.0, 0.0, 0.0]])
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(agent)
    loss = rollout_policies.distillation_cross_entropy(agent, rollout)[0]
  assert tape.gradient(loss, agent) is None or not np.any(
      tape.gradient(loss, agent).numpy())
  rollout.assign_sub(0.5 * tape.gradient(loss, rollout))  # descent
  assert np.argmax(rollout.numpy()) == 0  # pi_r now prefers pi's action


def test_rollout_encoder_reads_the_last_imagined_step_first():
  encoder = imagination_lib.RolloutEncoder((4,), (1,), lstm_size=6)
  rng = np.random.RandomState(0)
  imaginations = tf.constant(rng.randn(3, 4, 2, 3, 5), tf.float32)
  rewards = tf.constant(rng.randn(3, 4), tf.float32)  # [N, T = 4]
  summary = encoder(imaginations, rewards).numpy()

  embedded = encoder.embed(imaginations, rewards)  # [N, T, E]
  def read(order):
    state = encoder.core.initial_state(3)
    for t in order:
      output, state = encoder.core(embedded[:, t], state)
    return output.numpy()
  # Exactly the LSTM over steps 3, 2, 1, 0: the first imagined step last.
  np.testing.assert_allclose(summary, read([3, 2, 1, 0]), rtol=1e-6)
  assert not np.allclose(summary, read([0, 1, 2, 3]))
  # Reversing the rollout changes the summary.
  flipped = encoder(imaginations[:, ::-1], rewards[:, ::-1]).numpy()
  assert not np.allclose(summary, flipped)


class _Recorder:
  """Wraps a model's methods on the instance, recording each call."""

  def __init__(self, model, name):
    self.calls = []
    method = getattr(model, name)

    @functools.wraps(method)
    def record(*args, **kwargs):
      self.calls.append(args)
      return method(*args, **kwargs)
    setattr(model, name, record)


@pytest.mark.parametrize("strategy,export,depth", [
    ("random", "det", 3), ("learning_to_query", "det", 2),
    ("distillation", "det_jump2", 2)])
def test_rollouts_are_one_batch_with_one_model_call_per_depth_step(
    exports, strategy, export, depth):
  model = load(exports, export)
  steps = _Recorder(model, "step")
  starts = _Recorder(model, "initial_state")
  renders = _Recorder(model, "render")
  network = make(model, rollout_policy=strategy, depth=depth)
  with branches.scope(1):  # one chain (the row branches: below)
    network(observations())
  jump, k = model.spec.jump, NUM_ACTIONS
  assert len(starts.calls) == 1 and len(steps.calls) == depth
  assert not renders.calls  # abstract imaginations never render
  for state, actions in steps.calls:
    assert state.state.shape[0] == BATCH * k  # [B*K, ...]
    assert actions.shape[:2] == (BATCH * k, jump)
  first = steps.calls[0][1].numpy()
  expected = np.tile(np.arange(k), BATCH)  # row b*K + k starts with k
  if strategy == "learning_to_query":  # relaxed: one-hot of k
    assert first.shape == (BATCH * k, jump, NUM_ACTIONS)
    np.testing.assert_array_equal(first.argmax(-1),
                                  np.repeat(expected[:, None], jump, 1))
    np.testing.assert_array_equal(first.max(-1), 1.0)
  else:
    np.testing.assert_array_equal(first,
                                  np.repeat(expected[:, None], jump, 1))


@pytest.mark.parametrize("strategy,export,model_kind", [
    ("distillation", "det_jump2", "pretrained"),
    ("learning_to_query", "det", "pretrained"),
    ("imagination_prior", "action_free", "pretrained"),
    ("random", "sssm", "pretrained"), ("random", "det", "copy")])
def test_row_branches_give_the_rollouts_of_one_chain(exports, strategy,
                                                     export, model_kind):
  """2 and 3 row branches (5 windows x K = 5 rows: 13 + 12 and 9 + 8 + 8)
  run the same per-row arithmetic, with the same per-row noise, as one
  chain: the same imaginations, rewards and rollout-policy logits, and
  one model call per depth step and branch."""
  model = load(exports, export)
  network = make(model, rollout_policy=strategy, model=model_kind)
  core = network.imagination_core
  obs = observations(batch=5, seed=3)
  keys = tf.constant(np.random.RandomState(4).randint(
      -2**31, 2**31 - 1, (5, 2)), tf.int32)
  results = {}
  for n in (1, 2, 3):
    steps = _Recorder(core.model, "step")
    with branches.scope(n):
      results[n] = core(obs, keys=keys)
    del core.model.step  # the recorder's wrapper
    sizes = branches.row_sizes(25, n) or [25]
    assert sorted(c[1].shape[0] for c in steps.calls) == sorted(
        sizes * core.depth)  # one call per depth step and branch
  for n in (2, 3):
    for field in ("imaginations", "rewards", "rollout_policy_logits"):
      one, many = getattr(results[1], field), getattr(results[n], field)
      if one is None:
        assert many is None
        continue
      np.testing.assert_allclose(many.numpy(), one.numpy(), rtol=1e-5,
                                 atol=1e-6, err_msg=f"{field}, {n} branches")


@pytest.mark.parametrize("export,overrides", [
    ("det", dict(rollout_policy="distillation")),  # stored rollouts
    ("sssm", dict(rollout_policy="random", learner_rollouts="recompute"))])
def test_the_act_in_window_branches_acts_as_one_chain(exports, export,
                                                      overrides):
  """The fused act over 2 and 3 row branches of its 5 windows (each
  branch all of the act) draws the windows' noise keys once, as one chain
  does, and gives one chain's logits and side inputs, with and without
  the actor's cache of context encodings."""
  from agents.acting import random_generators  # pylint: disable=import-outside-toplevel
  network = make(load(exports, export), depth=2, **overrides)
  builder.create_variables(network, FRAME)
  generators = random_generators(network)
  start = [generator.state.numpy() for generator in generators]
  windows = np.random.RandomState(6).randint(
      0, 256, (5, len(network.window_offsets)) + FRAME).astype(np.uint8)
  results = {}
  for n in (1, 2, 3):
    for cached in (False, True):
      for generator, value in zip(generators, start):
        generator.state.assign(value)
      network._fused_act_fn = network._cached_act_fn = None  # pylint: disable=protected-access
      context = network.context_cache(windows) if cached else None
      with branches.scope(n):
        results[n, cached] = network.act(windows, None, context)
  for key, (logits, side) in results.items():
    one_logits, one_side = results[1, key[1]]
    np.testing.assert_allclose(logits, one_logits, rtol=1e-5, atol=1e-6,
                               err_msg=str(key))
    assert sorted(side) == sorted(one_side)
    for name, value in side.items():
      if value.dtype.kind == "f":
        np.testing.assert_allclose(value, one_side[name], rtol=1e-5,
                                   atol=1e-6, err_msg=f"{name} {key}")
      else:
        np.testing.assert_array_equal(value, one_side[name], err_msg=name)


def test_pi_r_chooses_every_step_but_the_fixed_first_one(exports):
  for fix_first_action, queried in ((True, 1), (False, 2)):
    network = make(load(exports), rollout_policy="learning_to_query",
                   depth=2, fix_first_action=fix_first_action)
    imagined = network.imagination_core(observations())
    assert imagined.rollout_policy_logits.shape == (
        BATCH * NUM_ACTIONS, queried, NUM_ACTIONS)


def test_pixel_imaginations_render_every_step(exports):
  model = load(exports)
  renders = _Recorder(model, "render")
  network = make(model, imagination="pixels", depth=2)
  imagined = network.imagination_core(observations())
  assert len(renders.calls) == 2
  assert imagined.imaginations.shape == (BATCH * NUM_ACTIONS, 2) + FRAME


def test_copy_model_imagines_the_initial_state_with_zero_reward(exports):
  model = load(exports)
  network = make(model, model="copy", depth=3)
  obs = observations()
  imagined = network.imagination_core(obs)
  initial = model.initial_state(obs).state  # [B, h, w, d]
  expected = np.repeat(initial.numpy(), NUM_ACTIONS, axis=0)  # [B*K, ...]
  for t in range(3):
    np.testing.assert_array_equal(imagined.imaginations[:, t].numpy(),
                                  expected)
  np.testing.assert_array_equal(imagined.rewards.numpy(), 0.0)
  pixels = make(model, model="copy", imagination="pixels",
                rollout_policy="random").imagination_core(obs)
  np.testing.assert_allclose(
      pixels.imaginations[::NUM_ACTIONS, -1].numpy(),
      obs[:, -1].numpy() / 255.0, rtol=1e-6)


@pytest.mark.parametrize("imagination", ["abstract", "pixels"])
def test_copy_model_rollouts_compile_in_uneven_row_branches(exports,
                                                            imagination):
  """Traced (Grappler rewrites the graph) with 2 branches of 3 and 2 rows
  (1 window x K = 5), the copy model's repeated state stacks to the
  imaginations one chain gives: its steps return one tensor, whose
  tf.stack Grappler once turned into a reshape to the wrong branch's
  shape."""
  model = load(exports)
  network = make(model, model="copy", depth=2, imagination=imagination)
  core = network.imagination_core
  obs = observations(batch=1, seed=5)
  keys = tf.constant([[3, 4]], tf.int32)
  results = {}
  for n in (1, 2):
    with branches.scope(n):
      results[n] = tf.function(core)(obs, keys=keys)
  assert results[2].imaginations.shape[:2] == (NUM_ACTIONS, 2)
  np.testing.assert_array_equal(results[2].imaginations.numpy(),
                                results[1].imaginations.numpy())
  np.testing.assert_array_equal(results[2].imaginations[:, 0].numpy(),
                                results[2].imaginations[:, 1].numpy())


def test_untrained_model_is_frozen_seeded_and_not_the_pretrained_one(exports):
  model = load(exports)
  first = imagination_lib.untrained_envmodel(model, seed=4)
  again = imagination_lib.untrained_envmodel(model, seed=4)
  assert first.spec == model.spec and not first.trainable_variables
  for a, b in zip(first.variables, again.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert any(not np.array_equal(a.numpy(), b.numpy())
             for a, b in zip(first.variables, model.variables))


def test_models_that_do_not_fit_are_refused_with_both_specs(exports):
  model = load(exports)
  with pytest.raises(ValueError) as error:
    networks.make_network(tiny_config(), 4, FRAME, envmodel=model)
  assert "'num_actions': 5" in str(error.value)
  assert "'num_actions': 4" in str(error.value)
  with pytest.raises(ValueError) as error:
    networks.make_network(tiny_config(), NUM_ACTIONS, (16, 16, 3),
                          envmodel=model)
  assert "(16, 24, 3)" in str(error.value)
  assert "(16, 16, 3)" in str(error.value)


def test_strategies_that_need_the_model_refuse_models_that_cannot_serve(
    exports):
  with pytest.raises(ValueError, match="action-free sSSM"):
    make(load(exports), rollout_policy="imagination_prior")
  with pytest.raises(ValueError, match="no gradient"):
    make(load(exports), rollout_policy="learning_to_query", model="copy")
  spec = envmodels.EnvModelSpec(kind="dssm_det", observation_shape=FRAME,
                                num_actions=NUM_ACTIONS, jump=1,
                                context_length=CONTEXT)
  trainable = envmodels.build(
      spec, **envmodels.model_class("dssm_det").tiny_hyperparameters())
  trainable.create_variables()
  with pytest.raises(ValueError, match="must be frozen"):
    make(trainable)


def test_factory_is_registered_and_builds_from_the_config(exports):
  assert builder.network_factory("i2a") is networks.make_network
  config = tiny_config()
  config.envmodel = exports["det"]
  network = builder.build_network(config, NUM_ACTIONS, FRAME,
                                  envmodel=load(exports))
  assert isinstance(network, networks.I2ANetwork)
  network = networks.make_network(config, NUM_ACTIONS, FRAME)  # loads it
  assert network.context_length == CONTEXT
  config.context_length = 1
  with pytest.raises(ValueError, match="context_length=3"):
    networks.make_network(config, NUM_ACTIONS, FRAME, envmodel=load(exports))
  for preset in ("minipacman", "small", "paper"):
    assert i2a_config.get_config(preset).network.rollout_policy in (
        rollout_policies.STRATEGIES)


def test_oracle_model_needs_env_snapshots_and_releases_them():
  oracle = importlib.import_module("envmodels.oracle")  # registers 'oracle'
  from i2a.environments import make_env, preset  # pylint: disable=g-import-not-at-top
  protocol = preset("minipacman", env_id="MiniPacman-avoid-v0")
  env_fn = functools.partial(make_env, protocol)
  envs = [env_fn() for _ in range(BATCH)]
  frames = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
  spec = oracle.spec_for_env(envs[0], jump=1, context_length=CONTEXT)
  model = oracle.OracleModel(spec, env_fn=env_fn, seed=0)
  network = make(model, rollout_policy="distillation")  # reads s_t|t too
  obs = tf.constant(np.repeat(np.stack(frames)[:, None], CONTEXT, 1))
  with pytest.raises(ValueError, match="model_state"):
    network(obs)
  state = model.initial_state_from_envs(envs)
  output = network(obs, model_state=state)
  assert np.all(np.isfinite(output.policy_logits.numpy()))
  assert np.isfinite(network.auxiliary_loss(output)[0].numpy())
  assert model.store_size == BATCH  # the rollouts' snapshots were released
  with pytest.raises(ValueError, match="no gradient"):
    make(model, rollout_policy="learning_to_query")
  model.close()


@pytest.mark.parametrize("overrides,stored", [
    (dict(rollout_policy="distillation"), True),
    (dict(rollout_policy="random"), True),
    (dict(rollout_policy="learning_to_query"), False),  # gradient through
    (dict(rollout_policy="distillation", imagination="pixels"), False),
    (dict(rollout_policy="distillation", model="copy"), False),
    (dict(rollout_policy="distillation", learner_rollouts="recompute"),
     False),
    (dict(rollout_policy="distillation", imagination="pixels",
          learner_rollouts="actor"), True)])
def test_learner_rollouts_auto_stores_them_where_no_gradient_needs_the_model(
    exports, overrides, stored):
  config = tiny_config(**overrides)
  network = networks.make_network(config, NUM_ACTIONS, FRAME,
                                  envmodel=load(exports))
  assert network.rollouts_from_actor == stored
  recomputed = {"rollout_keys"}  # the learner reruns them from the keys
  assert (set(network.side_input_spec()) == recomputed) == (not stored)
  if not stored:  # only the window's noise key
    side = network.side_inputs(np.zeros([2, 3, *FRAME], np.uint8), None)
    assert set(side) == recomputed and side["rollout_keys"].shape == (2, 2)
    assert side["rollout_keys"].dtype == np.int32


def test_learner_rollouts_refuses_what_cannot_work(exports):
  with pytest.raises(ValueError, match="must pass through the model"):
    make(load(exports), rollout_policy="learning_to_query",
         learner_rollouts="actor")
  with pytest.raises(ValueError, match="learner_rollouts must be one of"):
    make(load(exports), learner_rollouts="sometimes")


def test_stored_rollouts_give_the_learner_the_actors_outputs_and_gradients(
    exports):
  """Depth 1 with fixed first actions samples nothing, so the rollouts the
  actor stores and the ones the learner would recompute are the same."""
  stored = make(load(exports), rollout_policy="distillation", depth=1,
                stored_features="float32")
  recomputed = make(load(exports), rollout_policy="distillation", depth=1,
                    learner_rollouts="recompute")
  obs = observations(batch=3)
  builder.create_variables(stored, FRAME)
  builder.create_variables(recomputed, FRAME)
  for target, source in zip(recomputed.variables, stored.variables):
    target.assign(source)
  spec = stored.side_input_spec()
  assert spec["imagined_features"].shape == [NUM_ACTIONS, 1, 2, 3, 8]
  assert spec["initial_features"].shape == [2, 3, 8]  # s_t|t, for pi_r
  side = stored.side_inputs(obs.numpy(), envs=None)
  for name, value in side.items():
    assert value.shape == (3, *spec[name].shape), name
  side = {k: tf.constant(v) for k, v in side.items()}
  with tf.GradientTape(persistent=True) as tape:
    from_actor = stored(obs, side)
    from_learner = recomputed(obs)
    loss_actor = stored.auxiliary_loss(from_actor)[0] + tf.reduce_sum(
        from_actor.value)
    loss_learner = recomputed.auxiliary_loss(from_learner)[0] + (
        tf.reduce_sum(from_learner.value))
  for field in ("policy_logits", "value"):
    np.testing.assert_allclose(getattr(from_actor, field),
                               getattr(from_learner, field), rtol=1e-5,
                               atol=1e-6)
  gradients_actor = tape.gradient(loss_actor, stored.learnable_variables)
  gradients_learner = tape.gradient(loss_learner,
                                    recomputed.learnable_variables)
  assert len(gradients_actor) == len(gradients_learner)
  for a, b in zip(gradients_actor, gradients_learner):
    assert (a is None) == (b is None)
    if a is not None:
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  with pytest.raises(ValueError, match="lack 'initial_features'"):
    stored(obs, {k: v for k, v in side.items() if k != "initial_features"})


# -- Jumpy context: the model reads frames c agent steps apart -------------


def test_a_jumpy_models_context_is_c_steps_apart_and_never_crosses_episodes(
    exports):
  from agents.acting import Actor  # pylint: disable=import-outside-toplevel
  from tests import fakes  # pylint: disable=import-outside-toplevel
  model = load(exports, "det_jump2")  # c = 2, k = 3
  network = make(model, model_free_frames=2)
  assert network.window_offsets == (4, 2, 1, 0)  # model: 4, 2, 0
  starts = _Recorder(model, "initial_state")
  windows = observations(batch=1)
  windows = tf.concat([windows, windows[:, :1]], axis=1)  # [1, 4, ...]
  network(windows)
  np.testing.assert_array_equal(starts.calls[0][0],
                                tf.gather(windows, [0, 1, 3], axis=1))

  envs = fakes.counting_vector_env(
      3, shape=FRAME, num_actions=NUM_ACTIONS, min_length=2, max_length=7)
  actor = Actor(network, envs, unroll_length=4, seed=0)
  stored = []
  for _ in range(6):
    batch, _ = actor.unroll()
    stored.append(batch["observation"])  # [N, n + 1, 4, H, W, C]
  windows = np.concatenate(stored, axis=1).reshape([-1, 4, *FRAME])
  steps = windows[:, :, 0, 0, 0].astype(int)  # [W, 4]: step in the episode
  episodes = windows[:, :, 0, 0, 1]
  assert (episodes == episodes[:, -1:]).all()  # one episode per window
  newest = steps[:, -1]
  np.testing.assert_array_equal(
      steps, np.maximum(newest[:, None] - np.array([4, 2, 1, 0]), 0))
  assert newest.max() >= 4  # some windows reach back a full context
  context = network.model_context(windows).numpy()[:, :, 0, 0, 0]
  np.testing.assert_array_equal(
      context, np.maximum(newest[:, None] - np.array([4, 2, 0]), 0))
  actor.close()


def test_context_encodings_keep_each_frames_encoding_in_its_slot():
  from agents.base import ContextEncodings  # pylint: disable=import-outside-toplevel
  history = np.arange(2 * 3, dtype=np.float32).reshape([2, 3, 1])  # [N, L, 1]
  cache = ContextEncodings(history)
  np.testing.assert_array_equal(cache.at_offsets([2, 0])[..., 0],
                                [[0, 2], [3, 5]])
  cache.advance(np.array([False, True]))  # env 1 starts an episode
  assert cache.pending
  cache.fill(np.array([[10.0], [11.0]]))
  assert not cache.pending and not cache.fresh.any()
  np.testing.assert_array_equal(cache.history[..., 0], [[1, 2, 10],
                                                        [11, 11, 11]])
  np.testing.assert_array_equal(cache.at_offsets([2, 1, 0])[..., 0],
                                [[1, 2, 10], [11, 11, 11]])
  restored = ContextEncodings(np.zeros_like(history))
  restored.set_state(cache.get_state())
  np.testing.assert_array_equal(restored.history, cache.history)
  with pytest.raises(ValueError, match=r"offsets must be in \[0, 3\)"):
    cache.at_offsets([3])
  with pytest.raises(ValueError, match="another network or number of envi"):
    ContextEncodings(np.zeros([1, 3, 1])).set_state(cache.get_state())


@pytest.mark.parametrize("export,overrides", [
    ("det_jump2", dict(rollout_policy="distillation", model_free_frames=2)),
    ("sssm", dict(rollout_policy="random", learner_rollouts="recompute"))])
def test_the_actors_cached_encodings_act_as_encoding_every_context_afresh(
    exports, export, overrides):
  """The actor's cached context encodings (each frame encoded once, kept
  across steps, reset at episode starts) give the actions, logits and
  stored rollouts of encoding every window's context afresh, and survive
  a checkpoint (and one saved without them)."""
  from agents.acting import Actor, random_generators  # pylint: disable=import-outside-toplevel
  from tests import fakes  # pylint: disable=import-outside-toplevel
  network = make(load(exports, export), depth=2, **overrides)
  builder.create_variables(network, FRAME)
  assert network.caches_context
  encodes = _Recorder(network.model, "encode_context_frames")
  import gymnasium as gym  # pylint: disable=import-outside-toplevel
  envs = lambda: gym.vector.SyncVectorEnv(  # picklable, for get_state
      [functools.partial(fakes.CountingEnv, shape=FRAME,
                         num_actions=NUM_ACTIONS, min_length=2, max_length=7)
       for _ in range(3)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
  generators = random_generators(network)
  start = [generator.state.numpy() for generator in generators]

  def run(cached, unrolls=5):
    for generator, value in zip(generators, start):
      generator.state.assign(value)
    actor = Actor(network, envs(), unroll_length=3, seed=0)
    if not cached:
      actor._context = None  # pylint: disable=protected-access
    batches = [actor.unroll()[0] for _ in range(unrolls)]
    return actor, batches

  cached_actor, cached = run(True)
  assert encodes.calls  # the cached calls encode through the contract
  _, fresh = run(False)
  for a, b in zip(cached, fresh):
    assert sorted(a) == sorted(b)
    np.testing.assert_array_equal(a["observation"], b["observation"])
    for name in a:
      if a[name].dtype.kind == "f":
        np.testing.assert_allclose(a[name], b[name], atol=2e-5)
      else:
        np.testing.assert_array_equal(a[name], b[name])
  # Every slot holds the encoding of the frame the actor's history holds
  # there (episode starts included: FrameWindows repeats the first frame).
  history = cached_actor._windows.history  # pylint: disable=protected-access
  context = cached_actor._context  # pylint: disable=protected-access
  expected = network.model.encode_context_frames(
      history.reshape((-1,) + FRAME)).numpy()
  np.testing.assert_allclose(context.history.reshape(expected.shape),
                             expected, atol=1e-5)
  # Resumed from its state, with and without the saved encodings.
  state = cached_actor.get_state()
  following = cached_actor.unroll()[0]
  for saved in (state, {**state, "context": None}):
    resumed = Actor(network, envs(), unroll_length=3, seed=0)
    resumed.set_state(saved)
    again = resumed.unroll()[0]
    np.testing.assert_allclose(again["behaviour_logits"],
                               following["behaviour_logits"], atol=2e-5)
    resumed.close()
  cached_actor.close()


def test_the_rollout_encoder_reads_imagined_rewards_through_symlog():
  encoder = imagination_lib.RolloutEncoder((4,), (1,), 8)
  rewards = tf.constant([[0.0, 10.0, -1600.0]])
  embedded = encoder.embed(tf.zeros([1, 3, 2, 3, 4]), rewards).numpy()
  np.testing.assert_allclose(embedded[0, :, -1],
                             [0.0, np.log(11.0), -np.log(1601.0)], rtol=1e-6)
  raw = imagination_lib.RolloutEncoder((4,), (1,), 8, reward_transform="none")
  np.testing.assert_array_equal(
      raw.embed(tf.zeros([1, 3, 2, 3, 4]), rewards).numpy()[0, :, -1],
      rewards.numpy()[0])
  with pytest.raises(ValueError, match="reward_transform must be one of"):
    imagination_lib.RolloutEncoder((4,), (1,), 8, reward_transform="log")


# -- Seeded rollout noise: the learner recomputes the actor's imagination -----


@pytest.mark.parametrize("export,overrides", [
    ("sssm", dict(rollout_policy="distillation",
                  learner_rollouts="recompute")),  # z and pi_r's samples
    ("sssm", dict(rollout_policy="learning_to_query")),  # z
    ("det", dict(rollout_policy="random", learner_rollouts="recompute")),
    ("action_free", dict(rollout_policy="imagination_prior"))])
def test_the_learner_recomputes_exactly_the_imagination_the_actor_acted_on(
    exports, export, overrides):
  from agents.acting import Actor  # pylint: disable=import-outside-toplevel
  from tests import fakes  # pylint: disable=import-outside-toplevel
  network = make(load(exports, export), depth=3, **overrides)
  builder.create_variables(network, FRAME)
  assert set(network.side_input_spec()) == {"rollout_keys"}
  actor = Actor(network, fakes.counting_vector_env(
      3, shape=FRAME, num_actions=NUM_ACTIONS, min_length=2, max_length=6),
                unroll_length=4, seed=0)
  batch, _ = actor.unroll()
  actor.close()
  # The learner's view: all n + 1 windows of all unrolls in one batch, in
  # another order than the actor's [N] batches.
  windows = batch["observation"].reshape([-1, 3, *FRAME])  # [N * 5, ...]
  keys = batch["rollout_keys"].reshape([-1, 2])
  order = np.random.RandomState(0).permutation(len(windows))
  logits = network(windows[order], {"rollout_keys": keys[order]}
                   ).policy_logits.numpy()[np.argsort(order)]
  logits = logits.reshape([3, 5, NUM_ACTIONS])[:, :-1]
  np.testing.assert_allclose(logits, batch["behaviour_logits"], atol=2e-5)
  # Other keys give another imagination (the noise matters here).
  other = network(windows, {"rollout_keys": keys + 1}).policy_logits.numpy()
  assert not np.allclose(other.reshape([3, 5, -1])[:, :-1],
                         batch["behaviour_logits"], atol=1e-4)


def test_bfloat16_stored_features_are_half_the_bytes_and_read_back_close(
    exports):
  exact = make(load(exports), rollout_policy="distillation", depth=2,
               stored_features="float32")
  half = make(load(exports), rollout_policy="distillation", depth=2)
  assert half.stored_features == "bfloat16"  # the preset's default
  obs = observations(batch=3)
  builder.create_variables(exact, FRAME)
  builder.create_variables(half, FRAME)
  for target, source in zip(half.variables, exact.variables):
    target.assign(source)
  keys = tf.constant([[1, 2], [3, 4], [5, 6]], tf.int32)
  assert half.side_input_spec()["imagined_features"].dtype == tf.uint16
  stored = imagination_lib.to_side_inputs(
      half.imagination_core(obs, keys=keys), half.num_rollouts,
      with_initial_features=True, stored_features="bfloat16")
  reference = imagination_lib.to_side_inputs(
      exact.imagination_core(obs, keys=keys), exact.num_rollouts,
      with_initial_features=True)
  assert stored["imagined_features"].dtype == tf.uint16
  back = imagination_lib.from_side_inputs(stored, obs, half.num_rollouts,
                                          NUM_ACTIONS,
                                          with_initial_features=True)
  features = tf.reshape(reference["imagined_features"],
                        back.imaginations.shape).numpy()
  np.testing.assert_allclose(back.imaginations, features, rtol=2**-8,
                             atol=1e-6)  # bfloat16's 8-bit mantissa
  out_half = half(obs, {k: v for k, v in stored.items()})
  out_exact = exact(obs, {k: v for k, v in reference.items()})
  np.testing.assert_allclose(out_half.policy_logits, out_exact.policy_logits,
                             atol=1e-2)


def test_the_paper_preset_imagines_as_deep_as_the_paper_found_best():
  # Buesing et al.: tau = 4 (48 env steps with c = 3) did best for dSSMs.
  assert i2a_config.get_config("paper").network.depth == 4
  assert i2a_config.get_config("small").network.depth == 3
