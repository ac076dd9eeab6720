"""Config of `make demo` / `python -m i2a.demo`: the whole pipeline, budgets.

Presets: small (default: MsPacman at 104x80 on 2 CPU cores, about 20
minutes), tiny (tests: MiniPacman, seconds), paper (MsPacman at 200x160 with
the paper's budgets; for a GPU machine).
"""

import ml_collections

from configs import common

PRESETS = ("small", "tiny", "paper")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  preset = common.check_preset(preset, PRESETS, "configs/demo.py")
  config = ml_collections.ConfigDict()
  config.preset = preset
  # Each stage's own config file and preset; budgets below override them.
  config.collect_preset = {"tiny": "tiny"}.get(preset, preset)
  config.envmodel_preset = {"tiny": "tiny"}.get(preset, preset)
  config.envmodels = ("dssm_det", "sssm")  # pretrained, then compared
  config.collect_train_steps = 20_000
  config.collect_test_steps = 2_000
  config.pretrain_steps = 150
  config.pretrain_batch_size = 8
  config.eval_windows = 64
  config.agent_preset = preset
  config.agent_env_steps = ml_collections.ConfigDict(dict(a2c=20_000,
                                                          i2a=8_000))
  config.agent_log_every = 10
  config.agent_checkpoint_every = 50
  config.agent_eval_episodes = 2
  if preset == "tiny":
    config.collect_train_steps = 600
    config.collect_test_steps = 200
    config.pretrain_steps = 4
    config.pretrain_batch_size = 4
    config.eval_windows = 8
    config.agent_env_steps.update(dict(a2c=36, i2a=36))
    config.agent_log_every = 2
    config.agent_checkpoint_every = 3
  elif preset == "paper":
    config.collect_train_steps = 1_000_000
    config.collect_test_steps = 50_000
    config.pretrain_steps = 200_000
    config.pretrain_batch_size = 16
    config.eval_windows = 1024
    config.agent_env_steps.update(dict(a2c=10_000_000, i2a=10_000_000))
    config.agent_log_every = 100
    config.agent_checkpoint_every = 2_000
    config.agent_eval_episodes = 30
  return config
