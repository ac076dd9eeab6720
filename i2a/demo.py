"""python -m i2a.demo (make demo): the whole pipeline, one command.

Stages, each in its own subdirectory of --workdir, each resumable (a rerun
skips finished stages and resumes an interrupted one through the stage's
own resume logic):
  1. collect      MsPacman under the 'small' protocol, random policy
  2. pretrain     a jumpy dSSM-DET and an sSSM (configs/envmodels)
  3. models       the paper's Table 1 form for the pretrained models
  4. report       report.md with the model table, an open-loop prediction
                  strip, the protocol and the package versions
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Dict, List

from absl import app, flags
from ml_collections import config_flags

from configs import collect as collect_config
from configs.envmodels import common as envmodel_config
from envmodels import versions
from i2a import collection, io_utils, model_evaluation, pretraining, runs

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/demo.py:small", "Demo config file[:preset].")
_WORKDIR = flags.DEFINE_string("workdir", "demo_workdir", "Demo directory.")


def _banner(text: str) -> None:
  print(f"\n=== {text} ===", flush=True)


def run(config, workdir: str) -> str:
  """Runs every stage; returns the path of the report."""
  started = time.monotonic()
  workdir = runs.prepare_workdir(workdir, config, None)

  _banner("1/4 collect: random policy on MsPacman")
  collect_cfg = collect_config.get_config(config.collect_preset)
  collect_cfg.train_steps = config.collect_train_steps
  collect_cfg.test_steps = config.collect_test_steps
  collect_dir = os.path.join(workdir, "collect")
  collection.run(collect_cfg, collect_dir)
  data = os.path.join(collect_dir, "dataset")

  exports: List[str] = []
  held_out: Dict[str, Dict[str, float]] = {}
  for i, kind in enumerate(config.envmodels):
    _banner(f"2/4 pretrain {kind} ({i + 1}/{len(config.envmodels)})")
    cfg = envmodel_config.make_config(kind, config.envmodel_preset,
                                      f"configs/envmodels/{kind}.py")
    cfg.data = data
    cfg.train_steps = config.pretrain_steps
    cfg.batch_size = config.pretrain_batch_size
    cfg.eval_windows = config.eval_windows
    cfg.eval_every = cfg.image_every = max(1, config.pretrain_steps // 2)
    cfg.checkpoint_every = max(1, config.pretrain_steps // 4)
    cfg.log_every = max(1, min(cfg.log_every, config.pretrain_steps // 4))
    run_dir = os.path.join(workdir, "pretrain", kind)
    held_out[kind] = pretraining.run(cfg, run_dir)
    exports.append(os.path.join(run_dir, pretraining.EXPORT))

  _banner("3/4 models: the paper's Table 1 form")
  rows = model_evaluation.evaluate(exports, data, T=cfg.T,
                                   num_windows=config.eval_windows,
                                   batch_size=config.pretrain_batch_size)
  table = model_evaluation.write_report(rows, os.path.join(workdir, "models"),
                                        12, 32, data)

  _banner("4/4 report")
  report = write_report(workdir, config, collect_dir, exports, table["table"],
                        time.monotonic() - started)
  print(f"\nreport: {report}", flush=True)
  return report


def write_report(workdir: str, config, collect_dir: str, exports: List[str],
                 table: str, seconds: float) -> str:
  protocol = io_utils.read_json(os.path.join(collect_dir, runs.PROTOCOL))
  images = os.path.join(workdir, "report_images")
  os.makedirs(images, exist_ok=True)
  strips = []
  for export in exports:
    run_dir = os.path.dirname(export)
    kind = os.path.basename(run_dir)
    candidates = sorted(f for f in os.listdir(os.path.join(run_dir, "images"))
                        if f.startswith("open_loop_") and f.endswith(".png"))
    if candidates:
      target = os.path.join(images, f"open_loop_{kind}.png")
      shutil.copyfile(os.path.join(run_dir, "images", candidates[-1]), target)
      strips.append((kind, os.path.relpath(target, workdir)))
  manifest = io_utils.read_json(os.path.join(collect_dir, "dataset", "train",
                                             "manifest.json"))
  lines = [
      "# I2A framework demo report", "",
      f"Preset `{config.preset}`; all numbers below were measured in this "
      f"run ({seconds / 60:.1f} minutes).", "",
      "## Data", "",
      f"{manifest['steps']:,} train steps in {manifest['episodes']} "
      f"episodes, random policy, protocol:", "",
      "```json", json_dumps(protocol), "```", "",
      "## Environment models (Buesing et al. 2018, Table 1 form)", "",
      f"Each trained for {config.pretrain_steps} steps of batch "
      f"{config.pretrain_batch_size}.", "", table, "",
      "## Open-loop predictions (rows: truth, prediction, error; the first "
      "columns are the context frames)", ""]
  lines += [f"### {kind}\n\n![{kind}]({path})\n" for kind, path in strips]
  lines += ["## Versions", "", "| package | version |", "|---|---|"]
  for name in list(versions.PINNED) + ["gymnasium", "ale-py", "numpy"]:
    lines.append(f"| {name} | {versions.installed_version(name)} |")
  lines += ["", "## Next stage", "",
            "Agents are trained on these frozen models with "
            "`python -m i2a.train` (docs/agents.md)."]
  path = os.path.join(workdir, "report.md")
  io_utils.atomic_write_text(path, "\n".join(lines) + "\n")
  return path


def json_dumps(data) -> str:
  import json  # pylint: disable=import-outside-toplevel
  return json.dumps(data, indent=2, sort_keys=True)


def main(argv):
  del argv
  run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
