"""Collection: a policy steps vectorised environments; steps become data.

`run(config, workdir)` is the runtime of `python -m i2a.collect`.

Data flow (README.md): `collect_split` runs `policy` on `make_vector_env`
and writes every environment's whole episodes to a `files.SplitWriter`: the
dataset on disk that `python -m i2a.pretrain` and `i2a.evaluate_models`
read (docs/datasets.md says why there is no Reverb stream besides it).
Episodes never mix: each env has its own buffer, closed at its episode's end
(same-step autoreset gives the final observation in info['final_obs']).

Policies (`config.policy`, `make_policy`): 'random', uniform over the action
set (the default), or 'checkpoint:RUN', the newest checkpoint of a
`python -m i2a.train` workdir RUN (A2C or I2A), which samples its actions
from its policy over each environment's frame window exactly as its actor
did (`AgentPolicy`). Buesing et al. (2018) trained their models on a trained
agent's data: random play on MsPacman stays in a corner of the maze. With
`config.policy_epsilon` > 0 each env step's action is uniform random with
that probability (`EpsilonMixed`). The agent's protocol must equal the
collection's (refused before anything is written). Each split's manifest
records the policy (`Policy.record`): its kind, epsilon and, for a
checkpoint, the run, checkpoint, agent, learner step and env steps.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import gymnasium as gym
import ml_collections
import numpy as np
from absl import logging

from agents.acting import uniform_actions
from i2a import environments, runs
from i2a.environments import Protocol
from i2a.progress import Progress
from i2a.replay import files
from i2a.replay.episodes import EpisodeBuffer

RANDOM = "random"
CHECKPOINT = "checkpoint:"
POLICY_FORMS = (
    "'random' (uniform over the action set) or 'checkpoint:RUN' (RUN: the "
    "--workdir of a `python -m i2a.train` run; its newest checkpoint acts)")

# A stateless policy: fn(observations uint8 [N, H, W, C], rng) -> int [N].
PolicyFn = Callable[[np.ndarray, np.random.Generator], np.ndarray]


class Policy(abc.ABC):
  """Chooses the actions of N environments, step after step.

  `collect_split` calls `start` once after resetting the vector env, the
  policy before every step, and `observe` after it. `record` is what the
  dataset's manifest says about the policy (JSON).
  """

  record: Dict[str, Any] = {}

  def start(self, observations: np.ndarray,
            envs: Optional[gym.vector.VectorEnv]) -> None:
    """observations uint8 [N, H, W, C]: each env's first frame; `envs`: the
    vector env stepped (None when unknown)."""
    del observations, envs

  @abc.abstractmethod
  def __call__(self, observations: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    """observations uint8 [N, H, W, C] -> actions int [N]."""

  def observe(self, observations: np.ndarray,
              new_episode: np.ndarray) -> None:
    """observations [N, H, W, C] after a step; new_episode bool [N]: the
    env's episode ended and the observation is the next one's first."""
    del observations, new_episode


class FunctionPolicy(Policy):
  """A stateless `PolicyFn` as a Policy."""

  def __init__(self, fn: PolicyFn, record: Optional[Dict[str, Any]] = None):
    self._fn = fn
    self.record = dict(record or {})

  def __call__(self, observations: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    return self._fn(observations, rng)


def uniform_random_policy(num_actions: int) -> PolicyFn:
  """'random': agents.acting.uniform_actions for every env."""
  def policy(observations: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return uniform_actions(num_actions, len(observations), rng)
  return policy


class EpsilonMixed(Policy):
  """`policy`, except that with probability `epsilon` per env step the action
  is uniform over `num_actions`. Per step it draws the policy's actions,
  then N uniform coins and N uniform actions from the same generator."""

  def __init__(self, policy: Policy, epsilon: float, num_actions: int):
    if not 0.0 <= epsilon <= 1.0:
      raise ValueError(f"epsilon must be in [0, 1], given {epsilon}.")
    self.policy = policy
    self.epsilon = float(epsilon)
    self.num_actions = int(num_actions)
    self.record = dict(policy.record, epsilon=self.epsilon)

  def start(self, observations: np.ndarray,
            envs: Optional[gym.vector.VectorEnv]) -> None:
    self.policy.start(observations, envs)

  def __call__(self, observations: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    actions = np.asarray(self.policy(observations, rng))
    explore = rng.random(len(actions)) < self.epsilon
    uniform = uniform_actions(self.num_actions, len(actions), rng)
    return np.where(explore, uniform, actions).astype(actions.dtype)

  def observe(self, observations: np.ndarray,
              new_episode: np.ndarray) -> None:
    self.policy.observe(observations, new_episode)


class AgentPolicy(Policy):
  """A trained agent's network acting on each environment's frame window.

  As the agent's actor (agents/acting.py): every env keeps the frames its
  network reads (`FrameWindows` over `network.window_offsets`, filled with an
  episode's first frame at its start), side inputs (an I2A's stored
  rollouts) are computed from the windows and, for the emulator oracle, the
  live environments, and actions are sampled from the softmax of the policy
  logits, one tf.function call batched over all envs.
  """

  def __init__(self, network: Any, record: Dict[str, Any]):
    """`network`: an agents ActorCriticNetwork with its weights restored."""
    self.network = network
    self.record = dict(record)
    self._needs_envs = bool(network.side_input_spec()) and bool(
        getattr(network, "needs_env_states", False))
    self._windows = None
    self._envs: Optional[Sequence[gym.Env]] = None

  def start(self, observations: np.ndarray,
            envs: Optional[gym.vector.VectorEnv]) -> None:
    from agents.acting import FrameWindows  # pylint: disable=import-outside-toplevel
    envs_list = getattr(envs, "envs", None)
    self._envs = None if envs_list is None else list(envs_list)
    if self._needs_envs and self._envs is None:
      raise ValueError(
          "this agent's policy (an I2A over the emulator oracle) reads the "
          "live environments, which an asynchronous vector env keeps in "
          "other processes; collect with config.asynchronous=False.")
    self._windows = FrameWindows(np.asarray(observations),
                                 self.network.window_offsets)

  def __call__(self, observations: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    from agents.acting import sample_actions  # pylint: disable=import-outside-toplevel
    if self._windows is None:
      raise RuntimeError("AgentPolicy.start(observations, envs) must come "
                         "before the first action.")
    logits, _ = self.network.act(self._windows.frames,  # [N, k, H, W, C]
                                 self._envs)
    return sample_actions(logits, rng)

  def observe(self, observations: np.ndarray,
              new_episode: np.ndarray) -> None:
    self._windows.push(np.asarray(observations), np.asarray(new_episode))


# Fields of configs/collect.py that fed the Reverb `sequences` stream, retired
# (docs/datasets.md): they never changed the dataset on disk, so a workdir
# whose config.json still holds them resumes.
RETIRED_FIELDS = ("sequence", "reverb_max_size")


@dataclasses.dataclass
class SplitStats:
  steps: int
  episodes: int
  complete_episodes: int
  steps_per_s: float
  mean_return: float


def collect_split(protocol: Protocol, split_dir: Optional[str], num_steps: int,
                  num_envs: int, seed: int, policy: Union[Policy, PolicyFn],
                  metadata: Optional[dict] = None,
                  steps_per_shard: int = 20_000,
                  progress_name: str = "collect",
                  asynchronous: bool = False,
                  envs: Optional[gym.vector.VectorEnv] = None) -> SplitStats:
  """Runs `num_steps` primitive steps (over all envs) and records them.

  With `split_dir` None nothing is written (benchmarks measure the
  stepping alone). `envs` replaces the protocol's vector env (tests pass
  fakes; it must autoreset SAME_STEP).
  `policy` draws its random numbers from one generator seeded with `seed`.
  """
  if num_steps < num_envs:
    raise ValueError(f"num_steps ({num_steps}) must be >= num_envs "
                     f"({num_envs}).")
  if envs is None:
    envs = environments.make_vector_env(protocol, num_envs,
                                        asynchronous=asynchronous)
  if not isinstance(policy, Policy):
    policy = FunctionPolicy(policy)
  rng = np.random.default_rng(seed)
  observations, _ = envs.reset(seed=seed)
  policy.start(observations, envs)
  buffers = [EpisodeBuffer(observations[i]) for i in range(num_envs)]
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
        if done[i]:
          if writer:
            writer.add(buffers[i].to_episode(complete=True))
          buffers[i] = EpisodeBuffer(next_observations[i])
          finished_returns.append(float(returns[i]))
          returns[i] = 0.0
      policy.observe(next_observations, done)
      observations = next_observations
      recent = finished_returns[-20:]
      progress.update(num_envs, episodes=len(finished_returns),
                      **({"return": float(np.mean(recent))} if recent else {}))
    # Episodes still running are kept, marked incomplete.
    for i in range(num_envs):
      if writer and len(buffers[i]) > 1:
        writer.add(buffers[i].to_episode(complete=False))
  progress.close()
  return SplitStats(
      steps=progress.done,
      episodes=writer.num_episodes if writer else len(finished_returns),
      complete_episodes=(writer.num_complete_episodes if writer
                         else len(finished_returns)),
      steps_per_s=progress.rate(),
      mean_return=float(np.mean(finished_returns)) if finished_returns
      else float("nan"))


def make_policy(config: ml_collections.ConfigDict,
                protocol: Protocol) -> Policy:
  """The policy `config.policy` names, mixed with `config.policy_epsilon`.

  Refuses (ValueError) an unknown form, an epsilon outside [0, 1], a run
  without a checkpoint, and an agent whose protocol differs from
  `protocol`; nothing is written.
  """
  spec = str(config.policy)
  epsilon = float(config.get("policy_epsilon", 0.0))
  if not 0.0 <= epsilon <= 1.0:
    raise ValueError(f"config.policy_epsilon must be in [0, 1] (the "
                     "probability of a uniform random action per env step), "
                     f"given {epsilon}.")
  num_actions = environments.num_actions(protocol)
  if spec == RANDOM:
    policy: Policy = FunctionPolicy(uniform_random_policy(num_actions),
                                    dict(kind=RANDOM))
  elif spec.startswith(CHECKPOINT) and spec[len(CHECKPOINT):].strip():
    policy = _agent_policy(spec[len(CHECKPOINT):].strip(), protocol,
                           asynchronous=bool(config.asynchronous))
  else:
    raise ValueError(f"config.policy={spec!r} is not a policy collection "
                     f"knows; accepted forms: {POLICY_FORMS}.")
  if epsilon > 0:
    return EpsilonMixed(policy, epsilon, num_actions)
  policy.record = dict(policy.record, epsilon=0.0)
  return policy


def _flag_value(value: Any) -> str:
  if isinstance(value, (tuple, list)):
    return "(" + ",".join(str(v) for v in value) + ")"
  return str(value)


def _agent_policy(run_dir: str, protocol: Protocol,
                  asynchronous: bool) -> AgentPolicy:
  """The newest checkpoint of the training run `run_dir` as a policy."""
  from i2a.run import evaluate as evaluation  # pylint: disable=import-outside-toplevel
  agent_config, agent_protocol, checkpoint = evaluation.load_run(run_dir)
  differences = agent_protocol.differences(protocol)
  if differences:
    run_dir = os.path.abspath(os.path.expanduser(run_dir))
    lines = "\n".join(f"  {name}: {agent!r} (agent) vs {ours!r} (collection)"
                      for name, (agent, ours) in differences.items())
    flags = " ".join(f"--config.protocol.{name}={_flag_value(agent)}"
                     for name, (agent, _) in differences.items())
    raise ValueError(
        f"the agent at {run_dir} was trained under another protocol than "
        "this collection's, so it would act on observations it never saw:\n"
        f"{lines}\nCollect under the agent's protocol ({flags}; it is "
        f"{os.path.join(run_dir, runs.PROTOCOL)}), or pass an agent "
        "trained under this one.")
  network, counters = evaluation.load_agent(agent_config, agent_protocol,
                                            checkpoint)
  if (asynchronous and network.side_input_spec() and
      getattr(network, "needs_env_states", False)):
    raise ValueError(
        "this agent's policy (an I2A over the emulator oracle) reads the live "
        "environments, which config.asynchronous=True keeps in other "
        "processes; collect with config.asynchronous=False.")
  record = dict(kind="checkpoint",
                run=os.path.abspath(os.path.expanduser(run_dir)),
                checkpoint=os.path.abspath(checkpoint),
                agent=str(agent_config.get("agent", "")),
                learner_step=counters["learner_step"],
                env_steps=counters["env_steps"], actions="sampled")
  return AgentPolicy(network, record)


def _policy_record(recorded: Any) -> Dict[str, Any]:
  """A manifest's policy entry (a plain 'random' before records existed)."""
  if recorded == RANDOM:
    return dict(kind=RANDOM, epsilon=0.0)
  return dict(recorded) if isinstance(recorded, dict) else {}


