"""The one exception type a user sees.

Anything raised as ``AccumulusError`` is a user-facing problem (bad input, a missing store,
an invalid accumulation group). The CLI prints its message on one line and exits non-zero;
the service answers 4xx with it. Anything else is a bug and keeps its traceback.
"""


class AccumulusError(Exception):
    """A problem with the user's input or data, explained in one line."""


class AccumulationReadError(AccumulusError):
    """An accumulation array could not be read (a missing or corrupt chunk): the raw data
    can still answer, more slowly."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a command that writes: still a ``KeyboardInterrupt``, which says in
    ``kept`` what the store holds now and how to go on."""

    def __init__(self, kept: str) -> None:
        super().__init__(kept)
        self.kept = kept


class AccumulusWarning(UserWarning):
    """Something done to the user's data that they should know about (a fill value that
    marks nothing, dropped), explained in one line."""


class ParameterError(AccumulusError):
    """One parameter of a request is wrong; ``parameter`` names it ("over", "stat",
    "weights", "variable", or a dimension for its range); ``missing``: it names something
    that is not there (a service answers 404), rather than something wrong (422)."""

    def __init__(self, parameter: str | None, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.missing = missing
