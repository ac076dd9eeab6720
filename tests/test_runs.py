"""Tests of workdir records (i2a/runs.py): a resumed run must be the same
experiment; fields added later are differences unless set to the value that
reproduces the old runs."""

import json
import os
import subprocess
import sys

import pytest

from configs.agents import a2c as a2c_config
from configs.agents import i2a as i2a_config
from i2a import environments, runs
from i2a.run import train as training

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


# -- Identity (identity.json) and checks before writes -------------------------

def _identity(fingerprint, path="/data/a"):
  return {"data": runs.Identity(what="dataset", fingerprint=fingerprint,
                                path=path, flag="--config.data")}


def _snapshot(workdir):
  return {p.name: p.read_bytes() for p in sorted(workdir.iterdir())}


def test_a_resume_on_other_data_is_refused_naming_both_fingerprints(tmp_path):
  config = a2c_config.get_config("tiny")
  runs.prepare_workdir(str(tmp_path), config, None,
                       identity=_identity("aaaa"))
  record = json.loads((tmp_path / runs.IDENTITY).read_text())
  assert record["data"] == dict(what="dataset", fingerprint="aaaa",
                                path="/data/a", flag="--config.data")
  before = _snapshot(tmp_path)
  with pytest.raises(ValueError) as refused:
    runs.prepare_workdir(str(tmp_path), config, None,
                         identity=_identity("bbbb", "/data/b"))
  message = str(refused.value)
  assert "recorded fingerprint aaaa (/data/a)" in message
  assert "--config.data=/data/b has fingerprint bbbb" in message
  assert "Use a new --workdir" in message and "restore the original" in message
  assert _snapshot(tmp_path) == before  # nothing rewritten
  # The same data moved elsewhere (same fingerprint) resumes.
  runs.prepare_workdir(str(tmp_path), config, None,
                       identity=_identity("aaaa", "/elsewhere"))


def test_a_fingerprint_recorded_under_an_alias_resumes_and_is_upgraded(
    tmp_path):
  config = a2c_config.get_config("tiny")
  runs.prepare_workdir(str(tmp_path), config, None,
                       identity=_identity("legacy"))
  upgraded = {"data": runs.Identity(
      what="dataset", fingerprint="new", path="/data/a",
      flag="--config.data", aliases=("legacy",))}
  runs.prepare_workdir(str(tmp_path), config, None, identity=upgraded)
  record = json.loads((tmp_path / runs.IDENTITY).read_text())
  assert record["data"] == dict(what="dataset", fingerprint="new",
                                path="/data/a", flag="--config.data")
  # The alias is never written; the recorded legacy fingerprint is gone, so
  # from now on only the new one resumes.
  with pytest.raises(ValueError, match="recorded fingerprint new"):
    runs.prepare_workdir(str(tmp_path), config, None,
                         identity=_identity("legacy"))


def test_a_workdir_made_before_identities_records_them_on_resume(tmp_path):
  config = a2c_config.get_config("tiny")
  runs.prepare_workdir(str(tmp_path), config, None)  # an older run
  assert not (tmp_path / runs.IDENTITY).exists()
  runs.prepare_workdir(str(tmp_path), config, None,
                       identity=_identity("cccc"))
  record = json.loads((tmp_path / runs.IDENTITY).read_text())
  assert record["data"]["fingerprint"] == "cccc"
  with pytest.raises(ValueError, match="recorded fingerprint cccc"):
    runs.check_workdir(str(tmp_path), config, None,
                       identity=_identity("dddd"))


def test_another_protocol_in_protocol_json_is_refused_before_writing(
    tmp_path):
  config = a2c_config.get_config("tiny")
  protocol = runs.protocol_from_config(config)
  runs.prepare_workdir(str(tmp_path), config, protocol)
  before = _snapshot(tmp_path)
  other = environments.preset("minipacman", observation_size=(24, 32))
  with pytest.raises(ValueError) as refused:
    runs.prepare_workdir(str(tmp_path), config, other)
  message = str(refused.value)
  assert "another protocol" in message
  assert "protocol.observation_size: (16, 24) -> (24, 32)" in message
  assert _snapshot(tmp_path) == before


def test_check_workdir_writes_nothing(tmp_path):
  workdir = tmp_path / "new"
  identity = runs.check_workdir(str(workdir), a2c_config.get_config("tiny"),
                                None, identity=_identity("eeee"))
  assert identity["data"]["fingerprint"] == "eeee"
  assert not workdir.exists()


def test_protocol_model_differences_leave_out_episode_bounds():
  ours = environments.preset("minipacman", max_episode_frames=12, noop_max=3)
  theirs = environments.preset("minipacman", env_id="MiniPacman-avoid-v0")
  assert ours.model_differences(theirs) == {
      "env_id": ("MiniPacman-regular-v0", "MiniPacman-avoid-v0")}
  assert set(ours.differences(theirs)) == {"env_id", "max_episode_frames",
                                           "noop_max"}


# -- The binaries' command line (i2a/cli.py) -----------------------------------

_BINARY = """
from i2a import cli
_CONFIG = cli.DEFINE_config_file("config", "configs/collect.py:tiny", "")
def main(argv):
  if _CONFIG.value.num_envs < 0:
    raise ValueError("num_envs must be >= 0: a refused run")
  print("ok", _CONFIG.value.num_envs)
cli.run(main, __name__)
"""


def _binary(tmp_path, *args):
  script = tmp_path / "binary.py"
  script.write_text(_BINARY)
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, str(script), *args], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=120,
                        check=False)


def test_an_unknown_config_override_is_a_clear_error_not_a_traceback(
    tmp_path):
  result = _binary(tmp_path, "--config.protocol.envid=x")
  assert result.returncode == 1
  assert "Traceback" not in result.stderr
  assert ("error: unknown config field: --config.protocol.envid names "
          "'envid'") in result.stderr
  assert "--print_config shows every field" in result.stderr
  assert _binary(tmp_path, "--config.num_envs=3").stdout.strip() == "ok 3"


def test_a_missing_config_file_is_a_clear_error_not_a_traceback(tmp_path):
  result = _binary(tmp_path, "--config=configs/nope.py:tiny")
  assert result.returncode == 1
  assert "Traceback" not in result.stderr
  assert ("error: flag --config=configs/nope.py:tiny: config file "
          "'configs/nope.py' not found: neither in the current directory"
          in result.stderr)
  assert "Give an existing file" in result.stderr


def test_a_refused_run_exits_with_its_message_not_a_traceback(tmp_path):
  result = _binary(tmp_path, "--config.num_envs=-1")
  assert result.returncode == 1
  assert "Traceback" not in result.stderr
  assert "error: num_envs must be >= 0: a refused run" in result.stderr
