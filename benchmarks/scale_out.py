"""Scale-out: env steps/s with 1, 2 and 4 actors vs the embedded mode, with
both launchers (the local supervisor and the Ray backend).

Each row trains the same config (default: A2C, minipacman preset: 16 envs x
5-step unrolls, batch 16) for `--seconds` of wall time after a warm-up:
  embedded   i2a/run/train.py's Trainer in this process: actor and learner
             alternate (python -m i2a.train);
  launch N   python -m i2a.launch --num_actors=N: a Reverb server, N actor
             processes and a learner process on this machine, started and
             supervised by the local launcher;
  ray N      the same with --backend=ray: the same role processes under Ray
             actors, on a Ray cluster of this machine started on 127.0.0.1
             (usage statistics off) by the launch (--backends picks).
Reported per row, over the timed part (from the learner's metrics.csv):
  env steps/s          environment steps the learner trained on, per second
  learner steps/s      updates per second
  learner utilisation  fraction of wall time in the update step (update +
                       publishing the weights), the rest waiting for data
                       (distributed: measured in the dataset; embedded: the
                       actor's turn) or in logging
  data wait            fraction of wall time the learner waited for unrolls
  start-up s           (launches) from the command to the learner's first
                       logged row (log_every = 25 updates): processes, Ray,
                       TensorFlow, the first weights and unrolls
Writes benchmarks/results/scale_out.json (or --output) and prints a
markdown table. `--set KEY=VALUE` (repeatable) overrides a config field in
every row, e.g. an I2A's envmodel export:

  python benchmarks/scale_out.py [--actors 1,2,4] [--seconds 40]
      [--warmup_steps 50] [--no_embedded] [--backends local,ray]
      [--config configs/agents/a2c.py:minipacman]
      [--set envmodel=RUN/dssm_det/export --set log_every=5] [--output FILE]
"""

from __future__ import annotations

import argparse
import ast
import csv
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the repository root, for configs/

# pylint: disable=wrong-import-position
import numpy as np
import tensorflow as tf

from i2a import io_utils
from i2a.run import train as training

RESULTS = os.path.join(HERE, "results")
# Cadence for a measurement: log often, never plot or checkpoint midway.
OVERRIDES = {"env_steps": 10**9, "log_every": 25, "checkpoint_every": 10**6,
             "plot_every": 10**6}


def parse_sets(sets: List[str]) -> Dict[str, str]:
  """["key=value", ...] -> {key: value} (values as given on a command line)."""
  out = {}
  for item in sets:
    key, sep, value = item.partition("=")
    if not sep or not key:
      raise SystemExit(f"--set expects KEY=VALUE (e.g. envmodel=RUN/export), "
                       f"given {item!r}")
    out[key] = value
  return out


def _literal(value: str) -> Any:
  try:
    return ast.literal_eval(value)
  except (ValueError, SyntaxError):
    return value  # a string, e.g. a path


def load_config(spec: str, sets: Dict[str, str]):
  path, _, preset = spec.partition(":")
  module = __import__(path[:-len(".py")].replace("/", "."),
                      fromlist=["get_config"])
  config = module.get_config(preset)
  config.update(OVERRIDES)
  for key, value in sets.items():
    parent, _, name = key.rpartition(".")
    (config if not parent else config[parent])[name] = _literal(value)
  return config


def rows_after(metrics: str, warmup_steps: int) -> List[Dict[str, float]]:
  """metrics.csv rows (complete lines) logged after `warmup_steps`."""
  if not os.path.exists(metrics):
    return []
  with open(metrics, newline="") as f:
    text = f.read()
  lines = text.split("\n")
  complete = "\n".join(lines[:-1]) if not text.endswith("\n") else text
  rows = []
  for row in csv.DictReader(complete.splitlines()):
    try:
      parsed = {k: float(v) for k, v in row.items() if v not in ("", None)}
    except ValueError:
      continue
    if parsed.get("step", 0) > warmup_steps:
      rows.append(parsed)
  return rows


def summarise(rows: List[Dict[str, float]]) -> Dict[str, float]:
  """Throughput and time fractions over logged intervals (time-weighted)."""
  if len(rows) < 2:
    raise RuntimeError(f"only {len(rows)} logged intervals: run longer "
                       "(--seconds) or log more often")
  steps = np.array([r["step"] for r in rows])
  rows = rows[1:]  # The first row is where timing starts.
  deltas = np.diff(steps)
  durations = deltas / np.array([r["learner_steps_per_s"] for r in rows])
  env_deltas = np.array([r["env_steps_per_s"] for r in rows]) * durations
  wall = float(durations.sum())
  out = dict(seconds=wall, learner_steps=int(deltas.sum()),
             env_steps=int(round(env_deltas.sum())),
             env_steps_per_s=float(env_deltas.sum() / wall),
             learner_steps_per_s=float(deltas.sum() / wall))
  for key in ("learner_utilisation", "learner_data_wait"):
    if all(key in r for r in rows):
      out[key] = float(np.sum([r[key] for r in rows] * durations) / wall)
  return out


