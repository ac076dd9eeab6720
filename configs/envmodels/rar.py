"""RAR: recurrent AR, s_t+1 = g(s_t, mu_t+1, a_t, e(o_t)).

See configs/envmodels/common.py for the fields and presets.
"""

from configs.envmodels import common

PRESETS = common.PRESETS  # for --help (i2a/cli.py)


def get_config(preset: str = ""):
  return common.make_config("rar", preset, "configs/envmodels/rar.py")
