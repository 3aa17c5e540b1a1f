"""The user's ADK agent: found by `module:attribute`, and described as the edge's specialists.

The extended agent card lists one skill per specialist, built live from the gateway's inventory
(so it cannot drift, D1 in docs/decisions.md). For an ADK agent tree the specialists are the root
agent's sub-agents (name and description, as the root's own model sees them when it transfers);
an agent without sub-agents is its own one specialist.
"""

from __future__ import annotations

import importlib

from google.adk.agents import BaseAgent

from adapter.gateway import Specialist
from gateways.adk.settings import AGENT_VARIABLE


class AgentLoadError(Exception):
    """`ORRERY_A2A_ADK_AGENT` names nothing importable, or not an ADK agent."""


def load_agent(spec: str) -> BaseAgent:
    """Import `module:attribute` and check it is an ADK `BaseAgent`."""
    module_name, _, attribute = spec.partition(":")
    try:
        agent = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise AgentLoadError(f"{AGENT_VARIABLE}: cannot load {spec!r}: {exc}") from None
    if not isinstance(agent, BaseAgent):
        raise AgentLoadError(
            f"{AGENT_VARIABLE}: {spec!r} is a {type(agent).__name__}, not an ADK agent (BaseAgent)"
        )
    return agent


def specialists(agent: BaseAgent) -> tuple[Specialist, ...]:
    """One specialist per sub-agent of the root, or the root itself when it has none."""
    return tuple(_specialist(member) for member in agent.sub_agents or [agent])


def _specialist(agent: BaseAgent) -> Specialist:
    description = agent.description or f"The {agent.name} agent."
    return Specialist(name=agent.name, description=description, routing_hint=description)
