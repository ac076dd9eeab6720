"""The pretrain binary: a tiny run, resume, export, and bad input."""

import os

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from configs import collect as collect_config
from configs.envmodels import dssm_det
from envmodels import reward_coding
from i2a import environments, io_utils, pictures, runs
from i2a.metrics import read_column, read_summaries
from i2a.replay import cache, datasets, files
from i2a.run import collect as collection
from i2a.run import pretrain as pretraining


def _collect(workdir, **protocol):
  """A tiny dataset of MiniPacman 'regular' (whole-number rewards, what the
  reward coding tests below need), protocol fields overridden."""
  config = collect_config.get_config("tiny")
  config.protocol.env_id = "MiniPacman-regular-v0"
  config.protocol.update(protocol)
  collection.run(config, str(workdir))
  return str(workdir / "dataset")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
  return _collect(tmp_path_factory.mktemp("collect"))


def _config(dataset, steps):
  config = dssm_det.get_config("tiny")
  config.data = dataset
  config.train_steps = steps
  config.model.reward_bits = 4  # 'regular' pays 1, 2 or 5
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


def test_pretraining_summaries_keep_the_step_axis_and_animate_open_loop(
    trained_run):
  """Scalars and pictures at pretraining steps; the open-loop prediction
  as an animated GIF image summary (tiny: images every 6 steps)."""
  workdir, _, _ = trained_run
  summaries = read_summaries(os.path.join(workdir, "tb"))
  assert [step for step, _ in summaries["train/loss"]] == [4, 6, 8, 12]
  assert "train/step" not in summaries  # its own step axis
  animations = summaries["animations/open_loop"]
  assert [step for step, _ in animations] == [6, 12]
  plugin, (width, height, gif) = animations[0][1]
  assert plugin == "images" and gif.startswith(b"GIF89a")
  # truth | prediction | error of 16x24 frames (2-pixel gaps) upscaled 6x,
  # and a caption with the actions by name.
  assert (int(width), int(height)) == (6 * (3 * 24 + 2 * 2),
                                       96 + pictures.CAPTION_HEIGHT)


def test_a_finished_run_is_skipped(trained_run, dataset):
  workdir, _, _ = trained_run
  done = os.path.join(workdir, pretraining.DONE)
  before = os.stat(done).st_mtime_ns
  pretraining.run(_config(dataset, 12), workdir)
  assert os.stat(done).st_mtime_ns == before


def test_the_auto_reward_scale_goes_into_config_json_and_the_export(
    trained_run, dataset):
  workdir, _, _ = trained_run
  record = io_utils.read_json(os.path.join(workdir, runs.CONFIG))
  assert record["model"]["reward_scale"] == "auto"
  # MiniPacman 'regular' (the tiny dataset) pays 1, 2 or 5: whole numbers.
  assert record["reward_coding"] == {"scale": 1.0}
  spec = io_utils.read_json(os.path.join(workdir, "export", "spec.json"))
  assert spec["hyperparameters"]["reward_scale"] == 1.0
  rewards = datasets.window_sampler(files.split_path(dataset, "train"), 6,
                                    1).distinct_rewards(3)
  assert rewards.max() >= 1.0
  assert not reward_coding.miscoded(rewards, 1.0, 4)


def test_a_reward_scale_that_cannot_code_the_data_is_refused_first(
    dataset, tmp_path):
  workdir = tmp_path / "run"
  config = _config(dataset, 4)
  config.model.reward_scale = 0.1  # MsPacman's old hand-tuned scale
  with pytest.raises(ValueError) as error:
    pretraining.run(config, str(workdir))
  message = str(error.value)
  assert "reward_scale=0.1 with reward_bits=4" in message
  assert "1 -> 0" in message  # the offending values, decoded
  assert "reward_scale=1 with reward_bits=4 codes all" in message
  assert not os.path.exists(workdir / runs.CONFIG)
  # Too few bits for the scale: refused the same way.
  config.model.reward_scale, config.model.reward_bits = 4, 1
  with pytest.raises(ValueError, match=r"reward_bits=1 .*1 -> 0\.25 "
                     r"\(overflow\)"):
    pretraining.run(config, str(workdir))
  assert not os.path.exists(workdir / runs.CONFIG)


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


