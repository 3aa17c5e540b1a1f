"""`python -m authz explain [TOKEN]`: what authz would decide for a token, per surface, and why.

The first question an operator asks about a refused caller is "what does authz make of this
token?". This answers it offline — no Envoy, no running authz — with the configured JWKS (a file
is read, a URL fetched once) and authz's own transport-free decision (`authz.decision.Decider`),
so the answer cannot drift from what authz does: for `a2a` and `approvals`, allow or the exact
denial (status, reason code, description) and, once derived, the principal (kind, subject,
client, agent, key), role and autonomy. The rate limit is the one check left out: explain spends
no one's budget (it decides against a fresh in-process limiter, never Redis).

The token comes from stdin or `ORRERY_A2A_TOKEN` (`-` or nothing), or, if the operator insists,
the command line (visible in `ps`). It is never printed; what the token claims about itself
(header and claims, unverified) is shown beside the decision, because "expired an hour ago" or
"audience orrery-console" is usually the answer. Assertion keys are not needed: a throwaway one
signs the assertion that is never sent.

Exit codes: 0 allowed on at least one surface, 1 denied on both, 2 bad usage or configuration.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO, get_args

from authz.admission import Admission
from authz.decision import Allow, CheckView, Decider
from authz.jwks import KeyStore, source_for
from authz.limits import Limiter
from authz.settings import AuthzSettings
from authz.tokens import TokenVerifier
from contract.assertion import new_keys_spec
from contract.identity import Principal, Surface
from contract.jose import json_object_segment

TOKEN_VARIABLE = "ORRERY_A2A_TOKEN"  # noqa: S105 - the variable's name, not a secret
SURFACES: tuple[Surface, ...] = get_args(Surface)
# A route of each surface, as Envoy would send its path (the decision reads the query from it).
EXPLAINED_PATHS: Mapping[Surface, str] = {"a2a": "/a2a", "approvals": "/approvals/explain"}
ALLOWED_ON_SOME = 0
DENIED_EVERYWHERE = 1
# What the token says about itself, shown unverified (never the signature, never the token).
SHOWN_HEADER = ("alg", "kid", "typ")
SHOWN_CLAIMS = ("iss", "aud", "sub", "client_id", "azp", "act", "roles", "scope", "iat", "exp")


class NoToken(Exception):
    """No token was given where explain looks for one."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The decision on one surface, as authz would make it."""

    surface: str
    decision: str
    status: int
    reason: str
    description: str
    principal: Principal | None

    def as_dict(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        if self.principal is not None:
            body["principal"] = {**body["principal"], "key": self.principal.key}
        return body


def read_token(argument: str | None, env: Mapping[str, str], stdin: TextIO) -> str:
    """TOKEN, `-` (stdin), ORRERY_A2A_TOKEN, or stdin when it is not a terminal."""
    if argument and argument != "-":
        return argument.strip()
    if argument is None and env.get(TOKEN_VARIABLE, "").strip():
        return env[TOKEN_VARIABLE].strip()
    if argument is None and stdin.isatty():
        raise NoToken(f"give the token on stdin (or `-`), or in {TOKEN_VARIABLE}")
    token = stdin.read().strip()
    if not token or len(token.split()) != 1:
        raise NoToken("stdin does not hold one token")
    return token


def self_description(token: str) -> dict[str, Any]:
    """The token's own header and claims that explain a decision — unverified, as it says."""
    segments = token.split(".")
    header = json_object_segment(segments[0]) if segments else None
    claims = json_object_segment(segments[1]) if len(segments) == 3 else None
    said: dict[str, Any] = {}
    for source, names in ((header, SHOWN_HEADER), (claims, SHOWN_CLAIMS)):
        for name in names:
            if source is not None and name in source:
                said[name] = source[name]
    return said


async def explain(settings: AuthzSettings, token: str) -> list[Verdict]:
    """Decide `token` on every surface with authz's decider (keys loaded once, a fresh limiter)."""
    keys = KeyStore(settings.jwks, source_for(settings.jwks))
    await keys.refresh()
    limits = dataclasses.replace(settings.limits, redis_url=None)
    decider = Decider(
        settings.tokens,
        settings.roles,
        TokenVerifier(settings.tokens, keys, cache_size=0),
        Limiter(limits),
        settings.assertion_keys,
        admission=Admission(settings.admission),
        memo_size=len(SURFACES),
    )
    verdicts = []
    try:
        for surface in SURFACES:
            view = CheckView(
                headers={"authorization": f"Bearer {token}", "x-request-id": f"explain-{surface}"},
                surface=surface,
                path=EXPLAINED_PATHS[surface],
            )
            result = await decider.decide(view)
            if isinstance(result, Allow):
                verdicts.append(Verdict(surface, "allow", 200, "ok", "", result.principal))
            else:
                denial = result.denial
                verdicts.append(
                    Verdict(
                        surface,
                        "deny",
                        denial.status,
                        denial.reason,
                        denial.description,
                        result.principal,
                    )
                )
    finally:
        await keys.close()
    return verdicts


def settings_for_explain(env: Mapping[str, str]) -> AuthzSettings:
    """authz's settings from `env`; assertion keys only if given (explain sends no assertion)."""
    if not env.get("ORRERY_A2A_ASSERTION_KEYS", "").strip():
        env = {**env, "ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("explain")}
    return AuthzSettings.from_env(env)


def _when(value: object, now: float) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return repr(value)
    stamp = datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    minutes = round((value - now) / 60)
    ago = f"in {minutes} min" if minutes >= 0 else f"{-minutes} min ago"
    return f"{stamp} ({ago})"


def render(
    verdicts: Sequence[Verdict], said: Mapping[str, Any], settings: AuthzSettings, now: float
) -> list[str]:
    """The human-readable answer: what the token says, then one block per surface."""
    shown = {
        name: _when(value, now) if name in ("iat", "exp") else json.dumps(value)
        for name, value in said.items()
    }
    lines = [
        "the token says (unverified): "
        + (", ".join(f"{k} {v}" for k, v in shown.items()) or "nothing readable")
    ]
    audiences = {"a2a": settings.tokens.audience, "approvals": settings.tokens.console_audience}
    for verdict in verdicts:
        head = f"{verdict.surface + ':':<10} {verdict.decision} {verdict.status} {verdict.reason}"
        lines.append(head + (f" — {verdict.description}" if verdict.description else ""))
        expected = f"issuer {settings.tokens.issuer}, audience {audiences[verdict.surface]}"
        lines.append(f"{'':<11}expects {expected}")
        who = verdict.principal
        if who is not None:
            acting = f", agent {who.agent}" if who.agent else ""
            lines.append(
                f"{'':<11}principal {who.kind} {who.subject} (client {who.client}{acting}),"
                f" role {who.role}, autonomy {who.autonomy}"
            )
            lines.append(f"{'':<11}key {who.key}")
    lines.append("rate limit: not checked (explain spends no one's budget)")
    return lines


def run(args: Any, env: Mapping[str, str], stdin: TextIO, out: TextIO) -> int:
    """The body of `python -m authz explain` (after the settings were read)."""
    import asyncio

    settings = settings_for_explain(env)
    token = read_token(args.token, env, stdin)
    verdicts = asyncio.run(explain(settings, token))
    if args.json:
        body = {
            "token": self_description(token),
            "surfaces": [verdict.as_dict() for verdict in verdicts],
        }
        out.write(json.dumps(body) + "\n")
    else:
        out.write("\n".join(render(verdicts, self_description(token), settings, time.time())))
        out.write("\n")
    allowed = any(verdict.decision == "allow" for verdict in verdicts)
    return ALLOWED_ON_SOME if allowed else DENIED_EVERYWHERE


def write_error(message: str, err: TextIO = sys.stderr) -> None:
    err.write(f"python -m authz explain: {message}\n")
