"""`python -m i2a.train` / `python -m i2a.evaluate`: runs, resume, errors.

Tiny runs on MiniPacman (configs/agents/a2c.py:tiny): 2 envs x 3-step
unrolls, one unroll per update, so 6 env steps are one learner step.
"""

import importlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from agents import builder
from agents.acting import random_generators
from agents.a2c import networks
from configs.agents import a2c as a2c_config
from i2a import environments, io_utils, pictures, runs
from i2a.metrics import read_column, read_summaries
from i2a.run import evaluate as evaluation
from i2a.run import exports
from i2a.run import plan as planning
from i2a.run import train as training

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MODEL_BASED = "test_model_based"


def _model_based(config, num_actions, observation_shape, envmodel=None):
  """A stand-in for an I2A network: takes the envmodel, acts model-free."""
  assert envmodel is not None and not envmodel.trainable_variables
  return networks.make_network(config, num_actions, observation_shape)


builder.register_network(MODEL_BASED, _model_based, overwrite=True)


def _config(learner_steps, **overrides):
  config = a2c_config.get_config("tiny")
  config.env_steps = 6 * learner_steps
  config.update(overrides)
  return config


def _checkpoint_values(workdir):
  reader = tf.train.load_checkpoint(
      tf.train.latest_checkpoint(os.path.join(workdir, "checkpoints")))
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()
          # How many saves a run made is bookkeeping, not training state.
          if not name.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH",
                                  "save_counter"))}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("trained"))
  summary = training.run(_config(6), workdir)
  return workdir, summary


def _export(directory, observation_shape=(16, 24, 3), num_actions=5):
  spec = envmodels.EnvModelSpec(
      kind="dssm_det", observation_shape=observation_shape,
      num_actions=num_actions, jump=1, context_length=3)
  model = envmodels.build(
      spec, **envmodels.model_class("dssm_det").tiny_hyperparameters())
  model.create_variables()
  return envmodels.export(model, str(directory))


def test_train_writes_checkpoints_metrics_and_a_learning_curve(trained):
  workdir, summary = trained
  assert summary["learner_steps"] == 6 and summary["env_steps"] == 36
  assert summary["episodes"] >= 2  # 12-step episodes in 18 steps per env
  for name in ("config.json", "protocol.json", "metrics.csv", "tb",
               "images/learning_curve.png", "checkpoints/ckpt-6.index",
               "checkpoints/ckpt-3.index", "checkpoints/actor-6.pkl"):
    assert os.path.exists(os.path.join(workdir, name)), name
  assert sorted(n for n in os.listdir(os.path.join(workdir, "checkpoints"))
                if n.startswith("actor-")) == ["actor-3.pkl", "actor-6.pkl"]
  metrics = os.path.join(workdir, "metrics.csv")
  assert read_column(metrics, "step").tolist() == [2, 4, 6]
  assert read_column(metrics, "env_steps").tolist() == [12, 24, 36]
  for column in ("loss", "policy_loss", "value_loss", "entropy",
                 "value_error", "gradient_norm", "env_steps_per_s",
                 "learner_steps_per_s"):
    assert np.isfinite(read_column(metrics, column)).all(), column
  assert np.isfinite(read_column(metrics, "episode_return")).any()
  assert io_utils.read_json(os.path.join(workdir, "config.json"))[
      "agent"] == "a2c"
  # episodes.csv: one row per episode, at its metrics row's step; the
  # rows' means are metrics.csv's episode_return, and all are counted.
  episodes = os.path.join(workdir, "episodes.csv")
  returns = read_column(episodes, "episode_return")
  assert len(returns) == summary["episodes"] == read_column(
      metrics, "episodes")[-1]
  assert np.isin(read_column(episodes, "episode_length"), [12]).all()
  logged = read_column(episodes, "step")
  for step, mean in zip(read_column(metrics, "step"),
                        read_column(metrics, "episode_return")):
    if np.isfinite(mean):
      assert np.mean(returns[logged == step]) == pytest.approx(mean)
    else:
      assert not (logged == step).any()


def test_resume_reproduces_the_uninterrupted_run(trained, tmp_path):
  straight, _ = trained  # 6 learner steps in one go
  split = str(tmp_path / "split")
  training.run(_config(5), split)
  summary = training.run(_config(6), split)  # resumes at step 5, +1
  assert summary["learner_steps"] == 6 and summary["env_steps"] == 36
  assert read_column(os.path.join(split, "metrics.csv"),
                     "step").tolist() == [2, 4, 5, 6]
  # Evaluations at 12 and 24 env steps, at the first budget's end (30) and
  # at 36: each once, none twice after the resume.
  assert read_column(os.path.join(split, "eval.csv"),
                     "env_steps").tolist() == [12, 24, 30, 36]
  expected, got = _checkpoint_values(straight), _checkpoint_values(split)
  assert sorted(expected) == sorted(got)
  assert any("optimizer" in name for name in got)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  # A finished run is not trained again.
  again = training.run(_config(6), split)
  assert again["learner_steps"] == 6


