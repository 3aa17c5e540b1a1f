"""Put an ADK agent behind the edge: `ORRERY_A2A_GATEWAY=gateways.adk:create`.

`ORRERY_A2A_ADK_AGENT=module:attribute` names the agent (an ADK `BaseAgent`, e.g. your
`root_agent`). The gateway (`gateway.py`) runs each turn through ADK's `Runner`, turns ADK's tool
confirmation into the edge's out-of-band approval, and answers only the final reply text.

This module imports no ADK at import time: the adapter imports the factory by name, and without
the `adk` extra (`pip install 'orrery-a2a-edge[adk]'`) `create` and `check` say so plainly instead
of failing on an import deep inside.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from adapter.gateway import GatewayContext
from gateways.adk.settings import AdkSettings
from runtime.errors import ConfigError

if TYPE_CHECKING:
    from gateways.adk.gateway import AdkGateway

MISSING_EXTRA = (
    "ORRERY_A2A_GATEWAY: gateways.adk needs the `adk` extra, which is not installed:"
    " pip install 'orrery-a2a-edge[adk]'"
)
# What the extra brings that the gateway imports (the database service only with DATABASE_URL).
_EXTRA_MODULES = ("google.adk", "sqlalchemy")


def _extra_installed() -> bool:
    try:
        return all(importlib.util.find_spec(name) is not None for name in _EXTRA_MODULES)
    except ModuleNotFoundError:  # `google` itself missing
        return False


def check(env: Mapping[str, str]) -> list[str]:
    """Every problem `create` would meet, without opening a connection: the extra, the settings,
    and the agent path (imported, as the gateway would)."""
    if not _extra_installed():
        return [MISSING_EXTRA]
    try:
        settings = AdkSettings.from_env(env)
    except ConfigError as exc:
        return exc.problems
    from gateways.adk.inventory import AgentLoadError, load_agent

    try:
        load_agent(settings.agent)
    except AgentLoadError as exc:
        return [str(exc)]
    return []


async def create(context: GatewayContext) -> AdkGateway:
    """The `ORRERY_A2A_GATEWAY` factory; `ConfigError` (exit 2) for what `check` reports."""
    if not _extra_installed():
        raise ConfigError([MISSING_EXTRA])
    settings = AdkSettings.from_env(os.environ)
    from gateways.adk.gateway import AdkGateway
    from gateways.adk.inventory import AgentLoadError, load_agent
    from gateways.adk.sessions import open_session_service

    try:
        agent = load_agent(settings.agent)
    except AgentLoadError as exc:
        raise ConfigError([str(exc)]) from None
    sessions = await open_session_service(settings)
    return AdkGateway(agent, sessions, context.confirmations, context.approval_ttl)
