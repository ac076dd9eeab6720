"""Experience through Reverb, and datasets on disk.

  tables    the `sequences`, `unrolls` and `variables` tables, servers, clients
  episodes  the step/window convention, episode buffers, window sampling
  writers   SequenceAdder: vector-env steps -> jumpy windows in Reverb
  files     the on-disk dataset format (shards + manifest)
  cache     the window cache: shards unpacked once into memory-mapped files
  datasets  tf.data pipelines from disk or from Reverb
"""
