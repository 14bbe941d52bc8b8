"""What a failed storage request was: the HTTP status it got (if any), and whether trying it
again may succeed.

Transient: HTTP 408, 425, 429 and 5xx (but 501 and 505, which say the server cannot do it at
all), a reset, refused or broken connection, a timeout, a body cut short or not decodable
(the clients say "payload", "incomplete", "decoding response body"). Everything else
(404, 403, 412, a bad request) is answered at once. The clients differ in how they report
these: aiohttp (fsspec's HTTP and gcsfs) raises ClientResponseError with ``status`` or a
ClientConnectionError / ClientPayloadError; gcsfs an HttpError with ``code``; obstore a
GenericError whose message holds "status code: NNN" or the failure of the connection; the
standard library ConnectionError and TimeoutError. Asking for the attributes and the message
keeps this module free of imports of the optional clients.
"""

from __future__ import annotations

import asyncio
import re


class BodyLengthError(ConnectionError):
    """A response body of another length than the response promised (cut short, or padded
    on the way): transient, the request is sent again."""


_STATUS = re.compile(r"status(?: code)?:? (\d{3})\b", re.IGNORECASE)
# Messages of failed connections and bodies, as the clients word them.
_BROKEN = re.compile(r"error sending request|connection (?:reset|refused|closed|aborted)|"
                     r"broken pipe|timed? ?out|incomplete|decoding response body|"
                     r"unexpected eof|end of file before|payload|server disconnected|"
                     r"body (?:read|error)|reset by peer", re.IGNORECASE)
# Exception class names of the clients' transient failures (matched by name: the clients
# are optional imports).
_TRANSIENT_TYPES = {"ClientConnectionError", "ClientOSError", "ServerDisconnectedError",
                    "ClientPayloadError", "ServerTimeoutError", "ContentLengthError",
                    "TransferEncodingError", "ChunkedEncodingError", "ProxyError",
                    "ReadTimeout", "ConnectTimeout", "IncompleteRead", "RemoteDisconnected"}
# Failures that are answers, never worth repeating (obstore's names).
_FINAL_TYPES = {"PreconditionError", "AlreadyExistsError", "NotFoundError",
                "PermissionDeniedError", "UnauthenticatedError", "NotModifiedError",
                "NotSupportedError", "InvalidPathError", "UnknownConfigurationKeyError"}


def http_status(exc: BaseException) -> int | None:
    """The HTTP status a failed request got, None where it got none (or it cannot be told)."""
    for attr in ("status", "code", "status_code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None) or getattr(response, "status", None)
    if isinstance(value, int):
        return value
    m = _STATUS.search(str(exc))
    return int(m.group(1)) if m else None


def transient_status(status: int) -> bool:
    """Whether an HTTP status says "try again later"."""
    return status in (408, 425, 429) or (500 <= status < 600 and status not in (501, 505))


def is_transient(exc: BaseException) -> bool:
    """Whether a failed request may succeed when sent again (see the module docstring)."""
    names = {t.__name__ for t in type(exc).__mro__}
    if names & _FINAL_TYPES or isinstance(exc, (FileNotFoundError, PermissionError)):
        return False
    status = http_status(exc)
    if status is not None:
        return transient_status(status)
    if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError)) or \
            names & _TRANSIENT_TYPES:
        return True
    return "Generic" in type(exc).__name__ and _BROKEN.search(str(exc)) is not None


def is_request_failure(exc: BaseException) -> bool:
    """Whether an exception is a failed storage request (transient or not) rather than an
    answer the caller handles (a missing object, a conflict) or a bug."""
    if is_transient(exc):
        return True
    names = {t.__name__ for t in type(exc).__mro__}
    if names & {"PreconditionError", "AlreadyExistsError", "NotFoundError"} or \
            isinstance(exc, FileNotFoundError):
        return False
    return http_status(exc) is not None or bool(
        names & {"PermissionDeniedError", "UnauthenticatedError", "GenericError"})


def describe(exc: BaseException) -> str:
    """A short account of a failed request for messages: "HTTP 503" or the failure."""
    status = http_status(exc)
    text = " ".join(str(exc).split())
    first = text.split(" Debug source:")[0]
    if len(first) > 300:
        first = first[:297] + "..."
    kind = type(exc).__name__
    if status is not None:
        return f"HTTP {status} ({kind}: {first})" if first else f"HTTP {status}"
    return f"{kind}: {first}" if first else kind
