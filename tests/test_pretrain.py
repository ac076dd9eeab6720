"""The pretrain binary: a tiny run, resume, export, and bad input."""

import os

import numpy as np
import pytest

import envmodels
from configs import collect as collect_config
from configs.envmodels import dssm_det
from i2a import collection, pretraining
from i2a.metrics import read_column


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("collect")
  collection.run(collect_config.get_config("tiny"), str(workdir))
  return str(workdir / "dataset")


def _config(dataset, steps):
  config = dssm_det.get_config("tiny")
  config.data = dataset
  config.train_steps = steps
  return config


@pytest.fixture(scope="module")
def trained_run(dataset, tmp_path_factory):
  """6 steps, then a longer budget of 12: (workdir, held-out metrics)."""
  workdir = str(tmp_path_factory.mktemp("pretrain") / "run")
  pretraining.run(_config(dataset, 6), workdir)
  steps_after_first = read_column(os.path.join(workdir, "metrics.csv"),
                                  "step").tolist()
  held_out = pretraining.run(_config(dataset, 12), workdir)
  return workdir, steps_after_first, held_out


def test_pretrain_resumes_from_its_last_checkpoint(trained_run):
  workdir, steps_after_first, held_out = trained_run
  assert steps_after_first == [4.0, 6.0]
  # The longer budget resumed from step 6 instead of starting over.
  steps = read_column(os.path.join(workdir, "metrics.csv"), "step")
  assert steps.tolist() == [4.0, 6.0, 8.0, 12.0]
  assert read_column(os.path.join(workdir, "eval.csv"), "step").tolist() == [
      6.0, 12.0]
  assert np.isfinite(held_out["log_likelihood_per_frame"])


def test_pretrain_writes_pictures_and_a_loadable_frozen_export(trained_run):
  workdir, _, _ = trained_run
  for name in ("open_loop_0000012.png", "open_loop_0000012.gif",
               "rewards_0000012.png", "closed_loop_0000012.png",
               "one_step_prior_0000012.png"):
    assert os.path.exists(os.path.join(workdir, "images", name)), name
  model = envmodels.load(os.path.join(workdir, "export"))
  assert not model.trainable_variables
  assert model.spec.observation_shape == (16, 24, 3)
  assert model.spec.num_actions == 5 and model.spec.kind == "dssm_det"
  state = model.initial_state(np.zeros((2, 3, 16, 24, 3), np.uint8))
  _, out = model.step(state, np.zeros([2], np.int32))
  assert out.reward.shape == (2,)


def test_a_finished_run_is_skipped(trained_run, dataset):
  workdir, _, _ = trained_run
  done = os.path.join(workdir, pretraining.DONE)
  before = os.stat(done).st_mtime_ns
  pretraining.run(_config(dataset, 12), workdir)
  assert os.stat(done).st_mtime_ns == before


def test_missing_data_is_refused_with_what_to_pass(tmp_path):
  with pytest.raises(ValueError, match="--config.data=DIR/dataset"):
    pretraining.run(_config("", 4), str(tmp_path))
  with pytest.raises(ValueError, match="does not exist"):
    pretraining.run(_config(str(tmp_path / "none"), 4), str(tmp_path))


def test_a_changed_model_config_is_refused_on_resume(trained_run, dataset):
  workdir, _, _ = trained_run
  config = _config(dataset, 12)
  config.model.state_channels = 16
  with pytest.raises(ValueError, match="model.state_channels"):
    pretraining.run(config, workdir)
