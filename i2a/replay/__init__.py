"""The agents' experience through Reverb, and the datasets on disk.

  tables    the `unrolls` and `variables` tables, servers, clients
  episodes  the step/window convention, episode buffers, window sampling
  files     the on-disk dataset format (shards + manifest)
  cache     the window cache: shards unpacked once into memory-mapped files
  datasets  batches of windows from disk for model pretraining
"""
