"""Environments under a recorded protocol: ALE games, MiniPacman, jumpy steps.

  protocol = environments.preset("small")       # or Protocol(...)
  env = environments.make_env(protocol, jump=3)  # gymnasium env
  envs = environments.make_vector_env(protocol, num_envs=8)

For MiniPacman protocols make_vector_env returns a VectorMiniPacman (all
games stepped as arrays in one call, the same results as the SyncVectorEnv
of single envs, which `vectorized=False` gives).

Importing this package registers the MiniPacman tasks with gymnasium
(`gymnasium.make("MiniPacman-avoid-v0")`, one id per task in
minipacman.TASKS; idempotent); the ALE games are registered by the first
make_env (register_all), which imports ale_py.
"""

from i2a.environments import minipacman
from i2a.environments.factory import (action_names, make_env,
                                      make_vector_env, num_actions,
                                      register_all, seeds_for)
from i2a.environments.protocol import PRESETS, Protocol, preset
from i2a.environments.wrappers import (JumpyWrapper, decode_jumpy_action,
                                       encode_jumpy_action)

__all__ = [
    "action_names", "make_env", "make_vector_env", "num_actions",
    "register_all", "seeds_for",
    "PRESETS", "Protocol", "preset", "JumpyWrapper", "decode_jumpy_action",
    "encode_jumpy_action",
]

minipacman.register()
