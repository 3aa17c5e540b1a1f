"""The `decision` log line: one per Check, written to the kernel before the Check is answered.

It is the security record of every decision (docs/authz.md#log-events), so it is never dropped,
sampled or buffered. It is also, per Check, the most expensive thing authz did besides the
transport (JSON encoding of a dozen members, a timestamp, a `write`; docs/benchmarks.md). Most
of the line is the same from one Check to the next, so it is assembled from pieces encoded once:
the members fixed by the outcome (decision, reason, status, surface), the caller's key (encoded
once per caller, `callers.Caller`) and the logged path (per distinct path); per Check only the
timestamp, the request id and the latency are encoded. The bytes are exactly what
`runtime.logs.JsonFormatter` writes for the same fields (tests/authz/test_decision_log.py), and
the line is written through the one `JsonLinesHandler` by one `os.write`. Any other logging
set-up (another handler, a filter, pytest's caplog) gets the same fields through `logs.write`.

Never logged: a token, a header value other than the request id, the assertion.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from json.encoder import encode_basestring
from typing import Any

from authz.decision import Allow, Deny
from runtime import logs

MAX_LOGGED_PATH = 256
EVENT = "decision"
_QUERY_OR_FRAGMENT = re.compile(r"[?#]")


def logged_path(path: str) -> str:
    """The path without its query or fragment, where a client may put anything (credentials
    included), cut to `MAX_LOGGED_PATH` characters."""
    return _QUERY_OR_FRAGMENT.split(path, maxsplit=1)[0][:MAX_LOGGED_PATH]


class DecisionLog:
    """Writes the `decision` event of each Check to `logger`'s handlers."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def write(self, result: Allow | Deny, path: str, ms: float) -> None:
        """Log `result` for the check of `path`, decided in `ms` milliseconds."""
        logger = self._logger
        if not logger.isEnabledFor(logging.INFO):
            return
        handler = logs.sole_json_handler(logger, logging.INFO)
        if handler is None:
            logs.write(logger, EVENT, logging.INFO, fields(result, path, ms))
            return
        if isinstance(result, Allow):
            members = _members(logger.name, "allow", "ok", 200, result.surface)
            principal = result.caller.logged_key
        else:
            denial = result.denial
            members = _members(logger.name, "deny", denial.reason, denial.status, result.surface)
            principal = (
                "null" if result.principal is None else encode_basestring(result.principal.key)
            )
        rid = result.request_id
        line = (
            f'{{"ts":"{logs.timestamp(time.time())}"{members}{principal},'
            f'"request_id":{"null" if rid is None else encode_basestring(rid)},'
            f'"path":{_logged_path_json(path)},"ms":{ms!r}}}'
        )
        handler.write_line(line, logging.INFO, EVENT)


def fields(result: Allow | Deny, path: str, ms: float) -> dict[str, Any]:
    """The event's fields, in the order of the line."""
    if isinstance(result, Allow):
        decision, reason, status = "allow", "ok", 200
    else:
        decision, reason, status = "deny", result.denial.reason, result.denial.status
    who = result.principal
    return {
        "decision": decision,
        "reason": reason,
        "status": status,
        "surface": result.surface,
        "principal": who.key if who is not None else None,
        "request_id": result.request_id,
        "path": logged_path(path),
        "ms": ms,
    }


@functools.lru_cache(maxsize=256)
def _members(logger: str, decision: str, reason: str, status: int, surface: str) -> str:
    """Everything between the timestamp and the principal's value, encoded once per outcome
    (reason codes, statuses and surfaces are few; a route label is our Envoy's)."""
    encode = encode_basestring
    return (
        f',"level":"info","logger":{encode(logger)},"event":"{EVENT}",'
        f'"decision":{encode(decision)},"reason":{encode(reason)},"status":{status:d},'
        f'"surface":{encode(surface)},"principal":'
    )


@functools.lru_cache(maxsize=1024)
def _logged_path_json(path: str) -> str:
    """`logged_path` as a JSON string, per distinct path (callers repeat their routes)."""
    return encode_basestring(logged_path(path))
