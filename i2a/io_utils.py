"""Atomic file writes and workdir checks: nothing is left half-written.

Every file the framework writes (configs, protocols, manifests, dataset
shards, reports) goes through a temporary file in the same directory and an
`os.replace`, which is atomic on POSIX filesystems.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Any, Iterator


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


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
    os.chmod(tmp, 0o666 & ~_umask())
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
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's directory is private
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
