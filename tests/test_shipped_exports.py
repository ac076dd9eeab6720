"""The exports shipped in exports/ (exports/README.md): they load, record
their provenance, agree with the agent preset they are shipped for, and
roll out finite features."""

import os

import numpy as np
import pytest
import tensorflow as tf

import envmodels
from configs.agents import i2a as i2a_config
from i2a import runs
from i2a.run import exports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REGULAR = "MiniPacman-regular-v0"
# export -> (the agent preset it is shipped for, its env_id: None for the
# preset's own).
SHIPPED = {
    "exports/minipacman_avoid/dssm_det": ("minipacman", None),
    "exports/minipacman_regular/dssm_det": ("minipacman", REGULAR),
    "exports/minipacman_regular/sssm": ("minipacman", REGULAR),
    "exports/minipacman_regular/sssm_action_free": ("minipacman", REGULAR),
}


def test_every_shipped_export_is_listed_here_and_in_the_readme():
  exports = os.path.join(ROOT, "exports")
  found = sorted(os.path.relpath(root, ROOT) for root, _, names
                 in os.walk(exports) if "spec.json" in names)
  assert found == sorted(SHIPPED)
  readme = open(os.path.join(exports, "README.md")).read()
  for path in SHIPPED:
    assert f"`{os.path.relpath(path, 'exports')}`" in readme


@pytest.mark.parametrize("path,shipped_for", sorted(SHIPPED.items()))
def test_a_shipped_export_loads_agrees_and_rolls_out(path, shipped_for):
  preset, env_id = shipped_for
  export = os.path.join(ROOT, path)
  config = i2a_config.get_config(preset)
  if env_id is not None:
    config.protocol.env_id = env_id
  protocol = runs.protocol_from_config(config)
  identity = exports.check_export(config, protocol, export)  # agrees
  assert identity.fingerprint == envmodels.fingerprint(export)
  provenance = envmodels.provenance(export)
  assert len(provenance["data"]["fingerprint"]) == 64
  model = envmodels.load(export)
  spec = model.spec
  assert spec.observation_shape == (*protocol.observation_size, 3)
  rng = np.random.default_rng(0)
  frames = tf.constant(rng.integers(0, 256, (2, spec.context_length,
                                             *spec.observation_shape)),
                       tf.uint8)
  actions = tf.constant(rng.integers(0, spec.num_actions, (2, 4, spec.jump)),
                        tf.int32)
  out = model.rollout(model.initial_state(frames), actions)
  assert out.rewards.shape == (2, 4)
  assert np.all(np.isfinite(out.features.numpy()))
