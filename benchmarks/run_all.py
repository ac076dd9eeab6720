"""make bench: runs every benchmark script here, one after another.

Each script measures on this machine, prints a markdown table and writes
JSON under benchmarks/results/; those in MANUAL run only when named. Pass
script names to run a subset:
  python benchmarks/run_all.py collect_speed minipacman_speed
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Not run by default: the exporter, the `paper` data's collector,
# online_adaptation and resume_exactness (a trained run's workdir) need
# their arguments, and the XLA side runs under an interpreter with jax,
# not the project's (docs/performance.md, "On a GPU"); claim2_summary
# measures nothing (a picture of the sweeps' committed reports).
MANUAL = ("export_xla", "xla_speed", "paper_data", "xla_pretrain",
          "xla_pretrain_report", "online_adaptation", "resume_exactness",
          "claim2_summary")
# Modules the scripts import, not benchmarks.
LIBRARIES = ("run_all", "__init__", "xla_inputs", "packed_data")


def main(names) -> int:
  scripts = sorted(f[:-3] for f in os.listdir(HERE)
                   if f.endswith(".py") and f[:-3] not in LIBRARIES)
  selected = names or [s for s in scripts if s not in MANUAL]
  unknown = sorted(set(selected) - set(scripts))
  if unknown:
    print(f"unknown benchmarks {unknown}; known: {scripts}", file=sys.stderr)
    return 2
  env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
  failed = []
  for name in selected:
    print(f"\n### {name}", flush=True)
    start = time.monotonic()
    code = subprocess.call([sys.executable, os.path.join(HERE, name + ".py")],
                           env=env)
    print(f"({name}: exit {code}, {time.monotonic() - start:.0f}s)",
          flush=True)
    if code:
      failed.append(name)
  if failed:
    print(f"failed: {failed}", file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
