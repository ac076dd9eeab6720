"""Soak: the distributed launcher under injected faults, on loopback, bounded.

Where it sits (docs/distributed.md, "Soak under faults"): it runs
`python -m i2a.launch` (a Reverb server, a learner and N actors as
processes on this machine, all on 127.0.0.1 / localhost) for `--minutes`,
and a seeded fault injector that, at random times (exponential intervals),
does one of these (each once per round, rounds in a seeded random order):
  kill_actor     SIGKILL an actor process        (the launcher restarts it)
  kill_learner   SIGKILL the learner process     (restarted; resumes from
                                                  its newest checkpoint)
  kill_server    SIGKILL the Reverb server       (the launcher stops
                                                  everything; the soak
                                                  relaunches the same
                                                  command: it resumes)
  forge_nan_reward, forge_huge_reward, forge_bad_action, forge_bad_discount
                 writes a burst of well-shaped but malformed unrolls into
                 the launcher's `unrolls` queue through a Reverb client on
                 loopback (what an attacker on the network could do: the
                 unrolls are not authenticated)
Processes are found through WORKDIR/logs/processes.json (the launcher's
record of which pid runs which role), each pid checked against its
/proc/PID/cmdline before it is killed. A monitor thread polls the server's
`variables` table (the learner's newest (generation, step) and weights,
their HMAC checked with the run's key) to see that training continues.

At the end (SIGTERM to the launcher, as a user would) it checks:
  progress       the learner's steps and env steps grew;
  survived       after every fault the learner published new updates;
  checkpoints    every kept checkpoint's float tensors are finite;
  weights        every published weights item seen is finite and
                 authentic (HMAC with the run's key);
  orphans        no process whose command line names the soak's directory
                 or the server's port is left;
  metrics        WORKDIR/metrics.csv has no duplicate step;
  exits          each server kill stopped the launch by itself (the
                 documented behaviour), only those led to relaunches, and
                 the last launch exited 0;
  dropped        the learner dropped no more unrolls than were forged;
and counts faults by kind, unrolls dropped by the learner (its log), its
skipped updates, restarts and relaunches. Writes
benchmarks/results/soak.json (atomically; or --output), prints a table and
exits 1 if a check failed.

  python benchmarks/soak.py [--minutes 3] [--num_actors 3] [--seed 0]
      [--mean_interval_s 12] [--dir DIR] [--output FILE]
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the repository root, for configs/

# pylint: disable=wrong-import-position
import numpy as np
import reverb
import tensorflow as tf
import tree

from agents import variables as variables_lib
from i2a import io_utils
from i2a.run import launch as launching
from i2a.replay import tables

RESULTS = os.path.join(HERE, "results")
HOST = "localhost"  # every address of the soak is loopback
KILLS = ("kill_actor", "kill_learner", "kill_server")
FORGERIES = ("nan_reward", "huge_reward", "bad_action", "bad_discount")
FAULTS = KILLS + tuple(f"forge_{kind}" for kind in FORGERIES)
HUGE_REWARD = 1e30
SERVER_KILL_STOP_S = 180  # how long a launch may take to stop on its own
# A measurement's cadence: log and checkpoint often, never evaluate or plot.
OVERRIDES = {"env_steps": 10**9, "eval_every": 0, "plot_every": 10**6,
             "checkpoint_every": 10, "log_every": 5}


# -- Forged unrolls --------------------------------------------------------------

def good_unroll(signature: Mapping[str, tf.TensorSpec]) -> Dict[str, np.ndarray]:
  """A well-formed unroll of the `unrolls` signature: blank frames, action
  0, reward 0, discount 1, uniform behaviour logits, zero side inputs."""
  unroll = {name: np.zeros(spec.shape, spec.dtype.as_numpy_dtype)
            for name, spec in signature.items()}
  unroll["discount"] = np.ones_like(unroll["discount"])
  return unroll


def forged_unroll(signature: Mapping[str, tf.TensorSpec], kind: str,
                  rng: np.random.Generator) -> Dict[str, np.ndarray]:
  """A well-shaped unroll that the learner must drop (`kind` in FORGERIES):
  a NaN reward, a reward of HUGE_REWARD, an action outside [0, A), or a
  discount outside [0, 1], at a random step of an otherwise good unroll."""
  if kind not in FORGERIES:
    raise ValueError(f"forged unroll kind must be one of {FORGERIES}, "
                     f"given {kind!r}.")
  unroll = good_unroll(signature)
  length = unroll["action"].shape[0]
  num_actions = unroll["behaviour_logits"].shape[-1]
  t = int(rng.integers(length))
  if kind == "nan_reward":
    unroll["reward"][t] = np.nan
  elif kind == "huge_reward":
    unroll["reward"][t] = HUGE_REWARD * rng.choice([-1.0, 1.0])
  elif kind == "bad_action":
    unroll["action"][t] = rng.choice([-1, num_actions, num_actions + 7])
  else:
    unroll["discount"][t] = rng.choice([-1.0, 2.0, np.inf])
  return unroll


def write_unrolls(client: reverb.Client, unrolls: Sequence[Mapping[str, Any]],
                  table: str = tables.UNROLLS,
                  timeout_ms: Optional[int] = None) -> None:
  """Inserts whole unrolls as the actors do (agents/acting.py `_write`):
  one append per unroll, the item its squeezed step. Blocks while the
  queue is full (DeadlineExceededError after `timeout_ms`)."""
  with client.trajectory_writer(num_keep_alive_refs=1) as writer:
    for unroll in unrolls:
      writer.append(dict(unroll))
      writer.create_item(table, priority=1.0, trajectory={
          key: column[-1] for key, column in writer.history.items()})
    writer.flush(timeout_ms=timeout_ms)


def unrolls_signature(client: reverb.Client) -> Dict[str, tf.TensorSpec]:
  """The server's `unrolls` signature (a dict of TensorSpecs)."""
  signature = tables.table_signature(client, tables.UNROLLS)
  if not isinstance(signature, Mapping):
    raise ValueError(f"the server's {tables.UNROLLS!r} table has no dict "
                     f"signature ({signature!r}): is it this project's?")
  return dict(signature)


