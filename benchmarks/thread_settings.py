"""TensorFlow's thread pool settings, compared on imagination and training.

Where it sits: the binaries size TensorFlow's intra- and inter-op pools at
start-up from config `threads` (envmodels/precision.py's `set_threads`;
'auto' is the rule this benchmark chose). Pools are fixed per process, so
each setting runs in its own child process, settings alternating round by
round (so machine load hits all alike), and each child measures:
  rollout    benchmarks/rollout_speed.py's abstract rollouts (16 windows x
             K = 5 x depth 3) of the `--size` `--kinds`, transitions/s
  pretrain   benchmarks/pretrain_speed.py's train step (the `small` dSSM-DET,
             batch 8: loss, clipping, Adam), steps/s
  train      benchmarks/train_throughput.py's embedded training loop (actor
             unrolls and learner steps, in-process transport) of each of
             `--train_rows`, env steps/s, with the row's config.threads set
             to the setting (the Trainer sizes the pools from it)
Reported: the median over rounds of each setting, and its ratio to TF's
default (or to the first setting where 'default' is not among them).

  python benchmarks/thread_settings.py [--settings 'default;2,1;1,1']
      [--rounds 2] [--size small] [--kinds sssm] [--precision bf16]
      [--train_rows a2c/minipacman,i2a_distillation/minipacman]
      [--train_updates 20] [--no_pretrain] [--output FILE]
(`--settings` is ';'-separated: each 'default', 'auto' or 'INTRA,INTER'.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root
sys.path.insert(0, HERE)  # the other benchmarks

RESULTS = os.path.join(HERE, "results")


def child(threads: str, size: str, kinds: List[str], p: str,
          pretrain: bool, train_rows: List[str], train_updates: int,
          output: str) -> None:
  """One measurement of every bench under `threads`, as JSON to `output`."""
  # pylint: disable=import-outside-toplevel
  from envmodels import precision
  record = precision.set_threads(threads)  # before any TF op
  import pretrain_speed
  import rollout_speed
  import train_throughput
  from i2a import io_utils
  result: Dict[str, Any] = {}
  if kinds:
    for r in rollout_speed.measure([size], kinds, [p], 2):
      result[f"rollout {r['kind']}"] = r["abstract_per_s"]
  if pretrain:
    train = pretrain_speed.speed(["dssm_det"], [p], 8, 2, False)
    result["pretrain dssm_det"] = train[0]["steps_per_s"]
  for name in train_rows:
    row = train_throughput.ROWS[name]
    row = dataclasses.replace(
        row, overrides={**row.overrides, "threads": threads})
    measured = train_throughput.measure(row, train_updates,
                                        max(2, train_updates // 5), p)
    result[f"train {name}"] = measured["env_steps_per_s"]
  io_utils.atomic_write_json(output, dict(result=result, threads=record))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--settings", default="default;2,1;1,1")
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--size", default="small")
  parser.add_argument("--kinds", default="sssm",
                      help="rollout_speed kinds, comma-separated")
  parser.add_argument("--precision", default="bf16")
  parser.add_argument("--train_rows", default="",
                      help="benchmarks/train_throughput.py rows, "
                      "comma-separated")
  parser.add_argument("--train_updates", type=int, default=20)
  parser.add_argument("--no_pretrain", action="store_true",
                      help="skip the pretraining step's measurement")
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "thread_settings.json"))
  parser.add_argument("--child", default="", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    child(args.child, args.size, [k for k in args.kinds.split(",") if k],
          args.precision, not args.no_pretrain,
          [r for r in args.train_rows.split(",") if r], args.train_updates,
          args.output)
    return
  # pylint: disable=import-outside-toplevel
  import numpy as np
  from envmodels import precision
  from i2a import io_utils
  settings = [s for s in args.settings.split(";") if s]
  for setting in settings:
    precision.resolve_threads(setting)  # refuses a malformed one early
  import train_throughput
  unknown = sorted({r for r in args.train_rows.split(",") if r} -
                   set(train_throughput.ROWS))
  if unknown:
    parser.error(f"--train_rows: unknown {unknown}; the rows are "
                 f"{sorted(train_throughput.ROWS)}.")
  samples: Dict[str, Dict[str, List[float]]] = {s: {} for s in settings}
  records: Dict[str, Any] = {}
  with tempfile.TemporaryDirectory() as tmp:
    for round_ in range(args.rounds):
      for setting in settings:
        out = os.path.join(tmp, "child.json")
        subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", setting,
             "--size", args.size, "--kinds", args.kinds,
             "--precision", args.precision,
             "--train_rows", args.train_rows,
             "--train_updates", str(args.train_updates),
             *(["--no_pretrain"] if args.no_pretrain else []),
             "--output", out], check=True, stdout=subprocess.DEVNULL)
        with open(out, encoding="utf-8") as f:
          measured = json.load(f)
        records[setting] = measured["threads"]
        for name, value in measured["result"].items():
          samples[setting].setdefault(name, []).append(value)
        print(f"round {round_ + 1}/{args.rounds} {setting}: "
              f"{measured['result']}", flush=True)
  median = {s: {name: float(np.median(v)) for name, v in m.items()}
            for s, m in samples.items()}
  names = list(median[settings[0]])
  base = median.get("default", median[settings[0]])
  lines = ["| threads (intra, inter) | " + " | ".join(names) + " |",
           "|---" * (len(names) + 1) + "|"]
  for s in settings:
    r = records[s]
    lines.append(f"| {s} ({r['intra_op_threads']}, {r['inter_op_threads']})"
                 " | " + " | ".join(
                     f"{median[s][n]:,.2f} ({median[s][n] / base[n]:.2f}x)"
                     for n in names) + " |")
  lines.append(
      f"\n{args.size} size, {args.precision}; rollouts: abstract "
      "transitions/s, pretrain: steps/s, train: env steps/s; median of "
      f"{args.rounds} alternating child runs (0 threads: TF's default, "
      f"{records[settings[0]]['logical_cpus']} logical CPUs, "
      f"{records[settings[0]]['physical_cores']} physical cores).")
  table = "\n".join(lines)
  print(table)
  flags = precision.cpu_flags()
  output = args.output if args.output.endswith(".json") else \
      args.output + ".json"
  io_utils.atomic_write_json(output, dict(
      median=median, samples=samples, threads=records,
      load_average=os.getloadavg(), machine=platform.processor() or
      platform.machine(), cpu=cpu_model(),
      cpu_flags=sorted(f for f in flags if f.startswith(("avx", "amx"))
                       or f == "fma"),
      command=" ".join(sys.argv)))
  io_utils.atomic_write_text(os.path.splitext(output)[0] + ".md",
                             table + "\n")


def cpu_model() -> str:
  """/proc/cpuinfo's model name ('' where it does not say)."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return ""


if __name__ == "__main__":
  main()
