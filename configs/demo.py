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
  if preset == "tiny":
    config.collect_train_steps = 600
    config.collect_test_steps = 200
    config.pretrain_steps = 4
    config.pretrain_batch_size = 4
    config.eval_windows = 8
  elif preset == "paper":
    config.collect_train_steps = 1_000_000
    config.collect_test_steps = 50_000
    config.pretrain_steps = 200_000
    config.pretrain_batch_size = 16
    config.eval_windows = 1024
  return config