def measure_embedded(spec: str, sets: Dict[str, str], seconds: float,
                     warmup_steps: int) -> Dict[str, Any]:
  config = load_config(spec, sets)
  with tempfile.TemporaryDirectory() as tmpdir:
    trainer = training.Trainer(config, os.path.join(tmpdir, "run"))
    try:
      trainer.learner.publish()
      unrolls = config.batch_size // config.num_envs
      def update():
        start = time.perf_counter()
        for _ in range(unrolls):
          trainer.actor.unroll()
        middle = time.perf_counter()
        trainer.learner.step()
        return middle - start, time.perf_counter() - middle
      for _ in range(warmup_steps):
        update()
      acting = learning = 0.0
      updates = 0
      start = time.perf_counter()
      while time.perf_counter() - start < seconds:
        a, l = update()
        acting, learning, updates = acting + a, learning + l, updates + 1
      wall = time.perf_counter() - start
    finally:
      trainer.close()
  env_steps = updates * config.batch_size * config.unroll_length
  return dict(mode="embedded", actors=1, seconds=wall, learner_steps=updates,
              env_steps=env_steps, env_steps_per_s=env_steps / wall,
              learner_steps_per_s=updates / wall,
              learner_utilisation=learning / wall,
              learner_data_wait=acting / wall)


def first_row_time(metrics: str) -> bool:
  """Whether metrics.csv holds a complete logged row."""
  return bool(rows_after(metrics, -1))


def measure_launch(spec: str, sets: Dict[str, str], actors: int,
                   seconds: float,
                   warmup_steps: int, startup_timeout_s: float = 300.0,
                   backend: str = "local") -> Dict[str, Any]:
  with tempfile.TemporaryDirectory() as tmpdir:
    workdir = os.path.join(tmpdir, "run")
    output = os.path.join(tmpdir, "launch.out")
    command = [sys.executable, "-m", "i2a.launch", f"--config={spec}",
               f"--workdir={workdir}", f"--num_actors={actors}",
               f"--backend={backend}"] + [
                   f"--config.{k}={v}"
                   for k, v in {**OVERRIDES, **sets}.items()]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               RAY_USAGE_STATS_ENABLED="0")
    started = time.monotonic()
    with open(output, "wb") as out:
      launch = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    metrics = os.path.join(workdir, "metrics.csv")
    startup_s = None
    try:
      deadline = time.monotonic() + startup_timeout_s
      while not rows_after(metrics, warmup_steps):
        if startup_s is None and first_row_time(metrics):
          startup_s = time.monotonic() - started
        if launch.poll() is not None or time.monotonic() > deadline:
          with open(output, errors="replace") as f:
            raise RuntimeError(f"the launch did not warm up:\n"
                               f"{f.read()[-3000:]}")
        time.sleep(0.5)
      if startup_s is None:
        startup_s = time.monotonic() - started
      first = rows_after(metrics, warmup_steps)[0]["step"]
      time.sleep(seconds)
    finally:
      launch.send_signal(signal.SIGTERM)
      launch.wait(timeout=120)
    rows = rows_after(metrics, first - 1)
    result = summarise(rows)
  result.update(mode="launch" if backend == "local" else backend,
                actors=actors, startup_s=startup_s)
  return result


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--config", default="configs/agents/a2c.py:minipacman")
  parser.add_argument("--actors", default="1,2,4",
                      help="comma-separated actor process counts")
  parser.add_argument("--seconds", type=float, default=40.0,
                      help="timed wall seconds per row")
  parser.add_argument("--warmup_steps", type=int, default=50,
                      help="learner steps before timing starts")
  parser.add_argument("--no_embedded", action="store_true")
  parser.add_argument("--backends", default="local,ray",
                      help="launch backends to measure: local, ray or both")
  parser.add_argument("--set", action="append", default=[],
                      metavar="KEY=VALUE",
                      help="a config override for every row (repeatable)")
  parser.add_argument("--output",
                      default=os.path.join(RESULTS, "scale_out.json"))
  args = parser.parse_args()
  sets = parse_sets(args.set)
  counts = [int(n) for n in args.actors.split(",") if n]
  rows = []
  load_before = list(os.getloadavg())
  if not args.no_embedded:
    print("measuring embedded ...", file=sys.stderr, flush=True)
    rows.append(measure_embedded(args.config, sets, args.seconds,
                                 args.warmup_steps))
  backends = [b for b in args.backends.split(",") if b]
  for backend in backends:
    if backend not in ("local", "ray"):
      raise SystemExit(f"--backends takes local and/or ray, given {backend!r}")
  for count in counts:  # the backends side by side at each count
    for backend in backends:
      print(f"measuring {count} actor process(es), {backend} launcher ...",
            file=sys.stderr, flush=True)
      rows.append(measure_launch(args.config, sets, count, args.seconds,
                                 args.warmup_steps, backend=backend))
  config = load_config(args.config, sets)
  report = dict(
      config=args.config, overrides=sets, num_envs=config.num_envs,
      unroll_length=config.unroll_length, batch_size=config.batch_size,
      queue_size=config.queue_size, seconds=args.seconds, rows=rows,
      python=platform.python_version(), tensorflow=tf.__version__,
      machine=platform.machine(), cpus=os.cpu_count(),
      load_average_before=load_before, load_average_after=list(
          os.getloadavg()), date=time.strftime("%Y-%m-%dT%H:%M:%S"))
  io_utils.atomic_write_json(args.output, report)
  print(f"\n{args.config}: {config.num_envs} envs x {config.unroll_length} "
        f"steps per actor unroll, batch {config.batch_size}, queue "
        f"{config.queue_size}; {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.1f} before\n")
  print("| mode | actor processes | env steps/s | learner steps/s | "
        "learner utilisation | learner waiting for data | start-up s |")
  print("|---|---|---|---|---|---|---|")
  for r in rows:
    wait = r.get("learner_data_wait", float("nan"))
    startup = r.get("startup_s")
    print(f"| {r['mode']} | {r['actors']} | {r['env_steps_per_s']:,.0f} | "
          f"{r['learner_steps_per_s']:,.1f} | "
          f"{r.get('learner_utilisation', float('nan')):.2f} | "
          f"{wait:.2f} | {'' if startup is None else f'{startup:.1f}'} |")


if __name__ == "__main__":
  main()
