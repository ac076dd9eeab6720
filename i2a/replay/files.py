"""Datasets on disk: collect once, pretrain many models days later.

Format 'i2a-episodes', version 1 (documented in docs/datasets.md):

  DATASET/{train,test}/
    manifest.json        written last; a split without it is incomplete
    shard-00000.npz ...  zip (deflate level 1) of .npy arrays:
      observation uint8 [N, H, W, C]   all steps of the shard's episodes
      action int32 [N], reward float32 [N], discount float32 [N]
      episode_length int64 [E], episode_complete bool [E]

Episodes are stored at primitive-step level (episodes.py's convention), so
one dataset serves models of any jump c, context length and T. A split is
written into a temporary directory and renamed into place when complete, and
every shard is checksummed in the manifest: nothing half-written is ever read.
Windows are read from a split through its window cache (cache.py): each
shard unpacked once into an uncompressed, memory-mapped file.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import zipfile
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from i2a import io_utils
from i2a.replay.episodes import Episode

FORMAT = "i2a-episodes"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class DatasetError(ValueError):
  """A dataset directory that cannot be read, with what to do about it."""


def _package_versions() -> Dict[str, Optional[str]]:
  from i2a import versions  # pylint: disable=import-outside-toplevel
  return versions.recorded_versions()


def _write_npz(path: str, arrays: Dict[str, np.ndarray]) -> str:
  """Writes arrays into a zip at `path` atomically; returns its sha256."""
  with io_utils.atomic_path(path) as tmp:
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED,
                         compresslevel=1) as archive:
      for name, array in arrays.items():
        with archive.open(name + ".npy", "w", force_zip64=True) as f:
          np.lib.format.write_array(f, np.ascontiguousarray(array),
                                    allow_pickle=False)
  return _sha256(path)


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 22), b""):
      digest.update(block)
  return digest.hexdigest()


class SplitWriter:
  """Writes one split's episodes into shards, then the manifest.

  Shards are compressed and written by a background thread (zlib releases
  the GIL), so collection keeps stepping environments meanwhile. Use as a
  context manager: the split appears at `path` only when the block succeeds.
  """

  def __init__(self, path: str, metadata: Dict[str, Any],
               steps_per_shard: int = 20_000):
    self.path = path
    self._metadata = dict(metadata)
    self._steps_per_shard = steps_per_shard
    self._pending: List[Episode] = []
    self._pending_steps = 0
    self._shards: List[Dict[str, Any]] = []
    self._threads: List[threading.Thread] = []
    self._errors: List[BaseException] = []
    self._tmp_context = None
    self._tmp: Optional[str] = None
    self.num_episodes = 0
    self.num_steps = 0
    self.num_complete_episodes = 0

  def __enter__(self) -> "SplitWriter":
    self._tmp_context = io_utils.atomic_directory(self.path)
    self._tmp = self._tmp_context.__enter__()
    return self

  def add(self, episode: Episode) -> None:
    self._pending.append(episode)
    self._pending_steps += len(episode)
    self.num_episodes += 1
    self.num_steps += len(episode)
    self.num_complete_episodes += int(episode.complete)
    if self._pending_steps >= self._steps_per_shard:
      self._flush()

  def _flush(self) -> None:
    if not self._pending:
      return
    episodes, self._pending, self._pending_steps = self._pending, [], 0
    index = len(self._shards)
    name = f"shard-{index:05d}.npz"
    record: Dict[str, Any] = {
        "file": name, "episodes": len(episodes),
        "steps": int(sum(len(e) for e in episodes))}
    self._shards.append(record)

    def write():
      try:
        arrays = {
            "observation": np.concatenate([e.observation for e in episodes]),
            "action": np.concatenate([e.action for e in episodes]),
            "reward": np.concatenate([e.reward for e in episodes]),
            "discount": np.concatenate([e.discount for e in episodes]),
            "episode_length": np.array([len(e) for e in episodes], np.int64),
            "episode_complete": np.array([e.complete for e in episodes]),
        }
        record["sha256"] = _write_npz(os.path.join(self._tmp, name), arrays)
      except BaseException as e:  # pylint: disable=broad-except
        self._errors.append(e)

    # At most one shard in flight: bounded memory, overlapped with stepping.
    self._join()
    thread = threading.Thread(target=write, name=f"write-{name}", daemon=True)
    thread.start()
    self._threads.append(thread)

  def _join(self) -> None:
    for thread in self._threads:
      thread.join()
    self._threads = []
    if self._errors:
      raise self._errors[0]

  def __exit__(self, exc_type, exc, tb) -> None:
    try:
      if exc_type is None:
        self._flush()
        self._join()
        if not self.num_episodes:
          raise DatasetError(f"no episode was recorded for {self.path}.")
        first = self._first_shape()
        manifest = dict(
            self._metadata, format=FORMAT, format_version=FORMAT_VERSION,
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            episodes=self.num_episodes, steps=self.num_steps,
            complete_episodes=self.num_complete_episodes,
            observation_shape=first, shards=self._shards,
            versions=_package_versions())
        io_utils.atomic_write_json(os.path.join(self._tmp, MANIFEST), manifest)
      else:
        for thread in self._threads:
          thread.join()
    finally:
      self._tmp_context.__exit__(exc_type, exc, tb)

  def _first_shape(self) -> List[int]:
    with np.load(os.path.join(self._tmp, self._shards[0]["file"])) as data:
      return list(data["observation"].shape[1:])


def read_manifest(path: str) -> Dict[str, Any]:
  """The manifest of a split directory, validated; DatasetError otherwise."""
  if not os.path.isdir(path):
    raise DatasetError(f"dataset split {path!r} does not exist. Run "
                       "`python -m i2a.collect --workdir=DIR` and pass "
                       "DIR/dataset.")
  manifest_path = os.path.join(path, MANIFEST)
  if not os.path.exists(manifest_path):
    raise DatasetError(f"{path!r} has no {MANIFEST}: not a dataset split, or "
                       "an interrupted collection. Collect it again.")
  try:
    manifest = io_utils.read_json(manifest_path)
  except ValueError as e:
    raise DatasetError(f"{manifest_path} is not valid JSON ({e}).") from e
  if manifest.get("format") != FORMAT:
    raise DatasetError(f"{path!r} holds format {manifest.get('format')!r}, "
                       f"not {FORMAT!r}.")
  version = manifest.get("format_version")
  if version != FORMAT_VERSION:
    raise DatasetError(
        f"{path!r} is dataset format version {version}; this code reads "
        f"version {FORMAT_VERSION}. "
        + ("Upgrade the framework to read it." if isinstance(version, int)
           and version > FORMAT_VERSION else "Collect the dataset again."))
  return manifest


def check_shard(path: str, shard: Dict[str, Any], verify: bool = True) -> str:
  """The path of a manifest's shard record, present and (by default) intact.

  Args:
    path: the split directory.
    shard: one record of the manifest's `shards` (file, sha256, ...).
    verify: whether to check the file against its sha256 (reads it whole).

  Raises:
    DatasetError: the file is missing or does not match its checksum.
  """
  file = os.path.join(path, shard["file"])
  if not os.path.exists(file):
    raise DatasetError(f"{file} is missing: the dataset is incomplete.")
  if verify and _sha256(file) != shard["sha256"]:
    raise DatasetError(f"{file} does not match its checksum: the file is "
                       "corrupt. Collect the dataset again.")
  return file


def iter_episodes(path: str, verify: bool = True) -> Iterator[Episode]:
  """Reads a split's episodes in order (checksums verified by default)."""
  manifest = read_manifest(path)
  for shard in manifest["shards"]:
    file = check_shard(path, shard, verify)
    with np.load(file) as data:
      arrays = {k: data[k] for k in data.files}
    start = 0
    for n, complete in zip(arrays["episode_length"],
                           arrays["episode_complete"]):
      stop = start + int(n)
      yield Episode(observation=arrays["observation"][start:stop],
                    action=arrays["action"][start:stop],
                    reward=arrays["reward"][start:stop],
                    discount=arrays["discount"][start:stop],
                    complete=bool(complete))
      start = stop


