"""Building blocks of the Buesing et al. (2018) model architectures.

Every envmodel kind is assembled from these Sonnet modules (docs/
envmodels.md, "State-space architecture", describes the paper's appendix
figures they follow). All
convolutions have stride 1 and SAME padding; down/up-sampling is done with
space-to-depth / depth-to-space. Shapes: frames [B, H, W, C], states
[B, H/8, W/8, D].
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import sonnet as snt
import tensorflow as tf

from envmodels import losses


def _conv(kernel: int, channels: int, name: str) -> snt.Conv2D:
  return snt.Conv2D(channels, kernel, padding="SAME", name=name)


# What a network block's first convolution reads: one map [B, h, w, d], or
# the parts of a channel concatenation, maps [B, h, w, d_i] and vectors
# [B, n_i] that stand for themselves broadcast over the map (an action, a
# pool-and-inject's pooled features), in channel order.
Parts = Union[tf.Tensor, Sequence[tf.Tensor]]


def as_parts(x: Parts) -> List[tf.Tensor]:
  return [x] if isinstance(x, tf.Tensor) else list(x)


def concat_parts(parts: Parts) -> tf.Tensor:
  """The map the parts stand for: [B, h, w, sum of widths], the vectors
  broadcast over the first map's [h, w]."""
  parts = as_parts(parts)
  like = next(p for p in parts if p.shape.rank == 4)
  tensors = [p if p.shape.rank == 4 else tile_vector(p, like) for p in parts]
  return tensors[0] if len(tensors) == 1 else tf.concat(tensors, -1)


def conv_parts(conv: snt.Conv2D, parts: Parts) -> tf.Tensor:
  """conv(concat_parts(parts)) [B, h, w, c], without broadcasting the
  vector parts: the kernel is split by input channels, the maps' share is
  one convolution and the vectors' one matrix product (`_vector_share`).
  The same sums as the concatenation's convolution, in another order:
  equal up to float rounding. A convolution not built yet (its first call
  makes its kernel from the input's channels) is built on a 1 x 1 map of
  zeros first, so that every call computes the same sums; maps whose size
  is not static are convolved concatenated."""
  parts = as_parts(parts)
  maps = [p for p in parts if p.shape.rank == 4]
  if not maps:
    raise ValueError(f"{conv.name}: the parts hold no map [B, h, w, d] to "
                     "broadcast the vectors over, given ranks "
                     f"{[p.shape.rank for p in parts]}.")
  if len(maps) == len(parts) or None in maps[0].shape[1:3]:
    return conv(concat_parts(parts))
  widths = [int(p.shape[-1]) for p in parts]
  if not hasattr(conv, "w"):
    conv(tf.zeros([1, 1, 1, sum(widths)], parts[0].dtype))
  if sum(widths) != conv.w.shape[2]:
    raise ValueError(f"{conv.name} reads {conv.w.shape[2]} input channels, "
                     f"given parts of widths {widths} (sum {sum(widths)}).")
  kernels = tf.split(conv.w, widths, axis=2)  # [k, k, n_i, c] each
  # Parts without channels (an action-free model's actions) add nothing.
  pairs = [(p, w) for p, w, n in zip(parts, kernels, widths) if n > 0]
  on_maps = [(p, w) for p, w in pairs if p.shape.rank == 4]
  vectors = [(p, w) for p, w in pairs if p.shape.rank == 2]
  join = lambda tensors, axis: (tensors[0] if len(tensors) == 1 else
                                tf.concat(tensors, axis))
  out = tf.nn.conv2d(join([p for p, _ in on_maps], -1),
                     join([w for _, w in on_maps], 2), 1, "SAME")
  if vectors:
    out += _vector_share(join([p for p, _ in vectors], -1),
                         join([w for _, w in vectors], 2),
                         maps[0].shape[1], maps[0].shape[2])
  return tf.nn.bias_add(out, conv.b)


