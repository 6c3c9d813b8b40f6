"""CLI subcommands, one module each; ``cleanpipe.cli`` calls every module's ``register``.

Each module exposes ``register(subparsers) -> None``, adding a subparser whose
``func(args) -> int`` returns the exit code (see :class:`cleanpipe.errors.ExitCode`).
"""
