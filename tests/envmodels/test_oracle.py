"""Tests of the emulator oracle (envmodels/oracle.py): the real environment
behind the EnvModel interface. Exactness against the real environment from
the same snapshot, jumpy steps, episode ends, tf.function, the agent's env
left undisturbed, bounded memory, and the errors it raises. MiniPacman
mostly (fast), one MsPacman test for the ALE path with sticky actions."""

import dataclasses
import functools
import importlib

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from envmodels import registry
from i2a.environments import make_env, make_vector_env, preset

MINIPACMAN = preset("minipacman")
NUM_ACTIONS = 5
SEED = 3


def oracle_lib():
  """envmodels.oracle, imported at first use rather than at collection:
  importing it registers the 'oracle' kind, and suites that parametrize over
  envmodels.kinds() when collected cannot build that kind (it needs env_fn).
  """
  return importlib.import_module("envmodels.oracle")


def make_oracle(protocol=MINIPACMAN, jump=1, **hyperparameters):
  env_fn = functools.partial(make_env, protocol)
  probe = env_fn()
  spec = oracle_lib().spec_for_env(probe, jump=jump)
  probe.close()
  return oracle_lib().OracleModel(spec, env_fn=env_fn, seed=0,
                                **hyperparameters)


def started_envs(protocol=MINIPACMAN, count=2, warmup=4, seed=SEED):
  """`count` envs, each reset and stepped a few random actions in."""
  rng = np.random.RandomState(seed)
  envs, observations = [], []
  for i in range(count):
    env = make_env(protocol)
    observation, _ = env.reset(seed=seed + i)
    for action in rng.randint(0, env.action_space.n, warmup):
      observation, _, _, _, _ = env.step(int(action))
    envs.append(env)
    observations.append(observation)
  return envs, np.stack(observations)


def play(env, actions):
  """Steps a real env through primitive actions [T, c] the way the oracle
  does (stop at the episode's end): rewards [T], frames [T, H, W, C]."""
  rewards, frames, done, frame = [], [], False, None
  for chunk in actions:
    total = 0.0
    for action in chunk:
      if done:
        break
      frame, reward, terminated, truncated, _ = env.step(int(action))
      total += reward
      done = terminated or truncated
    rewards.append(total)
    frames.append(frame)
  return np.array(rewards, np.float32), np.stack(frames)


def random_actions(batch, steps, jump, seed=0, num_actions=NUM_ACTIONS):
  rng = np.random.RandomState(seed)
  return rng.randint(0, num_actions, (batch, steps, jump)).astype(np.int32)


# -- Exactness ---------------------------------------------------------------


def test_rollout_equals_the_real_environment_from_the_same_snapshot():
  model = make_oracle()
  envs, _ = started_envs()
  state = model.initial_state_from_envs(envs)
  actions = random_actions(2, 12, 1)
  rollout = model.rollout(state, actions, render=True)
  for i, env in enumerate(envs):  # The agent's envs continue the same way.
    rewards, frames = play(env, actions[i])
    np.testing.assert_array_equal(rollout.rewards[i].numpy(), rewards)
    np.testing.assert_array_equal(
        np.round(rollout.frames[i].numpy() * 255).astype(np.uint8), frames)
  assert rollout.rewards.numpy().sum() > 0  # Pac-Man ate something.
  assert rollout.features.shape == (2, 12, 2, 3, 64 * 3)


def test_step_by_step_equals_rollout_and_features_are_the_frames():
  model = make_oracle()
  envs, _ = started_envs()
  state = model.initial_state_from_envs(envs)
  actions = random_actions(2, 5, 1, seed=1)
  rollout = model.rollout(state, actions, render=True)
  for t in range(5):
    state, out = model.step(state, actions[:, t])
    np.testing.assert_array_equal(out.reward.numpy(),
                                  rollout.rewards[:, t].numpy())
    np.testing.assert_array_equal(out.features.numpy(),
                                  rollout.features[:, t].numpy())
    frames = model.render(state)
    np.testing.assert_array_equal(frames.numpy(), rollout.frames[:, t].numpy())
    np.testing.assert_array_equal(
        out.features.numpy(), tf.nn.space_to_depth(frames, 8).numpy())


