r"""python -m i2a.collect: a policy on vectorised envs -> a dataset on disk.

  python -m i2a.collect --config=configs/collect.py:small --workdir=DIR \
      [--config.train_steps=50000] [--config.policy=checkpoint:RUN/a2c] \
      [--config.policy_epsilon=0.1]

The policy is uniform random unless --config.policy=checkpoint:RUN names
the workdir of a `python -m i2a.train` run (same protocol), whose newest
checkpoint then acts; --config.policy_epsilon mixes in uniform random
actions. The manifests record the policy (docs/datasets.md).

Writes DIR/dataset/{train,test} (disjoint seeds; format in
docs/datasets.md), DIR/config.json and DIR/protocol.json: the dataset
`python -m i2a.pretrain --config.data=DIR/dataset` reads. A split whose
manifest exists is skipped on a rerun; an interrupted split is collected
again. To collect on several hosts, give each its own --workdir (on shared
storage or copied over) and its own seeds (docs/datasets.md).
"""

from __future__ import annotations

from absl import flags

from i2a import cli
from i2a.run import collect as collection

_CONFIG = cli.DEFINE_config_file(
    "config", "configs/collect.py:small", "Collection config file[:preset].")
_WORKDIR = flags.DEFINE_string("workdir", None,
                               "Output directory (required).")
cli.require_unless_print_config(_WORKDIR)
flags.adopt_module_key_flags(cli)


def main(argv):
  del argv
  cli.start(_CONFIG, [_WORKDIR])
  collection.run(_CONFIG.value, _WORKDIR.value)


def entry() -> None:
  """The console script i2a-collect."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
