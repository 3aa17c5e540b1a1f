"""The approvals surface without route labels: the edge as Istio's sidecar would front it.

Istio's `envoyExtAuthzGrpc` provider sends authz no `context_extensions`, every request header,
and the path as its sidecar normalised it (or not); the sidecar strips none of our headers and
routes every path to the adapter. This test builds that Envoy from `envoy/envoy.yaml` (no labels,
all paths to the adapter behind ext_authz except `GET` of the public card, no early header
removal and no hygiene filter, all headers to authz, escaped slashes kept) for two mesh
settings — `MERGE_SLASHES` (what `mesh-config.yaml` sets) and `NONE` (no normalisation at all) —
and runs the real authz and adapter behind it: the flows work, and every spelling trick is refused.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from stack import envoy_config
from tests.e2e.conftest import raw_request
from tests.e2e.edge import (
    JSONRPC_HEADERS,
    Edge,
    bearer,
    jsonrpc,
    message_params,
    running_edge,
    unique,
)

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

CARD = "/.well-known/agent-card.json"
EXT_AUTHZ = "envoy.filters.http.ext_authz"
# Our request-hygiene filter (reserved headers, query tokens): a mesh's sidecar has none.
HYGIENE = "envoy.filters.http.lua"
NORMALISATION = {
    "MERGE_SLASHES": {"normalize_path": True, "merge_slashes": True},
    "NONE": {"normalize_path": False, "merge_slashes": False},
}


def istio_like(source: dict[str, Any], normalisation: str) -> dict[str, Any]:
    """Our bootstrap reshaped into what Istio's inbound sidecar does for the overlay."""
    config = copy.deepcopy(source)
    manager = envoy_config.listener(config)["filter_chains"][0]["filters"][0]["typed_config"]
    manager.pop("early_header_mutation_extensions")
    manager.update(NORMALISATION[normalisation])
    manager["path_with_escaped_slashes_action"] = "KEEP_UNCHANGED"
    manager["common_http_protocol_options"].pop("headers_with_underscores_action")
    manager["http_filters"] = [f for f in manager["http_filters"] if f["name"] != HYGIENE]
    for http_filter in manager["http_filters"]:
        if http_filter["name"] == EXT_AUTHZ:
            typed = http_filter["typed_config"]
            for istio_leaves_unset in ("allowed_headers", "decoder_header_mutation_rules"):
                typed.pop(istio_leaves_unset)
    routes = manager["route_config"]["virtual_hosts"][0]["routes"]
    public = [copy.deepcopy(r) for r in routes if r["name"] in ("agent_card", "card_keys")]
    for route in public:  # only authz, not the sidecar, would keep reserved headers away
        route["typed_per_filter_config"].pop("envoy.filters.http.header_mutation")
    everything = {
        "name": "inbound",
        "match": {"prefix": "/"},
        "route": {"cluster": "adapter", "timeout": "0s"},
    }
    manager["route_config"]["virtual_hosts"][0]["routes"] = [*public, everything]
    return config


@pytest.fixture(scope="module", params=sorted(NORMALISATION))
def mesh_edge(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Edge]:
    root = tmp_path_factory.mktemp(f"istio-{request.param.lower()}")
    envoy_yaml = root / "envoy.yaml"
    source = envoy_config.load(envoy_config.repo_config_path())
    envoy_yaml.write_text(yaml.safe_dump(istio_like(source, request.param), sort_keys=False))
    with running_edge(root / "edge", envoy_yaml=envoy_yaml) as edge:
        yield edge


def _port(edge: Edge) -> int:
    return int(edge.url.rsplit(":", 1)[1])


async def _post(edge: Edge, path: str, token: str, **headers: str) -> tuple[int, bytes]:
    body = json.dumps(jsonrpc("SendMessage", message_params("hi"))).encode()
    response = await raw_request(
        _port(edge),
        "POST",
        path,
        {**JSONRPC_HEADERS, **bearer(token), **headers},
        body=body,
    )
    return response.status, response.body


async def test_a2a_and_approvals_work_without_route_labels(mesh_edge: Edge) -> None:
    """An agent's token on /a2a gets an A2A answer; the person's token reaches the approvals
    surface (an unknown action: the adapter's 404), the agent's token does not (audience)."""
    user = unique("user")
    status, body = await _post(mesh_edge, "/a2a", mesh_edge.token(subject=user, agent="a"))
    assert status == 200 and b'"result"' in body
    human = mesh_edge.token("human", subject=user)
    shown = await raw_request(_port(mesh_edge), "GET", "/approvals/no-such-action", bearer(human))
    assert shown.status == 404
    assert b"not_found" in shown.body
    agent = await raw_request(
        _port(mesh_edge), "GET", "/approvals/no-such-action", bearer(mesh_edge.token())
    )
    assert agent.status == 401  # an a2a-audience token on the approvals surface


TRICKS = [
    "/approvals%2Fx",
    "/a2a%2F..%2Fapprovals%2Fx",
    "/a2a;x=1",
    "/approvals/x;y",
    "/A2A",
    "/Approvals/x",
    "/approvalsX/x",
    "/a2ax",
    "/approvals/x/y",
    "/approvals/x.json",
    "/a2a/x",
    "/approvals/",
    "/healthz",
    "/metrics",
    "/readyz",
]


@pytest.mark.parametrize("path", TRICKS)
@pytest.mark.parametrize("kind", ["delegated", "human"])
async def test_no_spelling_of_a_path_chooses_a_surface(
    mesh_edge: Edge, path: str, kind: str
) -> None:
    """Whatever the sidecar normalised, a non-canonical path is refused by authz (403
    forbidden) or by Envoy (400) — never served, whichever token comes with it."""
    # `kind` comes from the parametrize list: two of the TokenKind literals
    status, body = await _post(mesh_edge, path, mesh_edge.token(kind))  # type: ignore[arg-type]
    assert status in (400, 403), (path, status, body)
    if status == 403:
        assert b'"error":"forbidden"' in body.replace(b" ", b"")


@pytest.mark.parametrize(
    ("path", "reads_as"),
    [
        ("/%61pprovals/x", "approvals"),
        ("/a2a/../approvals/x", "approvals"),
        ("//approvals/x", "approvals"),
        ("/./a2a", "a2a"),
    ],
)
async def test_spellings_the_sidecar_may_normalise_are_judged_as_what_they_become(
    mesh_edge: Edge, path: str, reads_as: str
) -> None:
    """Normalised by the sidecar, authz and the adapter see the same canonical path, and the
    token is judged for that surface (an agent never gets onto approvals); left alone, authz
    refuses the spelling (403)."""
    status, body = await _post(mesh_edge, path, mesh_edge.token())
    allowed = (401, 403) if reads_as == "approvals" else (200, 403)
    assert status in allowed, (path, status, body)


async def test_client_copies_of_our_headers_never_pass(mesh_edge: Edge) -> None:
    """No early removal in the mesh: authz sees a forged x-orrery-principal or trace link and
    refuses it (400 reserved_header); the public card ignores them."""
    for header in ("x-orrery-principal", "x-orrery-trace-link"):
        status, body = await _post(mesh_edge, "/a2a", mesh_edge.token(), **{header: "forged"})
        assert status == 400 and b"reserved_header" in body
    card = await raw_request(_port(mesh_edge), "GET", CARD, {"x-orrery-principal": "forged"})
    assert card.status == 200
