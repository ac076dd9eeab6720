"""dSSM-VAE: mean into the transition, a sample into the decoder.

See configs/envmodels/common.py for the fields and presets.
"""

from configs.envmodels import common

PRESETS = common.PRESETS  # for --help (i2a/cli.py)


def get_config(preset: str = ""):
  return common.make_config("dssm_vae", preset, "configs/envmodels/dssm_vae.py")
