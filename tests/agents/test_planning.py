"""The MPC planner (agents/planning): the categorical CEM, the planner over
fake, learned and oracle models, the `python -m i2a.plan` binary, the docs
example, bad input, and the public-envmodels-API-only rule."""

import ast
import dataclasses
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

import envmodels
from agents import acting, builder
from agents.planning import cem, planner as planner_lib
from configs.agents import planning as planning_config
from i2a import environments
from i2a.run import evaluate as evaluation
from i2a.run import plan as running

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Short episodes: the planner must survive the ghost, the random policy
# often does not (avoid: +0.1 per step, -20 when killed).
AVOID = environments.preset("minipacman", env_id="MiniPacman-avoid-v0",
                            max_episode_frames=80)
CONTEXT, T = 3, 3


# -- The categorical CEM ------------------------------------------------------


def test_cem_finds_the_single_best_sequence_of_a_known_scorer():
  horizon, num_actions, population = 5, 5, 64
  # One target sequence per batch row: 5^5 = 3125 candidates, one best.
  targets = tf.constant([[2, 0, 3, 1, 4], [1, 1, 0, 2, 2], [4, 3, 2, 1, 0]])

  def score(actions):  # [B * P, H, 1] -> [B * P]
    match = tf.cast(tf.equal(actions[..., 0],
                             tf.repeat(targets, population, axis=0)),
                    tf.float32)
    return tf.reduce_sum(match, 1) + 10.0 * tf.reduce_prod(match, 1)

  result = cem.categorical_cem(
      score, 3, horizon, 1, num_actions, population=population, iterations=5,
      num_elites=8, smoothing=0.25, seed=tf.constant([0, 1]))
  np.testing.assert_array_equal(result.best_actions[..., 0], targets)
  np.testing.assert_array_equal(result.best_return, [15.0] * 3)
  np.testing.assert_array_equal(result.mode_actions[..., 0], targets)
  np.testing.assert_allclose(tf.reduce_sum(result.probabilities, -1), 1.0,
                             rtol=1e-5)


def test_cem_refits_the_belief_with_smoothing():
  # One slot, two actions, action 1 scores higher: the single elite is a
  # candidate taking action 1, so the refit belief is
  # 0.25 * [0.5, 0.5] + 0.75 * [0, 1].
  result = cem.categorical_cem(
      lambda actions: tf.cast(actions[:, 0, 0], tf.float32), 1, 1, 1, 2,
      population=16, iterations=1, num_elites=1, smoothing=0.25,
      seed=tf.constant([0, 0]))
  np.testing.assert_allclose(result.probabilities[0, 0, 0], [0.125, 0.875])
  assert int(result.best_actions[0, 0, 0]) == 1


def test_cem_refuses_more_elites_than_candidates():
  with pytest.raises(ValueError, match="num_elites .9. must be at most the "
                     "population .8."):
    planner_lib.PlannerConfig(population=8, num_elites=9)


# -- The planner over a fake model --------------------------------------------


class TargetModel(envmodels.EnvModel):
  """Reward 1 per primitive action equal to targets[env, t, slot], where the
  env index is the last context frame's first pixel. Records the batch size
  of every rollout call (eager planning only)."""

  def __init__(self, targets, kind="dssm_det", noise=0.0):
    targets = np.asarray(targets, np.int32)  # [N, H, c]
    super().__init__(envmodels.EnvModelSpec(
        kind=kind, observation_shape=(8, 8, 1), num_actions=4,
        jump=targets.shape[2], context_length=2))
    self.targets = tf.constant(targets)
    self.noise = noise
    self.rollout_batches = []

  def _initial_state(self, observations):
    env = tf.cast(observations[:, -1, 0, 0, 0], tf.int32)
    return (env, tf.zeros_like(env))

  def _step(self, state, encoded_actions):
    env, t = state
    c, num_actions = self.spec.jump, self.spec.num_actions
    actions = tf.argmax(tf.reshape(encoded_actions, [-1, c, num_actions]),
                        -1, output_type=tf.int32)
    horizon = self.targets.shape[1]
    target = tf.gather_nd(self.targets,
                          tf.stack([env, tf.minimum(t, horizon - 1)], -1))
    reward = tf.reduce_sum(tf.cast(tf.equal(actions, target), tf.float32), -1)
    if self.noise:
      reward += self.noise * self.sample_normal(tf.shape(reward))
    features = tf.zeros([tf.shape(env)[0], 1, 1, 1])
    return (env, t + 1), envmodels.StepOutput(reward=reward,
                                              features=features)

  @property
  def deterministic(self):
    return not self.noise  # the planner reads this, never the kind name

  def state_features(self, state):
    return tf.zeros([tf.shape(state[0])[0], 1, 1, 1])

  def rollout(self, state, actions, render=False):
    self.rollout_batches.append(actions.shape[0])  # None when traced
    return super().rollout(state, actions, render)

  def _render(self, state):
    return tf.zeros([tf.shape(state[0])[0], 8, 8, 1])

  def loss(self, batch, **knobs):
    raise NotImplementedError


