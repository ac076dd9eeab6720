"""Pretraining input: the in-RAM loader against the disk-backed window cache.

Writes synthetic MsPacman-like datasets (the `small` preset's 104x80x3
frames: a fixed maze, five moving sprites, a changing score strip; they
compress about as well as real frames) of increasing size, and measures in
one run, each case in a fresh subprocess:
  in-RAM      files.load_episodes + WindowSampler (the loader before the
              window cache; its pipeline gathered in tf.data's thread)
  disk build  the first use of the disk-backed sampler (the cache unpacked)
  disk        the disk-backed sampler with its cache in place (the default)
  disk cold   the same after evicting the cache's files from the OS page
              cache (posix_fadvise): frames read from the disk
reporting peak RSS (VmHWM, TensorFlow's own ~0.5 GB included; RSS before
loading is in the JSON), the anonymous RSS at the end, the time to open the
sampler, windows/s of bare gathers (one thread), windows/s through the
input pipeline (in-RAM: the tf.data from_generator pipeline used before,
and in the JSON `datasets.sampled_batches` over the in-RAM sampler;
disk-backed: `datasets.sampled_batches`, pretraining's, with its defaults
and with other numbers of gather threads and of batches whose frames are
announced to the OS ahead), and the pipeline's mean wait per batch behind a
simulated accelerator train step (a sleep of --step_ms: 0 when the input
keeps up; in the cold case from a cold start, right after the eviction).
Cold reads measure this machine's disk (on a VM, its host's caching too) and
vary from run to run.
In-RAM cases whose projected peak (twice the frames) exceeds --ram_budget_gb
are skipped and reported with the projection. Each dataset is removed after
its cases. Prints a markdown table, writes
benchmarks/results/dataset_memory.json.

  python benchmarks/dataset_memory.py [--base_frames 20000] [--scales 1,4,10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

import numpy as np
import tensorflow as tf

from i2a import io_utils
from i2a.replay import cache, datasets, episodes, files

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = (104, 80, 3)  # the `small` preset's MsPacman frames
LENGTH, JUMP = 13, 3  # context 3 + T 10 jumpy steps of 3 (configs/envmodels)
# (workers, read_ahead) of the disk-backed pipeline, measured side by side.
SWEEP = ((0, 0), (0, 1), (0, 8), (0, 32), (2, 8), (4, 8))


# -- Synthetic data ---------------------------------------------------------

def _maze(rng: np.random.Generator) -> np.ndarray:
  """A blue maze on black with pellets, a pink floor strip: one background."""
  frame = np.zeros(SHAPE, np.uint8)
  frame[:, :] = (0, 28, 136)
  walls = rng.random((SHAPE[0] // 4, SHAPE[1] // 4)) < 0.45
  corridors = np.kron(~walls, np.ones((4, 4), bool))
  frame[:corridors.shape[0], :corridors.shape[1]][corridors] = (0, 0, 0)
  frame[2:-12:4, 2::4][corridors[2:-12:4, 2::4]] = (228, 111, 111)
  frame[-10:] = (0, 0, 0)
  return frame


def _episode_frames(rng: np.random.Generator, maze: np.ndarray,
                    n: int) -> np.ndarray:
  """n frames of five sprites walking over the maze, and a score strip."""
  frames = np.broadcast_to(maze, (n, *SHAPE)).copy()
  colours = np.array([(210, 164, 74), (200, 72, 72), (198, 89, 179),
                      (84, 184, 153), (180, 122, 48)], np.uint8)
  steps = rng.integers(-2, 3, (n, 5, 2))
  start = rng.integers(0, [SHAPE[0] - 18, SHAPE[1] - 8], (5, 2))
  position = np.clip(start + np.cumsum(steps, axis=0), 0,
                     [SHAPE[0] - 18, SHAPE[1] - 8])
  score = np.cumsum(rng.random(n) < 0.1) * 10
  for t in range(n):
    for k in range(5):
      y, x = position[t, k]
      frames[t, y:y + 7, x:x + 7] = colours[k]
    digits = str(int(score[t]))
    for d, char in enumerate(digits[-8:]):
      frames[t, -8:-2, 4 + 6 * d:8 + 6 * d] = 40 + 20 * int(char)
  return frames


def write_dataset(path: str, frames: int, seed: int) -> Dict[str, Any]:
  """A train split of about `frames` steps; returns its size on disk."""
  rng = np.random.default_rng(seed)
  maze = _maze(rng)
  start = time.perf_counter()
  written = 0
  with files.SplitWriter(path, {"note": "benchmarks/dataset_memory.py"}) as w:
    while written < frames:
      n = int(min(rng.integers(400, 1200), max(frames - written, 40)))
      w.add(episodes.Episode(
          observation=_episode_frames(rng, maze, n),
          action=np.append(rng.integers(0, 5, n - 1), 0).astype(np.int32),
          reward=np.append(0.0, 10.0 * (rng.random(n - 1) < 0.1)
                           ).astype(np.float32),
          discount=np.append(np.ones(n - 1), 0.0).astype(np.float32),
          complete=True))
      written += n
  compressed = sum(os.path.getsize(os.path.join(path, f))
                   for f in os.listdir(path) if f.endswith(".npz"))
  return dict(frames=written, frame_bytes=written * int(np.prod(SHAPE)),
              compressed_bytes=compressed,
              write_s=time.perf_counter() - start)


# -- One case, in a subprocess ---------------------------------------------

def _status(field: str) -> int:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise KeyError(field)


def _evict(root: str) -> None:
  """Drops a directory's files from the OS page cache (this process's own)."""
  for directory, _, names in os.walk(root):
    for name in names:
      fd = os.open(os.path.join(directory, name), os.O_RDONLY)
      try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
      finally:
        os.close(fd)


def _rate(function, seconds: float, batch_size: int) -> float:
  function()  # warm-up
  count, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    function()
    count += batch_size
  return count / (time.perf_counter() - start)


def _stall_ms(batches, step_ms: float, steps: int) -> float:
  """Mean wait for the next batch behind a train step of `step_ms` that
  leaves the CPU free (an accelerator's): 0 when the input keeps up."""
  next(batches)
  waited = 0.0
  for _ in range(steps):
    time.sleep(step_ms / 1000)
    start = time.perf_counter()
    next(batches)
    waited += time.perf_counter() - start
  return 1000 * waited / steps


def _old_pipeline(sampler, batch_size: int, seed: int, prefetch: int = 2):
  """The pipeline before `datasets.Batches`: sampler.sample in tf.data's
  from_generator (gathers in tf.data's thread, one py_func per batch)."""

  def generate():
    rng = np.random.default_rng(seed)
    while True:
      yield sampler.sample(rng, batch_size)
  example = sampler.sample(np.random.default_rng(seed), batch_size)
  signature = {k: tf.TensorSpec(v.shape, v.dtype, k)
               for k, v in example.items()}
  return iter(tf.data.Dataset.from_generator(
      generate, output_signature=signature).prefetch(prefetch))


def _measure_pipeline(make, args, evict) -> Dict[str, Any]:
  """Best-of-repeats windows/s of a pipeline, and its wait per step."""
  rates = []
  batches = make()
  for _ in range(args.repeats):
    evict()
    rates.append(_rate(lambda: next(batches), args.seconds, args.batch_size))
  evict()
  stall = _stall_ms(batches, args.step_ms, args.stall_steps)
  close = getattr(batches, "close", None)
  if close:
    close()
  return dict(windows_per_s=max(rates), all=rates, stall_ms=stall)


def run_case(mode: str, split: str, args) -> Dict[str, Any]:
  """Opens `split` one way, samples from it; what it cost."""
  rss_before = _status("VmRSS")
  root = cache.cache_dir(split)
  evict = (lambda: _evict(root)) if mode == "disk cold" else (lambda: None)
  evict()
  start = time.perf_counter()
  sampler = datasets.window_sampler(split, LENGTH, JUMP,
                                    in_memory=mode == "in-RAM")
  load_s = time.perf_counter() - start
  result: Dict[str, Any] = dict(load_s=load_s, windows=sampler.num_windows)
  rng = np.random.default_rng(0)
  gather = []
  for _ in range(args.repeats):
    evict()
    gather.append(_rate(lambda: sampler.sample(rng, args.batch_size),
                        args.seconds, args.batch_size))
  result.update(gather_windows_per_s=max(gather), gather_all=gather)
  if mode == "in-RAM":
    pipeline = _measure_pipeline(
        lambda: _old_pipeline(sampler, args.batch_size, 0), args, evict)
    result.update(
        pipeline="tf.data from_generator (before)",
        sampled_batches=_measure_pipeline(
            lambda: datasets.sampled_batches(
                sampler, args.batch_size, seed=0, workers=args.workers,
                read_ahead=args.read_ahead), args, evict))
  else:
    default = (args.workers, args.read_ahead)
    configs = [default] if mode == "disk build" else sorted(
        set(SWEEP) | {default})
    by_config = {}
    for workers, read_ahead in configs:
      by_config[f"{workers}/{read_ahead}"] = _measure_pipeline(
          lambda w=workers, r=read_ahead: datasets.sampled_batches(
              sampler, args.batch_size, seed=0, workers=w, read_ahead=r),
          args, evict)
    pipeline = by_config[f"{args.workers}/{args.read_ahead}"]
    result.update(pipeline=f"datasets.Batches, workers={args.workers}, "
                  f"read_ahead={args.read_ahead}", by_config=by_config)
  result.update(
      pipeline_windows_per_s=pipeline["windows_per_s"],
      pipeline_all=pipeline["all"], stall_ms=pipeline["stall_ms"],
      step_ms=args.step_ms, rss_before=rss_before, peak_rss=_status("VmHWM"),
      rss_anon_end=_status("RssAnon"), rss_file_end=_status("RssFile"))
  return result


def _subprocess_case(mode: str, split: str, args) -> Dict[str, Any]:
  command = [sys.executable, os.path.abspath(__file__), "--case", mode,
             "--split", split]
  for name in ("batch_size", "seconds", "repeats", "workers", "read_ahead",
               "step_ms", "stall_steps"):
    command.append(f"--{name}={getattr(args, name)}")
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  out = subprocess.run(command, env=env, capture_output=True, text=True,
                       check=False)
  if out.returncode:
    raise RuntimeError(f"{mode} on {split} failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


# -- The run -----------------------------------------------------------------

def _gb(value: float) -> str:
  return f"{value / 1e9:.2f}"


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--base_frames", type=int, default=20_000)
  parser.add_argument("--scales", default="1,4,10")
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--seconds", type=float, default=3.0,
                      help="per rate measurement")
  parser.add_argument("--repeats", type=int, default=2,
                      help="rate measurements per case (the best is shown)")
  parser.add_argument("--workers", type=int, default=0,
                      help="gather threads of the disk-backed pipeline")
  parser.add_argument("--read_ahead", type=int, default=8,
                      help="batches whose frames are announced to the OS")
  parser.add_argument("--step_ms", type=float, default=5.0,
                      help="the simulated accelerator train step")
  parser.add_argument("--stall_steps", type=int, default=200)
  parser.add_argument("--ram_budget_gb", type=float, default=6.0,
                      help="skip in-RAM cases projected to peak above this")
  parser.add_argument("--dir", default=tempfile.gettempdir(),
                      help="where the datasets are written (then removed)")
  parser.add_argument("--case", help=argparse.SUPPRESS)
  parser.add_argument("--split", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.case:
    print(json.dumps(run_case(args.case, args.split, args)))
    return
  scales = [int(s) for s in args.scales.split(",")]
  frame = int(np.prod(SHAPE))
  largest = max(scales) * args.base_frames * frame
  free = shutil.disk_usage(args.dir).free
  if free < 1.2 * largest + (1 << 30):
    raise SystemExit(f"{args.dir} has {_gb(free)} GB free; the largest case "
                     f"needs about {_gb(1.2 * largest)} GB.")
  cases: List[Dict[str, Any]] = []
  for scale in scales:
    work = tempfile.mkdtemp(prefix="dataset_memory.", dir=args.dir)
    try:
      split = os.path.join(work, "train")
      data = write_dataset(split, scale * args.base_frames, seed=scale)
      print(f"{scale}x: {data['frames']:,} frames, {_gb(data['frame_bytes'])}"
            f" GB of frames, {_gb(data['compressed_bytes'])} GB compressed "
            f"(written in {data['write_s']:.0f}s)", flush=True)
      for mode in ("in-RAM", "disk build", "disk", "disk cold"):
        record = dict(scale=scale, mode=mode, **data)
        projected = 2 * data["frame_bytes"]
        if mode == "in-RAM" and projected > args.ram_budget_gb * 1e9:
          record.update(skipped=True, projected_peak_rss=projected)
        else:
          record.update(_subprocess_case(mode, split, args))
        cases.append(record)
        print(f"  {mode}: {json.dumps(record)}", flush=True)
    finally:
      shutil.rmtree(work, ignore_errors=True)
  result = dict(
      shape=list(SHAPE), length=LENGTH, jump=JUMP,
      batch_size=args.batch_size, seconds=args.seconds, repeats=args.repeats,
      workers=args.workers, read_ahead=args.read_ahead, step_ms=args.step_ms,
      ram_budget_gb=args.ram_budget_gb, load_average=list(os.getloadavg()),
      cpus=os.cpu_count(), cases=cases,
      created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
  os.makedirs(RESULTS, exist_ok=True)
  io_utils.atomic_write_json(os.path.join(RESULTS, "dataset_memory.json"),
                             result)
  print(f"\nMsPacman {SHAPE[0]}x{SHAPE[1]}x{SHAPE[2]}, windows of {LENGTH} "
        f"jumpy steps of {JUMP}, batch {args.batch_size}; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
  print("Pipelines: in-RAM, the tf.data one used before; disk, "
        f"datasets.sampled_batches (workers={args.workers}, read_ahead="
        f"{args.read_ahead}).\n")
  print("| frames | frames GB | loader | open s | peak RSS GB | anon RSS GB "
        "(end) | gather windows/s | pipeline windows/s | wait per "
        f"{args.step_ms:g} ms step |")
  print("|---|---|---|---|---|---|---|---|---|")
  for case in cases:
    head = (f"| {case['frames']:,} | {_gb(case['frame_bytes'])} | "
            f"{case['mode']} |")
    if case.get("skipped"):
      print(f"{head} skipped | ~{_gb(case['projected_peak_rss'])} projected "
            "| | | | |")
      continue
    print(f"{head} {case['load_s']:.1f} | {_gb(case['peak_rss'])} | "
          f"{_gb(case['rss_anon_end'])} | "
          f"{case['gather_windows_per_s']:,.0f} | "
          f"{case['pipeline_windows_per_s']:,.0f} | "
          f"{case['stall_ms']:.2f} ms |")
  print("\nThe disk-backed pipeline by gather threads / batches read ahead "
        f"(windows/s; wait per {args.step_ms:g} ms step):\n")
  sweep = [c for c in cases if c["mode"] in ("disk", "disk cold")]
  configs = list(sweep[0]["by_config"]) if sweep else []
  print("| frames | loader | " + " | ".join(
      "workers {} / read_ahead {}".format(*c.split("/")) for c in configs)
        + " |")
  print("|---|---|" + "---|" * len(configs))
  for case in sweep:
    cells = [case["by_config"][c] for c in configs]
    print(f"| {case['frames']:,} | {case['mode']} | " + " | ".join(
        f"{c['windows_per_s']:,.0f}; {c['stall_ms']:.2f} ms" for c in cells)
          + " |")


if __name__ == "__main__":
  main()