def _acted_weights(trainer):
  """Records, per actor unroll, the learner step of the weights it acted
  on (the in-process variable client's)."""
  actor, steps = trainer.actor, []
  unroll = actor.unroll

  def recorded(*args, **kwargs):
    out = unroll(*args, **kwargs)
    steps.append(actor._variable_client.learner_step)  # pylint: disable=protected-access
    return out
  actor.unroll = recorded
  return steps


def test_overlap_acting_acts_one_update_ahead_and_resumes_exactly(
    trained, tmp_path):
  """config.overlap_acting: the actor acts the next update's unroll while
  the learner steps, on the weights of the update before (a lag of 2
  learner steps instead of 1), never across a checkpoint, so the run
  meets its budget exactly and a resume reproduces it."""
  straight = str(tmp_path / "straight")
  trainer = training.Trainer(_config(6, overlap_acting=True), straight)
  try:
    acted = _acted_weights(trainer)
    summary = trainer.train()
  finally:
    trainer.close()
  assert summary["learner_steps"] == 6 and summary["env_steps"] == 36
  # Unroll i feeds learner step i + 1 (one unroll per update here);
  # checkpoints at steps 3 and 6: the update ending there acts nothing
  # ahead, the next acts first on the newest weights.
  assert acted == [0, 0, 1, 3, 3, 4]
  assert read_column(os.path.join(straight, "metrics.csv"),
                     "env_steps").tolist() == [12, 24, 36]
  split = str(tmp_path / "split")
  training.run(_config(3, overlap_acting=True), split)
  training.run(_config(6, overlap_acting=True), split)
  expected, got = _checkpoint_values(straight), _checkpoint_values(split)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  # The lag changes the run: not the synchronous run's weights.
  sequential = _checkpoint_values(trained[0])
  assert any(not np.array_equal(sequential[name], value)
             for name, value in expected.items() if "network" in name)


def test_overlap_acting_reraises_the_actors_error_and_needs_two_batches(
    tmp_path):
  with pytest.raises(ValueError, match="must hold two batches"):
    training.check_config(_config(6, overlap_acting=True, queue_size=2))
  trainer = training.Trainer(_config(6, overlap_acting=True),
                             str(tmp_path / "run"))
  try:
    unroll, calls = trainer.actor.unroll, []

    def failing(*args, **kwargs):
      calls.append(1)
      if len(calls) == 3:
        raise RuntimeError("environment crashed")
      return unroll(*args, **kwargs)
    trainer.actor.unroll = failing
    with pytest.raises(RuntimeError, match="environment crashed"):
      trainer.train()
  finally:
    trainer.close()


def test_a_partial_newest_checkpoint_is_skipped_on_resume(trained, tmp_path):
  workdir = str(tmp_path / "run")
  shutil.copytree(trained[0], workdir)
  # As if the process died while writing checkpoint 6's data.
  checkpoints = os.path.join(workdir, "checkpoints")
  with open(os.path.join(checkpoints, "ckpt-6.data-00000-of-00001"),
            "r+b") as f:
    f.truncate(10)
  trainer = training.Trainer(_config(6), workdir)
  try:
    assert trainer.loop.restore() == 3
    assert trainer.actor.env_steps == 18
    # The evaluation at learner step 4 is after the restored checkpoint.
    assert read_column(os.path.join(workdir, "eval.csv"),
                       "step").tolist() == [2]
    trainer.train()
  finally:
    trainer.close()
  # ... and is made again, once: the rows of the uninterrupted run.
  for column in ("step", "env_steps", "return_mean", "return_std"):
    np.testing.assert_array_equal(
        read_column(os.path.join(workdir, "eval.csv"), column),
        read_column(os.path.join(trained[0], "eval.csv"), column), column)


def test_a_rerun_from_an_older_checkpoint_logs_no_step_twice(trained,
                                                             tmp_path):
  """Steps after the checkpoint resumed from are trained and logged again:
  TensorBoard (at environment steps) and metrics.csv hold each step once."""
  workdir = str(tmp_path / "run")
  shutil.copytree(trained[0], workdir)
  with open(os.path.join(workdir, "checkpoints",
                         "ckpt-6.data-00000-of-00001"), "r+b") as f:
    f.truncate(10)  # resumes from checkpoint 3 (18 env steps)
  tb = os.path.join(workdir, "tb")
  assert 24 in [step for step, _ in read_summaries(tb)["train/loss"]]
  summary = training.run(_config(6), workdir)
  assert summary["learner_steps"] == 6
  for tag, points in read_summaries(tb).items():
    steps = [step for step, _ in points]
    assert len(steps) == len(set(steps)), (tag, steps)
  assert [step for step, _ in read_summaries(tb)["train/loss"]] == [
      12, 24, 36]
  assert read_column(os.path.join(workdir, "metrics.csv"),
                     "step").tolist() == [2, 4, 6]
  # The episodes logged at steps 4 and 6 were dropped and logged again.
  assert read_column(os.path.join(workdir, "episodes.csv"), "step").tolist(
      ) == read_column(os.path.join(trained[0], "episodes.csv"),
                       "step").tolist()


