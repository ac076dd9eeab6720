"""Collection: a policy steps vectorised environments; steps become data.

`run(config, workdir)` is the runtime of `python -m i2a.collect`.

Data flow (README.md): `collect_split` runs `policy` on `make_vector_env`
and sends every environment's steps to two sinks: whole episodes to a
`files.SplitWriter` (the dataset on disk) and, when a Reverb client is given,
jumpy windows to the `sequences` table through one `SequenceAdder` per env.
Episodes never mix: each env has its own buffer, closed at its episode's end
(same-step autoreset gives the final observation in info['final_obs']).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Callable, List, Optional

import gymnasium as gym
import numpy as np
import reverb
from absl import logging

from i2a import environments, runs
from i2a.environments import Protocol
from i2a.progress import Progress
from i2a.replay import files, tables, writers
from i2a.replay.episodes import EpisodeBuffer

# policy(observations uint8 [N, H, W, C], rng) -> actions int [N]
Policy = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def uniform_random_policy(num_actions: int) -> Policy:
  def policy(observations: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, num_actions, len(observations))
  return policy


@dataclasses.dataclass(frozen=True)
class SequenceSpec:
  """Windows streamed to the `sequences` table: L = context_length + T."""
  context_length: int = 3
  T: int = 10  # pylint: disable=invalid-name  (the paper's T)
  jump: int = 1
  stride: int = 1

  @property
  def length(self) -> int:
    return self.context_length + self.T


@dataclasses.dataclass
class SplitStats:
  steps: int
  episodes: int
  complete_episodes: int
  items: int
  steps_per_s: float
  mean_return: float


def collect_split(protocol: Protocol, split_dir: Optional[str], num_steps: int,
                  num_envs: int, seed: int, policy: Policy,
                  metadata: Optional[dict] = None,
                  client: Optional[reverb.Client] = None,
                  sequence: SequenceSpec = SequenceSpec(),
                  steps_per_shard: int = 20_000,
                  progress_name: str = "collect",
                  asynchronous: bool = False,
                  envs: Optional[gym.vector.VectorEnv] = None) -> SplitStats:
  """Runs `num_steps` primitive steps (over all envs) and records them.

  With `split_dir` None nothing is written to disk (Reverb only, e.g. for
  benchmarks); with `client` None nothing goes to Reverb. `envs` replaces
  the protocol's vector env (tests pass fakes; it must autoreset SAME_STEP).
  """
  if num_steps < num_envs:
    raise ValueError(f"num_steps ({num_steps}) must be >= num_envs "
                     f"({num_envs}).")
  if envs is None:
    envs = environments.make_vector_env(protocol, num_envs,
                                        asynchronous=asynchronous)
  rng = np.random.default_rng(seed)
  observations, _ = envs.reset(seed=seed)
  buffers = [EpisodeBuffer(observations[i]) for i in range(num_envs)]
  adders: List[writers.SequenceAdder] = []
  if client is not None:
    adders = [writers.SequenceAdder(client, sequence.length, sequence.jump,
                                    sequence.stride) for _ in range(num_envs)]
    for adder, observation in zip(adders, observations):
      adder.observe_first(observation)
  returns = np.zeros(num_envs)
  finished_returns: List[float] = []
  progress = Progress(progress_name, num_steps, "steps")
  writer: Optional[files.SplitWriter] = None
  with contextlib.ExitStack() as stack:
    stack.callback(envs.close)
    if split_dir:
      writer = stack.enter_context(files.SplitWriter(
          split_dir, dict(metadata or {}, seed=seed, num_envs=num_envs),
          steps_per_shard=steps_per_shard))
    for _ in range(num_steps // num_envs):
      actions = policy(observations, rng)
      next_observations, rewards, terminated, truncated, info = envs.step(
          actions)
      done = terminated | truncated
      returns += rewards
      for i in range(num_envs):
        # Same-step autoreset: a finished env already shows its next episode.
        last = info["final_obs"][i] if done[i] else next_observations[i]
        discount = 0.0 if terminated[i] else 1.0
        buffers[i].add(actions[i], rewards[i], discount, last)
        if adders:
          adders[i].observe(actions[i], rewards[i], discount, last)
        if done[i]:
          if writer:
            writer.add(buffers[i].to_episode(complete=True))
          buffers[i] = EpisodeBuffer(next_observations[i])
          finished_returns.append(float(returns[i]))
          returns[i] = 0.0
          if adders:
            adders[i].end_episode()
            adders[i].observe_first(next_observations[i])
      observations = next_observations
      recent = finished_returns[-20:]
      progress.update(num_envs, episodes=len(finished_returns),
                      **({"return": float(np.mean(recent))} if recent else {}))
    # Episodes still running are kept, marked incomplete.
    for i in range(num_envs):
      if writer and len(buffers[i]) > 1:
        writer.add(buffers[i].to_episode(complete=False))
    for adder in adders:
      adder.end_episode()
      adder.close()
  progress.close()
  return SplitStats(
      steps=progress.done,
      episodes=writer.num_episodes if writer else len(finished_returns),
      complete_episodes=(writer.num_complete_episodes if writer
                         else len(finished_returns)),
      items=sum(a.items_created for a in adders),
      steps_per_s=progress.rate(),
      mean_return=float(np.mean(finished_returns)) if finished_returns
      else float("nan"))


def make_policy(config, protocol: Protocol) -> Policy:
  if config.policy != "random":
    raise ValueError(
        f"config.policy={config.policy!r} is not available: collection runs "
        "the uniform random policy ('random').")
  return uniform_random_policy(environments.num_actions(protocol))


def run(config, workdir: str, reverb_address: str = "") -> dict:
  """Collects the train and test splits; returns their manifests."""
  protocol = runs.protocol_from_config(config)
  if config.test_seed < config.seed + config.num_envs and (
      config.seed < config.test_seed + config.num_envs):
    raise ValueError(f"train seeds [{config.seed}, +{config.num_envs}) and "
                     f"test seeds [{config.test_seed}, +{config.num_envs}) "
                     "overlap; pick disjoint config.seed and config.test_seed.")
  workdir = runs.prepare_workdir(workdir, config, protocol)
  policy = make_policy(config, protocol)
  seq = config.sequence
  sequence = SequenceSpec(seq.context_length, seq.T, seq.jump,
                                     seq.stride)
  server = None
  if reverb_address:
    client = tables.connect(reverb_address)
    tables.table_signature(client, tables.SEQUENCES)  # KeyError if missing
  else:
    signature = tables.sequence_signature(protocol.observation_shape,
                                          sequence.length, sequence.jump)
    server = tables.start_server(
        [tables.sequences_table(signature, config.reverb_max_size)])
    client = server.localhost_client()
  dataset_dir = os.path.join(workdir, "dataset")
  manifests = {}
  try:
    for split, steps, seed in (("train", config.train_steps, config.seed),
                               ("test", config.test_steps, config.test_seed)):
      path = files.split_path(dataset_dir, split)
      if os.path.exists(os.path.join(path, files.MANIFEST)):
        manifest = files.read_manifest(path)
        if (manifest.get("steps_requested") == steps and
            Protocol.from_json(manifest["protocol"]) == protocol):
          logging.info("%s split already collected: %s", split, path)
          manifests[split] = manifest
          continue
      metadata = dict(split=split, protocol=protocol.to_json(),
                      policy=config.policy, steps_requested=steps)
      stats = collect_split(
          protocol, path, steps, config.num_envs, seed, policy,
          metadata=metadata, client=client, sequence=sequence,
          steps_per_shard=config.steps_per_shard,
          progress_name=f"collect {split}",
          asynchronous=config.asynchronous)
      logging.info("%s: %s", split, stats)
      manifests[split] = files.read_manifest(path)
  finally:
    if server is not None:
      server.stop()
  print(f"dataset written to {dataset_dir} "
        f"(train {manifests['train']['steps']:,} steps, "
        f"test {manifests['test']['steps']:,} steps)", flush=True)
  return manifests
