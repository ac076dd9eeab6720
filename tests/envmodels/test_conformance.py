"""Conformance suite: every registered envmodel kind against the contract.

One list of kinds (`envmodels.kinds()`, so a newly registered kind is checked
automatically) and the same tests over all of them (the Sonnet habit):
tf.function tracing with batch-agnostic signatures, output shapes and dtypes
(envmodels.base and docs/envmodels.md, "The contract"), finite losses and
gradients, checkpoint round trip, export and load in a fresh process, frozen
loading with gradients into relaxed actions, shape errors, value errors
(float frames, out-of-range int actions, relaxed actions that are not
probability vectors, B = 0, T = 0; eagerly and inside tf.function), and what
agents read (state_features, deterministic, tile_state). Every kind is built with
its `tiny_hyperparameters()` on 16x16x3 frames.

Reusable for a kind registered outside the package: a test module that does
`from tests.envmodels.test_conformance import *` and sets
`CONFORMANCE_KINDS = ("my_kind",)` runs the whole suite over its kind
(`pytest_generate_tests` below reads it), and `CONFORMANCE_IMPORTS` names
the modules the fresh process of the export test imports to register it
(tests/test_new_model_kind.py does both).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from typing import Any, Dict

import numpy as np
import pytest
import tensorflow as tf

import envmodels

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
KINDS = tuple(k for k in envmodels.kinds()
              if envmodels.model_class(k).learned)
JUMPS = (1, 3)
FRAME = (16, 16, 3)
NUM_ACTIONS = 5
CONTEXT = 3
BATCH = 2
STEPS = 3  # T
SEED = 7
REQUIRED_METRICS = ("loss", "image_log_prob", "reward_log_prob",
                    "log_likelihood_per_frame", "reward_mse")


def make_spec(kind: str, jump: int = 1,
              action_free: bool = False) -> envmodels.EnvModelSpec:
  return envmodels.EnvModelSpec(kind=kind, observation_shape=FRAME,
                                num_actions=NUM_ACTIONS, jump=jump,
                                context_length=CONTEXT,
                                action_free=action_free)


def make_model(kind: str, jump: int = 1, seed: int = 0) -> envmodels.EnvModel:
  """A tiny model with all its variables created (eagerly: a tf.function that
  creates variables traces twice)."""
  cls = envmodels.model_class(kind)
  model = envmodels.build(make_spec(kind, jump), seed=seed,
                          **cls.tiny_hyperparameters())
  model.create_variables()
  return model


@functools.lru_cache(maxsize=None)
def cached_model(kind: str, jump: int) -> envmodels.EnvModel:
  """One model per (kind, jump) for the tests that only read it."""
  return make_model(kind, jump)


def make_context(batch: int = BATCH, seed: int = 0) -> np.ndarray:
  rng = np.random.RandomState(seed)
  return rng.randint(0, 256, (batch, CONTEXT) + FRAME).astype(np.uint8)


def make_actions(jump: int, batch: int = BATCH, steps: int = STEPS,
                 seed: int = 0) -> np.ndarray:
  rng = np.random.RandomState(seed)
  return rng.randint(0, NUM_ACTIONS, (batch, steps, jump)).astype(np.int32)


def make_batch(jump: int, batch: int = BATCH, seed: int = 0
               ) -> Dict[str, np.ndarray]:
  rng = np.random.RandomState(seed)
  length = CONTEXT + STEPS
  return {
      "observation": rng.randint(0, 256, (batch, length) + FRAME).astype(
          np.uint8),
      "action": rng.randint(0, NUM_ACTIONS, (batch, length, jump)).astype(
          np.int32),
      "reward": rng.choice([0.0, 1.0, -1.0, 2.0], (batch, length)).astype(
          np.float32),
      "discount": np.ones((batch, length), np.float32),
  }


def batch_signature(jump: int) -> Dict[str, tf.TensorSpec]:
  length = CONTEXT + STEPS
  return {
      "observation": tf.TensorSpec((None, length) + FRAME, tf.uint8),
      "action": tf.TensorSpec((None, length, jump), tf.int32),
      "reward": tf.TensorSpec((None, length), tf.float32),
      "discount": tf.TensorSpec((None, length), tf.float32),
  }


def state_signature(state: Any) -> Any:
  """The state nest as TensorSpecs with a None batch axis."""
  return tf.nest.map_structure(
      lambda t: tf.TensorSpec([None] + t.shape[1:].as_list(), t.dtype), state)


def trace(function, signature=None):
  """tf.function without autograph: the contract asks for code without
  tensor-dependent Python control flow, and autograph's conversion of every
  module costs seconds per trace. `test_step_traces_under_autograph` covers
  the default tf.function."""
  return tf.function(function, input_signature=signature, autograph=False)


def one_hot_actions(actions: np.ndarray) -> tf.Tensor:
  return tf.one_hot(actions, NUM_ACTIONS, dtype=tf.float32)


def rollout_outputs(model: envmodels.EnvModel, context: np.ndarray,
                    actions: Any) -> Dict[str, np.ndarray]:
  rollout = model.rollout(model.initial_state(context), actions, render=True)
  return {"features": rollout.features.numpy(),
          "rewards": rollout.rewards.numpy(), "frames": rollout.frames.numpy()}


def assert_all_finite(name: str, value: tf.Tensor) -> None:
  assert np.all(np.isfinite(np.asarray(value))), f"{name} is not finite"


def pytest_generate_tests(metafunc):
  """Parametrizes every test by `kind` (and `jump`): the module's
  CONFORMANCE_KINDS when it sets them (a kind from outside the package),
  else every learned registered kind."""
  kinds = getattr(metafunc.module, "CONFORMANCE_KINDS", None) or KINDS
  names = metafunc.fixturenames
  if "kind" in names and "jump" in names:
    metafunc.parametrize("kind,jump", [
        pytest.param(kind, jump, id=f"{kind}-jump{jump}")
        for kind in kinds for jump in JUMPS])
  elif "kind" in names:
    metafunc.parametrize("kind", kinds)


# -- Construction ------------------------------------------------------------


def test_hyperparameters_are_json_and_rebuild_the_same_architecture(kind):
  import json
  model = make_model(kind)
  hyperparameters = json.loads(json.dumps(model.hyperparameters))
  rebuilt = type(model)(model.spec, seed=1, **hyperparameters)
  rebuilt.create_variables()
  assert rebuilt.hyperparameters == model.hyperparameters
  assert ([(v.name, v.shape) for v in rebuilt.variables] ==
          [(v.name, v.shape) for v in model.variables])


# -- Tracing, shapes and dtypes ----------------------------------------------


def test_step_and_render_trace_batch_agnostic_with_contract_shapes(kind, jump):
  model = cached_model(kind, jump)
  height, width, channels = FRAME
  initial_state = trace(model.initial_state, [
      tf.TensorSpec((None, CONTEXT) + FRAME, tf.uint8)])
  state = initial_state(make_context())
  signature = state_signature(state)
  step_int = trace(model.step, [signature,
                                tf.TensorSpec([None, jump], tf.int32)])
  step_relaxed = trace(model.step, [
      signature, tf.TensorSpec([None, jump, NUM_ACTIONS], tf.float32)])
  render = trace(model.render, [signature])

  for batch in (BATCH, 1):  # the same traces serve any batch size
    state = initial_state(make_context(batch))
    actions = make_actions(jump, batch)[:, 0]  # [B, c]
    for step, step_actions in ((step_int, actions),
                               (step_relaxed, one_hot_actions(actions))):
      new_state, out = step(state, step_actions)
      tf.nest.assert_same_structure(new_state, state)
      assert out.reward.dtype == tf.float32
      assert out.reward.shape == (batch,)
      assert out.features.dtype == tf.float32
      assert out.features.shape.rank == 4
      assert out.features.shape[0] == batch
      assert_all_finite("reward", out.reward)
      assert_all_finite("features", out.features)
      frames = render(new_state)
      assert frames.dtype == tf.float32
      assert frames.shape == (batch, height, width, channels)
      assert np.all((frames.numpy() >= 0.0) & (frames.numpy() <= 1.0))
  # Static shapes inside the traces keep everything but the batch axis.
  concrete = step_int.get_concrete_function()
  reward_spec, features_spec = concrete.structured_outputs[1]
  assert reward_spec.shape.as_list() == [None]
  assert features_spec.shape[1:].is_fully_defined()
  assert render.get_concrete_function().structured_outputs.shape.as_list() == [
      None, height, width, channels]


def test_rollout_stacks_features_rewards_and_frames(kind, jump):
  model = cached_model(kind, jump)
  state = model.initial_state(make_context())
  rollout = lambda s, a: model.rollout(s, a, render=True)
  if jump == 1:  # jump 3 eager: a rollout is a loop of the step traced above
    rollout = trace(rollout, [state_signature(state),
                              tf.TensorSpec([None, STEPS, jump], tf.int32)])
  result = rollout(state, make_actions(jump))
  _, out = model.step(state, make_actions(jump)[:, 0])
  assert result.features.shape == (BATCH, STEPS) + tuple(out.features.shape[1:])
  assert result.rewards.shape == (BATCH, STEPS)
  assert result.frames.shape == (BATCH, STEPS) + FRAME
  assert result.features.dtype == result.rewards.dtype == tf.float32
  assert result.frames.dtype == tf.float32
  assert_all_finite("rollout features", result.features)
  assert_all_finite("rollout rewards", result.rewards)
  no_frames = model.rollout(state, make_actions(jump))
  assert no_frames.frames is None


def test_step_traces_under_autograph(kind):
  model = cached_model(kind, 1)
  state = model.initial_state(make_context())
  step = tf.function(model.step, input_signature=[
      state_signature(state), tf.TensorSpec([None, 1], tf.int32)])
  _, out = step(state, make_actions(1)[:, 0])
  assert out.reward.shape == (BATCH,)
  assert_all_finite("reward", out.reward)


def test_int_and_one_hot_actions_step_identically(kind):
  model = cached_model(kind, 1)
  state = model.initial_state(make_context())
  actions = make_actions(1)[:, 0]  # [B, 1]
  outputs = []
  # [B, c], [B], [B, c, A], [B, A]
  for query in (actions, actions[:, 0], one_hot_actions(actions),
                one_hot_actions(actions[:, 0])):
    model.reseed(SEED)
    _, out = model.step(state, query)
    outputs.append((out.reward.numpy(), out.features.numpy()))
  for reward, features in outputs[1:]:
    np.testing.assert_allclose(reward, outputs[0][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(features, outputs[0][1], rtol=1e-5, atol=1e-6)


# -- Training ----------------------------------------------------------------


def test_loss_is_finite_with_gradients_for_every_variable(
    kind, jump):
  model = make_model(kind, jump)

  def loss_and_gradients(batch):
    with tf.GradientTape() as tape:
      output = model.loss(batch)
    return output, tape.gradient(output.loss, model.trainable_variables)

  if jump == 1:
    loss_and_gradients = trace(loss_and_gradients, [batch_signature(jump)])
  # else eager: tracing the loss costs seconds and jump only changes shapes.
  output, gradients = loss_and_gradients(make_batch(jump))
  assert output.loss.shape == ()
  assert_all_finite("loss", output.loss)
  missing = [name for name in REQUIRED_METRICS if name not in output.metrics]
  assert not missing, f"metrics lack {missing}"
  for name, value in output.metrics.items():
    assert value.shape == (), f"metric {name} is not a scalar"
    assert_all_finite(f"metric {name}", value)
  variables = model.trainable_variables
  assert variables, "the model has no trainable variables after its loss"
  no_gradient = [v.name for v, g in zip(variables, gradients) if g is None]
  assert not no_gradient, f"no gradient for {no_gradient}"
  for variable, gradient in zip(variables, gradients):
    assert_all_finite(f"gradient of {variable.name}", gradient)


def test_diagnostics_give_pictures_of_predicted_frames_and_rewards(kind):
  model = cached_model(kind, 1)
  pictures = model.diagnostics(make_batch(1))
  for name in ("closed_loop", "one_step_prior", "open_loop"):
    assert pictures[name].shape == (BATCH, STEPS) + FRAME, name
    values = pictures[name].numpy()
    assert np.all((values >= 0.0) & (values <= 1.0)), name
  for name in ("open_loop_reward", "true_reward"):
    assert pictures[name].shape == (BATCH, STEPS), name
    assert_all_finite(name, pictures[name])


# -- Saving, exporting, loading ----------------------------------------------


def test_checkpoint_round_trip_gives_identical_outputs(kind, tmp_path):
  source = make_model(kind, seed=0)
  prefix = tf.train.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
  target = make_model(kind, seed=1)
  tf.train.Checkpoint(model=target).read(prefix).assert_consumed()
  context, actions = make_context(), make_actions(1)
  source.reseed(SEED)
  target.reseed(SEED)
  expected = rollout_outputs(source, context, actions)
  actual = rollout_outputs(target, context, actions)
  for name in expected:
    np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


_LOAD_SCRIPT = textwrap.dedent("""
    import importlib, os, sys, traceback
    import numpy as np
    import envmodels
    root, seed = sys.argv[1], int(sys.argv[2])
    for name in filter(None, sys.argv[3].split(",")):
      importlib.import_module(name)  # registers kinds from outside
    for kind in sys.argv[4:]:
      out = os.path.join(root, "loaded_" + kind)
      os.makedirs(out)
      try:
        model = envmodels.load(os.path.join(root, kind), seed=seed)
        context = np.load(os.path.join(root, kind + "_context.npy"))
        actions = np.load(os.path.join(root, kind + "_actions.npy"))
        rollout = model.rollout(model.initial_state(context), actions,
                                render=True)
        np.save(os.path.join(out, "features.npy"), rollout.features.numpy())
        np.save(os.path.join(out, "rewards.npy"), rollout.rewards.numpy())
        np.save(os.path.join(out, "frames.npy"), rollout.frames.numpy())
        np.save(os.path.join(out, "num_trainable.npy"),
                len(model.trainable_variables))
      except Exception:
        with open(os.path.join(out, "error.txt"), "w") as f:
          f.write(traceback.format_exc())
