"""`runtime.lifecycle`: a child dies with its parent, however the parent ends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.processes import process_gone, wait_gone

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only"
    ),
    pytest.mark.slow,  # starts parents and children as processes
]

SLEEPER = "import time; time.sleep(600)"
# The parent in the middle: starts a child one of two ways, prints its pid, and waits to be killed.
PARENT = """
import os, subprocess, sys, time
from runtime.lifecycle import dying_with_this_process

how = sys.argv[1]
if how == "hook":
    hook = dying_with_this_process()
    child = subprocess.Popen([sys.executable, "-c", {sleeper!r}], preexec_fn=hook)
else:
    child = subprocess.Popen(
        [sys.executable, "-c", {arming!r}, str(os.getpid())], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline() == "armed\\n"
print(child.pid, flush=True)
time.sleep(600)
"""
ARMING = """
import sys, time
from runtime.lifecycle import die_with_parent

die_with_parent(int(sys.argv[1]))
print("armed", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", ["hook", "call"])
def test_a_child_dies_when_its_parent_is_killed_outright(how: str) -> None:
    """SIGKILL runs nothing in the parent; the kernel still stops the child (set up by a
    pre-exec hook, or by the child itself)."""
    script = PARENT.format(sleeper=SLEEPER, arming=ARMING)
    with subprocess.Popen(
        [sys.executable, "-c", script, how], stdout=subprocess.PIPE, text=True
    ) as parent:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not process_gone(child)
        parent.kill()
        parent.wait()
    assert wait_gone({child}) == set()


def test_a_child_whose_parent_died_before_it_asked_exits_at_once() -> None:
    """Re-parented before the request took effect, no signal would ever come: it exits 1."""
    with subprocess.Popen([sys.executable, "-c", "pass"]) as gone:
        pass
    assert gone.returncode == 0
    child = subprocess.run(
        [sys.executable, "-c", ARMING, str(gone.pid)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (child.returncode, child.stdout) == (1, "")