def test_initial_state_renders_the_frame_the_agent_sees():
  model = make_oracle()
  envs, observations = started_envs()
  state = model.initial_state_from_envs(envs)
  np.testing.assert_array_equal(
      np.round(model.render(state).numpy() * 255).astype(np.uint8),
      observations)
  assert not state.done.numpy().any()


def test_jumpy_step_equals_three_primitive_steps():
  jumpy, primitive = make_oracle(jump=3), make_oracle(jump=1)
  envs, _ = started_envs()
  actions = random_actions(2, 4, 3, seed=2)  # [B, T, c]
  jumpy_rollout = jumpy.rollout(jumpy.initial_state_from_envs(envs), actions,
                                render=True)
  flat = primitive.rollout(primitive.initial_state_from_envs(envs),
                           actions.reshape(2, 12, 1), render=True)
  np.testing.assert_array_equal(
      jumpy_rollout.rewards.numpy(),
      flat.rewards.numpy().reshape(2, 4, 3).sum(-1))
  np.testing.assert_array_equal(jumpy_rollout.frames.numpy(),
                                flat.frames.numpy()[:, 2::3])
  # And equal to the real env under i2a's JumpyWrapper.
  jumpy_env = make_env(MINIPACMAN, jump=3)
  jumpy_env.reset(seed=11)
  jumpy_env.unwrapped.restore_state(envs[0].unwrapped.clone_state())
  for t in range(4):
    frame, reward, _, _, _ = jumpy_env.step(actions[0, t])
    assert reward == jumpy_rollout.rewards[0, t].numpy()
    np.testing.assert_array_equal(
        np.round(jumpy_rollout.frames[0, t].numpy() * 255), frame)


def test_episode_end_stops_the_jump_and_is_absorbing():
  protocol = preset("minipacman", max_episode_frames=5)  # FrameCap truncates
  model = make_oracle(protocol, jump=2)
  envs, _ = started_envs(protocol, count=1, warmup=0)
  state = model.initial_state_from_envs(envs)
  actions = random_actions(1, 4, 2, seed=4)
  rollout = model.rollout(state, actions, render=True)
  rewards, frames = play(envs[0], actions[0])  # steps 1, 2 then 1 of 2
  np.testing.assert_array_equal(rollout.rewards[0].numpy(), rewards)
  assert rewards[3] == 0.0
  np.testing.assert_array_equal(rollout.frames[0, 3].numpy(),
                                rollout.frames[0, 2].numpy())
  dones = []
  for t in range(4):
    state, out = model.step(state, actions[:, t])
    dones.append(bool(state.done.numpy()[0]))
    assert out.reward.numpy()[0] == rewards[t]
  assert dones == [False, False, True, True]


def test_vector_env_is_snapshotted_through_its_envs():
  model = make_oracle()
  vector_env = make_vector_env(MINIPACMAN, 2)
  observations, _ = vector_env.reset(seed=SEED)
  state = model.initial_state_from_envs(vector_env)
  np.testing.assert_array_equal(
      np.round(model.render(state).numpy() * 255).astype(np.uint8),
      observations)
  actions = random_actions(2, 3, 1, seed=5)
  rollout = model.rollout(state, actions)
  for t in range(3):
    _, rewards, _, _, _ = vector_env.step(actions[:, t, 0])
    np.testing.assert_array_equal(rollout.rewards[:, t].numpy(), rewards)


def test_mspacman_with_sticky_actions_is_replayed_exactly():
  protocol = preset("small")  # 104x80, sticky actions 0.25, paper actions
  model = make_oracle(protocol, jump=2)
  envs, _ = started_envs(protocol, count=1, warmup=60)
  state = model.initial_state_from_envs(envs)
  actions = random_actions(1, 10, 2, seed=6)
  rollout = model.rollout(state, actions, render=True)
  state, out = model.step(state, actions[:, 0])
  assert out.reward.numpy()[0] == rollout.rewards[0, 0].numpy()
  rewards, frames = play(envs[0], actions[0])
  np.testing.assert_array_equal(rollout.rewards[0].numpy(), rewards)
  np.testing.assert_array_equal(
      np.round(rollout.frames[0].numpy() * 255).astype(np.uint8), frames)
  assert rewards.sum() > 0


