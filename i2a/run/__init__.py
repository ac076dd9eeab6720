"""The runtimes of the binaries: what `python -m i2a.<name>` runs.

Layer: binaries (i2a/<name>.py: flags and main) -> runtimes (this package)
-> agents -> envmodels; see docs/architecture.md for the table of binary ->
runtime module. Nothing here is imported on `import i2a.run`: each runtime
is imported by its binary (or by another runtime) when needed.
"""
