"""Builds environments from a Protocol: the single place envs are made.

`make_env(protocol)` returns a gymnasium env whose observations are uint8
[H, W, C] of `protocol.observation_shape` and whose actions are Discrete(A);
`make_vector_env(protocol, num_envs, seed)` batches them with gymnasium's
vector API (same-step autoreset, so a step that ends an episode returns the
next episode's first observation and the final one in
info['final_obs']), each sub-env seeded from seed + index. For MiniPacman
it returns a VectorMiniPacman, which steps all games as arrays in one call
and returns what the SyncVectorEnv of make_env sub-envs would
(`vectorized=False` gives that SyncVectorEnv).
"""

from __future__ import annotations

import functools
from typing import Callable, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from i2a.environments import minipacman
from i2a.environments import wrappers
from i2a.environments.protocol import (MINIPACMAN_PREFIX, PAPER_ACTIONS,
                                       Protocol)

_registered = False


def register_all() -> None:
  """Registers the ALE games and MiniPacman with gymnasium (idempotent)."""
  global _registered
  if _registered:
    return
  import ale_py  # pylint: disable=import-outside-toplevel
  gym.register_envs(ale_py)
  minipacman.register()
  _registered = True


def _make_base(protocol: Protocol, render_mode: Optional[str]) -> gym.Env:
  register_all()
  kwargs = {}
  if protocol.is_minipacman:
    protocol.check_minipacman_dynamics()
  else:
    kwargs = dict(
        # With max-pooling the MaxPoolFrames wrapper repeats the action.
        frameskip=1 if protocol.max_pool_frames else protocol.action_repeat,
        repeat_action_probability=protocol.sticky_action_prob,
        full_action_space=protocol.action_set == "full",
        max_num_frames_per_episode=protocol.max_episode_frames,
        obs_type="rgb")
  try:
    env = gym.make(protocol.env_id, render_mode=render_mode, **kwargs)
  except gym.error.Error as e:
    known = sorted(k for k in gym.registry
                   if k.startswith(("ALE/", MINIPACMAN_PREFIX)))
    examples = ", ".join(k for k in known if "MsPacman" in k or
                         k.startswith(MINIPACMAN_PREFIX))
    raise ValueError(
        f"unknown environment id {protocol.env_id!r} ({e}). Use an ALE id "
        f"such as 'ALE/MsPacman-v5' ({len(known)} ids are registered, e.g. "
        f"{examples}).") from e
  # gym.make adds checkers we do not want in the hot loop; the protocol's
  # own wrappers (make_env) enforce actions and episode caps.
  return env.unwrapped


def _paper_action_indices(env: gym.Env, env_id: str) -> List[int]:
  meanings = list(env.unwrapped.get_action_meanings())
  missing = [m for m in PAPER_ACTIONS if m not in meanings]
  if missing:
    raise ValueError(
        f"action_set='paper' is the 5-action MS_PACMAN set {PAPER_ACTIONS}; "
        f"{env_id} lacks {missing}. Use action_set='minimal' or 'full'.")
  return [meanings.index(m) for m in PAPER_ACTIONS]


def make_env(protocol: Protocol, jump: int = 1,
             render_mode: Optional[str] = None) -> gym.Env:
  """One environment under `protocol`; jump > 1 adds the JumpyWrapper."""
  return wrap_env(_make_base(protocol, render_mode), protocol, jump)


def wrap_env(env: gym.Env, protocol: Protocol, jump: int = 1) -> gym.Env:
  """The protocol's wrappers around a bare game env (what make_env adds)."""
  if protocol.max_pool_frames:  # ALE only (Protocol refuses it otherwise).
    env = wrappers.MaxPoolFrames(env, protocol.action_repeat)
  if protocol.is_minipacman:
    env = wrappers.FrameCap(env, protocol.max_episode_frames, 1)
  elif protocol.action_set == "paper":
    env = wrappers.ActionSubset(env, _paper_action_indices(env,
                                                           protocol.env_id))
  if protocol.noop_max:
    env = wrappers.NoopReset(env, protocol.noop_max)
  if protocol.life_loss_terminal and not protocol.is_minipacman:
    env = wrappers.LifeLossTerminal(env)
  if protocol.clip_rewards:
    env = wrappers.ClipReward(env)
  env = wrappers.ObservationTransform(
      env, protocol.observation_size, crop=protocol.crop, mode=protocol.resize,
      grayscale=protocol.grayscale)
  env = wrappers.CheckedActions(env)
  if jump > 1:
    env = wrappers.JumpyWrapper(env, jump)
  return env


