"""A2C network, the network registry, the actor, the learner and weights.

The actor runs on tests/fakes.CountingEnv, whose frames say which step of
which episode they show (channel 0: step, channel 1: episode), so episode
boundaries in unrolls can be checked exactly.
"""

import functools

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from agents import builder, learning
from agents.a2c import networks
from agents.acting import Actor, FrameWindows, sample_actions, \
    unroll_signature
from agents.base import ActorCriticNetwork
from agents.variables import VariableClient, VariablePublisher
from agents import variables as variables_lib
from configs.agents import a2c as a2c_config
from i2a.replay import tables
from tests import fakes

SHAPE = (16, 16, 3)
NUM_ACTIONS = 3


def _network(context_length=3, seed=0):
  tf.random.set_seed(seed)
  network = networks.A2CNetwork(NUM_ACTIONS, context_length,
                                conv_channels=(4,), conv_kernels=(3,),
                                conv_strides=(2,), hidden=8)
  builder.create_variables(network, SHAPE)
  return network


def _make_env(time_limit, kwargs):
  env = fakes.CountingEnv(shape=SHAPE, num_actions=NUM_ACTIONS, **kwargs)
  return gym.wrappers.TimeLimit(env, time_limit) if time_limit else env


def _vector_env(num_envs, time_limit=None, **kwargs):
  make = functools.partial(_make_env, time_limit, kwargs)  # picklable
  return gym.vector.SyncVectorEnv(
      [make for _ in range(num_envs)],
      autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


@pytest.fixture
def server():
  network = _network()
  server = tables.start_server([
      tables.unrolls_table(unroll_signature(4, 3, SHAPE, NUM_ACTIONS), 32),
      tables.variables_table(
          variables_lib.signature(network.learnable_variables))])
  yield server
  server.stop()


# -- Network and registry ------------------------------------------------------

def test_network_outputs_logits_and_values_for_a_batch_of_windows():
  network = _network(context_length=3)
  out = network(np.zeros([5, 3, *SHAPE], np.uint8))
  assert out.policy_logits.shape == (5, NUM_ACTIONS)
  assert out.value.shape == (5,)
  with pytest.raises(ValueError, match=r"expected 3 frames per window"):
    network(np.zeros([5, 2, *SHAPE], np.uint8))


def test_frames_are_concatenated_on_channels_oldest_first():
  windows = np.zeros([1, 2, 2, 2, 3], np.uint8)
  windows[0, 0] = 255  # the oldest frame
  frames = networks.frames_on_channels(windows).numpy()
  assert frames.shape == (1, 2, 2, 6)
  np.testing.assert_array_equal(frames[0, 0, 0], [1, 1, 1, 0, 0, 0])


def test_every_preset_builds_through_the_registry():
  for preset, shape in [("tiny", (16, 24, 3)), ("minipacman", (16, 24, 3)),
                        ("small", (104, 80, 3)), ("paper", (200, 160, 3))]:
    config = a2c_config.get_config(preset)
    network = builder.build_network(config, 5, shape)
    builder.create_variables(network, shape)
    out = network(np.zeros([2, config.context_length, *shape], np.uint8))
    assert out.policy_logits.shape == (2, 5), preset


def test_registry_builds_registered_factories_and_refuses_unknown_names():
  config = a2c_config.get_config("tiny")
  received = {}

  def model_based(config, num_actions, observation_shape, envmodel=None):
    received["envmodel"] = envmodel
    return networks.make_network(config, num_actions, observation_shape)

  builder.register_network("test_model_based", model_based, overwrite=True)
  assert "a2c" in builder.network_names()
  assert "test_model_based" in builder.network_names()
  config.agent = "test_model_based"
  sentinel = object()
  network = builder.build_network(config, 5, (16, 24, 3), envmodel=sentinel)
  assert isinstance(network, ActorCriticNetwork)
  assert received["envmodel"] is sentinel
  with pytest.raises(ValueError, match="already registered"):
    builder.register_network("test_model_based", networks.make_network)
  config.agent = "nope"
  with pytest.raises(ValueError, match=r"unknown agent network 'nope'.*a2c"):
    builder.build_network(config, 5, (16, 24, 3))
  config.agent, config.envmodel = "a2c", "/some/export"
  with pytest.raises(ValueError, match="model-free.*--config.envmodel"):
    builder.build_network(config, 5, (16, 24, 3))


# -- Acting ----------------------------------------------------------------------

def test_frame_windows_start_filled_with_the_first_frame_and_slide():
  first = np.arange(2)[:, None, None, None] * np.ones([2, *SHAPE], np.uint8)
  windows = FrameWindows(first.astype(np.uint8), (2, 1, 0))
  assert windows.frames.shape == (2, 3, *SHAPE)
  assert (windows.frames[1] == 1).all()
  windows.push(np.full([2, *SHAPE], 7, np.uint8), np.array([False, True]))
  assert [int(f[0, 0, 0]) for f in windows.frames[0]] == [0, 0, 7]
  assert [int(f[0, 0, 0]) for f in windows.frames[1]] == [7, 7, 7]


def test_sampled_actions_follow_the_policy():
  rng = np.random.default_rng(0)
  logits = np.log(np.array([[0.7, 0.2, 0.1]] * 20000))
  actions = sample_actions(logits, rng)
  np.testing.assert_allclose(np.bincount(actions, minlength=3) / 20000,
                             [0.7, 0.2, 0.1], atol=0.015)
  assert (sample_actions(logits[:3], rng, greedy=True) == 0).all()


def _check_windows(observations):
  """Every window holds one episode's consecutive steps (first repeated)."""
  for window in observations.reshape(-1, *observations.shape[-4:]):
    steps, episodes = window[:, 0, 0, 0], window[:, 0, 0, 1]
    assert len(set(episodes.tolist())) == 1, episodes
    diffs = np.diff(steps.astype(int))
    assert set(diffs.tolist()) <= {0, 1}, steps
    # Repeats only at the start of an episode (padding with its first frame).
    if 0 in diffs.tolist():
      assert steps[0] == 0 and (diffs[:np.argmax(diffs)] == 0).all(), steps


def test_actor_unrolls_have_the_signature_and_never_mix_episodes(server):
  client = server.localhost_client()
  actor = Actor(_network(), _vector_env(3, min_length=2, max_length=4),
                unroll_length=4, seed=0, client=client)
  signature = unroll_signature(4, 3, SHAPE, NUM_ACTIONS)
  batches, episodes = [], []
  for _ in range(5):
    batch, finished = actor.unroll()
    batches.append(batch)
    episodes += finished
    for key, spec in signature.items():
      assert batch[key].shape == (3, *spec.shape), key
      assert batch[key].dtype == spec.dtype.as_numpy_dtype, key
    observations = batch["observation"]
    _check_windows(observations)
    newest = observations[:, :, -1, 0, 0]  # [N, n + 1, (step, episode, _)]
    for i in range(3):
      for t in range(4):
        step_after = int(newest[i, t + 1, 0])
        # CountingEnv's reward is the index of the step it leads to; an
        # episode that ends shows the next one's first frame (step 0).
        ended = step_after == 0
        assert batch["discount"][i, t] == (0.0 if ended else 1.0)
        if not ended:
          assert batch["reward"][i, t] == step_after
          assert newest[i, t + 1, 1] == newest[i, t, 1]
        else:
          assert newest[i, t + 1, 1] == newest[i, t, 1] + 1
  # Consecutive unrolls share their boundary window.
  for before, after in zip(batches, batches[1:]):
    np.testing.assert_array_equal(before["observation"][:, -1],
                                  after["observation"][:, 0])
  assert episodes and all(2 <= e.length <= 4 and e.terminated
                          for e in episodes)
  assert all(e.episode_return == sum(range(1, e.length + 1))
             for e in episodes)
  assert actor.env_steps == 5 * 4 * 3
  # What went into Reverb is what the actor returned, in order.
  dataset = learning.unroll_dataset(f"localhost:{server.port}", 3,
                                    timeout_ms=2000)
  for batch, read in zip(batches, dataset.take(5)):
    for key in signature:
      np.testing.assert_array_equal(read[key].numpy(), batch[key])
  actor.close()


def test_truncated_episodes_keep_discount_one_and_restart_windows():
  actor = Actor(_network(), _vector_env(2, time_limit=3, min_length=50,
                                        max_length=60),
                unroll_length=4, seed=0)
  batch, finished = actor.unroll()
  assert [e.terminated for e in finished] == [False, False]
  assert [e.length for e in finished] == [3, 3]
  np.testing.assert_array_equal(batch["discount"], 1.0)
  _check_windows(batch["observation"])
  # The window after the truncation is the new episode's first frame.
  assert (batch["observation"][:, 3, :, 0, 0, 0] == 0).all()
  actor.close()


def test_actor_state_round_trip_continues_identically():
  def make():
    return Actor(_network(), _vector_env(2, min_length=2, max_length=9),
                 unroll_length=3, seed=5)
  actor = make()
  actor.unroll()
  state = actor.get_state()
  expected = [actor.unroll()[0] for _ in range(3)]
  other = make()
  other.set_state(state)
  for want in expected:
    got = other.unroll()[0]
    for key in want:
      np.testing.assert_array_equal(got[key], want[key])


# -- Learning and weights ----------------------------------------------------------

def test_learner_step_changes_weights_publishes_them_and_the_actor_pulls(
    server):
  client = server.localhost_client()
  learner_network = _network(seed=1)
  actor_network = _network(seed=2)
  learner = learning.Learner(
      learner_network,
      learning.unroll_dataset(f"localhost:{server.port}", 2, timeout_ms=5000),
      learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99, value_coef=0.5,
      entropy_coef=0.01, clip_norm=0.5,
      publisher=VariablePublisher(client, learner_network.learnable_variables))
  actor = Actor(actor_network, _vector_env(2), unroll_length=4, seed=0,
                client=client,
                variable_client=VariableClient(
                    client, actor_network.learnable_variables))
  learner.publish()  # step 0
  actor.unroll()  # pulls the step-0 weights before acting
  for mine, theirs in zip(actor_network.learnable_variables,
                          learner_network.learnable_variables):
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
  before = [v.numpy() for v in learner_network.learnable_variables]
  metrics = learner.step()
  assert int(learner.learner_step.numpy()) == 1
  for key in ("loss", "policy_loss", "value_loss", "entropy", "value_error",
              "gradient_norm", "behaviour_kl"):
    assert np.isfinite(metrics[key]), key
  assert metrics["behaviour_kl"] == pytest.approx(0.0, abs=1e-5)  # on-policy
  after = [v.numpy() for v in learner_network.learnable_variables]
  assert any(not np.array_equal(a, b) for a, b in zip(before, after))
  sample = next(client.sample(tables.VARIABLES, emit_timesteps=False))
  step, values = variables_lib.unflatten(sample.data,
                                         learner_network.learnable_variables)
  assert step == 1
  for value, variable in zip(values, after):
    np.testing.assert_array_equal(value, variable)
  assert actor._variable_client.update()  # pylint: disable=protected-access
  assert not actor._variable_client.update()  # nothing newer
  for mine, theirs in zip(actor_network.learnable_variables, after):
    np.testing.assert_array_equal(mine.numpy(), theirs)
  actor.close()


def test_an_actor_with_another_architecture_is_refused(server):
  client = server.localhost_client()
  VariablePublisher(client, _network().learnable_variables).publish(0)
  other = networks.A2CNetwork(NUM_ACTIONS, 3, conv_channels=(4,),
                              conv_kernels=(3,), conv_strides=(2,), hidden=16)
  builder.create_variables(other, SHAPE)
  with pytest.raises(ValueError, match="does not match the learner"):
    VariableClient(client, other.learnable_variables).update()


def _fixed_batch(rewards):
  """One batch of 2 unrolls (n = 3) with the given rewards [2, 3]."""
  rng = np.random.RandomState(0)
  return {
      "observation": rng.randint(0, 256, (2, 4, 3, *SHAPE)).astype(np.uint8),
      "action": rng.randint(0, NUM_ACTIONS, (2, 3)).astype(np.int32),
      "reward": np.asarray(rewards, np.float32),
      "discount": np.ones([2, 3], np.float32),
      "behaviour_logits": np.zeros([2, 3, NUM_ACTIONS], np.float32),
  }


def _one_update(rewards, **kwargs):
  network = _network(seed=3)
  learner = learning.Learner(
      network, tf.data.Dataset.from_tensors(_fixed_batch(rewards)).repeat(),
      learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99, value_coef=0.5,
      entropy_coef=0.01, clip_norm=0.5, **kwargs)
  metrics = learner.step()
  return metrics, [v.numpy() for v in network.learnable_variables]


def test_the_learner_trains_on_sign_clipped_rewards_by_default():
  points = [[0.0, 10.0, 1600.0], [-200.0, 0.0, 50.0]]  # game points
  signs = np.sign(points)
  clipped, clipped_weights = _one_update(points)
  reference, reference_weights = _one_update(signs, reward_clipping="none")
  assert clipped["loss"] == reference["loss"]
  for a, b in zip(clipped_weights, reference_weights):
    np.testing.assert_array_equal(a, b)
  raw, _ = _one_update(points, reward_clipping="none")
  assert raw["value_loss"] > 100 * clipped["value_loss"]
  with pytest.raises(ValueError, match=r"reward_clipping must be one of"):
    _one_update(points, reward_clipping="clip")


def test_agent_presets_clip_atari_rewards_and_keep_minipacmans():
  for preset in ("small", "paper"):
    assert a2c_config.get_config(preset).loss.reward_clipping == "sign"
  for preset in ("tiny", "minipacman"):
    assert a2c_config.get_config(preset).loss.reward_clipping == "none"


def test_a2c_is_the_i2a_minus_its_model_path():
  from configs.agents import i2a as i2a_config  # pylint: disable=import-outside-toplevel
  for preset in ("tiny", "minipacman", "small", "paper"):
    a2c, i2a = (a2c_config.get_config(preset).network,
                i2a_config.get_config(preset).network)
    for key in a2c:
      assert i2a[key] == a2c[key], (preset, key)
  network = builder.build_network(a2c_config.get_config("tiny"), 5,
                                  (16, 24, 3))
  builder.create_variables(network, (16, 24, 3))
  names = [v.name for v in network.trainable_variables]
  assert any("head_hidden" in name for name in names)
  kernel = [v for v in network.trainable_variables
            if "head_hidden" in v.name and "w:" in v.name][0]
  assert kernel.shape == (32, 16)  # hidden -> head_hidden (tiny preset)


def test_non_finite_updates_are_skipped_and_stop_the_learner_in_a_row():
  network = _network(seed=3)
  batch = _fixed_batch([[0.0, 1e5, 0.0], [1e5, 0.0, 0.0]])  # valid unrolls
  learner = learning.Learner(  # whose value loss overflows float32
      network, tf.data.Dataset.from_tensors(batch).repeat(),
      learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99, value_coef=1e30,
      entropy_coef=0.01, clip_norm=0.5, reward_clipping="none",
      max_nonfinite_updates=3)
  before = [v.numpy() for v in network.learnable_variables]
  slots = [v.numpy() for v in learner.optimizer.variables]
  for expected_skips in (1, 2):
    metrics = learner.step()
    assert metrics["nonfinite_update"] == 1.0
    assert learner.skipped_updates == expected_skips
  for a, b in zip(before, network.learnable_variables):
    np.testing.assert_array_equal(a, b.numpy())  # nothing applied
  for a, b in zip(slots, learner.optimizer.variables):
    np.testing.assert_array_equal(a, b.numpy())  # nor the optimizer moved
  with pytest.raises(FloatingPointError,
                     match=r"3 learner updates in a row had a non-finite"):
    learner.step()


def test_a_good_update_resets_the_count_and_nan_weights_are_never_published(
    server):
  client = server.localhost_client()
  network = _network(seed=3)
  good = _fixed_batch([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  bad = _fixed_batch([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  bad["reward"][:] = np.inf  # dropped: no unroll left to learn from
  batches = tf.data.Dataset.from_tensor_slices(
      {k: np.stack([bad[k], good[k], bad[k]]) for k in good})
  learner = learning.Learner(
      network, batches, learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99,
      value_coef=0.5, entropy_coef=0.01, clip_norm=0.5,
      reward_clipping="none", max_nonfinite_updates=2,
      publisher=VariablePublisher(client, network.learnable_variables))
  assert [learner.step()["nonfinite_update"] for _ in range(3)] == [1, 0, 1]
  network.learnable_variables[0].assign(
      np.full(network.learnable_variables[0].shape, np.nan, np.float32))
  with pytest.raises(FloatingPointError, match="refusing to publish"):
    learner.publish()


def test_malformed_unrolls_are_dropped_and_counted_not_crashing_the_learner():
  network = _network(seed=3)
  good = _fixed_batch([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  forged = {k: v.copy() for k, v in good.items()}
  forged["action"][1, 0] = NUM_ACTIONS + 7  # out of range
  forged["discount"][0, 2] = 2.0  # not a discount
  learner = learning.Learner(
      network, tf.data.Dataset.from_tensor_slices(
          {k: np.stack([forged[k], good[k]]) for k in good}),
      learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99, value_coef=0.5,
      entropy_coef=0.01, clip_norm=0.5, reward_clipping="none")
  metrics = learner.step()  # both unrolls forged: nothing to learn from
  assert metrics["dropped_unrolls"] == 2 and metrics["nonfinite_update"] == 1
  metrics = learner.step()
  assert metrics["dropped_unrolls"] == 0 and metrics["nonfinite_update"] == 0
  assert learner.dropped_unrolls == 2
  mixed = {k: np.stack([good[k][0], forged[k][1]]) for k in good}
  valid = learning.valid_unrolls({k: tf.constant(v) for k, v in mixed.items()},
                                 NUM_ACTIONS).numpy()
  np.testing.assert_array_equal(valid, [True, False])
  huge = {k: v.copy() for k, v in good.items()}
  huge["reward"][0, 0] = 1e30
  huge["behaviour_logits"][1, 0, 0] = np.nan
  valid = learning.valid_unrolls({k: tf.constant(v) for k, v in huge.items()},
                                 NUM_ACTIONS).numpy()
  np.testing.assert_array_equal(valid, [False, False])