# -- Processes ---------------------------------------------------------------------

def command_line(pid: int) -> str:
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
  except OSError:
    return ""


def processes_matching(needles: Sequence[str]) -> List[Tuple[int, str]]:
  """(pid, command line) of every live process (not this one) whose command
  line contains one of `needles`."""
  found = []
  for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid():
      continue
    line = command_line(int(name))
    if line and any(needle in line for needle in needles):
      try:  # A zombie is no orphan: it holds nothing.
        with open(f"/proc/{name}/stat") as f:
          if f.read().rsplit(")", 1)[-1].split()[0] == "Z":
            continue
      except OSError:
        continue
      found.append((int(name), line))
  return found


def role_pids(workdir: str) -> Dict[str, int]:
  """{name: pid} of the launcher's running children (logs/processes.json),
  each checked against its command line (`--role=ROLE`)."""
  path = os.path.join(workdir, launching.LOGS, launching.PROCESSES)
  try:
    status = io_utils.read_json(path)
  except (OSError, ValueError):
    return {}
  out = {}
  for name, child in status.get("processes", {}).items():
    pid = child.get("pid")
    if pid and child.get("running") and \
        f"--role={child['role']}" in command_line(pid):
      out[name] = pid
  return out


# -- The monitor: what the learner publishes -------------------------------------

