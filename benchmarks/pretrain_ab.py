r"""End-to-end pretraining speed, a base revision against this checkout.

Where it sits: beside `pretrain_speed.py` (the train step alone, on fixed
batches). This one times the whole binary, `python -m i2a.pretrain` at the
`small` preset (MsPacman 104x80), as a user runs it: the dataset read from
disk, the input pipeline, the train step, the logging. It

1. exports BASE (`--base`, default `c30435f^`: the parent of the first
   speed commit) with `git archive BASE | tar -x -C TMP/base`;
2. collects one small MsPacman dataset per revision with that revision's
   own `python -m i2a.collect --config=configs/collect.py:small` (uniform
   random policy, seed 0, `--collect_steps` train and
   `--collect_test_steps` test env steps): the on-disk formats may differ
   between revisions, so each reads the one it wrote; same seeds and
   policy, so the episodes are the same (the shards' arrays are compared
   and the answer recorded);
3. runs, round after round (`--rounds`), base, new in `--precisions`
   (default `auto`, bf16 on this CPU, then `fp32`), each a fresh
   `python -m i2a.pretrain --config=configs/envmodels/KIND.py:small` in a
   fresh workdir, with PYTHONPATH and the working directory set to that
   revision's checkout and this interpreter (`sys.executable`);
4. times the steady state from the TensorBoard event files both revisions
   write at every `log_every` step: steps/s = (N - W) / (t_N - t_W), t_S
   the wall time of the first summary at step S, W = `--warmup_steps`
   (start-up, dataset loading and the first step's tracing fall before
   t_W; the final evaluation and export after t_N); peak RSS from
   `os.wait4` of the process (ru_maxrss).

The flags both revisions get (the same for both; everything else is each
revision's `small` preset): `--config.batch_size` (8; the preset has 16),
`--config.train_steps=N`, `--config.log_every` (timing points),
`--config.eval_windows` (the final held-out evaluation, after the timed
span, smaller to keep the run short). The new revision also gets
`--config.precision=P`; the base has no such field (it runs fp32, with
TensorFlow's default thread pools) and refuses unknown config fields, so
it gets no precision flag. The base's `i2a.pretrain` takes the same
`--config`, `--config.*` and `--workdir` flags (absl config_flags), so
no other flag differs. Its `i2a.collect` also streams windows into an
embedded Reverb server while collecting (dropped later); that costs the
collection time only, which is not measured.

  python benchmarks/pretrain_ab.py [--base c30435f^] [--kinds dssm_det,sssm]
      [--rounds 3] [--steps 40] [--warmup_steps 10] [--batch_size 8]
      [--precisions auto,fp32]

Writes benchmarks/results/pretrain_ab.json and .md (`--output`) and prints
the markdown table.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
KINDS = ("ar", "rar", "vae", "dssm_det", "dssm_vae", "sssm",
         "sssm_action_free")
BASE_COLUMN = "base"


class ABError(SystemExit):
  """A setup problem, reported as one clear line (exit status 2)."""

  def __init__(self, message: str):
    print(f"pretrain_ab.py: {message}", file=sys.stderr)
    super().__init__(2)


# -- Revisions -----------------------------------------------------------------


def require_git() -> None:
  if shutil.which("git") is None:
    raise ABError("git is not on PATH; the A/B exports the base revision "
                  "with `git archive`. Install git or add it to PATH.")


def git(args: Sequence[str], cwd: str = REPO) -> str:
  """Runs git in `cwd` and returns its stdout (stripped)."""
  require_git()
  done = subprocess.run(["git", *args], cwd=cwd, capture_output=True,
                        text=True, check=False)
  if done.returncode:
    raise ABError(f"`git {' '.join(args)}` in {cwd} failed: "
                  f"{done.stderr.strip()}")
  return done.stdout.strip()


def resolve_base(base: str) -> str:
  """The full hash of `base`, or a clear error when it is not there."""
  require_git()
  inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"],
                          cwd=REPO, capture_output=True, text=True,
                          check=False)
  if inside.returncode or inside.stdout.strip() != "true":
    raise ABError(f"{REPO} is not a git checkout, so the base revision "
                  "cannot be exported; run this script from a clone of the "
                  "repository.")
  done = subprocess.run(["git", "rev-parse", "--verify", "--quiet",
                         f"{base}^{{commit}}"], cwd=REPO, capture_output=True,
                        text=True, check=False)
  if done.returncode:
    raise ABError(f"the base revision {base!r} is not in this clone (git "
                  "rev-parse found no such commit); give an existing commit "
                  "with --base, or fetch the full history (a shallow clone "
                  "lacks old commits: `git fetch --unshallow`).")
  return done.stdout.strip()


def export_revision(commit: str, directory: str) -> None:
  """`git archive COMMIT | tar -x -C DIRECTORY`."""
  os.makedirs(directory, exist_ok=True)
  archive = subprocess.Popen(["git", "archive", commit], cwd=REPO,
                             stdout=subprocess.PIPE)
  untar = subprocess.run(["tar", "-x", "-C", directory], stdin=archive.stdout,
                         check=False)
  archive.stdout.close()
  if archive.wait() or untar.returncode:
    raise ABError(f"exporting {commit} into {directory} failed "
                  f"(git archive {archive.returncode}, tar "
                  f"{untar.returncode}).")


def revision_env(checkout: str) -> Dict[str, str]:
  env = dict(os.environ, PYTHONPATH=checkout, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("I2A_DATASET_CACHE", None)  # each split's own cache
  return env


# -- Processes -------------------------------------------------------------------


def run_process(command: List[str], cwd: str, env: Dict[str, str],
                log_path: str) -> Dict[str, Any]:
  """Runs `command` to its end (output to `log_path`); its exit status,
  wall time and peak RSS (its own ru_maxrss, from wait4)."""
  with open(log_path, "w") as log:
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
  process.returncode = os.waitstatus_to_exitcode(status)
  return dict(returncode=process.returncode, wall_s=wall,
              peak_rss_mb=usage.ru_maxrss / 1024.0,  # KiB on Linux
              cpu_s=usage.ru_utime + usage.ru_stime)


def tail(path: str, lines: int = 30) -> str:
  with open(path, errors="replace") as f:
    return "".join(f.readlines()[-lines:])


# -- Datasets --------------------------------------------------------------------


def collect(checkout: str, workdir: str, args: argparse.Namespace,
            env: Dict[str, str]) -> Dict[str, Any]:
  """`python -m i2a.collect` of `checkout` into `workdir`; the dataset."""
  command = [sys.executable, "-m", "i2a.collect",
             "--config=configs/collect.py:small", f"--workdir={workdir}",
             f"--config.train_steps={args.collect_steps}",
             f"--config.test_steps={args.collect_test_steps}",
             "--config.policy=random", "--config.seed=0"]
  done = run_process(command, checkout, env, workdir + ".log")
  if done["returncode"]:
    raise ABError(f"collecting in {checkout} failed (exit "
                  f"{done['returncode']}):\n{tail(workdir + '.log')}")
  dataset = os.path.join(workdir, "dataset")
  return dict(path=dataset, command=" ".join(command), wall_s=done["wall_s"],
              splits={split: manifest_counts(os.path.join(dataset, split))
                      for split in ("train", "test")})


def manifest_counts(split_dir: str) -> Dict[str, Any]:
  """Steps and episodes a split's manifest records (any revision's)."""
  path = os.path.join(split_dir, "manifest.json")
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    manifest = json.load(f)
  shards = manifest.get("shards", [])
  return dict(steps=sum(int(s.get("steps", 0)) for s in shards),
              episodes=sum(int(s.get("episodes", 0)) for s in shards),
              format=manifest.get("format"),
              format_version=manifest.get("format_version"))


def same_contents(base_split: str, new_split: str) -> bool:
  """Whether two splits' shards hold the same arrays (frames, actions,
  rewards, ...), shard by shard in name order: one check that both
  revisions collected the same episodes."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  base = sorted(glob.glob(os.path.join(base_split, "shard-*.npz")))
  new = sorted(glob.glob(os.path.join(new_split, "shard-*.npz")))
  if not base or len(base) != len(new):
    return False
  for a_path, b_path in zip(base, new):
    with np.load(a_path) as a, np.load(b_path) as b:
      if sorted(a.files) != sorted(b.files):
        return False
      if not all(np.array_equal(a[k], b[k]) for k in a.files):
        return False
  return True


