"""benchmarks/soak.py: its forged unrolls, process lookup and progress test.

The forging tests write into an in-process Reverb server holding the
`unrolls` queue (loopback, no launch) and read back through the learner's
own dataset, so the learner's validation sees exactly what a forger on the
network would make it see. The one test that runs a launch is slow.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from agents import builder, learning
from agents.a2c import networks
from agents.acting import unroll_signature
from benchmarks import soak
from i2a import io_utils
from i2a.run import launch as launching
from i2a.replay import tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_ACTIONS = 4
SHAPE = (8, 8, 3)
LENGTH = 3  # unroll length n


@pytest.fixture
def unrolls_server():
  signature = unroll_signature(LENGTH, 1, SHAPE, NUM_ACTIONS)
  server = tables.start_server([tables.unrolls_table(signature, max_size=16)])
  yield server
  server.stop()


def _network():
  tf.random.set_seed(0)
  network = networks.A2CNetwork(NUM_ACTIONS, 1, conv_channels=(4,),
                                conv_kernels=(3,), conv_strides=(2,),
                                hidden=8)
  builder.create_variables(network, SHAPE)
  return network


def _read_back(server, count):
  """`count` unrolls through the learner's dataset: {field: [count, ...]}."""
  dataset = learning.unroll_dataset(f"localhost:{server.port}", count,
                                    timeout_ms=10_000)
  return next(iter(dataset))


def test_each_forged_kind_is_dropped_and_the_good_unroll_kept(unrolls_server):
  client = tables.connect(f"localhost:{unrolls_server.port}")
  signature = soak.unrolls_signature(client)
  rng = np.random.default_rng(0)
  unrolls = [soak.good_unroll(signature)] + [
      soak.forged_unroll(signature, kind, rng) for kind in soak.FORGERIES]
  soak.write_unrolls(client, unrolls, timeout_ms=10_000)
  batch = _read_back(unrolls_server, len(unrolls))
  assert batch["observation"].shape == (5, LENGTH + 1, 1, *SHAPE)
  reward, action = batch["reward"].numpy(), batch["action"].numpy()
  discount = batch["discount"].numpy()
  # What each forged unroll holds (the order of soak.FORGERIES).
  assert np.isnan(reward[1]).sum() == 1
  assert np.abs(reward[2]).max() == np.float32(soak.HUGE_REWARD)
  assert ((action[3] < 0) | (action[3] >= NUM_ACTIONS)).sum() == 1
  assert ((discount[4] < 0) | (discount[4] > 1)).sum() == 1
  np.testing.assert_array_equal(
      learning.valid_unrolls(batch, NUM_ACTIONS).numpy(),
      [True, False, False, False, False])

  learner = learning.Learner(
      _network(), tf.data.Dataset.from_tensors(batch).repeat(),
      learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99, value_coef=0.5,
      entropy_coef=0.01, clip_norm=0.5, reward_clipping="none")
  metrics = learner.step()  # learns from the good unroll alone
  assert metrics["dropped_unrolls"] == 4
  assert metrics["nonfinite_update"] == 0
  assert learner.dropped_unrolls == 4 and learner.skipped_updates == 0


def test_a_flood_of_forged_unrolls_does_not_stop_the_learner():
  # The soak's finding: batches with every unroll forged counted as
  # non-finite updates, so a burst of 2 x max_nonfinite_updates forged
  # unrolls stopped the learner (FloatingPointError) and with it the launch.
  signature = unroll_signature(LENGTH, 1, SHAPE, NUM_ACTIONS)
  rng = np.random.default_rng(0)
  forged = [soak.forged_unroll(signature, soak.FORGERIES[i % 4], rng)
            for i in range(8)]  # 4 batches of 2, none valid
  good = [soak.good_unroll(signature) for _ in range(2)]
  for unroll in good:
    unroll["reward"][:] = 1.0  # something to learn
  stack = lambda unrolls: {k: np.stack([u[k] for u in unrolls])
                           for k in signature}
  network = _network()
  before = [v.numpy() for v in network.learnable_variables]
  learner = learning.Learner(
      network, tf.data.Dataset.from_tensor_slices(stack(forged + good))
      .batch(2), learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99,
      value_coef=0.5, entropy_coef=0.01, clip_norm=0.5,
      reward_clipping="none", max_nonfinite_updates=2)
  for _ in range(4):
    metrics = learner.step()  # skipped, never FloatingPointError
    assert metrics["dropped_unrolls"] == 2
    assert metrics["nonfinite_update"] == 1
    assert "_no_valid_unroll" not in metrics  # not a logged column
  for a, b in zip(before, network.learnable_variables):
    np.testing.assert_array_equal(a, b.numpy())  # nothing learnt from them
  assert learner.skipped_updates == 4 and learner.dropped_unrolls == 8
  metrics = learner.step()  # the good batch trains
  assert metrics["nonfinite_update"] == 0 and metrics["dropped_unrolls"] == 0
  assert any(not np.array_equal(a, b.numpy()) for a, b in
             zip(before, network.learnable_variables))


