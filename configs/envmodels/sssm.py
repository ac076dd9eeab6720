"""sSSM: stochastic state-space model (samples into transition and decoder).

See configs/envmodels/common.py for the fields and presets.
"""

from configs.envmodels import common

PRESETS = common.PRESETS  # for --help (i2a/cli.py)


def get_config(preset: str = ""):
  return common.make_config("sssm", preset, "configs/envmodels/sssm.py")
