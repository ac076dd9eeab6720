"""The MPC planner (agents/planning): planning cost and what planning buys.

Measures, in one run, on MiniPacman-avoid (16x24 frames, 5 actions):
  * planning time per environment step against the horizon H and the
    population P (CEM iterations and num_envs fixed), for
      - the emulator oracle (c = 1: one plan per env step), and
      - a jumpy sSSM (c = 3: one plan per 3 env steps), built at the
        'minipacman' pretraining sizes and NOT trained (timing does not
        depend on the weights), sampled num_samples times per candidate;
    each after one warm-up plan (tf.function tracing), the mean of
    --repeats plans of --num_envs environments in one batch, divided by
    the env steps one plan covers (num_envs * c), as scores.json of
    `python -m i2a.plan` counts it;
  * returns of the oracle planner (the 'minipacman' preset's CEM settings)
    against the uniform random policy, on the same episode seeds, episodes
    truncated at --episode_cap steps.
Prints markdown tables and writes benchmarks/results/planning.json.

  PYTHONPATH=. python benchmarks/planning.py [--horizons 2,4,8]
      [--populations 16,64,256] [--episodes 8] [--episode_cap 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import time
from typing import Any, Dict, List

import numpy as np
import tensorflow as tf

import envmodels
from i2a.run import plan as running
from agents.planning.planner import (CEMPlanner, PlannerConfig,
                                     UniformRandomPolicy, make_oracle)
from configs.agents import planning as planning_config
from configs.envmodels import common as envmodel_config
from i2a import environments
from i2a.run import pretrain as pretraining

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SSSM_JUMP = 3
CONTEXT = 3


def started_envs(protocol, count: int, warmup: int, seed: int):
  """`count` envs a few random steps into an episode, and their last
  CONTEXT frames [count, CONTEXT, H, W, C] (c steps apart is immaterial
  for timing)."""
  rng = np.random.default_rng(seed)
  envs, frames = [], []
  for i in range(count):
    env = environments.make_env(protocol)
    observation, _ = env.reset(seed=seed + i)
    window = [observation] * CONTEXT
    for _ in range(warmup):
      observation, _, terminated, _, _ = env.step(int(rng.integers(0, 2)))
      assert not terminated
      window = window[1:] + [observation]
    envs.append(env)
    frames.append(np.stack(window))
  return envs, np.stack(frames)


def small_sssm(protocol) -> envmodels.EnvModel:
  config = envmodel_config.make_config("sssm", "minipacman", "sssm")
  # Untrained: the reward coding does not change the compute.
  sizes = pretraining.model_hyperparameters(config, reward_scale=1.0)
  spec = envmodels.EnvModelSpec(
      kind="sssm", observation_shape=protocol.observation_shape,
      num_actions=environments.num_actions(protocol), jump=SSSM_JUMP,
      context_length=CONTEXT)
  model = envmodels.build(spec, seed=0, **sizes)
  model.create_variables()  # envmodels.load would; this one is built here
  return model


def time_planning(model, envs, context, settings: PlannerConfig,
                  repeats: int) -> Dict[str, float]:
  planner = CEMPlanner(model, settings, seed=0)
  planner.plan(context, envs)  # warm-up: tracing
  start = time.perf_counter()
  for _ in range(repeats):
    planner.plan(context, envs)
  per_plan = (time.perf_counter() - start) / repeats
  rows = (len(envs) * settings.population * settings.iterations *
          planner.num_samples)
  # One plan covers c env steps of each of the len(envs) environments.
  env_steps = len(envs) * planner.jump
  return dict(plan_ms=1e3 * per_plan,
              plan_ms_per_env_step=1e3 * per_plan / env_steps,
              rollouts_per_s=rows / per_plan,
              model_steps_per_s=rows * settings.horizon / per_plan,
              num_samples=planner.num_samples)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--horizons", default="2,4,8")
  parser.add_argument("--populations", default="16,64,256")
  parser.add_argument("--iterations", type=int, default=3)
  parser.add_argument("--num_samples", type=int, default=2)
  parser.add_argument("--num_envs", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--episodes", type=int, default=8)
  parser.add_argument("--episode_cap", type=int, default=200)
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "planning.json"))
  args = parser.parse_args()
  horizons = [int(h) for h in args.horizons.split(",")]
  populations = [int(p) for p in args.populations.split(",")]
  config = planning_config.get_config("minipacman")
  protocol = environments.Protocol.from_json(config.protocol.to_dict())

  envs, context = started_envs(protocol, args.num_envs, warmup=4, seed=0)
  models = {"oracle": make_oracle(protocol, jump=1),
            f"sssm (c={SSSM_JUMP}, untrained)": small_sssm(protocol)}
  timing: List[Dict[str, Any]] = []
  for name, model in models.items():
    for horizon in horizons:
      for population in populations:
        settings = PlannerConfig(
            horizon=horizon, population=population,
            iterations=args.iterations,
            num_elites=max(2, population // 8),
            num_samples=args.num_samples)
        row = dict(model=name, jump=model.spec.jump, horizon=horizon,
                   population=population,
                   **time_planning(model, envs, context, settings,
                                   args.repeats))
        timing.append(row)
        print(f"{name} H={horizon} P={population}: "
              f"{row['plan_ms_per_env_step']:.1f} ms/env step", flush=True)
  for env in envs:
    env.close()

  # Returns: the oracle planner against the random policy, same seeds.
  settings = PlannerConfig.from_config(config.planner)
  oracle = models["oracle"]
  planned = running.run_episodes(CEMPlanner(oracle, settings, seed=0),
                                 protocol, args.episodes, args.num_envs,
                                 max_episode_steps=args.episode_cap,
                                 name="bench oracle planner")
  oracle.close()
  random = running.run_episodes(
      UniformRandomPolicy(environments.num_actions(protocol), seed=0),
      protocol, args.episodes, args.num_envs,
      max_episode_steps=args.episode_cap, name="bench random")
  returns = {
      name: dict(mean=float(np.mean(stats.returns)),
                 std=float(np.std(stats.returns)), returns=stats.returns,
                 lengths=stats.lengths,
                 plan_ms_per_env_step=1e3 * stats.plan_seconds_per_env_step)
      for name, stats in (("oracle planner", planned), ("random", random))}

  results = dict(
      date=datetime.datetime.now().isoformat(timespec="seconds"),
      machine=dict(platform=platform.platform(), cpus=os.cpu_count(),
                   tensorflow=tf.__version__),
      env_id=protocol.env_id, num_envs=args.num_envs,
      iterations=args.iterations, num_samples=args.num_samples,
      num_elites="max(2, population // 8)", repeats=args.repeats,
      sssm_note=("built at the 'minipacman' pretraining sizes, untrained: "
                 "planning time does not depend on the weights"),
      timing=timing,
      returns=dict(planner=dataclasses.asdict(settings), episodes=args.episodes,
                   episode_cap=args.episode_cap, **returns))
  os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
  with open(args.output, "w") as f:
    json.dump(results, f, indent=2)

  print(f"\nPlanning time per env step (ms), {args.num_envs} envs in one "
        f"batch, {args.iterations} CEM iterations, sSSM {args.num_samples} "
        "samples per candidate:\n")
  print("| model | c | H | P=" + " | P=".join(map(str, populations)) + " |")
  print("|---|---|---|" + "---|" * len(populations))
  for name in models:
    for horizon in horizons:
      cells = [f"{r['plan_ms_per_env_step']:.1f}" for r in timing
               if r["model"] == name and r["horizon"] == horizon]
      jump = models[name].spec.jump
      print(f"| {name} | {jump} | {horizon} | " + " | ".join(cells) + " |")
  print(f"\nReturns on {protocol.env_id}, {args.episodes} episodes of at "
        f"most {args.episode_cap} steps (planner: H={settings.horizon}, "
        f"P={settings.population}, {settings.iterations} iterations):\n")
  print("| policy | mean | std | mean length | plan ms/env step |")
  print("|---|---|---|---|---|")
  for name, row in returns.items():
    print(f"| {name} | {row['mean']:.2f} | {row['std']:.2f} | "
          f"{np.mean(row['lengths']):.0f} | "
          f"{row['plan_ms_per_env_step']:.2f} |")
  print(f"\nwrote {args.output}")


if __name__ == "__main__":
  main()
