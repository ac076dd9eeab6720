"""The window cache: a split's shards unpacked once into memory-mapped files.

Pretraining samples windows uniformly from the whole train split, so every
frame must be reachable at any time, but the frames need not sit in RAM
(the `paper` preset's million frames of 200x160x3 are 96 GB). On first use
each shard, checked against its sha256, is unpacked once into an
uncompressed cache entry; `WindowSampler` then gathers frames from read-only
np.memmap arrays over the entries, so the frames stay on disk (the OS page
cache keeps those in use) and RAM holds only the per-step actions, rewards
and discounts (16 bytes a step; episodes.py). docs/datasets.md, "Reading".

Format 'i2a-window-cache', version 1. CACHE is SPLIT/.cache by default,
else $I2A_DATASET_CACHE or an explicit `cache_dir` (for read-only datasets,
or a faster disk); entries are named by content, so one cache directory
serves any number of splits:

  CACHE/
    lock                  held (flock) while entries are built or removed
    <sha256 of a shard>/  one entry per shard
      observation.npy     the shard's `observation` member, uncompressed
      steps.npz           action, reward, discount, episode_length,
                          episode_complete (uncompressed)
      entry.json          format, version, shard, sha256, steps, episodes,
                          observation_shape, observation_bytes, created

An entry is written into a hidden temporary directory (`.<sha256>.*.tmp`)
and renamed into place once complete, files synced: a crash leaves at most a
temporary directory, which is ignored and removed by the next build. An
entry whose entry.json is missing, of another format or version, or whose
sizes disagree, is ignored and rebuilt. A shard whose sha256 changed (a split
collected again) names a new entry; in a split's own SPLIT/.cache entries no
longer in its manifest are removed (a shared cache is never pruned).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import re
import shutil
import tempfile
import time
import zipfile
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
from absl import logging

from i2a import io_utils
from i2a.progress import Progress
from i2a.replay import files

CACHE_FORMAT = "i2a-window-cache"
CACHE_VERSION = 1
CACHE_ENV = "I2A_DATASET_CACHE"
SPLIT_CACHE = ".cache"
ENTRY = "entry.json"
OBSERVATION = "observation.npy"
STEPS = "steps.npz"
LOCK = "lock"
STEP_FIELDS = ("action", "reward", "discount", "episode_length",
               "episode_complete")
# Left free on the cache's filesystem after an entry is written.
FREE_MARGIN_BYTES = 256 << 20
ENTRY_NAME = re.compile(r"^[0-9a-f]{64}$")  # an entry's directory


@dataclasses.dataclass
class CachedShard:
  """One shard through its cache entry: frames on disk, the rest in RAM."""
  file: str  # the shard's file name in its split
  sha256: str
  path: str  # the entry directory
  observation: np.memmap  # uint8 [N, H, W, C], read-only
  action: np.ndarray  # int32 [N]
  reward: np.ndarray  # float32 [N]
  discount: np.ndarray  # float32 [N]
  episode_length: np.ndarray  # int64 [E]
  episode_complete: np.ndarray  # bool [E]


def cache_dir(split_dir: str, explicit: Optional[str] = None) -> str:
  """Where a split's cache entries live: explicit, $I2A_DATASET_CACHE, or
  SPLIT/.cache."""
  chosen = explicit or os.environ.get(CACHE_ENV)
  if chosen:
    return os.path.abspath(os.path.expanduser(chosen))
  return os.path.join(os.path.abspath(split_dir), SPLIT_CACHE)


def read_entry(entry: str, shard: Dict[str, Any]) -> Optional[Dict[str, Any]]:
  """entry.json of a complete entry for `shard` (a manifest record), or None.

  None for anything else: no entry, one half-written or truncated, of
  another cache format or version, or for another shard's contents.
  """
  try:
    meta = io_utils.read_json(os.path.join(entry, ENTRY))
  except (OSError, ValueError):
    return None
  if (not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT
      or meta.get("version") != CACHE_VERSION
      or meta.get("sha256") != shard["sha256"]
      or meta.get("steps") != shard["steps"]):
    return None
  try:
    if (os.path.getsize(os.path.join(entry, OBSERVATION))
        != meta.get("observation_bytes")
        or not os.path.isfile(os.path.join(entry, STEPS))):
      return None
  except OSError:
    return None
  return meta


@contextlib.contextmanager
def _locked(root: str) -> Iterator[None]:
  """Holds the cache's lock (released by the OS if the process dies)."""
  with open(os.path.join(root, LOCK), "a") as f:
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _fsync_dir(path: str) -> None:
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def _fsync_file(path: str) -> None:
  with open(path, "rb") as f:
    os.fsync(f.fileno())


def _unpacked_bytes(shard_file: str) -> int:
  """Bytes the shard's arrays take uncompressed (from the zip directory)."""
  try:
    with zipfile.ZipFile(shard_file) as archive:
      return sum(info.file_size for info in archive.infolist())
  except (OSError, zipfile.BadZipFile) as e:
    raise files.DatasetError(f"{shard_file} is not a readable shard ({e}). "
                             "Collect the dataset again.") from e


def _make_root(root: str) -> None:
  try:
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, LOCK), "a"):
      pass
  except OSError as e:
    raise files.DatasetError(
        f"cannot write the window cache {root!r} ({e.strerror}): point "
        f"${CACHE_ENV} (or cache_dir) at a writable directory with room for "
        "the uncompressed frames.") from e


