"""The runtime of `python -m i2a.evaluate`: a trained agent's scores and videos.

Data flow (docs/agents.md, "Evaluation"): the workdir of `python -m i2a.train`
gives the config (config.json), the protocol (protocol.json), a checkpoint
(the newest, or `checkpoint=STEP`'s) and, for agents that query one, the
envmodel export. The agent's network acts on frame windows exactly as the
actor does (FrameWindows, sample_actions), for N episodes seeded
EVAL_SEED + seed + episode (disjoint from the training envs' seeds), each
sampling its actions from a generator of its own, EVAL_ENVS of them at
once in one acting call per step: `run_episodes`, the one episode runner
of evaluations.

Each checkpoint's results are kept: WORKDIR/eval/step_<N>/ (N the
checkpoint's learner step) holds scores.json (returns, lengths, mean, std,
the checkpoint's learner and environment steps), a GIF of the first episode
(captioned with the actions by name) and a PNG strip of its frames, and for
an I2A its imagination at a few steps of the first episode
(imagination_stepNNNN.png: the K imagined rollouts, rendered by the model,
beside the real frames that followed). WORKDIR/eval/index.json lists every
evaluated checkpoint, and WORKDIR/eval/scores.json is a copy of the newest
checkpoint's scores (what the sweeps read). The scores also go to
TensorBoard (WORKDIR/tb/evaluate, `eval/...` at the checkpoint's
environment step, with the episode as an animation).

`TrainingEvaluation` is the same evaluation during training
(i2a/run/train.py `LearnerLoop`, config.eval_every): a copy of the
learner's network on environments of its own.

Under 'bf16' the evaluated network acts on bfloat16 copies of its weights
(envmodels/precision.py WeightCopies: the same values as the rewrite's
casts at every step; the MiniPacman I2A's one-window act 1.36x faster,
docs/performance.md): `load_agent`'s copies are made of the restored
weights, which nothing changes after; `TrainingEvaluation` refreshes its
copies after each copy of the learner's weights.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import ml_collections
import numpy as np
import tensorflow as tf

from agents.acting import (FrameWindows, imagine_quietly, random_generators,
                           sample_actions)
from agents.base import ActorCriticNetwork
from envmodels import precision
from i2a import environments, io_utils, pictures, runs
from i2a.metrics import MetricsLog
from i2a.run import exports
from i2a.run.train import CHECKPOINTS, role_envmodel, role_network

EVAL = "eval"
SCORES = "scores.json"
INDEX = "index.json"  # eval/index.json: every evaluated checkpoint
STEP_DIR = "step_{step}"  # eval/step_<learner step>/
TENSORBOARD = os.path.join("tb", "evaluate")
EVAL_SEED = 10_000_000  # episode i is seeded EVAL_SEED + seed + i
# Episodes played at once (`run_episodes`): one acting call for all.
EVAL_ENVS = 16
STRIP_FRAMES = 12
# An I2A's imagination is drawn at steps 0, 25, 50, 75 of the first episode.
IMAGINATION_EVERY = 25
IMAGINATION_SNAPSHOTS = 4
# At most this many frames of an episode go to TensorBoard as an animation.
ANIMATION_FRAMES = 200


def checkpoint_steps(workdir: str) -> List[int]:
  """The learner steps of the checkpoints in a training workdir, oldest
  first (those whose index file exists)."""
  directory = os.path.join(workdir, CHECKPOINTS)
  if not os.path.isdir(directory):
    return []
  steps = [int(m.group(1)) for m in (re.fullmatch(r"ckpt-(\d+)\.index", n)
                                     for n in os.listdir(directory)) if m]
  return sorted(steps)


def load_run(workdir: str, checkpoint: Optional[int] = None
             ) -> Tuple[ml_collections.ConfigDict, environments.Protocol, str]:
  """(config, protocol, checkpoint path) of a training workdir: the newest
  checkpoint, or the one of learner step `checkpoint`."""
  workdir = os.path.abspath(os.path.expanduser(workdir))
  config_path = os.path.join(workdir, runs.CONFIG)
  protocol_path = os.path.join(workdir, runs.PROTOCOL)
  if not os.path.isdir(workdir):
    raise ValueError(f"workdir {workdir!r} does not exist; pass the --workdir "
                     "of a `python -m i2a.train` run.")
  if not os.path.exists(config_path) or not os.path.exists(protocol_path):
    raise ValueError(f"{workdir!r} holds no training run ({runs.CONFIG} or "
                     f"{runs.PROTOCOL} is missing); pass the --workdir of a "
                     "`python -m i2a.train` run.")
  config = ml_collections.ConfigDict(io_utils.read_json(config_path))
  protocol = environments.Protocol.load(protocol_path)
  directory = os.path.join(workdir, CHECKPOINTS)
  path = tf.train.latest_checkpoint(directory)
  if path is None:
    raise ValueError(f"{workdir!r} has no checkpoint yet (looked in "
                     f"{directory}); train first "
                     "(python -m i2a.train ... --workdir=" f"{workdir}).")
  if checkpoint is not None:
    steps = checkpoint_steps(workdir)
    if int(checkpoint) not in steps:
      raise ValueError(
          f"--checkpoint={checkpoint}: {directory} has no checkpoint of "
          f"learner step {checkpoint}; it holds steps {steps} (the last "
          "config.keep_checkpoints are kept). Pass one of them, or leave "
          "--checkpoint out for the newest.")
    path = os.path.join(directory, f"ckpt-{int(checkpoint)}")
  return config, protocol, path


def build_agent(config: ml_collections.ConfigDict,
                protocol: environments.Protocol,
                envmodel: str = "") -> ActorCriticNetwork:
  """The run's network with fresh variables, its envmodel (if any) loaded
  with the evaluation's seed. `envmodel` replaces config.envmodel (e.g. an
  export that moved). The process computes in the run's precision from
  then on (runs.use_precision)."""
  runs.use_precision(config)
  export_dir = envmodel or config.envmodel
  if export_dir and not os.path.isdir(export_dir):
    raise ValueError(
        f"the environment model export {export_dir!r} this agent was "
        "trained with does not exist; pass --envmodel=EXPORT_DIR if it "
        "moved (the same model: python -m i2a.pretrain's WORKDIR/export).")
  return role_network(config, protocol,
                      role_envmodel(config, protocol, "eval", export_dir))


def load_agent(config: ml_collections.ConfigDict,
               protocol: environments.Protocol, checkpoint: str,
               envmodel: str = "") -> Tuple[ActorCriticNetwork, Dict[str, int]]:
  """The network restored from `checkpoint`, and its counters
  (build_agent, then the checkpoint's weights; its acting calls read
  bfloat16 copies of those under 'bf16': change the weights, and call
  `network.read_weight_copies(None)` or make new copies)."""
  network = build_agent(config, protocol, envmodel)
  learner_step = tf.Variable(0, dtype=tf.int64)
  env_steps = tf.Variable(0, dtype=tf.int64)
  tf.train.Checkpoint(network=network, learner_step=learner_step,
                      env_steps=env_steps).restore(
                          checkpoint).expect_partial()
  network.read_weight_copies(precision.WeightCopies(network.variables))
  return network, dict(learner_step=int(learner_step.numpy()),
                       env_steps=int(env_steps.numpy()))


@dataclasses.dataclass
class Episodes:
  """What `run_episodes` saw: every episode's return and length, and the
  first episode's frames [T + 1] x [H, W, C], actions [T], rewards [T] and
  (for an I2A) imaginations [(step, imagined)]."""
  returns: List[float]
  lengths: List[int]
  seeds: List[int]
  frames: List[np.ndarray]
  actions: List[int]
  rewards: List[float]
  imaginations: List[Tuple[int, Any]]

  def summary(self) -> Dict[str, float]:
    """return_mean/std/min/max, length_mean and episodes (logged rows)."""
    return dict(return_mean=float(np.mean(self.returns)),
                return_std=float(np.std(self.returns)),
                return_min=float(np.min(self.returns)),
                return_max=float(np.max(self.returns)),
                length_mean=float(np.mean(self.lengths)),
                episodes=len(self.returns))

  def animation(self, action_names: Optional[Tuple[str, ...]] = None,
                limit: int = ANIMATION_FRAMES) -> List[np.ndarray]:
    """The first episode's first `limit` frames, captioned with the
    actions (by name) and rewards (pictures.episode_frames)."""
    return pictures.episode_frames(self.frames[:limit], self.actions,
                                   self.rewards, action_names)


@dataclasses.dataclass
class _Slot:
  """One environment of `run_episodes` and the episode it plays (an index
  into the seeds; a spare episode, whose results are dropped, from
  `episodes` on)."""
  env: Any
  episode: int = -1
  rng: Optional[np.random.Generator] = None
  windows: Optional[FrameWindows] = None
  episode_return: float = 0.0
  length: int = 0


def run_episodes(network: ActorCriticNetwork,
                 protocol: environments.Protocol, episodes: int,
                 greedy: bool, seed: int = 0, imagination: bool = False,
                 num_envs: int = EVAL_ENVS) -> Episodes:
  """`episodes` episodes on up to `num_envs` environments at once: every
  step is one `network.act` of all their windows [N, k, H, W, C].

  Episode i is seeded EVAL_SEED + seed + i and samples its actions from
  a numpy generator of its own, seeded (seed, i) (or greedily), so which
  environment plays it does not change its actions. Environments left
  without an episode near the end play spare ones (seeded past the last,
  results dropped): the batch keeps its shape, so compiled acting calls
  are not traced again for every smaller one. Episode 0 is recorded
  (frames, actions, rewards) and, with `imagination`, an I2A's imagination
  drawn in it every IMAGINATION_EVERY steps (at most IMAGINATION_SNAPSHOTS
  times; acting.imagine_quietly draws none of the policy's random
  numbers). A network with random numbers of its own (an I2A's rollout
  policy, a stochastic envmodel) draws them for the whole batch, so its
  episodes depend on `num_envs`; the actions' generators do not.
  """
  if episodes < 1:
    raise ValueError(f"evaluation episodes must be >= 1, given {episodes}.")
  if num_envs < 1:
    raise ValueError("num_envs (environments played at once) must be >= 1, "
                     f"given {num_envs}.")
  seeds = [EVAL_SEED + seed + i for i in range(episodes)]
  result = Episodes([None] * episodes, [None] * episodes, seeds, [], [], [],
                    [])
  imaginations: Optional[List[Tuple[int, Any]]] = (
      result.imaginations if imagination else None)
  slots = [_Slot(environments.make_env(protocol))
           for _ in range(min(num_envs, episodes))]
  next_episode, left = 0, episodes

  def start(slot: _Slot) -> None:
    nonlocal next_episode
    slot.episode, next_episode = next_episode, next_episode + 1
    observation, _ = slot.env.reset(seed=EVAL_SEED + seed + slot.episode)
    slot.rng = np.random.default_rng([seed, slot.episode])
    slot.windows = FrameWindows(observation[None], network.window_offsets)
    slot.episode_return, slot.length = 0.0, 0
    if slot.episode == 0:
      result.frames.append(observation)

  try:
    for slot in slots:
      start(slot)
    first = slots[0]  # episode 0 starts there
    while left:
      if (first.episode == 0 and imaginations is not None and
          first.length % IMAGINATION_EVERY == 0 and
          len(imaginations) < IMAGINATION_SNAPSHOTS):
        imagined = imagine_quietly(network, first.windows.frames,
                                   [first.env])
        if imagined is None:
          imaginations = None  # this network imagines nothing
        else:
          imaginations.append((first.length, imagined))
      logits, _ = network.act(
          np.concatenate([s.windows.frames for s in slots]),
          [s.env for s in slots])
      for slot, row in zip(slots, logits):
        action = int(sample_actions(row[None], slot.rng, greedy)[0])
        observation, reward, terminated, truncated, _ = slot.env.step(
            action)
        slot.episode_return += float(reward)
        slot.length += 1
        if slot.episode == 0:
          result.frames.append(observation)
          result.actions.append(action)
          result.rewards.append(float(reward))
        if terminated or truncated:
          if slot.episode < episodes:
            result.returns[slot.episode] = slot.episode_return
            result.lengths[slot.episode] = slot.length
            left -= 1
          start(slot)
        else:
          slot.windows.push(observation[None], np.array([False]))
  finally:
    for slot in slots:
      slot.env.close()
  return result


def training_evaluation(config: ml_collections.ConfigDict,
                        protocol: environments.Protocol,
                        source: ActorCriticNetwork
                        ) -> Optional["TrainingEvaluation"]:
  """The evaluation during training config.eval_every asks for (None for
  0, off; configs made before the field existed have none). The settings
  are checked with the rest (training.check_config)."""
  if int(config.get("eval_every", 0)) > 0:
    return TrainingEvaluation(config, protocol, source)
  return None


class TrainingEvaluation:
  """Evaluation during training (config.eval_every): `run_episodes` with a
  copy of the learner's newest weights, config.eval_episodes episodes
  (config.eval_greedy), seeded as `python -m i2a.evaluate --seed=0` seeds
  them, on environments of its own.

  The copy (`build_agent`: its own envmodel copy and random generators)
  draws no random numbers of the run, and its generators start from the
  same state at every evaluation: evaluating changes nothing of the
  training, and the scores at a checkpoint's step are what
  `python -m i2a.evaluate --checkpoint=STEP` computes for it (with the
  same episodes and greedy setting).
  """

  def __init__(self, config: ml_collections.ConfigDict,
               protocol: environments.Protocol, source: ActorCriticNetwork):
    self.episodes = int(config.eval_episodes)
    self.greedy = bool(config.get("eval_greedy", False))
    self.protocol = protocol
    self.action_names = environments.action_names(protocol)
    self._source = source
    self.network = build_agent(config, protocol)
    # Its frozen envmodel's copied once; the learnable weights' after each
    # copy of the learner's.
    self._copies = precision.WeightCopies(
        self.network.variables, refreshed=self.network.learnable_variables)
    self.network.read_weight_copies(self._copies)
    self._generators = random_generators(self.network)
    self._generator_states = [g.state.numpy() for g in self._generators]

  def __call__(self) -> Episodes:
    for target, value in zip(self.network.learnable_variables,
                             self._source.learnable_variables):
      target.assign(value)
    self._copies.refresh()
    for generator, state in zip(self._generators, self._generator_states):
      generator.state.assign(state)
    return run_episodes(self.network, self.protocol, self.episodes,
                        self.greedy, seed=0)


def episode_scores(returns: Sequence[float], lengths: Sequence[int],
                   seeds: Sequence[int]) -> Dict[str, Any]:
  """The scores.json entries every evaluation of episodes writes (this
  runtime's and `python -m i2a.plan`'s): each episode's return, length and
  seed, and the returns' mean, std, min and max."""
  values = np.asarray(returns, np.float64)
  return dict(returns=[float(r) for r in returns],
              lengths=[int(n) for n in lengths], mean=float(values.mean()),
              std=float(values.std()), min=float(values.min()),
              max=float(values.max()), episodes=len(values),
              seeds=[int(s) for s in seeds])


