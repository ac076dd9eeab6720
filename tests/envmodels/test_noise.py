"""Tests of stateless row-keyed noise (envmodels/noise.py) and of
`EnvModel.step(..., noise=keys)`: a row's draws depend on its key alone."""

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from envmodels import noise


def _keys(n, seed=0):
  return tf.constant(np.random.RandomState(seed).randint(
      -2**31, 2**31 - 1, (n, 2)), tf.int32)


def test_normal_noise_has_unit_moments_and_uncorrelated_rows_and_draws():
  keys = _keys(64)
  z = noise.normal(keys, [8, 8, 16]).numpy().reshape(64, -1)  # [64, 1024]
  assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
  assert abs(np.corrcoef(z[0], z[1])[0, 1]) < 0.1
  again = noise.normal(keys, [8, 8, 16], counter=1).numpy().reshape(64, -1)
  assert abs(np.corrcoef(z.ravel(), again.ravel())[0, 1]) < 0.01
  u = noise.uniform(keys, [1000]).numpy()
  assert 0.0 < u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01


def test_a_rows_noise_depends_on_its_key_alone():
  keys = _keys(10)
  u = noise.uniform(keys, [3, 4]).numpy()  # integer hashing: bit-exact
  np.testing.assert_array_equal(noise.uniform(keys[7:8], [3, 4])[0], u[7])
  z = noise.normal(keys, [3, 4]).numpy()  # log/cos: equal to an ulp or so
  alone = noise.normal(keys[7:8], [3, 4]).numpy()
  np.testing.assert_allclose(alone[0], z[7], rtol=1e-6, atol=1e-6)
  shuffled = noise.normal(tf.gather(keys, [9, 7, 0]), [3, 4]).numpy()
  np.testing.assert_allclose(shuffled[1], z[7], rtol=1e-6, atol=1e-6)
  folded = noise.fold(keys, 3)
  assert not np.array_equal(noise.normal(folded, [3, 4]).numpy(), z)
  np.testing.assert_array_equal(noise.fold(keys[2:3], 3), folded[2:3])


def test_keys_of_the_wrong_shape_or_type_are_refused():
  with pytest.raises(ValueError, match=r"expected shape \[N, 2\]"):
    noise.normal(tf.zeros([4], tf.int32), [2])
  with pytest.raises(ValueError, match="must be integers"):
    noise.normal(tf.zeros([4, 2], tf.float32), [2])


def test_a_stochastic_models_step_is_reproduced_row_by_row_by_its_keys():
  spec = envmodels.EnvModelSpec(kind="sssm", observation_shape=(16, 24, 3),
                                num_actions=5, jump=1, context_length=3)
  model = envmodels.build(
      spec, seed=0, **envmodels.model_class("sssm").tiny_hyperparameters())
  context = tf.constant(np.random.RandomState(0).randint(
      0, 256, (4, 3, 16, 24, 3)), tf.uint8)
  state = model.initial_state(context)
  actions = tf.constant([[0], [1], [2], [3]], tf.int32)
  keys = _keys(4)
  _, out = model.step(state, actions, noise=keys)
  _, again = model.step(state, actions, noise=keys)
  np.testing.assert_array_equal(out.features, again.features)
  reversed_rows = [3, 2, 1, 0]
  _, flipped = model.step(tf.nest.map_structure(
      lambda x: tf.gather(x, reversed_rows), state),
      tf.gather(actions, reversed_rows), noise=tf.gather(keys, reversed_rows))
  np.testing.assert_allclose(flipped.features.numpy()[reversed_rows],
                             out.features.numpy(), atol=1e-5)
  _, other = model.step(state, actions, noise=keys + 1)
  assert not np.allclose(other.features, out.features, atol=1e-3)
  _, free = model.step(state, actions)  # the model's own generator
  assert not np.allclose(free.features, out.features, atol=1e-3)