def test_a_stop_that_arrives_between_two_reads_still_gets_its_checkpoint(
    tmp_path):
  """The update that sees a stop is checkpointed, whenever the stop comes
  (here: during the 2nd update's bookkeeping, once per later read)."""
  reads = []
  def should_stop():
    reads.append(len(reads))
    return len(reads) > 2
  trainer = training.Trainer(_config(100, checkpoint_every=1000),
                             str(tmp_path / "run"))
  try:
    summary = trainer.loop.train(should_stop=should_stop)
  finally:
    trainer.close()
  assert summary["learner_steps"] == 2
  latest = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
  assert latest is not None and latest.endswith("ckpt-2"), latest


def test_a_changed_config_is_refused_on_resume(trained, tmp_path):
  workdir, _ = trained
  config = _config(8)
  config.network.hidden = 64
  with pytest.raises(ValueError, match=r"network.hidden: 32 -> 64"):
    training.run(config, workdir)
  config = _config(8)
  config.loss.entropy_coef = 0.5
  with pytest.raises(ValueError, match=r"loss.entropy_coef"):
    training.Trainer(config, workdir)


def test_every_role_builds_its_network_and_envmodel_copy_one_way(tmp_path):
  """role_envmodel / role_network: what the learner, the actor and the
  evaluation act or learn with; each role's copy of the envmodel is its
  own and checked against the environment."""
  config = _config(1)
  protocol = runs.protocol_from_config(config)
  assert training.role_envmodel(config, protocol, "actor") is None
  network = training.role_network(config, protocol, None)
  assert network.learnable_variables  # created
  config = _config(1, agent=MODEL_BASED, envmodel=_export(tmp_path / "e"))
  copies = {role: training.role_envmodel(config, protocol, role)
            for role in ("learner", "actor", "eval")}
  assert len({id(model) for model in copies.values()}) == 3
  assert all(not m.trainable_variables for m in copies.values())  # frozen
  assert training.role_network(config, protocol,
                               copies["actor"]).learnable_variables
  misfit = _config(1, agent=MODEL_BASED, envmodel=_export(
      tmp_path / "misfit", num_actions=4))
  with pytest.raises(ValueError, match="does not match the environment"):
    training.role_envmodel(misfit, protocol, "actor")


def test_an_envmodel_that_does_not_match_the_environment_is_refused(
    tmp_path):
  export = _export(tmp_path / "export16", observation_shape=(16, 16, 3),
                   num_actions=4)
  workdir = tmp_path / "run"
  config = _config(1, agent=MODEL_BASED, envmodel=export)
  with pytest.raises(ValueError) as error:
    training.run(config, str(workdir))
  message = str(error.value)
  assert "does not match the environment" in message
  assert "'observation_shape': (16, 24, 3), 'num_actions': 5" in message
  assert "'observation_shape': (16, 16, 3), 'num_actions': 4" in message
  assert not os.path.exists(workdir / "config.json")  # refused before writing


def test_a_missing_envmodel_export_is_refused(tmp_path):
  missing = str(tmp_path / "no_export")
  with pytest.raises(ValueError, match="no_export"):
    training.run(_config(1, agent=MODEL_BASED, envmodel=missing),
                 str(tmp_path / "run"))
  # A model-free agent with an envmodel is refused up front too.
  with pytest.raises(ValueError, match="model-free"):
    training.run(_config(1, envmodel=missing), str(tmp_path / "run"))


def test_a_matching_envmodel_is_loaded_for_training_and_evaluation(tmp_path):
  export = _export(tmp_path / "export")
  workdir = str(tmp_path / "run")
  summary = training.run(_config(2, agent=MODEL_BASED, envmodel=export),
                         workdir)
  assert summary["learner_steps"] == 2
  scores = evaluation.evaluate(workdir, episodes=1)
  assert scores["envmodel"] == export
  os.rename(export, export + "_moved")
  with pytest.raises(ValueError, match="--envmodel=EXPORT_DIR"):
    evaluation.evaluate(workdir, episodes=1)
  scores = evaluation.evaluate(workdir, episodes=1, envmodel=export + "_moved")
  assert scores["episodes"] == 1


def test_evaluate_writes_scores_a_gif_and_a_strip(trained):
  workdir, _ = trained
  scores = evaluation.evaluate(workdir, episodes=3, greedy=True)
  written = io_utils.read_json(os.path.join(workdir, "eval", "scores.json"))
  assert written == json.loads(json.dumps(scores))
  assert io_utils.read_json(os.path.join(
      workdir, "eval", "step_6", "scores.json")) == written
  assert len(written["returns"]) == len(written["lengths"]) == 3
  assert written["mean"] == pytest.approx(np.mean(written["returns"]))
  assert written["std"] == pytest.approx(np.std(written["returns"]))
  assert written["checkpoint_step"] == 6 and written["env_steps"] == 36
  assert all(0 < n <= 12 for n in written["lengths"])  # the protocol's cap
  for name in ("episode_000.gif", "episode_000.png"):
    assert os.path.getsize(os.path.join(workdir, "eval", "step_6", name)) > 0
  assert written["video"] == os.path.join(workdir, "eval", "step_6",
                                          "episode_000.gif")
  # Same seed, same episodes.
  again = evaluation.evaluate(workdir, episodes=3, greedy=True)
  assert again["returns"] == scores["returns"]


