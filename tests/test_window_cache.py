"""The window cache: disk-backed windows equal in-memory ones, the cache is
built once, rebuilt when a shard changes, never read half-written, and the
sampler keeps no copy of the frames in RAM."""

import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from i2a.replay import cache, datasets, episodes, files

SHAPE = (12, 10, 3)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _episode(rng, length, complete=True, shape=SHAPE):
  return episodes.Episode(
      observation=rng.integers(0, 256, (length, *shape), dtype=np.uint8),
      action=np.append(rng.integers(0, 5, length - 1), 0).astype(np.int32),
      reward=np.append(0.0, rng.choice([0.0, 0.1, 1.0, -4.9, 5.0],
                                        length - 1)).astype(np.float32),
      discount=np.append(np.ones(length - 1), 0.0 if complete else 1.0
                         ).astype(np.float32),
      complete=complete)


def _write(path, eps, steps_per_shard=20):
  with files.SplitWriter(str(path), {"note": "test"},
                         steps_per_shard=steps_per_shard) as writer:
    for episode in eps:
      writer.add(episode)
  return str(path)


def _episodes(seed, lengths=(23, 4, 31, 9, 17, 40, 12, 6, 28)):
  rng = np.random.default_rng(seed)
  return [_episode(rng, n, complete=i % 3 != 2) for i, n in enumerate(lengths)]


def _assert_same_batches(a, b):
  assert a.keys() == b.keys()
  for key in a:
    assert a[key].dtype == b[key].dtype, key
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _entries(root):
  return sorted(n for n in os.listdir(root) if cache.ENTRY_NAME.match(n))


@pytest.mark.parametrize("length,jump", [(4, 2), (5, 3), (3, 1)])
def test_disk_backed_windows_equal_the_in_memory_reference(tmp_path, length,
                                                           jump):
  eps = _episodes(0)
  path = _write(tmp_path / "train", eps)
  assert len(files.read_manifest(path)["shards"]) > 3
  disk = datasets.window_sampler(path, length, jump)
  memory = datasets.window_sampler(path, length, jump, in_memory=True)
  assert disk.num_windows == memory.num_windows > 0
  assert disk.observation_shape == memory.observation_shape == SHAPE
  ids = np.arange(disk.num_windows)
  _assert_same_batches(disk.gather(ids), memory.gather(ids))
  # Each index is the reference window at the same (episode, start).
  refs = [(e, s) for e, episode in enumerate(eps)
          for s in range(episodes.num_window_starts(len(episode), length,
                                                    jump))]
  batch = disk.gather(ids)
  assert len(refs) == disk.num_windows
  for row, (e, s) in enumerate(refs):
    reference = episodes.window(eps[e], s, length, jump)
    for key in reference:
      np.testing.assert_allclose(batch[key][row], reference[key], rtol=1e-6,
                                 err_msg=key)
  # The same seed draws the same batches; shuffled gathers agree too.
  _assert_same_batches(disk.sample(np.random.default_rng(5), 32),
                       memory.sample(np.random.default_rng(5), 32))
  shuffled = np.random.default_rng(6).permutation(ids)
  _assert_same_batches(disk.gather(shuffled), memory.gather(shuffled))
  for first in range(length):
    np.testing.assert_array_equal(disk.distinct_rewards(first),
                                  memory.distinct_rewards(first))
  # The frames are memory-mapped from the split's cache, one file a shard.
  root = os.path.join(path, cache.SPLIT_CACHE)
  assert all(isinstance(o, np.memmap) for o in disk.observation_shards)
  assert sorted(os.path.dirname(o.filename) for o in disk.observation_shards
                ) == [os.path.join(root, e) for e in _entries(root)]