# -- The agent's environments are left alone ------------------------------


def test_oracle_queries_do_not_disturb_the_agents_env():
  queried, _ = started_envs(count=1)
  untouched, _ = started_envs(count=1)
  model = make_oracle()
  state = model.initial_state_from_envs(queried)
  model.rollout(state, random_actions(1, 20, 1, seed=7))
  for t in range(5):
    state, _ = model.step(state, random_actions(1, 1, 1, seed=t)[:, 0])
  actions = random_actions(1, 10, 1, seed=8)[0]
  for (r1, f1), (r2, f2) in zip(zip(*play(queried[0], actions)),
                                zip(*play(untouched[0], actions))):
    assert r1 == r2
    np.testing.assert_array_equal(f1, f2)


# -- tf.function, actions, memory --------------------------------------------


def test_step_render_and_rollout_work_in_tf_function():
  model = make_oracle()
  envs, _ = started_envs()
  state = model.initial_state_from_envs(envs)
  actions = random_actions(2, 3, 1, seed=9)
  expected = model.rollout(state, actions, render=True)
  signature = oracle_lib().OracleState(
      handle=tf.TensorSpec([None], tf.int64), done=tf.TensorSpec([None],
                                                                 tf.bool))

  @tf.function(input_signature=[signature,
                                 tf.TensorSpec([None, 3, 1], tf.int32)])
  def imagine(state, actions):
    rewards, frames = [], []
    for t in range(3):
      state, out = model.step(state, actions[:, t])
      assert out.features.shape.as_list() == [None, 2, 3, 192]
      rewards.append(out.reward)
      frames.append(model.render(state))
    model.release(state)
    return tf.stack(rewards, 1), tf.stack(frames, 1)

  size = model.store_size
  rewards, frames = imagine(state, actions)
  assert model.store_size == size + 4  # 3 steps x 2 made, the last 2 freed
  np.testing.assert_array_equal(rewards.numpy(), expected.rewards.numpy())
  np.testing.assert_array_equal(frames.numpy(), expected.frames.numpy())
  traced = tf.function(lambda s, a: model.rollout(s, a, render=True))
  got = traced(state, actions)
  np.testing.assert_array_equal(got.rewards.numpy(), expected.rewards.numpy())
  np.testing.assert_array_equal(got.features.numpy(),
                                expected.features.numpy())


def test_relaxed_actions_take_the_argmax_or_a_sample_without_gradients():
  envs, _ = started_envs()
  model = make_oracle()
  state = model.initial_state_from_envs(envs)
  actions = random_actions(2, 4, 1, seed=10)
  expected = model.rollout(state, actions)
  relaxed = tf.Variable(0.1 + 0.5 * tf.one_hot(actions, NUM_ACTIONS))
  with tf.GradientTape() as tape:
    rollout = model.rollout(state, relaxed)
    total = tf.reduce_sum(rollout.rewards) + tf.reduce_sum(rollout.features)
  assert tape.gradient(total, relaxed) is None
  assert not model.uses_actions
  np.testing.assert_array_equal(rollout.rewards.numpy(),
                                expected.rewards.numpy())
  sampler = make_oracle(relaxed_actions="sample")
  sampled_state = sampler.initial_state_from_envs(envs)
  one_hot = tf.one_hot(actions, NUM_ACTIONS)  # samples = the actions
  np.testing.assert_array_equal(
      sampler.rollout(sampled_state, one_hot).rewards.numpy(),
      expected.rewards.numpy())


def test_handles_are_released_and_the_store_is_bounded():
  model = make_oracle(capacity=16)
  envs, _ = started_envs()
  state = model.initial_state_from_envs(envs)
  first = state
  for t in range(30):  # 60 snapshots made, at most 16 kept.
    state, _ = model.step(state, random_actions(2, 1, 1, seed=t)[:, 0])
    assert model.store_size <= 16
  with pytest.raises(ValueError, match="released, or evicted"):
    model.step(first, np.zeros([2], np.int32))
  model.rollout(state, random_actions(2, 5, 1))  # stores nothing
  size = model.store_size
  model.release(state)
  assert model.store_size == size - 2
  with pytest.raises(ValueError, match="unknown"):
    model.render(state)


