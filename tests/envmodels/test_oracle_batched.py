"""Tests of the emulator oracle's batch emulator for MiniPacman
(i2a/environments/minipacman_oracle.py, `OracleModel(batch_emulator=)`):
every step, rollout and render equals the generic path's (one worker env
restored per snapshot), bit for bit, over every task, jumpy steps, episode
ends (killed and the frame cap), level ends and states stepped twice; and
the errors it raises."""

import dataclasses
import functools
import importlib

import numpy as np
import pytest

from agents import builder
from i2a.environments import make_env, make_vector_env, minipacman, preset
from i2a.environments import minipacman_oracle

MINIPACMAN = preset("minipacman")
NUM_ACTIONS = 5


def oracle_lib():
  """envmodels.oracle, imported at first use (it registers the 'oracle'
  kind, which suites over every kind cannot build when collected)."""
  return importlib.import_module("envmodels.oracle")


def task_protocol(task, max_episode_frames=None):
  protocol = dataclasses.replace(MINIPACMAN, env_id=f"MiniPacman-{task}-v0")
  if max_episode_frames is not None:
    protocol = dataclasses.replace(protocol,
                                   max_episode_frames=max_episode_frames)
  return protocol


def oracles(protocol, jump):
  """The generic oracle and the batched one, for the same protocol."""
  env_fn = functools.partial(make_env, protocol)
  probe = env_fn()
  spec = oracle_lib().spec_for_env(probe, jump=jump)
  probe.close()
  generic = oracle_lib().OracleModel(spec, env_fn=env_fn, seed=0)
  batched = oracle_lib().OracleModel(
      spec, env_fn=env_fn, seed=0,
      batch_emulator=minipacman_oracle.batch_emulator(protocol))
  return generic, batched


def started_envs(protocol, count, seed=5):
  """`count` MiniPacman games of a vector env, a few random steps in."""
  envs = make_vector_env(protocol, count)
  envs.reset(seed=seed)
  rng = np.random.RandomState(seed)
  for _ in range(6):
    envs.step(rng.randint(0, NUM_ACTIONS, count))
  return envs


def assert_same_steps(generic, batched, snapshots, depth, jump, seed=0,
                      branch_at=None):
  """Steps both oracles from the same snapshots through the same random
  actions (a batch of K = 3 rollouts per snapshot), comparing every output;
  `branch_at` also steps the state at that depth again with other actions.
  Returns the number of rows that ended."""
  rng = np.random.RandomState(seed)
  starts = [generic.initial_state_from_envs(snapshots),
            batched.initial_state_from_envs(snapshots)]
  handles = [np.repeat(s.handle.numpy(), 3) for s in starts]
  np.testing.assert_array_equal(generic._render_host(handles[0])[0],
                                batched._render_host(handles[1])[0])
  ended = 0
  for t in range(depth):
    actions = rng.randint(0, NUM_ACTIONS, (len(handles[0]), jump)).astype(
        np.int32)
    outputs = [generic._step_host(handles[0], actions),
               batched._step_host(handles[1], actions)]
    for name, a, b in zip(("done", "rewards", "frames"), outputs[0][1:],
                          outputs[1][1:]):
      np.testing.assert_array_equal(a, b, err_msg=f"{name} at depth {t}")
    if t == branch_at:
      other = (actions + 1) % NUM_ACTIONS
      again = [generic._step_host(handles[0], other),
               batched._step_host(handles[1], other)]
      for a, b in zip(again[0][1:], again[1][1:]):
        np.testing.assert_array_equal(a, b)
    handles = [outputs[0][0], outputs[1][0]]
    np.testing.assert_array_equal(generic._render_host(handles[0])[0],
                                  batched._render_host(handles[1])[0])
    ended = int(outputs[0][1].sum())
  return ended


@pytest.mark.parametrize("task", minipacman.TASKS)
def test_batched_steps_equal_the_generic_path_for_every_task(task):
  protocol = task_protocol(task)
  generic, batched = oracles(protocol, jump=3)
  envs = started_envs(protocol, 4)
  assert_same_steps(generic, batched, envs.envs, depth=12, jump=3,
                    branch_at=4)


def test_episode_ends_by_the_frame_cap_and_by_death_are_absorbing():
  protocol = task_protocol("regular", max_episode_frames=20)
  generic, batched = oracles(protocol, jump=3)
  envs = started_envs(protocol, 8)
  # 6 steps in, a cap of 20: every row ends within 5 jumpy steps, some by
  # the cap in the middle of a chunk; then they stay ended.
  ended = assert_same_steps(generic, batched, envs.envs, depth=8, jump=3)
  assert ended == 24
  killed = task_protocol("avoid")  # dense ghosts: deaths within 40 steps
  generic, batched = oracles(killed, jump=1)
  envs = started_envs(killed, 8, seed=1)
  assert assert_same_steps(generic, batched, envs.envs, depth=40, jump=1,
                           seed=1) > 0


