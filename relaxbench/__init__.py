"""relaxbench: a benchmark suite for relaxed speculative decoding."""

__version__ = "0.1.0"
