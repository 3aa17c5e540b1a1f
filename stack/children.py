"""How the stack starts its own Python components: `python -P -m NAME`.

`-P` keeps the working directory off `sys.path`. Without it `orrery-a2a up` run from inside
another checkout (or any folder with an `authz/` or `adapter/` in it) would quietly start that
folder's code instead of the installed package's, with this stack's keys.
"""

from __future__ import annotations

import sys


def python_module(name: str) -> list[str]:
    """The argv that runs `python -m name` from the installed package, whatever the cwd."""
    return [sys.executable, "-P", "-m", name]
