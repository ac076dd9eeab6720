"""VAE baseline: frames independent given the 3 context frames.

See configs/envmodels/common.py for the fields and presets.
"""

from configs.envmodels import common

PRESETS = common.PRESETS  # for --help (i2a/cli.py)


def get_config(preset: str = ""):
  return common.make_config("vae", preset, "configs/envmodels/vae.py")
