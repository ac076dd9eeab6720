"""The Ray backend of `python -m i2a.launch --backend=ray`: roles as Ray actors.

Where it sits (docs/distributed.md, "On a Ray cluster"): the same roles as
the local supervisor (i2a/run/launch.py) runs, each the same command
`python -m i2a.launch --role=ROLE ...` (i2a/run/distributed.py: the
server, the learner, the actors), but every role process is owned by a
Ray actor (`RoleProcess`) that Ray places, restarts and stops:

  driver (this module, `RayLauncher`)
    ├─ placement group, STRICT_PACK on one node:
    │    bundle 0: RoleProcess "server"   -> python -m i2a.launch --role=server
    │    bundle 1: RoleProcess "learner"  -> ... --role=learner (a GPU if the
    │                                        cluster has one)
    └─ RoleProcess "actor-R" (CPU only, anywhere) -> ... --role=actor --rank=R

A Ray actor's `run()` starts its role process, echoes its output (Ray
forwards it to the driver prefixed with the role's name; on the actor's node
it also goes to WORKDIR/logs/NAME.log) and waits for it. A role process
that dies (a signal, or an exit that is not the end of training) takes its
Ray actor with it (`os._exit`): Ray restarts the actor (`max_restarts`)
and retries its `run()` (`max_task_retries`), which starts the role again.
The server restarts in its bundle, so on the same node and port: actors
and learner reconnect (distributed.ServerWatch), the learner republishes
its weights and counts the unrolls lost (WORKDIR/server.json). The learner
restarts from its newest checkpoint. The learner's exit 0 (its budget
reached) ends the run; its other exits (but a lost server's) are fatal.

SIGINT/SIGTERM to the driver: the learner is stopped first (SIGTERM: a
final checkpoint), then the actors, then the server, each group given
`shutdown_timeout_s`; then the Ray actors are killed (no restart) and a
Ray cluster this driver started is shut down.

Ray is optional (`pip install -e .[ray]`): it is imported only here, and
only when this backend runs (`import_ray`). Every address of a local
cluster is loopback (127.0.0.1). Ray ships this module's code to its
workers by value, so they run `RoleProcess` without importing the i2a
package (and TensorFlow with it).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, TextIO

from i2a import io_utils
from i2a.run import launch as launching

LOOPBACK = "127.0.0.1"
USAGE_STATS_ENV = "RAY_USAGE_STATS_ENABLED"
# Off: Ray runs as one local node that advertises and listens on loopback
# only (otherwise it swaps 127.0.0.1 for the host's outward address and
# listens on all interfaces). Read when ray is imported.
CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
EXIT_SERVER_LOST = 75  # i2a.run.distributed.EXIT_SERVER_LOST (no TF here)
# What RoleProcess uses of i2a, as values: Ray ships this module's classes
# and functions by value (`_ship_by_value`), so a Ray worker never imports
# the i2a package (which loads TensorFlow: about 450 MB per worker).
_LAUNCHER_PID_ENV = launching.LAUNCHER_PID_ENV
SERVER_BUNDLE, LEARNER_BUNDLE = 0, 1


def import_ray(local: bool = False):
  """The ray module, with usage statistics off (and, `local`, for a
  cluster of this machine on loopback only); a clear error without it."""
  os.environ.setdefault(USAGE_STATS_ENV, "0")
  if local:
    os.environ[CLUSTER_ENV] = "0"
  try:
    import ray  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise RuntimeError(
        f"--backend=ray needs Ray, which is not installed here ({e}). "
        "Install the optional extra: pip install -e .[ray] (or run without "
        "--backend=ray: the local launcher needs nothing more).") from e
  return ray


def restarts_after(role: str, code: int, stopping: bool) -> bool:
  """Whether a role process's end (its exit code; < 0: killed by that
  signal) calls for a restart by Ray.

  Not when it was asked to stop. The learner's exit 0 is the end of
  training, and its other exits but a lost server's are errors a restart
  would repeat: the driver decides. Any other end is restarted.
  """
  if stopping:
    return False
  if role == "learner":
    return code < 0 or code == EXIT_SERVER_LOST
  return True


class RoleProcess:
  """One role process under a Ray actor (decorated by `ray.remote` at run
  time: Ray is optional)."""

  def __init__(self, name: str, role: str, arguments: Sequence[str],
               env: Dict[str, str], cwd: str, log_dir: Optional[str]):
    self.name, self.role = name, role
    self._arguments = list(arguments)
    self._env = dict(env)
    self._cwd = cwd
    self._log_dir = log_dir
    self._popen: Optional[subprocess.Popen] = None
    self._stopping = False
    self._lock = threading.Lock()
    self._node: Optional[str] = None

  def __repr__(self) -> str:  # Ray's prefix of this actor's log lines
    return self.name

  def where(self) -> Dict[str, Any]:
    """The role process's pid (None before it starts), the Ray worker's
    pid and the node's address."""
    with self._lock:
      pid = self._popen.pid if self._popen is not None else None
    if self._node is None:
      self._node = node_address()
    return dict(pid=pid, worker_pid=os.getpid(), node=self._node)

  def _log(self):
    if not self._log_dir:
      return None
    try:
      os.makedirs(self._log_dir, exist_ok=True)
      log = open(os.path.join(self._log_dir, f"{self.name}.log"), "ab")
    except OSError:  # Not this node's directory: Ray's logs only.
      return None
    log.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} start under Ray "
              f"(worker pid {os.getpid()}) ===\n".encode())
    return log

  def run(self) -> int:
    """Starts the role and waits for it; its exit code if it ended for
    good, else ends this worker so that Ray restarts the actor."""
    env = {**os.environ, **self._env,
           _LAUNCHER_PID_ENV: str(os.getpid())}
    with self._lock:
      if self._stopping:
        return 0
      self._popen = subprocess.Popen(
          [sys.executable, "-m", "i2a.launch"] + self._arguments,
          cwd=self._cwd, env=env, stdin=subprocess.DEVNULL,
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
          start_new_session=True)
    print(f"started {self.name} (pid {self._popen.pid})", flush=True)
    log = self._log()
    try:
      for line in self._popen.stdout:
        if log is not None:
          log.write(line)
          log.flush()
        text = line.decode("utf-8", "replace").rstrip()
        if text:
          print(text, flush=True)
    finally:
      if log is not None:
        log.close()
    code = self._popen.wait()
    if not restarts_after(self.role, code, self._stopping):
      return code
    how = (f"was killed by signal {-code}" if code < 0
           else f"exited with code {code}")
    print(f"{self.name} {how}: ending its Ray actor, Ray restarts it",
          flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)  # pylint: disable=protected-access

  def stop(self, kill: bool = False) -> None:
    """SIGTERM (or SIGKILL) to the role process; `run()` then returns."""
    with self._lock:
      self._stopping = True
      if self._popen is not None and self._popen.poll() is None:
        self._popen.send_signal(signal.SIGKILL if kill else signal.SIGTERM)