def _contexts(num_envs):
  context = np.zeros((num_envs, 2, 8, 8, 1), np.uint8)
  context[:, -1] = np.arange(num_envs)[:, None, None, None]
  return context


@pytest.mark.parametrize("compile_", [False, True])
def test_planner_returns_the_first_jumpy_step_of_the_best_plan(compile_):
  targets = [[[1, 2], [3, 0], [2, 2]], [[0, 3], [1, 1], [3, 2]]]  # [2, 3, 2]
  model = TargetModel(targets)
  config = planner_lib.PlannerConfig(horizon=3, population=64, iterations=4,
                                     num_elites=8)
  planner = planner_lib.CEMPlanner(model, config, seed=1, compile=compile_)
  plan = planner.plan(_contexts(2))
  np.testing.assert_array_equal(plan.sequence, targets)
  np.testing.assert_array_equal(plan.actions, [[1, 2], [0, 3]])
  np.testing.assert_array_equal(plan.predicted_return, [6.0, 6.0])
  if not compile_:  # every env's population in one model call per iteration
    assert model.rollout_batches == [2 * 64] * 4


def test_a_stochastic_model_scores_each_candidate_over_num_samples():
  targets = [[[1], [3]], [[0], [2]], [[2], [2]]]
  model = TargetModel(targets, kind="sssm", noise=0.1)
  config = planner_lib.PlannerConfig(horizon=2, population=16, iterations=3,
                                     num_elites=4, num_samples=5)
  plan = planner_lib.CEMPlanner(model, config, compile=False).plan(
      _contexts(3))
  assert model.rollout_batches == [3 * 16 * 5] * 3
  np.testing.assert_array_equal(plan.sequence, targets)
  # A deterministic model needs one sample per candidate.
  assert planner_lib.CEMPlanner(TargetModel(targets), config).num_samples == 1


def test_the_planner_refuses_context_of_the_wrong_shape():
  planner = planner_lib.CEMPlanner(TargetModel([[[1]]]),
                                   planner_lib.PlannerConfig(
                                       horizon=1, population=4, num_elites=2))
  with pytest.raises(ValueError, match=r"expected uint8 \[N, 2, 8, 8, 1\].*"
                     r"given \[1, 3, 8, 8, 1\]"):
    planner.plan(np.zeros((1, 3, 8, 8, 1), np.uint8))


LEARNED_KINDS = tuple(k for k in envmodels.kinds()
                      if envmodels.model_class(k).learned)


@pytest.mark.parametrize("kind", LEARNED_KINDS)
def test_the_planner_plans_jumpy_steps_with_every_learned_kind(kind):
  spec = envmodels.EnvModelSpec(kind=kind, observation_shape=(16, 16, 3),
                                num_actions=3, jump=2, context_length=2)
  model = envmodels.build(spec, seed=0,
                          **envmodels.model_class(kind).tiny_hyperparameters())
  model.create_variables()  # envmodels.load does it for an export
  config = planner_lib.PlannerConfig(horizon=2, population=4, iterations=2,
                                     num_elites=2, num_samples=2)
  planner = planner_lib.CEMPlanner(model, config)
  for num_envs in (3, 2):  # one trace serves any number of environments
    plan = planner.plan(np.zeros((num_envs, 2, 16, 16, 3), np.uint8))
    assert plan.actions.shape == (num_envs, 2)
    assert plan.sequence.shape == (num_envs, 2, 2)
    assert plan.probabilities.shape == (num_envs, 2, 2, 3)
    assert ((plan.sequence >= 0) & (plan.sequence < 3)).all()
    assert np.isfinite(plan.predicted_return).all()
  traced = planner._plan_from_context  # pylint: disable=protected-access
  assert traced.experimental_get_tracing_count() == 1


# -- The emulator oracle ------------------------------------------------------


def test_the_oracle_planner_beats_the_random_policy_on_minipacman_avoid():
  oracle = builder.make_oracle(AVOID)
  planner = planner_lib.CEMPlanner(oracle, planner_lib.PlannerConfig(
      horizon=4, population=16, iterations=2, num_elites=4), seed=0)
  planned = running.run_episodes(planner, AVOID, episodes=4, num_envs=4)
  oracle.close()
  assert oracle.store_size == 0  # every snapshot was released
  random = running.run_episodes(planner_lib.UniformRandomPolicy(5), AVOID,
                                episodes=16, num_envs=4)
  planned_mean, random_mean = np.mean(planned.returns), np.mean(random.returns)
  print(f"avoid, 80 steps: oracle planner {planned_mean:.2f} "
        f"{planned.returns}, random {random_mean:.2f} {random.returns}")
  # Measured: the planner about +7.5 (never killed), the random policy
  # -10 to -4 over 8 episodes (killed, -20, in about half of them). The
  # margin asked for: 5 reward units (50 steps alive, or a quarter kill).
  assert planned_mean >= random_mean + 5.0
  assert planned.plan_seconds > 0 and planned.env_steps == sum(
      planned.lengths)


