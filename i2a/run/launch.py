"""The runtime of `python -m i2a.launch`: roles as supervised OS processes.

Data flow (docs/distributed.md): a `Launcher` starts each role as a child
process `python -m i2a.launch --role=ROLE ...` with the launcher's own
--config arguments: the Reverb server, the learner (it owns the workdir)
and N actors. It then supervises them:
  actor dies (any exit)           restarted after `restart_delay_s`; the
                                  learner keeps training on the others;
  learner killed by a signal      restarted: it resumes from its newest
                                  checkpoint; actors keep their weights
                                  and take the new ones when published;
  learner exits 0                 training reached its budget: shut down;
  learner exits with an error,    fatal: everything is shut down, the
  the server exits, or a process  launcher exits 1 (see WORKDIR/logs/);
  exceeds `max_restarts`
  SIGINT / SIGTERM                shut down, exit 0.
Shutdown goes learner first (it finishes its step and writes a final
checkpoint while the actors still feed it), then the actors, then the
server: each is sent SIGTERM and killed (SIGKILL) after `shutdown_timeout_s`.
Children run in their own session (a Ctrl-C reaches the launcher only,
which orders the shutdown) and get SIGTERM if the launcher dies
(PR_SET_PDEATHSIG, `die_with_launcher`), so none outlives it.

Each child's stdout and stderr go to WORKDIR/logs/NAME.log (appended
across restarts) and are echoed here with a [NAME] prefix;
WORKDIR/logs/processes.json (written atomically) says who runs as which
pid and how often each was restarted.

The actors and the server see no GPU (CUDA_VISIBLE_DEVICES="" in their
environment) unless `actors_on_gpu`: the learner alone uses the GPUs.

The launcher itself runs no TensorFlow: it only starts and watches
processes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, TextIO

from i2a import io_utils

LAUNCHER_PID_ENV = "I2A_LAUNCHER_PID"
KEY_ENV = "I2A_WEIGHTS_KEY"  # agents.variables.KEY_ENV
LOGS = "logs"
CUDA_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
PROCESSES = "processes.json"
_PR_SET_PDEATHSIG = 1


def config_arguments(argv: Sequence[str]) -> List[str]:
  """The --config and --config.KEY=VALUE arguments of `argv`, for children."""
  forwarded, i = [], 0
  argv = list(argv)
  while i < len(argv):
    arg = argv[i]
    if arg == "--config" or (arg.startswith("--config.") and "=" not in arg):
      forwarded += argv[i:i + 2]  # --config FILE, --config.key VALUE
      i += 2
      continue
    if arg.startswith("--config=") or arg.startswith("--config."):
      forwarded.append(arg)
    i += 1
  return forwarded


def die_with_launcher() -> None:
  """In a child: get SIGTERM when the launcher dies (Linux), or exit now."""
  parent = os.environ.get(LAUNCHER_PID_ENV)
  if not parent or not sys.platform.startswith("linux"):
    return
  try:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
  except OSError:
    return
  if os.getppid() != int(parent):  # It died before prctl.
    sys.exit("the launcher that started this process is gone")


@dataclasses.dataclass
class Child:
  """One supervised role process."""
  name: str  # server, learner, actor-R
  role: str  # server, learner, actor
  arguments: List[str]  # after `python -m i2a.launch`
  popen: Optional[subprocess.Popen] = None
  restarts: int = 0
  started_at: float = 0.0
  restart_at: Optional[float] = None  # a pending restart
  # Environment variables of this child on top of the launcher's.
  env: Dict[str, str] = dataclasses.field(default_factory=dict)
  exit_codes: List[int] = dataclasses.field(default_factory=list)

  @property
  def running(self) -> bool:
    return self.popen is not None and self.popen.poll() is None


def role_children(config_args: Sequence[str], connect_timeout_s: float,
                  reverb_address: str, workdir: str, ranks: Sequence[int],
                  port: Optional[int] = None, with_learner: bool = True,
                  actors_on_gpu: bool = False) -> List[Child]:
  """The role processes of a launch, each `python -m i2a.launch --role=...`
  with `config_args`: the server (when `port` is given: it serves there),
  the learner (`with_learner`; it owns `workdir`) and an actor per rank.
  The actors and the server see no GPU unless `actors_on_gpu`. Both
  launchers (this module's and i2a/run/ray_backend.py) run these."""
  config_args = list(config_args)
  common = config_args + [f"--connect_timeout_s={connect_timeout_s}"]
  cpu_only = {} if actors_on_gpu else {CUDA_DEVICES_ENV: ""}
  children = []
  if port is not None:  # Reverb only: it never needs a GPU.
    children.append(Child("server", "server", config_args + [
        "--role=server", f"--port={port}"], env=dict(cpu_only)))
  if with_learner:
    children.append(Child("learner", "learner", common + [
        "--role=learner", f"--reverb_address={reverb_address}",
        f"--workdir={workdir}"]))
  children += [Child(f"actor-{rank}", "actor", common + [
      "--role=actor", f"--reverb_address={reverb_address}",
      f"--rank={rank}"], env=dict(cpu_only)) for rank in ranks]
  return children


class _LogEcho:
  """Echoes the new complete lines of a log file with a prefix."""

  def __init__(self, path: str, prefix: str, stream: TextIO):
    self._path, self._prefix, self._stream = path, prefix, stream
    self._offset = os.path.getsize(path) if os.path.exists(path) else 0
    self._partial = b""

  def poll(self) -> None:
    try:
      with open(self._path, "rb") as f:
        f.seek(self._offset)
        data = f.read()
    except FileNotFoundError:
      return
    if not data:
      return
    self._offset += len(data)
    lines = (self._partial + data).split(b"\n")
    self._partial = lines.pop()
    for line in lines:
      text = line.decode("utf-8", "replace").rstrip("\r")
      if text:
        print(f"[{self._prefix}] {text}", file=self._stream)
    self._stream.flush()


class Launcher:
  """Starts the roles as child processes and supervises them."""

  def __init__(self, config_args: Sequence[str], workdir: str, *,
               num_actors: int, port: Optional[int] = None,
               reverb_address: str = "", first_rank: int = 0,
               with_server: bool = True, with_learner: bool = True,
               max_restarts: int = 10, restart_delay_s: float = 1.0,
               shutdown_timeout_s: float = 30.0,
               connect_timeout_s: float = 120.0,
               python: str = sys.executable, echo: bool = True,
               stream: TextIO = sys.stderr, actors_on_gpu: bool = False,
               role_arguments: Sequence[str] = ()):
    """
    Args:
      config_args: the --config arguments every child gets.
      workdir: the learner's workdir; logs/ goes there.
      num_actors: actor processes, ranks first_rank .. + num_actors - 1.
      port: the server's port (with_server; None: a free one).
      reverb_address: HOST:PORT of an external server (with_server False).
      with_server, with_learner: which roles run here besides the actors.
      max_restarts: per process; one more death is fatal.
      restart_delay_s: between a death and the restart.
      shutdown_timeout_s: per phase, between SIGTERM and SIGKILL.
      connect_timeout_s: how long children wait for the server.
      python: the interpreter of the children.
      echo: echo the children's logs to `stream`.
      actors_on_gpu: let the actors (and the server) see the GPUs; by
        default they get CUDA_VISIBLE_DEVICES="" (CPU only) and the GPUs
        are the learner's.
      role_arguments: flags every role gets besides the config ones (e.g.
        --deterministic).
    """
    if num_actors < 0:
      raise ValueError(f"--num_actors must be >= 0, given {num_actors}.")
    if not with_server and not reverb_address:
      raise ValueError("without a server of its own the launcher needs "
                       "--reverb_address=HOST:PORT.")
    self.workdir = io_utils.ensure_writable_dir(workdir)
    self.logs = os.path.join(self.workdir, LOGS)
    os.makedirs(self.logs, exist_ok=True)
    if with_server:
      if port is None:
        import portpicker  # pylint: disable=import-outside-toplevel
        port = portpicker.pick_unused_port()
      reverb_address = f"localhost:{port}"
    self.port = port
    self.reverb_address = reverb_address
    self._python = python
    self._max_restarts = max_restarts
    self._restart_delay_s = restart_delay_s
    self._shutdown_timeout_s = shutdown_timeout_s
    self._stream = stream
    self._echo = echo
    self._signal: Optional[int] = None
    self._hurry = False
    self._env = dict(os.environ)
    self._env[LAUNCHER_PID_ENV] = str(os.getpid())
    self._env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    self._env["PYTHONUNBUFFERED"] = "1"
    if not self._env.get(KEY_ENV):
      if not with_learner:
        raise ValueError(
            f"{KEY_ENV} is not set: actors joining a learner elsewhere must "
            "hold its key to authenticate its weights. Set the same value "
            "on every host of the run.")
      # Every process that needs the key is a child of this launcher.
      self._env[KEY_ENV] = secrets.token_hex(32)
      self._say(f"{KEY_ENV} is not set: generated a random key for this "
                "launch's processes (processes on other hosts cannot join; "
                "set the variable on every host to let them).")
    self.children = role_children(
        list(config_args) + list(role_arguments), connect_timeout_s,
        reverb_address, self.workdir,
        range(first_rank, first_rank + num_actors),
        port=port if with_server else None, with_learner=with_learner,
        actors_on_gpu=actors_on_gpu)
    self._echoes: Dict[str, _LogEcho] = {}

  # -- Processes ---------------------------------------------------------------

  def _say(self, message: str) -> None:
    print(f"[launch] {message}", file=self._stream, flush=True)

  def _log_path(self, child: Child) -> str:
    return os.path.join(self.logs, f"{child.name}.log")

  def _start(self, child: Child) -> None:
    path = self._log_path(child)
    if self._echo and child.name not in self._echoes:
      self._echoes[child.name] = _LogEcho(path, child.name, self._stream)
    with open(path, "ab") as log:
      log.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} start "
                f"(restart {child.restarts}) ===\n".encode())
      log.flush()
      child.popen = subprocess.Popen(
          [self._python, "-m", "i2a.launch"] + child.arguments,
          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
          env={**self._env, **child.env}, start_new_session=True)
    child.started_at = time.monotonic()
    child.restart_at = None
    self._say(f"started {child.name} (pid {child.popen.pid})")
    self._write_status()

  def _write_status(self) -> None:
    io_utils.atomic_write_json(os.path.join(self.logs, PROCESSES), dict(
        launcher_pid=os.getpid(), reverb_address=self.reverb_address,
        processes={c.name: dict(
            role=c.role, pid=c.popen.pid if c.popen else None,
            running=c.running, restarts=c.restarts,
            exit_codes=c.exit_codes,  # exits seen while supervising
            returncode=c.popen.returncode if c.popen else None)
                   for c in self.children}))

  def _echo_logs(self) -> None:
    for echo in self._echoes.values():
      echo.poll()

  def _on_signal(self, signum, frame) -> None:
    del frame
    if self._signal is not None:
      self._hurry = True  # A second signal: kill what is left now.
    self._signal = signum

  # -- Supervision -------------------------------------------------------------

  def _exited(self, child: Child, code: int) -> Optional[int]:
    """Handles a child's exit; an exit code for the launcher ends the run."""
    child.exit_codes.append(code)
    how = (f"was killed by signal {-code}" if code < 0
           else f"exited with code {code}")
    log = os.path.relpath(self._log_path(child))
    if child.role == "server":
      self._say(f"the Reverb server {how}: stopping everything (see {log})")
      return 1
    if child.role == "learner" and code == 0:
      self._say("the learner finished training: stopping the others")
      return 0
    if child.role == "learner" and code > 0:
      self._say(f"the learner {how}: stopping everything (see {log}; "
                "restarting would repeat the error)")
      return 1
    if child.restarts >= self._max_restarts:
      self._say(f"{child.name} {how} after {child.restarts} restarts "
                f"(--max_restarts={self._max_restarts}): stopping "
                f"everything (see {log})")
      return 1
    self._say(f"{child.name} {how}: restarting it in "
              f"{self._restart_delay_s:g}s (see {log})")
    child.restarts += 1
    child.restart_at = time.monotonic() + self._restart_delay_s
    return None

  def run(self) -> int:
    """Runs until the learner finishes, a fatal exit or a signal; exit code."""
    previous = {s: signal.signal(s, self._on_signal)
                for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
      self._say(f"Reverb server at {self.reverb_address}; logs in "
                f"{self.logs}")
      for child in self.children:
        self._start(child)
      code = self._supervise()
    finally:
      self._shutdown()
      for signum, handler in previous.items():
        signal.signal(signum, handler)
    return code

  def _supervise(self) -> int:
    while self._signal is None:
      self._echo_logs()
      changed = False
      for child in self.children:
        if child.restart_at is not None:
          if time.monotonic() >= child.restart_at:
            self._start(child)
          continue
        code = child.popen.poll()
        if code is None:
          continue
        changed = True
        result = self._exited(child, code)
        if result is not None:
          self._write_status()
          return result
      if changed:
        self._write_status()
      time.sleep(0.2)
    self._say(f"signal {self._signal}: stopping")
    return 0

  def _shutdown(self) -> None:
    """Learner, then actors, then server: SIGTERM, then SIGKILL on timeout."""
    for role in ("learner", "actor", "server"):
      group = [c for c in self.children if c.role == role and c.running]
      for child in group:
        child.popen.send_signal(signal.SIGTERM)
      deadline = time.monotonic() + self._shutdown_timeout_s
      while any(c.running for c in group) and not self._hurry \
          and time.monotonic() < deadline:
        self._echo_logs()
        time.sleep(0.1)
      for child in group:
        if child.running:
          self._say(f"{child.name} did not stop within "
                    f"{self._shutdown_timeout_s:g}s: killing it")
          child.popen.kill()
        child.popen.wait()
    for child in self.children:
      child.restart_at = None
    self._echo_logs()
    self._write_status()
    self._say("all processes stopped")