def _vector_share(vector: tf.Tensor, kernel: tf.Tensor, height: int,
                  width: int) -> tf.Tensor:
  """What `vector` [B, n] broadcast over an [h, w] map adds to a SAME,
  stride-1 convolution with `kernel` [k, k, n, c]: at (y, x) the product
  of v with the kernel summed over the taps that fall inside the map,
  which depends on the weights and the map's size only. [B, h, w, c]
  ([B, 1, 1, c] for a 1 x 1 kernel, the same everywhere)."""
  k, _, n, c = kernel.shape
  if k == 1:
    return tf.matmul(vector, tf.reshape(kernel, [n, c]))[:, None, None, :]
  inside = tf.constant(_taps_inside(height, width, k))  # [h w, k k]
  taps = tf.einsum("pt,tnc->npc", inside,
                   tf.reshape(kernel, [k * k, n, c]))  # [n, h w, c]
  return tf.reshape(tf.matmul(vector, tf.reshape(taps, [n, -1])),
                    [-1, height, width, c])


def _taps_inside(height: int, width: int, kernel: int) -> np.ndarray:
  """float32 [h * w, k * k]: 1 where tap (dy, dx) of a SAME convolution
  centred at (y, x) reads inside the map, 0 where it reads the padding."""
  before = (kernel - 1) // 2  # TensorFlow's SAME padding before the map
  rows = np.arange(height)[:, None] + np.arange(kernel)[None] - before
  cols = np.arange(width)[:, None] + np.arange(kernel)[None] - before
  ok_rows = (rows >= 0) & (rows < height)  # [h, k]
  ok_cols = (cols >= 0) & (cols < width)  # [w, k]
  inside = ok_rows[:, None, :, None] & ok_cols[None, :, None, :]
  return inside.reshape(height * width, kernel * kernel).astype(np.float32)


# tf.nn.space_to_depth / depth_to_space as a reshape and a transpose: the
# same values (a permutation, channel (dy * b + dx) * C + c), but
# TensorFlow's transpose kernel moves full-resolution frames 1.6-1.8x
# faster in bfloat16 than the dedicated ops, forward and backward (the
# small preset's pretraining step in bf16: dSSM-DET 1.04-1.07x, sSSM
# 0.98-1.06x over four side-by-side runs; docs/performance.md).


def space_to_depth(x: tf.Tensor, block: int) -> tf.Tensor:
  """[B, H, W, C] -> [B, H/b, W/b, b*b*C], as tf.nn.space_to_depth."""
  shape, channels = tf.shape(x), x.shape[-1]
  y = tf.reshape(x, [shape[0], shape[1] // block, block, shape[2] // block,
                     block, channels])
  y = tf.transpose(y, [0, 1, 3, 2, 4, 5])  # [B, H/b, W/b, dy, dx, C]
  return tf.reshape(y, [shape[0], shape[1] // block, shape[2] // block,
                        block * block * channels])


def depth_to_space(x: tf.Tensor, block: int) -> tf.Tensor:
  """[B, h, w, b*b*C] -> [B, h*b, w*b, C], as tf.nn.depth_to_space."""
  shape, channels = tf.shape(x), x.shape[-1] // (block * block)
  y = tf.reshape(x, [shape[0], shape[1], shape[2], block, block, channels])
  y = tf.transpose(y, [0, 1, 3, 2, 4, 5])  # [B, h, dy, w, dx, C]
  return tf.reshape(y, [shape[0], shape[1] * block, shape[2] * block,
                        channels])


