"""authz's memory under many callers (P5): RSS as distinct tokens and subjects pile up.

    .venv/bin/python bench/memory_bench.py [--tokens 200000] [--subjects 1000000]

Prints one JSON object: RSS (VmRSS, MiB) samples. (The adapter's stores: `adapter_memory.py`.)

The real decider (`check_profile.Parts`, default bounds: 10 000 verified tokens and
  principals, 100 000 rate-limit subjects) is fed `--tokens` distinct EdDSA tokens, each for its
  own subject, through `Decider.decide` — full verification, principal, signing, limiter — then
  `--subjects` more distinct subjects straight into the limiter (a token per subject would
  spend minutes on signatures for no other effect). RSS is sampled ten times along each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def authz_memory(tokens: int, subjects: int) -> dict[str, Any]:
    import jwt
    from authz_bench import AUDIENCE, ISSUER, bench_env, public_jwk
    from check_profile import Parts
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from authz.decision import Allow, CheckView
    from authz.settings import AuthzSettings

    work = Path(tempfile.mkdtemp(prefix="memory-bench-"))
    key = ed25519.Ed25519PrivateKey.generate()
    (work / "jwks.json").write_text(json.dumps({"keys": [public_jwk("ed", key, "EdDSA")]}))
    settings = AuthzSettings.from_env(bench_env(work / "jwks.json"))
    parts = Parts(settings)
    await parts.keys.start()
    now = int(time.time())
    samples: list[tuple[int, float]] = [(0, rss_mib())]
    step = max(1, tokens // 10)
    for number in range(1, tokens + 1):
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": f"subject-{number}",
            "client_id": f"client-{number}",
            "iat": now,
            "exp": now + 3600,
            "roles": ["operator"],
        }
        token = jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": "ed"})
        view = CheckView(
            headers={"authorization": f"Bearer {token}", "x-request-id": uuid.uuid4().hex},
            surface="a2a",
            path="/a2a",
        )
        result = await parts.decider.decide(view)
        if not isinstance(result, Allow):
            raise SystemExit(f"token {number} was refused: {result}")
        if number % step == 0:
            samples.append((number, rss_mib()))
    limiter_samples: list[tuple[int, float]] = [(0, rss_mib())]
    step = max(1, subjects // 10)
    for number in range(1, subjects + 1):
        await parts.limiter.check(f"a2a:service:extra-subject-{number}")
        if number % step == 0:
            limiter_samples.append((number, rss_mib()))
    await parts.keys.close()
    await parts.limiter.close()
    return {
        "tokens": samples,
        "subjects": limiter_samples,
        "cached_tokens": len(parts.verifier),
        "limiter_subjects": len(parts.limiter._local),
        "token_cache_size": settings.token_cache_size,
        "max_subjects": settings.limits.max_subjects,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=200_000)
    parser.add_argument("--subjects", type=int, default=1_000_000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(authz_memory(args.tokens, args.subjects))))


if __name__ == "__main__":
    main()
