"""The actor's bfloat16 weight copies (envmodels/precision.py WeightCopies,
agents/acting.py Actor): under 'bf16' graphs that read them give exactly
what the rewrite's own casts give; they follow the weights only when
refreshed, and the actor refreshes them after every pull, whoever pulled;
under fp32 nothing reads them."""

import numpy as np
import sonnet as snt
import tensorflow as tf

import envmodels
from agents import builder
from agents import variables as variables_lib
from agents.acting import Actor
from agents.imagination import networks as i2a_networks
from configs.agents import a2c as a2c_config
from configs.agents import i2a as i2a_config
from envmodels import precision
from i2a import runs
from i2a.run import evaluate as evaluation
from tests import fakes

SHAPE = (16, 16, 3)
NUM_ACTIONS = 3
FRAME = (16, 24, 3)  # the I2A's: the tiny envmodels' frame
needs_bf16 = fakes.needs_bf16


def _network(seed=0):
  return fakes.tiny_a2c_network(seed, SHAPE, NUM_ACTIONS)


def _vector_env(shape=SHAPE, num_actions=NUM_ACTIONS):
  return fakes.counting_vector_env(2, shape=shape, num_actions=num_actions,
                                   min_length=2, max_length=6)


def _traced(linear, copies=None):
  """linear(x) in a tf.function traced inside copies.reading() (or not)."""
  function = tf.function(linear)
  spec = tf.TensorSpec([4, 64], tf.float32)
  if copies is None:
    return function.get_concrete_function(spec)
  with copies.reading():
    return function.get_concrete_function(spec)


def test_copies_are_made_of_float32_matrices_and_kernels_only():
  linear = snt.Linear(8)
  linear(tf.zeros([1, 64]))
  counter = tf.Variable(tf.zeros([2, 2], tf.int64))
  copies = precision.WeightCopies([linear.w, linear.b, counter])
  assert len(copies) == 1  # w; not the bias (rank 1) nor an int64 matrix


@needs_bf16
def test_reading_the_copies_gives_the_rewrites_values_until_weights_change():
  x = tf.constant(np.random.RandomState(0).randn(4, 64), tf.float32)
  linear = snt.Linear(32)
  linear(x)
  copies = precision.WeightCopies(linear.variables)
  with precision.scope("bf16"):
    casts, read = _traced(linear), _traced(linear, copies)
    np.testing.assert_array_equal(read(x).numpy(), casts(x).numpy())
    linear.w.assign(linear.w * 3.0)
    assert np.abs(read(x).numpy() - casts(x).numpy()).max() > 0.1  # stale
    copies.refresh()
    np.testing.assert_array_equal(read(x).numpy(), casts(x).numpy())
  assert copies.refreshes == 1


def test_refresh_copies_only_the_weights_it_was_given():
  x = tf.ones([4, 64])
  frozen, learnable = snt.Linear(8), snt.Linear(8)
  frozen(x), learnable(x)
  copies = precision.WeightCopies(frozen.variables + learnable.variables,
                                   refreshed=learnable.variables)
  frozen_read = _traced(frozen, copies)
  learnable_read = _traced(learnable, copies)
  before = frozen_read(x).numpy()
  frozen.w.assign(frozen.w + 1.0)
  learnable.w.assign(tf.zeros_like(learnable.w))
  copies.refresh()
  np.testing.assert_array_equal(frozen_read(x).numpy(), before)
  np.testing.assert_array_equal(learnable_read(x).numpy(),
                                learnable.b.numpy()[None].repeat(4, 0))


def _pair(network=_network, shape=SHAPE, num_actions=NUM_ACTIONS):
  """A learner network and two actors pulling from it in one process:
  one acting on bfloat16 weight copies, one on the weights."""
  learner = network(0)
  clients, actors = [], []
  for seed, copies in ((1, True), (2, False)):
    acting = network(seed)
    clients.append(variables_lib.LocalVariables(
        learner.learnable_variables, acting.learnable_variables))
    actors.append(Actor(acting, _vector_env(shape=shape,
                                            num_actions=num_actions),
                        unroll_length=3, seed=5,
                        variable_client=clients[-1], weight_copies=copies))
  return learner, clients, actors