# -- Timing from the event files ------------------------------------------------


def event_times(tb_dir: str) -> Dict[int, float]:
  """{step: wall time of the first summary written at that step} from the
  TensorBoard event files in `tb_dir`."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  times: Dict[int, float] = {}
  for path in sorted(glob.glob(os.path.join(tb_dir, "events.*"))):
    for event in tf.compat.v1.train.summary_iterator(path):
      if not event.HasField("summary") or not event.summary.value:
        continue
      step = int(event.step)
      times[step] = min(times.get(step, float("inf")), event.wall_time)
  return times


def steady_rate(times: Dict[int, float], warmup: int, steps: int) -> float:
  if warmup not in times or steps not in times:
    raise ABError(f"the event files have no summary at step {warmup} or "
                  f"{steps} (steps logged: {sorted(times)}); --warmup_steps "
                  "and --steps must be multiples of --log_every.")
  return (steps - warmup) / (times[steps] - times[warmup])


# -- One pretraining run -------------------------------------------------------


def pretrain_command(kind: str, dataset: str, workdir: str,
                     args: argparse.Namespace,
                     precision: Optional[str]) -> List[str]:
  command = [sys.executable, "-m", "i2a.pretrain",
             f"--config=configs/envmodels/{kind}.py:small",
             f"--config.data={dataset}", f"--workdir={workdir}",
             f"--config.batch_size={args.batch_size}",
             f"--config.train_steps={args.steps}",
             f"--config.log_every={args.log_every}",
             f"--config.eval_windows={args.eval_windows}"]
  if precision is not None:  # the base revision has no precision field
    command.append(f"--config.precision={precision}")
  return command


def pretrain(column: str, checkout: str, kind: str, dataset: str,
             workdir: str, args: argparse.Namespace,
             precision: Optional[str]) -> Dict[str, Any]:
  command = pretrain_command(kind, dataset, workdir, args, precision)
  log_path = workdir + ".log"
  os.makedirs(os.path.dirname(workdir), exist_ok=True)
  done = run_process(command, checkout, revision_env(checkout), log_path)
  if done["returncode"]:
    raise ABError(f"{column} pretraining ({kind}) failed (exit "
                  f"{done['returncode']}); command: {' '.join(command)}\n"
                  f"{tail(log_path)}")
  times = event_times(os.path.join(workdir, "tb"))
  rate = steady_rate(times, args.warmup_steps, args.steps)
  first = min(times)
  ran = None
  precision_json = os.path.join(workdir, "precision.json")
  if os.path.exists(precision_json):
    with open(precision_json) as f:
      ran = json.load(f)
  return dict(steps_per_s=rate, peak_rss_mb=done["peak_rss_mb"],
              wall_s=done["wall_s"], cpu_s=done["cpu_s"],
              seconds_per_step=1.0 / rate, first_logged_step=first,
              load_average=list(os.getloadavg()),
              precision_requested=precision, precision_json=ran,
              command=" ".join(command))


# -- Report ----------------------------------------------------------------------


def summarise(runs: Dict[str, Dict[str, List[Dict[str, Any]]]],
              columns: List[str]) -> Dict[str, Any]:
  out: Dict[str, Any] = {}
  for kind, per_column in runs.items():
    cells = {}
    for column in columns:
      rounds = per_column[column]
      rates = [r["steps_per_s"] for r in rounds]
      cells[column] = dict(
          median_steps_per_s=statistics.median(rates),
          steps_per_s=rates,
          median_peak_rss_mb=statistics.median(
              r["peak_rss_mb"] for r in rounds),
          peak_rss_mb=[r["peak_rss_mb"] for r in rounds],
          median_wall_s=statistics.median(r["wall_s"] for r in rounds))
      if column != BASE_COLUMN:
        ratios = [n["steps_per_s"] / b["steps_per_s"]
                  for n, b in zip(rounds, per_column[BASE_COLUMN])]
        cells[column].update(ratio_to_base=statistics.median(ratios),
                             ratios_to_base=ratios)
    out[kind] = cells
  return out


def markdown(summary: Dict[str, Any], columns: List[str],
             meta: Dict[str, Any]) -> str:
  lines = [
      f"End-to-end `python -m i2a.pretrain`, `small` preset (MsPacman "
      f"104x80), batch {meta['batch_size']}, steps/s between step "
      f"{meta['warmup_steps']} and {meta['steps']} (median of "
      f"{meta['rounds']} alternating rounds; peak RSS and wall time of "
      f"the whole process, start-up and final evaluation included). "
      f"Base {meta['base_commit'][:10]} ({meta['base']}), new "
      f"{meta['new_commit'][:10]}{' + uncommitted changes' if meta['new_dirty'] else ''}."
      f" Load average {meta['load_min']:.1f}-{meta['load_max']:.1f} on "
      f"{os.cpu_count()} CPUs.",
      "",
      "| kind | revision (precision) | steps/s (median) | every round | "
      "new / base (median of rounds) | s/step | peak RSS MB | process s |",
      "|---|---|---|---|---|---|---|---|"]
  for kind, cells in summary.items():
    for column in columns:
      cell = cells[column]
      ratio = (f"{cell['ratio_to_base']:.2f}x ("
               + ", ".join(f"{r:.2f}" for r in cell["ratios_to_base"]) + ")"
               if "ratio_to_base" in cell else "1")
      lines.append(
          f"| {kind} | {column} | {cell['median_steps_per_s']:.3f} | "
          + ", ".join(f"{r:.3f}" for r in cell["steps_per_s"])
          + f" | {ratio} | {1 / cell['median_steps_per_s']:.2f} | "
          f"{cell['median_peak_rss_mb']:,.0f} | "
          f"{cell['median_wall_s']:.0f} |")
  lines += ["", "Commands (in each revision's checkout, PYTHONPATH=it):", ""]
  for column, command in meta["commands"].items():
    lines.append(f"- {column}: `{command}`")
  lines += ["", "Differences from the `small` preset (both revisions alike): "
            + meta["differences"]]
  return "\n".join(lines) + "\n"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--base", default="c30435f^",
                      help="the base revision (git commit-ish).")
  parser.add_argument("--kinds", default="dssm_det",
                      help=f"comma-separated model kinds of {KINDS}.")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--steps", type=int, default=40,
                      help="train steps per run (--config.train_steps).")
  parser.add_argument("--warmup_steps", type=int, default=10,
                      help="steps before the timed span (start-up, tracing).")
  parser.add_argument("--log_every", type=int, default=5,
                      help="--config.log_every: the timing points.")
  parser.add_argument("--batch_size", type=int, default=8)
  parser.add_argument("--eval_windows", type=int, default=32,
                      help="held-out windows of the final evaluation (after "
                           "the timed span).")
  parser.add_argument("--precisions", default="auto,fp32",
                      help="the new revision's --config.precision values, "
                           "each a column.")
  parser.add_argument("--collect_steps", type=int, default=3000,
                      help="train env steps of the dataset (all 8 envs).")
  parser.add_argument("--collect_test_steps", type=int, default=800)
  parser.add_argument("--keep", default="",
                      help="keep the checkouts, datasets and workdirs here "
                           "(default: a temporary folder, removed).")
  parser.add_argument("--output", default=os.path.join(RESULTS,
                                                       "pretrain_ab.json"),
                      help="JSON result; the markdown table beside it (.md).")
  args = parser.parse_args(argv)
  if not args.output.endswith(".json"):  # PATH -> PATH.json and PATH.md
    args.output += ".json"
  kinds = [k for k in args.kinds.split(",") if k]
  unknown = [k for k in kinds if k not in KINDS]
  if unknown or not kinds:
    parser.error(f"--kinds {args.kinds!r}: unknown {unknown}; expected a "
                 f"comma-separated list of {KINDS}.")
  args.kinds = kinds
  args.precisions = [p for p in args.precisions.split(",") if p]
  bad = [p for p in args.precisions if p not in ("auto", "fp32", "bf16",
                                                  "fp16")]
  if bad or not args.precisions:
    parser.error(f"--precisions {bad}: expected auto, fp32, bf16 or fp16.")
  if args.rounds < 1:
    parser.error(f"--rounds {args.rounds}: expected at least 1.")
  for name in ("warmup_steps", "steps"):
    value = getattr(args, name)
    if value <= 0 or value % args.log_every:
      parser.error(f"--{name} {value}: expected a positive multiple of "
                   f"--log_every ({args.log_every}), where the binary logs.")
  if args.warmup_steps >= args.steps:
    parser.error(f"--warmup_steps {args.warmup_steps} must be below --steps "
                 f"{args.steps}.")
  return args


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  base_commit = resolve_base(args.base)
  new_commit = git(["rev-parse", "HEAD"])
  new_dirty = bool(git(["status", "--porcelain", "--untracked-files=no"]))
  root = args.keep or tempfile.mkdtemp(prefix="pretrain_ab_")
  os.makedirs(root, exist_ok=True)
  columns = [BASE_COLUMN] + [f"new ({p})" for p in args.precisions]
  try:
    base_dir = os.path.join(root, "base")
    export_revision(base_commit, base_dir)
    checkouts = {BASE_COLUMN: base_dir}
    checkouts.update({c: REPO for c in columns[1:]})
    print(f"collecting: base {base_commit[:10]} and new {new_commit[:10]}",
          flush=True)
    datasets = {
        "base": collect(base_dir, os.path.join(root, "collect_base"), args,
                        revision_env(base_dir)),
        "new": collect(REPO, os.path.join(root, "collect_new"), args,
                       revision_env(REPO))}
    same = all(same_contents(os.path.join(datasets["base"]["path"], s),
                             os.path.join(datasets["new"]["path"], s))
               for s in ("train", "test"))
    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {
        kind: {c: [] for c in columns} for kind in args.kinds}
    loads: List[float] = [os.getloadavg()[0]]
    for r in range(args.rounds):
      for kind in args.kinds:
        for column in columns:
          precision = (None if column == BASE_COLUMN
                       else column[len("new ("):-1])
          dataset = datasets["base" if column == BASE_COLUMN else "new"]
          name = column.replace(" (", "_").rstrip(")")
          workdir = os.path.join(root, "runs", f"{kind}_{name}_{r}")
          result = pretrain(column, checkouts[column], kind, dataset["path"],
                            workdir, args, precision)
          loads.append(result["load_average"][0])
          runs[kind][column].append(result)
          print(f"round {r + 1}/{args.rounds} {kind} {column}: "
                f"{result['steps_per_s']:.3f} steps/s, peak RSS "
                f"{result['peak_rss_mb']:,.0f} MB, load "
                f"{result['load_average'][0]:.1f}", flush=True)
          shutil.rmtree(workdir, ignore_errors=True)
  finally:
    if not args.keep:
      shutil.rmtree(root, ignore_errors=True)
  summary = summarise(runs, columns)
  commands = {c: runs[args.kinds[0]][c][0]["command"] for c in columns}
  differences = (
      f"--config.batch_size={args.batch_size} (preset 16), "
      f"--config.train_steps={args.steps}, --config.log_every="
      f"{args.log_every} (the timing points), --config.eval_windows="
      f"{args.eval_windows} (the final evaluation, untimed); the new "
      "revision also --config.precision (the base has no such field: fp32, "
      "TensorFlow's default threads). Datasets: each revision's own "
      f"`i2a.collect` small preset with --config.train_steps="
      f"{args.collect_steps} --config.test_steps={args.collect_test_steps} "
      "(uniform random policy, seed 0); "
      + ("their shards hold identical arrays (frames, actions, rewards)."
         if same else "their shards DIFFER (another format, or other "
         "episodes: see datasets in the JSON)."))
  meta = dict(base=args.base, base_commit=base_commit, new_commit=new_commit,
              new_dirty=new_dirty, batch_size=args.batch_size,
              steps=args.steps, warmup_steps=args.warmup_steps,
              log_every=args.log_every, rounds=args.rounds,
              load_min=min(loads), load_max=max(loads), commands=commands,
              differences=differences)
  table = markdown(summary, columns, meta)
  print(table)
  result = dict(
      meta, kinds=args.kinds, columns=columns, summary=summary, runs=runs,
      datasets={k: {f: v for f, v in d.items() if f != "path"}
                for k, d in datasets.items()},
      datasets_match=same, load_averages=loads, cpu_count=os.cpu_count(),
      eval_windows=args.eval_windows, collect_steps=args.collect_steps,
      collect_test_steps=args.collect_test_steps,
      invocation=" ".join(["python", "benchmarks/pretrain_ab.py",
                           *(argv if argv is not None else sys.argv[1:])]))
  from i2a import io_utils  # pylint: disable=import-outside-toplevel
  io_utils.atomic_write_json(args.output, result)
  io_utils.atomic_write_text(os.path.splitext(args.output)[0] + ".md", table)
  print(f"wrote {args.output}", flush=True)
  return 0


if __name__ == "__main__":
  sys.path.insert(0, REPO)
  sys.exit(main())
