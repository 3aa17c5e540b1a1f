"""An example ADK agent behind the edge (`ORRERY_A2A_ADK_AGENT=gateways.adk.example:root_agent`).

A coordinator (`orrery_example`) with two sub-agents, which become the extended card's skills:

* `investigator` reads a small built-in table of service health (`get_service_health`, read-only;
  it also says how often this process restarted the service);
* `change_planner` restarts a service (`restart_service`), a `FunctionTool` with
  `require_confirmation=True`: ADK holds the call until it is confirmed, and behind the edge only
  the delegating person's approval confirms it.

The model is `ORRERY_ADK_EXAMPLE_MODEL` when set (e.g. `gemini-2.5-flash`, with `GOOGLE_API_KEY`
in the environment: ADK's own Gemini client), else `ScriptedModel`: a deterministic stand-in that
needs no network and no weights, so the example, the tests and the benchmark run anywhere. It
reads the request as a model would (the latest user text, the tools it is offered, the tool
results it is given) and answers with ADK's own types, function calls included, so ADK's real
`Runner`, transfers, tools and confirmation flow all run.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

MODEL_VARIABLE = "ORRERY_ADK_EXAMPLE_MODEL"

HEALTH: Mapping[str, tuple[str, str]] = {
    "checkout": ("degraded", "error rate up since the 14:05 deploy"),
    "payments": ("healthy", "steady"),
    "search": ("healthy", "steady"),
    "inventory": ("down", "crash-looping on start"),
}
# Restarts this process carried out, per service: what "the tool ran exactly once" is read from.
RESTARTS: Counter[str] = Counter()


def get_service_health(service: str) -> dict[str, Any]:
    """Read a service's health: its status, a note, and how often it was restarted here."""
    if service not in HEALTH:
        return {"error": f"unknown service {service!r}; known: {', '.join(sorted(HEALTH))}"}
    status, note = HEALTH[service]
    return {"service": service, "status": status, "note": note, "restarts": RESTARTS[service]}


def restart_service(service: str) -> dict[str, Any]:
    """Restart a service. Guarded: runs only once the delegating person approved it."""
    if service not in HEALTH:
        return {"error": f"unknown service {service!r}"}
    RESTARTS[service] += 1
    return {"service": service, "restarted": True, "restarts": RESTARTS[service]}


_SERVICE = re.compile(r"\b(" + "|".join(HEALTH) + r")\b", re.IGNORECASE)
_RESTART = re.compile(r"\brestart\b", re.IGNORECASE)
# Who owns which tool: where the coordinator (or a sub-agent without the tool) transfers.
_OWNER = {"restart_service": "change_planner", "get_service_health": "investigator"}
_QUOTED = ("For context:", "[")  # how ADK shows another agent's steps to the next one


def _respond(part: types.Part) -> LlmResponse:
    # No tokens are spent; saying so keeps ADK's telemetry from warning on every call.
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=0, candidates_token_count=0, total_token_count=0
    )
    return LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


def _call(name: str, **args: Any) -> LlmResponse:
    return _respond(types.Part(function_call=types.FunctionCall(name=name, args=args)))


def _say(text: str) -> LlmResponse:
    return _respond(types.Part(text=text))


def _request(llm_request: LlmRequest) -> str:
    """The latest text the user wrote (not another agent's quoted steps)."""
    for content in reversed(llm_request.contents):
        if content.role != "user":
            continue
        for part in reversed(content.parts or []):
            if part.text and not part.text.startswith(_QUOTED):
                return part.text
    return ""


def _summary(name: str, result: Mapping[str, Any]) -> str:
    if "error" in result:
        return f"I did not run {name}: {result['error']}"
    if name == "restart_service":
        return f"Restarted {result['service']} (restart #{result['restarts']} here)."
    return (
        f"{result['service']} is {result['status']}: {result['note']}; restarted "
        f"{result['restarts']} time(s) here."
    )


class ScriptedModel(BaseLlm):
    """A deterministic model (module docstring): no network, no weights."""

    model: str = "orrery-scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        yield self._answer(llm_request)

    def _answer(self, llm_request: LlmRequest) -> LlmResponse:
        last = (llm_request.contents[-1].parts or [types.Part()])[-1]
        result = last.function_response
        if result is not None and result.name in _OWNER:
            return _say(_summary(result.name, result.response or {}))
        text = _request(llm_request)
        service = _SERVICE.search(text)
        if service is None:
            return _say("Which service? Known: " + ", ".join(sorted(HEALTH)) + ".")
        tool = "restart_service" if _RESTART.search(text) else "get_service_health"
        if tool in llm_request.tools_dict:
            return _call(tool, service=service[1].lower())
        return _call("transfer_to_agent", agent_name=_OWNER[tool])


def build_agent(model: BaseLlm | str) -> LlmAgent:
    """The example's agent tree on `model` (a model name, or a `BaseLlm`)."""
    investigator = LlmAgent(
        name="investigator",
        model=model,
        description="Answers questions about a service's health (read-only).",
        instruction="Answer questions about service health with get_service_health.",
        tools=[get_service_health],
    )
    change_planner = LlmAgent(
        name="change_planner",
        model=model,
        description=(
            "Restarts services. A restart is guarded: it runs only after the delegating person "
            "approves it."
        ),
        instruction="Restart the service the user names with restart_service.",
        tools=[FunctionTool(restart_service, require_confirmation=True)],
    )
    return LlmAgent(
        name="orrery_example",
        model=model,
        description="Investigates services and restarts them with a person's approval.",
        instruction=(
            "Transfer questions about a service's health to investigator and requests to "
            "restart a service to change_planner."
        ),
        sub_agents=[investigator, change_planner],
    )


root_agent = build_agent(os.environ.get(MODEL_VARIABLE) or ScriptedModel())