""")


@pytest.fixture(scope="module")
def loaded_in_subprocess(request, tmp_path_factory):
  """Exports every kind, loads all of them in ONE fresh Python process (one
  TensorFlow import) and returns (root, expected rollouts, process)."""
  kinds = getattr(request.module, "CONFORMANCE_KINDS", None) or KINDS
  imports = getattr(request.module, "CONFORMANCE_IMPORTS", ())
  root = tmp_path_factory.mktemp("exports")
  expected = {}
  for kind in kinds:
    model = make_model(kind)
    envmodels.export(model, str(root / kind))
    context, actions = make_context(seed=1), make_actions(1, seed=1)
    np.save(root / f"{kind}_context.npy", context)
    np.save(root / f"{kind}_actions.npy", actions)
    model.reseed(SEED)
    expected[kind] = rollout_outputs(model, context, actions)
  python_path = [REPO_ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=os.pathsep.join(python_path))
  process = subprocess.run(
      [sys.executable, "-c", _LOAD_SCRIPT, str(root), str(SEED),
       ",".join(imports), *kinds],
      env=env, capture_output=True, text=True, timeout=600, check=False)
  return root, expected, process


def test_export_then_load_in_a_fresh_process_gives_identical_rollouts(
    kind, loaded_in_subprocess):
  root, expected, process = loaded_in_subprocess
  assert process.returncode == 0, process.stderr[-3000:]
  out = root / f"loaded_{kind}"
  error = out / "error.txt"
  assert not error.exists(), error.read_text()
  assert int(np.load(out / "num_trainable.npy")) == 0
  for name, value in expected[kind].items():
    np.testing.assert_array_equal(np.load(out / f"{name}.npy"), value,
                                  err_msg=name)


def test_loaded_model_is_frozen_and_passes_gradients_to_relaxed_actions(
    kind, tmp_path):
  model = make_model(kind)
  envmodels.export(model, str(tmp_path / "export"))
  loaded = envmodels.load(str(tmp_path / "export"), seed=SEED)
  assert loaded.spec == model.spec
  assert len(loaded.trainable_variables) == 0
  assert len(loaded.variables) == len(model.variables)
  relaxed = tf.Variable(tf.nn.softmax(tf.random.stateless_normal(
      [BATCH, STEPS, 1, NUM_ACTIONS], seed=[1, 2])))
  with tf.GradientTape(persistent=True) as tape:
    rollout = loaded.rollout(loaded.initial_state(make_context()), relaxed,
                             render=True)
    total = (tf.reduce_sum(rollout.features) + tf.reduce_sum(rollout.rewards)
             + tf.reduce_sum(rollout.frames))
  frozen = tape.gradient(total, loaded.variables)
  assert all(g is None for g in frozen), "the frozen model has gradients"
  gradient = tape.gradient(total, relaxed)
  if not loaded.uses_actions:
    assert gradient is None or not np.any(gradient.numpy())
    return
  assert gradient is not None
  assert_all_finite("gradient of the relaxed actions", gradient)
  assert np.any(gradient.numpy() != 0.0)


# -- What agents read: state_features, deterministic, tile_state -------------


def check_agent_contract(model: envmodels.EnvModel, state: Any,
                         actions: Any) -> None:
  """The contract methods agents use, on `state` (B rows) and one step's
  `actions`: state_features gives float32 [B, h, w, d] with the step
  features' shape, equal to a step's features for the state it reached;
  tile_state repeats rows (b * K + k = row b) and the tiled state steps
  like the original; two steps with different noise keys give equal
  outputs iff `model.deterministic`. Shared with tests/envmodels/
  test_oracle.py (the oracle, a LiveEnvModel)."""
  assert isinstance(model.deterministic, bool)
  batch = int(tf.nest.flatten(state)[0].shape[0])
  keys = tf.constant([[1, 2]] * batch, tf.int32)
  new_state, out = model.step(state, actions, noise=keys)
  initial = model.state_features(state)
  assert initial.dtype == tf.float32
  assert initial.shape == out.features.shape, (initial.shape,
                                               out.features.shape)
  assert_all_finite("state_features", initial)
  reached = model.state_features(new_state)
  np.testing.assert_allclose(reached.numpy(), out.features.numpy(),
                             rtol=1e-5, atol=1e-6)
  # tile_state: [B, ...] -> [B * K, ...], row b * K + k a copy of row b.
  k = 3
  tiled = model.tile_state(state, k)
  tf.nest.assert_same_structure(tiled, state)
  for original, repeated in zip(tf.nest.flatten(state),
                                tf.nest.flatten(tiled)):
    assert repeated.shape[0] == batch * k
    np.testing.assert_array_equal(
        repeated.numpy(), np.repeat(original.numpy(), k, axis=0))
  _, tiled_out = model.step(tiled, np.repeat(np.asarray(actions), k, axis=0),
                            noise=tf.repeat(keys, k, axis=0))
  np.testing.assert_allclose(tiled_out.reward.numpy(),
                             np.repeat(out.reward.numpy(), k, axis=0),
                             rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="multiples must be a positive int"):
    model.tile_state(state, 0)
  # The determinism claim, both ways.
  other_state, other = model.step(state, actions, noise=keys + 7)
  same = (np.allclose(other.reward.numpy(), out.reward.numpy()) and
          np.allclose(other.features.numpy(), out.features.numpy()) and
          np.allclose(model.render(other_state).numpy(),
                      model.render(new_state).numpy()))
  assert same == model.deterministic, (
      f"{model.spec.kind}: deterministic={model.deterministic}, but steps "
      f"with different noise keys give {'equal' if same else 'different'} "
      "outputs")


def test_agent_contract_state_features_tile_state_and_determinism(
    kind, jump):
  model = cached_model(kind, jump)
  state = model.initial_state(make_context())
  check_agent_contract(model, state, make_actions(jump)[:, 0])


def test_state_features_trace_batch_agnostic(kind):
  model = cached_model(kind, 1)
  state = model.initial_state(make_context())
  features = trace(model.state_features, [state_signature(state)])
  for batch in (BATCH, 1):
    out = features(model.initial_state(make_context(batch)))
    assert out.shape[0] == batch and out.dtype == tf.float32
  assert features.get_concrete_function().structured_outputs.shape[
      1:].is_fully_defined()


def test_context_encodings_give_the_initial_state_of_the_frames(kind):
  """Models that encode context frames one by one: the encodings of each
  frame, stacked, give initial_state's state; others refuse clearly."""
  model = cached_model(kind, 1)
  context = make_context()  # [B, k, H, W, C]
  if not model.encodes_context_frames:
    with pytest.raises(NotImplementedError,
                       match="does not encode its context frames"):
      model.encode_context_frames(context[:, 0])
    return
  encode = trace(model.encode_context_frames,
                 [tf.TensorSpec((None,) + FRAME, tf.uint8)])
  encodings = tf.stack([encode(context[:, i]) for i in range(CONTEXT)], 1)
  assert encodings.shape[:2] == (BATCH, CONTEXT)
  assert encodings.dtype == tf.float32
  expected = model.initial_state(context)
  tf.nest.map_structure(
      lambda a, b: np.testing.assert_allclose(a.numpy(), b.numpy(),
                                              atol=1e-5),
      model.initial_state_from_encodings(encodings), expected)
  with pytest.raises(ValueError, match=r"\[B, 3, \.\.\.\]"):
    model.initial_state_from_encodings(encodings[:, :2])
  with pytest.raises(ValueError, match="16, 16, 3"):
    model.encode_context_frames(context)  # a window, not frames
  with pytest.raises(ValueError, match="expected uint8 frames"):
    model.encode_context_frames(context[:, 0].astype(np.float32))


