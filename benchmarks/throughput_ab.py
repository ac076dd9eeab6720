"""Summarises an A/B of training throughput: a base revision and this one.

The A/B runs benchmarks/train_throughput.py of the two checkouts in turn,
round after round in one shell (so the machine's changing load falls on
both alike), each round writing base_R.json (the base checkout's script)
and new_R.json (this checkout's, with `--transports local,reverb`):

  git archive BASE_COMMIT | tar -x -C BASE_DIR
  for r in 1 2 3; do
    (cd BASE_DIR && PYTHONPATH=$PWD python benchmarks/train_throughput.py \\
       --rows ROWS --precisions P --updates 30 --warmup 3 \\
       --output OUT/base_$r.json)
    (PYTHONPATH=$PWD python benchmarks/train_throughput.py --rows ROWS \\
       --precisions P --transports local,reverb --updates 30 --warmup 3 \\
       --output OUT/new_$r.json)
  done
  python benchmarks/throughput_ab.py OUT [--output OUT.md]

(run_all.py runs it without arguments: it summarises the committed A/B,
results/train_throughput_ab/, into results/train_throughput_ab.md.)

Prints (and writes) a markdown table per row: the median env steps/s of
the base, of this revision over Reverb and in-process ('local'), the
median and every round's ratio local / base, where the time went, and
the load averages the runs ended at.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# pylint: disable=wrong-import-position
from i2a import io_utils


def summary(folder: str) -> str:
  rounds = sorted(glob.glob(os.path.join(folder, "base_*.json")))
  if not rounds:
    raise SystemExit(f"no base_R.json in {folder}: run the A/B first (see "
                     "this script's docstring).")
  rows = {}
  loads = []
  for base_path in rounds:
    r = re.search(r"base_(\d+)\.json$", base_path).group(1)
    new_path = os.path.join(folder, f"new_{r}.json")
    if not os.path.exists(new_path):
      raise SystemExit(f"{base_path} has no partner {new_path}.")
    base, new = io_utils.read_json(base_path), io_utils.read_json(new_path)
    loads += [base["load_average"][0], new["load_average"][0]]
    for name, cell in base["rows"].items():
      rows.setdefault(name, []).append(dict(
          base=cell, local=new["rows"][f"{name}/local"],
          reverb=new["rows"][f"{name}/reverb"]))
  lines = [
      "| row | base env steps/s | reverb (this revision) | local (this "
      "revision) | local / base (median) | local / base per round | base "
      "actor ms/unroll, learner ms/step | local actor ms/unroll, learner "
      "ms/step |", "|---|---|---|---|---|---|---|---|"]
  for name, cells in rows.items():
    def median(which, field="env_steps_per_s"):
      return statistics.median(c[which][field] for c in cells)
    ratios = [c["local"]["env_steps_per_s"] / c["base"]["env_steps_per_s"]
              for c in cells]
    lines.append(
        f"| {name} | {median('base'):,.0f} | {median('reverb'):,.0f} | "
        f"{median('local'):,.0f} | {statistics.median(ratios):.2f} | "
        f"{', '.join(f'{x:.2f}' for x in ratios)} | "
        f"{median('base', 'actor_ms_per_unroll'):.1f}, "
        f"{median('base', 'learner_ms_per_step'):.1f} | "
        f"{median('local', 'actor_ms_per_unroll'):.1f}, "
        f"{median('local', 'learner_ms_per_step'):.1f} |")
  lines.append(f"\n{len(rounds)} rounds; load average (1 min) at the end "
               f"of each run: {min(loads):.1f} to {max(loads):.1f} (2 "
               "cores).")
  return "\n".join(lines) + "\n"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
      "folder", nargs="?",
      default=os.path.join(HERE, "results", "train_throughput_ab"),
      help="where base_R.json and new_R.json are (default: the committed "
      "A/B, results/train_throughput_ab)")
  parser.add_argument("--output", default="",
                      help="the markdown file (default: FOLDER.md)")
  args = parser.parse_args()
  text = summary(args.folder)
  print(text)
  io_utils.atomic_write_text(
      args.output or args.folder.rstrip(os.sep) + ".md", text)


if __name__ == "__main__":
  main()
