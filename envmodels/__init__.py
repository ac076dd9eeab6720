"""envmodels: fast generative environment models (Buesing et al. 2018).

Public API (the contract in README.md, "envmodels"):
  envmodels.load(export_dir) -> frozen EnvModel
  envmodels.build(spec, **hyperparameters) -> trainable EnvModel
  EnvModelSpec, EnvModel, LiveEnvModel, StepOutput, Rollout, LossOutput,
  kinds(), register(kind)(cls) (a kind from outside the package)
Imports TensorFlow, Sonnet and TFP only: never agents/ or i2a/.
"""

from envmodels.versions import check_versions

check_versions()

# pylint: disable=wrong-import-position
from envmodels.base import (EnvModel, EnvModelSpec, LiveEnvModel,
                            LossOutput, Rollout, StepOutput, FORMAT_VERSION,
                            tile_state)
from envmodels.registry import build, kinds, model_class, register
from envmodels import pixel_models  # noqa: F401  (registers its kinds)
from envmodels import state_space  # noqa: F401  (registers its kinds)
from envmodels.export import (export, load, ExportError, fingerprint,
                               provenance, read_spec)

__all__ = [
    "EnvModel", "EnvModelSpec", "LiveEnvModel", "tile_state", "LossOutput",
    "Rollout", "StepOutput",
    "FORMAT_VERSION", "build", "kinds", "model_class", "register", "export",
    "load", "ExportError", "fingerprint", "provenance", "read_spec",
]
