"""envmodels: fast generative environment models (Buesing et al. 2018).

Public API (the contract in README.md, "envmodels"):
  envmodels.load(export_dir) -> frozen EnvModel
  envmodels.build(spec, **hyperparameters) -> trainable EnvModel
  EnvModelSpec, EnvModel, StepOutput, Rollout, LossOutput, kinds()
Imports TensorFlow, Sonnet and TFP only: never agents/ or i2a/.
"""

from envmodels.versions import check_versions

check_versions()

# pylint: disable=wrong-import-position
from envmodels.base import (EnvModel, EnvModelSpec, LossOutput, Rollout,
                            StepOutput, FORMAT_VERSION)
from envmodels.registry import build, kinds, model_class, register
from envmodels import pixel_models  # noqa: F401  (registers its kinds)
from envmodels import state_space  # noqa: F401  (registers its kinds)
from envmodels.export import (export, load, ExportError, fingerprint,
                               provenance, read_spec)

__all__ = [
    "EnvModel", "EnvModelSpec", "LossOutput", "Rollout", "StepOutput",
    "FORMAT_VERSION", "build", "kinds", "model_class", "register", "export",
    "load", "ExportError", "fingerprint", "provenance", "read_spec",
]
