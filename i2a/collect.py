"""python -m i2a.collect: a policy on vectorised envs -> a dataset on disk.

  python -m i2a.collect --config=configs/collect.py:small --workdir=DIR \
      [--config.train_steps=50000] [--reverb_address=HOST:PORT]

Writes DIR/dataset/{train,test} (disjoint seeds; format in
docs/datasets.md), DIR/config.json and DIR/protocol.json. Jumpy windows are
also streamed into the Reverb `sequences` table: an embedded server by
default, or the external server at --reverb_address. A split whose manifest
exists is skipped on a rerun; an interrupted split is collected again.
"""

from __future__ import annotations

import os

from absl import app, flags, logging
from ml_collections import config_flags

from i2a import collection, environments, runs
from i2a.replay import files, tables

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/collect.py:small", "Collection config file[:preset].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.",
                               required=True)
_REVERB_ADDRESS = flags.DEFINE_string(
    "reverb_address", "", "HOST:PORT of an external Reverb server with a "
    "`sequences` table; empty: an embedded server in this process.")


def make_policy(config, protocol: environments.Protocol) -> collection.Policy:
  if config.policy != "random":
    raise ValueError(
        f"config.policy={config.policy!r} is not available: collection runs "
        "the uniform random policy ('random').")
  return collection.uniform_random_policy(environments.num_actions(protocol))


def run(config, workdir: str, reverb_address: str = "") -> dict:
  """Collects the train and test splits; returns their manifests."""
  protocol = runs.protocol_from_config(config)
  if config.test_seed < config.seed + config.num_envs and (
      config.seed < config.test_seed + config.num_envs):
    raise ValueError(f"train seeds [{config.seed}, +{config.num_envs}) and "
                     f"test seeds [{config.test_seed}, +{config.num_envs}) "
                     "overlap; pick disjoint config.seed and config.test_seed.")
  workdir = runs.prepare_workdir(workdir, config, protocol)
  policy = make_policy(config, protocol)
  seq = config.sequence
  sequence = collection.SequenceSpec(seq.context_length, seq.T, seq.jump,
                                     seq.stride)
  server = None
  if reverb_address:
    client = tables.connect(reverb_address)
    tables.table_signature(client, tables.SEQUENCES)  # KeyError if missing
  else:
    signature = tables.sequence_signature(protocol.observation_shape,
                                          sequence.length, sequence.jump)
    server = tables.start_server(
        [tables.sequences_table(signature, config.reverb_max_size)])
    client = server.localhost_client()
  dataset_dir = os.path.join(workdir, "dataset")
  manifests = {}
  try:
    for split, steps, seed in (("train", config.train_steps, config.seed),
                               ("test", config.test_steps, config.test_seed)):
      path = files.split_path(dataset_dir, split)
      if os.path.exists(os.path.join(path, files.MANIFEST)):
        manifest = files.read_manifest(path)
        if (manifest.get("steps_requested") == steps and
            environments.Protocol.from_json(manifest["protocol"]) == protocol):
          logging.info("%s split already collected: %s", split, path)
          manifests[split] = manifest
          continue
      metadata = dict(split=split, protocol=protocol.to_json(),
                      policy=config.policy, steps_requested=steps)
      stats = collection.collect_split(
          protocol, path, steps, config.num_envs, seed, policy,
          metadata=metadata, client=client, sequence=sequence,
          steps_per_shard=config.steps_per_shard,
          progress_name=f"collect {split}",
          asynchronous=config.asynchronous)
      logging.info("%s: %s", split, stats)
      manifests[split] = files.read_manifest(path)
  finally:
    if server is not None:
      server.stop()
  print(f"dataset written to {dataset_dir} "
        f"(train {manifests['train']['steps']:,} steps, "
        f"test {manifests['test']['steps']:,} steps)", flush=True)
  return manifests


def main(argv):
  del argv
  run(_CONFIG.value, _WORKDIR.value, _REVERB_ADDRESS.value)


if __name__ == "__main__":
  app.run(main)