def test_pipelines_yield_the_same_batches_with_any_number_of_workers(
    tmp_path):
  path = _write(tmp_path / "train", _episodes(1))
  disk = datasets.window_sampler(path, 5, 2)
  memory = datasets.window_sampler(path, 5, 2, in_memory=True)
  rng = np.random.default_rng(7)
  expected = [memory.sample(rng, 6) for _ in range(12)]
  for sampler, workers, read_ahead in ((disk, 0, 8), (disk, 0, 0),
                                       (disk, 2, 1), (memory, 3, 8)):
    with datasets.sampled_batches(sampler, 6, seed=7, workers=workers,
                                  read_ahead=read_ahead) as batches:
      for want, got in zip(expected, itertools.islice(batches, 12)):
        assert isinstance(got["observation"], tf.Tensor)
        _assert_same_batches(want, {k: v.numpy() for k, v in got.items()})
  reference = list(datasets.evaluation_batches(memory, 4, 15, workers=0))
  assert [len(b["reward"]) for b in reference] == [4, 4, 4, 3]
  for workers, read_ahead in ((0, 8), (1, 0), (2, 3)):
    evaluation = list(datasets.evaluation_batches(
        disk, 4, 15, workers=workers, read_ahead=read_ahead))
    assert len(evaluation) == len(reference)
    for a, b in zip(evaluation, reference):
      _assert_same_batches({k: v.numpy() for k, v in a.items()},
                           {k: v.numpy() for k, v in b.items()})


def test_announcing_frames_to_the_os_changes_no_window(tmp_path):
  path = _write(tmp_path / "train", _episodes(13))
  disk = datasets.window_sampler(path, 5, 3)
  memory = datasets.window_sampler(path, 5, 3, in_memory=True)
  ids = np.arange(disk.num_windows)
  before = disk.gather(ids)
  for sampler in (disk, memory):  # a no-op in RAM
    sampler.will_need(ids)
    sampler.will_need(np.array([-1, 0, disk.num_windows]))  # ignored
  _assert_same_batches(disk.gather(ids), before)
  _assert_same_batches(memory.gather(ids), before)


def _live_threads():
  return [t for t in threading.enumerate() if t.is_alive() and (
      t.name.startswith("gather") or t.name == "batches")]


def test_the_background_threads_stop_with_the_batches(tmp_path):
  path = _write(tmp_path / "train", _episodes(2))
  sampler = datasets.window_sampler(path, 4, 2)
  batches = datasets.sampled_batches(sampler, 3, seed=0, workers=2)
  assert len(next(batches)["reward"]) == 3
  assert _live_threads()
  batches.close()
  assert not _live_threads()
  with pytest.raises(StopIteration):
    next(batches)
  # Dropping the iterator stops its threads too; so does the end of a
  # finite one.
  batches = datasets.sampled_batches(sampler, 3, seed=0, workers=2)
  next(batches)
  del batches
  deadline = time.monotonic() + 10
  while _live_threads() and time.monotonic() < deadline:
    time.sleep(0.05)
  assert not _live_threads()
  assert len(list(datasets.evaluation_batches(sampler, 3, 7))) == 3
  deadline = time.monotonic() + 10
  while _live_threads() and time.monotonic() < deadline:
    time.sleep(0.05)
  assert not _live_threads()


def test_an_error_in_the_background_thread_is_raised_by_next(tmp_path):
  path = _write(tmp_path / "train", _episodes(2))
  sampler = datasets.window_sampler(path, 4, 2)
  batches = datasets.Batches(sampler, iter([np.arange(2), np.array([10**9])]))
  assert len(next(batches)["reward"]) == 2
  with pytest.raises(IndexError, match="window indices must be in"):
    next(batches)
  with pytest.raises(StopIteration):
    next(batches)


def test_the_cache_is_built_once_named_by_content_and_reused(tmp_path):
  path = _write(tmp_path / "train", _episodes(3))
  manifest = files.read_manifest(path)
  datasets.window_sampler(path, 4, 2)
  root = os.path.join(path, cache.SPLIT_CACHE)
  assert _entries(root) == sorted(s["sha256"] for s in manifest["shards"])
  stamps = {e: os.stat(os.path.join(root, e, cache.OBSERVATION)).st_ino
            for e in _entries(root)}
  meta = json.load(open(os.path.join(root, _entries(root)[0], cache.ENTRY)))
  assert meta["format"] == cache.CACHE_FORMAT
  assert meta["version"] == cache.CACHE_VERSION
  again = datasets.window_sampler(path, 6, 1)  # another window shape: reused
  assert {e: os.stat(os.path.join(root, e, cache.OBSERVATION)).st_ino
          for e in _entries(root)} == stamps
  assert again.num_windows > 0
  # The dataset's own files are unchanged: the manifest still verifies.
  assert files.read_manifest(path) == manifest
  assert len(files.load_episodes(path)) == manifest["episodes"]


