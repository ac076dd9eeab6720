"""Protocol environments, the jumpy wrapper and vector envs."""

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from i2a import environments
from i2a.environments import Protocol, preset, wrappers

MSPACMAN = preset("small")
MINIPACMAN = preset("minipacman", env_id="MiniPacman-avoid-v0")


def _primitive_run(protocol, seed, actions):
  env = environments.make_env(protocol)
  env.reset(seed=seed)
  out = []
  for action in actions:
    obs, reward, terminated, truncated, _ = env.step(int(action))
    out.append((obs, reward, terminated, truncated))
    if terminated or truncated:
      break
  return out


@pytest.mark.parametrize("protocol", [MSPACMAN, MINIPACMAN],
                         ids=["mspacman", "minipacman"])
def test_jumpy_step_equals_c_primitive_steps(protocol):
  jump, num_chunks = 4, 12
  rng = np.random.default_rng(0)
  actions = rng.integers(0, 5, (num_chunks, jump))
  primitive = _primitive_run(protocol, 7, actions.ravel())
  env = environments.make_env(protocol, jump=jump)
  env.reset(seed=7)
  for k, chunk in enumerate(actions):
    obs, reward, terminated, truncated, info = env.step(chunk)
    steps = primitive[k * jump:(k + 1) * jump]
    assert info["primitive_steps"] == len(steps)
    np.testing.assert_array_equal(obs, steps[-1][0])
    assert reward == pytest.approx(sum(s[1] for s in steps))
    assert (terminated, truncated) == steps[-1][2:]
    if terminated or truncated:
      break


def test_jumpy_step_ends_early_when_the_episode_ends_inside_a_chunk():
  jump = 4
  rng = np.random.default_rng(1)
  for seed in range(50):  # MiniPacman's random agent dies within ~30 steps.
    actions = rng.integers(0, 5, (200, jump))
    primitive = _primitive_run(MINIPACMAN, seed, actions.ravel())
    if len(primitive) % jump:
      break
  else:
    pytest.fail("no episode ended inside a chunk")
  env = environments.make_env(MINIPACMAN, jump=jump)
  env.reset(seed=seed)
  for chunk in actions:
    obs, reward, terminated, truncated, info = env.step(chunk)
    if terminated or truncated:
      break
  assert info["primitive_steps"] == len(primitive) % jump
  np.testing.assert_array_equal(obs, primitive[-1][0])
  assert terminated == primitive[-1][2]
  tail = primitive[-(len(primitive) % jump):]
  assert reward == pytest.approx(sum(s[1] for s in tail))


def test_jumpy_action_index_and_array_are_the_same_action():
  num_actions, jump = 5, 3
  actions = np.array([4, 0, 2])
  index = environments.encode_jumpy_action(actions, num_actions)
  assert 0 <= index < num_actions**jump
  np.testing.assert_array_equal(
      environments.decode_jumpy_action(index, num_actions, jump), actions)
  a = environments.make_env(MINIPACMAN, jump=jump)
  b = environments.make_env(MINIPACMAN, jump=jump)
  a.reset(seed=3)
  b.reset(seed=3)
  np.testing.assert_array_equal(a.step(actions)[0], b.step(index)[0])


def test_observations_follow_the_protocol_shape():
  for protocol in (MSPACMAN, MINIPACMAN, preset("paper")):
    env = environments.make_env(protocol)
    obs, _ = env.reset(seed=0)
    assert obs.shape == protocol.observation_shape
    assert obs.dtype == np.uint8
    assert env.observation_space.shape == protocol.observation_shape


def test_paper_action_set_is_noop_up_right_left_down():
  env = environments.make_env(MSPACMAN)
  assert env.action_space.n == 5
  full = environments.make_env(preset("small", action_set="full"))
  assert full.action_space.n == 18


def test_wrapped_environments_pass_gymnasiums_env_checker():
  check_env(environments.make_env(MINIPACMAN), skip_render_check=True)
  check_env(environments.make_env(MSPACMAN), skip_render_check=True)


def test_vector_env_seeds_each_env_from_base_seed_plus_index():
  envs = environments.make_vector_env(MINIPACMAN, 3)
  batched, _ = envs.reset(seed=10)
  for i in range(3):
    single = environments.make_env(MINIPACMAN)
    obs, _ = single.reset(seed=10 + i)
    np.testing.assert_array_equal(batched[i], obs)


def test_protocol_round_trips_through_json(tmp_path):
  protocol = preset("small", noop_max=30, clip_rewards=True)
  protocol.save(str(tmp_path / "protocol.json"))
  assert Protocol.load(str(tmp_path / "protocol.json")) == protocol


def test_unknown_game_id_is_refused_with_examples():
  with pytest.raises(ValueError, match=r"unknown environment id 'ALE/Nope-v5'"
                     r".*ALE/MsPacman-v5"):
    environments.make_env(preset("small", env_id="ALE/Nope-v5"))


def test_observation_size_must_be_a_multiple_of_8():
  with pytest.raises(ValueError, match=r"multiples of 8.*\(100, 80\)"):
    preset("small", observation_size=(100, 80))


@pytest.mark.parametrize("protocol", [MSPACMAN, MINIPACMAN],
                         ids=["mspacman", "minipacman"])
def test_action_out_of_range_is_refused(protocol):
  env = environments.make_env(protocol)
  env.reset(seed=0)
  with pytest.raises(ValueError, match=r"action 7 is out of range.*\[0, 5\)"):
    env.step(7)
  jumpy = environments.make_env(protocol, jump=2)
  jumpy.reset(seed=0)
  with pytest.raises(ValueError, match=r"out of range \[0, 5\)"):
    jumpy.step(np.array([0, 9]))
  with pytest.raises(ValueError, match=r"expected \[0, 25\)"):
    jumpy.step(25)


