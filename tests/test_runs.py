"""Tests of workdir records (i2a/runs.py): a resumed run must be the same
experiment; fields added later are differences unless set to the value that
reproduces the old runs."""

import json
import os

import pytest

from agents import training
from configs.agents import a2c as a2c_config
from configs.agents import i2a as i2a_config
from i2a import runs


def _old_workdir(tmp_path, config, *removed):
  """A workdir whose config.json lacks `removed` fields (a run made before
  they existed)."""
  data = json.loads(json.dumps(config.to_dict(), default=list))
  for field in removed:
    *parents, leaf = field.split(".")
    node = data
    for parent in parents:
      node = node[parent]
    del node[leaf]
  (tmp_path / runs.CONFIG).write_text(json.dumps(data))
  return str(tmp_path)


def test_an_old_a2c_run_resumes_only_with_the_values_it_ran_with(tmp_path):
  config = a2c_config.get_config("small")
  workdir = _old_workdir(tmp_path, config, "loss.reward_clipping",
                         "network.head_hidden")
  with pytest.raises(ValueError) as refused:
    runs.prepare_workdir(workdir, config, None, legacy=training.LEGACY_VALUES)
  message = str(refused.value)
  assert "loss.reward_clipping: None -> 'sign'" in message
  assert "--config.loss.reward_clipping='none' continues it" in message
  assert "network.head_hidden: None -> 256" in message
  config.loss.reward_clipping, config.network.head_hidden = "none", 0
  runs.prepare_workdir(workdir, config, None, legacy=training.LEGACY_VALUES)
  saved = json.loads((tmp_path / runs.CONFIG).read_text())
  assert saved["loss"]["reward_clipping"] == "none"  # upgraded in place
  runs.prepare_workdir(workdir, config, None, legacy=training.LEGACY_VALUES)


def test_an_old_i2a_run_is_refused_naming_the_field_without_a_way_back(
    tmp_path):
  config = i2a_config.get_config("small")
  workdir = _old_workdir(tmp_path, config, "loss.reward_clipping",
                         "network.reward_transform")
  config.loss.reward_clipping = "none"
  with pytest.raises(ValueError) as refused:
    runs.prepare_workdir(workdir, config, None, legacy=training.LEGACY_VALUES)
  message = str(refused.value)
  assert "network.reward_transform: None -> 'symlog'" in message
  assert "its old behaviour is gone" in message
  assert "reward_clipping" not in message


def test_an_unreadable_config_json_is_refused_not_taken_for_a_fresh_run(
    tmp_path):
  config = a2c_config.get_config("tiny")
  runs.prepare_workdir(str(tmp_path), config, None)
  (tmp_path / runs.CONFIG).write_text('{"seed": 0, "proto')  # truncated
  with pytest.raises(ValueError, match=r"config.json is unreadable"):
    runs.prepare_workdir(str(tmp_path), config, None)
  (tmp_path / runs.CONFIG).write_text("[1, 2]")
  with pytest.raises(ValueError, match="holds list, not a config"):
    runs.prepare_workdir(str(tmp_path), config, None)


def test_a_run_without_its_config_json_is_refused(tmp_path):
  config = a2c_config.get_config("tiny")
  runs.prepare_workdir(str(tmp_path), config, runs.protocol_from_config(
      config))
  (tmp_path / runs.CONFIG).unlink()
  with pytest.raises(ValueError, match=r"holds a run \(protocol.json\) but "
                     r"no config.json"):
    runs.prepare_workdir(str(tmp_path), config, None)


def test_a_rerun_removes_the_temporaries_a_killed_run_left(tmp_path):
  config = a2c_config.get_config("tiny")
  workdir = str(tmp_path / "run")
  runs.prepare_workdir(workdir, config, None)
  left = os.path.join(workdir, "." + runs.CONFIG + ".a1b2c3d4.tmp")
  with open(left, "w") as f:
    f.write("{half")
  os.utime(left, (1e9, 1e9))  # long untouched: its writer is dead
  runs.prepare_workdir(workdir, config, None)
  assert not os.path.exists(left)
  assert not [name for name in os.listdir(workdir) if name.startswith(".")]
