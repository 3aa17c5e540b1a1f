"""One version: every entry point prints the installed distribution's, from its metadata."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from runtime.version import DISTRIBUTION, version

pytestmark = pytest.mark.slow  # starts every command as a process


@pytest.mark.parametrize(
    ("module", "prog"),
    [
        ("authz", "python -m authz"),
        ("adapter", "python -m adapter"),
        ("stack.cli", "orrery-a2a"),
    ],
)
def test_every_command_prints_the_package_version(module: str, prog: str) -> None:
    """`--version` answers with the package metadata's version, exit 0, reading no settings."""
    result = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (0, f"{prog} {version()}\n")


def test_the_version_is_the_distributions() -> None:
    """Not a second copy of the number: what pyproject.toml installed."""
    assert version() == metadata.version(DISTRIBUTION)
