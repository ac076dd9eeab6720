"""VectorMiniPacman (i2a/environments/vector_minipacman.py) against the
SyncVectorEnv of single MiniPacman envs it replaces.

The reference is `make_vector_env(protocol, n, vectorized=False)`: n
`make_env(protocol)` sub-envs (the single MiniPacmanEnv and the protocol's
wrappers) with gymnasium's same-step autoreset. Both are stepped with the
same seeds and actions, and everything they return is compared exactly
(observations, rewards, flags, infos with their dtypes and masks,
final_obs / final_info), together with each game's full state, RNG
included. Random play rarely clears a level or eats a ghost, so every few
steps one game is put, on both sides alike, into a situation where those
happen (`scramble`): little food and few pills left, ghosts next to
Pac-Man, power, a higher level.
"""

import dataclasses
import pickle

import gymnasium as gym
import numpy as np
import pytest

from i2a import environments
from i2a.environments import minipacman, preset
from i2a.environments.minipacman import EMPTY, HEIGHT, WIDTH
from i2a.environments.vector_minipacman import VectorMiniPacman

TASKS = list(minipacman.TASKS)
FREE = [(r, c) for r in range(HEIGHT) for c in range(WIDTH)
        if minipacman.LAYOUT[r][c] != "#"]


def protocol_for(task, **overrides):
  return preset("minipacman", env_id=f"MiniPacman-{task}-v0", **overrides)


def make_pair(protocol, num_envs, jump=1):
  vector = environments.make_vector_env(protocol, num_envs, jump=jump)
  sync = environments.make_vector_env(protocol, num_envs, jump=jump,
                                      vectorized=False)
  assert isinstance(vector, VectorMiniPacman)
  assert isinstance(sync, gym.vector.SyncVectorEnv)
  return vector, sync


def assert_same(a, b, path="result"):
  """Exact equality of nested vector-env outputs, dtypes included."""
  if isinstance(a, dict):
    assert isinstance(b, dict), path
    assert set(a) == set(b), (path, sorted(set(a) ^ set(b)))
    for key in a:
      assert_same(a[key], b[key], f"{path}[{key!r}]")
  elif isinstance(a, np.ndarray):
    assert isinstance(b, np.ndarray), path
    assert (a.dtype, a.shape) == (b.dtype, b.shape), (path, a.dtype, b.dtype,
                                                      a.shape, b.shape)
    if a.dtype == object:
      for i, (x, y) in enumerate(zip(a, b)):
        assert_same(x, y, f"{path}[{i}]")
    else:
      np.testing.assert_array_equal(a, b, err_msg=path)
  elif isinstance(a, (list, tuple)):
    assert type(a) is type(b) and len(a) == len(b), path
    for i, (x, y) in enumerate(zip(a, b)):
      assert_same(x, y, f"{path}[{i}]")
  else:
    assert type(a) is type(b) and a == b, (path, a, b)


def assert_same_games(vector, sync):
  for i, (view, env) in enumerate(zip(vector.envs, sync.envs)):
    assert view.unwrapped.clone_state() == env.unwrapped.clone_state(), i


def scramble(rng, vector, sync, i, level_step_limit):
  """Puts game i of both vector envs into the same random situation."""
  state = sync.envs[i].unwrapped.clone_state()
  cells = bytearray(state.cells)
  for c, code in enumerate(cells):
    if code and rng.random() > 0.1:
      cells[c] = EMPTY
  pac_row, pac_col = state.pacman
  near = [cell for cell in FREE if 1 <= abs(cell[0] - pac_row) +
          abs(cell[1] - pac_col) <= 3]
  picks = rng.choice(len(near), size=int(rng.integers(1, 5)), replace=False)
  ghosts = tuple(near[k] + (int(rng.integers(1, 5)),) for k in picks)
  state = dataclasses.replace(
      state, cells=bytes(cells), ghosts=ghosts,
      power=int(rng.choice([0, 0, 3, 20])), level=int(rng.integers(1, 9)),
      level_steps=int(rng.integers(0, level_step_limit or 100)),
      ghost_move_credit=int(rng.integers(0, 20)))
  sync.envs[i].unwrapped.restore_state(state)
  vector.envs[i].unwrapped.restore_state(state)


def play(vector, sync, rng, steps, scramble_every=0, jump=1, limit=None):
  """Steps both with the same random actions, comparing every step; returns
  counts of what happened."""
  n = vector.num_envs
  events = dict(terminated=0, truncated=0, level_cleared=0, ghosts_eaten=0,
                pill_eaten=0, food_eaten=0)
  for t in range(steps):
    if scramble_every and t % scramble_every == 0:
      scramble(rng, vector, sync, int(rng.integers(n)), limit)
    if jump == 1:
      actions = rng.integers(0, 5, size=n)
    elif t % 2:
      actions = rng.integers(0, 5**jump, size=n)  # jumpy action indices
    else:
      actions = rng.integers(0, 5, size=(n, jump))
    mine, theirs = vector.step(actions), sync.step(actions)
    assert_same(mine, theirs, f"step {t}")
    assert_same_games(vector, sync)
    _, _, terminated, truncated, info = theirs
    events["terminated"] += int(terminated.sum())
    events["truncated"] += int(truncated.sum())
    for key in ("level_cleared", "ghosts_eaten", "pill_eaten", "food_eaten"):
      events[key] += int(info[key].sum())
      if "final_info" in info:
        events[key] += int(info["final_info"][key].sum())
  return events


