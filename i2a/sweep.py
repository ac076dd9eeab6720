r"""python -m i2a.sweep: a grid of runs (collect, pretrain, train, evaluate),
run to completion across sessions, and a report of their results.

  python -m i2a.sweep --grid=configs/sweeps/i2a_minipacman.py[:preset] \
      --workdir=SWEEP_DIR [--only=PATTERN[,PATTERN]] [--list] [--report] \
      [--stop_after=2h50m [--fit_runs]] [--jobs=2] \
      [--archive=DIR [--archive_every=30m]] \
      [--grid.env_steps=2000000]
  python -m i2a.sweep --combine=A/report/report.json,B/report/report.json \
      --workdir=OUT_DIR [--duplicates=refuse|first|last]
  python -m i2a.sweep --workdir=SWEEP_DIR --compare=emulator_oracle,copy_model
  python -m i2a.sweep --workdir=SWEEP_DIR --compare=a2c,a2c@OTHER_SWEEP_DIR

Every run gets its own workdir SWEEP_DIR/STAGE/NAME/seedN (the binary's
workdir: config.json, checkpoints, metrics.csv, ...) and a record
(sweep_run.json: state, resolved config, attempts, error, time) and log
(sweep_run.log). Runs run one at a time (--jobs at once), each in its own
process, in dependency order; finished runs are skipped, interrupted ones
resume from their checkpoints (before new ones start), failed ones are
retried, and runs that do not depend on a failure go on. SIGINT/SIGTERM
(or --stop_after): the current runs checkpoint and the sweep ends; a
second signal ends them at once. Rerun the same command to continue.

  --list     the runs and their states (pending, running, done, failed
             with the error), progress and ETA; runs nothing.
  --report   writes SWEEP_DIR/report/ from the workdirs alone (no --grid
             needed); every invocation that runs writes it at its end.
  --combine  REPORT.json,REPORT.json,...: one table from the reports of
             sweep directories of one grid (seeds run in different
             places), written to --workdir/report.md and report.json
             (i2a/run/sweep_combine.py); runs nothing.
  --compare  A,B: configuration A's returns minus B's over the seeds,
             with the 95% Welch interval of the difference (the report
             compares every configuration with the first); NAME@DIR is
             configuration NAME of another sweep or report directory
             (the same agent at another learning rate, say); runs
             nothing.
  --archive  a directory that keeps every finished run's results (not
             its checkpoints or datasets), a stopped training run with
             its newest checkpoint, and the report, e.g. in a
             repository: a sweep directory lost with its machine is
             rebuilt from it by the next invocation
             (i2a/run/sweep_archive.py). Every --archive_every (30m;
             0: never) the training runs in progress are archived with
             their newest checkpoints too.
  --only     runs matching a glob on the run id ('train/a2c/*') or a
             substring ('a2c'); the others are left as they are. The
             patterns are in priority order: runs the first matches
             start before those only later ones match.
  --jobs     runs at once (default 1), each its own process; with
             --list, the ETA for that many.
  --fit_runs with --stop_after: a run starts only if it is expected to
             finish before the limit (the measured rate of its
             configuration, else of its stage, with a margin); when no
             ready run fits, the sweep stops. On a machine that goes
             with the limit, no run is left half-done.

Exit status: 0 when every selected run is done, 1 when some failed or wait
for a failed run, 2 when the grid or a flag is refused (nothing ran), 3
when stopped before the end. Grid format and the
experiments: docs/experiments.md.
"""

import os
import sys

from absl import app, flags

from i2a import cli
from i2a.run import sweep as sweeping
from i2a.run import sweep_archive as archiving
from i2a.run import sweep_combine as combining
from i2a.run import sweep_report as reporting

_GRID = cli.DEFINE_config_file(
    "grid", None, "Grid file[:preset] under configs/sweeps/ "
    "(i2a_minipacman.py: presets minipacman, regular, tiny; table1_small.py: "
    "small, tiny); set its keys with --grid.KEY=VALUE.")
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "The sweep directory (required; with --combine, the "
    "directory the combined report is written to).")
cli.require_unless_print_config(_WORKDIR)
_ONLY = flags.DEFINE_list(
    "only", [], "Runs to consider: globs on the run id (train/a2c/*) or "
    "substrings, comma-separated, in priority order (the first pattern's "
    "runs start first); default all, in the plan's order.")
_LIST = flags.DEFINE_bool("list", False, "List the runs and their states; "
                          "run nothing.")
_REPORT = flags.DEFINE_bool("report", False, "Write the report from the "
                            "workdirs; run nothing.")
_STOP_AFTER = flags.DEFINE_string(
    "stop_after", "", "Stop (the current run checkpoints) after this long, "
    "e.g. 2h50m for a 3-hour session; empty: no limit.")
_ARCHIVE = flags.DEFINE_string(
    "archive", "", "Keep every finished run's results and the report in "
    "this directory too, and restore the runs archived there whose "
    "workdirs are missing; empty: none.")