def _ship_by_value(ray) -> None:
  """Ray pickles this module's classes and functions by value: its workers
  run RoleProcess without importing i2a (RoleProcess and the functions it
  calls use only the standard library, Ray and module-level constants)."""
  ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def node_address() -> str:
  """The address Ray knows this node by (in a Ray worker): 127.0.0.1 on a
  local cluster (not the host's outward address)."""
  import ray  # pylint: disable=import-outside-toplevel
  node_id = ray.get_runtime_context().get_node_id()
  for node in ray.nodes():
    if node["NodeID"] == node_id:
      return node["NodeManagerAddress"]
  raise RuntimeError(f"this Ray node ({node_id}) is not among ray.nodes()")


def _free_address() -> str:
  """HOST:PORT free on the node this runs on (the server's bundle)."""
  import portpicker  # pylint: disable=import-outside-toplevel
  return f"{node_address()}:{portpicker.pick_unused_port()}"


class RayLauncher:
  """Starts the roles as Ray actors and watches them until the end."""

  def __init__(self, config_args: Sequence[str], workdir: str, *,
               num_actors: int, ray_address: str = "",
               max_restarts: int = 10, shutdown_timeout_s: float = 30.0,
               connect_timeout_s: float = 120.0, actors_on_gpu: bool = False,
               actor_cpus: float = 1.0, num_cpus: Optional[int] = None,
               role_arguments: Sequence[str] = (),
               stream: TextIO = sys.stderr):
    """
    Args:
      config_args: the --config arguments every role gets.
      workdir: the learner's workdir; logs/ goes there (on each node).
      num_actors: actor roles, ranks 0 .. num_actors - 1.
      ray_address: '' starts a local Ray cluster on 127.0.0.1; 'auto' or
        HOST:PORT joins a running one.
      max_restarts: per role (Ray's max_restarts of its actor).
      shutdown_timeout_s: per group, between SIGTERM and SIGKILL.
      connect_timeout_s: how long roles wait for (or retry) the server.
      actors_on_gpu: let the actors see GPUs (they ask Ray for none).
      actor_cpus: the CPUs each actor asks Ray for.
      num_cpus: a local cluster's CPUs (None: max(cpus, roles' needs)).
      role_arguments: flags every role gets besides the config ones.
    """
    if num_actors < 0:
      raise ValueError(f"--num_actors must be >= 0, given {num_actors}.")
    if actor_cpus <= 0:
      raise ValueError(f"--ray_actor_cpus must be > 0, given {actor_cpus}.")
    self.workdir = io_utils.ensure_writable_dir(workdir)
    self.logs = os.path.join(self.workdir, launching.LOGS)
    os.makedirs(self.logs, exist_ok=True)
    self._config_args = list(config_args) + list(role_arguments)
    self._num_actors = num_actors
    self._ray_address = ray_address
    self._max_restarts = max_restarts
    self._shutdown_timeout_s = shutdown_timeout_s
    self._connect_timeout_s = connect_timeout_s
    self._actors_on_gpu = actors_on_gpu
    self._actor_cpus = actor_cpus
    self._num_cpus = num_cpus
    self._stream = stream
    self._signal: Optional[int] = None
    self._env = {k: os.environ[k] for k in (
        "PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL", launching.KEY_ENV)
                 if os.environ.get(k)}
    self._env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    self._env["PYTHONUNBUFFERED"] = "1"
    if not self._env.get(launching.KEY_ENV):
      # Every role gets it from this driver (Ray's channels carry it).
      self._env[launching.KEY_ENV] = secrets.token_hex(32)
      self._say(f"{launching.KEY_ENV} is not set: generated a random key "
                "for this launch's roles")
    self.reverb_address = ""
    self.handles: Dict[str, Any] = {}  # name -> Ray actor
    self.roles: Dict[str, str] = {}  # name -> role
    self.status: Dict[str, Dict[str, Any]] = {}  # name -> where + restarts
    self._runs: Dict[Any, str] = {}  # each role's run() -> its name
    self._group = None  # the server's and learner's placement group

  def _say(self, message: str) -> None:
    print(f"[launch] {message}", file=self._stream, flush=True)

  def _on_signal(self, signum, frame) -> None:
    del frame
    self._signal = signum

  # -- Ray -----------------------------------------------------------------------

  def _init_ray(self):
    ray = import_ray(local=not self._ray_address)
    if self._ray_address:
      ray.init(address=self._ray_address, log_to_driver=True)
      self._say(f"joined the Ray cluster at {self._ray_address}: "
                f"{ray.cluster_resources()}")
    else:
      needed = 2 + self._num_actors * self._actor_cpus
      num_cpus = self._num_cpus or int(max(os.cpu_count() or 1, needed) + 0.5)
      ray.init(_node_ip_address=LOOPBACK, include_dashboard=False,
               num_cpus=num_cpus, log_to_driver=True)
      self._say(f"started a local Ray cluster on {LOOPBACK} ({num_cpus} "
                "CPUs)")
    return ray

  def _start_roles(self, ray) -> None:
    # pylint: disable=import-outside-toplevel
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import (
        PlacementGroupSchedulingStrategy)
    _ship_by_value(ray)
    gpus = ray.cluster_resources().get("GPU", 0)
    learner_bundle = {"CPU": 1, **({"GPU": 1} if gpus else {})}
    group = placement_group([{"CPU": 1}, learner_bundle],
                            strategy="STRICT_PACK")
    self._group = group
    ray.get(group.ready(), timeout=self._connect_timeout_s)

    def in_bundle(index: int):
      return PlacementGroupSchedulingStrategy(
          placement_group=group, placement_group_bundle_index=index)

    self.reverb_address = ray.get(ray.remote(num_cpus=0)(
        _free_address).options(
            scheduling_strategy=in_bundle(SERVER_BUNDLE)).remote())
    port = int(self.reverb_address.rsplit(":", 1)[1])
    remote = ray.remote(RoleProcess)
    options = dict(max_restarts=self._max_restarts, max_task_retries=-1,
                   max_concurrency=4)
    cwd = os.getcwd()
    resources = {
        "server": dict(num_cpus=1,
                       scheduling_strategy=in_bundle(SERVER_BUNDLE)),
        "learner": dict(num_cpus=1, num_gpus=1 if gpus else 0,
                        scheduling_strategy=in_bundle(LEARNER_BUNDLE)),
        "actor": dict(num_cpus=self._actor_cpus, num_gpus=0)}
    children = launching.role_children(
        self._config_args, self._connect_timeout_s, self.reverb_address,
        self.workdir, range(self._num_actors), port=port,
        actors_on_gpu=self._actors_on_gpu)
    specs = [(c.name, c.role, c.arguments, c.env, resources[c.role])
             for c in children]
    for name, role, arguments, env, resources in specs:
      self.roles[name] = role
      self.handles[name] = remote.options(**options, **resources).remote(
          name, role, arguments, {**self._env, **env}, cwd, self.logs)
      self.status[name] = dict(role=role, pid=None, worker_pid=None,
                               node=None, restarts=0, exit_codes=[])
    self._say(f"Reverb server at {self.reverb_address}; "
              f"{self._num_actors} actors; learner on "
              f"{'a GPU' if gpus else 'CPU'}; logs in {self.logs}")

  # -- Watching ----------------------------------------------------------------------

  def _write_status(self) -> None:
    io_utils.atomic_write_json(
        os.path.join(self.logs, launching.PROCESSES), dict(
            backend="ray", launcher_pid=os.getpid(),
            reverb_address=self.reverb_address, processes=self.status))

  def _poll_where(self, ray, pending: Dict[str, Any]) -> None:
    """Asks each role where it runs (no waiting); a new pid is a restart."""
    changed = False
    for name, handle in self.handles.items():
      ref = pending.get(name)
      if ref is None:
        pending[name] = handle.where.remote()
        continue
      ready, _ = ray.wait([ref], timeout=0)
      if not ready:
        continue
      del pending[name]
      try:
        where = ray.get(ready[0])
      except ray.exceptions.RayError:
        continue  # dead or restarting: asked again next time
      status = self.status[name]
      if where["pid"] is None or where["pid"] == status["pid"]:
        continue
      if status["pid"] is not None:
        status["restarts"] += 1
        self._say(f"{name} restarted by Ray (pid {status['pid']} -> "
                  f"{where['pid']}, restart {status['restarts']})")
      status.update(where)
      changed = True
    if changed:
      self._write_status()

  def _watch(self, ray) -> int:
    self._runs = {handle.run.remote(): name
                  for name, handle in self.handles.items()}
    runs = dict(self._runs)  # those still running
    pending: Dict[str, Any] = {}
    last_poll = 0.0
    while self._signal is None:
      ready, _ = ray.wait(list(runs), timeout=0.5)
      for ref in ready:
        name = runs.pop(ref)
        try:
          code = ray.get(ref)
        except ray.exceptions.RayError as e:
          self._say(f"{name} is gone after {self.status[name]['restarts']} "
                    f"restarts (--max_restarts={self._max_restarts}): "
                    f"stopping everything ({type(e).__name__})")
          return 1
        self.status[name]["exit_codes"].append(code)
        self._write_status()
        if self.roles[name] == "learner" and code == 0:
          self._say("the learner finished training: stopping the others")
          return 0
        self._say(f"{name} exited with code {code}: stopping everything "
                  f"(see {os.path.join(self.logs, name + '.log')})")
        return 1
      if time.monotonic() - last_poll >= 1.0:
        last_poll = time.monotonic()
        self._poll_where(ray, pending)
    self._say(f"signal {self._signal}: stopping")
    return 0

  def _shutdown(self, ray) -> None:
    """Learner, then actors, then server: stop() (SIGTERM), then a kill
    (SIGKILL) after `shutdown_timeout_s`; then the Ray actors go."""
    for role in ("learner", "actor", "server"):
      group = {n: h for n, h in self.handles.items() if self.roles[n] == role}
      runs = [ref for ref, n in self._runs.items() if n in group]
      for handle in group.values():
        handle.stop.remote()
      if not runs:
        continue
      _, left = ray.wait(runs, num_returns=len(runs),
                         timeout=self._shutdown_timeout_s)
      for ref in left:
        name = self._runs[ref]
        self._say(f"{name} did not stop within "
                  f"{self._shutdown_timeout_s:g}s: killing it")
        group[name].stop.remote(kill=True)
      if left:
        ray.wait(left, num_returns=len(left), timeout=10)
    for handle in self.handles.values():
      ray.kill(handle, no_restart=True)
    if self._group is not None:
      ray.util.remove_placement_group(self._group)
    self._write_status()

  def run(self) -> int:
    """Runs until the learner finishes, a fatal exit or a signal; exit code."""
    start = time.monotonic()
    previous = {s: signal.signal(s, self._on_signal)
                for s in (signal.SIGINT, signal.SIGTERM)}
    ray = None
    code = 1
    try:
      ray = self._init_ray()
      # ray.init replaced the SIGTERM handler (with a sys.exit): ours again.
      for signum in previous:
        signal.signal(signum, self._on_signal)
      self._say(f"Ray ready in {time.monotonic() - start:.1f}s")
      self._start_roles(ray)
      self._write_status()
      code = self._watch(ray)
    finally:
      if ray is not None and ray.is_initialized():
        if self.handles:
          self._shutdown(ray)
        ray.shutdown()
      for signum, handler in previous.items():
        signal.signal(signum, handler)
      self._say("all roles stopped")
    return code
