"""The runtime of `python -m i2a.plan`: evaluate the MPC planner on episodes.

Data flow: config.envmodel names a frozen export (`python -m i2a.pretrain`'s
WORKDIR/export) or 'oracle' (the emulator). Episodes are played under
config.protocol; the protocol the export was trained under (its
provenance, or protocol.json of the pretrain workdir next to it) must agree
with it (i2a/run/exports.py, `check_export`; config.allow_protocol_mismatch
for a deliberate transfer), the model's spec must fit the environment
(observation shape, action count), and a rerun in the workdir must use the
same export (identity.json): all refused before anything is written or
stepped. Then `num_envs` environments play `episodes` episodes (episode i
seeded EVAL_SEED + seed + i, as `python -m i2a.evaluate` seeds them; each
environment takes the next episode when its own ends), the planner
choosing the actions of all running environments in one batch every model
step (c primitive steps for a jumpy model). `config.policy =
'random'` plays the uniform random policy instead, on the same seeds: the
baseline.

Writes WORKDIR/{config.json, protocol.json, identity.json} and
WORKDIR/eval/scores.json (returns, lengths, mean, std, planning time per
env step, env steps/s, the model spec and planner settings),
eval/episode_000.gif (the first episode) and eval/episode_000.png (a strip
of its frames); prints a progress line (env steps, env steps/s, ETA) while
it runs.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import ml_collections
import numpy as np

import envmodels
from agents import builder
from agents.acting import FrameWindows, consecutive_offsets
from agents.planning import planner as planner_lib
from i2a import environments, io_utils, pictures, runs
from i2a.progress import Progress
from i2a.run import exports
from i2a.run.evaluate import EVAL_SEED, episode_scores, write_episode_video

ORACLE = "oracle"
POLICIES = ("cem", "random")
EVAL = "eval"
SCORES = "scores.json"
# Settings that change nothing about the experiment: a rerun in the same
# workdir may change them.
RERUNNABLE_FIELDS = ("episodes", "video_frames", "num_envs")
# Fields added since runs were first made, with their old meaning.
LEGACY_VALUES = {"allow_protocol_mismatch": False}


def check_export(config: ml_collections.ConfigDict,
                 protocol: environments.Protocol
                 ) -> Tuple[Dict[str, runs.Identity], str]:
  """(the workdir's identity record, where the export's protocol was read:
  'config' when there is no export): config.envmodel's protocol checked
  against `protocol` (exports.check_export). Writes nothing."""
  export_dir = config.envmodel
  if (config.policy != "cem" or not export_dir or export_dir == ORACLE or
      not os.path.isdir(export_dir)):  # load_model says what is missing
    return {}, "config"
  identity = exports.check_export(config, protocol)
  _, source = exports.export_protocol(export_dir)
  return {exports.ENVMODEL_IDENTITY: identity}, source or "config"


def load_model(config: ml_collections.ConfigDict,
               protocol: environments.Protocol) -> envmodels.EnvModel:
  """The model config.envmodel names, refused unless it fits `protocol`."""
  export_dir = config.envmodel
  if not export_dir:
    raise ValueError(
        "the planner needs an environment model: pass "
        "--config.envmodel=EXPORT_DIR (python -m i2a.pretrain writes "
        "WORKDIR/export) or --config.envmodel=oracle (the emulator); or "
        "--config.policy=random for the random baseline.")
  if export_dir == ORACLE:
    return builder.make_oracle(protocol, jump=config.oracle_jump,
                               seed=config.seed)
  if not os.path.isdir(export_dir):
    raise ValueError(f"the environment model export {export_dir!r} does not "
                     "exist; pass --config.envmodel=DIR, the export of "
                     "python -m i2a.pretrain (WORKDIR/export), or 'oracle'.")
  model = builder.load_envmodel(export_dir, protocol,
                                environments.num_actions(protocol),
                                seed=config.seed)
  if model.spec.action_free:
    raise ValueError(
        f"the environment model {export_dir!r} is action-free (spec "
        f"{model.spec.to_json()}): its predictions ignore the actions, so "
        "there is nothing to plan. Use an action-conditional export.")
  return model


def make_policy(config: ml_collections.ConfigDict,
                protocol: environments.Protocol) -> Any:
  """CEMPlanner over config.envmodel, or the uniform random baseline."""
  if config.policy not in POLICIES:
    raise ValueError(f"config.policy must be one of {POLICIES}, given "
                     f"{config.policy!r}.")
  if config.policy == "random":
    return planner_lib.UniformRandomPolicy(environments.num_actions(protocol),
                                           seed=config.seed)
  model = load_model(config, protocol)
  return planner_lib.CEMPlanner(
      model, planner_lib.PlannerConfig.from_config(config.planner),
      seed=config.seed)


@dataclasses.dataclass
class _Slot:
  """One environment and the episode it is playing."""
  env: Any
  episode: int = -1  # index of the episode being played; -1: none left
  episode_return: float = 0.0
  length: int = 0
  windows: Optional[FrameWindows] = None


@dataclasses.dataclass
class EpisodeStats:
  returns: List[float]
  lengths: List[int]
  seeds: List[int]
  env_steps: int
  plan_seconds: float  # time inside policy.act, but for its first call
  planned_env_steps: int  # env steps of every call but the first
  first_plan_seconds: float  # the first call (tf.function tracing)
  wall_seconds: float
  frames: List[np.ndarray]  # episode 0's frames, observation by observation

  @property
  def plan_seconds_per_env_step(self) -> float:
    """Planning time per env step over all environments, the first call
    (which traces a learned model's tf.function) left out."""
    if not self.planned_env_steps:  # a single call
      return self.first_plan_seconds / max(1, self.env_steps)
    return self.plan_seconds / self.planned_env_steps


def run_episodes(policy: Any, protocol: environments.Protocol, episodes: int,
                 num_envs: int = 1, seed: int = 0, max_episode_steps: int = 0,
                 video_frames: int = 400, name: str = "plan"
                 ) -> EpisodeStats:
  """Plays `episodes` episodes with `policy` (CEMPlanner or
  UniformRandomPolicy) on up to `num_envs` environments at once.

  Every call of policy.act covers all running environments (context
  windows [N, k, H, W, C] and the live envs) and returns [N, c] primitive
  actions; an episode that ends inside the c actions stops there.
  `max_episode_steps` > 0 truncates episodes early (on top of the
  protocol's own cap).
  """
  if episodes < 1 or num_envs < 1:
    raise ValueError(f"episodes and num_envs must be >= 1, given {episodes} "
                     f"and {num_envs}.")
  slots = [_Slot(environments.make_env(protocol))
           for _ in range(min(num_envs, episodes))]
  seeds = [EVAL_SEED + seed + i for i in range(episodes)]
  returns: List[Optional[float]] = [None] * episodes
  lengths: List[Optional[int]] = [None] * episodes
  frames: List[np.ndarray] = []
  cap = max_episode_steps or protocol.max_episode_frames
  progress = Progress(name, total=episodes * cap, unit="env steps")
  next_episode = 0
  plan_seconds, env_steps, planned_env_steps = 0.0, 0, 0
  first_plan_seconds: Optional[float] = None
  started = time.monotonic()

  def start(slot: _Slot) -> None:
    nonlocal next_episode
    if next_episode >= episodes:
      slot.episode = -1
      return
    slot.episode, next_episode = next_episode, next_episode + 1
    observation, _ = slot.env.reset(seed=seeds[slot.episode])
    slot.episode_return, slot.length = 0.0, 0
    # The planner acts once per model step (c primitive steps): its
    # consecutive windows are the model's c-spaced context.
    slot.windows = FrameWindows(observation[None],
                                consecutive_offsets(policy.context_length))
    if slot.episode == 0:
      frames.append(observation)

  try:
    for slot in slots:
      start(slot)
    while True:
      active = [slot for slot in slots if slot.episode >= 0]
      if not active:
        break
      context = np.concatenate([slot.windows.frames for slot in active])
      tick = time.perf_counter()
      actions = np.asarray(policy.act(context, [s.env for s in active]))
      elapsed = time.perf_counter() - tick
      steps_before = env_steps
      for slot, chunk in zip(active, actions):
        ended = False
        for action in chunk:
          observation, reward, terminated, truncated, _ = slot.env.step(
              int(action))
          slot.episode_return += float(reward)
          slot.length += 1
          env_steps += 1
          if slot.episode == 0 and len(frames) < video_frames:
            frames.append(observation)
          ended = (terminated or truncated or
                   (max_episode_steps and slot.length >= max_episode_steps))
          if ended:
            break
        if ended:
          returns[slot.episode] = slot.episode_return
          lengths[slot.episode] = slot.length
          start(slot)
        else:
          slot.windows.push(observation[None], np.array([False]))
      if first_plan_seconds is None:
        first_plan_seconds = elapsed
      else:
        plan_seconds += elapsed
        planned_env_steps += env_steps - steps_before
      done_lengths = [n for n in lengths if n is not None]
      typical = float(np.mean(done_lengths)) if done_lengths else cap
      progress.total = int(max(env_steps, round(episodes * typical)))
      progress.update(
          env_steps - progress.done,
          episodes=f"{len(done_lengths)}/{episodes}",
          plan_ms=1e3 * plan_seconds / max(1, planned_env_steps))
  finally:
    for slot in slots:
      slot.env.close()
  stats = EpisodeStats(
      returns=[float(r) for r in returns], lengths=[int(n) for n in lengths],
      seeds=seeds, env_steps=env_steps, plan_seconds=plan_seconds,
      planned_env_steps=planned_env_steps,
      first_plan_seconds=first_plan_seconds or 0.0,
      wall_seconds=time.monotonic() - started, frames=frames)
  progress.close(plan_ms=1e3 * stats.plan_seconds_per_env_step)
  return stats


def uniform_random_returns(protocol: environments.Protocol, episodes: int,
                           seed: int = 0) -> List[float]:
  """The uniform random policy's returns (planner_lib.UniformRandomPolicy
  seeded `seed`, one environment) on `python -m i2a.evaluate`'s episode
  seeds: the baseline that learning checks and benchmarks compare agents
  against."""
  policy = planner_lib.UniformRandomPolicy(environments.num_actions(protocol),
                                           seed=seed)
  return run_episodes(policy, protocol, episodes, num_envs=1, seed=seed,
                      video_frames=0, name="random baseline").returns


def run(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, Any]:
  """Evaluates config.policy for config.episodes episodes; writes eval/."""
  protocol = runs.protocol_from_config(config)
  identity, protocol_source = check_export(config, protocol)
  runs.use_precision(config)
  policy = make_policy(config, protocol)  # refuses a misfit model up front
  workdir = runs.prepare_workdir(workdir, config, protocol,
                                 ignore=RERUNNABLE_FIELDS,
                                 legacy=LEGACY_VALUES, identity=identity)
  model = getattr(policy, "model", None)
  label = (f"plan {model.spec.kind}" if model is not None else
           f"plan {config.policy}")
  try:
    stats = run_episodes(policy, protocol, int(config.episodes),
                         int(config.num_envs), int(config.seed),
                         int(config.max_episode_steps),
                         int(config.video_frames), name=label)
  finally:
    if model is not None and hasattr(model, "close"):
      model.close()  # the oracle's worker environment
  out_dir = io_utils.ensure_writable_dir(os.path.join(workdir, EVAL),
                                         "eval directory")
  gif, strip = write_episode_video(
      out_dir, [pictures.upscale(frame) for frame in stats.frames])
  scores = dict(
      **episode_scores(stats.returns, stats.lengths, stats.seeds),
      env_steps=stats.env_steps,
      plan_seconds_per_env_step=stats.plan_seconds_per_env_step,
      first_plan_seconds=stats.first_plan_seconds,
      env_steps_per_s=stats.env_steps / max(stats.wall_seconds, 1e-9),
      wall_seconds=stats.wall_seconds, policy=config.policy,
      envmodel=config.envmodel if config.policy == "cem" else "",
      model_spec=model.spec.to_json() if model is not None else None,
      planner=(dataclasses.asdict(policy.config) if model is not None
               else None),
      num_samples=getattr(policy, "num_samples", None),
      env_id=protocol.env_id, protocol_source=protocol_source,
      max_episode_steps=int(config.max_episode_steps), video=gif,
      strip=strip)
  io_utils.atomic_write_json(os.path.join(out_dir, SCORES), scores)
  return scores
