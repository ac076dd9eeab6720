"""Tests of MiniPacman (i2a/environments/minipacman.py): rules, rewards, copies.

Situations are set up with `place()`, which edits a `clone_state()` with
`dataclasses.replace` and restores it: Pac-Man, the ghosts (row, col,
heading), cell contents, power, and the level's step counter.
"""

import dataclasses
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from i2a.environments import minipacman
from i2a.environments.minipacman import (DOWN, EMPTY, FOOD, HEIGHT, LEFT,
                                         NOOP, PILL, RIGHT, UP, WIDTH,
                                         MiniPacmanEnv)

# The paper's table: step / food / pill / eat ghost / killed.
REWARDS = {
    "regular": (0.0, 1.0, 2.0, 5.0, 0.0),
    "avoid": (0.1, -0.1, -5.0, -10.0, -20.0),
    "hunt": (0.0, 0.0, 1.0, 10.0, -20.0),
    "ambush": (0.0, -0.1, 0.0, 10.0, -20.0),
    "rush": (0.0, -0.1, 10.0, 0.0, 0.0),
}
TASK_NAMES = list(REWARDS)
STEP_LIMITS = {"regular": None, "avoid": 128, "hunt": 80, "ambush": 80,
               "rush": None}
FAR_GHOST = (13, 9, LEFT)  # Many cells from the scripted scenes on row 3.
PACMAN_START = (11, 9)
GHOST_STARTS = [(3, 9), (7, 1), (7, 17), (5, 9)]


def exact(value):
  return pytest.approx(value, rel=0, abs=1e-12)


def make(task="regular", seed=0, **kwargs):
  env = MiniPacmanEnv(task, **kwargs)
  env.reset(seed=seed)
  return env


def place(env, pacman, ghosts=(FAR_GHOST,), cells=None, edits=None, **fields):
  """Puts the game in a scripted situation.

  cells: codes for the whole maze (default: the current ones); edits:
  {(row, col): code} applied on top; fields: other MiniPacmanState fields.
  """
  state = env.clone_state()
  cells = bytearray(state.cells if cells is None else cells)
  for (row, col), code in (edits or {}).items():
    cells[row * WIDTH + col] = code
  env.restore_state(dataclasses.replace(
      state, pacman=pacman, ghosts=tuple(ghosts), cells=bytes(cells),
      **fields))


def only(positions_codes):
  """Cells that are all empty but for {(row, col): code}."""
  cells = bytearray(HEIGHT * WIDTH)
  for (row, col), code in positions_codes.items():
    cells[row * WIDTH + col] = code
  return bytes(cells)


def count_color(obs, name):
  return int(np.all(obs == minipacman.COLORS[name], axis=-1).sum())


def ghost_cells(env):
  return [g[:2] for g in env.clone_state().ghosts]


# ------------------------------------------------------------ observations


def test_observation_is_uint8_rgb_maze_in_the_space():
  env = MiniPacmanEnv()
  obs, info = env.reset(seed=0)
  assert obs.shape == (15, 19, 3) and obs.dtype == np.uint8
  assert env.observation_space.contains(obs)
  assert env.action_space == gymnasium.spaces.Discrete(5)
  walls = np.array([[ch == "#" for ch in row] for row in minipacman.LAYOUT])
  assert np.all(obs[walls] == minipacman.COLORS["wall"])
  assert tuple(obs[PACMAN_START]) == minipacman.COLORS["pacman"]
  assert tuple(obs[GHOST_STARTS[0]]) == minipacman.COLORS["ghost"]
  assert count_color(obs, "pill") == 4
  assert count_color(obs, "food") == (~walls).sum() - 4 - 1 - 1
  assert len(set(minipacman.COLORS.values())) == len(minipacman.COLORS)
  assert info["level"] == 1 and info["ghosts"] == 1


def test_info_has_the_same_keys_every_step():
  env = MiniPacmanEnv()
  _, info = env.reset(seed=0)
  keys = set(info)
  assert {"level", "steps", "level_steps", "power", "ghosts", "food_eaten",
          "pill_eaten", "ghosts_eaten", "killed", "level_cleared"} <= keys
  for action in [RIGHT] * 5 + [UP] * 5:
    _, _, terminated, _, info = env.step(action)
    assert set(info) == keys
    if terminated:
      break


def test_render_is_the_observation_upscaled_8x():
  env = MiniPacmanEnv(render_mode="rgb_array")
  obs, _ = env.reset(seed=0)
  frame = env.render()
  assert frame.shape == (120, 152, 3) and frame.dtype == np.uint8
  np.testing.assert_array_equal(frame[::8, ::8], obs)
  assert MiniPacmanEnv().render() is None


