"""Our token verifier against PyJWT: every token ours accepts, PyJWT accepts too.

authz parses JWS itself (authz/tokens.py says why). The question a reviewer asks of a
hand-written verifier is whether it lets through anything a library they know would refuse. This
answers it by property: Hypothesis mutates valid tokens — header members, claims, JSON text,
base64url spellings, signatures and signing keys — and for each token compares

* ours: the bearer-token checks (`authz.credentials`) and `TokenVerifier.verify`, with the keys
  parsed from a JWKS by `authz.jwks`, and
* PyJWT: `jwt.decode` with the key the header's `kid` selects from the same JWKS
  (`PyJWKSet`), the same algorithms, issuer, audience and leeway, and the claims we require
  (`exp`, `iss`, `aud`, `sub`) required,

asserting that ours accepts a subset of what PyJWT accepts. Where ours is deliberately stricter,
`DIFFERENCES` below pins each case (ours refuses, PyJWT accepts), and docs/authz.md lists them.

Run time: the `ci` profile (loaded by default in tests/conftest.py) draws a bounded number of
examples from a fixed seed; `--hypothesis-profile=deep` draws many more, randomly.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from authz import credentials
from authz.errors import Denial
from authz.jwks import KeyStore
from authz.settings import JwksSettings, TokenRules
from authz.tokens import TokenVerifier
from contract.jose import b64url_encode
from tests.authz.support import AUDIENCE, CONSOLE, ISSUER, SigningKey
from tests.base64url import ALPHABET

ALGORITHMS = ("ES256", "RS256", "PS256", "EdDSA")
LEEWAY = 60
MAX_LIFETIME = 86400
REQUIRED = ["exp", "iss", "aud", "sub"]


class _Static:
    """A key source that always holds one JWKS document (our seam, `jwks.KeySource`)."""

    description = "differential test"

    def __init__(self, document: bytes) -> None:
        self._document = document

    def load(self) -> bytes:
        return self._document

    def confirm(self) -> None:
        """Nothing to remember."""


@dataclass
class Judges:
    """Both verifiers over one JWKS, and the keys that can sign for (or against) it."""

    published: list[SigningKey]
    outsider: SigningKey
    ours: Callable[[str], bool]
    theirs: Callable[[str], str | None]


@pytest.fixture(scope="module")
def judges(signing_keys: list[SigningKey]) -> Iterator[Judges]:
    document = {"keys": [key.jwk() for key in signing_keys]}
    loop = asyncio.new_event_loop()
    settings = JwksSettings(
        url=None, file=None, refresh=3600, cooldown=3600, stale=86400, timeout=1
    )
    store = KeyStore(settings, _Static(json.dumps(document).encode()))
    loop.run_until_complete(store.refresh())
    rules = TokenRules(
        issuer=ISSUER,
        audience=AUDIENCE,
        console_audience=CONSOLE,
        algorithms=frozenset(ALGORITHMS),
        max_lifetime=MAX_LIFETIME,
        leeway=LEEWAY,
    )
    verifier = TokenVerifier(rules, store, cache_size=0)
    their_keys = jwt.PyJWKSet.from_dict(document)

    def ours(token: str) -> bool:
        try:
            credentials.bearer_token({"authorization": f"Bearer {token}"})
            loop.run_until_complete(verifier.verify(token, AUDIENCE, time.time()))
        except Denial:
            return False
        return True

    def theirs(token: str) -> str | None:
        """None when PyJWT accepts the token, else why it refuses."""
        try:
            key = their_keys[jwt.get_unverified_header(token)["kid"]]
            jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=AUDIENCE,
                issuer=ISSUER,
                leeway=LEEWAY,
                options={"require": REQUIRED},
            )
        except Exception as refusal:  # any refusal or failure of PyJWT's is a "no"
            return f"{type(refusal).__name__}: {refusal}"
        return None

    try:
        yield Judges(list(signing_keys), SigningKey.generate("ES256"), ours, theirs)
    finally:
        loop.close()


# --- what a token is made of, before it is encoded ------------------------------------------


@dataclass
class Recipe:
    """A token to build: members, their JSON text and spelling, and how it is signed."""

    header: dict[str, Any]
    claims: dict[str, Any]
    header_json: Callable[[dict[str, Any]], str]
    payload_json: Callable[[dict[str, Any]], str]
    segment_tricks: list[tuple[int, str]]
    signer: str  # "own" (the kid's key), "other" (another published key), "outsider", "garbage"
    signature_trick: str


def build(recipe: Recipe, judges: Judges, now: int) -> str:
    key = next((k for k in judges.published if k.kid == recipe.header.get("kid")), None)
    texts = [recipe.header_json(recipe.header), recipe.payload_json(recipe.claims)]
    segments = [_encode(text) for text in texts]
    for index, trick in recipe.segment_tricks:
        segments[index] = _spell(segments[index], trick)
    signing_input = f"{segments[0]}.{segments[1]}".encode()
    signer = {
        "own": key or judges.published[0],
        "other": judges.published[(judges.published.index(key) + 1) % 4 if key else 1],
        "outsider": judges.outsider,
    }.get(recipe.signer)
    signature = signer.sign(signing_input) if signer is not None else b"\x01" * 64
    signature = _bend(signature, recipe.signature_trick)
    segments.append(_spell(b64url_encode(signature), recipe.signature_trick))
    return ".".join(segments)


def _encode(text: str) -> str:
    if text.startswith("utf-16:"):
        return b64url_encode(text.removeprefix("utf-16:").encode("utf-16"))
    return b64url_encode(text.encode("utf-8", "surrogatepass"))


def _spell(segment: str, trick: str) -> str:
    """Another spelling of a base64url segment (or of nothing, for other tricks)."""
    if trick == "respell" and len(segment) % 4 in (2, 3):
        return segment[:-1] + ALPHABET[ALPHABET.index(segment[-1]) | 1]
    if trick == "padding":
        return segment + "=" * (-len(segment) % 4)
    if trick == "standard-alphabet":
        return segment.translate(str.maketrans("-_", "+/"))
    if trick == "whitespace":
        return segment[:3] + " " + segment[3:]
    if trick == "drop-last":
        return segment[:-1]
    return segment


def _bend(signature: bytes, trick: str) -> bytes:
    if trick == "truncate":
        return signature[:-1]
    if trick == "extend":
        return signature + b"\x00"
    if trick == "flip":
        return bytes([signature[0] ^ 1]) + signature[1:]
    if trick == "empty":
        return b""
    return signature


# --- the strategies -----------------------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([10**30, -(10**30), 2**63, 0, -1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["", " ", "\u00a0", "\u200b", "\ud800", "a\u202eb", ISSUER, AUDIENCE]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
# Seconds from now: far on either side of each boundary (exp + leeway, nbf/iat - leeway, the
# lifetime cap), never within 10 s of one, so the two verifiers' clocks cannot disagree.
OFFSETS = st.sampled_from(
    [
        *(-(10**9), -86400, -3600, -LEEWAY - 30, -LEEWAY + 30, 0),
        *(LEEWAY - 30, LEEWAY + 30, 3600, MAX_LIFETIME - 60, MAX_LIFETIME + 60, 10**9),
    ]
)


@st.composite
def time_value(draw: st.DrawFn, now: int) -> Any:
    """A NumericDate, or something shaped almost like one."""
    moment = now + draw(OFFSETS)
    return draw(
        st.sampled_from(
            [moment, moment + 0.5, float(moment), str(moment), True, None, [moment], 2**64]
        )
    )


CLAIM_NAMES = ["iss", "aud", "sub", "exp", "iat", "nbf", "jti", "client_id", "azp", "act", "roles"]


def claim_value(name: str, now: int) -> st.SearchStrategy[Any]:
    """A replacement for claim `name`: plausible for it, or any JSON value at all."""
    plausible: dict[str, st.SearchStrategy[Any]] = {
        "iss": st.sampled_from([ISSUER, ISSUER + "/", ISSUER.upper(), [ISSUER], ""]),
        "aud": st.sampled_from(
            [AUDIENCE, [AUDIENCE], [AUDIENCE, CONSOLE], [CONSOLE], [], "", [AUDIENCE, 1], None]
        ),
        "sub": st.sampled_from(["alice", "", " ", "\u3000", "\ud800", 7, ["alice"], "a\u200bb"]),
        "exp": time_value(now),
        "iat": time_value(now),
        "nbf": time_value(now),
        "jti": st.sampled_from(["id-1", 1, None, ["id"], {"id": 1}]),
    }
    return st.one_of(plausible.get(name, JSON_VALUES), JSON_VALUES)


HEADER_NAMES = ["alg", "kid", "typ", "jwk", "jku", "x5u", "x5c", "crit", "b64", "cty", "zip"]


def header_value(name: str, kids: list[str]) -> st.SearchStrategy[Any]:
    plausible: dict[str, st.SearchStrategy[Any]] = {
        "alg": st.sampled_from(
            [*ALGORITHMS, "none", "None", "HS256", "RS384", "ES384", "ES512", "PS512", "es256", ""]
        ),
        "kid": st.sampled_from([*kids, "unknown", "", 1, None]),
        "typ": st.sampled_from(["JWT", "at+jwt", "application/jwt", "JOSE", "jwt ", "", 1]),
        "crit": st.sampled_from([["b64"], ["exp"], [], "b64"]),
        "b64": st.sampled_from([False, True, 0, "false"]),
    }
    return st.one_of(plausible.get(name, JSON_VALUES), JSON_VALUES)


def compact(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def spaced(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2) + "\n"


def unicode_keys(obj: dict[str, Any]) -> str:
    """Member names written with \\u escapes: the same object to any JSON parser."""
    return (
        "{"
        + ",".join(
            '"' + "".join(f"\\u{ord(c):04x}" for c in name) + '":' + json.dumps(value)
            for name, value in obj.items()
        )
        + "}"
    )


def duplicated(name: str, value: Any) -> Callable[[dict[str, Any]], str]:
    def text(obj: dict[str, Any]) -> str:
        return json.dumps(obj)[:-1] + f", {json.dumps(name)}: {json.dumps(value)}}}"

    return text


def raw(prefix: str = "", suffix: str = "", nan: bool = False) -> Callable[[dict[str, Any]], str]:
    def text(obj: dict[str, Any]) -> str:
        body = json.dumps(obj)
        if nan:
            body = body[:-1] + ', "n": NaN}'
        return prefix + body + suffix

    return text


@st.composite
def json_text(draw: st.DrawFn, names: list[str], values: Callable[[str], Any]) -> Any:
    """How a JSON object is written: styles that parse the same, and tricks that should not."""
    name = draw(st.sampled_from(names))
    return draw(
        st.sampled_from(
            [
                json.dumps,
                compact,
                spaced,
                unicode_keys,
                duplicated(name, draw(values(name))),
                raw(prefix="\ufeff"),
                raw(prefix="utf-16:"),
                raw(suffix=" \t\n"),
                raw(nan=True),
                lambda obj: json.dumps([obj]),
                lambda obj: json.dumps(obj)[:-1],
                lambda obj: "[" * 3000 + "]" * 3000,
            ]
        )
    )


SEGMENT_TRICKS = ["respell", "padding", "standard-alphabet", "whitespace", "drop-last"]
SIGNATURE_TRICKS = [*SEGMENT_TRICKS, "truncate", "extend", "flip", "empty"]
MUTATIONS = [
    *["claim"] * 4,
    *["header"] * 3,
    "extra claim",
    "header text",
    "payload text",
    "segment",
    "signer",
    "signature",
]


@st.composite
def recipes(draw: st.DrawFn, kids: list[str], now: int) -> Recipe:
    """A valid token, then zero to four mutations, each of any part of it."""
    kid = draw(st.sampled_from(kids))
    recipe = Recipe(
        header={"alg": ALGORITHMS[kids.index(kid)], "kid": kid, "typ": "JWT"},
        claims={
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "alice",
            "iat": now,
            "exp": now + 600,
            "roles": ["operator"],
        },
        header_json=json.dumps,
        payload_json=json.dumps,
        segment_tricks=[],
        signer="own",
        signature_trick="none",
    )
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        mutation = draw(st.sampled_from(MUTATIONS))
        if mutation in ("claim", "header"):
            members = recipe.claims if mutation == "claim" else recipe.header
            name = draw(st.sampled_from(CLAIM_NAMES if mutation == "claim" else HEADER_NAMES))
            if draw(st.integers(min_value=0, max_value=3)) == 0:
                members.pop(name, None)
            elif mutation == "claim":
                members[name] = draw(claim_value(name, now))
            else:
                members[name] = draw(header_value(name, kids))
        elif mutation == "extra claim":
            recipe.claims[draw(st.text(min_size=1, max_size=8))] = draw(JSON_VALUES)
        elif mutation == "header text":
            recipe.header_json = draw(json_text(HEADER_NAMES, lambda n: header_value(n, kids)))
        elif mutation == "payload text":
            recipe.payload_json = draw(json_text(CLAIM_NAMES, lambda n: claim_value(n, now)))
        elif mutation == "segment":
            segment = draw(st.integers(min_value=0, max_value=1))
            recipe.segment_tricks.append((segment, draw(st.sampled_from(SEGMENT_TRICKS))))
        elif mutation == "signer":
            recipe.signer = draw(st.sampled_from(["other", "outsider", "garbage"]))
        else:
            recipe.signature_trick = draw(st.sampled_from(SIGNATURE_TRICKS))
    return recipe


@given(data=st.data())
def test_every_token_ours_accepts_pyjwt_accepts(judges: Judges, data: st.DataObject) -> None:
    """Ours accepts a subset of what PyJWT accepts (and never fails other than by a Denial)."""
    now = int(time.time())
    recipe = data.draw(recipes([key.kid for key in judges.published], now))
    token = build(recipe, judges, now)
    theirs = judges.theirs(token)  # first: ours runs later, so its clock is never behind
    ours = judges.ours(token)
    event(f"ours {'accepts' if ours else 'refuses'}, PyJWT {'refuses' if theirs else 'accepts'}")
    note(f"token: {token}\nPyJWT: {theirs or 'accepts'}")
    assert theirs is None or not ours, f"ours accepts a token PyJWT refuses ({theirs})"


def test_the_unmutated_token_is_accepted_by_both(judges: Judges) -> None:
    """The control: the recipe with no mutation is a valid token for both verifiers (so the
    property above compares acceptances, not two refusals)."""
    now = int(time.time())
    for key in judges.published:
        recipe = Recipe(
            header={"alg": key.alg, "kid": key.kid, "typ": "JWT"},
            claims={"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 60},
            header_json=json.dumps,
            payload_json=json.dumps,
            segment_tricks=[],
            signer="own",
            signature_trick="none",
        )
        token = build(recipe, judges, now)
        assert judges.ours(token)
        assert judges.theirs(token) is None


# --- where ours is deliberately stricter (docs/authz.md#ours-against-pyjwt) --------------------


def _token(
    judges: Judges,
    *,
    header: dict[str, Any] | None = None,
    claims: dict[str, Any] | None = None,
    header_json: Callable[[dict[str, Any]], str] = json.dumps,
    payload_json: Callable[[dict[str, Any]], str] = json.dumps,
    key: int = 0,
    spelling: str = "none",
) -> str:
    """A token signed with published key `key`, every segment spelled by `spelling` (signed
    as spelled: the signature covers the text)."""
    signer = judges.published[key]
    now = int(time.time())
    head = {"alg": signer.alg, "kid": signer.kid, "typ": "JWT", **(header or {})}
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600}
    body.update(claims or {})
    segments = [_spell(_encode(text), spelling) for text in (header_json(head), payload_json(body))]
    signature = signer.sign(".".join(segments).encode())
    return ".".join([*segments, _spell(b64url_encode(signature), spelling)])


DIFFERENCES: dict[str, dict[str, Any]] = {
    "duplicate member in the payload": {"payload_json": duplicated("sub", "mallory")},
    "duplicate member in the header": {"header_json": duplicated("typ", "JWT")},
    "NaN in the payload": {"payload_json": raw(nan=True)},
    "payload in UTF-16": {"payload_json": raw(prefix="utf-16:")},
    "exp as a string": {"claims": {"exp": str(int(time.time()) + 600)}},
    "exp as a float": {"claims": {"exp": time.time() + 600.5}},
    "iat as a boolean": {"claims": {"iat": True}},
    "lifetime over the cap": {"claims": {"exp": int(time.time()) + MAX_LIFETIME + 3600}},
    "blank sub": {"claims": {"sub": "\u3000"}},
    "empty sub": {"claims": {"sub": ""}},
    "sub with a bidi override": {"claims": {"sub": "eci\u202elA"}},
    "typ JOSE": {"header": {"typ": "JOSE"}},
    "a jku header": {"header": {"jku": "https://attacker.example/jwks.json"}},
    "a jwk header": {"header": {"jwk": {"kty": "EC"}}},
    "crit naming b64": {"header": {"crit": ["b64"], "b64": True}},
    "b64 without crit": {"header": {"b64": 0}},
    "padded segments": {"spelling": "padding"},
    "a token over 8 KiB": {"claims": {"pad": "x" * 9000}},
}


@pytest.mark.parametrize("case", DIFFERENCES.values(), ids=DIFFERENCES.keys())
def test_where_ours_is_stricter_on_purpose(judges: Judges, case: dict[str, Any]) -> None:
    """Each listed difference holds: PyJWT accepts the token, ours refuses it."""
    token = _token(judges, **case)
    assert not judges.ours(token)
    assert judges.theirs(token) is None
