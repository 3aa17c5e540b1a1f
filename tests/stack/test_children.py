"""The stack's Python components run from the installed package, whatever the working directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stack.children import python_module

pytestmark = pytest.mark.slow  # starts child processes


def test_a_folder_named_like_a_component_in_the_cwd_is_not_run(tmp_path: Path) -> None:
    """`up` started inside another checkout runs our authz, not the checkout's `authz/`."""
    shadow = tmp_path / "authz"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text("print('the shadow authz ran')\n")
    ran = subprocess.run(
        [*python_module("authz"), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert "shadow" not in ran.stdout
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("python -m authz ")
