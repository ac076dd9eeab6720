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


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_atomic_writes_respect_the_umask(tmp_path, umask):
  previous = os.umask(umask)
  try:
    io_utils.atomic_write_text(str(tmp_path / "notes.txt"), "hello\n")
    with io_utils.atomic_directory(str(tmp_path / "exported")) as tmp:
      io_utils.atomic_write_text(os.path.join(tmp, "spec.json"), "{}\n")
    assert io_utils.usual_mode() == 0o666 & ~umask
    assert io_utils.usual_mode(directory=True) == 0o777 & ~umask
  finally:
    os.umask(previous)
  assert os.stat(tmp_path / "notes.txt").st_mode & 0o777 == 0o666 & ~umask
  assert os.stat(tmp_path / "exported").st_mode & 0o777 == 0o777 & ~umask
  assert (os.stat(tmp_path / "exported" / "spec.json").st_mode & 0o777 ==
          0o666 & ~umask)


def _make(path, directory=False, age_s=3600.0):
  if directory:
    os.makedirs(path)
    with open(os.path.join(path, "part"), "w") as f:
      f.write("x")
  else:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write("x")
  old = os.path.getmtime(path) - age_s
  for root, dirs, files in os.walk(path) if directory else []:
    for name in dirs + files:
      os.utime(os.path.join(root, name), (old, old))
  os.utime(path, (old, old))
  return path


def test_stale_temporaries_of_killed_writers_are_removed_and_nothing_else(
    tmp_path):
  workdir = tmp_path / "run"
  stale = [  # what a killed atomic_path / atomic_directory / export leave
      _make(str(workdir / ".config.json.k2x_9abc.tmp")),
      _make(str(workdir / "images" / ".open_loop.png.abcdefgh.tmp")),
      _make(str(workdir / ".export.abc_1234.tmp"), directory=True),
      _make(str(workdir / ".export.abc_1234.tmp.old"), directory=True),
      _make(str(workdir / ".export.tmp-q1w2e3r4"), directory=True),
      _make(str(workdir / ".export.old-q1w2e3r4"), directory=True),
      _make(str(workdir / ".write_check.zz99yy88")),
  ]
  kept = [
      _make(str(workdir / "notes.tmp")),  # not a name our writers make
      _make(str(workdir / ".hidden.tmp")),
      _make(str(workdir / "config.json")),
      _make(str(workdir / "checkpoints" / "ckpt-4.index")),
      # A live writer's: touched just now.
      _make(str(workdir / ".metrics.csv.live1234.tmp"), age_s=0.0),
      # Inside a hidden directory (the window cache cleans its own).
      _make(str(workdir / "dataset" / ".cache" / ".ab.cdefghij.tmp"),
            directory=True),
  ]
  removed = io_utils.remove_stale_temporaries(str(workdir))
  assert sorted(removed) == sorted(stale)
  for path in stale:
    assert not os.path.exists(path), path
  for path in kept:
    assert os.path.exists(path), path
