"""Learning curves of the I2A variants against model-free A2C on MiniPacman.

One run, sequential, everything built here (nothing is read from earlier
runs), all agents at the SAME number of environment steps, on
MiniPacman-avoid-v0 (where the ghost matters):
  1. collect a uniform-random dataset (configs/collect.py:minipacman with a
     smaller budget: --collect_steps train, a tenth of it held out);
  2. pretrain a dSSM-DET (configs/envmodels/dssm_det.py:minipacman, jump 1)
     and an action-free sSSM (configs/envmodels/sssm_action_free.py:
     minipacman, jump 1) on it, --pretrain_steps each;
  3. train, --env_steps each (configs/agents/*.py:minipacman, unchanged):
       a2c                     model-free baseline (the I2A's torso alone)
       i2a_copy                I2A, network.model=copy (imaginations = s_t|t)
       i2a_distillation        I2A on the dSSM-DET, pi_r distilled from pi
       i2a_learning_to_query   I2A on the dSSM-DET, relaxed pi_r queries
       i2a_imagination_prior   I2A on the action-free sSSM, learned p_imag
       i2a_oracle              I2A-distillation on the emulator itself
                               (network.model=oracle: the upper bound)
  4. evaluate each over the same --episodes episodes (i2a.run.evaluate),
     and the uniform random policy over them too.
Writes benchmarks/results/i2a_curves.png (mean training episode return per
logging interval vs environment steps, i2a.pictures.line_plot, the random
policy as a flat line), i2a_curves.json and i2a_curves.md.

  PYTHONPATH=. python benchmarks/i2a_curves.py [--env_steps 64000]
      [--pretrain_steps 500] [--collect_steps 20000] [--episodes 50]
      [--workdir DIR (kept; default: a temporary directory)]

Budget: the defaults (64k env steps = 800 updates per agent, 500
pretraining steps per model, 50 evaluation episodes) fit about 25 minutes
of wall time on the 2-core development machine shared with other runs,
from throughput measured there first with short runs (load average 4-6):
A2C ~1,300-1,900 env steps/s, I2A copy ~430, distillation ~330,
learning-to-query ~290, imagination prior ~180 (the oracle, added later,
~180: its rollouts are emulator steps in Python); pretraining ~1.5 min for
the dSSM-DET, ~3 min for the sSSM; evaluation ~0.5 min per agent.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root, for configs/

# pylint: disable=wrong-import-position
import numpy as np
import tensorflow as tf

from configs import collect as collect_config
from configs.agents import a2c as a2c_config
from configs.agents import i2a as i2a_config
from configs.envmodels import dssm_det as dssm_det_config
from configs.envmodels import sssm_action_free as sssm_config
from i2a import io_utils, pictures, runs
from i2a.metrics import read_column
from i2a.run import collect as collection
from i2a.run import evaluate as evaluation
from i2a.run import plan as planning
from i2a.run import pretrain as pretraining
from i2a.run import train as training

RESULTS = os.path.join(HERE, "results")
ENV_ID = "MiniPacman-avoid-v0"

# name -> (config module, overrides, which envmodel export ('' = none)).
AGENTS = {
    "a2c": (a2c_config, {}, ""),
    "i2a_copy": (i2a_config, {"network.model": "copy"}, "dssm_det"),
    "i2a_distillation": (i2a_config, {}, "dssm_det"),
    "i2a_learning_to_query": (
        i2a_config, {"network.rollout_policy": "learning_to_query"},
        "dssm_det"),
    "i2a_imagination_prior": (
        i2a_config, {"network.rollout_policy": "imagination_prior"}, "sssm"),
    "i2a_oracle": (i2a_config, {"network.model": "oracle"}, ""),
}


def _set(config, key: str, value: Any) -> None:
  *parents, leaf = key.split(".")
  for parent in parents:
    config = config[parent]
  config[leaf] = value


def pretrain(module, data: str, workdir: str, steps: int) -> Dict[str, Any]:
  config = module.get_config("minipacman")
  config.data, config.jump, config.train_steps = data, 1, steps
  config.eval_every = config.image_every = config.checkpoint_every = steps
  config.eval_windows = 128
  start = time.monotonic()
  held_out = pretraining.run(config, workdir)
  return dict(export=os.path.join(workdir, pretraining.EXPORT),
              kind=config.kind, action_free=config.action_free,
              train_steps=steps, wall_s=time.monotonic() - start,
              held_out_nats_per_frame=held_out["log_likelihood_per_frame"],
              held_out_reward_mse=held_out["reward_mse"])


def train(name: str, exports: Dict[str, str], workdir: str, env_steps: int,
          episodes: int) -> Dict[str, Any]:
  module, overrides, model = AGENTS[name]
  config = module.get_config("minipacman")
  config.env_steps = env_steps
  config.log_every = 40  # 3,200 env steps per point of the curve
  config.plot_every = config.checkpoint_every = 10 ** 9  # at the end only
  if model:
    config.envmodel = exports[model]
  for key, value in overrides.items():
    _set(config, key, value)
  run_dir = os.path.join(workdir, name)
  start = time.monotonic()
  summary = training.run(config, run_dir)
  train_s = time.monotonic() - start
  start = time.monotonic()
  scores = evaluation.evaluate(run_dir, episodes=episodes)
  metrics = os.path.join(run_dir, "metrics.csv")
  steps = read_column(metrics, "env_steps")
  returns = read_column(metrics, "episode_return")
  last = returns[steps > 0.8 * env_steps]  # the last fifth of the budget
  rates = read_column(metrics, "env_steps_per_s")  # per logging interval
  steady = rates[1:] if len(rates) > 1 else rates  # the first one traces
  return dict(
      config=f"{module.__name__.replace('.', '/')}.py:minipacman",
      overrides=overrides, envmodel=model or None,
      env_steps=summary["env_steps"], learner_steps=summary["learner_steps"],
      episodes=summary["episodes"], train_wall_s=train_s,
      env_steps_per_s=summary["env_steps_per_s"],
      steady_env_steps_per_s=float(np.median(steady)),
      final_training_return=float(np.nanmean(last)),
      eval_mean=scores["mean"], eval_std=scores["std"],
      eval_stderr=scores["std"] / np.sqrt(len(scores["returns"])),
      eval_mean_length=float(np.mean(scores["lengths"])),
      eval_wall_s=time.monotonic() - start,
      curve=dict(env_steps=steps.tolist(),
                 episode_return=[None if not np.isfinite(r) else float(r)
                                 for r in returns]))


def write_results(report: Dict[str, Any]) -> None:
  io_utils.atomic_write_json(os.path.join(RESULTS, "i2a_curves.json"),
                             report)
  agents = report["agents"]
  curves = {}
  for name, r in agents.items():
    x = np.array(r["curve"]["env_steps"])
    y = np.array([np.nan if v is None else v
                  for v in r["curve"]["episode_return"]])
    keep = np.isfinite(y)
    curves[name] = (x[keep], y[keep])
  budget = report["budget"]["env_steps"]
  curves["random policy"] = ([0, budget], [report["random"]["mean"]] * 2)
  pictures.line_plot(
      os.path.join(RESULTS, "i2a_curves.png"), curves,
      xlabel="environment steps",
      ylabel="mean training episode return",
      title=f"{ENV_ID}: I2A variants vs A2C ({budget:,} env steps)")
  b, random = report["budget"], report["random"]
  lines = [
      f"# I2A learning curves on {ENV_ID}",
      "",
      f"`python benchmarks/i2a_curves.py --env_steps {b['env_steps']} "
      f"--pretrain_steps {b['pretrain_steps']} --collect_steps "
      f"{b['collect_steps']} --episodes {b['episodes']}` "
      f"({report['date']}, {report['cpus']} CPUs, load average at the end "
      f"{report['load_average'][0]:.1f}; total wall time "
      f"{report['wall_s'] / 60:.1f} min). One seed (0) per agent: a single "
      "run, not a statistically powered comparison.",
      "",
      f"Every agent trains for {b['env_steps']:,} environment steps (16 envs "
      "x 5-step unrolls, the `minipacman` presets unchanged: lr 2e-3, "
      "entropy 0.03; I2A K = 5 rollouts of depth 3, abstract imaginations). "
      f"Models: dSSM-DET and action-free sSSM pretrained "
      f"{b['pretrain_steps']} steps (jump 1) on {b['collect_steps']:,} "
      "uniform-random steps:",
      "",
      "| model | held-out nats/frame | held-out reward MSE | wall s |",
      "|---|---|---|---|",
  ]
  for name, m in report["models"].items():
    lines.append(f"| {name} | {m['held_out_nats_per_frame']:.1f} | "
                 f"{m['held_out_reward_mse']:.3f} | {m['wall_s']:.0f} |")
  lines += [
      "",
      f"Final numbers: training return = mean episode return over the last "
      f"fifth of the budget; evaluation = {b['episodes']} episodes "
      "(sampled actions, evaluate()'s seeds), mean +- standard error; env "
      "steps/s: median over logging intervals after the first (tracing), "
      "while sharing the machine.",
      "",
      "| agent | training return (last fifth) | evaluation return | "
      "eval episode length | env steps/s (steady) | train wall s |",
      "|---|---|---|---|---|---|",
      f"| uniform random | - | {random['mean']:.2f} +- "
      f"{random['stderr']:.2f} | - | - | - |",
  ]
  for name, r in agents.items():
    lines.append(
        f"| {name} | {r['final_training_return']:.2f} | "
        f"{r['eval_mean']:.2f} +- {r['eval_stderr']:.2f} | "
        f"{r['eval_mean_length']:.0f} | {r['steady_env_steps_per_s']:,.0f} | "
        f"{r['train_wall_s']:.0f} |")
  lines += ["", "![curves](i2a_curves.png)", ""]
  io_utils.atomic_write_text(os.path.join(RESULTS, "i2a_curves.md"),
                             "\n".join(lines))
  print("\n".join(lines))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--env_steps", type=int, default=64_000)
  parser.add_argument("--pretrain_steps", type=int, default=500)
  parser.add_argument("--collect_steps", type=int, default=20_000)
  parser.add_argument("--episodes", type=int, default=50)
  parser.add_argument("--agents", default=",".join(AGENTS),
                      help=f"comma-separated among {list(AGENTS)}")
  parser.add_argument("--workdir", default="",
                      help="kept when given; default: a temporary directory")
  args = parser.parse_args()
  names = [n for n in args.agents.split(",") if n]
  unknown = sorted(set(names) - set(AGENTS))
  if unknown:
    parser.error(f"unknown agents {unknown}; known: {list(AGENTS)}")
  started = time.monotonic()
  with tempfile.TemporaryDirectory(prefix="i2a_curves_") as tmp:
    workdir = args.workdir or tmp
    config = collect_config.get_config("minipacman")
    config.train_steps = args.collect_steps
    config.test_steps = max(args.collect_steps // 10, config.num_envs)
    start = time.monotonic()
    collection.run(config, os.path.join(workdir, "collect"))
    collect_s = time.monotonic() - start
    data = os.path.join(workdir, "collect", "dataset")
    needed = {AGENTS[n][2] for n in names} - {""}
    models = {}
    for kind, module in (("dssm_det", dssm_det_config),
                         ("sssm", sssm_config)):
      if kind in needed:
        print(f"pretraining {kind} ...", file=sys.stderr, flush=True)
        models[kind] = pretrain(module, data, os.path.join(workdir, kind),
                                args.pretrain_steps)
    exports = {kind: m["export"] for kind, m in models.items()}
    protocol = runs.protocol_from_config(a2c_config.get_config("minipacman"))
    returns = planning.uniform_random_returns(protocol, args.episodes)
    agents = {}
    for name in names:
      print(f"training {name} ...", file=sys.stderr, flush=True)
      agents[name] = train(name, exports, workdir, args.env_steps,
                           args.episodes)
      print(f"{name}: training return {agents[name]['final_training_return']:.2f}"
            f", evaluation {agents[name]['eval_mean']:.2f}", file=sys.stderr,
            flush=True)
  for m in models.values():
    m.pop("export")
  report = dict(
      env_id=ENV_ID,
      budget=dict(env_steps=args.env_steps, pretrain_steps=args.pretrain_steps,
                  collect_steps=args.collect_steps, episodes=args.episodes),
      collect_wall_s=collect_s, models=models,
      random=dict(mean=float(np.mean(returns)), std=float(np.std(returns)),
                  stderr=float(np.std(returns) / np.sqrt(len(returns)))),
      agents=agents, wall_s=time.monotonic() - started,
      python=platform.python_version(), tensorflow=tf.__version__,
      machine=platform.machine(), cpus=os.cpu_count(),
      load_average=list(os.getloadavg()),
      date=time.strftime("%Y-%m-%dT%H:%M:%S"))
  write_results(report)


if __name__ == "__main__":
  main()
