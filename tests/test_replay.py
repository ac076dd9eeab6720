"""Reverb tables, jumpy windows, and the dataset format on disk."""

import json
import os
import time

import numpy as np
import pytest
import tensorflow as tf

from i2a.environments import preset
from i2a.replay import datasets, episodes, files, tables
from i2a.run import collect as collection
from tests import fakes

SHAPE = (16, 16, 3)


def _random_episode(rng, length, complete=True):
  return episodes.Episode(
      observation=rng.integers(0, 256, (length, *SHAPE), dtype=np.uint8),
      action=np.append(rng.integers(0, 5, length - 1), 0).astype(np.int32),
      reward=np.append(0.0, rng.normal(size=length - 1)).astype(np.float32),
      discount=np.append(np.ones(length - 1), 0.0 if complete else 1.0
                         ).astype(np.float32),
      complete=complete)


def test_window_sampler_gathers_the_reference_windows():
  rng = np.random.default_rng(1)
  eps = [_random_episode(rng, n) for n in (9, 4, 15)]
  sampler = episodes.WindowSampler(eps, length=4, jump=2)
  # Windows need 2 * 3 + 1 = 7 steps: 3 + 0 + 9 starts.
  assert sampler.num_windows == 12
  batch = sampler.gather(np.arange(12))
  refs = [(0, s) for s in range(3)] + [(2, s) for s in range(9)]
  for row, (e, s) in enumerate(refs):
    reference = episodes.window(eps[e], s, 4, 2)
    for key in reference:
      np.testing.assert_allclose(batch[key][row], reference[key], rtol=1e-6,
                                 err_msg=key)


def test_window_sampler_distinct_rewards_are_the_gathered_targets():
  rng = np.random.default_rng(3)
  eps = [_random_episode(rng, n) for n in (9, 4, 15, 8)]
  sampler = episodes.WindowSampler(eps, length=4, jump=2)
  rewards = sampler.gather(np.arange(sampler.num_windows))["reward"]
  for first in (0, 1, 3):
    np.testing.assert_array_equal(sampler.distinct_rewards(first),
                                  np.unique(rewards[:, first:]))
  with pytest.raises(ValueError, match="first must be in"):
    sampler.distinct_rewards(4)


def test_window_sampler_refuses_episodes_too_short_for_a_window():
  rng = np.random.default_rng(2)
  with pytest.raises(ValueError, match="needs 7 steps; the longest has 4"):
    episodes.WindowSampler([_random_episode(rng, 4)], length=4, jump=2)


def test_a_table_refuses_an_item_of_the_wrong_shape():
  signature = {"observation": tf.TensorSpec([4, *SHAPE], tf.uint8),
               "action": tf.TensorSpec([4], tf.int32)}
  server = tables.start_server([tables.unrolls_table(signature, 10)])
  client = server.localhost_client()
  writer = client.trajectory_writer(num_keep_alive_refs=4)
  for _ in range(4):
    writer.append({"observation": np.zeros((8, 8, 3), np.uint8),
                   "action": np.int32(0)})
  with pytest.raises(ValueError, match="inconsistent with the table signature"):
    writer.create_item(tables.UNROLLS, 1.0, {
        k: writer.history[k][-4:] for k in ("observation", "action")})
    writer.flush()
  assert client.server_info()[tables.UNROLLS].current_size == 0
  server.stop()


def test_variables_table_keeps_only_the_newest_weights():
  signature = {"w": tf.TensorSpec([3], tf.float32)}
  server = tables.start_server([tables.variables_table(signature)])
  client = server.localhost_client()
  for value in (1.0, 2.0, 3.0):
    client.insert({"w": np.full(3, value, np.float32)},
                  {tables.VARIABLES: 1.0})
  info = client.server_info()[tables.VARIABLES]
  assert info.current_size == 1
  sample = next(client.sample(tables.VARIABLES, num_samples=1))
  np.testing.assert_array_equal(sample[0].data[0], np.full(3, 3.0))
  server.stop()


def test_an_unreachable_reverb_address_fails_fast_with_a_clear_error():
  start = time.monotonic()
  with pytest.raises(ConnectionError, match="no Reverb server answered at "
                     "localhost:1 within 2s"):
    tables.connect("localhost:1", timeout_s=2)
  assert time.monotonic() - start < 15
  with pytest.raises(ValueError, match="HOST:PORT"):
    tables.connect("localhost")


def test_dataset_round_trips_from_disk_with_identical_contents(tmp_path):
  rng = np.random.default_rng(3)
  eps = [_random_episode(rng, n, complete=n != 7) for n in (12, 30, 7, 19)]
  path = str(tmp_path / "train")
  with files.SplitWriter(path, {"note": "test"}, steps_per_shard=25) as w:
    for episode in eps:
      w.add(episode)
  manifest = files.read_manifest(path)
  assert manifest["episodes"] == 4 and manifest["steps"] == 68
  assert manifest["complete_episodes"] == 3
  assert manifest["observation_shape"] == list(SHAPE)
  assert len(manifest["shards"]) == 2
  assert manifest["versions"]["tensorflow"] == "2.15.1"
  loaded = files.load_episodes(path)
  assert len(loaded) == len(eps)
  for a, b in zip(eps, loaded):
    assert a.complete == b.complete
    for key in ("observation", "action", "reward", "discount"):
      x, y = getattr(a, key), getattr(b, key)
      assert x.dtype == y.dtype and x.shape == y.shape
      np.testing.assert_array_equal(x, y)


