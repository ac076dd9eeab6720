"""The building blocks' split convolutions (envmodels/networks.py).

`conv_parts` convolves a concatenation of maps and broadcast vectors
without broadcasting the vectors; these tests hold it to the convolution
of the concatenation it stands for, kernel sizes and part orders the
models use, values and gradients, and its errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

from envmodels import networks

BATCH, HEIGHT, WIDTH = 3, 5, 4


def _parts(widths, seed=0):
  """Maps for positive widths, vectors [B, n] for negative ones."""
  rng = np.random.RandomState(seed)
  return [tf.constant(rng.randn(BATCH, HEIGHT, WIDTH, n), tf.float32)
          if n > 0 else tf.constant(rng.randn(BATCH, -n), tf.float32)
          for n in widths]


def _built_conv(kernel, channels, inputs):
  conv = snt.Conv2D(channels, kernel, padding="SAME")
  conv(tf.zeros([1, HEIGHT, WIDTH, inputs]))
  rng = np.random.RandomState(1)
  conv.b.assign(rng.randn(channels).astype(np.float32))
  return conv


@pytest.mark.parametrize("kernel", [1, 3, 4, 5])
@pytest.mark.parametrize("widths", [
    (6, -4),  # the prior: state, action
    (6, -4, 2),  # the transition: state, action, latent
    (6, -4, 5, 2, 2),  # the posterior: state, action, embedded, mean, std
    (6, -3),  # pool-and-inject's output
    (5, -2, -3, 1),  # two vectors
])
def test_conv_parts_equals_the_convolution_of_the_concatenation(
    kernel, widths):
  parts = _parts(widths)
  conv = _built_conv(kernel, 7, sum(abs(n) for n in widths))
  expected = conv(networks.concat_parts(parts))
  got = networks.conv_parts(conv, parts)
  assert got.shape == (BATCH, HEIGHT, WIDTH, 7)
  np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5,
                             atol=1e-5)


def test_conv_parts_gradients_equal_the_concatenations():
  parts = _parts((6, -4, 2))
  conv = _built_conv(3, 7, 12)
  weights = tf.constant(np.random.RandomState(2).randn(BATCH, HEIGHT, WIDTH,
                                                       7), tf.float32)

  def grads(fn):
    with tf.GradientTape() as tape:
      tape.watch(parts)
      loss = tf.reduce_sum(fn() * weights)
    return tape.gradient(loss, parts + [conv.w, conv.b])

  expected = grads(lambda: conv(networks.concat_parts(parts)))
  got = grads(lambda: networks.conv_parts(conv, parts))
  for g, e in zip(got, expected):
    assert g.shape == e.shape
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_parts_builds_an_unbuilt_convolution_and_repeats_its_sums():
  parts = _parts((6, -4))
  conv = snt.Conv2D(7, 3, padding="SAME")
  out = networks.conv_parts(conv, parts)
  assert conv.w.shape == (3, 3, 10, 7)
  np.testing.assert_allclose(out.numpy(),
                             conv(networks.concat_parts(parts)).numpy(),
                             rtol=1e-6, atol=1e-6)
  # The first call (which built the kernel) and the next compute the same.
  np.testing.assert_array_equal(networks.conv_parts(conv, parts).numpy(),
                                out.numpy())


def test_conv_parts_inside_a_function_with_an_unknown_batch():
  parts = _parts((6, -4))
  conv = _built_conv(3, 7, 10)
  fn = tf.function(lambda m, v: networks.conv_parts(conv, [m, v]),
                   input_signature=[
                       tf.TensorSpec([None, HEIGHT, WIDTH, 6]),
                       tf.TensorSpec([None, 4])])
  np.testing.assert_allclose(
      fn(*parts).numpy(), conv(networks.concat_parts(parts)).numpy(),
      rtol=1e-5, atol=1e-5)


def test_conv_parts_of_maps_of_unknown_size_convolves_the_concatenation():
  parts = _parts((6, -4))
  conv = _built_conv(3, 7, 10)
  fn = tf.function(lambda m, v: networks.conv_parts(conv, [m, v]),
                   input_signature=[tf.TensorSpec([None, None, None, 6]),
                                    tf.TensorSpec([None, 4])])
  np.testing.assert_allclose(
      fn(*parts).numpy(), conv(networks.concat_parts(parts)).numpy(),
      rtol=1e-5, atol=1e-5)


def test_conv_parts_errors():
  conv = _built_conv(3, 7, 10)
  with pytest.raises(ValueError, match="reads 10 input channels, given "
                     r"parts of widths \[6, 3\]"):
    networks.conv_parts(conv, _parts((6, -3)))
  with pytest.raises(ValueError, match="hold no map"):
    networks.conv_parts(conv, _parts((-6, -4)))


def test_pool_and_inject_gives_the_parts_of_its_concatenation():
  x = _parts((6,))[0]
  module = networks.PoolAndInject(3)
  parts = module(x)
  assert [p.shape for p in parts] == [x.shape, (BATCH, 3)]
  tiled = networks.concat_parts(parts)
  assert tiled.shape == (BATCH, HEIGHT, WIDTH, 9)
  np.testing.assert_array_equal(tiled[..., :6].numpy(), x.numpy())
  # The pooled features: the same at every position, the conv's global max.
  pooled = tf.reduce_max(module._conv(x), axis=[1, 2]).numpy()
  np.testing.assert_array_equal(tiled[:, 2, 1, 6:].numpy(), pooled)
  np.testing.assert_array_equal(tiled[:, 0, 3, 6:].numpy(), pooled)


def test_conv_parts_with_a_vector_without_channels():
  """An action-free model's actions [B, 0] add nothing."""
  parts = _parts((6,)) + [tf.zeros([BATCH, 0])] + _parts((2,), seed=3)
  conv = _built_conv(3, 7, 8)
  np.testing.assert_allclose(
      networks.conv_parts(conv, parts).numpy(),
      conv(networks.concat_parts(parts)).numpy(), rtol=1e-5, atol=1e-5)
