r"""python -m i2a.launch: train with server, actors and learner as processes.

On one machine (the launcher starts and supervises every role):
  python -m i2a.launch --config=configs/agents/a2c.py:minipacman \
      --workdir=DIR --num_actors=4 [--port=P] [--config.key=value ...]

Across hosts (each role alone, joined by --reverb_address; every process
but the server needs the same I2A_WEIGHTS_KEY):
  python -m i2a.launch --role=server --port=P --config=...          # host A
  python -m i2a.launch --role=learner --reverb_address=A:P \
      --workdir=DIR --config=...                                     # any host
  python -m i2a.launch --role=actor --reverb_address=A:P --rank=R \
      --config=...                                                   # per actor
  python -m i2a.launch --role=actors --reverb_address=A:P --num_actors=N \
      --rank=R0 --workdir=LOGDIR --config=...      # N supervised actors

On a Ray cluster (`pip install -e .[ray]`): the same roles as Ray actors,
placed and restarted by Ray, the server's loss survived:
  python -m i2a.launch --backend=ray [--ray_address=auto|HOST:PORT] \
      --config=... --workdir=DIR --num_actors=N
Without --ray_address it starts a Ray cluster of this machine on 127.0.0.1.

Actors (and the server) run on the CPU: their processes see no GPU
(CUDA_VISIBLE_DEVICES="") unless --actors_on_gpu; the learner gets the
launcher's devices. --deterministic is passed on to every role.

The learner owns the workdir (config.json, checkpoints/, metrics.csv, ... as
`python -m i2a.train` writes them) and resumes from it; on one machine its
checks (config, export and protocol, workdir) run first, in a `--role=check`
process, so a refused run writes nothing, not even logs/; actors seed their
environments from config.seed + rank * config.num_envs. The Reverb server
listens on all interfaces without authentication: see docs/distributed.md
("Security"). Runtime: i2a/run/launch.py (supervision) and
i2a/run/distributed.py (the roles).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from absl import app, flags

from i2a import cli
from i2a.run import launch as launching

BACKENDS = ("local", "ray")
ROLES = ("", "server", "learner", "actor", "actors", "check")

_CONFIG = cli.DEFINE_config_file(
    "config", "configs/agents/a2c.py:minipacman",
    "Agent config file[:preset] under configs/agents/.")
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run directory (the learner's; logs/ of the launcher).")
_ROLE = flags.DEFINE_enum(
    "role", "", ROLES, "Run one role alone: server, learner, actor, or "
    "actors (num_actors supervised actor processes), check (the learner's "
    "checks of config, export and workdir; writes nothing); empty: all of "
    "them on this machine, supervised.")
_NUM_ACTORS = flags.DEFINE_integer("num_actors", 2, "Actor processes.")
_REVERB_ADDRESS = flags.DEFINE_string(
    "reverb_address", "", "HOST:PORT of the Reverb server (--role=learner, "
    "actor, actors).")
_PORT = flags.DEFINE_integer(
    "port", 0, "The server's port: required with --role=server; without "
    "--role, 0 picks a free one.")
_RANK = flags.DEFINE_integer(
    "rank", 0, "The actor's rank (its seeds); with --role=actors, the first "
    "rank.")
_MAX_RESTARTS = flags.DEFINE_integer(
    "max_restarts", 10, "Restarts per process before the launcher gives up.")
_SHUTDOWN_TIMEOUT_S = flags.DEFINE_float(
    "shutdown_timeout_s", 30.0, "Seconds between SIGTERM and SIGKILL for "
    "each group of processes when shutting down.")
_CONNECT_TIMEOUT_S = flags.DEFINE_float(
    "connect_timeout_s", 120.0, "How long actors and the learner wait for "
    "the Reverb server.")
_ACTORS_ON_GPU = flags.DEFINE_bool(
    "actors_on_gpu", False, "Let the actor processes see the GPUs; by "
    "default they run on the CPU (CUDA_VISIBLE_DEVICES=\"\") and leave the "
    "GPUs to the learner.")
_BACKEND = flags.DEFINE_enum(
    "backend", "local", BACKENDS, "Who runs the roles: local (this "
    "launcher starts and supervises processes on this machine; no "
    "dependency) or ray (Ray actors on a Ray cluster: pip install -e "
    ".[ray]; docs/distributed.md).")
_RAY_ADDRESS = flags.DEFINE_string(
    "ray_address", "", "--backend=ray: the Ray cluster to join, 'auto' or "
    "HOST:PORT of its head; empty: start a local one on 127.0.0.1.")
_RAY_ACTOR_CPUS = flags.DEFINE_float(
    "ray_actor_cpus", 1.0, "--backend=ray: the CPUs each actor asks Ray "
    "for.")
flags.adopt_module_key_flags(cli)


def _require(condition: bool, message: str) -> None:
  if not condition:
    raise app.UsageError(message)


def _supervise() -> int:
  role = _ROLE.value
  _require(bool(_WORKDIR.value), "--workdir is required (the learner's run "
           "directory; the launcher writes logs/ there).")
  if role == "actors":
    _require(bool(_REVERB_ADDRESS.value), "--role=actors needs "
             "--reverb_address=HOST:PORT of the server.")
  if _BACKEND.value == "ray":
    _require(role == "", f"--backend=ray runs every role itself; given "
             f"--role={role}. Drop --role (or use --backend=local).")
    _require(not _REVERB_ADDRESS.value, "--backend=ray starts its own "
             "Reverb server (a Ray actor); drop --reverb_address.")
  elif _RAY_ADDRESS.value:
    raise app.UsageError(f"--ray_address={_RAY_ADDRESS.value} needs "
                         "--backend=ray.")
  if role == "":
    # Everything the learner checks, checked before the launcher writes
    # logs/ into the workdir (in a child: the supervisor imports no TF).
    check = subprocess.run(
        [sys.executable, "-m", "i2a.launch", "--role=check",
         f"--workdir={_WORKDIR.value}",
         *launching.config_arguments(sys.argv[1:])], check=False)
    if check.returncode:
      return check.returncode
  if _BACKEND.value == "ray":
    # pylint: disable=import-outside-toplevel
    from i2a.run import ray_backend
    try:
      ray_backend.import_ray(local=not _RAY_ADDRESS.value)
    except RuntimeError as e:
      raise app.UsageError(str(e)) from e
    return ray_backend.RayLauncher(
        launching.config_arguments(sys.argv[1:]), _WORKDIR.value,
        num_actors=_NUM_ACTORS.value, ray_address=_RAY_ADDRESS.value,
        max_restarts=_MAX_RESTARTS.value,
        shutdown_timeout_s=_SHUTDOWN_TIMEOUT_S.value,
        connect_timeout_s=_CONNECT_TIMEOUT_S.value,
        actors_on_gpu=_ACTORS_ON_GPU.value,
        actor_cpus=_RAY_ACTOR_CPUS.value,
        role_arguments=(["--deterministic"] if cli.DETERMINISTIC.value
                        else [])).run()
  launcher = launching.Launcher(
      launching.config_arguments(sys.argv[1:]), _WORKDIR.value,
      num_actors=_NUM_ACTORS.value, port=_PORT.value or None,
      reverb_address=_REVERB_ADDRESS.value, first_rank=_RANK.value,
      with_server=role == "" and not _REVERB_ADDRESS.value,
      with_learner=role == "", max_restarts=_MAX_RESTARTS.value,
      shutdown_timeout_s=_SHUTDOWN_TIMEOUT_S.value,
      connect_timeout_s=_CONNECT_TIMEOUT_S.value,
      actors_on_gpu=_ACTORS_ON_GPU.value,
      role_arguments=["--deterministic"] if cli.DETERMINISTIC.value else [])
  return launcher.run()


def _run_role() -> int:
  cli.setup_devices(cli.DETERMINISTIC.value)  # TF only where a role runs
  # pylint: disable=import-outside-toplevel
  from i2a.run import distributed
  from agents import variables
  role, config = _ROLE.value, _CONFIG.value
  if role == "check":
    _require(bool(_WORKDIR.value), "--role=check needs --workdir.")
    distributed.check_learner(config, _WORKDIR.value)
    return 0
  launching.die_with_launcher()
  stop = threading.Event()
  if role == "server":
    _require(_PORT.value > 0, "--role=server needs an explicit --port (the "
             "address the actors and the learner are given).")
    distributed.stop_on_signals(stop)
    distributed.serve(config, _PORT.value, stop)
    return 0
  _require(bool(_REVERB_ADDRESS.value), f"--role={role} needs "
           "--reverb_address=HOST:PORT of the server.")
  try:
    key = variables.key_from_environment(required=True)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  if role == "actor":
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Nothing to save: just go.
    _require(_RANK.value >= 0, f"--rank must be >= 0, given {_RANK.value}.")
    distributed.run_actor(config, _REVERB_ADDRESS.value, _RANK.value, key,
                          stop, connect_timeout_s=_CONNECT_TIMEOUT_S.value)
    return 0
  _require(bool(_WORKDIR.value), "--role=learner needs --workdir (the run "
           "directory it owns).")
  distributed.stop_on_signals(stop)
  summary = distributed.run_learner(
      config, _WORKDIR.value, _REVERB_ADDRESS.value, key, stop,
      connect_timeout_s=_CONNECT_TIMEOUT_S.value)
  print(f"learner {'stopped' if summary['stopped'] else 'finished'} at "
        f"learner step {summary['learner_steps']} "
        f"({summary['env_steps']:,} env steps); utilisation "
        f"{summary['update_s'] / summary['wall_s']:.2f}, waiting for data "
        f"{summary['data_wait_s'] / summary['wall_s']:.2f}; workdir "
        f"{summary['workdir']}", flush=True)
  # Everything is on disk. A Reverb client whose server is gone can block
  # the interpreter's exit for ever, so end here.
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access


def main(argv):
  del argv
  cli.start(_CONFIG, [_WORKDIR, _ROLE, _NUM_ACTORS, _REVERB_ADDRESS, _PORT,
                      _RANK, _ACTORS_ON_GPU, _BACKEND, _RAY_ADDRESS],
            devices=False)
  if _ROLE.value in ("", "actors"):
    sys.exit(_supervise())
  sys.exit(_run_role())


def entry() -> None:
  """The console script i2a-launch."""
  cli.run(main, __name__)


if __name__ == "__main__":
  entry()