def action_names(protocol: Protocol, jump: int = 1) -> Tuple[str, ...]:
  """The names of the agent's action ids under `protocol`: name i is action
  i's, as pictures and logs show them.

  MiniPacman: its own set (minipacman.ACTION_NAMES: NOOP, RIGHT, UP, LEFT,
  DOWN). ALE: action_set 'paper' is PAPER_ACTIONS in that order (the
  ActionSubset wrapper's order); 'minimal' and 'full' are the game's
  `get_action_meanings()`. With jump c > 1, the jumpy action ids of
  make_env(protocol, jump) (encode_jumpy_action): the c primitive names
  joined by '+', e.g. 'UP+UP+LEFT'.
  """
  if jump < 1:
    raise ValueError(f"jump must be >= 1, given {jump}.")
  if protocol.is_minipacman:
    names: Tuple[str, ...] = tuple(minipacman.ACTION_NAMES)
  elif protocol.action_set == "paper":
    names = tuple(PAPER_ACTIONS)
  else:
    env = _make_base(protocol, render_mode=None)
    try:
      names = tuple(str(m) for m in env.unwrapped.get_action_meanings())
    finally:
      env.close()
  if jump == 1:
    return names
  return tuple("+".join(names[a] for a in wrappers.decode_jumpy_action(
      i, len(names), jump)) for i in range(len(names) ** jump))


def num_actions(protocol: Protocol) -> int:
  """The number of primitive actions an agent has under `protocol`."""
  env = make_env(protocol)
  try:
    return int(env.action_space.n)
  finally:
    env.close()


def make_vector_env(protocol: Protocol, num_envs: int, jump: int = 1,
                    asynchronous: bool = False,
                    vectorized: Optional[bool] = None
                    ) -> gym.vector.VectorEnv:
  """`num_envs` environments in gymnasium's vector API (same-step autoreset).

  Seed them with `env.reset(seed=base_seed)`: sub-env i gets base_seed + i.

  MiniPacman protocols get a `VectorMiniPacman` (i2a/environments/
  vector_minipacman.py), which steps all games as arrays in one call and
  returns exactly what the SyncVectorEnv of `make_env(protocol, jump)`
  sub-envs returns. Its `envs` are per-env views wrapped as make_env wraps
  a sub-env, which the emulator oracle snapshots as it snapshots the
  SyncVectorEnv's, so callers need not ask for per-env objects; views
  cannot be stepped one by one.

  Args:
    protocol: the environments' protocol.
    num_envs: N >= 1.
    jump: c >= 1 primitive steps per step (the JumpyWrapper).
    asynchronous: gymnasium's AsyncVectorEnv (one process per env) instead.
    vectorized: None (default): VectorMiniPacman for MiniPacman unless
      asynchronous; False: the SyncVectorEnv (or AsyncVectorEnv) of
      make_env sub-envs, for comparison or sub-envs of their own; True:
      VectorMiniPacman, refused for other games and with asynchronous.
  """
  if num_envs < 1:
    raise ValueError(f"num_envs must be >= 1, given {num_envs}.")
  if vectorized and not protocol.is_minipacman:
    raise ValueError(f"vectorized=True needs a MiniPacman protocol, given "
                     f"{protocol.env_id}; pass vectorized=None or False.")
  if vectorized and asynchronous:
    raise ValueError("vectorized=True steps every game in this process; it "
                     "cannot also be asynchronous.")
  if vectorized is None:
    vectorized = protocol.is_minipacman and not asynchronous
  if vectorized:
    from i2a.environments import vector_minipacman  # pylint: disable=import-outside-toplevel
    return vector_minipacman.VectorMiniPacman(protocol, num_envs, jump)
  thunks: List[Callable[[], gym.Env]] = [
      functools.partial(make_env, protocol, jump) for _ in range(num_envs)]
  cls = gym.vector.AsyncVectorEnv if asynchronous else gym.vector.SyncVectorEnv
  return cls(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def seeds_for(base_seed: int, num_envs: int) -> np.ndarray:
  """The per-env seeds a vector env reset with `base_seed` uses."""
  return base_seed + np.arange(num_envs)