def write_episode_video(out_dir: str, frames: Sequence[np.ndarray]
                        ) -> Tuple[str, str]:
  """OUT_DIR/episode_000.gif of `frames` (ready to show: upscaled, maybe
  captioned) and OUT_DIR/episode_000.png, a strip of STRIP_FRAMES of them
  evenly spaced; returns both paths."""
  gif = os.path.join(out_dir, "episode_000.gif")
  pictures.save_gif(gif, list(frames), duration_ms=80)
  picks = np.unique(np.linspace(0, len(frames) - 1, STRIP_FRAMES).astype(int))
  strip = os.path.join(out_dir, "episode_000.png")
  pictures.save_png(strip, pictures.grid([np.stack([frames[i]
                                                    for i in picks])]))
  return gif, strip


def evaluate(workdir: str, episodes: Optional[int] = None,
             greedy: bool = False, seed: int = 0, envmodel: str = "",
             video_frames: int = 400,
             checkpoint: Optional[int] = None,
             num_envs: int = EVAL_ENVS) -> Dict[str, Any]:
  """Runs the agent of `workdir`'s newest checkpoint (or that of learner
  step `checkpoint`) for `episodes` episodes, `num_envs` at once; writes
  eval/step_<N>/, the index, eval/scores.json when N is the newest
  evaluated, and TensorBoard."""
  config, protocol, checkpoint_path = load_run(workdir, checkpoint)
  episodes = int(episodes if episodes is not None else config.eval_episodes)
  if episodes < 1:
    raise ValueError(f"--episodes must be >= 1, given {episodes}.")
  export_dir = envmodel or config.envmodel
  if export_dir and os.path.isdir(export_dir):
    # The export the run trained with (identity.json), under its protocol.
    runs.check_identity(os.path.abspath(os.path.expanduser(workdir)), {
        exports.ENVMODEL_IDENTITY: exports.check_export(config, protocol,
                                                        export_dir)},
        recording=False)
  network, counters = load_agent(config, protocol, checkpoint_path, envmodel)
  result = run_episodes(network, protocol, episodes, greedy, seed,
                        imagination=True, num_envs=num_envs)
  names = environments.action_names(protocol)
  workdir = os.path.abspath(workdir)
  eval_dir = io_utils.ensure_writable_dir(os.path.join(workdir, EVAL),
                                          "eval directory")
  step = counters["learner_step"]
  out_dir = os.path.join(eval_dir, STEP_DIR.format(step=step))
  os.makedirs(out_dir, exist_ok=True)
  video_all, video = result.frames, result.frames[:video_frames]
  captioned = pictures.episode_frames(video, result.actions, result.rewards,
                                      names)
  gif, strip = write_episode_video(out_dir, captioned)
  imagination_pngs = [
      dict(step=at, png=_draw_imagination(out_dir, at, imagined, video_all,
                                          network, config, names))
      for at, imagined in result.imaginations]
  scores = dict(
      **episode_scores(result.returns, result.lengths, result.seeds),
      greedy=greedy, checkpoint=checkpoint_path,
      checkpoint_step=step, env_steps=counters["env_steps"],
      frames=counters["env_steps"] * protocol.action_repeat,
      agent=config.agent, env_id=protocol.env_id,
      envmodel=envmodel or config.envmodel, video=gif, strip=strip,
      imagination=imagination_pngs)
  io_utils.atomic_write_json(os.path.join(out_dir, SCORES), scores)
  _update_index(eval_dir, scores)
  animations = {"eval/episode": captioned[:ANIMATION_FRAMES]}
  for at, imagined in result.imaginations:
    jump, depth = network.model.spec.jump, network.depth
    animations[f"eval/imagination_step{at:04d}"] = (
        pictures.imagination_frames(
            video_all[at:at + depth * jump + 1:jump], imagined["frames"][0],
            imagined["first_actions"], jump, names))
  _write_summaries(workdir, scores, result, animations)
  return scores