def test_pretraining_reads_its_windows_through_the_window_cache(trained_run,
                                                                dataset):
  """The frames are memory-mapped from each split's cache, not loaded."""
  for split in ("train", "test"):
    path = files.split_path(dataset, split)
    for shard in files.read_manifest(path)["shards"]:
      entry = os.path.join(cache.cache_dir(path), shard["sha256"])
      assert cache.read_entry(entry, shard) is not None, (split, shard)
  pretrainer = pretraining.Pretrainer(_config(dataset, 12), trained_run[0])
  for sampler in (pretrainer.train_windows, pretrainer.test_windows):
    assert all(isinstance(o, np.memmap) for o in sampler.observation_shards)


def test_a_diverging_run_stops_before_a_non_finite_checkpoint(dataset,
                                                              tmp_path):
  config = _config(dataset, 12)
  config.learning_rate = 1e30  # the first update overflows the weights
  workdir = str(tmp_path / "diverged")
  with pytest.raises(FloatingPointError) as stopped:
    pretraining.run(config, workdir)
  assert ("in a row had a non-finite" in str(stopped.value) or
          "refusing to checkpoint" in str(stopped.value))
  checkpoints = tf.train.get_checkpoint_state(
      os.path.join(workdir, "checkpoints"))
  for path in ([] if checkpoints is None else
               checkpoints.all_model_checkpoint_paths):
    reader = tf.train.load_checkpoint(path)
    for name in reader.get_variable_to_shape_map():
      value = reader.get_tensor(name)
      if np.issubdtype(np.asarray(value).dtype, np.floating):
        assert np.isfinite(value).all(), (path, name)
  assert not os.path.exists(os.path.join(workdir, pretraining.EXPORT))


def test_a_stop_request_checkpoints_the_step_reached_and_a_rerun_resumes(
    dataset, tmp_path):
  workdir = str(tmp_path / "stopped")
  pretrainer = pretraining.Pretrainer(_config(dataset, 12), workdir)
  asked = []

  def should_stop():
    asked.append(int(pretrainer.step.numpy()))
    return len(asked) > 4  # after 4 steps
  assert pretrainer.train(should_stop=should_stop) is None
  latest = tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints"))
  assert latest.endswith("-4")
  assert not os.path.exists(os.path.join(workdir, pretraining.EXPORT))
  held_out = pretraining.run(_config(dataset, 12), workdir)
  assert np.isfinite(held_out["log_likelihood_per_frame"])
  steps = read_column(os.path.join(workdir, "metrics.csv"), "step").tolist()
  assert steps == sorted(set(steps)) and steps[-1] == 12


