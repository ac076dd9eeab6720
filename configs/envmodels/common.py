"""The pretraining config shared by every envmodel kind's config file.

  python -m i2a.pretrain --config=configs/envmodels/dssm_det.py:small \
      --config.data=WORKDIR/dataset --workdir=DIR

Presets: tiny (tests; tiny sizes, a few steps), minipacman, small (MsPacman
104x80 on a CPU), paper (200x160, the paper's budget; for a GPU).

model.reward_scale is 'auto' in every preset: pretraining derives the scale
from the training split's rewards (docs/envmodels.md, "Reward coding"). A
number (--config.model.reward_scale=0.1) is checked against them instead.
"""

from __future__ import annotations

import ml_collections

from configs import common

PRESETS = ("small", "tiny", "minipacman", "paper")
# Kinds with a latent z (dssm_det computes its prior mean only).
LATENT_KINDS = ("vae", "dssm_det", "dssm_vae", "sssm")


def make_config(kind: str, preset: str, config_file: str,
                action_free: bool = False) -> ml_collections.ConfigDict:
  preset = common.check_preset(preset, PRESETS, config_file)
  config = ml_collections.ConfigDict()
  config.preset = preset
  config.kind = kind
  config.data = ""  # DATASET dir from `python -m i2a.collect` (required)
  config.seed = 0
  # Compute precision (envmodels/precision.py): 'auto' is bf16 on CPUs with
  # AMX/AVX512-BF16 (fp32 variables, losses, KL and likelihood sums), else
  # fp32; 'fp32', 'bf16', 'fp16' (GPU). Recorded in WORKDIR/precision.json
  # and in the export's spec.json.
  config.precision = "auto"
  # TensorFlow's thread pools (envmodels/precision.py): 'auto' (intra = the
  # physical cores, inter = 2), 'default' (TF's own) or 'INTRA,INTER'.
  # Speed only: a resumed run may change it. Recorded in precision.json.
  config.threads = "auto"
  # The sequence the model is trained on (Buesing et al.: 3 context frames,
  # T = 10, jump c = 3 for MS_PACMAN agents).
  config.context_length = 3
  config.T = 10
  config.jump = 3
  config.action_free = action_free
  # Architecture (EnvModel hyperparameters; defaults are the paper's sizes).
  config.model = ml_collections.ConfigDict(dict(
      state_channels=64, hidden_channels=32, encoder_channels=64,
      likelihood="bernoulli", image_std=0.1, bit_depth=8, reward_bits=8,
      # 'auto' or a number; derived from (or checked against) the data.
      reward_scale=ml_collections.FieldReference("auto", field_type=object)))
  if kind in LATENT_KINDS:  # dssm_det keeps the sSSM's parameters (fair).
    config.model.latent_channels = 32
    config.model.min_std = 0.1
  # Loss knobs (docs/envmodels.md).
  config.loss = ml_collections.ConfigDict(dict(
      kl_scale=1.0, free_nats=0.0, free_nats_per="step", global_kl_scale=0.0,
      overshooting=0))
  config.batch_size = 16
  config.learning_rate = 3e-4
  config.clip_norm = 100.0
  config.train_steps = 3000
  config.log_every = 50
  config.eval_every = 500
  config.eval_windows = 256
  config.image_every = 500
  config.checkpoint_every = 250
  config.keep_checkpoints = 3
  if preset == "tiny":
    config.precision = "fp32"  # tests compare exact numbers
    # 8 bits code MiniPacman-avoid's rewards (0.1 per food, -20 when
    # caught) at the derived scale 10, as in the minipacman preset.
    config.model.update(state_channels=8, hidden_channels=8,
                        encoder_channels=8, reward_bits=8)
    if "latent_channels" in config.model:
      config.model.latent_channels = 4
    config.context_length, config.T, config.jump = 3, 3, 1
    config.batch_size = 4
    config.train_steps = 12
    config.log_every = 4
    config.eval_every = 6
    config.eval_windows = 8
    config.image_every = 6
    config.checkpoint_every = 6
  elif preset == "minipacman":
    config.model.update(state_channels=32, hidden_channels=32,
                        encoder_channels=32, reward_bits=8)
    config.jump = 1
    config.learning_rate = 1e-3
    config.train_steps = 5000
  elif preset == "paper":
    config.learning_rate = 1e-4
    config.train_steps = 1_000_000
    config.eval_every = 10_000
    config.image_every = 10_000
    config.checkpoint_every = 5_000
  return config
