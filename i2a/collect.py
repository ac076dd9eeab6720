r"""python -m i2a.collect: a policy on vectorised envs -> a dataset on disk.

  python -m i2a.collect --config=configs/collect.py:small --workdir=DIR \
      [--config.train_steps=50000] [--reverb_address=HOST:PORT] \
      [--config.policy=checkpoint:RUN/a2c] [--config.policy_epsilon=0.1]

The policy is uniform random unless --config.policy=checkpoint:RUN names
the workdir of a `python -m i2a.train` run (same protocol), whose newest
checkpoint then acts; --config.policy_epsilon mixes in uniform random
actions. The manifests record the policy (docs/datasets.md).

Writes DIR/dataset/{train,test} (disjoint seeds; format in
docs/datasets.md), DIR/config.json and DIR/protocol.json. Jumpy windows are
also streamed into the Reverb `sequences` table: an embedded server by
default, or the external server at --reverb_address. A split whose manifest
exists is skipped on a rerun; an interrupted split is collected again.
"""

from __future__ import annotations

from absl import flags

from i2a import cli, collection

_CONFIG = cli.DEFINE_config_file(
    "config", "configs/collect.py:small", "Collection config file[:preset].")
_WORKDIR = flags.DEFINE_string("workdir", None,
                               "Output directory (required).")
cli.require_unless_print_config(_WORKDIR)
_REVERB_ADDRESS = flags.DEFINE_string(
    "reverb_address", "", "HOST:PORT of an external Reverb server with a "
    "`sequences` table; empty: an embedded server in this process.")
flags.adopt_module_key_flags(cli)


def main(argv):
  del argv
  cli.start(_CONFIG, [_WORKDIR, _REVERB_ADDRESS])
  collection.run(_CONFIG.value, _WORKDIR.value, _REVERB_ADDRESS.value)


def entry() -> None:
  """The console script i2a-collect."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
