"""pyproject.toml's requirements and the image's lock files (requirements/*.txt), parsed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from tests.docker.engine import REPO

PYPROJECT: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text())


def normalised(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name → (version, sha256 hashes) from a `--generate-hashes` lock file."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text()):
        head = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", block)
        if head:
            hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
            entries[normalised(head[1])] = (head[2], hashes)
    return entries
