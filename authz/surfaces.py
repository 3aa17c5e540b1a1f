"""Which surface a Check is for, from the route's label and the request path.

Our Envoy labels each route (`context_extensions.surface`); Istio's `envoyExtAuthzGrpc` provider
cannot, so there authz reads the surface from the path the proxy sends it
(`attributes.request.http.path`, query string included, normalised or not depending on the
mesh's `pathNormalization`). Either way the path decides, and only the canonical spelling of a
route the adapter serves is accepted:

    /a2a, /a2a/                     → a2a        (JSON-RPC)
    /a2a/message:send, /a2a/message:stream, /a2a/tasks, /a2a/tasks/{id},
    /a2a/tasks/{id}:cancel, /a2a/tasks/{id}:subscribe, /a2a/extendedAgentCard,
    /a2a/tasks/{id}/pushNotificationConfigs[/{id}]
                                    → a2a        (HTTP+JSON, adapter/rest.py)
    /approvals/{action_id}          → approvals
    (every id: 1-128 of A-Z a-z 0-9 - _)

Anything else — a `%` escape, `//`, `.`/`..` segments, `;` parameters, `\\`, `#`, other cases, a
look-alike prefix, a trailing segment, control or non-ASCII characters — is refused before any
credential is read, so no proxy's or router's reading of an odd path can pick the surface (and
with it the token audience). A label, when present, must agree with the path. The adapter checks
the assertion's surface against the route it serves as well.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

from authz.errors import Forbidden
from contract.identity import Surface

_ID = r"[A-Za-z0-9_-]{1,128}"
_HTTP_JSON = (
    rf"/message:(?:send|stream)|/tasks|/tasks/{_ID}(?::cancel|:subscribe)?"
    rf"|/tasks/{_ID}/pushNotificationConfigs(?:/{_ID})?|/extendedAgentCard"
)
_ROUTES = re.compile(rf"(?P<a2a>/a2a/?|/a2a(?:{_HTTP_JSON}))|(?P<approvals>/approvals/{_ID})")
_LABELS: Mapping[str, Surface] = {"a2a": "a2a", "approvals": "approvals"}


@functools.lru_cache(maxsize=1024)
def surface_of(label: str | None, path: str) -> Surface:
    """The surface of a Check, or `Forbidden` (403) for a path that is not a canonical route or
    a label that is unknown or disagrees with the path. Remembered per label and path (a
    refusal is raised again, never remembered): the routes are few and requests repeat them."""
    route = _ROUTES.fullmatch(path.partition("?")[0])
    if route is None:
        raise Forbidden("no such route")
    surface: Surface = "a2a" if route.group("a2a") is not None else "approvals"
    if label and _LABELS.get(label) != surface:
        raise Forbidden("this route names another surface")
    return surface
