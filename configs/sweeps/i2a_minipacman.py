"""The I2A claims on MiniPacman, 3 seeds each (Weber et al. 2017;
Buesing et al. 2018): does imagination help, and which rollout policy,
model and imagination?

  python -m i2a.sweep --grid=configs/sweeps/i2a_minipacman.py[:regular] \
      --workdir=sweeps/i2a_minipacman[_regular] [--grid.env_steps=2000000] \
      [--grid.learning_rate=7e-4] [--grid.entropy_coef=0.1]

One random-policy dataset of the preset's MiniPacman task; a dSSM-DET, an sSSM and an
action-free sSSM pretrained on it per seed (model seed s for agent seed s:
the intervals include the model's seed); then, each for `env_steps` env
steps (the `minipacman` agent preset: lr 2e-3, entropy 0.03, 16 envs x 5
steps) and evaluated over `episodes` episodes (the same episode seeds for
every run):
  a2c                 the model-free baseline (the I2A minus imagination)
  copy_model          I2A whose imagination repeats the current state
  distill_dssm_det    I2A, distillation rollout policy, dSSM-DET
  distill_sssm        the same over the sSSM
  learning_to_query   pi_r trained through the dSSM-DET by the policy
                      gradient
  imagination_prior   a learned prior p_imag over the action-free sSSM
  uniform_rollouts    uniform random rollout actions, dSSM-DET
  pixel_imagination   distillation, dSSM-DET, rendered frames imagined
  emulator_oracle     the emulator's own rollouts (the upper reference)
  depth_1, depth_2,   the rollout depth (claim 3): distill_dssm_det with
  depth_4             tau = 1, 2, 4 model steps (distill_dssm_det: 3)
The regular preset adds, since its sSSMs' posterior collapsed at this
budget (KL to the prior 1e-4 nats per step; docs/results.md), an sSSM and
an action-free sSSM trained with FREE_NATS free nats per step (their names
end in `_free_nats`) and the two agents over them:
  distill_sssm_free_nats, imagination_prior_free_nats
`learning_rate` and `entropy_coef`, unset by default, set every agent's
learning rate and entropy cost in place of its preset's (not the
`behaviour` run's, whose data the models learn from); give the grid a
sweep directory of its own, as for another `env_steps`. Estimated compute
on 2 CPU cores: docs/experiments.md.

Presets: minipacman (the experiment on MiniPacman-avoid), regular (the
same grid on MiniPacman-regular: on avoid every agent, the emulator oracle
included, settles on standing still within 1M env steps, so the agents
cannot differ there; docs/results.md), hunt (the regular preset's grid,
free-nats models and agents included, on MiniPacman-hunt: rewards only for
power pills (1) and eaten ghosts (10), -20 for being caught, levels of at
most 80 steps: a task that rewards planning around the ghosts),
regular_agent_data (on regular,
distillation over dSSM-DETs pretrained on a playing agent's data instead
of the random policy's: an A2C `behaviour` run of `behaviour_env_steps`
(seed 0), whose newest checkpoint collects the data with
`policy_epsilon` uniform random actions, as Table 1's grid collects its
MsPacman data; the random policy's dSSM-DETs fail on the states a playing
agent reaches, docs/results.md), tiny (the grid with the tiny presets on
avoid, one seed, a few updates: the tests).
"""

from typing import Callable

import ml_collections
from ml_collections import config_dict

from configs import common

PRESETS = ("minipacman", "regular", "hunt", "regular_agent_data", "tiny")
# The MiniPacman task of each preset (the agent and collect presets'
# default is avoid).
TASKS = {"minipacman": "avoid", "regular": "regular", "hunt": "hunt",
         "regular_agent_data": "regular", "tiny": "avoid"}