def test_a_damaged_newest_checkpoint_falls_back_without_logging_a_step_twice(
    dataset, tmp_path, caplog, capsys):
  """Resuming from the checkpoint before a damaged newest one rewrites the
  steps after it: TensorBoard and metrics.csv still hold each step once."""
  config = _config(dataset, 8)
  config.update(checkpoint_every=4, log_every=2, eval_every=4,
                image_every=100)
  workdir = str(tmp_path / "run")
  pretraining.run(config, workdir)
  checkpoints = os.path.join(workdir, "checkpoints")
  data = os.path.join(checkpoints, "ckpt-8.data-00000-of-00001")
  with open(data, "r+b") as f:  # damage the newest checkpoint's data
    f.truncate(os.path.getsize(data) // 2)
  before = [step for step, _ in
            read_summaries(os.path.join(workdir, "tb"))["train/loss"]]
  assert 6 in before and 8 in before
  config.train_steps = 10
  with caplog.at_level("WARNING"):
    held_out = pretraining.run(config, workdir)
  assert np.isfinite(held_out["log_likelihood_per_frame"])
  warnings = [r.getMessage() for r in caplog.records
              if r.levelname == "WARNING"]
  assert any("ckpt-8" in w and "damaged" in w for w in warnings), warnings
  assert "resumed from" in capsys.readouterr().out
  summaries = read_summaries(os.path.join(workdir, "tb"))
  for tag, points in summaries.items():
    steps = [step for step, _ in points]
    assert len(steps) == len(set(steps)), (tag, steps)
  assert [s for s, _ in summaries["train/loss"]] == [2, 4, 6, 8, 10]
  assert [s for s, _ in summaries["eval/loss"]] == [4, 8, 10]
  metrics = os.path.join(workdir, "metrics.csv")
  assert read_column(metrics, "step").tolist() == [2, 4, 6, 8, 10]
  assert read_column(os.path.join(workdir, "eval.csv"),
                     "step").tolist() == [4, 8, 10]
  # Saved again over the damaged one at step 8, then the last at 10.
  assert runs.checkpoint_damage(os.path.join(checkpoints, "ckpt-8")) is None


def test_no_intact_checkpoint_is_refused_with_what_to_do(dataset, tmp_path):
  config = _config(dataset, 4)
  config.update(checkpoint_every=4, log_every=2)
  workdir = str(tmp_path / "run")
  pretraining.Pretrainer(config, workdir)._save(4)  # step 4, untrained
  with open(os.path.join(workdir, "checkpoints", "ckpt-4.index"), "wb") as f:
    f.write(b"not a checkpoint index")
  with pytest.raises(ValueError, match="no intact checkpoint.*delete the"):
    pretraining.Pretrainer(config, workdir).restore()


# -- Identity: the dataset's fingerprint ---------------------------------------

def test_the_dataset_fingerprint_goes_into_identity_json_and_the_export(
    trained_run, dataset):
  workdir, _, _ = trained_run
  fingerprint = files.dataset_fingerprint(dataset)
  identity = io_utils.read_json(os.path.join(workdir, runs.IDENTITY))
  assert identity["data"]["fingerprint"] == fingerprint
  assert identity["data"]["path"] == os.path.abspath(dataset)
  provenance = envmodels.provenance(os.path.join(workdir, "export"))
  assert provenance["data"]["fingerprint"] == fingerprint
  assert environments.Protocol.from_json(
      provenance["protocol"]) == pretraining.dataset_protocol(dataset)


def test_a_workdir_that_recorded_the_legacy_fingerprint_resumes(
    trained_run, dataset):
  """Workdirs recorded files.legacy_dataset_fingerprint (the manifests'
  writing times included) before: the same dataset still resumes them, and
  identity.json then holds the fingerprint of today."""
  workdir, _, _ = trained_run
  path = os.path.join(workdir, runs.IDENTITY)
  identity = io_utils.read_json(path)
  identity["data"]["fingerprint"] = files.legacy_dataset_fingerprint(dataset)
  io_utils.atomic_write_json(path, identity)
  assert pretraining.run(_config(dataset, 12), workdir) is not None
  assert io_utils.read_json(path)["data"]["fingerprint"] == (
      files.dataset_fingerprint(dataset))


def test_a_finished_run_with_another_dataset_is_refused_before_writing(
    trained_run, dataset, tmp_path):
  """A finished 16x24 run, resumed with a 24x32 dataset: refused naming
  both fingerprints; config.json, protocol.json and identity.json stay."""
  workdir, _, _ = trained_run
  other = _collect(tmp_path / "collect", observation_size=(24, 32))
  records = (runs.CONFIG, runs.PROTOCOL, runs.IDENTITY)
  before = {name: open(os.path.join(workdir, name), "rb").read()
            for name in records}
  with pytest.raises(ValueError) as refused:
    pretraining.run(_config(other, 12), workdir)
  message = str(refused.value)
  assert files.dataset_fingerprint(dataset) in message
  assert files.dataset_fingerprint(other) in message
  assert "Use a new --workdir for this dataset" in message
  for name in records:
    assert open(os.path.join(workdir, name), "rb").read() == before[name]
  # The original data (moved: same fingerprint) still resumes the run.
  assert pretraining.run(_config(dataset, 12), workdir) is not None