@pytest.mark.parametrize("task", TASKS)
def test_every_task_steps_exactly_like_the_sync_vector_env(task):
  limit = minipacman.TASKS[task].level_step_limit
  vector, sync = make_pair(protocol_for(task, max_episode_frames=120), 10)
  assert vector.single_observation_space == sync.single_observation_space
  assert vector.observation_space == sync.observation_space
  assert vector.single_action_space == sync.single_action_space
  assert vector.action_space == sync.action_space
  assert vector.metadata == sync.metadata
  assert vector.autoreset_mode == gym.vector.AutoresetMode.SAME_STEP
  assert_same(vector.reset(seed=11), sync.reset(seed=11))
  assert_same_games(vector, sync)
  events = play(vector, sync, np.random.default_rng(3), 1000,
                scramble_every=10, limit=limit)
  # Deaths, caps, level ends, power pills, eaten ghosts all happened.
  assert all(count > 0 for count in events.values()), events


def test_jumpy_steps_noop_starts_and_clipped_rewards_match():
  protocol = protocol_for("ambush", noop_max=4, clip_rewards=True,
                          max_episode_frames=60)
  vector, sync = make_pair(protocol, 6, jump=3)
  assert vector.single_action_space == gym.spaces.MultiDiscrete([5] * 3)
  assert_same(vector.reset(seed=5), sync.reset(seed=5))
  events = play(vector, sync, np.random.default_rng(4), 400, jump=3,
                scramble_every=15, limit=80)
  assert events["terminated"] > 0 and events["truncated"] > 0, events


@pytest.mark.parametrize("overrides", [
    dict(resize="area"),
    dict(resize="nearest", grayscale=True),
    dict(grayscale=True, crop=(2, 14, 3, 18)),
    dict(crop=(0, 8, 0, 16), observation_size=(8, 16)),
], ids=["area", "nearest-grayscale", "pad-grayscale-crop", "crop-unpadded"])
def test_other_frame_processing_matches(overrides):
  vector, sync = make_pair(protocol_for("hunt", **overrides), 4)
  assert vector.single_observation_space == sync.single_observation_space
  assert_same(vector.reset(seed=2), sync.reset(seed=2))
  play(vector, sync, np.random.default_rng(6), 150, scramble_every=20,
       limit=80)


def test_reset_mask_seed_lists_and_level_option_match():
  vector, sync = make_pair(protocol_for("regular"), 4)
  options = {"level": 5}
  assert_same(vector.reset(seed=[3, None, 9, 4], options=options),
              sync.reset(seed=[3, None, 9, 4], options=options))
  # Game 1 drew an unknown seed: give both sides the same game.
  sync.envs[1].unwrapped.np_random = np.random.default_rng(8)
  vector.envs[1].unwrapped.restore_state(
      sync.envs[1].unwrapped.clone_state())
  assert vector.envs[0].unwrapped.clone_state().level == 5
  assert len(vector.envs[0].unwrapped.clone_state().ghosts) == 3
  rng = np.random.default_rng(7)
  play(vector, sync, rng, 50)
  mask = np.array([False, True, True, False])
  assert_same(vector.reset(seed=21, options={"reset_mask": mask.copy()}),
              sync.reset(seed=21, options={"reset_mask": mask.copy()}))
  play(vector, sync, rng, 50)


def test_pickled_env_resumes_exactly():
  vector, sync = make_pair(protocol_for("avoid", max_episode_frames=90), 5)
  vector.reset(seed=1)
  sync.reset(seed=1)
  rng = np.random.default_rng(9)
  play(vector, sync, rng, 60, scramble_every=7, limit=128)
  assert len(vector.envs) == 5  # views exist; they are not pickled
  data = pickle.dumps(vector)
  assert len(data) < 500_000  # nor are the (static, large) maze tables
  copy = pickle.loads(data)
  assert_same_games(copy, sync)
  for t in range(150):
    actions = rng.integers(0, 5, size=5)
    theirs = sync.step(actions)
    assert_same(copy.step(actions), theirs, f"copy, step {t}")
    assert_same(vector.step(actions), theirs, f"original, step {t}")
  assert_same_games(copy, sync)