def test_evaluate_errors_say_what_is_missing(trained, tmp_path):
  with pytest.raises(ValueError, match="does not exist"):
    evaluation.evaluate(str(tmp_path / "nowhere"), episodes=1)
  empty = str(tmp_path / "empty")
  os.makedirs(empty)
  with pytest.raises(ValueError, match="holds no training run"):
    evaluation.evaluate(empty, episodes=1)
  fresh = str(tmp_path / "fresh")
  config = _config(1)
  runs.prepare_workdir(fresh, config, runs.protocol_from_config(config))
  with pytest.raises(ValueError, match="has no checkpoint yet"):
    evaluation.evaluate(fresh, episodes=1)
  with pytest.raises(ValueError, match=r"--checkpoint=4: .* has no checkpoint "
                     r"of learner step 4; it holds steps \[3, 6\]"):
    evaluation.evaluate(trained[0], episodes=1, checkpoint=4)


def _event_dir(workdir, *parts):
  return os.path.join(workdir, "tb", *parts)


def test_evaluation_during_training_goes_to_eval_csv_and_tensorboard(
    trained):
  """The tiny preset evaluates every 12 env steps (2 episodes): at learner
  steps 2, 4 and 6; TensorBoard's agent scalars sit at env steps."""
  workdir, _ = trained
  eval_csv = os.path.join(workdir, "eval.csv")
  assert read_column(eval_csv, "step").tolist() == [2, 4, 6]
  assert read_column(eval_csv, "env_steps").tolist() == [12, 24, 36]
  assert read_column(eval_csv, "frames").tolist() == [12, 24, 36]
  assert read_column(eval_csv, "episodes").tolist() == [2, 2, 2]
  assert np.isfinite(read_column(eval_csv, "return_std")).all()
  # The last row is what `python -m i2a.evaluate` computes for the final
  # checkpoint with the same episodes (seeds, sampling): nothing differs.
  scores = evaluation.evaluate(workdir, episodes=2, checkpoint=6)
  assert read_column(eval_csv, "return_mean")[-1] == pytest.approx(
      scores["mean"])
  assert read_column(eval_csv, "return_std")[-1] == pytest.approx(
      scores["std"])
  summaries = read_summaries(_event_dir(workdir))
  for tag in ("eval/return_mean", "eval/return_std", "eval/episodes",
              "train/loss", "train/env_steps", "train/frames"):
    assert [step for step, _ in summaries[tag]] == [12, 24, 36], tag
  assert [v for _, v in summaries["eval/return_mean"]] == pytest.approx(
      read_column(eval_csv, "return_mean").tolist())
  assert [v for _, v in summaries["train/step"]] == [2, 4, 6]  # learner
  assert [v for _, v in summaries["train/frames"]] == [12, 24, 36]
  animations = summaries["eval/episode"]
  assert [step for step, _ in animations] == [12, 24, 36]
  plugin, (width, height, gif) = animations[0][1]
  assert plugin == "images" and gif.startswith(b"GIF89a")
  # MiniPacman 16x24, upscaled 6x, and a caption band under each frame.
  assert (int(width), int(height)) == (144, 96 + pictures.CAPTION_HEIGHT)


def test_per_checkpoint_evaluation_keeps_earlier_results(trained, tmp_path):
  workdir = str(tmp_path / "run")
  shutil.copytree(trained[0], workdir)
  shutil.rmtree(os.path.join(workdir, "eval"), ignore_errors=True)
  shutil.rmtree(_event_dir(workdir, "evaluate"), ignore_errors=True)
  newest = evaluation.evaluate(workdir, episodes=1)
  older = evaluation.evaluate(workdir, episodes=2, checkpoint=3)
  assert (newest["checkpoint_step"], newest["env_steps"]) == (6, 36)
  assert (older["checkpoint_step"], older["env_steps"]) == (3, 18)
  eval_dir = os.path.join(workdir, "eval")
  for scores in (newest, older):
    step_dir = os.path.join(eval_dir, f"step_{scores['checkpoint_step']}")
    assert io_utils.read_json(os.path.join(step_dir, "scores.json")) == \
        json.loads(json.dumps(scores))
    assert os.path.exists(os.path.join(step_dir, "episode_000.gif"))
  # eval/scores.json stays the newest checkpoint's (the sweeps read it).
  assert io_utils.read_json(os.path.join(eval_dir, "scores.json"))[
      "checkpoint_step"] == 6
  index = io_utils.read_json(os.path.join(eval_dir, "index.json"))
  assert sorted(index) == ["3", "6"]
  assert index["3"]["episodes"] == 2 and index["3"]["env_steps"] == 18
  assert index["6"]["scores"] == os.path.join("step_6", "scores.json")
  summaries = read_summaries(_event_dir(workdir, "evaluate"))
  assert [step for step, _ in summaries["eval/return_mean"]] == [36, 18]
  assert [v for _, v in summaries["eval/return_mean"]] == pytest.approx(
      [newest["mean"], older["mean"]])
  assert [step for step, _ in summaries["eval/episode"]] == [36, 18]


