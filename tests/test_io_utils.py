"""i2a.io_utils: atomic writes leave the finished file or nothing, with the
usual permissions (not the private mode of the temporary file)."""

import os

import pytest

from i2a import io_utils


def _umask():
  mask = os.umask(0)
  os.umask(mask)
  return mask


def test_atomic_json_is_complete_and_readable_by_the_group_and_others(
    tmp_path):
  path = str(tmp_path / "sub" / "scores.json")
  io_utils.atomic_write_json(path, {"b": 2, "a": [1.5]})
  assert io_utils.read_json(path) == {"a": [1.5], "b": 2}
  assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask()
  assert os.listdir(tmp_path / "sub") == ["scores.json"]  # no temp left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
  path = str(tmp_path / "config.json")
  io_utils.atomic_write_json(path, {"version": 1})
  with pytest.raises(RuntimeError):
    with io_utils.atomic_path(path) as tmp:
      with open(tmp, "w") as f:
        f.write("{half")
      raise RuntimeError("crash while writing")
  assert io_utils.read_json(path) == {"version": 1}
  assert os.listdir(tmp_path) == ["config.json"]


def test_an_atomic_directory_replaces_the_old_one_with_the_usual_mode(
    tmp_path):
  path = str(tmp_path / "export")
  for version in (1, 2):
    with io_utils.atomic_directory(path) as tmp:
      with open(os.path.join(tmp, "spec.json"), "w") as f:
        f.write(str(version))
  with open(os.path.join(path, "spec.json")) as f:
    assert f.read() == "2"
  assert os.stat(path).st_mode & 0o777 == 0o777 & ~_umask()
  assert os.listdir(tmp_path) == ["export"]
