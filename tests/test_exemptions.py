"""Every lint and type-check exemption says why, so a reader can judge it and a reviewer can see
when its reason no longer holds: a `# noqa` or `# type: ignore` carries its reason on the same
line or in a comment just above, and each ignored code in pyproject.toml's ruff settings has a
comment beside it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The marker and its codes: noqa with a list of rule codes, or type-ignore with error codes.
MARKER = re.compile(
    r"#\s*(?:noqa(?::\s*[A-Z]+\d+(?:\s*,\s*[A-Z]+\d+)*)?"
    r"|type:\s*ignore(?:\[[a-z-]+(?:\s*,\s*[a-z-]+)*\])?)"
)
# What may stand between the codes and the reason: a parenthesis, a dash, a colon, a second hash.
SEPARATORS = " \t-—:#()"


def _python_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def unexplained(lines: list[str]) -> list[int]:
    """The (1-based) lines whose exemption has no reason beside it or in a comment above."""
    found = []
    for number, line in enumerate(lines, 1):
        for marker in MARKER.finditer(line):
            reason = line[marker.end() :].strip(SEPARATORS)
            above = lines[number - 2].strip() if number > 1 else ""
            if not reason and not above.startswith("#"):
                found.append(number)
    return found


def test_the_scanner_tells_a_reason_from_none() -> None:
    """A bare marker is found; one with a reason beside it or a comment above is not."""
    lines = [
        "x = f()  # type: ignore[no-any-return]",
        "y = g()  # type: ignore[arg-type]  # the SDK's stub is narrower than its code",
        'z = "0.0.0.0"  # noqa: S104 (what compose binds)',
        "# the SDK's stub is narrower than its code",
        "w = h()  # type: ignore[arg-type]",
        "v = k()  # noqa",
    ]
    assert unexplained(lines) == [1, 6]


def test_every_noqa_and_type_ignore_says_why() -> None:
    """No `# noqa` or `# type: ignore` in the repo's Python without its reason."""
    bare = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _python_files()
        for number in unexplained(path.read_text(encoding="utf-8").splitlines())
    ]
    assert bare == []


def test_every_ignored_ruff_code_in_pyproject_says_why() -> None:
    """Each code in [tool.ruff.lint] ignore and per-file-ignores has a comment on its line."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    start = text.index("[tool.ruff.lint]")
    end = text.find("\n[", text.index("[tool.ruff.lint.per-file-ignores]") + 1)
    section = text[start : end if end != -1 else len(text)]
    code = re.compile(r'"[A-Z]+\d*"')
    bare = [
        line.strip()
        for line in section.splitlines()
        if code.search(line.split("#", 1)[0]) and "#" not in line and "select" not in line
    ]
    assert bare == []
