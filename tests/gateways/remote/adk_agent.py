"""An ADK agent that delegates with the remote-agent tool, on a scripted model (no network).

`Delegating` answers `ask AGENT: TEXT` with a call of `call_remote_agent(agent, message)` and a
tool result with its reply text (or `failed: <reason>`). `build_agent(remote)` puts the tool in
an `LlmAgent`; `root_agent` is that agent over the remote agents `ORRERY_A2A_REMOTE_*` configure
(what `ORRERY_A2A_ADK_AGENT=tests.gateways.remote.adk_agent:root_agent` loads in the adapter).
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from prometheus_client import CollectorRegistry

from gateways.remote.adk_tool import TOOL_NAME, remote_agent_tool
from gateways.remote.client import RemoteAgents
from gateways.remote.metrics import RemoteMetrics
from gateways.remote.settings import RemoteSettings


def _say(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


class Delegating(BaseLlm):
    """A scripted model (module docstring)."""

    model: str = "orrery-delegating"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = (llm_request.contents[-1].parts or [types.Part()])[-1]
        if last.function_response is not None:
            result = last.function_response.response or {}
            yield _say(
                str(result.get("untrusted_remote_reply") or f"failed: {result.get('reason')}")
            )
            return
        user = next(
            part.text
            for content in reversed(llm_request.contents)
            if content.role == "user"
            for part in content.parts or []
            if part.text
        )
        agent, _, message = user.removeprefix("ask ").partition(":")
        call = types.FunctionCall(name=TOOL_NAME, args={"agent": agent, "message": message.strip()})
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(function_call=call)])
        )


def build_agent(remote: RemoteAgents) -> LlmAgent:
    return LlmAgent(
        name="delegating",
        model=Delegating(),
        instruction="Delegate every question to the remote agent it names.",
        tools=[remote_agent_tool(remote)],
    )


root_agent = build_agent(
    RemoteAgents(RemoteSettings.from_env(os.environ), RemoteMetrics(CollectorRegistry()))
)
