"""The one version of the edge: the installed distribution's, read from its package metadata.

`orrery-a2a --version`, `python -m authz --version`, `python -m adapter --version` and the agent
card's `version` all print this, so there is no second copy of the number to forget when
pyproject.toml changes.
"""

from __future__ import annotations

import functools
from importlib import metadata

DISTRIBUTION = "orrery-a2a-edge"


@functools.cache
def version() -> str:
    """The installed version, or `0+unknown` when the code runs from a tree that was never
    installed (a PEP 440 local version that sorts below every release)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"
