"""Table 1 of Buesing et al. (2018) at the `small` preset, 2 seeds.

  python -m i2a.sweep --grid=configs/sweeps/table1_small.py \
      --workdir=sweeps/table1_small [--grid.pretrain_steps=3000]

An A2C agent is trained on MsPacman first (`behaviour_env_steps`, the
`small` preset); one dataset (104x80, the `small` protocol) is collected
with its newest checkpoint, mixed with uniform random actions
(`policy_epsilon` per env step: the data covers what a playing agent sees
and what it does not do); then the VAE baseline, AR, RAR, dSSM-DET, dSSM-VAE and
sSSM (one frame per step) and the jumpy dSSM-DET and sSSM (c = 3) are
pretrained on it with one budget (`pretrain_steps` of batch 16, T = 10
after 3 context frames), 2 seeds each (model seed s on the same data), and
each seed's eight models are compared in one `evaluate_models` run:
held-out nats per frame, improvement over the VAE baseline (between models
of one jump) and rollout time relative to AR. Estimated compute on 2 CPU
cores: docs/experiments.md.

Presets: small (the experiment), tiny (the same grid on MiniPacman with
the tiny models, one seed, a few steps: the tests).
"""

import ml_collections

from configs import common

PRESETS = ("small", "tiny")
# name: (envmodel config file, jump c)
MODELS = (("vae", "vae", 1), ("ar", "ar", 1), ("rar", "rar", 1),
          ("dssm_det", "dssm_det", 1), ("dssm_vae", "dssm_vae", 1),
          ("sssm", "sssm", 1), ("jumpy_dssm_det", "dssm_det", 3),
          ("jumpy_sssm", "sssm", 3))


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  preset = common.check_preset(preset, PRESETS,
                               "configs/sweeps/table1_small.py")
  tiny = preset == "tiny"
  grid = ml_collections.ConfigDict()
  grid.name = f"table1_{preset}"
  grid.seeds = (0,) if tiny else (0, 1)
  # One pretraining budget for every model (steps of batch_size windows).
  grid.pretrain_steps = 4 if tiny else 1_000
  grid.batch_size = 4 if tiny else 16
  grid.behaviour_env_steps = 36 if tiny else 500_000
  grid.policy_epsilon = 0.2
  # The behaviour policy: one A2C run (seed 0) for every model seed.
  grid.train = (dict(
      name="behaviour", config=f"configs/agents/a2c.py:{preset}", seeds=(0,),
      overrides=dict(env_steps=grid.get_ref("behaviour_env_steps"),
                     # The collection's protocol (the tiny agents' episodes
                     # are too short for the jumpy models' windows).
                     **(dict(protocol=dict(max_episode_frames=1000)) if tiny
                        else {}))),)
  grid.evaluate = dict(episodes=1 if tiny else 10)
  grid.collect = (dict(
      name="behaviour", config=f"configs/collect.py:{preset}",
      policy="train/behaviour",
      overrides=dict(train_steps=600 if tiny else 50_000,
                     test_steps=200 if tiny else 5_000,
                     policy_epsilon=grid.get_ref("policy_epsilon"))),)
  grid.pretrain = tuple(
      dict(name=name, config=f"configs/envmodels/{kind}.py:{preset}",
           data="collect/behaviour",
           overrides=dict(jump=jump,
                          train_steps=grid.get_ref("pretrain_steps"),
                          batch_size=grid.get_ref("batch_size"),
                          eval_windows=8 if tiny else 256,
                          checkpoint_every=4 if tiny else 100))
      for name, kind, jump in MODELS)
  # Per seed: the eight models of that seed on the same held-out windows,
  # their rollouts timed round-robin in one process.
  grid.evaluate_models = (dict(
      name="table1", models=tuple(f"pretrain/{name}" for name, _, _ in MODELS),
      data="collect/behaviour", T=3 if tiny else 10,
      num_windows=8 if tiny else 256, batch_size=4 if tiny else 16,
      horizon=3 if tiny else 12, rollout_batch=4 if tiny else 32),)
  return grid