def _check_space(root: str, needed: int, split_dir: str) -> None:
  free = shutil.disk_usage(root).free
  if free < needed + FREE_MARGIN_BYTES:
    raise files.DatasetError(
        f"the window cache of {split_dir} needs {needed / 1e9:.2f} GB in "
        f"{root} ({free / 1e9:.2f} GB free): free some space, or set "
        f"${CACHE_ENV}=DIR on a larger disk.")


def _build_entry(shard_file: str, shard: Dict[str, Any], root: str) -> None:
  """Unpacks one shard into root/<sha256> (the caller holds the lock)."""
  sha = shard["sha256"]
  entry = os.path.join(root, sha)
  tmp = tempfile.mkdtemp(prefix=f".{sha}.", suffix=".tmp", dir=root)
  try:
    observation_file = os.path.join(tmp, OBSERVATION)
    try:
      with zipfile.ZipFile(shard_file) as archive:
        # The member is a .npy file: copied as it is, it memory-maps.
        with archive.open(OBSERVATION) as src, \
            open(observation_file, "wb") as dst:
          shutil.copyfileobj(src, dst, 16 << 20)
          dst.flush()
          os.fsync(dst.fileno())
      with np.load(shard_file) as data:
        steps = {name: data[name] for name in STEP_FIELDS}
    except (KeyError, OSError, ValueError, zipfile.BadZipFile) as e:
      raise files.DatasetError(f"{shard_file} cannot be unpacked ({e}): the "
                               "shard is corrupt. Collect the dataset "
                               "again.") from e
    observation = np.load(observation_file, mmap_mode="r")
    n = int(shard["steps"])
    if (observation.dtype != np.uint8 or observation.ndim != 4
        or len(observation) != n or int(steps["episode_length"].sum()) != n
        or any(len(steps[k]) != n for k in ("action", "reward", "discount"))):
      raise files.DatasetError(
          f"{shard_file} holds {observation.dtype} frames of shape "
          f"{observation.shape} and {int(steps['episode_length'].sum())} "
          f"episode steps; its manifest record says {n} steps. Collect the "
          "dataset again.")
    shape = list(observation.shape[1:])
    del observation
    np.savez(os.path.join(tmp, STEPS), **steps)
    _fsync_file(os.path.join(tmp, STEPS))
    io_utils.atomic_write_json(os.path.join(tmp, ENTRY), dict(
        format=CACHE_FORMAT, version=CACHE_VERSION, shard=shard["file"],
        sha256=sha, steps=n, episodes=len(steps["episode_length"]),
        observation_shape=shape,
        observation_bytes=os.path.getsize(observation_file),
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z")))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # mkdtemp's directory is private
    os.rename(tmp, entry)
    _fsync_dir(root)
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)


def _open_entry(entry: str, shard: Dict[str, Any]) -> CachedShard:
  observation = np.load(os.path.join(entry, OBSERVATION), mmap_mode="r")
  with np.load(os.path.join(entry, STEPS)) as data:
    steps = {name: data[name] for name in STEP_FIELDS}
  return CachedShard(file=shard["file"], sha256=shard["sha256"], path=entry,
                     observation=observation, **steps)


def open_split(split_dir: str, cache: Optional[str] = None,
               verify: bool = True) -> List[CachedShard]:
  """A split's shards through their cache entries, building missing ones.

  Args:
    split_dir: a split directory (files.read_manifest's checks apply).
    cache: the cache directory (`cache_dir`'s default otherwise).
    verify: check every shard against its sha256, as files.load_episodes
      does (reads the compressed shards once per call).

  Returns:
    The shards in manifest order, frames memory-mapped read-only.

  Raises:
    files.DatasetError: the split is unreadable or corrupt, or the cache
      cannot be written or has no room.
  """
  manifest = files.read_manifest(split_dir)
  root = cache_dir(split_dir, cache)
  records = manifest["shards"]
  shard_files = [files.check_shard(split_dir, shard, verify)
                 for shard in records]
  missing = [i for i, shard in enumerate(records)
             if read_entry(os.path.join(root, shard["sha256"]), shard) is None]
  own = root == os.path.join(os.path.abspath(split_dir), SPLIT_CACHE)
  stale = []
  if own and os.path.isdir(root):
    wanted = {shard["sha256"] for shard in records}
    stale = [name for name in os.listdir(root)
             if ENTRY_NAME.match(name) and name not in wanted]
  if missing or stale:
    _make_root(root)
    with _locked(root):
      for name in stale:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
      # Temporary directories seen under the lock are crashed builds'.
      for name in os.listdir(root):
        if name.startswith(".") and name.endswith(".tmp"):
          shutil.rmtree(os.path.join(root, name), ignore_errors=True)
      missing = [i for i in missing if read_entry(
          os.path.join(root, records[i]["sha256"]), records[i]) is None]
      if missing:
        _check_space(root, sum(_unpacked_bytes(shard_files[i])
                               for i in missing), split_dir)
        logging.info("building the window cache of %s in %s (%d shards)",
                     split_dir, root, len(missing))
        progress = Progress(f"window cache {os.path.basename(split_dir)}",
                            sum(int(records[i]["steps"]) for i in missing))
        for i in missing:
          entry = os.path.join(root, records[i]["sha256"])
          if os.path.exists(entry):  # incomplete or of another version
            shutil.rmtree(entry)
          _build_entry(shard_files[i], records[i], root)
          progress.update(int(records[i]["steps"]))
        progress.close()
  return [_open_entry(os.path.join(root, shard["sha256"]), shard)
          for shard in records]
