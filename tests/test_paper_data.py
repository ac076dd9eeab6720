"""benchmarks/paper_data.py and packed_data.py: the `paper` preset's claim-1
data, collected by the `small` policy through the frame adapter, and the
compact file it travels in."""

import numpy as np
import pytest

from benchmarks import packed_data, paper_data
from i2a import environments


def test_adapted_paper_frames_are_the_small_protocol_frames():
  # A `paper` and a `small` MsPacman in lockstep: the adapter rebuilds
  # every `small` observation exactly.
  assert paper_data.check(60) == dict(steps=60, mismatched_frames=0)


def test_the_adapter_refuses_protocols_it_cannot_map():
  paper_data.check_protocols(paper_data.PAPER, paper_data.SMALL)
  sticky = environments.preset("small", sticky_action_prob=0.0)
  with pytest.raises(ValueError, match="beyond the frame geometry"):
    paper_data.check_protocols(paper_data.PAPER, sticky)
  with pytest.raises(ValueError, match="'paper' protocol's frames"):
    paper_data.check_protocols(paper_data.SMALL, paper_data.SMALL)


def test_packed_arrays_read_back_equal_and_a_cut_file_is_refused(tmp_path):
  rng = np.random.default_rng(0)
  arrays = {"frames": rng.integers(0, 13, [5, 8, 6]).astype(np.uint8),
            "reward": rng.standard_normal(5).astype(np.float32),
            "episode_length": np.array([2, 3], np.int64)}
  path = str(tmp_path / "data.bin")
  packed_data.write(path, dict(note="x"), arrays)
  header, read = packed_data.read(path)
  assert header["note"] == "x" and list(read) == list(arrays)
  for name, value in arrays.items():
    np.testing.assert_array_equal(read[name], value)
    assert read[name].dtype == value.dtype
  with open(path, "rb") as f:
    data = f.read()
  for cut in (data[:-20], data[:len(data) // 2]):  # its end; half of it
    with open(path, "wb") as f:
      f.write(cut)
    with pytest.raises((ValueError, EOFError)):
      packed_data.read(path)
