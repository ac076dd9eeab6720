"""The I2A with the emulator oracle through the training runtime: its
rollouts are side inputs (agents/base.py) that the actor computes from
snapshots of its live environments, stores with every unroll window and the
learner reads back. Tiny networks on MiniPacman-avoid (16x24x3 frames)."""

import copy
import os

import numpy as np
import pytest
import tensorflow as tf

from agents import builder
from agents.acting import Actor, random_generators, unroll_signature
from agents.imagination import networks
from configs.agents import i2a as i2a_config
from i2a import environments, runs
from i2a.run import evaluate as evaluation
from i2a.run import train as training

FRAME = (16, 24, 3)
NUM_ACTIONS = 5


def _config(**network):
  config = i2a_config.get_config("tiny")  # MiniPacman-avoid, jump 1
  config.network.update(dict(model="oracle", **network))
  return config


def _network(config):
  network = networks.make_network(config, NUM_ACTIONS, FRAME)
  builder.create_variables(network, FRAME)
  return network


def _envs(config, count, seed=0):
  protocol = runs.protocol_from_config(config)
  envs = [environments.make_env(protocol) for _ in range(count)]
  frames = np.stack([env.reset(seed=seed + i)[0]
                     for i, env in enumerate(envs)])
  windows = np.repeat(frames[:, None], config.context_length, axis=1)
  return envs, windows  # windows uint8 [B, k, H, W, C]


def test_oracle_side_inputs_are_each_environments_true_future():
  config = _config(rollout_policy="random", depth=2)
  network = _network(config)
  spec = network.side_input_spec()
  assert spec["imagined_frames"].shape == [NUM_ACTIONS, 2, *FRAME]
  assert spec["imagined_rewards"].shape == [NUM_ACTIONS, 2]
  envs, _ = _envs(config, 2)
  frames = []
  for env in envs:  # some steps in, so the ghost and pills have moved
    for action in (1, 1, 3):
      frame, *_ = env.step(action)
    frames.append(frame)
  windows = np.repeat(np.stack(frames)[:, None], config.context_length,
                      axis=1)
  before = [copy.deepcopy(env) for env in envs]
  side = network.side_inputs(windows, envs)
  assert side["imagined_frames"].shape == (2, NUM_ACTIONS, 2, *FRAME)
  assert side["imagined_frames"].dtype == np.uint8
  for b, env in enumerate(envs):
    for k in range(NUM_ACTIONS):  # rollout k's first action is k
      twin = copy.deepcopy(before[b])
      frame, reward, *_ = twin.step(k)
      np.testing.assert_array_equal(side["imagined_frames"][b, k, 0], frame)
      assert side["imagined_rewards"][b, k, 0] == pytest.approx(reward)
    # The live environment was only read: it continues as its copy does.
    frame, reward, *_ = env.step(2)
    twin_frame, twin_reward, *_ = copy.deepcopy(before[b]).step(2)
    np.testing.assert_array_equal(frame, twin_frame)
    assert reward == twin_reward
  assert network.model.store_size == 0  # every snapshot was released


