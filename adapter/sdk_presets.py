"""What `python -m adapter` settles before the a2a-sdk is first imported: the SDK reads both
when its modules load, so this module is imported first and does its work on import.

* **Tracing off unless asked.** The SDK wraps every handler, store and queue call in
  OpenTelemetry spans, decided when `a2a.utils.telemetry` is first imported. This process
  installs no tracer, so those no-op spans are pure cost (about 30% of SendMessage throughput,
  measured with bench/adapter_bench.py). Off unless the operator sets the SDK's own switch
  explicitly; off, the wrappers still run (with no-op spans) until `sdk_tracing.unwrap()` in
  `main` removes them.
* **No SQL task stores.** The SDK imports its SQL task stores, and SQLAlchemy with them, whenever
  SQLAlchemy is installed (the `adk` extra brings it, for ADK's own session store). The adapter
  keeps tasks in its own stores (adapter/stores) and never uses the SDK's. Without SQLAlchemy the
  SDK puts placeholders in their place; a None in `sys.modules` makes it do so here too (importing
  such a module raises ImportError, which the SDK catches). They were 30% of this process's
  imports: 0.4 s of CPU at every start (docs/testing.md).
"""

from __future__ import annotations

import os
import sys

SDK_SQL_STORES = (
    "a2a.server.tasks.database_task_store",
    "a2a.server.tasks.database_push_notification_config_store",
    "a2a.server.cluster.database_task_store",
    "a2a.server.cluster.database_event_stream",
)

os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")
for _module in SDK_SQL_STORES:
    # None is the import system's own "cannot be imported" mark, which typeshed's type leaves out.
    sys.modules.setdefault(_module, None)  # type: ignore[arg-type]
