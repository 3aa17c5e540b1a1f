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


@pytest.mark.parametrize(
    ("path", "surface"),
    [
        ("/a2a", "a2a"),
        ("/a2a/", "a2a"),
        ("/a2a?x=1", "a2a"),
        (f"/approvals/{ACTION}", "approvals"),
        (f"/approvals/{ACTION}?decision=approve", "approvals"),
        ("/approvals/-leading-dash", "approvals"),
    ],
)
def test_canonical_paths_name_their_surface(path: str, surface: str) -> None:
    """Without a label: the two routes, query strings ignored."""
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
    [("a2a", f"/approvals/{ACTION}"), ("approvals", "/a2a"), ("approvals", "/a2a/")],
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