def test_stored_rollouts_give_the_outputs_of_querying_the_oracle_directly():
  config = _config(rollout_policy="distillation", depth=1)  # no sampling
  network = _network(config)
  envs, windows = _envs(config, 3, seed=5)
  side = network.side_inputs(windows, envs)
  state = network.model.initial_state_from_envs(envs,
                                                observations=windows[:, -1])
  direct = network(tf.constant(windows), model_state=state)
  network.model.release(state)
  stored = network(tf.constant(windows),
                   {k: tf.constant(v) for k, v in side.items()})
  np.testing.assert_allclose(stored.policy_logits, direct.policy_logits,
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(stored.value, direct.value, rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(
      stored.extras["rollout_policy_logits"],
      direct.extras["rollout_policy_logits"], rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match=r"imagined_frames: expected \[B, 5, 1"):
    network(tf.constant(windows),
            {"imagined_frames": tf.zeros([3, 5, 2, *FRAME], tf.uint8),
             "imagined_rewards": tf.zeros([3, 5, 1])})


def test_the_actor_stores_the_rollouts_of_every_window_with_the_unroll():
  config = _config()
  network = _network(config)
  protocol = runs.protocol_from_config(config)
  actor = Actor(network, environments.make_vector_env(protocol, 2),
                unroll_length=3, seed=0)
  first, _ = actor.unroll()
  second, _ = actor.unroll()
  tau = config.network.depth
  assert first["imagined_frames"].shape == (2, 4, NUM_ACTIONS, tau, *FRAME)
  assert first["imagined_rewards"].shape == (2, 4, NUM_ACTIONS, tau)
  signature = unroll_signature(3, config.context_length, FRAME, NUM_ACTIONS,
                               network.side_input_spec())
  for name, spec in signature.items():
    assert first[name].shape[1:] == tuple(spec.shape), name
  # The boundary window is shared, its rollouts too (computed once).
  for name in ("observation", "imagined_frames", "imagined_rewards"):
    np.testing.assert_array_equal(second[name][:, 0], first[name][:, -1])
  assert first["imagined_frames"].any()  # frames, not zeros
  actor.close()
  with pytest.raises(ValueError, match="may not reuse the unroll fields"):
    unroll_signature(3, 3, FRAME, NUM_ACTIONS,
                     {"reward": tf.TensorSpec([1], tf.float32)})


def test_the_learner_cannot_recompute_the_oracles_rollouts():
  with pytest.raises(ValueError, match="no environment snapshots"):
    networks.make_network(_config(learner_rollouts="recompute"),
                          NUM_ACTIONS, FRAME)


def test_an_export_given_with_the_oracle_is_refused():
  config = _config()
  config.envmodel = "/runs/dssm_det/export"
  with pytest.raises(ValueError, match="drop --config.envmodel"):
    networks.make_network(config, NUM_ACTIONS, FRAME)


def test_the_oracle_i2a_trains_resumes_and_evaluates_through_the_runtime(
    tmp_path):
  config = _config()
  workdir = str(tmp_path / "run")
  summary = training.run(config, workdir)
  assert summary["learner_steps"] == 6 and summary["env_steps"] == 36
  config.env_steps = 48  # resume for two more updates
  assert training.run(config, workdir)["learner_steps"] == 8
  scores = evaluation.evaluate(workdir, episodes=2)
  assert len(scores["returns"]) == 2
  assert np.all(np.isfinite(scores["returns"]))
  # Its imagination at step 0 (tiny episodes end before step 25).
  assert [(p["step"], os.path.basename(p["png"]))
          for p in scores["imagination"]] == [
              (0, "imagination_step0000.png")]
  assert os.path.getsize(scores["imagination"][0]["png"]) > 0


def test_the_oracles_pictured_imagination_is_what_it_stores():
  config = _config(rollout_policy="random", depth=2)
  network = _network(config)
  envs, windows = _envs(config, 2)
  for env in envs:
    env.step(1)
  state = [copy.deepcopy(env) for env in envs]
  generators = random_generators(network)  # pi_r's, drawn at depth 2
  before = [g.state.numpy() for g in generators]
  stored = network.side_inputs(windows, state)
  for generator, value in zip(generators, before):
    generator.state.assign(value)
  pictured = network.imagined_frames(windows, envs)
  assert pictured["frames"].shape == (2, NUM_ACTIONS, 2, *FRAME)
  np.testing.assert_array_equal(
      pictured["frames"], stored["imagined_frames"] / np.float32(255))
  np.testing.assert_array_equal(pictured["rewards"],
                                stored["imagined_rewards"])
  np.testing.assert_array_equal(pictured["first_actions"],
                                np.arange(NUM_ACTIONS))
  with pytest.raises(ValueError, match="pass one per window, given 1 for 2"):
    network.imagined_frames(windows, envs[:1])
