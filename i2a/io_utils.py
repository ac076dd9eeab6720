"""Atomic file writes and workdir checks: nothing is left half-written.

Every file the framework writes (configs, protocols, manifests, dataset
shards, reports) goes through a temporary file in the same directory and an
`os.replace`, which is atomic on POSIX filesystems. Results get the usual
permissions (0o666 / 0o777 less the umask), not tempfile's private ones.

A run killed mid-write leaves its temporary behind (hidden, named by
TEMPORARY_NAME); `remove_stale_temporaries(workdir)`, called by
`runs.prepare_workdir` when a binary starts, removes those of a workdir.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from typing import Any, Dict, Iterator, List

from absl import logging

from envmodels.export import usual_mode  # the one rule, shared

# The temporaries our writers create (tempfile's random part: 8 characters
# of [a-z0-9_]): atomic_path's files and atomic_directory's directories
# `.NAME.XXXXXXXX.tmp` (and `.tmp.old` while an old directory is replaced),
# envmodels.export's `.NAME.tmp-XXXXXXXX` / `.NAME.old-XXXXXXXX` and
# ensure_writable_dir's `.write_check.XXXXXXXX`.
TEMPORARY_NAME = re.compile(
    r"^\..+\.[a-z0-9_]{8}\.tmp(\.old)?$"
    r"|^\..+\.(tmp|old)-[a-z0-9_]{8}$"
    r"|^\.write_check\.[a-z0-9_]{8}$")
# A temporary nothing touched for this long is a dead writer's: a live one
# writes into it continuously (the launcher and the learner share a workdir).
STALE_AFTER_S = 60.0


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
  """Yields a temporary path next to `path`; renames it over `path` on success."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                             suffix=".tmp", dir=directory)
  os.close(fd)
  try:
    yield tmp
    # mkstemp's file is private (0600); the result gets the usual mode.
    os.chmod(tmp, usual_mode())
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def atomic_write_text(path: str, text: str) -> None:
  with atomic_path(path) as tmp:
    with open(tmp, "w") as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())


def atomic_write_json(path: str, data: Any) -> None:
  atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: str) -> Any:
  with open(path) as f:
    return json.load(f)


@contextlib.contextmanager
def atomic_directory(path: str) -> Iterator[str]:
  """Yields a temporary directory that replaces `path` once the block succeeds.

  An existing `path` is replaced only after the new one is complete.
  """
  parent = os.path.dirname(os.path.abspath(path))
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix="." + os.path.basename(path) + ".",
                         suffix=".tmp", dir=parent)
  try:
    yield tmp
    os.chmod(tmp, usual_mode(directory=True))  # mkdtemp's is private
    if os.path.exists(path):
      old = tmp + ".old"
      os.replace(path, old)
      os.replace(tmp, path)
      shutil.rmtree(old, ignore_errors=True)
    else:
      os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)


def ensure_writable_dir(path: str, what: str = "workdir") -> str:
  """Creates `path` if needed and checks it is writable, with a clear error."""
  path = os.path.abspath(os.path.expanduser(path))
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".write_check."):
      pass
  except OSError as e:
    raise ValueError(
        f"{what} {path!r} is not a writable directory ({e.strerror}). "
        f"Pass a {what} you can write to, e.g. --workdir=/tmp/i2a_run.") from e
  return path


def _newest_mtime(path: str) -> float:
  """The newest modification time of `path` and, for a directory, of
  everything under it."""
  newest = os.lstat(path).st_mtime
  if os.path.isdir(path) and not os.path.islink(path):
    for root, dirs, files in os.walk(path):
      for name in dirs + files:
        try:
          newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
        except OSError:
          pass
  return newest


def remove_stale_temporaries(directory: str,
                             stale_after_s: float = STALE_AFTER_S
                             ) -> List[str]:
  """Removes the temporaries our writers leave when killed (TEMPORARY_NAME)
  under `directory`, those untouched for `stale_after_s` seconds; returns
  their paths. Hidden directories are not entered (the window cache,
  `.cache`, cleans its own under its lock); nothing else is touched."""
  removed = []
  now = time.time()
  for root, dirs, files in os.walk(directory):
    for name in list(dirs) + files:
      path = os.path.join(root, name)
      if not TEMPORARY_NAME.match(name):
        continue
      try:
        if now - _newest_mtime(path) < stale_after_s:
          continue
        if os.path.isdir(path) and not os.path.islink(path):
          shutil.rmtree(path)
        else:
          os.remove(path)
      except OSError as e:  # gone meanwhile, or not ours to remove
        logging.warning("could not remove stale temporary %s: %s", path, e)
        continue
      removed.append(path)
    dirs[:] = [d for d in dirs if not d.startswith(".")]
  if removed:
    logging.info("removed %d stale temporaries left by killed runs: %s",
                 len(removed), removed)
  return removed


def flatten(data: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
  """{'a.b': value} for a nested dict of JSON values (tuples as lists): a
  config as stored in config.json, compared field by field."""
  flat = {}
  for key, value in data.items():
    if isinstance(value, dict):
      flat.update(flatten(value, prefix + key + "."))
    else:
      flat[prefix + key] = list(value) if isinstance(value, tuple) else value
  return flat
