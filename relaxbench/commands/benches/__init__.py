"""The ``relaxbench bench`` subcommands, one module per benchmark (registered by ``commands/bench.py``)."""