def test_forged_batches_do_not_hide_a_diverging_learner():
  # Non-finite updates of valid data still stop it, forged batches between
  # them neither counting nor resetting the count.
  signature = unroll_signature(LENGTH, 1, SHAPE, NUM_ACTIONS)
  rng = np.random.default_rng(0)
  overflow = [soak.good_unroll(signature) for _ in range(2)]
  for unroll in overflow:
    unroll["reward"][:] = 1e5  # valid, but value_coef=1e30 overflows
  forged = [soak.forged_unroll(signature, "nan_reward", rng)
            for _ in range(2)]
  batches = {k: np.stack([u[k] for u in overflow + forged + overflow])
             for k in signature}
  learner = learning.Learner(
      _network(), tf.data.Dataset.from_tensor_slices(batches).batch(2),
      learning.rmsprop(7e-4, 0.99, 1e-5), discount=0.99, value_coef=1e30,
      entropy_coef=0.01, clip_norm=0.5, reward_clipping="none",
      max_nonfinite_updates=2)
  assert learner.step()["nonfinite_update"] == 1  # 1 in a row
  assert learner.step()["dropped_unrolls"] == 2  # forged: still 1
  with pytest.raises(FloatingPointError,
                     match=r"2 learner updates in a row had a non-finite"):
    learner.step()


def test_every_field_of_a_forged_unroll_has_the_table_shape(unrolls_server):
  client = tables.connect(f"localhost:{unrolls_server.port}")
  signature = soak.unrolls_signature(client)
  for kind in soak.FORGERIES:
    unroll = soak.forged_unroll(signature, kind, np.random.default_rng(1))
    assert sorted(unroll) == sorted(signature)
    for name, spec in signature.items():
      assert unroll[name].shape == tuple(spec.shape), (kind, name)
      assert unroll[name].dtype == spec.dtype.as_numpy_dtype, (kind, name)


def test_an_unknown_forgery_is_refused_with_the_known_ones(unrolls_server):
  client = tables.connect(f"localhost:{unrolls_server.port}")
  with pytest.raises(ValueError, match=r"must be one of \('nan_reward', "
                     r".*given 'bad_observation'"):
    soak.forged_unroll(soak.unrolls_signature(client), "bad_observation",
                       np.random.default_rng(0))


def test_role_pids_reads_the_launchers_record_and_checks_command_lines(
    tmp_path):
  child = subprocess.Popen([sys.executable, "-c", "import time; "
                            "time.sleep(60)", "--role=actor",
                            f"--soak_test={tmp_path}"])
  try:
    logs = tmp_path / launching.LOGS
    logs.mkdir()
    io_utils.atomic_write_json(str(logs / launching.PROCESSES), dict(
        processes={
            "actor-0": dict(role="actor", pid=child.pid, running=True),
            # This process's command line has no --role=learner: not it.
            "learner": dict(role="learner", pid=os.getpid(), running=True),
            "actor-1": dict(role="actor", pid=None, running=False)}))
    assert soak.role_pids(str(tmp_path)) == {"actor-0": child.pid}
    found = soak.processes_matching([str(tmp_path)])
    assert [pid for pid, _ in found] == [child.pid]
  finally:
    child.kill()
    child.wait()
  assert soak.processes_matching([str(tmp_path)]) == []
  assert soak.role_pids(str(tmp_path / "nowhere")) == {}


def test_training_counts_as_continued_only_for_updates_after_the_fault():
  monitor = soak.Monitor("localhost:1", b"k" * 32)
  monitor.versions = [(1.0, 7, 10), (2.0, 7, 11),  # before the fault at 5
                      (6.0, 7, 11), (7.0, 8, 11)]  # new learner, no update
  assert not monitor.updated_after(5.0)
  monitor.versions.append((8.0, 8, 12))  # it updated
  assert monitor.updated_after(5.0)
  assert not monitor.updated_after(8.0)


@pytest.mark.slow
def test_a_short_soak_passes_its_checks(tmp_path):
  output = tmp_path / "soak.json"
  run = subprocess.run(
      [sys.executable, os.path.join(ROOT, "benchmarks", "soak.py"),
       "--minutes=1.5", "--mean_interval_s=8", "--quiet_s=20",
       f"--dir={tmp_path / 'soak'}", f"--output={output}"],
      cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  result = json.loads(output.read_text())
  assert result["passed"] and result["faults_injected"] >= 1
  assert result["orphans"] == []