class Monitor:
  """Polls the server's `variables` item: (time, generation, step) of each
  new version, and whether its weights are finite and authentic."""

  def __init__(self, address: str, key: bytes, interval_s: float = 1.0):
    self._address, self._key, self._interval_s = address, key, interval_s
    self.versions: List[Tuple[float, int, int]] = []  # (time, gen, step)
    self.last: Optional[Dict[str, Any]] = None  # the newest item's checks
    self.bad: List[Dict[str, Any]] = []  # items not finite or not authentic
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._client: Optional[reverb.Client] = None

  def start(self) -> None:
    self._thread.start()

  def stop(self) -> None:
    self._stop.set()
    self._thread.join(10)

  def _poll(self) -> None:
    if self._client is None:
      self._client = tables.connect(self._address, timeout_s=2)
    info = self._client.server_info(timeout=2)
    if info[tables.VARIABLES].current_size < 1:
      return
    sample = next(iter(self._client.sample(tables.VARIABLES, num_samples=1,
                                           emit_timesteps=False)))
    item = tree.unflatten_as(info[tables.VARIABLES].signature,
                             list(sample.data))
    generation = int(item[variables_lib.GENERATION])
    step = int(item[variables_lib.STEP])
    if self.versions and self.versions[-1][1:] == (generation, step):
      return
    values = [np.asarray(v) for v in item[variables_lib.VARIABLES]]
    tag = np.asarray(item[variables_lib.TAG], np.uint8).tobytes()
    check = dict(generation=generation, step=step,
                 finite=all(bool(np.all(np.isfinite(v))) for v in values
                            if np.issubdtype(v.dtype, np.floating)),
                 authentic=tag == variables_lib.weights_tag(
                     self._key, step, generation, values))
    self.versions.append((time.time(), generation, step))
    self.last = check
    if not (check["finite"] and check["authentic"]):
      self.bad.append(check)

  def _run(self) -> None:
    while not self._stop.wait(self._interval_s):
      done: List[bool] = []

      def poll():
        try:
          self._poll()
          done.append(True)
        except Exception:  # pylint: disable=broad-except  (server down)
          done.append(False)
      worker = threading.Thread(target=poll, daemon=True)
      worker.start()
      worker.join(10)
      if not done or not done[0]:
        self._client = None  # A client of a dead server can hang: anew.

  def updated_after(self, t: float) -> bool:
    """Whether a learner was seen updating after time `t`: two versions of
    one generation, both seen after `t`, the later with a larger step."""
    first: Dict[int, int] = {}
    for seen, generation, step in list(self.versions):
      if seen <= t:
        continue
      if generation in first and step > first[generation]:
        return True
      first.setdefault(generation, step)
    return False


# -- Checks ------------------------------------------------------------------------

def checkpoint_report(checkpoint_dir: str) -> List[Dict[str, Any]]:
  """Per kept checkpoint: its float tensors and those not finite."""
  state = tf.train.get_checkpoint_state(checkpoint_dir)
  paths = list(state.all_model_checkpoint_paths) if state else []
  report = []
  for path in paths:
    reader = tf.train.load_checkpoint(path)
    floats, bad = 0, []
    for name, dtype in reader.get_variable_to_dtype_map().items():
      if not dtype.is_floating:
        continue
      floats += 1
      if not np.all(np.isfinite(reader.get_tensor(name))):
        bad.append(name)
    report.append(dict(path=os.path.basename(path), float_tensors=floats,
                       nonfinite=bad))
  return report


def checkpoint_counters(checkpoint_dir: str) -> Dict[str, int]:
  """learner_step and env_steps of the newest checkpoint ({} if none)."""
  latest = tf.train.latest_checkpoint(checkpoint_dir)
  if latest is None:
    return {}
  reader = tf.train.load_checkpoint(latest)
  out = {}
  for name in reader.get_variable_to_shape_map():
    for counter in ("learner_step", "env_steps"):
      if name.split("/")[0] == counter or \
          name.startswith(f"{counter}/.ATTRIBUTES"):
        out[counter] = int(reader.get_tensor(name))
  return out


def metrics_rows(path: str) -> List[Dict[str, str]]:
  if not os.path.exists(path):
    return []
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


_DROPPED = re.compile(r"learner step \d+ dropped (\d+) malformed unrolls")
_SKIPPED = re.compile(r"learner step \d+ skipped:")


def learner_log_counts(workdir: str) -> Dict[str, int]:
  """Unrolls dropped and updates skipped, from every learner's log lines."""
  path = os.path.join(workdir, launching.LOGS, "learner.log")
  dropped = skipped = crashes = 0
  if os.path.exists(path):
    with open(path, errors="replace") as f:
      for line in f:
        match = _DROPPED.search(line)
        if match:
          dropped += int(match.group(1))
        if _SKIPPED.search(line):
          skipped += 1
        if line.startswith("Traceback"):
          crashes += 1
  return dict(dropped_unrolls=dropped, skipped_updates=skipped,
              tracebacks=crashes)


# -- The soak ------------------------------------------------------------------------