def test_collected_dataset_holds_whole_consistent_episodes(tmp_path):
  path = str(tmp_path / "train")
  envs = fakes.counting_vector_env(3, shape=SHAPE)
  stats = collection.collect_split(
      preset("minipacman"), path, 300, 3, 0,
      collection.uniform_random_policy(3), envs=envs, steps_per_shard=64)
  loaded = files.load_episodes(path)
  assert len(loaded) == stats.episodes
  assert sum(len(e) for e in loaded) == files.read_manifest(path)["steps"]
  for episode in loaded:
    steps = episode.observation[:, 0, 0, 0].astype(int)
    np.testing.assert_array_equal(steps, np.arange(len(episode)))
    assert len(set(episode.observation[:, 0, 0, 1])) == 1  # one episode
    np.testing.assert_array_equal(episode.reward, np.arange(len(episode)))
    assert episode.discount[-1] == (0.0 if episode.complete else 1.0)
    assert np.all(episode.discount[:-1] == 1.0)


def test_a_dataset_of_another_format_version_is_refused(tmp_path):
  path = str(tmp_path / "train")
  with files.SplitWriter(path, {}) as w:
    w.add(_random_episode(np.random.default_rng(0), 8))
  manifest_path = os.path.join(path, files.MANIFEST)
  manifest = json.load(open(manifest_path))
  manifest["format_version"] = files.FORMAT_VERSION + 1
  json.dump(manifest, open(manifest_path, "w"))
  with pytest.raises(files.DatasetError, match="Upgrade the framework"):
    files.load_episodes(path)
  manifest["format_version"], manifest["format"] = 1, "something-else"
  json.dump(manifest, open(manifest_path, "w"))
  with pytest.raises(files.DatasetError, match="not 'i2a-episodes'"):
    files.read_manifest(path)


def test_corrupt_missing_or_interrupted_datasets_are_refused(tmp_path):
  path = str(tmp_path / "train")
  with files.SplitWriter(path, {}) as w:
    w.add(_random_episode(np.random.default_rng(0), 8))
  shard = os.path.join(path, "shard-00000.npz")
  with open(shard, "r+b") as f:
    f.seek(100)
    f.write(b"corrupt!")
  with pytest.raises(files.DatasetError, match="corrupt"):
    files.load_episodes(path)
  os.remove(os.path.join(path, files.MANIFEST))
  with pytest.raises(files.DatasetError, match="interrupted collection"):
    files.read_manifest(path)
  with pytest.raises(files.DatasetError, match="does not exist"):
    files.read_manifest(str(tmp_path / "nowhere"))


def test_a_failed_split_leaves_nothing_behind(tmp_path):
  path = str(tmp_path / "train")
  with pytest.raises(RuntimeError):
    with files.SplitWriter(path, {}) as w:
      w.add(_random_episode(np.random.default_rng(0), 8))
      raise RuntimeError("crash while collecting")
  assert not os.path.exists(path)
  assert os.listdir(tmp_path) == []


def test_disk_batches_have_the_sequence_signature(tmp_path):
  path = str(tmp_path / "train")
  with files.SplitWriter(path, {}) as w:
    for n in (20, 25):
      w.add(_random_episode(np.random.default_rng(n), n))
  sampler = datasets.window_sampler(path, length=5, jump=2)
  batch = next(iter(datasets.sampled_batches(sampler, 4, seed=0)))
  assert batch["observation"].shape == (4, 5, *SHAPE)
  assert batch["observation"].dtype == tf.uint8
  assert batch["action"].shape == (4, 5, 2)
  assert batch["reward"].dtype == tf.float32
  evaluation = list(datasets.evaluation_batches(sampler, 4, 10))
  assert sum(b["reward"].shape[0] for b in evaluation) == 10
  again = list(datasets.evaluation_batches(sampler, 4, 10))
  np.testing.assert_array_equal(evaluation[0]["observation"],
                                again[0]["observation"])


@pytest.mark.parametrize("length,jump", [(5, 2), (3, 3), (1, 1), (4, 1)])
def test_window_starts_is_the_sampler_s_rule(length, jump):
  """episodes.window_starts: one window at every step whose last jumpy step
  stays inside the episode; the sampler has exactly those windows."""
  for steps in range(0, 14):  # primitive steps; steps + 1 observations
    episode_length = steps + 1
    starts = episodes.window_starts(episode_length, length, jump)
    assert list(starts) == [s for s in range(episode_length)
                            if s + jump * (length - 1) < episode_length]
    assert len(starts) == episodes.num_window_starts(episode_length, length,
                                                     jump)
  rng = np.random.default_rng(4)
  lengths = (3, 9, 14)
  sampler = episodes.WindowSampler(
      [_random_episode(rng, n) for n in lengths], length=length, jump=jump)
  assert sampler.num_windows == sum(
      len(episodes.window_starts(n, length, jump)) for n in lengths)
  with pytest.raises(ValueError, match="length and jump must be >= 1, "
                     "given 0, 2"):
    episodes.window_starts(5, 0, 2)