def test_views_read_and_write_the_vector_games():
  protocol = protocol_for("regular")
  vector = environments.make_vector_env(protocol, 3)
  observations, _ = vector.reset(seed=4)
  views = vector.envs
  assert vector.envs is views  # built once, live
  single = environments.make_env(protocol)
  single_obs, _ = single.reset(seed=5)
  np.testing.assert_array_equal(observations[1], single_obs)
  assert views[1].unwrapped.clone_state() == single.unwrapped.clone_state()
  # The wrapper chain is make_env's, so the emulator oracle can restore a
  # snapshot of a view into a single env.
  assert [type(w) for w in _chain(views[0])] == [type(w) for w in
                                                 _chain(single)]
  for action in (3, 3, 2):
    observations, *_ = vector.step(np.array([action] * 3))
    single_obs, *_ = single.step(action)
  np.testing.assert_array_equal(observations[1], single_obs)
  assert views[1].unwrapped.clone_state() == single.unwrapped.clone_state()
  cap = _chain(views[1])[-1]
  assert isinstance(cap, environments.wrappers.FrameCap)
  assert cap._steps == 3  # pylint: disable=protected-access
  frame = views[1].get_wrapper_attr("observation")(
      views[1].unwrapped._observation())  # pylint: disable=protected-access
  np.testing.assert_array_equal(frame, observations[1])
  # restore_state writes into the vector env's game.
  state = views[0].unwrapped.clone_state()
  views[2].unwrapped.restore_state(dataclasses.replace(
      state, rng_state=views[2].unwrapped.clone_state().rng_state))
  mine, *_ = vector.step(np.array([1, 1, 1]))
  np.testing.assert_array_equal(mine[0], mine[2])
  with pytest.raises(RuntimeError, match="view of game 0"):
    views[0].step(0)
  with pytest.raises(RuntimeError, match="view of game 0"):
    views[0].reset()


def _chain(env):
  chain = []
  while isinstance(env, gym.Wrapper):
    chain.append(env)
    env = env.env
  return chain


def test_make_vector_env_picks_the_vector_env_for_minipacman_only():
  protocol = protocol_for("rush")
  assert isinstance(environments.make_vector_env(protocol, 2),
                    VectorMiniPacman)
  assert isinstance(environments.make_vector_env(protocol, 2,
                                                 vectorized=False),
                    gym.vector.SyncVectorEnv)
  with pytest.raises(ValueError, match="needs a MiniPacman protocol"):
    environments.make_vector_env(preset("small"), 2, vectorized=True)
  with pytest.raises(ValueError, match="cannot also be asynchronous"):
    environments.make_vector_env(protocol, 2, vectorized=True,
                                 asynchronous=True)
  with pytest.raises(ValueError, match="num_envs must be >= 1"):
    environments.make_vector_env(protocol, 0)


def test_bad_actions_and_unstarted_games_are_refused():
  vector = environments.make_vector_env(protocol_for("regular"), 3)
  with pytest.raises(RuntimeError, match="before reset"):
    vector.step(np.zeros(3, np.int64))
  vector.reset(seed=0)
  with pytest.raises(ValueError, match=r"action 5 is out of range.*\[0, 5\)"
                     r".*env 1"):
    vector.step(np.array([0, 5, 0]))
  with pytest.raises(ValueError, match=r"action -1 is out of range"):
    vector.step(np.array([0, 0, -1]))
  with pytest.raises(ValueError, match=r"action 1\.0 is out of range"):
    vector.step(np.array([1.0, 0.0, 0.0]))
  with pytest.raises(ValueError, match=r"int \[3\].*shape \(2,\)"):
    vector.step(np.array([0, 0]))
  vector.step([1, 2, 3])  # any int sequence is fine
  vector.step(np.array([1, 2, 3], np.int32))
  jumpy = environments.make_vector_env(protocol_for("regular"), 2, jump=2)
  jumpy.reset(seed=0)
  with pytest.raises(ValueError, match=r"jumpy action index 25 is out of "
                     r"range: expected \[0, 25\)"):
    jumpy.step(np.array([0, 25]))
  with pytest.raises(ValueError, match=r"primitive actions out of range"):
    jumpy.step(np.array([[0, 1], [7, 0]]))


def test_restore_refuses_states_the_vector_env_cannot_hold():
  vector = environments.make_vector_env(protocol_for("regular"), 1)
  vector.reset(seed=0)
  view = vector.envs[0].unwrapped
  state = view.clone_state()
  with pytest.raises(ValueError, match="at most 4 ghosts"):
    view.restore_state(dataclasses.replace(
        state, ghosts=tuple((1, c, 1) for c in (1, 2, 3, 5, 6))))
  with pytest.raises(ValueError, match=r"power in \[0, 20\]"):
    view.restore_state(dataclasses.replace(state, power=30))
  with pytest.raises(ValueError, match="not a free maze cell"):
    view.restore_state(dataclasses.replace(state, pacman=(0, 0)))
  assert view.clone_state() == state  # nothing was written