class Soak:
  """One bounded soak: the launch, the injector, the monitor, the checks."""

  def __init__(self, args: argparse.Namespace):
    self.args = args
    self.dir = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="soak-"))
    os.makedirs(self.dir, exist_ok=True)
    self.workdir = os.path.join(self.dir, "run")
    self.launcher_log = os.path.join(self.dir, "launcher.log")
    import portpicker  # pylint: disable=import-outside-toplevel
    self.port = args.port or portpicker.pick_unused_port()
    self.address = f"{HOST}:{self.port}"
    self.key = secrets.token_hex(32)
    self.rng = np.random.default_rng(args.seed)
    self.monitor = Monitor(self.address, self.key.encode())
    self.faults: List[Dict[str, Any]] = []
    self.launches: List[Dict[str, Any]] = []
    self.launcher: Optional[subprocess.Popen] = None
    self._round: List[str] = []  # the faults left of this round

  def command(self) -> List[str]:
    return [sys.executable, "-m", "i2a.launch", f"--config={self.args.config}",
            f"--workdir={self.workdir}", f"--num_actors={self.args.num_actors}",
            f"--port={self.port}", "--shutdown_timeout_s=30",
            *[f"--config.{k}={v}" for k, v in OVERRIDES.items()]]

  def _launch(self) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    env[launching.KEY_ENV] = self.key
    env.pop("CUDA_VISIBLE_DEVICES", None)
    with open(self.launcher_log, "ab") as log:
      self.launcher = subprocess.Popen(
          self.command(), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    self.launches.append(dict(started=time.time(), pid=self.launcher.pid))
    print(f"launch {len(self.launches)}: pid {self.launcher.pid}", flush=True)

  def _ended(self) -> None:
    """Records the launch that just exited (its exit code and restarts)."""
    launch = self.launches[-1]
    launch.update(ended=time.time(), exit_code=self.launcher.returncode)
    try:
      status = io_utils.read_json(os.path.join(
          self.workdir, launching.LOGS, launching.PROCESSES))
      launch["restarts"] = {name: child["restarts"] for name, child in
                            status["processes"].items()}
    except (OSError, ValueError, KeyError):
      launch["restarts"] = {}
    print(f"launch {len(self.launches)} exited with code "
          f"{launch['exit_code']}", flush=True)

  # -- Faults

  def _kill(self, fault: str) -> Dict[str, Any]:
    pids = role_pids(self.workdir)
    role = fault[len("kill_"):]
    names = sorted(n for n in pids if n == role or n.startswith(role + "-"))
    if not names:
      return dict(done=False, why=f"no running {role}")
    name = names[int(self.rng.integers(len(names)))]
    try:
      os.kill(pids[name], signal.SIGKILL)
    except ProcessLookupError:
      return dict(done=False, why=f"{name} already gone")
    return dict(done=True, target=name, pid=pids[name])

  def _forge(self, fault: str) -> Dict[str, Any]:
    kind = fault[len("forge_"):]
    count = int(self.rng.integers(1, self.args.max_burst + 1))
    result: Dict[str, Any] = {}

    def inject():
      try:
        client = tables.connect(self.address, timeout_s=5)
        signature = unrolls_signature(client)
        unrolls = [forged_unroll(signature, kind, self.rng)
                   for _ in range(count)]
        write_unrolls(client, unrolls, timeout_ms=60_000)
        result.update(done=True, count=count)
      except Exception as e:  # pylint: disable=broad-except  (reported)
        result.update(done=False, count=count, why=f"{type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}")
    worker = threading.Thread(target=inject, daemon=True)
    worker.start()
    worker.join(75)
    return result or dict(done=False, count=count, why="blocked (timeout)")

  def _inject(self) -> None:
    if not self._round:  # Every kind once per round, in a seeded order.
      self._round = [FAULTS[i] for i in self.rng.permutation(len(FAULTS))]
    fault = self._round.pop()
    at = time.time()
    result = self._kill(fault) if fault in KILLS else self._forge(fault)
    result.update(fault=fault, at=at, launch=len(self.launches))
    if fault == "kill_server" and result["done"]:
      # Documented: the launch stops everything. Nothing more is injected
      # until it has (the main loop then relaunches).
      try:
        self.launcher.wait(timeout=SERVER_KILL_STOP_S)
        result["launch_stopped_s"] = round(time.time() - at, 1)
      except subprocess.TimeoutExpired:
        result["launch_stopped_s"] = None
    self.faults.append(result)
    print(f"{time.time() - self.started:6.0f}s fault {fault}: "
          f"{ {k: v for k, v in result.items() if k not in ('at', 'fault')} }",
          flush=True)

  def _wait_for_training(self, deadline: float) -> bool:
    """Until the monitor sees the learner update (or `deadline`)."""
    since = time.time() - 1
    while time.time() < deadline:
      if self.monitor.updated_after(since):
        return True
      if self.launcher.poll() is not None:
        return False
      time.sleep(1.0)
    return False

  def run(self) -> Dict[str, Any]:
    args = self.args
    self.started = time.time()
    end = self.started + args.minutes * 60
    print(f"soak: {args.minutes:g} min, {args.num_actors} actors, seed "
          f"{args.seed}, server {self.address}, dir {self.dir}", flush=True)
    self._launch()
    self.monitor.start()
    warm = self._wait_for_training(end)
    print(f"{time.time() - self.started:6.0f}s training "
          f"{'started' if warm else 'did not start'}", flush=True)
    first_version = self.monitor.versions[0] if self.monitor.versions else None
    next_fault = time.time() + self.rng.exponential(args.mean_interval_s)
    while time.time() < end:
      if self.launcher.poll() is not None:
        # Relaunched even near the end: the soak ends on a launch that
        # trains (so it may run past --minutes; `minutes` is measured).
        self._ended()
        self._launch()
        self._wait_for_training(max(end, time.time() + 300))
        continue
      if time.time() >= next_fault and warm and \
          time.time() < end - args.quiet_s:
        self._inject()
        next_fault = time.time() + self.rng.exponential(args.mean_interval_s)
      time.sleep(0.5)
    return self._finish(first_version)

  def _stop_launcher(self) -> None:
    if self.launcher is None or self.launcher.poll() is not None:
      return
    self.launcher.send_signal(signal.SIGTERM)
    try:
      self.launcher.wait(timeout=180)
    except subprocess.TimeoutExpired:
      print("the launcher did not stop within 180 s: killing it", flush=True)
      self.launcher.kill()
      self.launcher.wait()
    self._ended()

  def _finish(self, first_version) -> Dict[str, Any]:
    time.sleep(3)  # The monitor's last look at the weights.
    last_version = self.monitor.versions[-1] if self.monitor.versions \
        else None
    self._stop_launcher()
    self.monitor.stop()
    minutes = (time.time() - self.started) / 60
    time.sleep(2)
    orphans = processes_matching([self.dir, f"--port={self.port}",
                                  f"{HOST}:{self.port}"])
    checkpoint_dir = os.path.join(self.workdir, "checkpoints")
    checkpoints = checkpoint_report(checkpoint_dir)
    counters = checkpoint_counters(checkpoint_dir)
    rows = metrics_rows(os.path.join(self.workdir, "metrics.csv"))
    steps = [int(float(r["step"])) for r in rows]
    duplicates = sorted(s for s, n in collections.Counter(steps).items()
                        if n > 1)
    env_steps = [float(r["env_steps"]) for r in rows]
    logs = learner_log_counts(self.workdir)

    by_kind: Dict[str, Dict[str, int]] = {}
    for fault in self.faults:
      fault["survived"] = bool(fault.get("done")) and \
          self.monitor.updated_after(fault["at"])
      kind = by_kind.setdefault(fault["fault"], dict(
          injected=0, survived=0, not_done=0, unrolls=0))
      if fault.get("done"):
        kind["injected"] += 1
        kind["survived"] += int(fault["survived"])
        kind["unrolls"] += int(fault.get("count", 0))
      else:
        kind["not_done"] += 1
    done = [f for f in self.faults if f.get("done")]
    forged = sum(f.get("count", 0) for f in done
                 if f["fault"].startswith("forge_"))
    restarts = sum(sum(launch.get("restarts", {}).values())
                   for launch in self.launches)
    server_kills = sum(1 for f in done if f["fault"] == "kill_server")
    checks = {
        "progress": bool(first_version and last_version and
                         len(steps) >= 2 and steps[-1] > steps[0] and
                         last_version[1:] > first_version[1:]),
        "survived": bool(done) and all(f["survived"] for f in done),
        "checkpoints_finite": bool(checkpoints) and not any(
            c["nonfinite"] for c in checkpoints),
        "weights_finite_and_authentic": bool(self.monitor.last) and
        not self.monitor.bad,
        "no_orphans": not orphans,
        "metrics_unique_steps": bool(steps) and not duplicates,
        "launch_stops_after_server_kill": all(
            f.get("launch_stopped_s") is not None for f in done
            if f["fault"] == "kill_server"),
        "last_launch_exit_0": self.launches[-1].get("exit_code") == 0,
        "relaunches_only_after_server_kills":
            len(self.launches) - 1 <= server_kills,
        "dropped_at_most_forged": logs["dropped_unrolls"] <= forged,
    }
    result = dict(
        command=" ".join(["python benchmarks/soak.py"] + sys.argv[1:]),
        launch_command=" ".join(self.command()[1:]).replace(self.dir, "DIR"),
        minutes=round(minutes, 2), seed=self.args.seed,
        num_actors=self.args.num_actors, config=self.args.config,
        load_average=list(os.getloadavg()),
        faults_by_kind=by_kind,
        faults_injected=len(done), faults_survived=sum(
            f["survived"] for f in done),
        faults_not_done=len(self.faults) - len(done),
        forged_unrolls_injected=forged, **logs,
        restarts=restarts, relaunches=len(self.launches) - 1,
        learner=dict(
            first_logged_step=steps[0] if steps else None,
            last_logged_step=steps[-1] if steps else None,
            first_logged_env_steps=env_steps[0] if env_steps else None,
            last_logged_env_steps=env_steps[-1] if env_steps else None,
            first_published=list(first_version[1:]) if first_version
            else None,
            last_published=list(last_version[1:]) if last_version else None,
            newest_checkpoint=counters),
        checkpoints=checkpoints, last_weights=self.monitor.last,
        bad_weights=self.monitor.bad, orphans=[line for _, line in orphans],
        duplicate_steps=duplicates,
        launches=[{k: v for k, v in launch.items() if k != "pid"}
                  for launch in self.launches],
        faults=[{k: v for k, v in f.items()} for f in self.faults],
        checks=checks, passed=all(checks.values()), dir=self.dir)
    return result


def print_summary(result: Mapping[str, Any]) -> None:
  print(f"\nSoak: {result['minutes']} min, {result['num_actors']} actors, "
        f"{result['config']}, load {result['load_average'][0]:.1f}")
  print("\n| fault | injected | survived | not done | forged unrolls |")
  print("|---|---|---|---|---|")
  for kind in FAULTS:
    row = result["faults_by_kind"].get(kind)
    if row:
      print(f"| {kind} | {row['injected']} | {row['survived']} | "
            f"{row['not_done']} | {row['unrolls'] or ''} |")
  learner = result["learner"]
  print(f"\nlearner steps {learner['first_logged_step']} -> "
        f"{learner['last_logged_step']}, env steps "
        f"{learner['first_logged_env_steps']} -> "
        f"{learner['last_logged_env_steps']}; unrolls dropped "
        f"{result['dropped_unrolls']} of {result['forged_unrolls_injected']} "
        f"forged; updates skipped {result['skipped_updates']}; restarts "
        f"{result['restarts']}; relaunches {result['relaunches']}; "
        f"learner tracebacks {result['tracebacks']}")
  print("\n| check | result |\n|---|---|")
  for name, ok in result["checks"].items():
    print(f"| {name} | {'pass' if ok else 'FAIL'} |")


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--minutes", type=float, default=3.0)
  parser.add_argument("--num_actors", type=int, default=3)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--mean_interval_s", type=float, default=12.0,
                      help="mean seconds between faults (exponential)")
  parser.add_argument("--max_burst", type=int, default=12,
                      help="most forged unrolls per forging fault")
  parser.add_argument("--quiet_s", type=float, default=20.0,
                      help="no faults in the last seconds (to see training "
                      "continue after the last one)")
  parser.add_argument("--config", default="configs/agents/a2c.py:tiny")
  parser.add_argument("--port", type=int, default=0,
                      help="the server's port on localhost (0: a free one)")
  parser.add_argument("--dir", default="",
                      help="where the run goes (default: a new temp dir)")
  parser.add_argument("--output", default=os.path.join(RESULTS, "soak.json"))
  args = parser.parse_args()
  if args.minutes <= 0 or args.num_actors < 1 or args.mean_interval_s <= 0 \
      or args.max_burst < 1:
    parser.error(f"--minutes, --mean_interval_s must be > 0, --num_actors "
                 f"and --max_burst >= 1; given {args.minutes}, "
                 f"{args.mean_interval_s}, {args.num_actors}, "
                 f"{args.max_burst}.")
  if args.dir and os.path.exists(os.path.join(args.dir, "run")):
    parser.error(f"--dir {args.dir} already holds a run/: give a new "
                 "directory (the soak starts from scratch).")
  soak = Soak(args)
  try:
    result = soak.run()
  finally:
    soak._stop_launcher()  # pylint: disable=protected-access  (Ctrl-C)
  io_utils.atomic_write_json(args.output, result)
  print_summary(result)
  print(f"\nwrote {args.output}")
  return 0 if result["passed"] else 1


if __name__ == "__main__":
  sys.exit(main())