def test_paper_action_set_is_refused_for_games_without_it():
  with pytest.raises(ValueError, match="action_set='minimal'"):
    environments.make_env(preset("small", env_id="ALE/Bowling-v5"))


def test_life_loss_terminal_reports_termination_and_resumes_the_game():
  protocol = preset("small", life_loss_terminal=True, sticky_action_prob=0.0)
  env = environments.make_env(protocol)
  env.reset(seed=0)
  ale = env.unwrapped.ale
  rng = np.random.default_rng(0)
  for _ in range(5000):
    lives = ale.lives()
    _, _, terminated, truncated, _ = env.step(int(rng.integers(5)))
    if terminated:
      break
  assert terminated and ale.lives() == lives - 1 and ale.lives() > 0
  env.reset()
  assert ale.lives() == lives - 1  # same game, one life fewer


def test_max_pooled_frame_is_the_max_of_the_last_two_emulator_frames():
  # Crop to 208 rows without resizing, so frames compare to the raw screen.
  fields = dict(crop=(0, 208, 0, 160), observation_size=(208, 160),
                action_set="minimal")
  pooled = environments.make_env(preset("small", max_pool_frames=True,
                                        **fields))
  plain = environments.make_env(preset("small", **fields))
  # The reference: the same game, one emulator frame per step, repeated by
  # hand (sticky actions are drawn per frame either way).
  reference = gym.make("ALE/MsPacman-v5", frameskip=1,
                       repeat_action_probability=0.25,
                       full_action_space=False,
                       max_num_frames_per_episode=108_000).unwrapped
  for env in (pooled, plain, reference):
    env.reset(seed=3)
  rng = np.random.default_rng(0)
  pooling_mattered = 0
  for _ in range(60):
    action = int(rng.integers(pooled.action_space.n))
    frames, reward = [], 0.0
    for _ in range(4):  # action_repeat
      frame, r, terminated, truncated, _ = reference.step(action)
      frames.append(frame[:208])
      reward += r
    obs, pooled_reward, *pooled_flags, _ = pooled.step(action)
    plain_obs, plain_reward, *plain_flags, _ = plain.step(action)
    np.testing.assert_array_equal(obs, np.maximum(frames[-2], frames[-1]))
    np.testing.assert_array_equal(plain_obs, frames[-1])
    assert pooled_reward == plain_reward == reward
    assert pooled_flags == plain_flags == [terminated, truncated]
    pooling_mattered += not np.array_equal(obs, plain_obs)
  assert pooling_mattered > 30  # MsPacman draws its sprites on alternate frames
  check_env(environments.make_env(preset("small", max_pool_frames=True)),
            skip_render_check=True)


def test_a_protocol_saved_without_max_pool_frames_loads_without_pooling(
    tmp_path):
  fields = preset("small").to_json()
  del fields["max_pool_frames"]  # a protocol.json from before the field
  path = tmp_path / "protocol.json"
  path.write_text(json.dumps(fields))
  loaded = Protocol.load(str(path))
  assert loaded.max_pool_frames is False and loaded == preset("small")
  env = environments.make_env(loaded)
  assert env.unwrapped._frameskip == 4  # pylint: disable=protected-access
  while isinstance(env, gym.Wrapper):
    assert not isinstance(env, wrappers.MaxPoolFrames)
    env = env.env
  assert Protocol.from_json(dict(fields, max_pool_frames=True)).max_pool_frames


def test_max_pool_frames_is_refused_for_minipacman():
  with pytest.raises(ValueError, match=r"MiniPacman-avoid-v0 draws exact "
                     r"frames.*max_pool_frames=False"):
    preset("minipacman", env_id="MiniPacman-avoid-v0", max_pool_frames=True)


def test_protocol_differences_name_the_fields():
  assert preset("small").differences(preset("small")) == {}
  assert preset("small", max_pool_frames=True, noop_max=30).differences(
      preset("small")) == {"max_pool_frames": (True, False),
                           "noop_max": (30, 0)}


def test_action_names_name_each_games_action_ids():
  # MiniPacman's own order (i2a/environments/minipacman.py).
  assert environments.action_names(preset("minipacman")) == (
      "NOOP", "RIGHT", "UP", "LEFT", "DOWN")
  # The paper set is ALE's five, in the ActionSubset's order.
  assert environments.action_names(preset("small")) == (
      "NOOP", "UP", "RIGHT", "LEFT", "DOWN")
  # 'minimal' and 'full': the game's get_action_meanings().
  minimal = environments.action_names(preset("small", action_set="minimal"))
  env = environments.make_env(preset("small", action_set="minimal"))
  try:
    assert minimal == tuple(env.unwrapped.get_action_meanings())
    assert len(minimal) == env.action_space.n == 9
  finally:
    env.close()
  assert len(environments.action_names(preset("small",
                                              action_set="full"))) == 18
  # Jumpy ids (encode_jumpy_action): the c primitive names.
  jumpy = environments.action_names(preset("minipacman"), jump=2)
  assert len(jumpy) == 25
  assert jumpy[wrappers.encode_jumpy_action([2, 3], 5)] == "UP+LEFT"
  with pytest.raises(ValueError, match="jump must be >= 1, given 0"):
    environments.action_names(preset("minipacman"), jump=0)