# -- What the oracle refuses -------------------------------------------------


def test_bad_action_shapes_and_values_raise_value_error():
  model = make_oracle(jump=3)
  state = model.initial_state_from_envs(started_envs()[0])
  with pytest.raises(ValueError, match="expected shape"):
    model.step(state, np.zeros([2, 2], np.int32))
  with pytest.raises(ValueError, match="expected shape"):
    model.step(state, np.zeros([2, 3, 4], np.float32))
  with pytest.raises(ValueError, match="out-of-range"):
    model.step(state, np.full([2, 3], NUM_ACTIONS, np.int32))
  with pytest.raises(ValueError, match="OracleState"):
    model.step({"handle": state.handle}, np.zeros([2, 3], np.int32))
  # The API's value checks (envmodels/base.py) cover the oracle too.
  with pytest.raises(ValueError, match="rows off 1 by up to 1"):
    model.step(state, np.zeros([2, 3, NUM_ACTIONS], np.float32))
  with pytest.raises(ValueError, match="expected T >= 1 steps"):
    model.rollout(state, np.zeros([2, 0, 3], np.int32))
  with pytest.raises(ValueError, match=r"in \[0, 5\).*min -1"):
    model.rollout(state, np.full([2, 1, 3], -1, np.int32))


def test_initial_state_from_observations_raises_a_clear_error():
  model = make_oracle()
  with pytest.raises(ValueError, match="initial_state_from_envs"):
    model.initial_state(np.zeros((2, 1, 16, 24, 3), np.uint8))


def test_loss_and_export_raise_clear_errors(tmp_path):
  model = make_oracle()
  with pytest.raises(ValueError, match="cannot be trained"):
    model.loss({})
  with pytest.raises(envmodels.ExportError, match="cannot be exported"):
    envmodels.export(model, str(tmp_path / "oracle"))
  assert not (tmp_path / "oracle").exists()
  assert not model.trainable_variables  # (only its generator's state)


def test_registry_knows_the_oracle_but_build_needs_env_fn():
  assert registry.model_class("oracle") is oracle_lib().OracleModel
  assert not oracle_lib().OracleModel.learned
  probe = make_env(MINIPACMAN)
  spec = oracle_lib().spec_for_env(probe)
  with pytest.raises(ValueError, match="needs env_fn"):
    registry.build(spec)
  with pytest.raises(ValueError, match="kind 'oracle'"):
    oracle_lib().OracleModel(
        dataclasses.replace(spec, kind="sssm"),
        env_fn=functools.partial(make_env, MINIPACMAN))
  with pytest.raises(ValueError, match="observations"):
    oracle_lib().OracleModel(
        dataclasses.replace(spec, observation_shape=(16, 16, 3)),
        env_fn=functools.partial(make_env, MINIPACMAN))
  with pytest.raises(ValueError, match="primitive-action"):
    oracle_lib().OracleModel(
        spec, env_fn=functools.partial(make_env, MINIPACMAN, jump=2))


@pytest.mark.parametrize("jump", [1, 2])
def test_the_oracle_is_a_live_env_model_meeting_the_agent_contract(jump):
  """The conformance suite's agent-facing checks (state_features,
  tile_state, the determinism claim) on the oracle, which the suite's
  kind list leaves out (it cannot start from frames)."""
  from tests.envmodels.test_conformance import check_agent_contract  # pylint: disable=g-import-not-at-top
  model = make_oracle(jump=jump)
  assert isinstance(model, envmodels.LiveEnvModel)
  assert model.deterministic and not model.learned
  envs, observations = started_envs()
  state = model.initial_state_from_envs(envs, observations=observations)
  # Features of s_t|t: space_to_depth(8) of the frames the agent sees.
  np.testing.assert_array_equal(
      model.state_features(state).numpy(),
      tf.nn.space_to_depth(observations.astype(np.float32) / 255.0,
                           8).numpy())
  check_agent_contract(model, state, random_actions(2, 1, jump)[:, 0])
  model.release(state)
