"""i2a: the runtime around environment models and agents.

Environments with a recorded protocol (i2a.environments), the Reverb
experience layer (i2a.replay) and the absl binaries (python -m i2a.collect,
i2a.pretrain, i2a.evaluate_models, ...). Importing it checks the whole
pinned stack first (i2a/versions.py: TF, TFP, Sonnet, Reverb, gymnasium).
"""

from i2a.versions import check_versions

check_versions()

__version__ = "0.1.0"
