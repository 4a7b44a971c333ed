"""cera's errors as Python exceptions: every failing library call raises CeraError carrying
the cera_status it returned and the message cera wrote (what failed and where)."""
from __future__ import annotations

from typing import Optional

from ._lib import Status, lib


class CeraError(Exception):
    """A cera call failed. ``status`` is the cera_status (a ``cera.Status``; ``status.name``
    e.g. ``"ERR_INVALID_ARG"``), ``message`` cera's message."""

    def __init__(self, status: int, message: str):
        self.status = Status(status)
        self.message = message
        name = lib.cera_status_str(int(status))
        self.status_str = name.decode() if name else self.status.name
        super().__init__("%s: %s" % (self.status_str, message) if message else self.status_str)


class CeraValueError(CeraError, ValueError):
    """A CeraError for an invalid argument (CERA_ERR_INVALID_ARG, or one the binding refused
    before calling cera); also a ValueError, as llama-cpp-python raises for bad arguments."""


class CeraClosedError(CeraError, RuntimeError):
    """An engine, session or adapter used after it was closed."""

    def __init__(self, what: str):
        super().__init__(Status.ERR_INVALID_ARG, "the %s is closed" % what)


def error(status: int, message: str) -> CeraError:
    """The exception for a status: CeraValueError for CERA_ERR_INVALID_ARG, else CeraError."""
    cls = CeraValueError if status == Status.ERR_INVALID_ARG else CeraError
    return cls(status, message)


def check(status: int, err, what: Optional[str] = None) -> None:
    """Raises the error a cera call returned (err: its cera_error)."""
    if status == Status.OK:
        return
    msg = err.message.decode("utf-8", "replace") if err is not None else ""
    if what and not msg:
        msg = what
    raise error(status, msg)


def bad_arg(message: str) -> CeraValueError:
    return CeraValueError(Status.ERR_INVALID_ARG, message)
