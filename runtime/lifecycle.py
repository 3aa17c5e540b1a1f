"""Children die with their parent, even when the parent is killed outright.

A process that outlives its parent keeps whatever it holds. For an authz worker that is the gRPC
port, shared with SO_REUSEPORT: a new authz started on that port would silently split its
traffic with a stale worker serving old keys and settings. A parent stops its children when it
stops cleanly, but nothing of it runs when it is killed outright (SIGKILL, the OOM killer). So
each child asks the kernel to signal it when its parent dies (Linux `PR_SET_PDEATHSIG`), then
checks that the parent is still there: had it died before the request took effect, no signal
would ever come, so the child exits at once instead.

Three rules of the kernel shape how this is used:
* the signal follows the *thread* that started the child, not the process: start children from
  a thread that lives as long as the parent does (the main thread, or the event loop's);
* it survives `exec` (except of a set-uid program), so a hook run between fork and exec covers
  programs we do not write, such as Envoy;
* a child's own children do not inherit it: each generation asks for itself.
Elsewhere than Linux there is no such signal, and these helpers do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# Loaded once, at import: the fork-to-exec hook below must not load a library (dlopen takes locks
# another thread of the parent may have held at fork time).
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(parent_pid: int, signum: signal.Signals = signal.SIGTERM) -> None:
    """Have the kernel send `signum` to this process when its parent dies; if the parent
    (`parent_pid`, as the parent itself saw it) has already gone, exit with status 1 at once.

    Only system calls: safe between fork and exec (see `dying_with_this_process`)."""
    if _LIBC is None:
        return
    if _LIBC.prctl(_PR_SET_PDEATHSIG, int(signum)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
    if os.getppid() != parent_pid:  # re-parented already: the signal will never come
        os._exit(1)


def dying_with_this_process(
    signum: signal.Signals = signal.SIGTERM,
) -> Callable[[], None] | None:
    """A `preexec_fn` for `subprocess` and `asyncio.create_subprocess_exec`: the child gets
    `signum` when the thread starting it ends, which for the main thread or an event loop's is
    when this process dies (None off Linux, where there is no such hook)."""
    if _LIBC is None:
        return None
    return functools.partial(die_with_parent, os.getpid(), signum)