def run(config, workdir: str) -> dict:
  """Collects the train and test splits; returns their manifests."""
  protocol = runs.protocol_from_config(config)
  if config.test_seed < config.seed + config.num_envs and (
      config.seed < config.test_seed + config.num_envs):
    raise ValueError(f"train seeds [{config.seed}, +{config.num_envs}) and "
                     f"test seeds [{config.test_seed}, +{config.num_envs}) "
                     "overlap; pick disjoint config.seed and config.test_seed.")
  policy = make_policy(config, protocol)  # refuses a misfit agent up front
  workdir = runs.prepare_workdir(workdir, config, protocol,
                                 ignore=RETIRED_FIELDS)
  dataset_dir = os.path.join(workdir, "dataset")
  manifests = {}
  for split, steps, seed in (("train", config.train_steps, config.seed),
                             ("test", config.test_steps, config.test_seed)):
    path = files.split_path(dataset_dir, split)
    if os.path.exists(os.path.join(path, files.MANIFEST)):
      manifest = files.read_manifest(path)
      if (manifest.get("steps_requested") == steps and
          Protocol.from_json(manifest["protocol"]) == protocol):
        logging.info("%s split already collected: %s", split, path)
        if _policy_record(manifest.get("policy")) != policy.record:
          logging.warning(
              "the %s split was collected by the policy %s, not by this "
              "run's %s (e.g. the agent's newest checkpoint changed), so "
              "the splits may come from different policies; delete %s to "
              "collect it again.", split, manifest.get("policy"),
              policy.record, path)
        manifests[split] = manifest
        continue
    metadata = dict(split=split, protocol=protocol.to_json(),
                    policy=policy.record, steps_requested=steps)
    stats = collect_split(
        protocol, path, steps, config.num_envs, seed, policy,
        metadata=metadata, steps_per_shard=config.steps_per_shard,
        progress_name=f"collect {split}", asynchronous=config.asynchronous)
    logging.info("%s: %s", split, stats)
    manifests[split] = files.read_manifest(path)
  print(f"dataset written to {dataset_dir} "
        f"(train {manifests['train']['steps']:,} steps, "
        f"test {manifests['test']['steps']:,} steps)", flush=True)
  return manifests
