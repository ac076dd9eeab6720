"""Stateless, row-keyed random numbers: noise that a key reproduces exactly.

Where it sits in the data flow: an agent that queries a stochastic model
(an sSSM's or dSSM-VAE's z, a sampling rollout policy) in its actor and
again in its learner must see the same imagination twice, although the two
batch their rows differently. `EnvModel.step(state, actions, noise=keys)`
and the I2A's rollout policies draw through these functions: every number
is a hash of its row's key, a counter (which draw of the step) and its
index within the row, so row i's noise depends on keys[i] alone, never on
the batch around it, on a generator's state or on the op order.

Keys are uint32 [N, 2]. The hash is Wellons' "lowbias32" 32-bit integer
finaliser applied in a chain (key word 0, key word 1, counter, index). Its
24 high bits give uniforms in (0, 1) (`uniform`, `gumbel`). A normal takes
the whole 32 bits: the high 16 pick one of 2^16 equal-probability pieces of
the inverse normal CDF, tabulated once at the pieces' edges, and the low 16
place it linearly within the piece (`normal`). That is the inverse CDF of a
32-bit uniform up to the linear interpolation, and costs a table read
instead of the rational approximations of `ndtri` (several times faster for
the 1.3M normals of a paper-size sSSM step; docs/performance.md). The
outermost pieces are linear segments ending at +-4.61, chosen to keep the
tails' conditional means: the distribution's CDF is within 2.2e-6 of
N(0, 1)'s everywhere, its variance 1 + 4e-6, and its tails stop at 4.61
standard deviations (a normal has mass 4e-6 beyond).
This is not a cryptographic generator, and statistically it is plenty for
sampling latents and actions (tests/envmodels/test_noise.py checks moments,
tails, the Kolmogorov-Smirnov distance to N(0, 1), and independence of
neighbouring rows and draws).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence, Union

import numpy as np
import tensorflow as tf

_GOLDEN = 0x9E3779B9  # 2^32 / golden ratio: spreads consecutive integers


def _u32(value: int) -> tf.Tensor:
  return tf.constant(value & 0xFFFFFFFF, tf.uint32)


def lowbias32(x: tf.Tensor) -> tf.Tensor:
  """A 32-bit integer hash (uint32 in, uint32 out, elementwise)."""
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))
  x = x * _u32(0x7FEB352D)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(15)))
  x = x * _u32(0x846CA68B)
  return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))


def as_keys(keys: tf.Tensor) -> tf.Tensor:
  """int32/int64/uint32 [N, 2] -> uint32 [N, 2] (bit patterns kept for
  32-bit types; int64 values taken modulo 2^32)."""
  keys = tf.convert_to_tensor(keys)
  if keys.shape.rank != 2 or keys.shape[-1] != 2:
    raise ValueError("noise keys: expected shape [N, 2] (one key per row), "
                     f"given {keys.shape.as_list()}.")
  if keys.dtype == tf.uint32:
    return keys
  if keys.dtype == tf.int32:
    return tf.bitcast(keys, tf.uint32)
  if keys.dtype == tf.int64:
    return tf.cast(tf.bitwise.bitwise_and(keys, 0xFFFFFFFF), tf.uint32)
  raise ValueError(f"noise keys must be integers, given {keys.dtype.name}.")


def fold(keys: tf.Tensor, value: tf.Tensor) -> tf.Tensor:
  """New keys [N, 2] from `keys` [N, 2] and `value` (int scalar or [N]):
  e.g. a rollout's keys from its window's key and the rollout index, or a
  step's keys from its rollout's and the step index."""
  keys = as_keys(keys)
  value = tf.cast(value, tf.uint32) * _u32(_GOLDEN)
  value = tf.broadcast_to(value, tf.shape(keys)[:1])
  first = lowbias32(tf.bitwise.bitwise_xor(keys[:, 0], value))
  second = lowbias32(tf.bitwise.bitwise_xor(keys[:, 1] + _u32(_GOLDEN),
                                            first))
  return tf.stack([first, second], axis=1)


Shape = Union[Sequence[int], tf.Tensor]


def _bits(keys: tf.Tensor, shape: Shape, counter: int) -> tf.Tensor:
  """uint32 [N, *shape]: hash(key_i, counter, element index)."""
  keys = as_keys(keys)
  shape = tf.cast(tf.convert_to_tensor(shape), tf.int32)  # [rank - 1]
  size = tf.reduce_prod(shape)
  salted = tf.bitwise.bitwise_xor(keys[:, 1],
                                  _u32(counter * _GOLDEN + 0x632BE5AB))
  row = lowbias32(keys[:, 0] + lowbias32(salted))  # [N]
  index = tf.cast(tf.range(size), tf.uint32) * _u32(_GOLDEN)  # [size]
  bits = lowbias32(tf.bitwise.bitwise_xor(row[:, None], index[None, :]))
  return tf.reshape(bits, tf.concat([tf.shape(keys)[:1], shape], 0))


def uniform(keys: tf.Tensor, shape: Shape,
            counter: int = 0) -> tf.Tensor:
  """float32 [N, *shape] uniform in (0, 1), row i a function of keys[i],
  `counter` and the element's index only (`shape`: the per-row shape, a
  list or an int32 tensor)."""
  bits = tf.bitwise.right_shift(_bits(keys, shape, counter), _u32(8))
  return (tf.cast(bits, tf.float32) + 0.5) * (1.0 / (1 << 24))


TABLE_BITS = 16  # the normal's pieces: 2^16, picked by the hash's high bits
_PIECES = 1 << TABLE_BITS


@functools.lru_cache(maxsize=None)
def normal_table() -> np.ndarray:
  """float32 [2^16 + 1]: the inverse normal CDF at k / 2^16, k = 0..2^16
  (float64 `ndtri`, computed once), except at the two ends, where it is
  -inf / +inf: there the ends are set so that each outermost linear piece
  has the mean of the normal's tail beyond its inner edge, -phi(a) / Phi(a)
  for a = ndtri(2^-16) (so the ends are +-4.61)."""
  edges = tf.math.ndtri(tf.constant(
      np.arange(1, _PIECES) / _PIECES, tf.float64)).numpy()
  inner = edges[0]  # ndtri(2^-16) = -4.17
  tail_mean = -math.exp(-0.5 * inner * inner) / math.sqrt(2 * math.pi) * (
      _PIECES)  # E[z | z < inner] = -phi(inner) / Phi(inner)
  end = 2.0 * tail_mean - inner  # the segment [end, inner] has that mean
  return np.concatenate([[end], edges, [-end]]).astype(np.float32)


@functools.lru_cache(maxsize=None)
def _table_tensor() -> tf.Tensor:
  with tf.init_scope():  # one eager constant, also when first asked in a trace
    return tf.constant(normal_table())


def _table_normal(keys: tf.Tensor, shape: tf.Tensor, counter: int,
                  table: tf.Tensor) -> tf.Tensor:
  """One hash per element into a piecewise-linear inverse normal CDF
  (`normal_table`): the ops XLA fuses into one pass."""
  bits = _bits(keys, shape, counter)  # uint32 [N, *shape]
  piece = tf.cast(tf.bitwise.right_shift(bits, _u32(32 - TABLE_BITS)),
                  tf.int32)  # [N, *shape] in [0, 2^16)
  within = (tf.cast(tf.bitwise.bitwise_and(bits, _u32(_PIECES - 1)),
                    tf.float32) + 0.5) * (1.0 / _PIECES)  # in (0, 1)
  low = tf.gather(table, piece)
  high = tf.gather(table, piece + 1)
  return low + within * (high - low)


_normal = tf.function(_table_normal, jit_compile=True)


@tf.function(jit_compile=True)
def _affine_normal(keys: tf.Tensor, mean: tf.Tensor, std: tf.Tensor,
                   counter: int, table: tf.Tensor) -> tf.Tensor:
  """mean + std * `_table_normal`, the draw and the reparameterisation in
  one XLA pass (the normals are never written out)."""
  eps = _table_normal(keys, tf.shape(mean)[1:], counter, table)
  return mean + std * eps


@tf.function(jit_compile=True)
def _softplus_normal(keys: tf.Tensor, mean: tf.Tensor, raw_std: tf.Tensor,
                     min_std: tf.Tensor, counter: int, table: tf.Tensor
                     ) -> tf.Tensor:
  """mean + (softplus(raw_std) + min_std) * `_table_normal`: the std's
  softplus in the same XLA pass too (never written out either)."""
  eps = _table_normal(keys, tf.shape(mean)[1:], counter, table)
  return mean + (tf.nn.softplus(raw_std) + min_std) * eps


def softplus_normal(keys: tf.Tensor, mean: tf.Tensor, raw_std: tf.Tensor,
                    min_std: float, counter: int = 0) -> tf.Tensor:
  """float32 mean + (softplus(raw_std) + min_std) * `normal(keys,
  mean.shape[1:], counter)` ([N, ...], raw_std of mean's shape): a sample
  of a Gaussian whose std a network gives before its softplus, drawn in
  one fused kernel (what a model's rollouts need of its prior)."""
  mean = tf.convert_to_tensor(mean, tf.float32)
  raw_std = tf.convert_to_tensor(raw_std, tf.float32)
  return _softplus_normal(as_keys(keys), mean, raw_std,
                          tf.constant(min_std, tf.float32), int(counter),
                          _table_tensor())


def affine_normal(keys: tf.Tensor, mean: tf.Tensor, std: tf.Tensor,
                  counter: int = 0) -> tf.Tensor:
  """float32 mean + std * `normal(keys, mean.shape[1:], counter)` ([N,
  ...], std broadcast to mean's shape): the same normals, drawn and
  scaled in one fused kernel (a reparameterised Gaussian sample)."""
  mean = tf.convert_to_tensor(mean, tf.float32)
  std = tf.broadcast_to(tf.convert_to_tensor(std, tf.float32),
                        tf.shape(mean))
  return _affine_normal(as_keys(keys), mean, std, int(counter),
                        _table_tensor())


def normal(keys: tf.Tensor, shape: Shape,
           counter: int = 0) -> tf.Tensor:
  """float32 [N, *shape] standard normal (to +-4.61; the module docstring
  says how close): row i a function of keys[i], `counter` and the
  element's index only."""
  return _normal(as_keys(keys), tf.cast(tf.convert_to_tensor(shape),
                                        tf.int32), int(counter),
                 _table_tensor())


def gumbel(keys: tf.Tensor, shape: Shape,
           counter: int = 0) -> tf.Tensor:
  """float32 [N, *shape] standard Gumbel: argmax(logits + gumbel) samples
  softmax(logits)."""
  return -tf.math.log(-tf.math.log(uniform(keys, shape, counter)))
