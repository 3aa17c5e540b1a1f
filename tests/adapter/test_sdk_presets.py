"""`python -m adapter` leaves the a2a-sdk's SQL task stores unloaded, SQLAlchemy or not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

# Runs in a fresh interpreter: what the SDK loads is settled at its first import.
PROBE = """
import importlib.util
import json
import sys

import adapter.__main__
import adapter.serving
from a2a.server import tasks

loaded = sorted(name for name, module in sys.modules.items() if module is not None)
print(json.dumps({
    "installed": importlib.util.find_spec("sqlalchemy") is not None,
    "sql": [name for name in loaded if name.split(".")[0] == "sqlalchemy" or ".database_" in name],
    "store": tasks.DatabaseTaskStore.__module__,
}))
"""


def test_the_process_loads_neither_sqlalchemy_nor_the_sdks_sql_stores() -> None:
    """With SQLAlchemy installed (the `adk` extra), the adapter imports neither it nor a store."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout
    found = json.loads(out)
    assert found["installed"]  # the premise: without SQLAlchemy the SDK skips them on its own
    assert found["sql"] == []
    assert found["store"] == "a2a.server.tasks"  # the SDK's placeholder, not its SQL store
