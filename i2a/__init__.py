"""i2a: the runtime around environment models and agents.

Environments with a recorded protocol (i2a.environments), the Reverb
experience layer (i2a.replay) and the absl binaries (python -m i2a.collect,
i2a.pretrain, i2a.evaluate_models, ..., or the console scripts i2a-collect,
...; shared command line in i2a/cli.py). Importing it checks the whole
pinned stack first (i2a/versions.py: TF, TFP, Sonnet, Reverb, gymnasium)
and loads TensorFlow quietly (i2a/startup.py: TF_CPP_MIN_LOG_LEVEL
defaults to 2).
"""

from i2a import startup

startup.default_log_level()
with startup.quiet_tensorflow_import():
  from i2a.versions import check_versions  # loads TensorFlow

check_versions()

__version__ = "0.1.0"
