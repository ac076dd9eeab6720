"""Learning checks (slow lane): I2A with a TRAINED envmodel, and I2A with
the emulator ORACLE, each beat the uniform random policy on
MiniPacman-avoid-v0 (where the ghost matters).

Trained model: the whole pipeline at a small budget: collect a
uniform-random dataset (i2a.run.collect, preset `minipacman`, 20k train / 2k
test steps), pretrain a small dSSM-DET (i2a.run.pretrain, preset
`minipacman`: 32 channels, jump 1, 500 steps), train I2A-distillation on its
frozen export (i2a.run.train, preset `minipacman` of configs/agents/i2a.py,
unchanged), and evaluate it over the same 100 episodes as the uniform random
policy.

Oracle: the same I2A with `network.model=oracle`: the actor snapshots its
environments at every step and runs the K rollouts in the emulator (the
network's side inputs, stored with the unrolls for the learner).
"""

import os

import numpy as np
import pytest

import envmodels
from configs import collect as collect_config
from configs.agents import i2a as i2a_config
from configs.envmodels import dssm_det as dssm_det_config
from i2a import runs
from i2a.metrics import read_column
from i2a.replay import datasets, files
from i2a.run import collect as collection
from i2a.run import evaluate as evaluation
from i2a.run import plan as planning
from i2a.run import pretrain as pretraining
from i2a.run import train as training

PRETRAIN_STEPS = 500
ENV_STEPS = 100_000
EPISODES = 100
MARGIN = 1.5
ORACLE_ENV_STEPS = 100_000


def _open_loop_mse(export, data_dir, context_length, horizon, windows=256):
  """Held-out open-loop frame MSE of the model and of copying the last
  context frame (the check of tests/test_envmodel_learning.py)."""
  model = envmodels.load(export)
  test = datasets.window_sampler(files.split_path(data_dir, "test"),
                                 context_length + horizon, 1)
  held_out = test.gather(np.arange(min(windows, test.num_windows)))
  observation = held_out["observation"].astype(np.float32) / 255.0
  truth = observation[:, context_length:]
  predicted = model.diagnostics(held_out)["open_loop"].numpy()
  copy = np.repeat(observation[:, context_length - 1:context_length],
                   horizon, axis=1)
  return (float(np.mean((predicted - truth) ** 2)),
          float(np.mean((copy - truth) ** 2)))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 11 minutes on 2 busy cores
