"""Grid files of `python -m i2a.sweep` (format: docs/experiments.md)."""
