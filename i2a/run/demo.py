r"""The runtime of `python -m i2a.demo` (make demo): the whole pipeline.

Stages, each in its own subdirectory of --workdir, each resumable (a rerun
skips finished stages and resumes an interrupted one through the stage's
own resume logic):
  1. collect      MsPacman under the 'small' protocol, random policy
  2. pretrain     a jumpy dSSM-DET and an sSSM (configs/envmodels)
  3. models       the paper's Table 1 form for the pretrained models
  4. agents       the model-free A2C baseline and an I2A (distillation) over
                  the frozen jumpy dSSM-DET, for a short budget
  5. evaluate     both agents under the recorded protocol
  6. report       report.md with learning curves, the model table, an
                  open-loop prediction strip, the agents' scores, the
                  protocol and the package versions
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Dict, List, Sequence, Tuple

import numpy as np

from configs import collect as collect_config
from configs.agents import a2c as a2c_config
from configs.agents import i2a as i2a_config
from configs.envmodels import common as envmodel_config
from i2a import io_utils, pictures, runs, versions
from i2a.metrics import read_column
from i2a.run import collect as collection
from i2a.run import evaluate as agent_evaluation
from i2a.run import evaluate_models as model_evaluation
from i2a.run import pretrain as pretraining
from i2a.run import train as agent_training

STAGES = 6
TIMING = "demo_time.json"  # the seconds of every invocation, added up


def _banner(text: str) -> None:
  print(f"\n=== {text} ===", flush=True)


def run(config, workdir: str) -> str:
  """Runs every stage; returns the path of the report. The time of an
  invocation that fails or is interrupted counts towards the report's total
  too (a rerun continues its work)."""
  started = time.monotonic()
  workdir = runs.prepare_workdir(workdir, config, None)
  try:
    return _stages(config, workdir, started)
  except BaseException:
    _add_time(workdir, time.monotonic() - started)
    raise


def _stages(config, workdir: str, started: float) -> str:
  """The six stages of the module docstring, then the report."""
  _banner(f"1/{STAGES} collect: random policy")
  collect_cfg = collect_config.get_config(config.collect_preset)
  collect_cfg.train_steps = config.collect_train_steps
  collect_cfg.test_steps = config.collect_test_steps
  collect_dir = os.path.join(workdir, "collect")
  collection.run(collect_cfg, collect_dir)
  data = os.path.join(collect_dir, "dataset")

  exports: List[str] = []
  held_out: Dict[str, Dict[str, float]] = {}
  for i, kind in enumerate(config.envmodels):
    _banner(f"2/{STAGES} pretrain {kind} "
            f"({i + 1}/{len(config.envmodels)})")
    cfg = envmodel_config.make_config(kind, config.envmodel_preset,
                                      f"configs/envmodels/{kind}.py")
    cfg.data = data
    if kind not in config.pretrain_steps:
      raise ValueError(
          f"config.envmodels names {kind!r} but config.pretrain_steps has no "
          f"budget for it (it has {', '.join(config.pretrain_steps)}): add "
          f"--config.pretrain_steps.{kind}=STEPS or drop the model.")
    steps = config.pretrain_steps[kind]
    cfg.train_steps = steps
    cfg.batch_size = config.pretrain_batch_size
    cfg.learning_rate = config.pretrain_learning_rate
    cfg.eval_windows = config.eval_windows
    cfg.eval_every = cfg.image_every = max(1, steps // 2)
    cfg.checkpoint_every = max(1, steps // 4)
    cfg.log_every = max(1, min(cfg.log_every, steps // 4))
    run_dir = os.path.join(workdir, "pretrain", kind)
    held_out[kind] = pretraining.run(cfg, run_dir)
    exports.append(os.path.join(run_dir, pretraining.EXPORT))

  _banner(f"3/{STAGES} models: the paper's Table 1 form")
  rows = model_evaluation.evaluate(exports, data, T=cfg.T,
                                   num_windows=config.eval_windows,
                                   batch_size=config.pretrain_batch_size)
  table = model_evaluation.write_report(rows, os.path.join(workdir, "models"),
                                        12, 32, data)

  agent_runs = {}
  for name, module in (("a2c", a2c_config), ("i2a", i2a_config)):
    _banner(f"4/{STAGES} train {name}")
    cfg = module.get_config(config.agent_preset)
    cfg.env_steps = config.agent_env_steps[name]
    cfg.plot_every = cfg.checkpoint_every = config.agent_checkpoint_every
    cfg.log_every = config.agent_log_every
    if name == "i2a":
      cfg.envmodel = exports[0]  # the jumpy dSSM-DET
    run_dir = os.path.join(workdir, "agents", name)
    agent_training.run(cfg, run_dir)
    agent_runs[name] = run_dir

  scores = {}
  for name, run_dir in agent_runs.items():
    _banner(f"5/{STAGES} evaluate {name}")
    scores[name] = agent_evaluation.evaluate(
        run_dir, episodes=config.agent_eval_episodes)
    print(f"{name}: mean return {scores[name]['mean']:.1f} over "
          f"{len(scores[name]['returns'])} episodes", flush=True)

  _banner(f"6/{STAGES} report")
  seconds, invocations = _add_time(workdir, time.monotonic() - started)
  report = write_report(workdir, config, collect_dir, exports, table["table"],
                        agent_runs, scores, seconds, invocations, rows)
  print(f"\nreport: {report}", flush=True)
  return report


def _add_time(workdir: str, seconds: float) -> Tuple[float, int]:
  """Adds this invocation's time to the workdir's total (a rerun skips the
  finished stages, so the report counts every invocation's time)."""
  path = os.path.join(workdir, TIMING)
  total = (io_utils.read_json(path) if os.path.exists(path)
           else dict(seconds=0.0, invocations=0))
  total = dict(seconds=total["seconds"] + seconds,
               invocations=total["invocations"] + 1)
  io_utils.atomic_write_json(path, total)
  return total["seconds"], total["invocations"]


def _open_loop_sentence(row) -> str:
  """The held-out open-loop error T model steps ahead next to the
  copy-last-frame baseline's, as a sentence for the report."""
  if row is None or not row.open_loop_mse:
    return ""
  steps = len(row.open_loop_mse)
  model, copy = row.open_loop_mse[-1], row.copy_last_frame_mse[-1]
  verdict = ("beats the copy-last-frame baseline" if model < copy else
             "does not beat the copy-last-frame baseline")
  return (f"Held-out open-loop MSE {steps} model steps ahead "
          f"({steps * row.jump} agent steps): {model:.5f}, "
          f"copy-last-frame {copy:.5f}: the model {verdict} "
          f"({model / copy:.2f}x its error). Per step: model "
          + ", ".join(f"{v:.4f}" for v in row.open_loop_mse) + "; copy "
          + ", ".join(f"{v:.4f}" for v in row.copy_last_frame_mse)
          + "." + _moving_sentence(row) + "\n\n")


def _moving_sentence(row) -> str:
  """The same comparison on the moving pixels (sprites, score, eaten
  pellets), where a blurred or missing sprite shows."""
  model = (row.open_loop_moving_mse or [None])[-1]
  copy = (row.copy_last_frame_moving_mse or [None])[-1]
  background = (row.background_moving_mse or [None])[-1]
  if model is None or copy is None or background is None:
    return ""
  verdict = ("errs less there than the static background: it keeps "
             "something of the moving objects (in MSE a blur counts too: "
             "the pictures show what)" if model < background else
             "errs no less there than the static background: it predicts "
             "the moving objects no better than leaving them out")
  return (f" On the moving pixels alone (where a frame differs from its "
          f"window's per-pixel median: sprites, score, eaten pellets), the "
          f"last step: model {model:.4f}, copy-last-frame {copy:.4f}, the "
          f"static background (that median frame, without the moving "
          f"objects) {background:.4f}: the model {verdict}.")


def _learning_curves(workdir: str, agent_runs: Dict[str, str]) -> str:
  curves = {}
  for name, run_dir in agent_runs.items():
    metrics = os.path.join(run_dir, "metrics.csv")
    steps = read_column(metrics, "env_steps")
    returns = read_column(metrics, "episode_return")
    if steps is not None and returns is not None:
      keep = np.isfinite(returns)
      curves[name] = (steps[keep], returns[keep])
  path = os.path.join(workdir, "report_images", "learning_curves.png")
  pictures.line_plot(path, curves, "environment steps", "episode return",
                     "learning curves (this run)")
  return path


def write_report(workdir: str, config, collect_dir: str, exports: List[str],
                 table: str, agent_runs: Dict[str, str],
                 scores: Dict[str, dict], seconds: float,
                 invocations: int = 1,
                 rows: Sequence[model_evaluation.ModelRow] = ()) -> str:
  protocol = io_utils.read_json(os.path.join(collect_dir, runs.PROTOCOL))
  images = os.path.join(workdir, "report_images")
  os.makedirs(images, exist_ok=True)
  strips = []
  errors = {os.path.abspath(r.export): r for r in rows}
  for export in exports:
    run_dir = os.path.dirname(export)
    kind = os.path.basename(run_dir)
    candidates = sorted(f for f in os.listdir(os.path.join(run_dir, "images"))
                        if f.startswith("open_loop_") and f.endswith(".png"))
    if candidates:
      target = os.path.join(images, f"open_loop_{kind}.png")
      shutil.copyfile(os.path.join(run_dir, "images", candidates[-1]), target)
      strips.append((kind, os.path.relpath(target, workdir),
                     _open_loop_sentence(errors.get(os.path.abspath(export)))))
  curves = os.path.relpath(_learning_curves(workdir, agent_runs), workdir)
  manifest = io_utils.read_json(os.path.join(collect_dir, "dataset", "train",
                                             "manifest.json"))
  lines = [
      "# I2A framework demo report", "",
      f"Preset `{config.preset}`; every number below was measured in this "
      f"run ({seconds / 60:.1f} minutes"
      + (f" over {invocations} invocations, reruns skipping the finished "
         "stages" if invocations > 1 else "") + ").", "",
      "## Data", "",
      f"{manifest['steps']:,} train steps in {manifest['episodes']} "
      f"episodes, random policy, protocol:", "",
      "```json", json.dumps(protocol, indent=2, sort_keys=True), "```", "",
      "## Environment models (Buesing et al. 2018, Table 1 form)", "",
      "Trained for "
      + ", ".join(f"{kind} {steps:,} steps" for kind, steps
                  in config.pretrain_steps.items() if kind in config.envmodels)
      + f" of batch {config.pretrain_batch_size} (learning rate "
      f"{config.pretrain_learning_rate:g}).", "", table, "",
      "## Open-loop predictions (rows: truth, prediction, error; the first "
      "columns are the context frames)", ""]
  lines += [f"### {kind}\n\n{sentence}![{kind}]({path})\n"
            for kind, path, sentence in strips]
  lines += [
      "## Agents", "",
      "The model-free A2C baseline and an I2A (distillation rollout policy, "
      "K = one rollout per action) over the frozen "
      f"{os.path.relpath(exports[0], workdir)} model, each "
      "for a short budget: the pipeline works end to end; the budget is far "
      "too small for the papers' results.", "",
      f"![learning curves]({curves})", "",
      "| agent | env steps | evaluation episodes | mean return | std |",
      "|---|---|---|---|---|"]
  for name, score in scores.items():
    lines.append(f"| {name} | {score['env_steps']:,} | "
                 f"{len(score['returns'])} | {score['mean']:.1f} | "
                 f"{score['std']:.1f} |")
  for name, score in scores.items():
    if score.get("imagination"):  # an I2A: its imagined rollouts
      last = score["imagination"][-1]  # {"step", "png"}
      target = os.path.join(images, f"imagination_{name}.png")
      shutil.copyfile(last["png"], target)
      lines += ["", f"### What {name} imagines", "",
                f"At step {last['step']} of its first evaluation episode: "
                "each rollout's first action, the model's rendering of the "
                "imagined states and its predicted rewards, below the real "
                "frames that followed.", "",
                f"![{name} imagination]({os.path.relpath(target, workdir)})"]
  lines += ["", "## Versions", "", "| package | version |", "|---|---|"]
  for name, version in versions.recorded_versions().items():
    lines.append(f"| {name} | {version} |")
  path = os.path.join(workdir, "report.md")
  io_utils.atomic_write_text(path, "\n".join(lines) + "\n")
  return path
