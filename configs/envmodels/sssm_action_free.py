"""Action-free sSSM, the base of the learned imagination prior.

See configs/envmodels/common.py for the fields and presets.
"""

from configs.envmodels import common

PRESETS = common.PRESETS  # for --help (i2a/cli.py)


def get_config(preset: str = ""):
  return common.make_config("sssm", preset,
                            "configs/envmodels/sssm_action_free.py",
                            action_free=True)
