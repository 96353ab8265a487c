"""User-facing errors.

Anything a user can cause (a wrong name, a bad file, an unreachable hub) raises a `RelaxbenchError`; the CLI
prints its message as one line on stderr and exits with status 2. Everything else is a bug and keeps its traceback.
"""


class RelaxbenchError(Exception):
    """An error caused by the user's input or environment, reported in one line."""

    exit_code = 2


class ConfigError(RelaxbenchError):
    """An invalid specification: unknown knob, wrong type, incompatible policy and drafter."""


class UnknownNameError(ConfigError):
    """A name that is not in a registry."""


class ModelError(RelaxbenchError):
    """A model that cannot be resolved, fetched, verified or loaded."""


class DataError(RelaxbenchError):
    """A data set that cannot be found, read or is empty."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``timeout``, schedulers and Ray send), raised where SIGINT raises ``KeyboardInterrupt`` so a
    run stops the same way: the session is marked interrupted and finished samples are kept."""

    exit_code = 143
