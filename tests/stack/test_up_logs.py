"""`orrery-a2a up`'s run logs: one directory per run, a failure's excerpt from its own run only,
the oldest pruned."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.stack.conftest import LocalStackRun

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


def test_each_run_logs_apart_and_a_failure_shows_only_its_own_run(state_dir: Path) -> None:
    """Two runs, two log directories (`logs/latest` is the newest); the second run's adapter
    fails at start (its database refuses connections) and the excerpt `up` prints holds only
    lines of that run, none of the first run's adapter."""
    first = LocalStackRun.start(state_dir)
    assert first.wait_for("is up at")
    (_, first_adapter) = first.components["adapter"]
    assert first.stop() == 0
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        database = f"postgresql://orrery@127.0.0.1:{closed.getsockname()[1]}/none"
        second = LocalStackRun.start(state_dir, {"DATABASE_URL": database})
        assert second.finish() == 1
    text = "\n".join(second.lines)
    assert "  adapter  FAILED  exited with code 1 before it was ready" in text
    excerpt = [line for line in second.lines if line.startswith("           | ")]
    assert any('"event":"startup_failed"' in line for line in excerpt), text
    assert not [line for line in excerpt if f'"pid":{first_adapter}' in line]
    runs = sorted(path.name for path in (state_dir / "logs").iterdir() if path.name != "latest")
    assert len(runs) == 2
    assert (state_dir / "logs" / "latest").resolve().name == runs[-1]
    assert f"full log: {state_dir / 'logs' / runs[-1] / 'adapter.log'}" in text


def test_old_runs_logs_are_pruned_to_the_newest_ten(tmp_path: Path) -> None:
    """`up` keeps the last ten run directories; anything else in logs/ is never touched."""
    from stack.up import keep_recent_runs

    logs = tmp_path / "logs"
    for day in range(1, 13):
        (logs / f"202612{day:02d}T000000Z-1").mkdir(parents=True)
    (logs / "notes.txt").write_text("mine")
    keep_recent_runs(logs, 10)
    kept = sorted(path.name for path in logs.iterdir())
    assert kept == [*(f"202612{day:02d}T000000Z-1" for day in range(3, 13)), "notes.txt"]