def test_i2a_with_a_trained_model_beats_the_random_policy_on_minipacman_avoid(
    tmp_path):
  """Collect 20k steps (10 s), pretrain dSSM-DET 500 steps (1.5 min),
  train I2A-distillation (the `minipacman` preset unchanged: 16 envs x 5
  steps, lr 2e-3, entropy 0.03, K = 5 rollouts of depth 3, abstract
  imaginations) for 100k env steps (1,250 updates) and evaluate over the
  same 100 episodes as the uniform random policy. About 7.5 minutes on
  the 2 cores (I2A ~420 env steps/s with the learner reading the actor's
  stored rollouts, ~220 when it recomputed them).

  Measured (evaluation mean +- standard error over the 100 episodes;
  random -14.82 +- 0.3, episodes of ~65 steps):
    this test, two runs (seed 0; the 500-step model: held-out -19.1 and
      -18.5 nats/frame, open-loop MSE 0.0037 / 0.0036 against 0.0050 for
      copying the last frame; it does not predict the ghost's kills yet;
      the runs differ slightly: CPU float reductions are not bit-exact)
                                              I2A -12.42 +- 0.18 (+2.40)
                                              I2A -12.30 +- 0.23 (+2.52)
    this test with stored rollouts (learner_rollouts='auto'; held-out
      -19.0 nats/frame, open-loop MSE 0.0037)   I2A -12.44 +- 0.18 (+2.38)
    same model, seed 1                        I2A -11.39 +- 0.42 (+3.43)
    300-step model, seed 0, 120k env steps    I2A  -9.94 +- 0.61 (+4.88)
    A2C (model-free, its preset), 100k steps  A2C -11.43 +- 0.40 (+3.39)
  At this budget I2A and A2C are both early in learning (A2C's own check
  trains 240k steps for +10); lr 7e-4 was tried for I2A (-10.83 / -12.78
  over seeds 0 / 1: no clear gain), so the preset is kept. Required:
  MARGIN = 1.5 points above random, about 3 standard errors of the
  difference (0.3 random, 0.2-0.6 agent) and below every measured run.
  """
  collect = collect_config.get_config("minipacman")
  collect.train_steps, collect.test_steps = 20_000, 2_000
  collection.run(collect, str(tmp_path / "collect"))
  data = str(tmp_path / "collect" / "dataset")

  pretrain = dssm_det_config.get_config("minipacman")
  pretrain.data, pretrain.jump = data, 1
  pretrain.train_steps = PRETRAIN_STEPS
  pretrain.eval_every = pretrain.image_every = PRETRAIN_STEPS
  pretrain.checkpoint_every, pretrain.eval_windows = PRETRAIN_STEPS, 128
  model_dir = str(tmp_path / "dssm_det")
  held_out = pretraining.run(pretrain, model_dir)
  export = os.path.join(model_dir, pretraining.EXPORT)
  model_mse, copy_mse = _open_loop_mse(export, data, pretrain.context_length,
                                       pretrain.T)
  assert model_mse < 0.9 * copy_mse, (model_mse, copy_mse)  # a usable model

  config = i2a_config.get_config("minipacman")
  assert config.network.rollout_policy == "distillation"
  assert config.network.model == "pretrained"
  config.envmodel = export
  config.env_steps = ENV_STEPS
  print(f"model: held-out {held_out['log_likelihood_per_frame']:.1f} "
        f"nats/frame, open-loop MSE {model_mse:.4f} (copy {copy_mse:.4f})")
  _train_and_beat_random(config, str(tmp_path / "i2a"))


def _train_and_beat_random(config, workdir):
  """Trains `config`, evaluates it over EPISODES episodes and requires
  MARGIN over the uniform random policy on the same episodes (as in
  tests/agents/test_training.py)."""
  config.log_every = 250
  random_mean = float(np.mean(planning.uniform_random_returns(
      runs.protocol_from_config(config), EPISODES)))
  summary = training.run(config, workdir)
  assert np.isfinite(read_column(os.path.join(workdir, "metrics.csv"),
                                 "auxiliary/distillation_cross_entropy")).all()
  scores = evaluation.evaluate(workdir, episodes=EPISODES)
  print(f"{config.network.model} model: random {random_mean:.2f}, I2A "
        f"{scores['mean']:.2f} (+- {scores['std'] / np.sqrt(EPISODES):.2f}),"
        f" training return {summary['recent_return']:.2f}, mean length "
        f"{np.mean(scores['lengths']):.0f}, "
        f"{summary['env_steps_per_s']:.0f} env steps/s")
  assert scores["mean"] >= random_mean + MARGIN, (scores["mean"], random_mean)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_i2a_with_the_emulator_oracle_beats_the_random_policy_on_minipacman_avoid(
    tmp_path):
  """I2A-distillation over the emulator oracle (the `minipacman` preset with
  network.model=oracle: K = 5 rollouts of depth 3 in the real game, abstract
  imaginations = space_to_depth(8) of the true frames) for ORACLE_ENV_STEPS
  env steps, evaluated over the same 100 episodes as the uniform random
  policy. About 13 minutes on the 2 cores shared with another slow check
  (150 env steps/s: the rollouts are 240 emulator steps, snapshots and
  restores per agent step, in Python).

  Measured (seed 0, mean +- standard error over the 100 episodes):
    random -14.82, I2A with the oracle -11.71 +- 0.47 (+3.11); training
    return -10.35 at the end, episodes of 87 steps on average.
  Required: MARGIN = 1.5 points above random, as for the trained model
  (about 3 standard errors of the difference).
  """
  config = i2a_config.get_config("minipacman")
  config.network.model = "oracle"
  config.env_steps = ORACLE_ENV_STEPS
  _train_and_beat_random(config, str(tmp_path / "i2a_oracle"))
