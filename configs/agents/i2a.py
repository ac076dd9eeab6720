"""I2A (agents/imagination): model-free path + K imagined rollouts of a
frozen environment model, with a choice of rollout policy and baselines.

  python -m i2a.train --config=configs/agents/i2a.py:minipacman \
      --config.envmodel=PRETRAIN_WORKDIR/export --workdir=DIR \
      --config.network.rollout_policy=learning_to_query

Presets (configs/agents/common.py): tiny, minipacman, small, paper.
config.context_length must equal the envmodel's (3 for every envmodel
preset). Network fields (config.network):
  rollout_policy   'distillation' (default; Weber et al. 2017),
                   'learning_to_query' (relaxed actions, policy gradient
                   through the model), 'imagination_prior' (needs an
                   action-free sSSM: configs/envmodels/sssm_action_free.py),
                   'random' (uniform).
  model            'pretrained' (config.envmodel), or the baselines
                   'untrained' (same kind/spec/sizes, random frozen
                   weights), 'copy' (every imagination is the initial
                   state), 'oracle' (the emulator, oracle_jump
                   primitive actions per step; the actor runs its rollouts
                   from snapshots of its environments: docs/agents.md).
  imagination      'abstract' (model state features) or 'pixels' (rendered
                   frames, a stronger summariser).
  num_rollouts     K (0: one per action); depth: tau model steps (each of
                   spec.jump primitive actions); fix_first_action: rollout
                   k starts with action k.
  distillation_weight (lambda_D), query_entropy_penalty: loss weights.
  reward_transform 'symlog' (default: the rollout encoder reads imagined
                   rewards as sign(r) log(1 + |r|), game points kept in
                   range) or 'none'.
  learner_rollouts 'auto' (default), 'actor' (the actor's rollouts are
                   stored with the unrolls and the learner reads them) or
                   'recompute' (the learner queries the model again);
                   'auto' stores them where no gradient passes through
                   the model (distillation, random) for abstract
                   imaginations, and always for the oracle.
  stored_features  'bfloat16' (default: half the bytes written and read;
                   what a bf16 run computes anyway) or 'float32' (exact)
                   for a learned model's stored rollouts.
  The model-free path is the A2C torso (configs/agents/a2c.py, fields
  conv_channels / conv_kernels / conv_strides / hidden) over the latest
  model_free_frames frames; head_hidden (the layer before the heads) is the
  A2C's too, so A2C is this network minus the model-based path.
"""

import ml_collections

from configs.agents import a2c
from configs.agents import common

PRESETS = common.PRESETS  # for --help (i2a/cli.py)


def network_config(preset: str) -> ml_collections.ConfigDict:
  """The I2A network of each preset (the model-free part is the A2C's)."""
  config = a2c.network_config(preset)
  config.update(dict(
      rollout_policy="distillation", model="pretrained",
      imagination="abstract", num_rollouts=0, depth=3, fix_first_action=True,
      model_free_frames=1, encoder_channels=(16, 16), encoder_strides=(1, 1),
      pixel_encoder_channels=(16, 16, 16), lstm_size=256,
      reward_transform="symlog",
      rollout_policy_channels=16, rollout_policy_hidden=64,
      distillation_weight=1.0, query_entropy_penalty=0.01, oracle_jump=1,
      learner_rollouts="auto", stored_features="bfloat16"))
  if preset == "tiny":
    config.update(dict(
        depth=2, encoder_channels=(4,), encoder_strides=(1,),
        pixel_encoder_channels=(4,), lstm_size=8,
        rollout_policy_channels=4, rollout_policy_hidden=8))
  elif preset == "minipacman":  # 16x24 frames, 2x3 model states
    config.update(dict(pixel_encoder_channels=(16, 16), lstm_size=128))
  elif preset == "small":  # 104x80 frames, 13x10 model states, jump 3
    config.update(dict(encoder_strides=(1, 2), oracle_jump=3))
  else:  # paper: 200x160 frames, 25x20 states; tau in {2, 3, 4}, and
    # Buesing et al. found the deepest (tau = 4: 48 env steps) best for
    # deterministic state-space models.
    config.update(dict(encoder_channels=(32, 32), encoder_strides=(1, 2),
                       oracle_jump=3, depth=4))
  return config


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  config = common.make_config("i2a", preset, "configs/agents/i2a.py")
  config.context_length = 3  # the envmodels' context frames
  config.network = network_config(config.preset)
  return config