# -- Shape errors ------------------------------------------------------------


def _bad_call(model: envmodels.EnvModel, case: str):
  """(function, args, expected shape text, given shape text)."""
  context = make_context()
  if case == "context_length":
    bad = np.zeros((BATCH, CONTEXT + 1) + FRAME, np.uint8)
    return model.initial_state, (bad,), "3, 16, 16, 3", "2, 4, 16, 16, 3"
  if case == "frame_size":
    bad = np.zeros((BATCH, CONTEXT, 24, 16, 3), np.uint8)
    return model.initial_state, (bad,), "3, 16, 16, 3", "2, 3, 24, 16, 3"
  state = model.initial_state(context)
  if case == "int_action_shape":
    bad = np.zeros((BATCH, 2), np.int32)
    return model.step, (state, bad), "[B, 1]", "[2, 2]"
  if case == "relaxed_action_shape":
    bad = np.full((BATCH, 1, NUM_ACTIONS + 1), 1.0 / (NUM_ACTIONS + 1),
                  np.float32)
    return model.step, (state, bad), "[B, 1, 5]", "[2, 1, 6]"
  raise AssertionError(case)


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
@pytest.mark.parametrize("case", ["context_length", "frame_size",
                                  "int_action_shape", "relaxed_action_shape"])
def test_bad_shapes_raise_value_error_naming_expected_and_given(
    kind, case, mode):
  model = cached_model(kind, 1)
  function, args, expected, given = _bad_call(model, case)
  if mode == "tf_function":
    function = tf.function(function)  # the default, with autograph
  with pytest.raises(ValueError) as error:
    function(*args)
  message = str(error.value)
  assert expected in message, message
  assert given in message, message