class ConvStack(snt.Module):
  """conv k1/c1 -> relu -> conv k2/c2 (+ residual of the first conv's output)
  -> relu -> conv k3/c3."""

  def __init__(self, kernels: Tuple[int, int, int],
               channels: Tuple[int, int, int], name: Optional[str] = None):
    super().__init__(name=name)
    if channels[0] != channels[1]:
      raise ValueError("ConvStack's residual needs c1 == c2, given "
                       f"channels={channels}.")
    self._convs = [_conv(k, c, f"conv{i}")
                   for i, (k, c) in enumerate(zip(kernels, channels))]

  def __call__(self, x: Parts,
               out_channels: Optional[int] = None) -> tf.Tensor:
    """x [B, h, w, d] (or its parts, `conv_parts`) -> [B, h, w, c3], or
    only the first `out_channels` of the c3 outputs (computed alone: the
    rest of the last conv is skipped)."""
    h1 = conv_parts(self._convs[0], x)
    h2 = tf.nn.relu(self._convs[1](tf.nn.relu(h1)) + h1)
    last = self._convs[2]
    if out_channels is None or not hasattr(last, "w"):  # or not built yet
      out = last(h2)
      return out if out_channels is None else out[..., :out_channels]
    out = tf.nn.conv2d(h2, last.w[..., :out_channels], 1, "SAME")
    return tf.nn.bias_add(out, last.b[:out_channels])


class ResConv(snt.Module):
  """3x3/32 -> relu -> 5x5/32 -> relu -> 3x3/D, added to the input's first D
  channels (the state, which callers put first)."""

  def __init__(self, state_channels: int = 64, hidden: int = 32,
               name: Optional[str] = None):
    super().__init__(name=name)
    self._state_channels = state_channels
    self._convs = [_conv(3, hidden, "conv0"), _conv(5, hidden, "conv1"),
                   _conv(3, state_channels, "conv2")]

  def __call__(self, x: Parts,
               residual: Optional[tf.Tensor] = None) -> tf.Tensor:
    """x [B, h, w, d] (or its parts, `conv_parts`) -> [B, h, w, D].
    residual: the tensor x's first D channels hold (the state, passed by
    callers that have it: the same values, and under bf16 mixed precision
    the add then fuses into the last convolution even where x's other
    channels are float32, e.g. a sampled latent)."""
    h = tf.nn.relu(conv_parts(self._convs[0], x))
    h = tf.nn.relu(self._convs[1](h))
    if residual is None:
      residual = as_parts(x)[0][..., :self._state_channels]
    return self._convs[2](h) + residual


class PoolAndInject(snt.Module):
  """Weber et al. (2017): conv 3x3/32 -> global max-pool -> tile back to the
  map -> concatenate with the input. Lets local convolutions see global
  effects. [B, h, w, d] -> the parts [x, pooled [B, channels]] of that
  concatenation [B, h, w, d + channels] (`conv_parts`, `concat_parts`):
  the next convolution reads the pooled features without their tiling."""

  def __init__(self, channels: int = 32, name: Optional[str] = None):
    super().__init__(name=name)
    self._conv = _conv(3, channels, "conv")

  def __call__(self, x: tf.Tensor) -> List[tf.Tensor]:
    return [x, tf.reduce_max(self._conv(x), axis=[1, 2])]


class Encoder(snt.Module):
  """Observation encoder e: [B, H, W, C] float in [0, 1] -> [B, H/8, W/8, D].

  space-to-depth(4) -> conv_stack((3,5,3),(16,16,D)) -> space-to-depth(2)
  -> conv_stack((3,5,3),(32,32,D)) -> relu.
  """

  def __init__(self, channels: int = 64, name: Optional[str] = None):
    super().__init__(name=name)
    self._stack1 = ConvStack((3, 5, 3), (16, 16, channels), name="stack1")
    self._stack2 = ConvStack((3, 5, 3), (32, 32, channels), name="stack2")

  def __call__(self, frames: tf.Tensor) -> tf.Tensor:
    x = space_to_depth(frames, 4)
    x = self._stack1(x)
    x = space_to_depth(x, 2)
    return tf.nn.relu(self._stack2(x))


