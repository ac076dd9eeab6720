"""Config files of `python -m i2a.train` (one per agent; shared fields in common.py)."""