def test_the_random_baseline_plays_evaluate_s_seeds_with_one_action_stream():
  """The uniform random policy draws its actions in one place
  (agents.acting.uniform_actions): the planner's baseline, replayed on
  `python -m i2a.evaluate`'s episode seeds, gets exactly the returns of a
  plain loop drawing one action at a time from a generator seeded alike."""
  returns = running.uniform_random_returns(AVOID, episodes=3, seed=2)
  env = environments.make_env(AVOID)
  rng = np.random.default_rng(2)
  expected = []
  for i in range(3):
    env.reset(seed=evaluation.EVAL_SEED + 2 + i)
    total, done = 0.0, False
    while not done:
      _, reward, terminated, truncated, _ = env.step(int(rng.integers(5)))
      total, done = total + reward, terminated or truncated
    expected.append(total)
  env.close()
  assert returns == pytest.approx(expected, abs=1e-9)
  actions = acting.uniform_actions(5, 6, np.random.default_rng(7))
  assert actions.dtype == np.int32 and actions.shape == (6,)
  np.testing.assert_array_equal(
      actions, np.random.default_rng(7).integers(0, 5, 6))
  policy = planner_lib.UniformRandomPolicy(5, seed=7)
  np.testing.assert_array_equal(policy.act(np.zeros((6, 1, 2, 2, 3))),
                                actions[:, None])


# -- Learned models: the binary, the docs example, bad input ------------------


def _windows(protocol, count, seed):
  """Random-policy windows of CONTEXT + T steps (docs/datasets.md)."""
  env = environments.make_env(protocol)
  rng = np.random.default_rng(seed)
  length = CONTEXT + T
  observations, actions, rewards = [], [], []
  observation, _ = env.reset(seed=seed)
  reward = 0.0
  while len(observations) < count * length:
    action = int(rng.integers(5))
    observations.append(observation)
    actions.append([action])
    rewards.append(reward)
    observation, reward, terminated, truncated, _ = env.step(action)
    if terminated or truncated:
      observation, _ = env.reset()
      reward = 0.0
  env.close()
  shape = lambda x, dtype: np.asarray(x, dtype).reshape(
      (count, length) + np.asarray(x[0]).shape)
  return dict(observation=shape(observations, np.uint8),
              action=shape(actions, np.int32),
              reward=shape(rewards, np.float32),
              discount=np.ones((count, length), np.float32))


def _export(directory, spec, steps=0, protocol=None):
  """A tiny model of `spec`, trained `steps` Adam steps, exported to
  directory/export (with directory/protocol.json when protocol is given,
  as python -m i2a.pretrain lays out its workdir)."""
  model = envmodels.build(spec, seed=0,
                          **envmodels.model_class(spec.kind)
                          .tiny_hyperparameters())
  if steps:
    batch = _windows(protocol, 8, seed=0)
    optimizer = snt.optimizers.Adam(1e-3)
    for _ in range(steps):
      with tf.GradientTape() as tape:
        loss = model.loss(batch).loss
      variables = model.trainable_variables
      optimizer.apply(tape.gradient(loss, variables), variables)
  export_dir = os.path.join(directory, "export")
  envmodels.export(model, export_dir)
  if protocol is not None:
    protocol.save(os.path.join(directory, "protocol.json"))
  return export_dir


TINY_PROTOCOL = environments.Protocol.from_json(dict(
    planning_config.get_config("tiny").protocol.to_dict()))


@pytest.fixture(scope="module")
def trained_export(tmp_path_factory):
  """A tiny dssm_det trained 3 steps on MiniPacman-avoid windows."""
  spec = envmodels.EnvModelSpec(
      kind="dssm_det", observation_shape=TINY_PROTOCOL.observation_shape,
      num_actions=5, jump=1, context_length=CONTEXT)
  return _export(str(tmp_path_factory.mktemp("pretrain")), spec, steps=3,
                 protocol=TINY_PROTOCOL)


