"""Tests of reduced precision (envmodels/precision.py): what 'auto' means on
this machine, what is refused, and that bf16 rollouts of a model stay within
stated tolerances of fp32 ones; the thread pool settings, and the workdir's
record of both."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from envmodels import precision
from tests import fakes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
needs_bf16 = fakes.needs_bf16


def test_auto_is_bf16_exactly_where_the_cpu_computes_it():
  expected = ("bf16" if precision.cpu_has_bf16() and
              not tf.config.list_physical_devices("GPU") else "fp32")
  assert precision.resolve("auto") == expected
  assert precision.resolve("fp32") == "fp32"
  with pytest.raises(ValueError, match="precision must be one of"):
    precision.resolve("float16")
  if not tf.config.list_physical_devices("GPU"):
    with pytest.raises(ValueError, match="no GPU"):
      precision.resolve("fp16")


def test_the_environment_pins_what_auto_means(monkeypatch, tmp_path):
  from configs.agents import a2c as a2c_config  # pylint: disable=import-outside-toplevel
  from i2a import runs  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv(precision.AUTO_ENV, "fp32")
  assert precision.resolve("auto") == "fp32"
  config = a2c_config.get_config("small")
  try:
    assert runs.use_precision(config) == "fp32"
    runs.prepare_workdir(str(tmp_path), config, None)
  finally:
    precision.set_precision("fp32")
  record = json.loads((tmp_path / runs.PRECISION).read_text())
  assert (record["requested"], record["resolved"],
          record["auto_pinned"]) == ("auto", "fp32", "fp32")
  if not tf.config.list_physical_devices("GPU"):
    monkeypatch.setenv(precision.AUTO_ENV, "fp16")
    with pytest.raises(ValueError, match="no GPU"):
      precision.resolve("auto")
    assert precision.resolve("fp32") == "fp32"  # only 'auto' is pinned
  monkeypatch.setenv(precision.AUTO_ENV, "half")
  with pytest.raises(ValueError, match=r"I2A_AUTO_PRECISION='half': "
                     r"expected one of \('fp32', 'bf16', 'fp16'\)"):
    precision.resolve("auto")
  monkeypatch.delenv(precision.AUTO_ENV)
  assert precision.auto_pin() == ""


def test_scope_sets_and_restores_the_process_precision():
  assert precision.current() == "fp32"
  with precision.scope("auto") as resolved:
    assert precision.current() == resolved == precision.resolve("auto")
  assert precision.current() == "fp32"


def _rollouts(model, context, actions, keys):
  @tf.function
  def run(context, actions, keys):
    state = model.initial_state(context)
    features, rewards, frames = [], [], []
    for t in range(actions.shape[1]):
      state, out = model.step(state, actions[:, t], noise=keys[t])
      features.append(out.features)
      rewards.append(out.reward)
      frames.append(model.render(state))
    return tf.stack(features, 1), tf.stack(rewards, 1), tf.stack(frames, 1)
  return [x.numpy() for x in run(context, actions, keys)]


@needs_bf16
@pytest.mark.parametrize("kind", ["dssm_det", "sssm"])
def test_bf16_rollouts_stay_within_tolerance_of_fp32(kind):
  spec = envmodels.EnvModelSpec(kind=kind, observation_shape=(32, 24, 3),
                                num_actions=5, jump=1, context_length=3)
  model = envmodels.build(spec, seed=0, state_channels=32,
                          hidden_channels=16, encoder_channels=32,
                          reward_bits=6, reward_scale=1.0,
                          **({"latent_channels": 8} if kind == "sssm" else {}))
  rng = np.random.RandomState(0)
  context = tf.constant(rng.randint(0, 256, (16, 3, 32, 24, 3)), tf.uint8)
  actions = tf.constant(rng.randint(0, 5, (16, 3, 1)), tf.int32)
  keys = tf.constant(rng.randint(-2**31, 2**31 - 1, (3, 16, 2)), tf.int32)
  exact = _rollouts(model, context, actions, keys)
  with precision.scope("bf16"):
    reduced = _rollouts(model, context, actions, keys)
  features, rewards, frames = exact
  relative = (np.linalg.norm(reduced[0] - features) /
              np.linalg.norm(features))
  assert 1e-5 < relative < 0.03  # bf16 did run, and stayed close
  np.testing.assert_allclose(reduced[1], rewards, atol=0.05 * max(
      1.0, np.abs(rewards).max()))
  assert np.abs(reduced[2] - frames).max() < 0.05  # pixel intensities


@needs_bf16
def test_relaxed_actions_of_a_reduced_precision_run_pass_the_value_check():
  """Under the bf16 rewrite a float32 softmax is computed in bf16: its
  rows sum to 1 within ~1e-2, which the check accepts there (and only
  there); unnormalised rows are refused either way."""
  spec = envmodels.EnvModelSpec(kind="dssm_det", observation_shape=(16, 16, 3),
                                num_actions=5, jump=1, context_length=3)
  model = envmodels.build(
      spec, seed=0, **envmodels.model_class("dssm_det").tiny_hyperparameters())
  state = model.initial_state(np.zeros((2, 3, 16, 16, 3), np.uint8))
  rounded = np.full((2, 5), 0.2, np.float32)
  rounded[:, 0] += 0.005  # rows off 1 by 0.005, as bf16 softmaxes were
  with pytest.raises(ValueError, match="summing to 1 within 0.001"):
    model.step(state, rounded)
  with precision.scope("bf16"):
    model.step(state, rounded)  # accepted
    with pytest.raises(ValueError, match="summing to 1 within 0.02"):
      model.step(state, np.ones((2, 5), np.float32))


def test_runs_record_the_precision_they_computed_in(tmp_path):
  from configs.agents import a2c as a2c_config  # pylint: disable=import-outside-toplevel
  from i2a import runs  # pylint: disable=import-outside-toplevel
  config = a2c_config.get_config("small")
  assert config.precision == "auto"
  resolved = runs.use_precision(config)
  runs.prepare_workdir(str(tmp_path), config, None)
  record = json.loads((tmp_path / runs.PRECISION).read_text())
  assert record["requested"] == "auto" and record["resolved"] == resolved
  assert precision.current() == resolved
  assert record["threads"] == "auto"
  assert record["physical_cores"] == precision.physical_cores()
  assert {"intra_op_threads", "inter_op_threads",
          "logical_cpus"} <= set(record)


def test_auto_threads_one_per_op_on_small_avx512_machines(monkeypatch):
  cores = precision.physical_cores()
  assert 1 <= cores <= (os.cpu_count() or 1)
  one = (cores <= precision.SMALL_MACHINE_CORES and
         "avx512f" in precision.cpu_flags())
  assert precision.resolve_threads("auto") == ((1, cores) if one
                                               else (cores, 2))
  avx512 = frozenset({"avx2", "avx512f", "avx512_bf16"})
  avx2 = frozenset({"avx2", "fma"})
  for machine, flags, pools in (
      (1, avx512, (1, 1)), (2, avx512, (1, 2)), (4, avx512, (1, 4)),
      (8, avx512, (8, 2)), (32, avx512, (32, 2)),
      (1, avx2, (1, 2)), (2, avx2, (2, 2)), (8, avx2, (8, 2))):
    monkeypatch.setattr(precision, "physical_cores", lambda m=machine: m)
    monkeypatch.setattr(precision, "cpu_flags", lambda f=flags: f)
    assert precision.resolve_threads("auto") == pools, (machine, flags)
  monkeypatch.undo()
  assert precision.resolve_threads("default") == (0, 0)
  assert precision.resolve_threads("3,2") == (3, 2)
  for bad in ("", "2", "0,1", "2,-1", "two,1", "1,2,3"):
    with pytest.raises(ValueError, match=r"threads must be 'auto', 'default' "
                       r"or 'INTRA,INTER' .* given " + repr(bad)):
      precision.resolve_threads(bad)


@pytest.mark.slow  # a fresh process imports TensorFlow: 5-50 s
def test_threads_are_set_in_a_fresh_process():
  script = ("from envmodels import precision; import json; "
            "print(json.dumps(precision.set_threads('1,2')))")
  out = subprocess.run([sys.executable, "-c", script], check=True,
                       capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                            "PYTHONPATH": ROOT})
  record = json.loads(out.stdout.strip().splitlines()[-1])
  assert (record["intra_op_threads"], record["inter_op_threads"],
          record["threads"]) == (1, 2, "1,2")


def test_threads_are_refused_once_tensorflow_started_except_auto():
  tf.constant(1.0) + 1.0  # pylint: disable=expression-not-assigned
  running = (tf.config.threading.get_intra_op_parallelism_threads(),
             tf.config.threading.get_inter_op_parallelism_threads())
  asked = "7,5" if running != (7, 5) else "6,5"
  with pytest.raises(ValueError, match=f"threads='{asked}' asks for .* "
                     "TensorFlow has already started"):
    precision.set_threads(asked)
  record = precision.set_threads("auto")  # keeps the running pools
  assert (record["intra_op_threads"], record["inter_op_threads"]) == running


def test_a_run_resumes_with_other_threads_and_from_before_the_field(
    tmp_path):
  from configs.agents import a2c as a2c_config  # pylint: disable=import-outside-toplevel
  from i2a import runs  # pylint: disable=import-outside-toplevel
  config = a2c_config.get_config("tiny")
  runs.prepare_workdir(str(tmp_path), config, None)
  config.threads = "1,1"
  runs.prepare_workdir(str(tmp_path), config, None)  # speed only: resumes
  saved = json.loads((tmp_path / runs.CONFIG).read_text())
  del saved["threads"]  # a workdir made before the field existed
  (tmp_path / runs.CONFIG).write_text(json.dumps(saved))
  runs.prepare_workdir(str(tmp_path), config, None)
  config.seed += 1
  with pytest.raises(ValueError, match="seed: 0 -> 1"):
    runs.prepare_workdir(str(tmp_path), config, None)
