"""Tests of stateless row-keyed noise (envmodels/noise.py) and of
`EnvModel.step(..., noise=keys)`: a row's draws depend on its key alone."""

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from envmodels import noise, precision
from tests import fakes


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


def _normal_cdf(z):
  return 0.5 * tf.math.erfc(-tf.constant(z, tf.float64) / np.sqrt(2)).numpy()


def test_the_normal_table_is_the_inverse_normal_cdf_with_unit_moments():
  table = noise.normal_table().astype(np.float64)  # [2^16 + 1]
  assert table.shape == (2**16 + 1,) and np.all(np.diff(table) > 0)
  np.testing.assert_allclose(table[1:-1], tf.math.ndtri(tf.constant(
      np.arange(1, 2**16) / 2**16, tf.float64)).numpy(), atol=1e-6)
  np.testing.assert_allclose(table, -table[::-1], atol=1e-6)  # symmetric
  assert 4.60 < table[-1] < 4.61  # the tails' ends
  low, high = table[:-1], table[1:]  # equal-probability linear pieces
  assert abs((low + high).mean() / 2) < 1e-9
  assert abs((low * low + low * high + high * high).mean() / 3 - 1) < 1e-5
  # The exact CDF against N(0, 1)'s, inside every piece: the stated bound.
  within = np.linspace(0, 1, 17)[:, None]
  cdf = (np.arange(2**16) + within) / 2**16
  assert np.abs(cdf - _normal_cdf(low + within * (high - low))).max() < 2.5e-6