class Decoder(snt.Module):
  """[B, h, w, d] -> per-pixel logits (or means) [B, 8h, 8w, C].

  conv_stack((1,5,3),(32,32,64)) -> depth-to-space(2)
  -> conv_stack((3,3,1),(64,64,16*C)) -> depth-to-space(4).
  """

  BLOCK = 4  # the final depth-to-space's block

  def __init__(self, image_channels: int, name: Optional[str] = None):
    super().__init__(name=name)
    self._stack1 = ConvStack((1, 5, 3), (32, 32, 64), name="stack1")
    self._stack2 = ConvStack((3, 3, 1), (64, 64, 16 * image_channels),
                             name="stack2")

  def blocks(self, x: tf.Tensor) -> tf.Tensor:
    """[B, h, w, d] -> [B, 2h, 2w, 16 C]: the output before the final
    depth-to-space, pixel (4i + dy, 4j + dx, c) of the frame at channel
    (4 dy + dx) C + c of block (i, j), as `frame_blocks` arranges frames.

    A frame's log-likelihood is a sum over its pixels, so the losses
    compare these blocks with the targets' blocks: the same sum, without
    moving full-resolution logits and their gradients through a
    transpose (docs/performance.md, "Pretraining")."""
    x = depth_to_space(tf.nn.relu(self._stack1(x)), 2)
    return self._stack2(x)

  def __call__(self, x: tf.Tensor) -> tf.Tensor:
    return depth_to_space(self.blocks(x), self.BLOCK)


def frame_blocks(frames: tf.Tensor) -> tf.Tensor:
  """[B, H, W, C] (any dtype) -> [B, H/4, W/4, 16 C]: frames arranged as
  `Decoder.blocks` arranges its output (space-to-depth by its block)."""
  return space_to_depth(frames, Decoder.BLOCK)


def target_blocks(observation: tf.Tensor, first: int,
                  bit_depth: int) -> tf.Tensor:
  """The likelihood's targets from uint8 windows [B, L, H, W, C]: frames
  `first`.. of each, preprocessed (`losses.preprocess_frames`) and
  arranged as the decoder's blocks: float32 [B * (L - first), H/4, W/4,
  16 C], batch-major."""
  frames, _ = merge_leading(tf.convert_to_tensor(observation)[:, first:])
  return losses.preprocess_frames(frame_blocks(frames), bit_depth)


