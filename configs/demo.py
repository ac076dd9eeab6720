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
  # Pretraining budget per model (steps of batch pretrain_batch_size) and
  # its learning rate: on 2 CPU cores the dSSM-DET (the I2A's model) gets
  # most of the time, enough for its open-loop predictions to keep the maze
  # and beat copying the last frame 10 model steps ahead (the report
  # states both numbers); the sSSM a shorter budget for the comparison.
  config.pretrain_steps = ml_collections.ConfigDict(dict(dssm_det=800,
                                                         sssm=400))
  config.pretrain_batch_size = 16
  config.pretrain_learning_rate = 1e-3
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
    config.pretrain_steps.update(dict(dssm_det=4, sssm=4))
    config.pretrain_batch_size = 4
    config.pretrain_learning_rate = 3e-4
    config.eval_windows = 8
    config.agent_env_steps.update(dict(a2c=36, i2a=36))
    config.agent_log_every = 2
    config.agent_checkpoint_every = 3
  elif preset == "paper":
    config.collect_train_steps = 1_000_000
    config.collect_test_steps = 50_000
    config.pretrain_steps.update(dict(dssm_det=200_000, sssm=200_000))
    config.pretrain_batch_size = 16
    config.pretrain_learning_rate = 1e-4
    config.eval_windows = 1024
    config.agent_env_steps.update(dict(a2c=10_000_000, i2a=10_000_000))
    config.agent_log_every = 100
    config.agent_checkpoint_every = 2_000
    config.agent_eval_episodes = 30
  return config