def test_the_plan_binary_runs_end_to_end_with_a_trained_dssm_det(
    trained_export, tmp_path):
  workdir = str(tmp_path / "plan")
  command = [sys.executable, "-m", "i2a.plan",
             "--config=configs/agents/planning.py:tiny",
             f"--config.envmodel={trained_export}", f"--workdir={workdir}"]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  result = subprocess.run(command, cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert re.search(r"plan dssm_det: .* env steps/s, ETA", result.stderr)
  scores = json.load(open(os.path.join(workdir, "eval", "scores.json")))
  assert scores["episodes"] == 2 and len(scores["returns"]) == 2
  assert scores["env_steps"] == sum(scores["lengths"]) > 0
  assert scores["plan_seconds_per_env_step"] > 0
  assert scores["model_spec"]["kind"] == "dssm_det"
  assert scores["protocol_source"] == os.path.join(
      os.path.dirname(trained_export), "protocol.json")
  for name in ("config.json", "protocol.json", "eval/episode_000.gif",
               "eval/episode_000.png"):
    assert os.path.exists(os.path.join(workdir, name)), name


def test_planning_with_the_oracle_writes_scores_and_a_video(tmp_path):
  config = planning_config.get_config("tiny")
  config.envmodel = "oracle"
  scores = running.run(config, str(tmp_path))
  assert scores["model_spec"]["kind"] == "oracle"
  assert scores["protocol_source"] == "config"
  assert len(scores["lengths"]) == 2 and max(scores["lengths"]) <= 16
  assert os.path.exists(tmp_path / "eval" / "episode_000.gif")


def _docs_example():
  text = open(os.path.join(REPO, "docs", "planning.md")).read()
  blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
  assert blocks, "docs/planning.md has no ```python block"
  return blocks[0]


def test_the_docs_example_runs(trained_export, monkeypatch, capsys):
  monkeypatch.setattr(sys, "argv", ["plan_example.py", trained_export])
  exec(compile(_docs_example(), "docs/planning.md", "exec"),  # pylint: disable=exec-used
       {"__name__": "__main__"})
  assert "return" in capsys.readouterr().out


@pytest.mark.parametrize("change,given", [
    (dict(observation_shape=(16, 16, 3)), r"\(16, 16, 3\)"),
    (dict(num_actions=4), r"'num_actions': 4"),
])
def test_a_misfit_export_is_refused_naming_both_specs(tmp_path, change, given):
  spec = envmodels.EnvModelSpec(kind="dssm_det",
                                observation_shape=(16, 24, 3), num_actions=5,
                                jump=1, context_length=CONTEXT)
  export_dir = _export(str(tmp_path / "pretrain"),
                       dataclasses.replace(spec, **change))
  config = planning_config.get_config("tiny")
  config.envmodel = export_dir
  workdir = tmp_path / "plan"
  with pytest.raises(ValueError) as error:
    running.run(config, str(workdir))
  message = str(error.value)
  assert re.search(r"environment has .*\(16, 24, 3\).*'num_actions': 5",
                   message), message
  assert re.search(r"model spec has .*" + given, message), message
  assert not workdir.exists()  # refused before anything was written


def test_an_export_under_another_protocol_is_refused_before_writing(
    tmp_path):
  spec = envmodels.EnvModelSpec(kind="dssm_det",
                                observation_shape=(16, 24, 3), num_actions=5,
                                jump=1, context_length=CONTEXT)
  regular = dataclasses.replace(TINY_PROTOCOL,
                                env_id="MiniPacman-regular-v0")
  export_dir = _export(str(tmp_path / "pretrain"), spec, protocol=regular)
  config = planning_config.get_config("tiny")
  config.envmodel = export_dir
  workdir = tmp_path / "plan"
  with pytest.raises(ValueError, match=r"(?s)another protocol.*"
                     r"protocol.env_id: 'MiniPacman-regular-v0' \(export\) "
                     r"vs 'MiniPacman-avoid-v0' \(config\).*"
                     r"allow_protocol_mismatch=True"):
    running.run(config, str(workdir))
  assert not workdir.exists()


# -- The public-API-only rule -------------------------------------------------


def test_planning_uses_only_the_public_envmodels_api():
  allowed_modules = {"envmodels", "envmodels.oracle"}
  allowed_names = set(envmodels.__all__) | {"oracle"}
  files = glob.glob(os.path.join(REPO, "agents", "planning", "*.py")) + [
      os.path.join(REPO, "i2a", "run", "plan.py")]  # the planner's runtime
  assert len(files) >= 4
  for path in files:
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        for alias in node.names:
          if alias.name.startswith("envmodels."):
            assert alias.name in allowed_modules, (path, alias.name)
      elif isinstance(node, ast.ImportFrom) and node.module and (
          node.module == "envmodels" or node.module.startswith("envmodels.")):
        assert node.module in allowed_modules, (path, node.module)
        if node.module == "envmodels":
          for alias in node.names:
            assert alias.name in allowed_names, (path, alias.name)
      elif (isinstance(node, ast.Attribute) and
            isinstance(node.value, ast.Name) and node.value.id == "envmodels"):
        # e.g. envmodels.state_space.SSMState without importing it.
        assert node.attr in allowed_names, (path, node.attr)
