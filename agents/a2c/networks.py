"""The A2C network: a conv torso over the frame window, policy and value heads.

Data flow: actors (agents/acting.py) call it on the last `context_length`
frames of each environment; the learner (agents/learning.py) on batches of
unrolls. The window's frames are concatenated on channels, scaled to [0, 1],
and read by `ConvTorso` (conv -> ReLU per layer, flatten, linear -> ReLU);
two linear heads give the policy logits and the value. The I2A's model-free
path (agents/imagination/) reuses `ConvTorso`.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Tuple

import ml_collections
import sonnet as snt
import tensorflow as tf

from agents.base import ActorCriticNetwork, NetworkOutput


def frames_on_channels(observations: tf.Tensor) -> tf.Tensor:
  """uint8 [B, k, H, W, C] -> float32 [B, H, W, k * C] in [0, 1]."""
  observations = tf.convert_to_tensor(observations)
  if observations.shape.rank != 5:
    raise ValueError("observations must be [B, context_length, H, W, C], "
                     f"given shape {observations.shape}.")
  frames = tf.cast(observations, tf.float32) / 255.0  # [B, k, H, W, C]
  frames = tf.transpose(frames, [0, 2, 3, 1, 4])  # [B, H, W, k, C]
  shape = tf.shape(frames)
  channels = observations.shape[1] * observations.shape[4]
  return tf.reshape(frames, tf.concat([shape[:3], [channels]], 0))


class ConvTorso(snt.Module):
  """conv(c_i, k_i, stride s_i) -> ReLU per layer, flatten, linear -> ReLU."""

  def __init__(self, conv_channels: Sequence[int], conv_kernels: Sequence[int],
               conv_strides: Sequence[int], hidden: int,
               name: Optional[str] = None):
    super().__init__(name=name)
    if not len(conv_channels) == len(conv_kernels) == len(conv_strides):
      raise ValueError(
          "conv_channels, conv_kernels and conv_strides need one entry per "
          f"conv layer, given {tuple(conv_channels)}, {tuple(conv_kernels)}, "
          f"{tuple(conv_strides)}.")
    if hidden < 1 or min(conv_channels, default=1) < 1:
      raise ValueError(f"hidden and conv_channels must be >= 1, given "
                       f"{hidden} and {tuple(conv_channels)}.")
    self._convs = [snt.Conv2D(c, k, stride=s, name=f"conv_{i}")
                   for i, (c, k, s) in enumerate(
                       zip(conv_channels, conv_kernels, conv_strides))]
    self._linear = snt.Linear(hidden, name="hidden")

  def __call__(self, images: tf.Tensor) -> tf.Tensor:
    """images: float32 [B, H, W, C] -> float32 [B, hidden]."""
    x = images
    for conv in self._convs:
      x = tf.nn.relu(conv(x))  # [B, H / s, W / s, c]
    x = snt.Flatten()(x)  # [B, h * w * c]
    return tf.nn.relu(self._linear(x))  # [B, hidden]


class A2CNetwork(ActorCriticNetwork):
  """pi(a | window) and V(window) from a conv torso (model-free).

  torso -> linear(head_hidden) -> ReLU -> policy logits [B, A], value [B]:
  the I2A (agents/imagination/networks.py) minus its model-based path, so
  that the I2A's gain over this baseline is the imagination's.
  head_hidden = 0 leaves the layer out (the torso feeds the heads).
  """

  def __init__(self, num_actions: int, context_length: int,
               conv_channels: Sequence[int] = (16, 16),
               conv_kernels: Sequence[int] = (3, 3),
               conv_strides: Sequence[int] = (1, 2), hidden: int = 256,
               head_hidden: int = 256,
               name: Optional[str] = "a2c_network"):
    super().__init__(num_actions, context_length, name=name)
    if head_hidden < 0:
      raise ValueError(f"head_hidden must be >= 0 (0: no layer), given "
                       f"{head_hidden}.")
    self.torso = ConvTorso(conv_channels, conv_kernels, conv_strides, hidden)
    self._head = (snt.Linear(head_hidden, name="head_hidden")
                  if head_hidden else None)
    self._policy_head = snt.Linear(num_actions, name="policy_logits")
    self._value_head = snt.Linear(1, name="value")

  def __call__(self, observations: tf.Tensor,
               side_inputs: Optional[Mapping[str, tf.Tensor]] = None
               ) -> NetworkOutput:
    """observations: uint8 [B, context_length, H, W, C] (oldest first).
    No side inputs (model-free)."""
    del side_inputs
    if observations.shape[1] != self.context_length:
      raise ValueError(f"expected {self.context_length} frames per window "
                       f"([B, {self.context_length}, H, W, C]), given shape "
                       f"{observations.shape}.")
    features = self.torso(frames_on_channels(observations))  # [B, hidden]
    if self._head is not None:
      features = tf.nn.relu(self._head(features))  # [B, head_hidden]
    return NetworkOutput(
        policy_logits=self._policy_head(features),  # [B, A]
        value=tf.squeeze(self._value_head(features), -1),  # [B]
        extras={})


def make_network(config: ml_collections.ConfigDict, num_actions: int,
                 observation_shape: Tuple[int, int, int]) -> A2CNetwork:
  """The factory registered as 'a2c' in agents.builder."""
  del observation_shape  # The torso adapts to the frame size.
  net = config.network
  return A2CNetwork(num_actions, config.context_length,
                    conv_channels=tuple(net.conv_channels),
                    conv_kernels=tuple(net.conv_kernels),
                    conv_strides=tuple(net.conv_strides), hidden=net.hidden,
                    head_hidden=net.head_hidden)
