"""The collect binary: outputs, resume, and errors a user can cause."""

import json
import os
import stat

import pytest

from configs import collect as collect_config
from i2a import collection
from i2a.replay import files


def _tiny():
  return collect_config.get_config("tiny")


def test_collect_writes_disjoint_train_and_test_splits(tmp_path):
  manifests = collection.run(_tiny(), str(tmp_path))
  for name in ("config.json", "protocol.json"):
    assert os.path.exists(tmp_path / name)
  train, test = manifests["train"], manifests["test"]
  assert train["steps"] >= 600 and test["steps"] >= 200
  assert train["seed"] != test["seed"]
  assert train["protocol"] == json.load(open(tmp_path / "protocol.json"))
  assert train["observation_shape"] == [16, 24, 3]
  episodes = files.load_episodes(str(tmp_path / "dataset" / "train"))
  assert sum(len(e) for e in episodes) == train["steps"]


def test_collect_skips_finished_splits_on_a_rerun(tmp_path):
  collection.run(_tiny(), str(tmp_path))
  manifest = tmp_path / "dataset" / "train" / files.MANIFEST
  before = os.stat(manifest).st_mtime_ns
  collection.run(_tiny(), str(tmp_path))
  assert os.stat(manifest).st_mtime_ns == before


def test_a_workdir_with_another_config_is_refused(tmp_path):
  collection.run(_tiny(), str(tmp_path))
  config = _tiny()
  config.protocol.env_id = "MiniPacman-hunt-v0"
  with pytest.raises(ValueError, match=r"(?s)different config.*protocol.env_id"):
    collection.run(config, str(tmp_path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_an_unwritable_workdir_is_refused(tmp_path):
  locked = tmp_path / "locked"
  locked.mkdir()
  os.chmod(locked, stat.S_IRUSR | stat.S_IXUSR)
  with pytest.raises(ValueError, match="not a writable directory"):
    collection.run(_tiny(), str(locked / "run"))


def test_a_workdir_that_is_a_file_is_refused(tmp_path):
  path = tmp_path / "file"
  path.write_text("x")
  with pytest.raises(ValueError, match="not a writable directory"):
    collection.run(_tiny(), str(path))


def test_an_unreachable_reverb_address_is_refused_before_collecting(tmp_path):
  with pytest.raises(ConnectionError, match="no Reverb server answered"):
    collection.run(_tiny(), str(tmp_path), reverb_address="localhost:1")
  assert not os.path.exists(tmp_path / "dataset")


def test_overlapping_train_and_test_seeds_are_refused(tmp_path):
  config = _tiny()
  config.test_seed = config.seed + 1
  with pytest.raises(ValueError, match="overlap"):
    collection.run(config, str(tmp_path))


def test_bad_protocol_settings_are_refused(tmp_path):
  config = _tiny()
  config.protocol.observation_size = (15, 19)
  with pytest.raises(ValueError, match="multiples of 8"):
    collection.run(config, str(tmp_path))
  with pytest.raises(ValueError, match="unknown preset 'huge'"):
    collect_config.get_config("huge")
