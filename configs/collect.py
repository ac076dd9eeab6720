"""Config of `python -m i2a.collect`: which environment, policy and budget.

Presets: tiny (tests, MiniPacman-avoid), minipacman (MiniPacman-avoid), small
(MsPacman at 104x80, the CPU demo), paper (MsPacman at 200x160). Use
--config=configs/collect.py:small.

The policy is uniform random by default; `--config.policy=checkpoint:RUN`
collects with the newest checkpoint of a `python -m i2a.train` workdir RUN
(its protocol must be this config's), and `--config.policy_epsilon=0.1`
takes a uniform random action instead with probability 0.1 per env step.
"""

import ml_collections

from configs import common

PRESETS = ("small", "tiny", "minipacman", "paper")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  preset = common.check_preset(preset, PRESETS, "configs/collect.py")
  config = ml_collections.ConfigDict()
  config.preset = preset
  config.protocol = common.protocol_config(
      {"tiny": "minipacman"}.get(preset, preset))
  # 'random' (uniform over the action set) or 'checkpoint:RUN' (RUN: an
  # i2a.train workdir; its newest checkpoint samples the actions).
  config.policy = "random"
  config.policy_epsilon = 0.0  # P(uniform random action) per env step
  config.num_envs = 8
  config.train_steps = 30_000  # primitive (agent) steps over all envs
  config.test_steps = 3_000
  config.seed = 0  # train env i is seeded seed + i
  config.test_seed = 1_000_000  # test env i: test_seed + i (disjoint)
  config.steps_per_shard = 20_000
  config.asynchronous = False  # gymnasium AsyncVectorEnv (one process per env)
  if preset in ("tiny", "minipacman"):
    # The task the agents' tiny and minipacman presets play: a dataset
    # collected under another protocol is refused by i2a.train.
    config.protocol.env_id = "MiniPacman-avoid-v0"
  if preset == "tiny":
    config.num_envs = 2
    config.train_steps = 600
    config.test_steps = 200
    config.steps_per_shard = 256
  elif preset == "minipacman":
    config.train_steps = 50_000
    config.test_steps = 5_000
  elif preset == "paper":
    config.train_steps = 1_000_000
    config.test_steps = 50_000
  return config
