"""Which surface a Check is for: the route label (our Envoy) and the path (any proxy, Istio).

Istio's ext_authz provider sends no route label, so authz reads the surface from the path it is
sent — and accepts only the canonical spelling of a route the adapter serves. Every way of
writing a path that a proxy and the adapter could read differently is refused, as is a label that
disagrees with the path.
"""

from __future__ import annotations

import pytest

from authz.errors import Forbidden
from authz.surfaces import surface_of

ACTION = "Qm8tX2zVb3kRn1-_aB9cDe4F"  # the shape of a real action id (token_urlsafe(18))
TASK = "0f6c3f0e-8a44-4f55-9e7c-1d2b3c4d5e6f"  # the shape of a real task id (a UUID)
# The HTTP+JSON binding's paths below /a2a (adapter/rest.py), each on the a2a surface.
HTTP_JSON = [
    "/a2a/message:send",
    "/a2a/message:stream",
    "/a2a/tasks",
    "/a2a/tasks?contextId=c-1&pageSize=2",
    f"/a2a/tasks/{TASK}",
    f"/a2a/tasks/{TASK}?historyLength=1",
    f"/a2a/tasks/{TASK}:cancel",
    f"/a2a/tasks/{TASK}:subscribe",
    f"/a2a/tasks/{TASK}/pushNotificationConfigs",
    f"/a2a/tasks/{TASK}/pushNotificationConfigs/cfg-1",
    "/a2a/extendedAgentCard",
]


@pytest.mark.parametrize(
    ("path", "surface"),
    [
        ("/a2a", "a2a"),
        ("/a2a/", "a2a"),
        ("/a2a?x=1", "a2a"),
        (f"/approvals/{ACTION}", "approvals"),
        (f"/approvals/{ACTION}?decision=approve", "approvals"),
        ("/approvals/-leading-dash", "approvals"),
        *((path, "a2a") for path in HTTP_JSON),
    ],
)
def test_canonical_paths_name_their_surface(path: str, surface: str) -> None:
    """Without a label: the routes, query strings ignored; HTTP+JSON's are a2a's."""
    assert surface_of(None, path) == surface
    assert surface_of("", path) == surface


TRICKS = [
    # escaped characters of any kind: %2F, dot segments, an encoded letter, an encoded NUL
    f"/approvals%2F{ACTION}",
    f"/a2a%2F..%2Fapprovals/{ACTION}",
    f"/approvals/{ACTION}%2F..",
    "/%61pprovals/x",
    "/a2a%00",
    f"/approvals/%2e%2e/{ACTION}",
    # dot segments and doubled slashes
    f"/a2a/../approvals/{ACTION}",
    "/approvals/../a2a",
    f"/approvals/./{ACTION}",
    "/./a2a",
    "//a2a",
    f"//approvals/{ACTION}",
    f"/approvals//{ACTION}",
    "/a2a//",
    # path parameters, backslashes, fragments
    "/a2a;x=1",
    f"/approvals/{ACTION};jsessionid=1",
    f"/approvals\\{ACTION}",
    f"/a2a\\..\\approvals\\{ACTION}",
    "/a2a#frag",
    f"/approvals/{ACTION}#x",
    # case and look-alike prefixes
    "/A2A",
    "/a2A/",
    f"/Approvals/{ACTION}",
    f"/APPROVALS/{ACTION}",
    "/a2ax",
    "/a2a/x",
    f"/approvalsX/{ACTION}",
    "/approvals",
    "/approvals/",
    f"/approvals/{ACTION}/",
    f"/approvals/{ACTION}/extra",
    f"/approvals/{ACTION}/../../a2a",
    # characters an action id never has, control and non-ASCII characters, whitespace
    f"/approvals/{ACTION}.json",
    "/approvals/a b",
    "/approvals/a\tb",
    "/a2a\r\n",
    "/approvals/\u0430ction",  # Cyrillic a
    "/a2a\u200b",
    f"/approvals/{'a' * 129}",
    # the HTTP+JSON paths misspelt: other cases, odd ids, extra or missing parts, other verbs
    "/a2a/message:Send",
    "/a2a/Message:send",
    "/a2a/message:delete",
    "/a2a/message",
    "/a2a/message:send/",
    "/a2a/message:send:stream",
    "/a2a/tasks/",
    f"/a2a/tasks/{TASK}/",
    f"/a2a/tasks/{TASK}:cancel/",
    f"/a2a/tasks/{TASK}:approve",
    f"/a2a/tasks/{TASK}:cancel:subscribe",
    f"/a2a/tasks/{TASK}/history",
    f"/a2a/tasks/{TASK}/pushNotificationConfigs/",
    f"/a2a/tasks/{TASK}/pushNotificationConfigs/a/b",
    f"/a2a/tasks/{TASK}/../../approvals/{ACTION}",
    f"/a2a/tasks/{TASK}%3Acancel",
    "/a2a/tasks/a.b",
    "/a2a/tasks/a:b:cancel",
    f"/a2a/tasks/{'a' * 129}",
    "/a2a/extendedagentcard",
    "/a2a/extendedAgentCard/",
    "/a2a//tasks",
    "/a2a/tasks//x",
    # not an origin-form path at all
    "",
    "a2a",
    "*",
    "http://edge/a2a",
    "/.well-known/agent-card.json",
    "/healthz",
    "/metrics",
]


@pytest.mark.parametrize("path", TRICKS)
def test_every_other_spelling_is_refused(path: str) -> None:
    """Anything but a canonical route path is 403 forbidden, label or not."""
    with pytest.raises(Forbidden):
        surface_of(None, path)
    for label in ("a2a", "approvals"):
        with pytest.raises(Forbidden):
            surface_of(label, path)


@pytest.mark.parametrize(
    ("label", "path"),
    [
        ("a2a", f"/approvals/{ACTION}"),
        ("approvals", "/a2a"),
        ("approvals", "/a2a/"),
        ("approvals", "/a2a/message:send"),
        ("approvals", f"/a2a/tasks/{TASK}:cancel"),
    ],
)
def test_a_label_that_disagrees_with_the_path_is_refused(label: str, path: str) -> None:
    """A route labelled one surface cannot authorize the other surface's path."""
    with pytest.raises(Forbidden):
        surface_of(label, path)


def test_an_agreeing_label_is_accepted_and_an_unknown_one_refused() -> None:
    """Our Envoy's labels agree with its routes; a label we do not know is never guessed."""
    assert surface_of("a2a", "/a2a") == "a2a"
    assert surface_of("approvals", f"/approvals/{ACTION}") == "approvals"
    with pytest.raises(Forbidden):
        surface_of("admin", "/a2a")
