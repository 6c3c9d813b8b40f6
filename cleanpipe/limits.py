"""The ranges a user's numbers must fall in, in one place: command-line options, pipeline
settings and the pipeline file itself. Values outside are refused with a one-line error
(exit code 2) before any work. Import-light, so ``cleanpipe --help`` can show them.

    >>> MAX_WORKERS, f"{MAX_BATCH_SIZE:,}"
    (256, '1,048,576')
"""

#: most worker processes a run may ask for (``workers:``, ``--workers``). Each is a Python
#: process of ~200 MB; more than a big machine's cores only costs memory, and a typo such
#: as 100000 must not start a fork storm. A fixed bound, not one derived from this
#: machine's cores, so a pipeline file valid on one machine is valid on every machine.
MAX_WORKERS = 256
#: most rows per batch (``batch_size:``, ``--batch-size``): a batch is held in memory a few
#: times over (each worker's, the writer's), and larger batches gain nothing
MAX_BATCH_SIZE = 1 << 20
#: most rows per output part (``output.rows_per_part``)
MAX_ROWS_PER_PART = 1 << 31
#: largest pipeline file read (bytes); a pipeline file is a few kilobytes
MAX_YAML_BYTES = 4 << 20
#: most nodes that aliases (``*name``) may add to a pipeline file once expanded: nine nested
#: levels of nine aliases (a "billion laughs") would otherwise expand to ~10⁹ values
MAX_ALIAS_NODES = 100_000
