"""The paper's Table 1 on MsPacman (small preset), at a stated CPU budget.

Collects a random-policy MsPacman dataset, pretrains every model kind (VAE
baseline, AR, RAR, dSSM-DET, dSSM-VAE, sSSM, and a jumpy sSSM with c = 3)
for the same number of steps and batch size, then runs
`i2a.run.evaluate_models` on all of them in one run. Writes
benchmarks/results/model_table.{md,json}; the run's workdir is kept under
--workdir so a rerun resumes (each stage skips what is finished).

  python benchmarks/model_table.py [--steps 150] [--batch_size 8]
"""

from __future__ import annotations

import argparse
import os
import time

from configs import collect as collect_config
from configs.envmodels import common as envmodel_config
from i2a import io_utils
from i2a.run import collect as collection
from i2a.run import evaluate_models as model_evaluation
from i2a.run import pretrain as pretraining

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODELS = (("vae", 1), ("ar", 1), ("rar", 1), ("dssm_det", 1),
          ("dssm_vae", 1), ("sssm", 1), ("sssm", 3))


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--workdir", default="/tmp/i2a_model_table")
  parser.add_argument("--steps", type=int, default=150)
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--collect_steps", type=int, default=20_000)
  parser.add_argument("--eval_windows", type=int, default=128)
  args = parser.parse_args()
  started = time.monotonic()
  config = collect_config.get_config("small")
  config.train_steps = args.collect_steps
  config.test_steps = args.collect_steps // 10
  collect_dir = os.path.join(args.workdir, "collect")
  collection.run(config, collect_dir)
  data = os.path.join(collect_dir, "dataset")
  exports, seconds = [], {}
  for kind, jump in MODELS:
    name = kind if jump == 1 else f"{kind}_c{jump}"
    cfg = envmodel_config.make_config(kind, "small",
                                      f"configs/envmodels/{kind}.py")
    cfg.data, cfg.jump = data, jump
    cfg.train_steps, cfg.batch_size = args.steps, args.batch_size
    cfg.eval_windows = args.eval_windows
    cfg.eval_every = cfg.image_every = cfg.checkpoint_every = args.steps
    start = time.monotonic()
    pretraining.run(cfg, os.path.join(args.workdir, name))
    seconds[name] = time.monotonic() - start
    exports.append(os.path.join(args.workdir, name, pretraining.EXPORT))
  rows = model_evaluation.evaluate(exports, data, T=10,
                                   num_windows=args.eval_windows,
                                   batch_size=args.batch_size)
  report = model_evaluation.write_report(rows, RESULTS, 12, 32, data)
  # Name the files after this benchmark and state the budget beside them.
  for ext in ("md", "json"):
    os.replace(report["markdown" if ext == "md" else "json"],
               os.path.join(RESULTS, f"model_table.{ext}"))
  budget = (f"\nBudget: each model trained for {args.steps} steps of batch "
            f"{args.batch_size} (T = 10 after 3 context frames) on "
            f"{args.collect_steps:,} random-policy MsPacman steps (small "
            f"preset, 104x80); held-out: {args.eval_windows} test windows. "
            f"Training wall time per model (2 CPU cores): " + ", ".join(
                f"{k} {v / 60:.1f} min" for k, v in seconds.items()) +
            f". Total {(time.monotonic() - started) / 60:.1f} min.\n"
            "Command: python benchmarks/model_table.py "
            f"--steps {args.steps} --batch_size {args.batch_size}\n")
  path = os.path.join(RESULTS, "model_table.md")
  io_utils.atomic_write_text(path, report["table"] + budget)
  print(report["table"] + budget)


if __name__ == "__main__":
  main()