def test_normal_draws_match_n01_in_moments_tails_and_kolmogorov_smirnov():
  n = 1_000_000
  z = np.sort(noise.normal(_keys(100, seed=3), [n // 100]).numpy().ravel())
  assert abs(z.mean()) < 5 / np.sqrt(n)  # five standard errors
  assert abs(z.var() - 1) < 5 * np.sqrt(2 / n)
  assert abs((z**4).mean() - 3) < 5 * np.sqrt(96 / n)  # kurtosis
  # Tails: beyond 3 sd a normal has mass 2.70e-3, beyond 4 6.3e-5.
  assert abs(np.mean(np.abs(z) > 3) - 2.70e-3) < 5 * np.sqrt(2.7e-3 / n)
  assert 20 <= np.sum(np.abs(z) > 4) <= 110 and np.abs(z).max() < 4.61
  # Kolmogorov-Smirnov: D below the 0.1% critical value 1.95 / sqrt(n)
  # plus the distribution's own distance to N(0, 1) (2.2e-6).
  cdf = _normal_cdf(z)
  d = max((np.arange(1, n + 1) / n - cdf).max(), (cdf - np.arange(n) / n).max())
  assert d < 1.95 / np.sqrt(n) + 2.2e-6, d


@fakes.needs_bf16
def test_normal_noise_is_exact_under_the_bf16_rewrite():
  keys = _keys(8)
  fp32 = noise.normal(keys, [4, 4, 8]).numpy()
  with precision.scope("bf16"):
    traced = tf.function(lambda k: noise.normal(k, [4, 4, 8]) * 1.0)(keys)
  np.testing.assert_array_equal(traced.numpy(), fp32)


def test_a_rows_noise_depends_on_its_key_alone():
  keys = _keys(10)
  u = noise.uniform(keys, [3, 4]).numpy()  # integer hashing: bit-exact
  np.testing.assert_array_equal(noise.uniform(keys[7:8], [3, 4])[0], u[7])
  z = noise.normal(keys, [3, 4]).numpy()  # table reads: equal to an ulp
  alone = noise.normal(keys[7:8], [3, 4]).numpy()
  np.testing.assert_allclose(alone[0], z[7], rtol=1e-6, atol=1e-6)
  shuffled = noise.normal(tf.gather(keys, [9, 7, 0]), [3, 4]).numpy()
  np.testing.assert_allclose(shuffled[1], z[7], rtol=1e-6, atol=1e-6)
  folded = noise.fold(keys, 3)
  assert not np.array_equal(noise.normal(folded, [3, 4]).numpy(), z)
  np.testing.assert_array_equal(noise.fold(keys[2:3], 3), folded[2:3])


def test_the_fused_gaussian_sample_is_mean_plus_std_times_the_normals():
  """noise.affine_normal draws the very normals of noise.normal and scales
  them in the same kernel: equal to the unfused expression to rounding (a
  fused multiply-add), std broadcast, row i still a function of keys[i]."""
  keys = _keys(6)
  rng = np.random.RandomState(1)
  mean = tf.constant(rng.randn(6, 3, 4, 2), tf.float32)
  std = tf.constant(rng.rand(6, 3, 4, 2) + 0.1, tf.float32)
  z = noise.normal(keys, [3, 4, 2], counter=5)
  fused = noise.affine_normal(keys, mean, std, counter=5).numpy()
  np.testing.assert_allclose(fused, (mean + std * z).numpy(), rtol=1e-6,
                             atol=1e-6)
  alone = noise.affine_normal(keys[4:5], mean[4:5], std[4:5], counter=5)
  np.testing.assert_allclose(alone.numpy()[0], fused[4], rtol=1e-6,
                             atol=1e-6)
  scalar = noise.affine_normal(keys, mean, 0.5, counter=5).numpy()
  np.testing.assert_allclose(scalar, (mean + 0.5 * z).numpy(), rtol=1e-6,
                             atol=1e-6)
  # Gradients of the reparameterisation: d/dmean = 1, d/dstd = the normals.
  with tf.GradientTape() as tape:
    tape.watch([mean, std])
    total = tf.reduce_sum(noise.affine_normal(keys, mean, std, counter=5))
  d_mean, d_std = tape.gradient(total, [mean, std])
  np.testing.assert_allclose(d_mean.numpy(), 1.0)
  np.testing.assert_allclose(d_std.numpy(), z.numpy(), rtol=1e-6, atol=1e-6)


def test_softplus_normal_is_the_affine_normal_of_the_softplus_std():
  """noise.softplus_normal: the std's softplus (and floor) in the fused
  kernel too; the same normals, equal to the affine draw of softplus(raw)
  + min_std to rounding, with its reparameterisation gradients."""
  keys = _keys(6)
  rng = np.random.RandomState(3)
  mean = tf.constant(rng.randn(6, 3, 4, 2), tf.float32)
  raw = tf.constant(3 * rng.randn(6, 3, 4, 2), tf.float32)
  z = noise.normal(keys, [3, 4, 2], counter=2)
  fused = noise.softplus_normal(keys, mean, raw, 0.1, counter=2).numpy()
  std = tf.nn.softplus(raw) + 0.1
  np.testing.assert_allclose(fused, (mean + std * z).numpy(), rtol=1e-6,
                             atol=1e-6)
  np.testing.assert_allclose(
      fused, noise.affine_normal(keys, mean, std, counter=2).numpy(),
      rtol=1e-6, atol=1e-6)
  with tf.GradientTape() as tape:
    tape.watch([mean, raw])
    total = tf.reduce_sum(noise.softplus_normal(keys, mean, raw, 0.1, 2))
  d_mean, d_raw = tape.gradient(total, [mean, raw])
  np.testing.assert_allclose(d_mean.numpy(), 1.0)
  np.testing.assert_allclose(d_raw.numpy(), (tf.sigmoid(raw) * z).numpy(),
                             rtol=1e-5, atol=1e-6)


def test_a_models_keyed_gaussian_sample_is_the_unfused_one():
  """EnvModel.sample_gaussian with the step's keys (the fused kernel) and
  without (its own generator): both mean + std * eps, the keyed eps the
  one sample_normal draws at the same counter."""
  spec = envmodels.EnvModelSpec(kind="sssm", observation_shape=(16, 24, 3),
                                num_actions=5, jump=1, context_length=3)
  model = envmodels.build(
      spec, seed=0, **envmodels.model_class("sssm").tiny_hyperparameters())
  mean = tf.constant(np.random.RandomState(2).randn(4, 2, 3, 2), tf.float32)
  std = tf.fill([4, 2, 3, 2], 2.0)
  keys = noise.as_keys(_keys(4))
  model._noise_keys, model._noise_draws = keys, 0  # pylint: disable=protected-access
  try:
    fused = model.sample_gaussian(mean, std).numpy()
    eps = model.sample_normal(tf.shape(mean)).numpy()  # counter 1
  finally:
    model._noise_keys = None  # pylint: disable=protected-access
  want = mean + std * noise.normal(keys, [2, 3, 2], counter=0)
  np.testing.assert_allclose(fused, want.numpy(), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(eps, noise.normal(keys, [2, 3, 2], 1).numpy())
  model.reseed(3)
  sampled = model.sample_gaussian(mean, std).numpy()
  model.reseed(3)
  np.testing.assert_allclose(
      sampled, (mean + std * model.sample_normal(tf.shape(mean))).numpy())


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
