"""The collect binary: outputs, resume, policies and errors a user can cause."""

import json
import os
import stat

import numpy as np
import pytest
import tensorflow as tf

from agents import builder
from agents.a2c import networks as a2c_networks
from agents.acting import FrameWindows, sample_actions
from configs import collect as collect_config
from configs.agents import a2c as a2c_config
from i2a.environments import Protocol
from i2a.replay import files
from i2a.run import collect as collection
from i2a.run import evaluate as evaluation
from i2a.run import train as training


SHARP_A2C = "test_sharp_a2c"


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


def test_an_unknown_environment_id_is_refused_before_anything_is_written(
    tmp_path):
  config = _tiny()
  config.protocol.env_id = "MiniPacman-nope-v0"
  with pytest.raises(ValueError, match=r"unknown environment id "
                     r"'MiniPacman-nope-v0'.*MiniPacman-avoid-v0"):
    collection.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run" / "config.json")
  # The corrected rerun in the same workdir is not refused.
  manifests = collection.run(_tiny(), str(tmp_path / "run"))
  assert manifests["train"]["protocol"]["env_id"] == "MiniPacman-avoid-v0"


def test_the_dataset_fingerprint_identifies_protocol_and_episodes(tmp_path):
  collection.run(_tiny(), str(tmp_path / "a"))
  fingerprint = files.dataset_fingerprint(str(tmp_path / "a" / "dataset"))
  assert len(fingerprint) == 64
  # A moved copy keeps its identity.
  os.rename(tmp_path / "a", tmp_path / "moved")
  assert files.dataset_fingerprint(
      str(tmp_path / "moved" / "dataset")) == fingerprint
  config = _tiny()
  config.seed, config.test_seed = 7, 2_000_000  # other episodes
  collection.run(config, str(tmp_path / "b"))
  assert files.dataset_fingerprint(
      str(tmp_path / "b" / "dataset")) != fingerprint
  with pytest.raises(files.DatasetError, match="does not exist"):
    files.dataset_fingerprint(str(tmp_path / "none"))


def test_a_dataset_collected_again_keeps_its_fingerprint(tmp_path):
  """The same seeds write the same shards: the fingerprint leaves out when
  and with which packages the manifests were written; the legacy one (what
  workdirs recorded before) hashed them."""
  collection.run(_tiny(), str(tmp_path / "a"))
  first = str(tmp_path / "a" / "dataset")
  fingerprint = files.dataset_fingerprint(first)
  legacy = files.legacy_dataset_fingerprint(first)
  assert legacy != fingerprint
  collection.run(_tiny(), str(tmp_path / "again"))
  again = str(tmp_path / "again" / "dataset")
  for split in ("train", "test"):
    path = os.path.join(again, split, files.MANIFEST)
    manifest = json.loads(open(path).read())
    manifest["created"] = "2000-01-01T00:00:00+0000"  # written another day
    manifest["versions"]["numpy"] = "0.0"  # with other packages
    open(path, "w").write(json.dumps(manifest))
  assert files.dataset_fingerprint(again) == fingerprint
  assert files.legacy_dataset_fingerprint(again) != legacy


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


def test_a_workdir_made_while_collection_streamed_to_reverb_resumes(tmp_path):
  """The `sequence` and `reverb_max_size` fields fed the retired Reverb
  stream and never changed the dataset: a config.json holding them resumes
  (nothing collected again) and loses them."""
  manifests = collection.run(_tiny(), str(tmp_path))
  saved = json.load(open(tmp_path / "config.json"))
  saved["sequence"] = dict(context_length=3, T=3, jump=1, stride=1)
  saved["reverb_max_size"] = 100_000
  with open(tmp_path / "config.json", "w") as f:
    json.dump(saved, f)
  manifest = tmp_path / "dataset" / "train" / files.MANIFEST
  before = os.stat(manifest).st_mtime_ns
  assert collection.run(_tiny(), str(tmp_path)) == manifests
  assert os.stat(manifest).st_mtime_ns == before
  resumed = json.load(open(tmp_path / "config.json"))
  assert "sequence" not in resumed and "reverb_max_size" not in resumed
  other = _tiny()
  other.num_envs = 3  # a field that still counts is still refused
  with pytest.raises(ValueError, match="num_envs: 2 -> 3"):
    collection.run(other, str(tmp_path))


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


