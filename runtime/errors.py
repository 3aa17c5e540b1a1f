"""The error of `runtime`: configuration a process must refuse to start with."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad configuration: one message naming every bad variable, raised before serving."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))
        self.problems = problems