def load_episodes(path: str, verify: bool = True) -> List[Episode]:
  """All of a split's episodes in RAM (2x the frames' size while a
  WindowSampler concatenates them): for small splits and tests. Pretraining
  reads windows through the memory-mapped window cache instead (cache.py)."""
  return list(iter_episodes(path, verify=verify))


def split_path(dataset_dir: str, split: str) -> str:
  return os.path.join(dataset_dir, split)


# Manifest fields that say when and with which packages a split was written,
# not which episodes it holds: left out of the fingerprint, so that a dataset
# collected again from the same seeds (the same shards) keeps its identity.
WRITING_FIELDS = ("created", "versions")


def dataset_fingerprint(dataset_dir: str) -> str:
  """The identity of a dataset: sha256 of its protocol and both splits'
  manifests (which hold every shard's sha256) without WRITING_FIELDS, as
  canonical JSON.

  Two directories with the same fingerprint hold the same episodes under
  the same protocol; a copied or moved dataset keeps its fingerprint, and so
  does one collected again with the same seeds, protocol and policy.
  Pretraining records it in its workdir and its export (README.md,
  "Guarantees"). Raises DatasetError for a split that cannot be read.
  """
  manifests = _manifests(dataset_dir)
  return _canonical_sha256(dict(
      protocol=manifests["train"].get("protocol"),
      **{split: {k: v for k, v in manifest.items()
                 if k not in WRITING_FIELDS}
         for split, manifest in manifests.items()}))


def legacy_dataset_fingerprint(dataset_dir: str) -> str:
  """The fingerprint workdirs recorded before WRITING_FIELDS were left out
  (the whole manifests): resumes accept it for the same dataset."""
  manifests = _manifests(dataset_dir)
  return _canonical_sha256(dict(protocol=manifests["train"].get("protocol"),
                                **manifests))


def _manifests(dataset_dir: str) -> Dict[str, Dict[str, Any]]:
  return {split: read_manifest(split_path(dataset_dir, split))
          for split in ("train", "test")}


def _canonical_sha256(record: Dict[str, Any]) -> str:
  text = json.dumps(record, sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode("utf-8")).hexdigest()
