"""The MPC planner (agents/planning): CEM over a frozen envmodel's rollouts.

  python -m i2a.plan --config=configs/agents/planning.py:minipacman \
      --config.envmodel=PRETRAIN_WORKDIR/export --workdir=DIR
  python -m i2a.plan --config=configs/agents/planning.py:minipacman \
      --config.envmodel=oracle --workdir=DIR        # the emulator
  python -m i2a.plan --config=configs/agents/planning.py:minipacman \
      --config.policy=random --workdir=DIR          # the baseline

Presets: tiny (tests: MiniPacman-avoid, 16-frame episodes, tiny CEM),
minipacman (MiniPacman-avoid-v0, the default), small (MsPacman 104x80; the
oracle plans in jumps of 3). Episodes are played under config.protocol; an
export trained under another protocol (its provenance, or protocol.json of
its pretrain workdir) is refused unless config.allow_protocol_mismatch. Planner fields
(config.planner) are agents.planning.PlannerConfig's, with its defaults:
horizon, population, iterations, num_elites, smoothing, discount,
num_samples, select. See docs/planning.md.
"""

import dataclasses

import ml_collections

from agents.planning.planner import PlannerConfig
from configs import common

PRESETS = ("minipacman", "tiny", "small")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  preset = common.check_preset(preset, PRESETS, "configs/agents/planning.py")
  config = ml_collections.ConfigDict()
  config.preset = preset
  config.protocol = common.protocol_config(
      "small" if preset == "small" else "minipacman")
  config.protocol.env_id = ("ALE/MsPacman-v5" if preset == "small" else
                            "MiniPacman-avoid-v0")
  config.policy = "cem"  # 'cem' (the planner) or 'random' (the baseline)
  # An export of `python -m i2a.pretrain` (WORKDIR/export), or 'oracle'.
  config.envmodel = ""
  # True plans with an export trained under another protocol than
  # config.protocol (agents/builder.py, check_export).
  config.allow_protocol_mismatch = False
  config.oracle_jump = 1  # c of the oracle's model steps
  config.seed = 0  # CEM sampling, model noise, episode seeds
  config.precision = "auto"  # envmodels/precision.py (tiny: fp32)
  config.num_envs = 4  # environments planned for in one batch
  config.episodes = 8
  config.max_episode_steps = 0  # > 0: truncate episodes (0: protocol cap)
  config.video_frames = 400  # at most this many frames in the GIF
  config.planner = ml_collections.ConfigDict(
      dataclasses.asdict(PlannerConfig()))
  if preset == "tiny":
    config.precision = "fp32"
    config.protocol.max_episode_frames = 16
    config.num_envs = 2
    config.episodes = 2
    config.video_frames = 20
    config.planner.update(horizon=3, population=8, iterations=2,
                          num_elites=2, num_samples=2)
  elif preset == "minipacman":
    config.planner.update(horizon=6, population=32, iterations=3,
                          num_elites=4)
  elif preset == "small":
    config.oracle_jump = 3
    config.num_envs = 2
    config.episodes = 2
    config.planner.update(horizon=4, population=32, iterations=3,
                          num_elites=4, num_samples=2)
  return config