def test_the_cache_is_rebuilt_when_a_shard_changes(tmp_path):
  path = _write(tmp_path / "train", _episodes(4))
  old = datasets.window_sampler(path, 4, 2)
  old_batch = old.gather(np.arange(10))
  root = os.path.join(path, cache.SPLIT_CACHE)
  old_entries = _entries(root)
  # The split collected again in place (its shards replaced, same names),
  # the cache directory left where it was.
  other = _write(tmp_path / "other", _episodes(5))
  for name in os.listdir(other):
    shutil.copy(os.path.join(other, name), os.path.join(path, name))
  new = datasets.window_sampler(path, 4, 2)
  reference = datasets.window_sampler(other, 4, 2, in_memory=True)
  ids = np.arange(new.num_windows)
  _assert_same_batches(new.gather(ids), reference.gather(ids))
  assert not np.array_equal(new.gather(np.arange(10))["observation"],
                            old_batch["observation"])
  # Entries of the replaced shards are gone; the new shards' are there.
  assert not set(old_entries) & set(_entries(root))
  assert _entries(root) == sorted(
      s["sha256"] for s in files.read_manifest(path)["shards"])


def test_a_shared_cache_dir_serves_two_splits_and_is_not_pruned(tmp_path,
                                                                monkeypatch):
  shared = str(tmp_path / "shared")
  monkeypatch.setenv(cache.CACHE_ENV, shared)
  a = _write(tmp_path / "a", _episodes(6))
  b = _write(tmp_path / "b", _episodes(7))
  datasets.window_sampler(a, 4, 2)
  datasets.window_sampler(b, 4, 2)
  shas = [s["sha256"] for p in (a, b) for s in files.read_manifest(p)["shards"]]
  assert _entries(shared) == sorted(shas)
  assert not os.path.exists(os.path.join(a, cache.SPLIT_CACHE))
  # An explicit cache_dir wins over the environment variable.
  explicit = str(tmp_path / "explicit")
  sampler = datasets.window_sampler(a, 4, 2, cache_dir=explicit)
  assert os.path.dirname(sampler.observation_shards[0].filename).startswith(
      explicit)


def test_a_half_written_or_damaged_cache_entry_is_ignored(tmp_path):
  path = _write(tmp_path / "train", _episodes(8))
  reference = datasets.window_sampler(path, 4, 2, in_memory=True)
  ids = np.arange(reference.num_windows)
  datasets.window_sampler(path, 4, 2)
  root = os.path.join(path, cache.SPLIT_CACHE)
  entries = _entries(root)
  assert len(entries) >= 4
  # A truncated frame file, a missing entry.json, another cache version,
  # and a crashed build's temporary directory.
  with open(os.path.join(root, entries[0], cache.OBSERVATION), "r+b") as f:
    f.truncate(200)
  os.remove(os.path.join(root, entries[1], cache.ENTRY))
  meta_path = os.path.join(root, entries[2], cache.ENTRY)
  meta = json.load(open(meta_path))
  meta["version"] = cache.CACHE_VERSION + 1
  json.dump(meta, open(meta_path, "w"))
  crashed = os.path.join(root, f".{entries[3]}.abc123.tmp")
  os.makedirs(crashed)
  with open(os.path.join(crashed, cache.OBSERVATION), "wb") as f:
    f.write(b"\x93NUMPY half")
  for entry in entries[:3]:
    assert cache.read_entry(os.path.join(root, entry), {
        "sha256": entry, "steps": meta["steps"]}) is None
  sampler = datasets.window_sampler(path, 4, 2)
  _assert_same_batches(sampler.gather(ids), reference.gather(ids))
  assert not os.path.exists(crashed)
  assert _entries(root) == entries
  assert all(json.load(open(os.path.join(root, e, cache.ENTRY)))["version"]
             == cache.CACHE_VERSION for e in entries)