# The presets that add the free-nats sSSMs and the agents over them.
FREE_NATS_PRESETS = ("regular", "hunt")
A2C = "configs/agents/a2c.py"
I2A = "configs/agents/i2a.py"
# Free nats per step (summed over the latent map) of the regular preset's
# `_free_nats` sSSMs: a probe at 3 kept 2.66 nats per step of KL and fit
# frames and rewards better (docs/results.md, "Shipped models").
FREE_NATS = 3.0


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  preset = common.check_preset(preset, PRESETS,
                               "configs/sweeps/i2a_minipacman.py")
  tiny = preset == "tiny"
  task = TASKS[preset]
  # Runs of the other presets keep their names; `regular`,
  # `regular_agent_data` and `hunt` run the `minipacman` presets of every
  # stage on their tasks.
  stage_preset = ("minipacman" if preset in (
      "regular", "regular_agent_data", "hunt") else preset)
  protocol = dict(env_id=f"MiniPacman-{task}-v0")
  grid = ml_collections.ConfigDict()
  grid.name = f"i2a_minipacman_{preset}"
  grid.seeds = (0,) if tiny else (0, 1, 2)
  grid.env_steps = 36 if tiny else 1_000_000  # every agent, every seed
  # Every agent's learning rate and entropy cost; unset: each preset's own.
  grid.learning_rate = config_dict.placeholder(float)
  grid.entropy_coef = config_dict.placeholder(float)
  grid.pretrain_steps = 4 if tiny else 5_000
  grid.collect = (dict(
      name="random", config=f"configs/collect.py:{stage_preset}",
      overrides=dict(train_steps=600 if tiny else 50_000,
                     test_steps=200 if tiny else 5_000,
                     protocol=protocol)),)

  def model(kind, suffix="", **loss):
    overrides = dict(train_steps=grid.get_ref("pretrain_steps"))
    if loss:
      overrides["loss"] = loss
    return dict(name=kind + suffix,
                config=f"configs/envmodels/{kind}.py:{stage_preset}",
                data=f"collect/{grid.collect[0]['name']}",
                overrides=overrides)

  def agent(name, config, envmodel="", **network):
    overrides = dict(env_steps=grid.get_ref("env_steps"), protocol=protocol,
                     optimizer=dict(learning_rate=grid.get_ref(
                         "learning_rate")),
                     loss=dict(entropy_coef=grid.get_ref("entropy_coef")))
    if network:
      overrides["network"] = network
    return dict(name=name, config=f"{config}:{stage_preset}",
                envmodel=envmodel,
                overrides=overrides)

  if preset == "regular_agent_data":
    return _agent_data_grid(grid, protocol, model, agent)
  grid.pretrain = tuple(model(kind) for kind in
                        ("dssm_det", "sssm", "sssm_action_free"))
  if preset in FREE_NATS_PRESETS:
    grid.pretrain += tuple(model(kind, "_free_nats", free_nats=FREE_NATS)
                           for kind in ("sssm", "sssm_action_free"))
  grid.train = (
      agent("a2c", A2C),
      agent("copy_model", I2A, "pretrain/dssm_det", model="copy"),
      agent("distill_dssm_det", I2A, "pretrain/dssm_det"),
      agent("distill_sssm", I2A, "pretrain/sssm"),
      agent("learning_to_query", I2A, "pretrain/dssm_det",
            rollout_policy="learning_to_query"),
      agent("imagination_prior", I2A, "pretrain/sssm_action_free",
            rollout_policy="imagination_prior"),
      agent("uniform_rollouts", I2A, "pretrain/dssm_det",
            rollout_policy="random"),
      agent("pixel_imagination", I2A, "pretrain/dssm_det",
            imagination="pixels"),
      agent("emulator_oracle", I2A, model="oracle"),
  ) + tuple(agent(f"depth_{tau}", I2A, "pretrain/dssm_det", depth=tau)
            for tau in ((1,) if tiny else (1, 2, 4)))
  if preset in FREE_NATS_PRESETS:
    grid.train += (
        agent("distill_sssm_free_nats", I2A, "pretrain/sssm_free_nats"),
        agent("imagination_prior_free_nats", I2A,
              "pretrain/sssm_action_free_free_nats",
              rollout_policy="imagination_prior"))
  grid.evaluate = dict(episodes=2 if tiny else 100)
  return grid


def _agent_data_grid(grid: ml_collections.ConfigDict, protocol: dict,
                     model: Callable[..., dict], agent: Callable[..., dict]
                     ) -> ml_collections.ConfigDict:
  """The `regular_agent_data` preset: the data from a playing agent."""
  grid.name = "i2a_minipacman_regular_agent_data"
  grid.behaviour_env_steps = 1_000_000
  grid.policy_epsilon = 0.2
  grid.collect = (dict(
      name="behaviour", config="configs/collect.py:minipacman",
      policy="train/behaviour",
      overrides=dict(train_steps=50_000, test_steps=5_000, protocol=protocol,
                     policy_epsilon=grid.get_ref("policy_epsilon"))),)
  grid.pretrain = (model("dssm_det"),)
  behaviour = agent("behaviour", A2C)
  behaviour["seeds"] = (0,)
  behaviour["overrides"]["env_steps"] = grid.get_ref("behaviour_env_steps")
  del behaviour["overrides"]["optimizer"]  # the data's agent as before
  del behaviour["overrides"]["loss"]
  grid.train = (behaviour,
                agent("distill_dssm_det", I2A, "pretrain/dssm_det"))
  grid.evaluate = dict(episodes=100)
  return grid