# -- Value errors --------------------------------------------------------------


def _bad_value_call(model: envmodels.EnvModel, case: str, mode: str):
  """(function, args, expected text, given text) for a call whose shapes
  are right but whose values are not. The tf.function traces leave the
  batch axis open (None), so what is static eagerly is checked at run time
  there."""
  state = model.initial_state(make_context())
  signature = state_signature(state)
  graph = mode == "tf_function"

  def step(spec):
    return (trace(model.step, [signature, spec]) if graph else model.step)

  if case == "float_frames":  # [0, 1] floats would be read as 0-255
    frames = make_context().astype(np.float32) / 255.0
    function = (trace(model.initial_state, [tf.TensorSpec(
        (None, CONTEXT) + FRAME, tf.float32)]) if graph
                else model.initial_state)
    return function, (frames,), "expected uint8 frames", "given float32"
  if case == "empty_batch":
    frames = np.zeros((0, CONTEXT) + FRAME, np.uint8)
    function = (trace(model.initial_state, [tf.TensorSpec(
        (None, CONTEXT) + FRAME, tf.uint8)]) if graph
                else model.initial_state)
    return function, (frames,), "expected a batch of B > 0 rows", "0"
  int_spec = tf.TensorSpec([None, 1], tf.int32)
  relaxed_spec = tf.TensorSpec([None, 1, NUM_ACTIONS], tf.float32)
  for value in (5, 10**6, -1):
    if case == f"int_action_{value}":
      return (step(int_spec), (state, np.full([BATCH, 1], value, np.int32)),
              "expected action indices in [0, 5)", str(value))
  if case == "empty_action_batch":
    return (step(int_spec), (state, np.zeros([0, 1], np.int32)),
            "expected a batch of B > 0 rows", "0")
  relaxed = np.full([BATCH, 1, NUM_ACTIONS], 1.0 / NUM_ACTIONS, np.float32)
  if case == "relaxed_nan":
    relaxed[0, 0, 2] = np.nan
    return (step(relaxed_spec), (state, relaxed),
            "finite, >= 0, each [c] row summing to 1", "1")
  if case == "relaxed_inf":
    relaxed[1, 0, 0] = np.inf
    return (step(relaxed_spec), (state, relaxed),
            "finite, >= 0, each [c] row summing to 1", "NaN/infinite")
  if case == "relaxed_negative":
    relaxed[0, 0] = [-0.5, 1.5, 0.0, 0.0, 0.0]
    return (step(relaxed_spec), (state, relaxed),
            "finite, >= 0, each [c] row summing to 1", "-0.5")
  if case == "relaxed_unnormalised":
    relaxed[:] = 1.0
    return (step(relaxed_spec), (state, relaxed),
            "finite, >= 0, each [c] row summing to 1", "4")
  if case == "rollout_zero_steps":
    function = lambda s, a: model.rollout(s, a)
    if graph:
      function = trace(function, [signature,
                                  tf.TensorSpec([None, 0, 1], tf.int32)])
    return (function, (state, np.zeros([BATCH, 0, 1], np.int32)),
            "expected T >= 1 steps", "[2, 0, 1]" if not graph else "0")
  raise AssertionError(case)