# ---------------------------------------------------- determinism and copies


def random_trajectory(env, actions, seed):
  obs, info = env.reset(seed=seed)
  out = [(obs, info)]
  for action in actions:
    obs, reward, terminated, truncated, info = env.step(action)
    out.append((obs, reward, terminated, truncated, info))
    if terminated:
      out.append(env.reset())
  return out


def assert_same_trajectories(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert len(x) == len(y)
    for u, v in zip(x, y):
      if isinstance(u, np.ndarray):
        np.testing.assert_array_equal(u, v)
      else:
        assert u == v


def test_same_seed_same_actions_same_trajectory():
  actions = np.random.default_rng(1).integers(0, 5, size=600).tolist()
  first = random_trajectory(MiniPacmanEnv("hunt"), actions, seed=7)
  second = random_trajectory(MiniPacmanEnv("hunt"), actions, seed=7)
  assert sum(len(x) == 2 for x in first) > 1  # Some episodes ended.
  assert_same_trajectories(first, second)


def test_restore_and_replay_is_bit_identical():
  rng = np.random.default_rng(2)
  env = make("regular", seed=3)
  for action in [UP, UP, RIGHT, RIGHT, NOOP, DOWN]:
    env.step(action)
  state = env.clone_state()
  actions = rng.integers(0, 5, size=150).tolist()

  def play(target):
    out = []
    for action in actions:
      step = target.step(action)
      out.append(step)
      if step[2]:
        break
    return out

  original = play(env)
  env.restore_state(state)
  assert_same_trajectories(play(env), original)
  other = MiniPacmanEnv("regular")  # Never reset: the state is everything.
  other.restore_state(state)
  assert_same_trajectories(play(other), original)
  assert env.clone_state() == other.clone_state()


def test_restore_rejects_other_task_and_bad_positions():
  state = make("regular").clone_state()
  with pytest.raises(ValueError, match="task 'regular'.*'rush'"):
    make("rush").restore_state(state)
  env = make("regular")
  with pytest.raises(ValueError, match=r"state.pacman: \(0, 0\) is not a free"):
    env.restore_state(dataclasses.replace(state, pacman=(0, 0)))


# ------------------------------------------------------------ gymnasium API


@pytest.mark.parametrize("task", TASK_NAMES)
def test_gymnasium_env_checker_passes_without_warnings(task):
  minipacman.register()
  env = gymnasium.make(f"MiniPacman-{task}-v0", render_mode="rgb_array")
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    check_env(env.unwrapped)


def test_register_is_idempotent_and_points_at_the_class():
  minipacman.register()
  minipacman.register()
  for task in TASK_NAMES:
    spec = gymnasium.spec(f"MiniPacman-{task}-v0")
    assert spec.entry_point == "i2a.environments.minipacman:MiniPacmanEnv"
    assert spec.kwargs == {"task": task}
  env = gymnasium.make("MiniPacman-avoid-v0")
  assert env.unwrapped.task == "avoid"


def test_unknown_task_is_refused_naming_the_valid_ones():
  with pytest.raises(ValueError,
                     match="'bogus'.*regular, avoid, hunt, ambush, rush"):
    MiniPacmanEnv("bogus")


@pytest.mark.parametrize("action", [5, -1, 2.5, "up"])
def test_action_outside_range_is_refused(action):
  env = make()
  with pytest.raises(ValueError, match=r"Invalid action .*\[0, 5\)"):
    env.step(action)


def test_numpy_integer_actions_are_accepted():
  env = make()
  env.step(np.int64(RIGHT))
  assert env.clone_state().pacman == (11, 10)


def test_step_after_death_needs_reset():
  env = make()
  place(env, pacman=(3, 5), ghosts=[(3, 6, LEFT)])
  assert env.step(RIGHT)[2]
  with pytest.raises(RuntimeError, match="reset"):
    env.step(NOOP)
  env.reset()
  env.step(NOOP)


def test_reset_refuses_unknown_options_and_bad_levels():
  env = MiniPacmanEnv()
  with pytest.raises(ValueError, match=r"Unknown reset options \['lvl'\]"):
    env.reset(options={"lvl": 2})
  with pytest.raises(ValueError, match="level.*>= 1, got 0"):
    env.reset(options={"level": 0})


def test_max_steps_truncates():
  env = make(max_steps=3)
  assert [env.step(NOOP)[3] for _ in range(3)] == [False, False, True]


# ----------------------------------------------------------------- movement


def test_moving_into_a_wall_stays():
  env = make()
  place(env, pacman=(1, 1))
  env.step(UP)
  env.step(LEFT)
  assert env.clone_state().pacman == (1, 1)
  env.step(RIGHT)
  assert env.clone_state().pacman == (1, 2)


@pytest.mark.parametrize("level,power,expected_moves", [
    (1, 0, 5), (1, 20, 2), (3, 0, 7), (6, 0, 10), (9, 0, 10)])
def test_ghost_speed_grows_with_level_and_halves_when_powered(
    level, power, expected_moves):
  env = make()
  # Far apart so nothing meets; Pac-Man parked in the top-left corner.
  place(env, pacman=(1, 1), ghosts=[(11, 13, LEFT)], edits={(1, 1): EMPTY},
        level=level, power=power)
  moves, before = 0, ghost_cells(env)
  for _ in range(10):
    env.step(NOOP)
    after = ghost_cells(env)
    moves += after != before
    before = after
  assert moves == expected_moves


def test_ghosts_chase_pacman_at_junctions():
  downs = 0
  for seed in range(20):
    env = make(seed=seed)
    # Junction (3, 5); Pac-Man straight below at (11, 5).
    place(env, pacman=(11, 5), ghosts=[(3, 5, RIGHT)], ghost_move_credit=10)
    env.step(NOOP)
    downs += ghost_cells(env) == [(4, 5)]
  assert downs >= 17  # Random moves are 5% of junctions.


def test_ghosts_flee_powered_pacman():
  env = make()
  place(env, pacman=(11, 5), ghosts=[(3, 5, RIGHT)], power=10,
        ghost_move_credit=15)
  env.step(NOOP)
  assert ghost_cells(env) == [(2, 5)]


def test_ghost_walking_onto_pacman_kills_him():
  env = make("avoid")
  place(env, pacman=(3, 5), ghosts=[(3, 6, LEFT)], edits={(3, 5): EMPTY},
        ghost_move_credit=10)
  _, reward, terminated, _, info = env.step(NOOP)
  assert terminated and info["killed"] and reward == exact(0.1 - 20.0)


def test_power_lasts_20_steps_and_ghosts_show_edible():
  env = make()
  place(env, pacman=(1, 2), ghosts=[(13, 12, LEFT)], edits={(1, 1): PILL})
  obs, _, _, _, info = env.step(LEFT)
  assert info["power"] == 20 and count_color(obs, "edible_ghost") == 1
  powers = [env.step(NOOP)[4]["power"] for _ in range(20)]
  assert powers == list(range(19, -1, -1))
  obs = env.step(NOOP)[0]
  assert count_color(obs, "ghost") == 1
  assert count_color(obs, "edible_ghost") == 0


# ------------------------------------------------------------------ rewards


@pytest.mark.parametrize("task", TASK_NAMES)
def test_empty_step_reward(task):
  env = make(task)
  place(env, pacman=(3, 5), edits={(3, 6): EMPTY})
  _, reward, terminated, _, info = env.step(RIGHT)
  assert reward == exact(REWARDS[task][0]) and not terminated
  assert info["food_eaten"] == info["pill_eaten"] == info["ghosts_eaten"] == 0


@pytest.mark.parametrize("task", TASK_NAMES)
def test_food_reward(task):
  env = make(task)
  place(env, pacman=(3, 5), edits={(3, 6): FOOD})
  obs, reward, _, _, info = env.step(RIGHT)
  assert reward == exact(REWARDS[task][0] + REWARDS[task][1])
  assert info["food_eaten"] == 1
  assert env.clone_state().cells[3 * WIDTH + 6] == EMPTY
  env.step(LEFT)
  assert tuple(env.step(NOOP)[0][3, 6]) == minipacman.COLORS["empty"]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_power_pill_reward(task):
  env = make(task)
  place(env, pacman=(3, 5), edits={(3, 6): PILL})
  _, reward, _, _, info = env.step(RIGHT)
  assert reward == exact(REWARDS[task][0] + REWARDS[task][2])
  assert info["pill_eaten"] == 1 and info["power"] == 20
  assert not info["level_cleared"]  # The corner pills are still there.


@pytest.mark.parametrize("task", TASK_NAMES)
def test_eating_a_ghost_reward(task):
  env = make(task)
  place(env, pacman=(3, 5), ghosts=[(3, 6, LEFT), FAR_GHOST],
        edits={(3, 6): EMPTY}, power=10, ghost_move_credit=10)
  _, reward, terminated, _, info = env.step(RIGHT)
  assert reward == exact(REWARDS[task][0] + REWARDS[task][3])
  assert not terminated and info["ghosts_eaten"] == 1 and info["ghosts"] == 1
  assert not info["level_cleared"]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_killed_reward_and_termination(task):
  env = make(task)
  # The ghost would step onto Pac-Man's old cell as he steps onto its cell:
  # they cannot pass through each other.
  place(env, pacman=(3, 5), ghosts=[(3, 6, LEFT)], edits={(3, 6): EMPTY},
        ghost_move_credit=10)
  _, reward, terminated, truncated, info = env.step(RIGHT)
  assert terminated and not truncated and info["killed"]
  assert reward == exact(REWARDS[task][0] + REWARDS[task][4])


# --------------------------------------------------------------- level ends


def assert_new_level(env, info, level):
  assert info["level_cleared"] and info["level"] == level
  assert info["level_steps"] == 0
  state = env.clone_state()
  assert state.pacman == PACMAN_START
  assert state.cells == minipacman._INITIAL_CELLS


@pytest.mark.parametrize("task", TASK_NAMES)
def test_level_ends_when_all_food_eaten_in_regular_and_avoid(task):
  env = make(task)
  place(env, pacman=(3, 5), cells=only({(3, 6): FOOD, (1, 1): PILL}))
  _, reward, terminated, _, info = env.step(RIGHT)
  assert reward == exact(REWARDS[task][0] + REWARDS[task][1])
  assert not terminated
  if task in ("regular", "avoid"):
    assert_new_level(env, info, level=2)
  else:
    assert not info["level_cleared"] and info["level"] == 1


@pytest.mark.parametrize("task", TASK_NAMES)
def test_level_ends_when_all_pills_eaten_in_rush(task):
  env = make(task)
  place(env, pacman=(3, 5), cells=only({(3, 6): PILL, (1, 2): FOOD}))
  _, reward, _, _, info = env.step(RIGHT)
  assert reward == exact(REWARDS[task][0] + REWARDS[task][2])
  if task == "rush":
    assert_new_level(env, info, level=2)
    assert info["power"] == 0
  else:
    assert not info["level_cleared"]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_level_ends_when_all_ghosts_eaten_in_hunt_and_ambush(task):
  env = make(task)
  place(env, pacman=(3, 5), ghosts=[(3, 6, LEFT)], edits={(3, 6): EMPTY},
        power=10)
  _, reward, terminated, _, info = env.step(RIGHT)
  assert reward == exact(REWARDS[task][0] + REWARDS[task][3])
  assert not terminated and info["ghosts_eaten"] == 1
  if task in ("hunt", "ambush"):
    assert_new_level(env, info, level=2)
    assert info["ghosts"] == 1
  else:
    assert not info["level_cleared"] and info["ghosts"] == 0


@pytest.mark.parametrize("task", TASK_NAMES)
def test_level_step_limit(task):
  limit = STEP_LIMITS[task]
  env = make(task)
  before = (limit or 10_000) - 2
  place(env, pacman=(1, 1), ghosts=[(13, 12, LEFT)], edits={(1, 1): EMPTY},
        level_steps=before)
  first = env.step(NOOP)[4]
  assert not first["level_cleared"] and first["level_steps"] == before + 1
  _, reward, _, _, info = env.step(NOOP)
  assert reward == exact(REWARDS[task][0])
  if limit is None:
    assert not info["level_cleared"] and info["level"] == 1
  else:
    assert_new_level(env, info, level=2)


def test_ghost_count_grows_every_two_levels_up_to_the_starts():
  env = MiniPacmanEnv()
  for level, ghosts in [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (7, 4),
                        (11, 4)]:
    obs, info = env.reset(seed=0, options={"level": level})
    assert info["level"] == level and info["ghosts"] == ghosts
    assert count_color(obs, "ghost") == ghosts
    assert ghost_cells(env) == GHOST_STARTS[:ghosts]


def test_clearing_levels_adds_ghosts():
  env = make("rush")
  seen = []
  for _ in range(6):
    place(env, pacman=(3, 5), ghosts=[(13, 12, LEFT)],
          cells=only({(3, 6): PILL, (1, 2): FOOD}))
    obs, _, _, _, info = env.step(RIGHT)
    seen.append((info["level"], info["ghosts"], count_color(obs, "ghost")))
  assert seen == [(2, 1, 1), (3, 2, 2), (4, 2, 2), (5, 3, 3), (6, 3, 3),
                  (7, 4, 4)]
