"""A sweep's archive: its finished runs' results, kept where they outlive
the sweep directory (`python -m i2a.sweep --archive=DIR`).

The sweep directory holds what a run needs to resume (checkpoints,
datasets, TensorBoard events) and may live on scratch storage that goes
with its machine. The archive (a folder of a repository, a mounted
bucket) keeps, for every finished run, what the report and the runs after
it need, and nothing bulky:

  ARCHIVE/archive.json                   the grid's name and the sweep
                                         directory the runs were made in
  ARCHIVE/sweep.json                     every invocation of the sweep
                                         (the sweep directory's history)
  ARCHIVE/STAGE/NAME/seedN/...           a finished (or stopped training)
                                         run's workdir, less
                                         its checkpoints (the pointer
                                         `checkpoints/checkpoint` stays),
                                         `tb/`, `dataset/`, `images/` and
                                         the sweep's transient files
  ARCHIVE/report/                        the sweep's report

Collections are not archived (their datasets are the bulky inputs; a
sweep rebuilt from its archive collects them again). A pretraining run's
archive holds its export, so the agents that imagine with it can still
train; a training run whose policy a collection acts with keeps its newest
checkpoint, so that collection can run again.

`sync(plan, is_done, archive)` copies every finished run there (after
each run and at each invocation's start; a file is written when it is new
or changed, through a temporary file and a rename, the run's record last,
so an archived record always comes with its files; paths under the sweep
directory in the runs' JSON files are archived as ${SWEEP_DIR}).
`restore(plan, archive)` does the reverse for every run of the plan whose
workdir has no record at all: the workdir is rebuilt from the archive,
${SWEEP_DIR} becomes the sweep directory it is restored into (wherever it
is), and the run is done as before (`Sweep.is_done`'s checks apply
unchanged).

The sweep's history (its invocations: when, where, which runs, how long)
travels the same way: `save_history` copies the sweep directory's
sweep.json there at each invocation's start and end, and `merge_history`
adds the invocations the archive holds and a rebuilt directory lacks, so
the report of a sweep continued elsewhere counts every invocation.

A training run that was stopped (a time limit, a signal) is archived too,
with its newest checkpoint: restored, it resumes from there, so a sweep
directory lost between sessions loses no more than the updates since that
checkpoint. So is a training run still running, every `archive_every_s`
(`sync(..., running=...)`: its newest complete checkpoint, the pointer
read once before its files are copied and written after them): a machine
lost without a stop (a crash, a preempted host) loses no more than the
time since that snapshot. A restored run that must run again without its
checkpoint (a finished run whose budget was raised) starts over
(`prepare_to_run`).
Sweep directory and archive layout: docs/experiments.md.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from typing import Any, Collection, Dict, Iterator, List, Optional, Tuple

from i2a import io_utils

INDEX = "archive.json"
HISTORY = "sweep.json"  # i2a.run.sweep.SWEEP: the grid's name, invocations
RESTORED = "sweep_restored.json"  # in a restored workdir: where from, when
ARCHIVED_STAGES = ("pretrain", "evaluate_models", "train", "evaluate")
RECORD = "sweep_run.json"  # i2a.run.sweep.RECORD (no import cycle)
# The sweep's per-attempt files and the lock: meaningless elsewhere.
_TRANSIENT = ("sweep_job.json", "sweep_result.json", "sweep.lock",
              RESTORED)
# TensorBoard events, datasets and the runs' pictures (the report has its
# own).
_BULKY_DIRS = ("tb", "dataset", "images")
_CHECKPOINT_POINTER = os.path.join("checkpoints", "checkpoint")
# The JSON files that name paths in the sweep directory: archived with
# SWEEP_DIR in their place. A run's outputs (pretrain_done.json, eval/,
# export/, ...) are kept byte for byte: the sweep knows them by their hash.
_JSON_WITH_PATHS = (RECORD, "config.json", "run_info.json", "identity.json")
SWEEP_DIR = "${SWEEP_DIR}"


def kept(relative: str, checkpoint: Optional[str] = None) -> bool:
  """Whether a workdir's file (path relative to the workdir) is archived;
  `checkpoint`: the prefix (ckpt-N) of a checkpoint whose files are kept
  too."""
  parts = relative.split(os.sep)
  if parts[0] in _BULKY_DIRS or relative in _TRANSIENT or relative == RECORD:
    return False  # the record is written separately, last
  if parts[0] == "checkpoints":
    return relative == _CHECKPOINT_POINTER or (
        checkpoint is not None and len(parts) == 2 and
        _same_step(parts[1], checkpoint))
  return not parts[-1].endswith(".tmp")


def _same_step(name: str, checkpoint: str) -> bool:
  """Whether a checkpoints/ file belongs to `checkpoint` (ckpt-N): its TF
  files (ckpt-N.index, ckpt-N.data-*) and what the runtimes save beside
  them under the same step (the actor's state, actor-N.pkl)."""
  step = checkpoint.rsplit("-", 1)[-1]
  return re.match(rf"^[A-Za-z_]+-{re.escape(step)}\.", name) is not None


def newest_checkpoint(workdir: str) -> Optional[str]:
  """ckpt-N of the workdir's checkpoint pointer, if any."""
  pointer = _pointer(workdir)
  return pointer[0] if pointer else None


def _pointer(workdir: str) -> Optional[Tuple[str, bytes]]:
  """(ckpt-N, the pointer file's bytes) of the workdir's checkpoint
  pointer, if any: read once, so that a checkpoint saved meanwhile cannot
  change which one the pointer copied with its files names."""
  try:
    with open(os.path.join(workdir, _CHECKPOINT_POINTER), "rb") as f:
      data = f.read()
  except OSError:
    return None
  match = re.search(r'^model_checkpoint_path:\s*"([^"]+)"',
                    data.decode("utf-8", "replace"), re.MULTILINE)
  return (os.path.basename(match.group(1)), data) if match else None


def policies(plan) -> set:
  """The train runs whose newest checkpoint a collection acts with."""
  return {d for job in plan.jobs if job.stage == "collect"
          for d in job.deps if d.startswith("train/")}


def _files(root: str) -> Iterator[str]:
  """Relative paths of the regular files under `root`, sorted."""
  found = []
  for directory, subdirs, names in os.walk(root):
    subdirs.sort()
    for name in names:
      path = os.path.join(directory, name)
      if os.path.isfile(path) and not os.path.islink(path):
        found.append(os.path.relpath(path, root))
  return iter(sorted(found))


def _content(path: str, relative: str, old: str, new: str) -> bytes:
  """The file's bytes; in the JSON files that hold paths, every path under
  the directory `old` moved to `new`."""
  with open(path, "rb") as f:
    data = f.read()
  if old == new or relative not in _JSON_WITH_PATHS:
    return data
  try:
    value = json.loads(data)
  except ValueError:
    return data
  return (json.dumps(_rewrite(value, old, new), indent=2, sort_keys=True)
          + "\n").encode()


def _write(target: str, data: bytes) -> None:
  """Writes through a temporary file and a rename (a crash leaves the old
  file or the new one, never half of one)."""
  os.makedirs(os.path.dirname(target), exist_ok=True)
  temporary = f"{target}.{os.getpid()}.tmp"
  with open(temporary, "wb") as f:
    f.write(data)
  os.replace(temporary, target)


def _mirror(source_dir: str, target_dir: str, selected, old: str,
            new: str, fixed: Optional[Dict[str, bytes]] = None) -> int:
  """Makes target_dir's files equal source_dir's selected ones (paths in
  its JSON files moved from `old` to `new`; the record left alone) and
  the `fixed` ones (relative path -> bytes, written after the others);
  returns the bytes written."""
  fixed = fixed or {}
  copied = sorted(r for r in _files(source_dir)
                  if selected(r) and r not in fixed)
  wanted = set(copied) | set(fixed)
  written = 0
  for relative in copied + sorted(fixed):
    data = fixed.get(relative)
    if data is None:
      data = _content(os.path.join(source_dir, relative), relative, old, new)
    target = os.path.join(target_dir, relative)
    try:
      with open(target, "rb") as f:
        same = f.read() == data
    except OSError:
      same = False
    if not same:
      _write(target, data)
      written += len(data)
  if os.path.isdir(target_dir):
    for relative in list(_files(target_dir)):
      if relative not in wanted and relative != RECORD:
        os.remove(os.path.join(target_dir, relative))
  return written


def _archive_dir(archive: str, job) -> str:
  return os.path.join(archive, job.stage, job.name, f"seed{job.seed}")


def _check_index(archive: str, name: str, sweep_dir: str) -> Dict[str, Any]:
  """The archive's index, created on first use; an archive of another grid
  is refused."""
  path = os.path.join(archive, INDEX)
  if os.path.exists(path):
    index = io_utils.read_json(path)
    if index.get("name") != name:
      raise ValueError(
          f"--archive={archive} holds the runs of grid {index.get('name')!r}"
          f", not of {name!r}: give each grid its own archive directory.")
    return index
  index = dict(name=name, sweep_dir=sweep_dir,
               created=datetime.datetime.now().isoformat(timespec="seconds"))
  io_utils.atomic_write_json(path, index)
  return index


def _state(workdir: str) -> Optional[str]:
  try:
    return io_utils.read_json(os.path.join(workdir, RECORD)).get("state")
  except (OSError, ValueError, AttributeError):
    return None


def sync(plan, is_done, archive: str, running: Collection[str] = ()
         ) -> Tuple[List[str], int]:
  """Copies every finished run of `plan` (`is_done(job)`) that is archived
  by stage, and every stopped training run and every training run in
  `running` (ids of runs in progress) with its newest checkpoint, into
  `archive`; returns (the runs whose files changed there, bytes copied).
  A running run whose checkpoint is rotated out while it is copied is
  left as its previous snapshot was (the next sync copies the newer)."""
  io_utils.ensure_writable_dir(archive, "archive directory")
  _check_index(archive, plan.name, plan.sweep_dir)
  sweep_dir = os.path.normpath(os.path.abspath(plan.sweep_dir))
  changed, total = [], 0
  policy_runs = policies(plan)
  for job in plan.jobs:
    if job.stage not in ARCHIVED_STAGES:
      continue
    # With its checkpoint: (ckpt-N, the pointer's bytes), else None.
    pointer = None
    if is_done(job):
      if job.id in policy_runs:
        pointer = _pointer(job.workdir)
    elif job.stage == "train" and (job.id in running or
                                   _state(job.workdir) == "stopped"):
      pointer = _pointer(job.workdir)  # it resumes from it
      if pointer is None:
        continue
    else:
      continue
    checkpoint, fixed = None, None
    if pointer is not None:
      checkpoint, fixed = pointer[0], {_CHECKPOINT_POINTER: pointer[1]}
    target = _archive_dir(archive, job)
    try:
      written = _mirror(job.workdir, target,
                        lambda r, c=checkpoint: kept(r, c), sweep_dir,
                        SWEEP_DIR, fixed)
    except FileNotFoundError:
      if job.id in running:
        continue  # rotated out by a newer checkpoint: the next sync
      raise
    record = _content(os.path.join(job.workdir, RECORD), RECORD, sweep_dir,
                      SWEEP_DIR)
    try:
      with open(os.path.join(target, RECORD), "rb") as f:
        same = f.read() == record
    except OSError:
      same = False
    if written or not same:
      _write(os.path.join(target, RECORD), record)
      changed.append(job.id)
      total += written + len(record)
  return changed, total


def _rewrite(value: Any, old: str, new: str) -> Any:
  """`value` with every string under the directory `old` moved to `new`."""
  if isinstance(value, str):
    if value == old or value.startswith(old + os.sep):
      return new + value[len(old):]
    return value
  if isinstance(value, dict):
    return {k: _rewrite(v, old, new) for k, v in value.items()}
  if isinstance(value, list):
    return [_rewrite(v, old, new) for v in value]
  return value


def restore(plan, archive: str) -> List[str]:
  """Rebuilds, from `archive`, the workdir of every run of `plan` that has
  no record (a sweep directory lost, or never made here); returns their
  ids. The archived JSON files name the sweep directory SWEEP_DIR: it
  becomes the plan's."""
  if not os.path.exists(os.path.join(archive, INDEX)):
    return []
  _check_index(archive, plan.name, plan.sweep_dir)
  sweep_dir = os.path.normpath(os.path.abspath(plan.sweep_dir))
  rebuilt = []
  for job in plan.jobs:
    source = _archive_dir(archive, job)
    record_path = os.path.join(source, RECORD)
    if job.stage not in ARCHIVED_STAGES or not os.path.exists(record_path):
      continue
    if os.path.exists(os.path.join(job.workdir, RECORD)):
      continue  # the sweep directory's own state wins
    os.makedirs(job.workdir, exist_ok=True)
    _mirror(source, job.workdir, lambda r: r != RECORD, SWEEP_DIR, sweep_dir)
    checkpoint = newest_checkpoint(job.workdir)
    resumable = checkpoint is not None and any(
        n.startswith(checkpoint + ".") for n in os.listdir(
            os.path.join(job.workdir, "checkpoints")))
    io_utils.atomic_write_json(os.path.join(job.workdir, RESTORED), dict(
        archive=os.path.abspath(archive), resumable=resumable,
        restored=datetime.datetime.now().isoformat(timespec="seconds")))
    _write(os.path.join(job.workdir, RECORD),
           _content(record_path, RECORD, SWEEP_DIR, sweep_dir))
    rebuilt.append(job.id)
  return rebuilt


def archived_state(archive: str, job) -> Optional[str]:
  """The state of `job`'s run in `archive` (done, stopped), None if the
  archive does not hold it."""
  if job.stage not in ARCHIVED_STAGES:
    return None
  return _state(_archive_dir(archive, job))


def restored(workdir: str) -> Optional[Dict[str, Any]]:
  """The restore marker of a workdir rebuilt from an archive (archive,
  resumable: whether its newest checkpoint came with it, restored: when),
  None for others."""
  path = os.path.join(workdir, RESTORED)
  if not os.path.exists(path):
    return None
  try:
    marker = io_utils.read_json(path)
  except (OSError, ValueError):
    marker = {}
  return marker if isinstance(marker, dict) else {}


def prepare_to_run(workdir: str) -> str:
  """Readies a restored workdir whose run must run (again): one that came
  with its newest checkpoint resumes from it ('resumes'); one without is
  emptied and starts over ('starts over')."""
  marker = restored(workdir) or {}
  os.remove(os.path.join(workdir, RESTORED))
  if marker.get("resumable"):
    return "resumes"
  clear(workdir)
  return "starts over"


def clear(workdir: str) -> None:
  """Empties a restored workdir that must run again: without its
  checkpoints it starts over."""
  for entry in os.listdir(workdir):
    path = os.path.join(workdir, entry)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)