def test_a_config_saved_before_max_pool_frames_resumes(tmp_path):
  collection.run(_tiny(), str(tmp_path))
  saved = json.load(open(tmp_path / "config.json"))
  del saved["protocol"]["max_pool_frames"]  # as written before the field
  with open(tmp_path / "config.json", "w") as f:
    json.dump(saved, f)
  manifest = tmp_path / "dataset" / "train" / files.MANIFEST
  before = os.stat(manifest).st_mtime_ns
  collection.run(_tiny(), str(tmp_path))
  assert os.stat(manifest).st_mtime_ns == before


# -- Collecting with a trained agent's policy ----------------------------------


class _SharpA2C(a2c_networks.A2CNetwork):
  """An A2C whose policy is all but deterministic and reads the whole
  window: +20 on the logit of an action hashed from its frames (a fixed
  pseudo-random projection of each frame, weighted by its place in the
  window). A window that mixed two episodes, or a stale one, would pick
  other actions."""

  def __call__(self, observations, side_inputs=None):
    out = super().__call__(observations, side_inputs)
    frames = tf.cast(observations, tf.float64) / 255.0  # [B, k, H, W, C]
    size = tf.reduce_prod(tf.shape(frames)[2:])
    pattern = tf.reshape(tf.sin(tf.cast(tf.range(size), tf.float64) * 0.37),
                         tf.shape(frames)[2:])
    projections = tf.reduce_sum(frames * pattern, [2, 3, 4])  # [B, k]
    weights = tf.range(1.0, self.context_length + 1.0, dtype=tf.float64)
    index = tf.cast(tf.floor(tf.reduce_sum(projections * weights, -1)),
                    tf.int32) % self.num_actions  # [B]
    return out._replace(policy_logits=out.policy_logits + 20.0 * tf.one_hot(
        index, self.num_actions))


def _sharp_a2c(config, num_actions, observation_shape):
  net = config.network
  del observation_shape
  return _SharpA2C(num_actions, config.context_length,
                   conv_channels=tuple(net.conv_channels),
                   conv_kernels=tuple(net.conv_kernels),
                   conv_strides=tuple(net.conv_strides), hidden=net.hidden,
                   head_hidden=net.head_hidden)


builder.register_network(SHARP_A2C, _sharp_a2c, overwrite=True)


def _train_tiny(workdir, agent="a2c"):
  """A tiny A2C run (configs/agents/a2c.py:tiny): 2 learner steps, over
  windows of the last 2 frames (so the policy keeps a history per env)."""
  config = a2c_config.get_config("tiny")
  config.agent = agent
  config.context_length = 2
  config.env_steps = 12  # 2 envs x 3-step unrolls: 6 env steps per update
  training.run(config, workdir)
  return workdir


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory):
  return _train_tiny(str(tmp_path_factory.mktemp("a2c")))


@pytest.fixture(scope="module")
def sharp_run(tmp_path_factory):
  return _train_tiny(str(tmp_path_factory.mktemp("sharp")), SHARP_A2C)


def _agent_collect_config(run, **overrides):
  """The tiny collect config under the agent's protocol."""
  config = _tiny()
  agent = Protocol.load(os.path.join(run, "protocol.json")).to_json()
  for name, value in agent.items():
    if value != config.protocol[name]:
      config.protocol[name] = value
  config.policy = f"checkpoint:{run}"
  config.update(overrides)
  return config


def test_a_checkpoint_policy_is_recorded_in_the_manifest(agent_run, tmp_path):
  config = _agent_collect_config(agent_run, policy_epsilon=0.25)
  manifests = collection.run(config, str(tmp_path))
  checkpoint = tf.train.latest_checkpoint(os.path.join(agent_run,
                                                       "checkpoints"))
  expected = dict(kind="checkpoint", run=os.path.abspath(agent_run),
                  checkpoint=os.path.abspath(checkpoint), agent="a2c",
                  learner_step=2, env_steps=12, actions="sampled",
                  epsilon=0.25)
  for split in ("train", "test"):
    assert manifests[split]["policy"] == expected
    assert files.read_manifest(
        str(tmp_path / "dataset" / split))["policy"] == expected
  episodes = files.load_episodes(str(tmp_path / "dataset" / "train"))
  assert sum(len(e) for e in episodes) == manifests["train"]["steps"]
  # A rerun skips the finished splits.
  manifest = tmp_path / "dataset" / "train" / files.MANIFEST
  before = os.stat(manifest).st_mtime_ns
  collection.run(config, str(tmp_path))
  assert os.stat(manifest).st_mtime_ns == before