def test_a_level_end_starts_the_next_level_with_the_same_draws():
  protocol = task_protocol("regular")
  generic, batched = oracles(protocol, jump=1)
  envs = started_envs(protocol, 2)
  snapshots = []
  for env in envs.envs:
    snapshot = oracle_lib().snapshot_env(env)
    state = snapshot.emulator
    # One pellet left, beside Pac-Man: one of the moves clears the level.
    cells = np.zeros(minipacman.HEIGHT * minipacman.WIDTH, np.uint8)
    row, col = state.pacman
    beside = [(row + dr) * minipacman.WIDTH + col + dc
              for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0))]
    cells[next(cell for cell in beside
               if not minipacman._IS_WALL[cell])] = minipacman.FOOD  # pylint: disable=protected-access
    state = dataclasses.replace(state, cells=cells.tobytes())
    snapshots.append(dataclasses.replace(snapshot, emulator=state))
  starts = [o.initial_state_from_envs(snapshots) for o in (generic, batched)]
  levels = set()
  for action in range(1, NUM_ACTIONS):
    actions = np.full((2, 1), action, np.int32)
    outputs = [o._step_host(s.handle.numpy(), actions)
               for o, s in zip((generic, batched), starts)]
    for a, b in zip(outputs[0][1:], outputs[1][1:]):
      np.testing.assert_array_equal(a, b)
    # Stepping on: the new level's ghosts (drawn at its start) move alike.
    handles = [outputs[0][0], outputs[1][0]]
    for _ in range(5):
      moved = [o._step_host(h, np.zeros((2, 1), np.int32))
               for o, h in zip((generic, batched), handles)]
      for a, b in zip(moved[0][1:], moved[1][1:]):
        np.testing.assert_array_equal(a, b)
      handles = [moved[0][0], moved[1][0]]
    levels.update(
        generic._store.get(int(h)).emulator.level for h in handles[0])
  assert 2 in levels  # some action ate the last pellet


def test_rollouts_equal_the_generic_path_and_store_nothing():
  protocol = task_protocol("regular")
  generic, batched = oracles(protocol, jump=3)
  envs = started_envs(protocol, 3)
  starts = [o.initial_state_from_envs(envs) for o in (generic, batched)]
  actions = np.random.RandomState(0).randint(
      0, NUM_ACTIONS, (3, 6, 3)).astype(np.int32)
  size = batched.store_size
  results = [o._rollout_host(s.handle.numpy(), actions)
             for o, s in zip((generic, batched), starts)]
  for a, b in zip(results[0], results[1]):
    np.testing.assert_array_equal(a, b)
  assert batched.store_size == size


def test_the_agents_environments_are_left_undisturbed():
  protocol = task_protocol("regular")
  _, batched = oracles(protocol, jump=3)
  envs = started_envs(protocol, 2)
  before = [env.unwrapped.clone_state() for env in envs.envs]
  state = batched.initial_state_from_envs(envs)
  for _ in range(4):
    state, _ = batched.step(state, np.zeros((2, 3), np.int32))
  assert [env.unwrapped.clone_state() for env in envs.envs] == before


def test_make_oracle_steps_minipacman_as_arrays():
  oracle = builder.make_oracle(MINIPACMAN, jump=3)
  assert isinstance(oracle._batch, minipacman_oracle.MiniPacmanBatchEmulator)
  assert minipacman_oracle.batch_emulator(preset("small")) is None


def test_errors_say_what_was_expected():
  with pytest.raises(ValueError, match="is not one"):
    minipacman_oracle.MiniPacmanBatchEmulator(preset("small"))
  emulator = minipacman_oracle.batch_emulator(task_protocol("hunt"))
  envs = started_envs(task_protocol("regular"), 1)
  snapshot = oracle_lib().snapshot_env(envs.envs[0])
  with pytest.raises(ValueError, match="'regular' game .* steps 'hunt'"):
    emulator.from_snapshots([snapshot])
  no_cap = dataclasses.replace(snapshot, wrappers=())
  with pytest.raises(ValueError, match="0 FrameCap wrappers"):
    minipacman_oracle.batch_emulator(
        task_protocol("regular")).from_snapshots([no_cap])
  env_fn = functools.partial(make_env, MINIPACMAN)
  spec = oracle_lib().spec_for_env(env_fn(), jump=1)
  with pytest.raises(ValueError, match="from_snapshots"):
    oracle_lib().OracleModel(spec, env_fn=env_fn, batch_emulator=object())