VALUE_CASES = ["float_frames", "empty_batch", "int_action_5",
               "int_action_1000000", "int_action_-1", "empty_action_batch",
               "relaxed_nan", "relaxed_inf", "relaxed_negative",
               "relaxed_unnormalised", "rollout_zero_steps"]


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
@pytest.mark.parametrize("case", VALUE_CASES)
def test_bad_values_raise_clear_errors_naming_expected_and_given(
    kind, case, mode):
  """Eagerly a ValueError; inside tf.function what only run-time values
  show is an InvalidArgumentError carrying the same text (shapes, dtypes
  and a static T stay ValueErrors at trace time)."""
  model = cached_model(kind, 1)
  function, args, expected, given = _bad_value_call(model, case, mode)
  errors = (ValueError, tf.errors.InvalidArgumentError)
  with pytest.raises(errors) as error:
    function(*args)
  static = case in ("float_frames", "rollout_zero_steps")
  if mode == "eager" or static:
    assert isinstance(error.value, ValueError), error.value
  else:
    assert isinstance(error.value, tf.errors.InvalidArgumentError)
  message = str(error.value)
  assert expected in message, message
  assert given in message, message


def test_valid_relaxed_actions_pass_the_value_checks(kind):
  """Softmax rows (float32 and bfloat16), straight-through one-hots and
  rows off 1 by rounding only are accepted."""
  model = cached_model(kind, 1)
  state = model.initial_state(make_context())
  logits = tf.random.stateless_normal([BATCH, 1, NUM_ACTIONS], seed=[3, 4])
  soft = tf.nn.softmax(logits)
  hard = tf.one_hot(tf.argmax(soft, -1), NUM_ACTIONS)
  for actions in (soft, tf.cast(soft, tf.bfloat16),
                  hard + soft - tf.stop_gradient(soft), soft * (1 + 1e-4)):
    _, out = model.step(state, actions)
    assert out.reward.shape == (BATCH,)


def test_value_checks_can_be_turned_off_for_measurements_only():
  from envmodels import base
  model = cached_model(KINDS[0], 1)
  state = model.initial_state(make_context())
  bad = np.full([BATCH, 1], NUM_ACTIONS, np.int32)
  with base.value_checks(False):
    model.step(state, bad)  # the old behaviour: an all-zero one-hot
  with pytest.raises(ValueError, match=r"expected action indices in \[0, 5\)"):
    model.step(state, bad)