def tile_vector(vector: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
  """Broadcasts [B, n] over the map of `like` [B, h, w, d] -> [B, h, w, n]."""
  shape = tf.concat([tf.shape(like)[:3], tf.shape(vector)[1:]], 0)
  return tf.broadcast_to(vector[:, None, None, :], shape)


def encode_reward(reward: tf.Tensor, num_bits: int,
                  reward_scale: float) -> tf.Tensor:
  """The reward head's code: float [...] -> {0, 1} float32 [..., num_bits + 2].

  Bits: is-zero, negative, then the `num_bits` binary digits (least
  significant first) of the magnitude m = floor(|r| * reward_scale + 1e-4),
  clipped to 2**num_bits - 1. It represents exactly the multiples of
  1 / reward_scale up to (2**num_bits - 1) / reward_scale in magnitude; any
  other reward is silently coded as a neighbour (reward_coding.py checks a
  dataset's rewards against this).
  """
  reward = tf.cast(reward, tf.float32)
  magnitude = tf.floor(tf.abs(reward) * reward_scale + 1e-4)
  magnitude = tf.minimum(magnitude, 2.0**num_bits - 1)
  magnitude = tf.cast(magnitude, tf.int32)
  bits = tf.bitwise.bitwise_and(
      tf.bitwise.right_shift(magnitude[..., None], tf.range(num_bits)), 1)
  is_zero = tf.cast(tf.equal(magnitude, 0), tf.float32)[..., None]
  negative = tf.cast(reward < 0, tf.float32)[..., None]
  return tf.concat([is_zero, negative, tf.cast(bits, tf.float32)], -1)


def decode_reward(probs: tf.Tensor, reward_scale: float) -> tf.Tensor:
  """[..., num_bits + 2] bit probabilities -> float32 [...], the mean reward
  when the bits are independent Bernoullis. On a hard code (`encode_reward`'s
  output) it is the exact decoding: 0 if is-zero, else sign * m / scale."""
  exponents = tf.cast(tf.range(tf.shape(probs)[-1] - 2), tf.float32)
  weights = 2.0**exponents
  magnitude = tf.reduce_sum(probs[..., 2:] * weights, -1) / reward_scale
  sign = 1.0 - 2.0 * probs[..., 1]
  return (1.0 - probs[..., 0]) * sign * magnitude


class RewardHead(snt.Module):
  """Predicts the reward of a step from a state.

  The reward r is coded as bits (`encode_reward`): is-zero, sign, and the
  binary digits of floor(|r| * reward_scale) (num_bits of them); each bit is
  a Bernoulli trained with cross-entropy (docs/envmodels.md, "Reward
  coding"). `reward_scale` lets fractional rewards (MiniPacman's 0.1) be represented exactly, and large
  ones (MsPacman's tens) with few bits. Rewards that are not multiples of
  1 / reward_scale, or beyond (2**num_bits - 1) / reward_scale, are coded
  wrongly: `reward_coding.py` derives or checks the scale for a dataset.
  """

  def __init__(self, num_bits: int = 8, reward_scale: float = 1.0,
               hidden_channels: int = 24, name: Optional[str] = None):
    super().__init__(name=name)
    self.num_bits = num_bits
    self.reward_scale = reward_scale
    self._conv = _conv(3, hidden_channels, "conv")
    self._linear = snt.Linear(num_bits + 2, name="linear")

  def logits(self, state: tf.Tensor) -> tf.Tensor:
    """[B, h, w, d] -> [B, num_bits + 2] (is-zero, negative, bits...)."""
    h = tf.nn.relu(self._conv(state))
    return self._linear(snt.Flatten()(h))

  def encode(self, reward: tf.Tensor) -> tf.Tensor:
    """float [...] -> {0, 1} float targets [..., num_bits + 2]."""
    return encode_reward(reward, self.num_bits, self.reward_scale)

  def decode(self, code: tf.Tensor) -> tf.Tensor:
    """{0, 1} [..., num_bits + 2] (as `encode` gives) -> float32 [...]."""
    return decode_reward(tf.cast(code, tf.float32), self.reward_scale)

  def expected_reward(self, logits: tf.Tensor) -> tf.Tensor:
    """[B, num_bits + 2] -> float32 [B], the mean under independent bits."""
    return decode_reward(tf.sigmoid(logits), self.reward_scale)

  def log_prob(self, logits: tf.Tensor, reward: tf.Tensor) -> tf.Tensor:
    """Sum over bits of the Bernoulli log-likelihood: [B] (nats)."""
    targets = self.encode(reward)
    return tf.reduce_sum(losses.bernoulli_log_prob(logits, targets), -1)


def frames_to_float(frames: tf.Tensor) -> tf.Tensor:
  """uint8 [..., C] -> float32 in [0, 1]."""
  return tf.cast(frames, tf.float32) / 255.0


def merge_leading(x: tf.Tensor, dims: int = 2) -> Tuple[tf.Tensor, tf.Tensor]:
  """[B, T, ...] -> ([B * T, ...], leading shape [B, T])."""
  lead = tf.shape(x)[:dims]
  return tf.reshape(x, tf.concat([[-1], tf.shape(x)[dims:]], 0)), lead


def split_leading(x: tf.Tensor, lead: tf.Tensor) -> tf.Tensor:
  """Inverse of merge_leading."""
  return tf.reshape(x, tf.concat([lead, tf.shape(x)[1:]], 0))


def check_multiple(shape: Sequence[int], factor: int = 8) -> None:
  if shape[0] % factor or shape[1] % factor:
    raise ValueError(f"frame height and width must be multiples of {factor}, "
                     f"given {tuple(shape)}.")