def test_a_build_killed_midway_leaves_no_entry_and_is_redone(tmp_path):
  path = _write(tmp_path / "train", _episodes(9))
  # A process that dies (no cleanup) halfway through copying the frames.
  script = textwrap.dedent(f"""
      import os, shutil
      from i2a.replay import cache
      def dying_copy(src, dst, length):
        dst.write(src.read(300))
        dst.flush()
        os._exit(3)
      cache.shutil.copyfileobj = dying_copy
      cache.open_split({path!r})
  """)
  result = subprocess.run([sys.executable, "-c", script], cwd=ROOT,
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=ROOT))
  assert result.returncode == 3, result.stderr
  root = os.path.join(path, cache.SPLIT_CACHE)
  leftovers = os.listdir(root)
  assert not _entries(root)
  assert [n for n in leftovers if n.endswith(".tmp")]
  sampler = datasets.window_sampler(path, 4, 2)
  reference = datasets.window_sampler(path, 4, 2, in_memory=True)
  ids = np.arange(sampler.num_windows)
  _assert_same_batches(sampler.gather(ids), reference.gather(ids))
  assert not [n for n in os.listdir(root) if n.endswith(".tmp")]


def test_a_corrupt_shard_is_refused_even_when_cached(tmp_path):
  path = _write(tmp_path / "train", _episodes(10))
  datasets.window_sampler(path, 4, 2)
  shard = os.path.join(path, "shard-00001.npz")
  with open(shard, "r+b") as f:
    f.seek(100)
    f.write(b"corrupt!")
  with pytest.raises(files.DatasetError, match="corrupt"):
    datasets.window_sampler(path, 4, 2)


def test_an_unwritable_or_full_cache_is_refused_saying_what_to_do(
    tmp_path, monkeypatch):
  path = _write(tmp_path / "train", _episodes(11))
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  with pytest.raises(files.DatasetError, match=cache.CACHE_ENV):
    datasets.window_sampler(path, 4, 2, cache_dir=str(blocker / "cache"))

  class Usage:
    free = 1000
  monkeypatch.setattr(cache.shutil, "disk_usage", lambda _: Usage())
  with pytest.raises(files.DatasetError, match=r"needs 0\.\d\d GB .*"
                     r"I2A_DATASET_CACHE"):
    datasets.window_sampler(path, 4, 2)
  assert not _entries(os.path.join(path, cache.SPLIT_CACHE))


def _status(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise KeyError(field)


def test_the_disk_backed_sampler_keeps_no_copy_of_the_frames_in_ram(
    tmp_path):
  shape = (96, 96, 3)
  rng = np.random.default_rng(12)
  eps = []
  for n in rng.integers(200, 500, 16):  # ~5,600 frames, ~155 MB
    episode = _episode(rng, int(n), shape=(1, 1, 3))
    # Cheap to compress: a frame is its step's byte, and its episode's.
    episode.observation = np.broadcast_to(
        (np.arange(n) % 251).astype(np.uint8)[:, None, None, None],
        (n, *shape)).copy()
    episode.observation[:, 0, 0, 1] = len(eps)
    eps.append(episode)
  path = _write(tmp_path / "train", eps, steps_per_shard=1500)
  frame_bytes = sum(e.observation.nbytes for e in eps)
  assert frame_bytes > 150e6
  del eps, episode
  datasets.window_sampler(path, 13, 3)  # the cache is built beforehand
  anon, mapped = _status("RssAnon"), _status("RssFile")
  sampler = datasets.window_sampler(path, 13, 3)
  sampler.RELEASE_BYTES = 16 << 20
  assert all(isinstance(o, np.memmap) and o.flags.writeable is False
             for o in sampler.observation_shards)
  assert sampler.index_nbytes < 0.01 * frame_bytes
  # Gather every window: more than the whole dataset's frames are read.
  for lo in range(0, sampler.num_windows, 16):
    batch = sampler.gather(np.arange(lo, min(lo + 16, sampler.num_windows)))
  assert batch["observation"].shape[1:] == (13, *shape)
  assert _status("RssAnon") - anon < 0.1 * frame_bytes
  assert _status("RssFile") - mapped < 0.2 * frame_bytes
