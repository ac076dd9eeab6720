"""The in-process transport of the embedded runtime (i2a/run/train.py).

`LocalUnrolls` (agents/learning.py) and `LocalVariables` (agents/
variables.py) against what they replace there: the Reverb `unrolls` queue
read by `unroll_dataset`, and the signed `variables` table. Same unrolls in
the same order, same learner updates, same weights at the actor. And the
queue's two item layouts (`write_unrolls`): an item per unroll batch gives
the learner what an item per unroll does.
"""

import functools

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from agents import builder, learning
from agents import variables as variables_lib
from agents.a2c import networks
from agents.acting import Actor, unroll_signature, write_unrolls
from i2a.replay import tables
from tests import fakes

SHAPE = (16, 16, 3)
NUM_ACTIONS = 3
UNROLL = 4


def _network(seed=0):
  return fakes.tiny_a2c_network(seed, SHAPE, NUM_ACTIONS)


def _make_env():
  return fakes.CountingEnv(shape=SHAPE, num_actions=NUM_ACTIONS,
                           min_length=2, max_length=6)


def _vector_env(num_envs):
  return gym.vector.SyncVectorEnv(
      [functools.partial(_make_env) for _ in range(num_envs)],
      autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def _batch(start, size):
  """{field: [size, ...]} whose rows count from `start`."""
  rows = np.arange(start, start + size)
  return {"action": np.repeat(rows[:, None], 3, 1).astype(np.int32),
          "reward": rows.astype(np.float32)}


# -- LocalUnrolls ----------------------------------------------------------------

def test_local_unrolls_give_the_oldest_unrolls_in_order_across_batches():
  queue = learning.LocalUnrolls(capacity=8)
  queue.put(_batch(0, 3))
  queue.put(_batch(3, 3))
  assert len(queue) == 6
  first = queue.take(4)  # all of the first batch and one of the second
  np.testing.assert_array_equal(first["reward"], [0, 1, 2, 3])
  np.testing.assert_array_equal(first["action"][:, 0], [0, 1, 2, 3])
  assert len(queue) == 2
  queue.put(_batch(6, 2))
  np.testing.assert_array_equal(queue.take(4)["reward"], [4, 5, 6, 7])
  assert len(queue) == 0


def test_local_unrolls_refuse_what_would_block_and_malformed_batches():
  with pytest.raises(ValueError, match="capacity must be >= 1"):
    learning.LocalUnrolls(0)
  queue = learning.LocalUnrolls(capacity=4)
  queue.put(_batch(0, 3))
  with pytest.raises(RuntimeError, match="holds 3 of 4 unrolls and cannot "
                     "take 2 more"):
    queue.put(_batch(3, 2))
  with pytest.raises(RuntimeError, match="needs 4 unrolls and the local "
                     "unrolls queue holds 3"):
    queue.take(4)
  with pytest.raises(ValueError, match="one leading size"):
    queue.put({"action": np.zeros([1, 3]), "reward": np.zeros([2])})
  assert len(queue) == 3  # nothing was taken or added by the refusals


def test_an_actor_takes_reverb_or_a_sink_not_both():
  server = tables.start_server([tables.unrolls_table(
      unroll_signature(UNROLL, 3, SHAPE, NUM_ACTIONS), 8)])
  try:
    with pytest.raises(ValueError, match="not both"):
      Actor(_network(), _vector_env(2), UNROLL, seed=0,
            client=server.localhost_client(),
            sink=learning.LocalUnrolls(8))
  finally:
    server.stop()


def test_a_learner_on_local_unrolls_needs_a_batch_size():
  with pytest.raises(ValueError, match="needs batch_size >= 1"):
    learning.Learner(_network(), learning.LocalUnrolls(4),
                     learning.rmsprop(1e-3, 0.99, 1e-5), discount=0.99,
                     value_coef=0.5, entropy_coef=0.01, clip_norm=0.5)


def test_local_unrolls_feed_the_learner_what_reverb_does():
  """Two actors with the same seed and weights, one writing to Reverb, one
  to LocalUnrolls; two learners from the same weights, one on each: the
  batches, the metrics and the weights after each update are equal."""
  server = tables.start_server([tables.unrolls_table(
      unroll_signature(UNROLL, 3, SHAPE, NUM_ACTIONS), 16)])
  try:
    queue = learning.LocalUnrolls(16)
    actors = [Actor(_network(), _vector_env(2), UNROLL, seed=3,
                    client=server.localhost_client()),
              Actor(_network(), _vector_env(2), UNROLL, seed=3, sink=queue)]
    learners = [
        learning.Learner(
            _network(seed=1), source, learning.rmsprop(1e-2, 0.99, 1e-5),
            discount=0.99, value_coef=0.5, entropy_coef=0.01, clip_norm=0.5,
            reward_clipping="none", **extra)
        for source, extra in (
            # A minute: the first unrolls wait for tracing on a busy machine.
            (learning.unroll_dataset(f"localhost:{server.port}", 4,
                                     timeout_ms=60_000), {}),
            (queue, dict(batch_size=4)))]
    for _ in range(3):  # two unrolls of 2 envs per update of 4
      for _ in range(2):
        via_reverb, _ = actors[0].unroll()
        local, _ = actors[1].unroll()
        for key in via_reverb:
          np.testing.assert_array_equal(local[key], via_reverb[key])
      metrics = [learner.step() for learner in learners]
      assert metrics[0] == metrics[1]
      for a, b in zip(*(learner.network.learnable_variables
                        for learner in learners)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert len(queue) == 0
    for actor in actors:
      actor.close()
  finally:
    server.stop()


# -- LocalVariables --------------------------------------------------------------

def test_local_variables_pass_each_publication_to_the_actor_once():
  learner, actor = _network(seed=1), _network(seed=2)
  channel = variables_lib.LocalVariables(learner.learnable_variables,
                                         actor.learnable_variables)
  with pytest.raises(RuntimeError, match="before the learner published"):
    channel.update()
  assert channel.version == (-1, -1)
  channel.publish(7)
  published = [v.numpy() for v in learner.learnable_variables]
  # The learner moves on; the actor gets what was published, not this.
  learner.learnable_variables[0].assign_add(
      tf.ones_like(learner.learnable_variables[0]))
  assert channel.update()
  assert channel.learner_step == 7 and channel.version == (0, 7)
  for value, variable in zip(published, actor.learnable_variables):
    np.testing.assert_array_equal(variable.numpy(), value)
  assert not channel.update()  # nothing newer
  channel.publish(8)
  assert channel.update()
  np.testing.assert_array_equal(actor.learnable_variables[0].numpy(),
                                learner.learnable_variables[0].numpy())


# -- Reverb items of an unroll batch -------------------------------------------------

def test_items_of_several_unrolls_read_as_items_of_one_do():
  """Actors of 4 environments with the same seed, writing items of 1, 2
  and 4 unrolls: the learner's batches of 8 (8 items of 1, 4 of 2 or 2 of
  4, merged) hold the same unrolls in the same order, two unroll batches
  each."""
  layouts = (1, 2, 4)
  signatures = {per_item: unroll_signature(UNROLL, 3, SHAPE, NUM_ACTIONS,
                                           unrolls_per_item=per_item)
                for per_item in layouts}
  assert signatures[2]["observation"].shape == [2, UNROLL + 1, 3, *SHAPE]
  assert signatures[4]["action"].shape == [4, UNROLL]
  server = tables.start_server([
      tables.unrolls_table(signatures[per_item], 16 // per_item,
                           name=f"unrolls_{per_item}")
      for per_item in layouts])
  try:
    actors = {per_item: Actor(_network(), _vector_env(4), UNROLL, seed=3,
                              client=server.localhost_client(),
                              table=f"unrolls_{per_item}",
                              unrolls_per_item=per_item)
              for per_item in layouts}
    written = {per_item: [actor.unroll()[0] for _ in range(4)]
               for per_item, actor in actors.items()}
    info = server.localhost_client().server_info()
    for per_item in layouts:  # 16 unrolls each
      assert info[f"unrolls_{per_item}"].current_size == 16 // per_item
    # Every unroll is in its table: the prefetch beyond the two batches
    # read waits out the timeout when the dataset closes, so keep it short.
    reads = {per_item: list(learning.unroll_dataset(
        f"localhost:{server.port}", 8, table=f"unrolls_{per_item}",
        timeout_ms=2_000, unrolls_per_item=per_item).take(2))
             for per_item in layouts}
    for per_item in layouts:
      for step in range(2):
        for name, spec in signatures[1].items():
          got = reads[per_item][step][name].numpy()
          assert got.shape == (8, *spec.shape), name
          np.testing.assert_array_equal(  # written batches 2s, 2s + 1
              got, np.concatenate([written[1][2 * step][name],
                                   written[1][2 * step + 1][name]]))
    for actor in actors.values():
      actor.close()
  finally:
    server.stop()


def test_item_layouts_that_do_not_fit_are_refused():
  with pytest.raises(ValueError, match="unrolls_per_item must be an integer "
                     ">= 1"):
    unroll_signature(UNROLL, 3, SHAPE, NUM_ACTIONS, unrolls_per_item=0)
  with pytest.raises(ValueError, match=r"a batch of 6 unrolls cannot be read "
                     r"from a queue whose items hold 4 unrolls each .* make "
                     r"config.batch_size a positive multiple of "
                     r"config.num_envs .* or read batches of a multiple of "
                     r"4\."):
    learning.unroll_dataset("localhost:1", 6, unrolls_per_item=4)
  with pytest.raises(ValueError, match="an actor of 2 environments writes "
                     "items of a number of unrolls that divides 2, given "
                     "unrolls_per_item=3"):
    Actor(_network(), _vector_env(2), UNROLL, seed=0, unrolls_per_item=3)

  class Refusing:  # write_unrolls refuses before it writes anything
    def __getattr__(self, name):
      raise AssertionError(f"wrote ({name})")
  with pytest.raises(ValueError, match="an unroll batch of 3 environments "
                     "cannot be written as items of 2 unrolls"):
    write_unrolls(Refusing(), "unrolls", _batch(0, 3), 2)
  with pytest.raises(ValueError, match="one leading size"):
    write_unrolls(Refusing(), "unrolls",
                  {"action": np.zeros([2, 3]), "reward": np.zeros([3])}, 1)


def test_local_variables_refuse_another_architecture():
  other = networks.A2CNetwork(NUM_ACTIONS, 3, conv_channels=(4,),
                              conv_kernels=(3,), conv_strides=(2,), hidden=16)
  builder.create_variables(other, SHAPE)
  with pytest.raises(ValueError, match="does not match the learner"):
    variables_lib.LocalVariables(_network().learnable_variables,
                                 other.learnable_variables)
