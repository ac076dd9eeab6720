"""benchmarks/export_xla.py: programs exported as XLA HLO with everything
the timing side (benchmarks/xla_speed.py, without TensorFlow) needs."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import export_xla, xla_inputs

def test_recipes_draw_the_same_values_every_time():
  ints = xla_inputs.randint([3, 4], -2**31, 2**31 - 1, "int32", 2)
  a, b = xla_inputs.draw(ints), xla_inputs.draw(ints)
  assert a.dtype == np.int32 and a.shape == (3, 4)
  np.testing.assert_array_equal(a, b)
  frames = xla_inputs.draw(xla_inputs.randint([100], 0, 256, "uint8", 0))
  assert frames.dtype == np.uint8 and frames.min() >= 0
  scaled = xla_inputs.draw(xla_inputs.normal([20000], 5, loc=2.0,
                                             scale=0.5))
  assert scaled.dtype == np.float32
  assert abs(scaled.mean() - 2.0) < 0.02 and abs(scaled.std() - 0.5) < 0.02
  ones = xla_inputs.draw(xla_inputs.constant([2, 2], 1.0, "float32"))
  np.testing.assert_array_equal(ones, np.ones([2, 2], np.float32))
  # The recipes survive the manifest's JSON.
  assert xla_inputs.draw(json.loads(json.dumps(ints))).tolist() == a.tolist()
  with pytest.raises(ValueError, match="unknown input recipe 'uniform'"):
    xla_inputs.draw(dict(draw="uniform", shape=[2], dtype="float32"))


def test_the_store_keeps_small_tensors_once_and_redraws_large_variables():
  store = export_xla.Store()
  small = np.arange(6, dtype=np.float32)
  first = store.parameter(small, None)
  assert first == store.parameter(small.copy(), tf.Variable(small))
  assert first["from"] == "captured" and len(store.arrays) == 1
  np.testing.assert_array_equal(store.arrays[first["key"]], small)
  rng = np.random.RandomState(0)
  large = tf.Variable(0.1 * rng.standard_normal(
      [200, 200]).astype(np.float32))
  drawn = store.parameter(large.numpy(), large)
  assert drawn["from"] == "drawn" and len(store.arrays) == 1
  assert drawn["recipe"]["scale"] == pytest.approx(0.1, rel=0.02)
  # The variable now holds the drawn values, so both sides agree, and
  # the same variable captured again gets the same recipe.
  np.testing.assert_array_equal(large.numpy(),
                                xla_inputs.draw(drawn["recipe"]))
  assert store.parameter(large.numpy(), large) == drawn
  zeros = tf.Variable(tf.zeros([200, 200]))
  assert store.parameter(zeros.numpy(), zeros)["recipe"] == (
      xla_inputs.constant([200, 200], 0.0, "float32"))


def test_an_exported_program_names_a_source_for_every_hlo_parameter(
    tmp_path):
  weights = tf.Variable(np.full([4, 3], 0.5, np.float32))
  bias = tf.constant(np.arange(3, dtype=np.float32))

  @tf.function(jit_compile=True)
  def fn(x, scale):
    return tf.matmul(x, weights) * scale + bias, tf.reduce_sum(x)

  x = tf.constant(np.ones([2, 4], np.float32))
  scale = tf.constant(2.0)
  store = export_xla.Store()
  sources = [{"from": "input", "name": "x"}, {"from": "input",
                                              "name": "scale"}]
  entry = export_xla.export(str(tmp_path), store, "tiny", fn, (x, scale),
                            sources, [weights], True, function="tiny")
  assert entry["parameters"][:2] == sources
  # The variable and the constant follow the arguments, as XLA appends
  # them, and no parameter is left without a source.
  shapes = export_xla.hlo_parameter_shapes(
      fn.experimental_get_compiler_ir(x, scale)(stage="hlo"))
  assert len(shapes) == len(entry["parameters"]) == 4
  assert shapes[:2] == [[2, 4], []]
  assert [p["from"] for p in entry["parameters"][2:]] == ["captured"] * 2
  stored = [store.arrays[p["key"]] for p in entry["parameters"][2:]]
  assert sorted(a.shape for a in stored) == [(3,), (4, 3)]
  for array in stored:
    expected = weights.numpy() if array.shape == (4, 3) else bias.numpy()
    np.testing.assert_array_equal(array, expected)
  assert os.path.getsize(tmp_path / "tiny.hlo.pb") > 0
  # Reference checksums of every output.
  out, total = fn(x, scale)
  assert entry["reference"][0]["shape"] == [2, 3]
  assert entry["reference"][0]["sum"] == pytest.approx(float(
      np.sum(out.numpy())))
  assert entry["reference"][1]["abs_sum"] == pytest.approx(8.0)
  with pytest.raises(ValueError, match="2 flattened arguments but 1"):
    export_xla.export(str(tmp_path), store, "bad", fn, (x, scale),
                      sources[:1], [weights], False)


def test_a_pretraining_step_exports_with_its_state_as_parameters(tmp_path):
  from configs import collect as collect_config  # pylint: disable=import-outside-toplevel
  from i2a.run import collect as collection  # pylint: disable=import-outside-toplevel
  config = collect_config.get_config("tiny")
  collection.run(config, str(tmp_path / "collect"))
  store = export_xla.Store()
  entry = export_xla.export_pretrain(
      str(tmp_path / "out"), store, "sssm", "sssm", 1,
      str(tmp_path / "collect" / "dataset"), 4, check=True, preset="tiny")
  assert entry["name"] == "tiny_sssm_pretrain" and entry["jump"] == 1
  assert "log_likelihood_per_frame" in entry["metric_names"]
  assert entry["metric_names"] == sorted(entry["metric_names"])
  # The batch first (sorted keys), then every variable the step reads.
  inputs = [p["name"] for p in entry["parameters"] if p["from"] == "input"]
  assert inputs == ["batch/action", "batch/discount", "batch/observation",
                    "batch/reward"]
  variables = entry["parameters"][4:]
  assert all("variable" in p for p in variables)
  # Float variables travel as recipes (redrawn per seed on the other
  # side); the random generator's state and Adam's step are captured.
  captured = [p for p in variables if p["from"] == "captured"]
  assert {str(store.arrays[p["key"]].dtype) for p in captured} == {"int64"}
  assert any("StateVar" in p["variable"] for p in captured)
  assert any(p["from"] == "drawn" and p["recipe"]["draw"] == "normal"
             for p in variables)
  assert store.large == store.LARGE  # restored after the export
  # The reference holds the metrics, computed before the update.
  assert len(entry["reference"]) == len(entry["metric_names"])
  assert all(np.isfinite(r["sum"]) for r in entry["reference"])
  assert os.path.getsize(tmp_path / "out" / "tiny_sssm_pretrain.hlo.pb") > 0