def test_the_binaries_train_and_evaluate(trained, tmp_path):
  workdir, env = str(tmp_path / "run"), dict(os.environ,
                                              TF_CPP_MIN_LOG_LEVEL="3")
  # Both at once: each spends most of its time importing TensorFlow.
  train = subprocess.Popen(
      [sys.executable, "-m", "i2a.train",
       "--config=configs/agents/a2c.py:tiny", f"--workdir={workdir}",
       "--config.env_steps=12"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)
  evaluate = subprocess.Popen(
      [sys.executable, "-m", "i2a.evaluate", f"--workdir={trained[0]}",
       "--episodes=2", "--seed=7"], cwd=ROOT, env=env,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  train_out, train_err = train.communicate(timeout=300)
  evaluate_out, evaluate_err = evaluate.communicate(timeout=300)
  assert train.returncode == 0, train_err[-3000:]
  assert "env steps/s" in train_err and "ETA" in train_err
  assert "trained 2 learner steps" in train_out
  assert "budget: config.env_steps=12 agent (environment) steps" in train_out
  assert os.path.exists(os.path.join(workdir, "checkpoints", "ckpt-2.index"))
  assert evaluate.returncode == 0, evaluate_err[-3000:]
  assert '"checkpoint_step": 6' in evaluate_out
  assert '"env_steps": 36' in evaluate_out
  scores = io_utils.read_json(os.path.join(trained[0], "eval", "scores.json"))
  assert scores["episodes"] == 2 and scores["seeds"][0] == 10_000_007


@pytest.mark.slow
@pytest.mark.parametrize("overlap_acting", [False, True])
def test_a2c_beats_the_random_policy_on_minipacman_avoid(tmp_path,
                                                         overlap_acting):
  """A2C (minipacman preset: 16 envs x 5 steps, lr 2e-3, entropy 0.03)
  for 240k env steps (3000 updates; about 3 minutes on 2 cores) against the
  uniform random policy, both over the same 100 evaluation episodes of
  MiniPacman-avoid-v0. Measured: random -14.8 (episodes of ~65 steps);
  A2C's training return reached -6.6 / -5.1 at 200k steps for seeds 0 / 1.
  Required: at least 4 points above random (the random mean's standard
  error is about 0.3); with config.overlap_acting (one update of policy
  lag) too."""
  config = a2c_config.get_config("minipacman")
  config.overlap_acting = overlap_acting
  config.env_steps = 240_000
  config.log_every = 250
  workdir = str(tmp_path / "a2c")
  random_mean = np.mean(planning.uniform_random_returns(
      runs.protocol_from_config(config), 100))
  summary = training.run(config, workdir)
  scores = evaluation.evaluate(workdir, episodes=100)
  print(f"random {random_mean:.2f}, A2C {scores['mean']:.2f} "
        f"(+- {scores['std'] / 10:.2f}), training return "
        f"{summary['recent_return']:.2f}, mean length "
        f"{np.mean(scores['lengths']):.0f}")
  assert scores["mean"] >= random_mean + 4.0, (scores["mean"], random_mean)


def test_an_i2a_evaluation_draws_its_imagination_without_changing_episodes(
    tmp_path):
  """The pictures run the rollouts again with pi_r's sampler, whose state
  is put back: the episode is the one played without them."""
  from configs.agents import i2a as i2a_config  # pylint: disable=g-import-not-at-top
  config = i2a_config.get_config("tiny")
  config.envmodel = _export(tmp_path / "export")
  config.env_steps = 12
  config.protocol.max_episode_frames = 60  # room for steps 0, 25, 50
  workdir = str(tmp_path / "run")
  training.run(config, workdir)
  _, protocol, checkpoint = evaluation.load_run(workdir)
  network, _ = evaluation.load_agent(config, protocol, checkpoint, "")
  generators = random_generators(network)
  states = [g.state.numpy() for g in generators]
  episodes = []
  for imagination in (False, True):
    for generator, state in zip(generators, states):
      generator.state.assign(state)  # both from the same sampler state
    episodes.append(evaluation.run_episodes(
        network, protocol, 1, False, seed=7, imagination=imagination))
  plain, drawn = episodes
  assert drawn.returns == plain.returns and drawn.lengths == plain.lengths
  (length,) = drawn.lengths
  assert length > 25 and len(drawn.frames) == length + 1
  np.testing.assert_array_equal(np.stack(drawn.frames),
                                np.stack(plain.frames))
  assert drawn.actions == plain.actions and not plain.imaginations
  imaginations = drawn.imaginations
  assert [step for step, _ in imaginations] == [
      t for t in (0, 25, 50) if t < length]
  imagined = imaginations[0][1]
  k, tau = network.num_rollouts, network.depth
  assert imagined["frames"].shape == (1, k, tau, 16, 24, 3)
  assert np.all((imagined["frames"] >= 0) & (imagined["frames"] <= 1))
  assert imagined["rewards"].shape == (1, k, tau)
  assert np.all(np.isfinite(imagined["rewards"]))
  np.testing.assert_array_equal(imagined["first_actions"], np.arange(k) % 5)
  scores = evaluation.evaluate(workdir, episodes=1)
  assert [(p["step"], os.path.basename(p["png"]))
          for p in scores["imagination"]] == [
              (t, f"imagination_step{t:04d}.png") for t in (0, 25, 50)
              if t < scores["lengths"][0]]
  for picture in scores["imagination"]:
    assert os.path.getsize(picture["png"]) > 0


def test_episodes_played_at_once_are_the_episodes_played_one_by_one(
    trained):
  """Each episode has its seed and its own action sampler: A2C (no random
  numbers of its own) plays the same episodes on 1 environment as on 3 at
  once, greedy or sampling; spare episodes fill the batch at the end."""
  workdir, _ = trained
  config, protocol, checkpoint = evaluation.load_run(workdir)
  network, _ = evaluation.load_agent(config, protocol, checkpoint, "")
  for greedy in (True, False):
    one = evaluation.run_episodes(network, protocol, 5, greedy, seed=3,
                                  num_envs=1)
    three = evaluation.run_episodes(network, protocol, 5, greedy, seed=3,
                                    num_envs=3)
    assert three.returns == one.returns and three.lengths == one.lengths
    assert three.seeds == one.seeds == [evaluation.EVAL_SEED + 3 + i
                                        for i in range(5)]
    assert three.actions == one.actions and len(one.actions) == one.lengths[0]
    np.testing.assert_array_equal(np.stack(three.frames),
                                  np.stack(one.frames))
  with pytest.raises(ValueError, match="num_envs .* must be >= 1, given 0"):
    evaluation.run_episodes(network, protocol, 2, True, num_envs=0)


def test_an_i2a_run_draws_its_imagination_without_changing_the_run(
    tmp_path):
  """images/imagination.png and TensorBoard's `imagination` (and its
  animation) at every plot, at env steps; drawing at every update and
  evaluating every 12 env steps trains exactly as drawing only at the end
  without evaluating."""
  from configs.agents import i2a as i2a_config  # pylint: disable=g-import-not-at-top
  export = _export(tmp_path / "export")
  workdirs = {}
  for plot_every, eval_every in ((1, 12), (1000, 0)):
    config = i2a_config.get_config("tiny")
    config.envmodel = export
    config.env_steps = 6 * 4
    config.plot_every = plot_every
    config.eval_every = eval_every
    workdirs[plot_every] = str(tmp_path / f"plot_every_{plot_every}")
    training.run(config, workdirs[plot_every])
  assert os.path.getsize(os.path.join(workdirs[1], "images",
                                      training.IMAGINATION)) > 0
  often, once = (_checkpoint_values(workdirs[1]),
                 _checkpoint_values(workdirs[1000]))
  assert sorted(often) == sorted(once)
  for name, value in once.items():
    np.testing.assert_array_equal(often[name], value, err_msg=name)
  summaries = read_summaries(os.path.join(workdirs[1], "tb"))
  for tag in ("imagination", "imagination_animated"):
    assert [step for step, _ in summaries[tag]] == [6, 12, 18, 24], tag
  plugin, (_, _, gif) = summaries["imagination_animated"][0][1]
  assert plugin == "images" and gif.startswith(b"GIF89a")
  assert [step for step, _ in summaries["eval/return_mean"]] == [12, 24]
  assert not os.path.exists(os.path.join(workdirs[1000], "eval.csv"))


def test_an_a2c_run_draws_no_imagination(trained):
  assert not os.path.exists(os.path.join(trained[0], "images",
                                         training.IMAGINATION))


# 'recompute' (the learner re-imagines from the stored noise keys) takes a
# minute and a half: a long end-to-end run, in `make test-slow`.
@pytest.mark.parametrize("learner_rollouts,precision", [
    ("auto", "fp32"), ("auto", "bf16"),
    pytest.param("recompute", "fp32", marks=pytest.mark.slow)])
def test_an_i2a_resume_reproduces_the_uninterrupted_run(tmp_path,
                                                        learner_rollouts,
                                                        precision):
  """The I2A's extra state survives a checkpoint: pi_r's sampling
  generator, and with stored rollouts (auto: distillation stores them) the
  actor's cached rollouts of its current windows; in bfloat16 too (the
  act's weight copies, the stored features' bits)."""
  from configs.agents import i2a as i2a_config  # pylint: disable=g-import-not-at-top
  export = _export(tmp_path / "export")

  def config(learner_steps):
    c = i2a_config.get_config("tiny")
    c.envmodel = export
    c.network.learner_rollouts = learner_rollouts
    c.precision = precision
    c.env_steps = 6 * learner_steps
    return c

  straight, split = str(tmp_path / "straight"), str(tmp_path / "split")
  training.run(config(4), straight)
  training.run(config(3), split)
  assert training.run(config(4), split)["learner_steps"] == 4
  expected, got = _checkpoint_values(straight), _checkpoint_values(split)
  assert sorted(expected) == sorted(got)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)


def _train(config, workdir, transport):
  trainer = training.Trainer(config, workdir, transport=transport)
  try:
    return trainer.train()
  finally:
    trainer.close()


def test_queue_and_batch_sizes_must_be_whole_unroll_batches():
  """The Reverb `unrolls` queue holds an actor's unroll batches whole."""
  config = _config(4)
  training.check_config(config)
  with pytest.raises(ValueError, match=r"config.queue_size \(9\) must be a "
                     r"multiple of config.num_envs \(2\)"):
    training.check_config(_config(4, queue_size=9))
  with pytest.raises(ValueError, match=r"config.batch_size \(3\) must be a "
                     r"multiple of config.num_envs \(2\)"):
    training.check_config(_config(4, batch_size=3))


def test_the_reverb_queue_items_are_unroll_batches_up_to_a_size():
  """An actor's whole unroll batch is one item while it fits in
  MAX_ITEM_BYTES; past it, the largest divisor of num_envs that fits."""
  def signature(unroll_bytes):  # one uint8 field of that many bytes
    return {"observation": tf.TensorSpec([unroll_bytes], tf.uint8)}
  config = _config(4, num_envs=12, batch_size=12, queue_size=24)
  limit = training.MAX_ITEM_BYTES
  assert training.unrolls_per_item(config, signature(1000)) == 12
  assert training.unrolls_per_item(config, signature(limit // 12)) == 12
  assert training.unrolls_per_item(config, signature(limit // 12 + 1)) == 6
  assert training.unrolls_per_item(config, signature(limit // 5)) == 4
  assert training.unrolls_per_item(config, signature(limit // 2)) == 2
  assert training.unrolls_per_item(config, signature(limit)) == 1
  assert training.unrolls_per_item(config, signature(2 * limit)) == 1
  # Every field counts, at its dtype's size.
  two = {"a": tf.TensorSpec([limit // 8], tf.float32),  # half the limit
         "b": tf.TensorSpec([1], tf.uint8)}
  assert training.unrolls_per_item(config, two) == 1


@pytest.mark.parametrize("agent", ["a2c", "i2a"])
def test_the_local_and_reverb_transports_train_identically(tmp_path, agent):
  """The in-process transport (the default) and the embedded Reverb server
  give the same run: checkpoints (weights, optimizer, counters, the actor's
  state) and every logged metric but the speeds. The I2A stores its
  rollouts with the unrolls (side inputs), so they pass both ways too.
  The A2C's updates read two of the queue's items (unroll batches of 2
  environments) each."""
  if agent == "a2c":
    config = _config(4, batch_size=4, queue_size=8)
  else:
    from configs.agents import i2a as i2a_config  # pylint: disable=g-import-not-at-top
    config = i2a_config.get_config("tiny")
    config.envmodel = _export(tmp_path / "export")
    config.env_steps = 6 * 4
  runs_ = {t: str(tmp_path / t) for t in training.TRANSPORTS}
  updates = config.env_steps // (config.batch_size * config.unroll_length)
  assert updates >= 2
  for transport, workdir in runs_.items():
    assert _train(config, workdir, transport)["learner_steps"] == updates
  expected = _checkpoint_values(runs_["reverb"])
  got = _checkpoint_values(runs_["local"])
  assert sorted(expected) == sorted(got)
  for name, value in expected.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  speeds = ("env_steps_per_s", "learner_steps_per_s")
  metrics = {t: os.path.join(w, "metrics.csv") for t, w in runs_.items()}
  columns = [c for c in open(metrics["local"]).readline().strip().split(",")
             if c not in speeds]
  assert "total_loss" in columns and "episode_return" in columns
  for column in columns:
    np.testing.assert_array_equal(read_column(metrics["local"], column),
                                  read_column(metrics["reverb"], column),
                                  err_msg=column)
  with pytest.raises(ValueError, match="transport must be one of"):
    training.Trainer(config, str(tmp_path / "other"), transport="grpc")


def test_a_non_finite_network_is_never_checkpointed(tmp_path):
  trainer = training.Trainer(_config(3), str(tmp_path / "run"))
  try:
    trainer.train()
    newest = trainer.loop.manager.latest_checkpoint
    variable = trainer.learner.network.trainable_variables[0]
    variable.assign(np.full(variable.shape, np.nan, np.float32))
    with pytest.raises(FloatingPointError, match="refusing to checkpoint"):
      trainer.loop.save()
    assert trainer.loop.manager.latest_checkpoint == newest
  finally:
    trainer.close()


# -- The export's protocol and identity ----------------------------------------

def _export_under(directory, **protocol_fields):
  """A tiny export whose provenance records the tiny protocol with
  `protocol_fields` changed (what i2a.pretrain records)."""
  protocol = runs.protocol_from_config(_config(1)).to_json()
  protocol.update(protocol_fields)
  spec = envmodels.EnvModelSpec(kind="dssm_det", observation_shape=(16, 24, 3),
                                num_actions=5, jump=1, context_length=3)
  model = envmodels.build(
      spec, **envmodels.model_class("dssm_det").tiny_hyperparameters())
  model.create_variables()
  return envmodels.export(model, str(directory),
                          provenance={"protocol": protocol})


def test_an_export_under_another_protocol_is_refused_naming_the_fields(
    tmp_path):
  export = _export_under(tmp_path / "export", env_id="MiniPacman-regular-v0",
                         max_episode_frames=1000)
  config = _config(1, agent=MODEL_BASED, envmodel=export)
  with pytest.raises(ValueError) as refused:
    training.run(config, str(tmp_path / "run"))
  message = str(refused.value)
  assert ("protocol.env_id: 'MiniPacman-regular-v0' (export) vs "
          "'MiniPacman-avoid-v0' (config)") in message
  assert "max_episode_frames" not in message  # episode bounds may differ
  assert "--config.allow_protocol_mismatch=True" in message
  assert not os.path.exists(tmp_path / "run" / "config.json")
  # A deliberate transfer is allowed.
  config.allow_protocol_mismatch = True
  identity = exports.check_export(config, runs.protocol_from_config(config))
  assert identity.fingerprint == envmodels.fingerprint(export)


def test_an_export_without_provenance_is_checked_by_its_pretrain_workdir(
    tmp_path):
  """Exports written before provenance: protocol.json next to them."""
  export = _export(tmp_path / "pretrain" / "export")
  config = _config(1, agent=MODEL_BASED, envmodel=export)
  protocol = runs.protocol_from_config(config)
  assert exports.export_protocol(export) == (None, "")  # unknown: accepted
  exports.check_export(config, protocol)
  environments.preset("minipacman").save(
      str(tmp_path / "pretrain" / runs.PROTOCOL))  # 'regular'
  with pytest.raises(ValueError, match=r"(?s)read from .*protocol.json.*"
                     r"protocol.env_id: 'MiniPacman-regular-v0'"):
    exports.check_export(config, protocol)


def test_a_resume_with_another_export_is_refused_naming_both_fingerprints(
    tmp_path):
  export = _export_under(tmp_path / "export")
  config = _config(1, agent=MODEL_BASED, envmodel=export)
  protocol = runs.protocol_from_config(config)
  workdir = str(tmp_path / "run")
  # The run so far (what Trainer records before its first step).
  runs.prepare_workdir(workdir, config, protocol,
                       ignore=training.RESUMABLE_FIELDS,
                       legacy=training.LEGACY_VALUES, identity={
                           exports.ENVMODEL_IDENTITY:
                               exports.check_export(config, protocol)})
  first = envmodels.fingerprint(export)
  identity_json = os.path.join(workdir, runs.IDENTITY)
  before = open(identity_json, "rb").read()
  _export_under(tmp_path / "export")  # pretrained again: other weights
  second = envmodels.fingerprint(export)
  assert first != second
  with pytest.raises(ValueError) as refused:
    training.run(config, workdir)
  message = str(refused.value)
  assert f"recorded fingerprint {first}" in message
  assert f"--config.envmodel={export} has fingerprint {second}" in message
  assert "Use a new --workdir for this envmodel export" in message
  assert open(identity_json, "rb").read() == before
  assert not os.path.exists(os.path.join(workdir, "checkpoints"))


def _preset_config(path_and_preset):
  path, preset = path_and_preset.split(":")
  module = importlib.import_module(path[:-len(".py")].replace("/", "."))
  return module.get_config(preset)


def _model_differences(collect, agent):
  return runs.protocol_from_config(_preset_config(collect)).model_differences(
      runs.protocol_from_config(_preset_config(agent)))


@pytest.mark.parametrize("preset", ["tiny", "minipacman", "small", "paper"])
def test_the_shipped_presets_collect_what_the_agents_play(preset):
  for agent in ("configs/agents/a2c.py", "configs/agents/i2a.py"):
    assert _model_differences(f"configs/collect.py:{preset}",
                              f"{agent}:{preset}") == {}
  if preset != "paper":
    assert _model_differences(f"configs/collect.py:{preset}",
                              f"configs/agents/planning.py:{preset}") == {}


@pytest.mark.parametrize("sweep", ["configs/sweeps/i2a_minipacman.py",
                                   "configs/sweeps/table1_small.py"])
@pytest.mark.parametrize("preset", ["tiny", ""])
def test_the_sweep_grids_and_the_demo_collect_what_their_agents_play(
    sweep, preset):
  grid = _preset_config(f"{sweep}:{preset}")
  for collect in grid.collect:
    for agent in grid.get("train", ()):
      assert _model_differences(collect["config"], agent["config"]) == {}, (
          collect["config"], agent["config"])
  demo = _preset_config(f"configs/demo.py:{preset}")
  for agent in ("a2c", "i2a"):
    assert _model_differences(
        f"configs/collect.py:{demo.collect_preset}",
        f"configs/agents/{agent}.py:{demo.agent_preset}") == {}
