"""Reverb tables, servers and clients: where the agents' experience lives.

Two tables, each with a signature so the server refuses malformed items:
  unrolls    a queue of fixed-length on-policy agent unrolls;
  variables  max_size 1: the learner's latest weights, pulled by actors.
Model pretraining reads the dataset on disk, not Reverb (docs/datasets.md).
`start_server` runs an embedded server in this process; `connect` reaches an
external one (`--reverb_address=HOST:PORT`) and fails with a clear error
within a bounded time if nothing answers.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import reverb
import tensorflow as tf

UNROLLS = "unrolls"
VARIABLES = "variables"


def unrolls_table(signature: Dict[str, tf.TensorSpec], max_size: int,
                  name: str = UNROLLS) -> reverb.Table:
  """A queue: each on-policy unroll is read once, in order of insertion.

  Queue semantics are the rate limiting: actors block when `max_size` unrolls
  wait unread, the learner blocks when none are there.
  """
  return reverb.Table.queue(name=name, max_size=max_size, signature=signature)


def variables_table(signature: Dict[str, tf.TensorSpec],
                    name: str = VARIABLES) -> reverb.Table:
  """max_size 1: only the newest weights; sampling never removes them."""
  return reverb.Table(
      name=name,
      sampler=reverb.selectors.Lifo(),
      remover=reverb.selectors.Fifo(),
      max_size=1,
      max_times_sampled=0,
      rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=signature)


def start_server(tables: Sequence[reverb.Table],
                 port: Optional[int] = None) -> reverb.Server:
  """An embedded Reverb server in this process (port None: a free one).

  The server listens on all interfaces without authentication: see
  README.md ("Security") before exposing its port.
  """
  return reverb.Server(tables=list(tables), port=port)


def connect(address: str, timeout_s: float = 10.0) -> reverb.Client:
  """A client of the server at HOST:PORT; ConnectionError if it does not answer."""
  if ":" not in address:
    raise ValueError(f"--reverb_address must be HOST:PORT, given {address!r}.")
  client = reverb.Client(address)
  try:
    client.server_info(timeout=max(1, int(timeout_s)))
  except (reverb.errors.DeadlineExceededError, tf.errors.DeadlineExceededError,
          tf.errors.UnavailableError, RuntimeError) as e:
    raise ConnectionError(
        f"no Reverb server answered at {address} within {timeout_s:.0f}s. "
        "Start one (python -m i2a.launch --role=server, or drop "
        "--reverb_address to use the embedded server) and check the host "
        "and port.") from e
  return client


def table_signature(client: reverb.Client,
                    table: str) -> Optional[Dict[str, tf.TensorSpec]]:
  """The signature the server holds for `table`; KeyError if it has none."""
  info = client.server_info(timeout=10)
  if table not in info:
    raise KeyError(f"the Reverb server has no table {table!r}; it has "
                   f"{sorted(info)}.")
  return info[table].signature
