"""A2C: the model-free baseline (agents/a2c), a conv torso over the window.

  python -m i2a.train --config=configs/agents/a2c.py:minipacman --workdir=DIR

Presets (configs/agents/common.py): tiny, minipacman, small, paper. Network
fields: conv_channels / conv_kernels / conv_strides (one entry per conv
layer, ReLU after each), hidden (the torso's linear layer) and head_hidden
(the layer before the policy and value heads, as in the I2A, so that A2C is
the I2A minus its model-based path; 0 leaves it out).
"""

import ml_collections

from configs.agents import common

PRESETS = common.PRESETS  # for --help (i2a/cli.py)


def network_config(preset: str) -> ml_collections.ConfigDict:
  """The A2C torso of each preset (the I2A's model-free path reuses it)."""
  if preset == "tiny":
    fields = dict(conv_channels=(8, 8), conv_kernels=(3, 3),
                  conv_strides=(1, 2), hidden=32, head_hidden=16)
  elif preset == "minipacman":  # 16x24 frames: small and fast.
    fields = dict(conv_channels=(16, 16), conv_kernels=(3, 3),
                  conv_strides=(1, 2), hidden=256, head_hidden=256)
  elif preset == "small":  # 104x80 -> 26x20 -> 13x10.
    fields = dict(conv_channels=(16, 32), conv_kernels=(8, 4),
                  conv_strides=(4, 2), hidden=256, head_hidden=256)
  else:  # paper: the DQN/A2C Atari torso.
    fields = dict(conv_channels=(32, 64, 64), conv_kernels=(8, 4, 3),
                  conv_strides=(4, 2, 1), hidden=512, head_hidden=256)
  return ml_collections.ConfigDict(fields)


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  config = common.make_config("a2c", preset, "configs/agents/a2c.py")
  config.network = network_config(config.preset)
  return config
