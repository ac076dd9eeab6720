"""A dataset's arrays in one compact file, readable with numpy alone.

Where it sits: `paper_data.py pack` writes the `paper` preset's claim-1
dataset in this format so that it travels to a machine without the
project's stack; `xla_pretrain.py` reads it there. The file is a JSON
header line ({"arrays": {name: {dtype, shape}}, ...}) followed by one LZMA
stream of the arrays' bytes in the header's order.
"""

from __future__ import annotations

import json
import lzma
import os
from typing import Any, Dict, Tuple

import numpy as np


def write(path: str, header: Dict[str, Any],
          arrays: Dict[str, np.ndarray]) -> None:
  """Writes `arrays` (and `header`'s other fields) to `path` atomically."""
  header = dict(header, arrays={k: dict(dtype=v.dtype.str, shape=list(v.shape))
                                for k, v in arrays.items()})
  tmp = f"{path}.tmp{os.getpid()}"
  try:
    with open(tmp, "wb") as f:
      f.write((json.dumps(header) + "\n").encode())
      with lzma.LZMAFile(f, "wb", preset=6) as z:
        for value in arrays.values():
          z.write(np.ascontiguousarray(value).tobytes())
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def read(path: str) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
  """`write`'s file -> (header, {name: array})."""
  with open(path, "rb") as f:
    header = json.loads(f.readline())
    with lzma.LZMAFile(f, "rb") as z:
      arrays = {}
      for name, meta in header["arrays"].items():
        dtype = np.dtype(meta["dtype"])
        count = int(np.prod(meta["shape"], dtype=np.int64)) * dtype.itemsize
        data = z.read(count)
        if len(data) != count:
          raise ValueError(f"{path}: {name} is cut short ({len(data)} of "
                           f"{count} bytes); write the file again.")
        arrays[name] = np.frombuffer(data, dtype).reshape(meta["shape"])
      # Past the last array the stream must end (LZMA checks its end
      # marker and index here: EOFError for a file cut short).
      if z.read(1):
        raise ValueError(f"{path}: data after the header's arrays; write "
                         "the file again.")
  return header, arrays
