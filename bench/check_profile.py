"""Where a cached Check's microseconds go, in process, without the transport.

    .venv/bin/python bench/check_profile.py [--calls 10000] [--cprofile]

Builds the real service (`authz.server`'s wiring: key store, verifier, limiter, decider, metrics)
around a JWKS file, warms the token cache with one Check, then times each step of the cached
path on its own, as `AuthorizationService.Check` runs them, over `--calls` calls:

* parse: `CheckRequest.FromString` of the frame Envoy sends (grpc.aio does this before Check);
* view: `service.check_view` (the headers, surface label and path);
* decide: `Decider.decide_now` whole (a cached token and the in-process limiter: decided with no
  await), then its parts: the credential and route checks, the verified-token cache
  (`TokenVerifier.cached`), the remembered caller (`CallerMemo.caller`), the assertion
  (`Signer.sign`: the request's claims, HMAC-SHA256) and the limiter (`Limiter.take_now`);
* response: `responses.allowed_wire`, the serialised CheckResponse (Check answers with bytes,
  registered without a serialiser, so grpc.aio serialises nothing after Check);
* metrics: `Metrics.decision` (counter + histogram);
* log: the `decision` line (`DecisionLog.write`), written to a file as in production;
* Check: `AuthorizationService.Check` end to end (everything above except parse).

Reports µs per call (process CPU time). `--cprofile` also prints cProfile's top functions for
the end-to-end loop. Nothing is asserted; `bench/authz_bench.py` measures the same path with the
gRPC transport against a do-nothing server.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import authz_bench` as a script

from authz_bench import AUDIENCE, bench_env, grpc_frame, make_token, public_jwk
from cryptography.hazmat.primitives.asymmetric import ec
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest

from authz import credentials, responses
from authz.admission import Admission
from authz.checking import Checker
from authz.decision import Allow, Decider
from authz.decision_log import DecisionLog
from authz.jwks import KeyStore, source_for
from authz.limits import Limiter
from authz.metrics import Metrics
from authz.service import AuthorizationService, check_view
from authz.settings import AuthzSettings
from authz.surfaces import surface_of
from authz.tokens import TokenVerifier
from runtime import logs


class Parts:
    """The service and its parts, wired as `authz.server.serve` wires them."""

    def __init__(self, settings: AuthzSettings) -> None:
        self.metrics = Metrics()
        self.keys = KeyStore(settings.jwks, source_for(settings.jwks))
        self.limiter = Limiter(settings.limits)
        self.verifier = TokenVerifier(
            settings.tokens,
            self.keys,
            cache_size=settings.token_cache_size,
            on_cache=self.metrics.cache_lookup,
        )
        self.decider = Decider(
            settings.tokens,
            settings.roles,
            self.verifier,
            self.limiter,
            settings.assertion_keys,
            admission=Admission(settings.admission),
            memo_size=settings.token_cache_size,
        )
        self.service = AuthorizationService(Checker(self.decider, self.metrics))
        self.settings = settings


REPEATS = 5  # the fastest of these: the machine is shared, other load only adds time


def per_call(calls: int, body: Callable[..., object], *args: Any) -> float:
    """CPU µs per `body(*args)`, the fastest of `REPEATS` loops of `calls`."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.process_time()
        for _ in range(calls):
            body(*args)
        best = min(best, time.process_time() - started)
    return best / calls * 1e6


async def aper_call(calls: int, body: Callable[..., Awaitable[object]], *args: Any) -> float:
    """`per_call` for a coroutine function."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.process_time()
        for _ in range(calls):
            await body(*args)
        best = min(best, time.process_time() - started)
    return best / calls * 1e6


async def profile(calls: int, use_cprofile: bool) -> list[tuple[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="check-profile-"))
    key = ec.generate_private_key(ec.SECP256R1())
    (work / "jwks.json").write_text(json.dumps({"keys": [public_jwk("es", key, "ES256")]}))
    settings = AuthzSettings.from_env(bench_env(work / "jwks.json"))
    log_file = (work / "decisions.log").open("w")
    root = logging.getLogger()
    root.handlers[:] = [logs.JsonLinesHandler(log_file)]
    root.setLevel(logging.INFO)
    parts = Parts(settings)
    await parts.keys.start()
    frame = grpc_frame(make_token(key, "es", "ES256"))[5:]
    request = CheckRequest.FromString(frame)
    view = check_view(request)
    result = await parts.service.Check(request, None)  # warms the token cache and memos
    decided = await parts.decider.decide(view)
    assert isinstance(decided, Allow), decided
    token = credentials.bearer_token(view.headers)
    now = time.time()
    verified = parts.verifier.cached(token, AUDIENCE, now)
    assert verified is not None
    caller = decided.caller
    decision_log = DecisionLog(logging.getLogger("authz.decision"))

    def credential_checks() -> None:
        credentials.check_query(view.path)
        surface_of(view.surface, view.path)
        headers = view.headers
        credentials.request_id(headers)
        credentials.check_reserved(headers)
        credentials.bearer_token(headers)

    callers = parts.decider._callers
    rows: list[tuple[str, float]] = [
        (
            "parse CheckRequest (grpc.aio, before Check)",
            per_call(calls, CheckRequest.FromString, frame),
        ),
        ("check_view", per_call(calls, check_view, request)),
        ("decide (whole, no await)", per_call(calls, parts.decider.decide_now, view)),
        ("  credential and route checks", per_call(calls, credential_checks)),
        ("  verify (cached token)", per_call(calls, parts.verifier.cached, token, AUDIENCE, now)),
        ("  caller (remembered)", per_call(calls, callers.caller, token, verified, "a2a")),
        (
            "  assertion (request claims + HMAC-SHA256)",
            per_call(calls, caller.signer.sign, decided.request_id, int(now)),
        ),
        ("  limiter (in process)", per_call(calls, parts.limiter.take_now, caller.limit_key)),
        (
            "response bytes (responses.allowed_wire)",
            per_call(calls, responses.allowed_wire, decided.assertion, decided.trace_link),
        ),
        ("metrics.decision", per_call(calls, parts.metrics.decision, "allow", "ok", 0.0001)),
        (
            "decision log line (one os.write)",
            per_call(calls, decision_log.write, decided, view.path, 0.123),
        ),
    ]
    profiler = cProfile.Profile() if use_cprofile else None
    if profiler is not None:
        profiler.enable()
    end_to_end = await aper_call(calls, parts.service.Check, request, None)
    rows.append(("Check end to end (no transport)", end_to_end))
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    del result
    await parts.keys.close()
    await parts.limiter.close()
    log_file.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args()
    rows = asyncio.run(profile(args.calls, args.cprofile))
    print(f"{'step of a cached Check':<50}{'CPU us/call':>12}")
    for name, us in rows:
        print(f"{name:<50}{us:>12.1f}")


if __name__ == "__main__":
    main()
