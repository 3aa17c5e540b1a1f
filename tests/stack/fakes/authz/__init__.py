"""Fake `authz` package: its `__main__` here, every other module from the real package."""

from pathlib import Path

__path__.append(str(Path(__file__).resolve().parents[4] / "authz"))  # type: ignore[name-defined]
