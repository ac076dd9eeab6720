"""benchmarks/resume_exactness.py: a run's config trained straight and
across a checkpoint, compared variable by variable."""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import resume_exactness  # pylint: disable=wrong-import-position


def test_the_workdir_and_the_updates_are_checked(tmp_path):
  with pytest.raises(ValueError, match="holds no training run"):
    resume_exactness.measure(str(tmp_path), 4)
  (tmp_path / "config.json").write_text("{}")
  with pytest.raises(ValueError, match="--updates must be 2 or more, "
                     "given 1"):
    resume_exactness.measure(str(tmp_path), 1)


def test_a_tiny_a2c_config_resumes_bitwise(tmp_path):
  from i2a.run import train as training  # pylint: disable=import-outside-toplevel
  from configs.agents import a2c  # pylint: disable=import-outside-toplevel
  config = a2c.get_config("tiny")
  config.env_steps = 6
  run = str(tmp_path / "run")
  training.run(config, run)
  scratch = str(tmp_path / "scratch")
  result = resume_exactness.measure(run, 4, scratch=scratch)
  assert result["exact"], result["largest_differences"]
  assert result["env_steps_per_update"] == 6  # 2 envs x 3-step unrolls
  assert result["variables"] > 0
  # Both copies trained the 4 updates; the run itself was only read.
  for name in ("straight", "split"):
    assert os.path.exists(os.path.join(scratch, name, "checkpoints",
                                       "ckpt-4.index"))
  assert not os.path.exists(os.path.join(run, "checkpoints", "ckpt-4.index"))
