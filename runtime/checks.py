"""How a component reports a check of its configuration, and how `orrery-a2a check` reads it.

`python -m authz check` and `python -m adapter check` build their settings from the environment
exactly as a start would, plus what only a start would otherwise reveal (a JWKS file that does
not parse, a gateway that does not import), and report every problem at once without binding a
port or calling anything. `orrery-a2a check` runs both with the environment `up` would give them
(the stack may not import the services: tests/test_layering.py), so the report crosses a process
boundary: one JSON object on stdout with `--json`, written by `report` and read by `read_report`.
Exit 0 when there is no problem, 2 otherwise, like a start with bad configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

OK = 0
PROBLEMS = 2


def add_check_command(commands: Any, *, untouched: str) -> None:
    """The `check [--json]` subcommand, as every component has it (`commands` is the parser's
    `add_subparsers()`); `untouched` says what the check leaves alone."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "check",
        help="check the environment as a start would (every problem at once; exit 0 or 2),"
        f" without {untouched}",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")


def report(
    component: str, problems: Sequence[str], *, as_json: bool, out: TextIO = sys.stdout
) -> int:
    """Print the result (one line per problem, or `{"component", "problems"}`); the exit code."""
    if as_json:
        out.write(json.dumps({"component": component, "problems": list(problems)}) + "\n")
    elif problems:
        out.write(f"{component}: {len(problems)} problem(s)\n")
        out.writelines(f"  {problem}\n" for problem in problems)
    else:
        out.write(f"{component}: configuration ok\n")
    return PROBLEMS if problems else OK


def read_report(output: str) -> list[str] | None:
    """The problems in a `report(..., as_json=True)` output, or None if it holds none."""
    for line in reversed(output.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("problems"), list):
            return [str(problem) for problem in record["problems"]]
    return None
