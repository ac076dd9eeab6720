"""The runtime of `python -m i2a.evaluate`: a trained agent's scores and videos.

Data flow (docs/agents.md, "Evaluation"): the workdir of `python -m i2a.train`
gives the config (config.json), the protocol (protocol.json), the newest
checkpoint and, for agents that query one, the envmodel export. The agent's
network acts on frame windows exactly as the actor does (FrameWindows,
sample_actions), for N episodes of one environment seeded
EVAL_SEED + episode (disjoint from the training envs' seeds). Writes
WORKDIR/eval/scores.json (returns, lengths, mean, std, the checkpoint's
learner step), a GIF of the first episode and a PNG strip of its frames,
and for an I2A its imagination at a few steps of the first episode
(eval/imagination_stepNNNN.png: the K imagined rollouts, rendered by the
model, beside the real frames that followed).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

import ml_collections
import numpy as np
import tensorflow as tf

from agents import builder
from agents.acting import FrameWindows, imagine_quietly, sample_actions
from agents.base import ActorCriticNetwork
from agents.training import CHECKPOINTS, envmodel_seed
from i2a import environments, io_utils, pictures, runs

EVAL = "eval"
SCORES = "scores.json"
EVAL_SEED = 10_000_000  # episode i is seeded EVAL_SEED + seed + i
STRIP_FRAMES = 12
# An I2A's imagination is drawn at steps 0, 25, 50, 75 of the first episode.
IMAGINATION_EVERY = 25
IMAGINATION_SNAPSHOTS = 4


def load_run(workdir: str) -> Tuple[ml_collections.ConfigDict,
                                    environments.Protocol, str]:
  """(config, protocol, newest checkpoint path) of a training workdir."""
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
  checkpoint = tf.train.latest_checkpoint(os.path.join(workdir, CHECKPOINTS))
  if checkpoint is None:
    raise ValueError(f"{workdir!r} has no checkpoint yet (looked in "
                     f"{os.path.join(workdir, CHECKPOINTS)}); train first "
                     "(python -m i2a.train ... --workdir=" f"{workdir}).")
  return config, protocol, checkpoint


def load_agent(config: ml_collections.ConfigDict,
               protocol: environments.Protocol, checkpoint: str,
               envmodel: str = "") -> Tuple[ActorCriticNetwork, Dict[str, int]]:
  """The network restored from `checkpoint`, and its counters.

  `envmodel` replaces config.envmodel (e.g. an export that moved). The
  process computes in the run's precision from then on (runs.use_precision).
  """
  runs.use_precision(config)
  num_actions = environments.num_actions(protocol)
  observation_shape = tuple(protocol.observation_shape)
  export_dir = envmodel or config.envmodel
  model = None
  if export_dir:
    if not os.path.isdir(export_dir):
      raise ValueError(
          f"the environment model export {export_dir!r} this agent was "
          "trained with does not exist; pass --envmodel=EXPORT_DIR if it "
          "moved (the same model: python -m i2a.pretrain's WORKDIR/export).")
    model = builder.load_envmodel(export_dir, protocol, num_actions,
                                  seed=envmodel_seed(config, "eval"))
  network = builder.build_network(config, num_actions, observation_shape,
                                  model)
  builder.create_variables(network, observation_shape)
  learner_step = tf.Variable(0, dtype=tf.int64)
  env_steps = tf.Variable(0, dtype=tf.int64)
  tf.train.Checkpoint(network=network, learner_step=learner_step,
                      env_steps=env_steps).restore(
                          checkpoint).expect_partial()
  return network, dict(learner_step=int(learner_step.numpy()),
                       env_steps=int(env_steps.numpy()))


def run_episode(network: ActorCriticNetwork, env, seed: int,
                rng: np.random.Generator, greedy: bool,
                record: bool = False,
                imaginations: Optional[List[Tuple[int, Any]]] = None
                ) -> Tuple[float, int, List[np.ndarray]]:
  """One episode under the agent's policy: (return, length, frames).

  With a list `imaginations` and an I2A, appends (step, what it imagines:
  `imagined_frames`) every IMAGINATION_EVERY steps, at most
  IMAGINATION_SNAPSHOTS times. The pictures draw no random numbers of the
  policy (acting.imagine_quietly): the episode is the one it would be
  without them.
  """
  observation, _ = env.reset(seed=seed)
  windows = FrameWindows(observation[None], network.window_offsets)
  frames = [observation] if record else []
  episode_return, length, done = 0.0, 0, False
  while not done:
    if (imaginations is not None and length % IMAGINATION_EVERY == 0 and
        len(imaginations) < IMAGINATION_SNAPSHOTS):
      imagined = imagine_quietly(network, windows.frames, [env])
      if imagined is None:
        imaginations = None  # this network imagines nothing
      else:
        imaginations.append((length, imagined))
    logits, _ = network.act(windows.frames, [env])
    action = int(sample_actions(logits, rng, greedy)[0])
    observation, reward, terminated, truncated, _ = env.step(action)
    episode_return += float(reward)
    length += 1
    done = terminated or truncated
    windows.push(observation[None], np.array([False]))
    if record:
      frames.append(observation)
  return episode_return, length, frames


def uniform_random_returns(protocol: environments.Protocol, episodes: int,
                           seed: int = 0) -> List[float]:
  """The uniform random policy's returns on `evaluate`'s episode seeds: the
  baseline that learning checks and benchmarks compare agents against."""
  env = environments.make_env(protocol)
  rng = np.random.default_rng(seed)
  returns = []
  try:
    for i in range(episodes):
      env.reset(seed=EVAL_SEED + seed + i)
      total, done = 0.0, False
      while not done:
        _, reward, terminated, truncated, _ = env.step(
            int(rng.integers(env.action_space.n)))
        total += float(reward)
        done = terminated or truncated
      returns.append(total)
  finally:
    env.close()
  return returns


def evaluate(workdir: str, episodes: Optional[int] = None,
             greedy: bool = False, seed: int = 0, envmodel: str = "",
             video_frames: int = 400) -> Dict[str, Any]:
  """Runs the agent of `workdir` for `episodes` episodes; writes eval/."""
  config, protocol, checkpoint = load_run(workdir)
  episodes = int(episodes if episodes is not None else config.eval_episodes)
  if episodes < 1:
    raise ValueError(f"--episodes must be >= 1, given {episodes}.")
  export_dir = envmodel or config.envmodel
  if export_dir and os.path.isdir(export_dir):
    # The export the run trained with (identity.json), under its protocol.
    runs.check_identity(os.path.abspath(os.path.expanduser(workdir)), {
        builder.ENVMODEL_IDENTITY: builder.check_export(config, protocol,
                                                        export_dir)},
        recording=False)
  network, counters = load_agent(config, protocol, checkpoint, envmodel)

  env = environments.make_env(protocol)
  rng = np.random.default_rng(seed)
  seeds = [EVAL_SEED + seed + i for i in range(episodes)]
  returns, lengths, video = [], [], []
  imaginations: List[Tuple[int, Any]] = []
  try:
    for i, episode_seed in enumerate(seeds):
      episode_return, length, frames = run_episode(
          network, env, episode_seed, rng, greedy,
          record=(i == 0), imaginations=imaginations if i == 0 else None)
      returns.append(episode_return)
      lengths.append(length)
      if i == 0:
        video = frames
  finally:
    env.close()
  out_dir = io_utils.ensure_writable_dir(
      os.path.join(os.path.abspath(workdir), EVAL), "eval directory")
  video_all, video = video, video[:video_frames]
  gif = os.path.join(out_dir, "episode_000.gif")
  pictures.save_gif(gif, [pictures.upscale(f) for f in video], duration_ms=80)
  picks = np.unique(np.linspace(0, len(video) - 1, STRIP_FRAMES).astype(int))
  strip = os.path.join(out_dir, "episode_000.png")
  pictures.save_png(strip, pictures.grid(
      [pictures.upscale(np.stack([video[i] for i in picks]))]))
  imagination_pngs = [
      dict(step=step, png=_draw_imagination(out_dir, step, imagined,
                                            video_all, network, config))
      for step, imagined in imaginations]
  scores = dict(
      returns=returns, lengths=lengths, mean=float(np.mean(returns)),
      std=float(np.std(returns)), min=float(np.min(returns)),
      max=float(np.max(returns)), episodes=episodes, greedy=greedy,
      seeds=seeds, checkpoint=checkpoint, checkpoint_step=counters[
          "learner_step"], env_steps=counters["env_steps"],
      agent=config.agent, env_id=protocol.env_id,
      envmodel=envmodel or config.envmodel, video=gif, strip=strip,
      imagination=imagination_pngs)
  io_utils.atomic_write_json(os.path.join(out_dir, SCORES), scores)
  return scores


def _draw_imagination(out_dir: str, step: int, imagined: Dict[str, Any],
                      frames: List[np.ndarray], network: Any,
                      config: ml_collections.ConfigDict) -> str:
  """eval/imagination_stepNNNN.png: what the I2A imagined at `step` of the
  first episode (`frames`: all its frames) beside the real frames."""
  jump, depth = network.model.spec.jump, network.depth
  path = os.path.join(out_dir, f"imagination_step{step:04d}.png")
  pictures.imagination_figure(
      path, frames[step:step + depth * jump + 1:jump],
      imagined["frames"][0], imagined["rewards"][0],
      imagined["first_actions"], jump,
      title=(f"{config.agent} ({config.network.rollout_policy}, "
             f"{config.network.model} model): imagination at step {step}"))
  return path
