"""The training config shared by every agent's config file.

  python -m i2a.train --config=configs/agents/a2c.py:minipacman --workdir=DIR

`make_config(agent, preset, config_file)` holds everything the runtime
(i2a/run/train.py) reads: the protocol, the actor (environments, unroll
length), the learner (batch, loss, optimizer), the budget and the cadence of
logs, checkpoints and plots. An agent's config file adds its network fields
under `config.network` (read by the network factory registered under
`config.agent`, agents/builder.py).

Presets: tiny (tests: MiniPacman, 2 envs, tiny networks, a few updates),
minipacman (MiniPacman-avoid-v0, the CPU learning check), small (MsPacman
104x80, 5 actions, a CPU run), paper (MsPacman 200x160, the papers' scale).
"""

from __future__ import annotations

import ml_collections

from configs import common

PRESETS = ("small", "tiny", "minipacman", "paper")



def make_config(agent: str, preset: str,
                config_file: str) -> ml_collections.ConfigDict:
  preset = common.check_preset(preset, PRESETS, config_file)
  config = ml_collections.ConfigDict()
  config.preset = preset
  config.agent = agent  # a name in agents.builder.network_names()
  config.protocol = common.protocol_config(
      {"tiny": "minipacman"}.get(preset, preset))
  config.seed = 0  # network init, action sampling; env i is seeded seed + i
  # Compute precision (envmodels/precision.py): 'auto' is bf16 on CPUs with
  # AMX/AVX512-BF16 (fp32 variables and losses), else fp32; 'fp32', 'bf16',
  # 'fp16' (GPU). What it resolved to goes into WORKDIR/precision.json.
  config.precision = "auto"
  # TensorFlow's thread pools (envmodels/precision.py): 'auto' (intra = the
  # physical cores, inter = 2), 'default' (TF's own) or 'INTRA,INTER'.
  # Speed only: a resumed run may change it. Recorded in precision.json.
  config.threads = "auto"
  # An environment model export (`python -m i2a.pretrain`, WORKDIR/export):
  # '' for model-free agents; I2A configs require one.
  config.envmodel = ""
  # The export's protocol (recorded by i2a.pretrain) must agree with
  # config.protocol on what the model sees (Protocol.MODEL_FIELDS); True
  # runs it under another protocol on purpose (a transfer experiment).
  config.allow_protocol_mismatch = False
  config.context_length = 1  # frames per observation window (oldest first)
  # Actor: num_envs environments, unrolls of unroll_length steps each.
  config.num_envs = 16
  config.unroll_length = 5
  # Learner: batch_size unrolls per update (a multiple of num_envs: the
  # embedded mode runs batch_size // num_envs actor unrolls per update, and
  # the Reverb queue's items hold several environments' unrolls).
  config.batch_size = 16
  # The Reverb `unrolls` queue's capacity (unrolls; a multiple of num_envs).
  config.queue_size = 64
  # The embedded runtime only (i2a/run/train.py LearnerLoop.update): False
  # acts each update's unrolls, then learns on them (synchronous A2C);
  # True acts the next update's unrolls in a thread while the learner
  # steps (the actor's policy then lags the learner's by one update, as
  # the distributed actors' do; both cores busy at once).
  config.overlap_acting = False
  # reward_clipping: what the loss trains on, 'sign' (the A2C/I2A papers'
  # clipping to {-1, 0, 1}) or 'none'; unrolls and episode returns keep the
  # game's points (agents/learning.py).
  config.loss = ml_collections.ConfigDict(dict(
      discount=0.99, value_coef=0.5, entropy_coef=0.01,
      reward_clipping="sign"))
  config.optimizer = ml_collections.ConfigDict(dict(
      learning_rate=7e-4, decay=0.99, epsilon=1e-5, clip_norm=0.5))
  config.network = ml_collections.ConfigDict()  # the agent's config fills it
  # Budget, in environment (agent) steps over all environments. It and the
  # cadence below may change on resume (i2a.run.train.RESUMABLE_FIELDS);
  # any other change is refused (a different experiment).
  config.env_steps = 2_000_000
  # Cadence, in learner steps.
  config.log_every = 100
  config.checkpoint_every = 2_000
  config.keep_checkpoints = 3
  config.plot_every = 2_000
  config.eval_episodes = 10  # default of `python -m i2a.evaluate`
  # Evaluation during training (i2a/run/evaluate.py TrainingEvaluation):
  # every eval_every environment steps (0: off) and at the end of the
  # budget, eval_episodes episodes of environments of its own (the seeds of
  # `python -m i2a.evaluate`), sampled or greedy (eval_greedy), into
  # eval.csv and TensorBoard's eval/... at the env step. They may change on
  # resume.
  config.eval_every = 100_000
  config.eval_greedy = False
  if preset in ("tiny", "minipacman"):
    # MiniPacman's rewards are small and their sizes are the task (avoid:
    # food 0.1, killed -20): the I2A paper trains on them unclipped.
    config.loss.reward_clipping = "none"
  if preset == "tiny":
    config.precision = "fp32"  # tests compare exact numbers
    config.protocol.env_id = "MiniPacman-avoid-v0"
    config.protocol.max_episode_frames = 12  # episodes end within a test
    config.num_envs = 2
    config.unroll_length = 3
    config.batch_size = 2
    config.queue_size = 8
    config.env_steps = 36
    config.log_every = 2
    config.checkpoint_every = 3
    config.plot_every = 3
    config.eval_episodes = 2
    config.eval_every = 12
  elif preset == "minipacman":
    config.protocol.env_id = "MiniPacman-avoid-v0"
    # Measured (docs/agents.md): with 7e-4 / 0.01 A2C's policy collapses
    # early on avoid; these learn within 200k steps over seeds 0 and 1.
    config.optimizer.learning_rate = 2e-3
    config.loss.entropy_coef = 0.03
    config.env_steps = 1_000_000
    config.log_every = 50
    config.checkpoint_every = 1_000
    config.plot_every = 500
  elif preset == "small":
    config.env_steps = 10_000_000
    config.eval_every = 500_000
  elif preset == "paper":
    config.env_steps = 50_000_000
    config.eval_every = 1_000_000
    config.checkpoint_every = 10_000
    config.plot_every = 10_000
  return config