def _invocation_key(invocation: Dict[str, Any]) -> Tuple[str, str]:
  return (str(invocation.get("started")), str(invocation.get("host")))


def merge_history(record: Dict[str, Any], archive: str) -> int:
  """Adds to `record` (a sweep directory's sweep.json: name, invocations)
  the invocations that the archive's copy holds and it lacks (those of a
  sweep directory lost, or of one elsewhere), in the order they started;
  returns how many. An archive of another grid is refused."""
  if os.path.exists(os.path.join(archive, INDEX)):
    _check_index(archive, record.get("name"), "")
  path = os.path.join(archive, HISTORY)
  if not os.path.exists(path):
    return 0
  archived = io_utils.read_json(path)
  if archived.get("name") != record.get("name"):
    raise ValueError(
        f"--archive={archive} holds the history of grid "
        f"{archived.get('name')!r}, not of {record.get('name')!r}: give each "
        "grid its own archive directory.")
  have = {_invocation_key(i) for i in record["invocations"]}
  new = [i for i in archived.get("invocations", [])
         if _invocation_key(i) not in have]
  if new:
    record["invocations"] = sorted(record["invocations"] + new,
                                   key=lambda i: str(i.get("started")))
  return len(new)


def save_history(record: Dict[str, Any], archive: str) -> None:
  """Writes `record` (the sweep directory's sweep.json, merged with the
  archive's history) as ARCHIVE/sweep.json, atomically."""
  io_utils.ensure_writable_dir(archive, "archive directory")
  io_utils.atomic_write_json(os.path.join(archive, HISTORY), record)


def copy_report(report_dir: str, archive: str) -> Optional[str]:
  """Mirrors the sweep's report into ARCHIVE/report; returns that folder."""
  if not os.path.isdir(report_dir):
    return None
  target = os.path.join(archive, "report")
  _mirror(report_dir, target, lambda r: True, "", "")
  return target