def _scale(network, factor):
  for variable in network.learnable_variables:
    variable.assign(variable * factor)


def _publish(learner, clients, step):
  for variable in learner.learnable_variables:
    variable.assign(variable * (1.0 + step))
  for client in clients:
    client.publish(step)


def _assert_same(batches):
  copied, cast = batches
  for name in copied:
    np.testing.assert_array_equal(copied[name], cast[name], name)


@needs_bf16
def test_an_actor_on_copies_acts_as_one_on_casts_across_pulls():
  learner, clients, actors = _pair()
  with precision.scope("bf16"):
    for step in range(3):
      _publish(learner, clients, step)
      if step == 2:  # pulled by the caller, as distributed actors do
        for client in clients:
          client.update()
      _assert_same([actor.unroll(pull=step < 2)[0] for actor in actors])
  copies = actors[0]._weight_copies  # pylint: disable=protected-access
  assert copies is not None and copies.refreshes == 3
  assert actors[1]._weight_copies is None  # pylint: disable=protected-access


@needs_bf16
def test_an_i2a_acts_on_its_own_and_its_envmodels_copies_as_on_casts(
    tmp_path):
  """The I2A's fused act (initial state from cached encodings, rollouts,
  encoder, heads) over a frozen dSSM-DET: the same unrolls, stored
  rollouts included."""
  spec = envmodels.EnvModelSpec(kind="dssm_det", observation_shape=FRAME,
                                num_actions=NUM_ACTIONS, jump=1,
                                context_length=3)
  export = envmodels.export(envmodels.build(
      spec, seed=1, **envmodels.model_class("dssm_det").tiny_hyperparameters()
  ), str(tmp_path / "det"))

  def i2a(seed):
    tf.random.set_seed(seed)
    network = i2a_networks.make_network(
        i2a_config.get_config("tiny"), NUM_ACTIONS, FRAME,
        envmodel=envmodels.load(export, seed=0))
    builder.create_variables(network, FRAME)
    return network
  learner, clients, actors = _pair(i2a, FRAME)
  assert actors[0].network.caches_context
  with precision.scope("bf16"):
    for step in range(2):
      _publish(learner, clients, step)
      _assert_same([actor.unroll()[0] for actor in actors])
  copies = actors[0]._weight_copies  # pylint: disable=protected-access
  assert len(copies) > len(  # the frozen envmodel's weights too
      [v for v in learner.learnable_variables if v.shape.rank >= 2])


def test_under_fp32_an_actor_reads_its_weights_not_the_copies():
  learner, clients, actors = _pair()
  with precision.scope("fp32"):
    _publish(learner, clients, 1)
    _assert_same([actor.unroll()[0] for actor in actors])
  copies = actors[0]._weight_copies  # pylint: disable=protected-access
  assert copies.refreshes == 0


@needs_bf16
def test_evaluation_during_training_follows_the_learner_through_its_copies():
  """TrainingEvaluation refreshes its copies after copying the learner's
  weights: after the learner's weights change, it plays what a fresh
  evaluation (copies made from the new weights) plays."""
  config = a2c_config.get_config("tiny")
  config.precision = "bf16"
  config.eval_episodes = 2
  protocol = runs.protocol_from_config(config)
  with precision.scope("bf16"):
    learner = evaluation.build_agent(config, protocol)
    evaluator = evaluation.TrainingEvaluation(config, protocol, learner)
    before = evaluator()
    _scale(learner, 4.0)
    after = evaluator()
    fresh = evaluation.TrainingEvaluation(config, protocol, learner)()
  assert after.actions != before.actions  # the new weights play otherwise
  assert after.actions == fresh.actions
  assert after.returns == fresh.returns and after.lengths == fresh.lengths
