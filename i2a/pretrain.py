r"""python -m i2a.pretrain: train an environment model and export it frozen.

  python -m i2a.pretrain --config=configs/envmodels/dssm_det.py:small \
      --config.data=COLLECT_WORKDIR/dataset --workdir=DIR

Writes DIR/{config.json, protocol.json, checkpoints/, tb/, metrics.csv,
eval.csv, images/, export/}; rerunning resumes from the last checkpoint and
skips a finished run. Loss knobs: --config.loss.kl_scale, .free_nats,
.free_nats_per, .global_kl_scale, .overshooting (docs/envmodels.md). The
reward coding (--config.model.reward_scale, 'auto' by default, and
.reward_bits) is derived or checked from the training split before the
workdir is written; a coding that cannot represent the rewards is refused
(docs/envmodels.md, "Reward coding").
"""

from absl import flags

from i2a import cli, pretraining

_CONFIG = cli.DEFINE_config_file(
    "config", "configs/envmodels/dssm_det.py:small",
    "Envmodel config file[:preset] under configs/envmodels/ (ar, rar, vae, "
    "dssm_det, dssm_vae, sssm, sssm_action_free).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (required).")
cli.require_unless_print_config(_WORKDIR)
flags.adopt_module_key_flags(cli)


def main(argv):
  del argv
  cli.start(_CONFIG, [_WORKDIR])
  pretraining.run(_CONFIG.value, _WORKDIR.value)


def entry() -> None:
  """The console script i2a-pretrain."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