def _update_index(eval_dir: str, scores: Dict[str, Any]) -> None:
  """eval/index.json gets this checkpoint's entry; eval/scores.json is
  replaced by its scores when it is the newest checkpoint evaluated."""
  path = os.path.join(eval_dir, INDEX)
  index = io_utils.read_json(path) if os.path.exists(path) else {}
  step = scores["checkpoint_step"]
  index[str(step)] = dict(
      mean=scores["mean"], std=scores["std"], episodes=scores["episodes"],
      greedy=scores["greedy"], env_steps=scores["env_steps"],
      scores=os.path.join(STEP_DIR.format(step=step), SCORES))
  io_utils.atomic_write_json(path, index)
  if step >= max(int(s) for s in index):
    io_utils.atomic_write_json(os.path.join(eval_dir, SCORES), scores)


def _write_summaries(workdir: str, scores: Dict[str, Any], result: Episodes,
                     animations: Dict[str, List[np.ndarray]]) -> None:
  """TensorBoard (tb/evaluate), at the checkpoint's environment step:
  eval/return_mean etc., and `animations` ({tag: frames}: the first
  episode, an I2A's imagination)."""
  log = MetricsLog(workdir, tensorboard=TENSORBOARD)
  at = scores["env_steps"]
  log.write(scores["checkpoint_step"],
            dict(result.summary(), frames=scores["frames"]), split="eval",
            summary_step=at, csv=False)
  for tag, frames in animations.items():
    log.animation(at, tag, frames, duration_ms=80 if tag == "eval/episode"
                  else 500, description=f"checkpoint of learner step "
                  f"{scores['checkpoint_step']}")
  log.flush()


def _draw_imagination(out_dir: str, step: int, imagined: Dict[str, Any],
                      frames: List[np.ndarray], network: Any,
                      config: ml_collections.ConfigDict,
                      action_names: Tuple[str, ...]) -> str:
  """eval/step_<N>/imagination_stepNNNN.png: what the I2A imagined at
  `step` of the first episode (`frames`: all its frames) beside the real
  frames."""
  jump, depth = network.model.spec.jump, network.depth
  path = os.path.join(out_dir, f"imagination_step{step:04d}.png")
  pictures.imagination_figure(
      path, frames[step:step + depth * jump + 1:jump],
      imagined["frames"][0], imagined["rewards"][0],
      imagined["first_actions"], jump,
      title=(f"{config.agent} ({config.network.rollout_policy}, "
             f"{config.network.model} model): imagination at step {step}"),
      action_names=action_names)
  return path