_ARCHIVE_EVERY = flags.DEFINE_string(
    "archive_every", "30m", "With --archive: also archive the training "
    "runs in progress with their newest checkpoints this often (a machine "
    "lost without a stop loses no more); 0: only at their stop or end.")
_COMBINE = flags.DEFINE_list(
    "combine", [], "report.json files of sweeps of one grid: write one "
    "table of their seeds to --workdir; run nothing.")
_DUPLICATES = flags.DEFINE_enum(
    "duplicates", "refuse", ["refuse", "first", "last"], "--combine: a "
    "seed with results in two reports is refused, or taken from the first "
    "or the last report listed (the other is listed as left out).")
_JOBS = flags.DEFINE_integer(
    "jobs", 1, "Runs at once, each in its own process (a run starts when "
    "its dependencies are done).")
_FIT_RUNS = flags.DEFINE_bool(
    "fit_runs", False, "With --stop_after: start only runs expected to "
    "finish before the limit (their kind's measured rate); stop when none "
    "fits. For machines that do not outlive the limit.")
_COMPARE = flags.DEFINE_list(
    "compare", [], "A,B: print configuration A's returns minus B's (the "
    "difference of the means over seeds with its 95% Welch interval), "
    "from --workdir's runs, or from --workdir/report.json where it holds "
    "no runs (a combined report); NAME@DIR names a configuration of "
    "another such directory; runs nothing.")
_PROGRESS_EVERY = flags.DEFINE_float(
    "progress_every_s", 300.0, "Seconds between progress lines while a run "
    "runs (one is printed at every start and end).")
flags.adopt_module_key_flags(cli)


def main(argv):
  del argv
  # Each run is its own process (python -m i2a.run.sweep), which sets up its
  # devices; this one runs no TensorFlow.
  cli.start(_GRID, [_WORKDIR, _ONLY, _LIST, _REPORT, _STOP_AFTER, _ARCHIVE,
                    _ARCHIVE_EVERY, _COMBINE, _DUPLICATES, _JOBS, _FIT_RUNS,
                    _COMPARE],
            devices=False)
  try:
    return _main()
  except ValueError as e:  # a refused grid, sweep directory or flag
    print(f"i2a.sweep: {e}", file=sys.stderr, flush=True)
    return 2


def _main() -> int:
  grid = _GRID.value
  if _COMPARE.value:
    if grid is not None or _LIST.value or _REPORT.value or _COMBINE.value:
      raise ValueError("--compare=A,B prints a comparison and runs "
                       "nothing: give it with --workdir alone (no --grid, "
                       "--list, --report or --combine).")
    print(reporting.compare(_WORKDIR.value, _COMPARE.value), flush=True)
    return sweeping.EXIT_DONE
  if _COMBINE.value:
    if grid is not None or _LIST.value or _REPORT.value:
      raise ValueError("--combine writes one table from finished reports "
                       "and runs nothing: give it with --workdir alone "
                       "(no --grid, --list or --report).")
    paths = combining.write(_COMBINE.value, _WORKDIR.value,
                            _DUPLICATES.value)
    for key, path in paths.items():
      print(f"{key}: {path}")
    return sweeping.EXIT_DONE
  if _REPORT.value and not _LIST.value:
    paths = reporting.write_report(_WORKDIR.value)
    for key, path in paths.items():
      print(f"{key}: {path}")
    if _ARCHIVE.value:
      copied = archiving.copy_report(os.path.dirname(paths["markdown"]),
                                     _ARCHIVE.value)
      print(f"archived: {copied}")
    return sweeping.EXIT_DONE
  if grid is None:
    raise app.UsageError("--grid=configs/sweeps/NAME.py[:preset] is "
                         "required (except with --report).")
  if _LIST.value:
    plan = sweeping.make_plan(grid, _WORKDIR.value)
    print(sweeping.list_runs(plan, _ONLY.value, _ARCHIVE.value or None,
                             parallel=_JOBS.value))
    if _REPORT.value:
      print(f"report: {reporting.write_report(_WORKDIR.value)['markdown']}")
    return sweeping.EXIT_DONE
  control = sweeping.Control()
  sweeping.stop_on_signals(control)
  stop_after = (sweeping.parse_duration(_STOP_AFTER.value)
                if _STOP_AFTER.value else None)
  archive_every = (sweeping.parse_duration(_ARCHIVE_EVERY.value)
                   if _ARCHIVE_EVERY.value.strip() else 0.0)
  result = sweeping.run_sweep(grid, _WORKDIR.value, _ONLY.value, control,
                              stop_after_s=stop_after,
                              progress_every_s=_PROGRESS_EVERY.value,
                              archive=_ARCHIVE.value or None,
                              jobs=_JOBS.value, fit_runs=_FIT_RUNS.value,
                              archive_every_s=archive_every)
  if result["pending"] and result["stopped"]:
    return sweeping.EXIT_STOPPED
  if result["failed"] or result["pending"]:
    return sweeping.EXIT_FAILED
  return sweeping.EXIT_DONE


def entry() -> None:
  """The console script i2a-sweep."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