def test_the_random_policy_is_the_default_and_recorded(tmp_path):
  assert _tiny().policy == "random" and _tiny().policy_epsilon == 0.0
  manifests = collection.run(_tiny(), str(tmp_path))
  assert manifests["train"]["policy"] == dict(kind="random", epsilon=0.0)


def test_without_epsilon_the_actions_are_the_agents_samples(sharp_run,
                                                             tmp_path):
  # One env: the dataset's episodes are in the order they were played, so
  # replaying the agent over them with the split's seed redraws every action.
  config = _agent_collect_config(sharp_run, num_envs=1, train_steps=60,
                                 test_steps=20)
  manifests = collection.run(config, str(tmp_path))
  network, _ = evaluation.load_agent(*evaluation.load_run(sharp_run))
  assert isinstance(network, _SharpA2C)
  for split in ("train", "test"):
    rng = np.random.default_rng(manifests[split]["seed"])
    episodes = files.load_episodes(str(tmp_path / "dataset" / split))
    # 12-step episodes: the windows restart at an episode's start.
    assert len(episodes) >= 2 and episodes[0].complete
    actions, expected, greedy = [], [], []
    for episode in episodes:
      windows = FrameWindows(episode.observation[:1], network.window_offsets)
      for t in range(len(episode) - 1):
        logits = network(tf.constant(windows.frames)).policy_logits.numpy()
        expected.append(int(sample_actions(logits, rng)[0]))
        greedy.append(int(np.argmax(logits[0])))
        actions.append(int(episode.action[t]))
        windows.push(episode.observation[t + 1:t + 2], np.array([False]))
    assert len(actions) == manifests[split]["steps_requested"]
    assert actions == expected
    # Not uniform: the sharp policy's choice of each window, which varies.
    assert actions == greedy and len(set(actions)) > 1


def test_epsilon_mixes_uniform_random_actions_into_the_policy():
  always_noop = collection.FunctionPolicy(
      lambda observations, rng: np.zeros(len(observations), np.int64),
      dict(kind="noop"))
  mixed = collection.EpsilonMixed(always_noop, 0.3, num_actions=5)
  assert mixed.record == dict(kind="noop", epsilon=0.3)
  actions = mixed(np.zeros((20_000, 2, 2, 3), np.uint8),
                  np.random.default_rng(0))
  # P(action != 0) = epsilon * (A - 1) / A = 0.24.
  assert np.mean(actions != 0) == pytest.approx(0.24, abs=0.01)
  assert np.bincount(actions[actions != 0], minlength=5)[1:].min() > 1000
  never = collection.EpsilonMixed(always_noop, 0.0, num_actions=5)
  assert not never(np.zeros((1000, 2, 2, 3), np.uint8),
                   np.random.default_rng(0)).any()
  with pytest.raises(ValueError, match=r"epsilon must be in \[0, 1\]"):
    collection.EpsilonMixed(always_noop, 1.5, num_actions=5)


def test_an_agent_under_another_protocol_is_refused_before_writing(
    agent_run, tmp_path):
  config = _tiny()  # MiniPacman-regular, 1000 frames; the agent: avoid, 12
  config.protocol.env_id = "MiniPacman-regular-v0"
  config.policy = f"checkpoint:{agent_run}"
  with pytest.raises(
      ValueError,
      match=r"(?s)another protocol.*env_id: 'MiniPacman-avoid-v0' \(agent\) "
      r"vs 'MiniPacman-regular-v0' \(collection\).*max_episode_frames: 12 "
      r"\(agent\) vs 1000.*--config\.protocol\.env_id=MiniPacman-avoid-v0 "
      r"--config\.protocol\.max_episode_frames=12"):
    collection.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run" / "config.json")


@pytest.mark.parametrize("policy", ["greedy", "checkpoint:", "Random"])
def test_an_unknown_policy_is_refused_with_the_accepted_forms(policy,
                                                              tmp_path):
  config = _tiny()
  config.policy = policy
  with pytest.raises(ValueError, match=r"not a policy collection knows; "
                     r"accepted forms: 'random' .* or 'checkpoint:RUN'"):
    collection.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run")


def test_a_checkpoint_policy_needs_a_trained_run(tmp_path):
  config = _tiny()
  config.policy = f"checkpoint:{tmp_path / 'nowhere'}"
  with pytest.raises(ValueError, match="does not exist.*i2a.train"):
    collection.run(config, str(tmp_path / "run"))
  config = _tiny()
  config.policy_epsilon = -0.1
  with pytest.raises(ValueError, match=r"policy_epsilon must be in \[0, 1\]"):
    collection.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run")
