"""Orrery A2A edge: process plumbing shared by authz, the adapter and the local stack.

Reading and validating the environment (`runtime.env`, one `ConfigError` naming every bad
variable), socket addresses (`runtime.addresses`), JSON log events (`runtime.logs`), the
`serving` start-up event every process logs and the supervisor waits for (`runtime.serving`),
and how the processes we start end: never after the process that started them
(`runtime.lifecycle`). Nothing here knows about tokens, principals or A2A, and it imports
nothing of ours.
"""
