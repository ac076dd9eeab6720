"""sSSM: stochastic state-space model (samples into transition and decoder).

See configs/envmodels/common.py for the fields and presets.
"""

from configs.envmodels import common


def get_config(preset: str = ""):
  return common.make_config("sssm", preset, "configs/envmodels/sssm.py")
