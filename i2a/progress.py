"""A progress line for long work: counts, rate, ETA, and extra fields.

  progress = Progress("collect train", total=50_000, unit="steps")
  progress.update(n, returns=12.5)   # prints at most every `interval_s`
  progress.close()                   # final line with the overall rate
"""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


def format_duration(seconds: float) -> str:
  seconds = int(max(0, seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f"{hours}:{minutes:02d}:{secs:02d}"


class Progress:
  """Prints '<name>: done/total unit (pct) rate unit/s ETA h:mm:ss | extras'."""

  def __init__(self, name: str, total: Optional[int], unit: str = "steps",
               interval_s: float = 2.0, stream: TextIO = sys.stderr,
               initial: int = 0):
    self.name, self.total, self.unit = name, total, unit
    self.done = initial
    self._initial = initial
    self._interval = interval_s
    self._stream = stream
    self._start = time.monotonic()
    self._last_print = self._start
    self._last_done = initial
    self._last_time = self._start
    self._rate = 0.0

  @property
  def elapsed_s(self) -> float:
    return time.monotonic() - self._start

  def rate(self) -> float:
    """Overall rate since start (units per second)."""
    elapsed = self.elapsed_s
    return (self.done - self._initial) / elapsed if elapsed > 0 else 0.0

  def update(self, count: int = 1, force: bool = False, **extras) -> None:
    self.done += count
    now = time.monotonic()
    if not force and now - self._last_print < self._interval:
      return
    window = now - self._last_time
    if window > 0:
      recent = (self.done - self._last_done) / window
      self._rate = recent if not self._rate else 0.5 * self._rate + 0.5 * recent
    self._last_done, self._last_time, self._last_print = self.done, now, now
    self._print(extras)

  def _print(self, extras) -> None:
    parts = [f"{self.name}: {self.done:,}"]
    if self.total:
      parts[0] += f"/{self.total:,} {self.unit} ({100 * self.done / self.total:.1f}%)"
    else:
      parts[0] += f" {self.unit}"
    parts.append(f"{self._rate:,.1f} {self.unit}/s")
    if self.total and self._rate > 0:
      parts.append(f"ETA {format_duration((self.total - self.done) / self._rate)}")
    line = ", ".join(parts)
    if extras:
      line += " | " + " ".join(
          f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
          for k, v in extras.items())
    print(line, file=self._stream, flush=True)

  def close(self, **extras) -> None:
    self._rate = self.rate()
    self._print(dict(extras, elapsed=format_duration(self.elapsed_s)))
