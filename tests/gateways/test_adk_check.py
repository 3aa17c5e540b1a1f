"""`check` and `create` of gateways.adk: a missing extra or a bad agent path is one clear problem,
never an import error from deep inside."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from adapter.gateway import GatewayContext, gateway_problems
from adapter.stores.memory import MemoryConfirmationStore
from gateways.adk import MISSING_EXTRA, check, create
from runtime.errors import ConfigError

EXAMPLE = "gateways.adk.example:root_agent"
NOT_AN_AGENT = "gateways.adk.example:MODEL_VARIABLE"


def test_the_example_agent_checks_ok() -> None:
    """A path to an ADK agent is no problem."""
    assert check({"ORRERY_A2A_ADK_AGENT": EXAMPLE}) == []


@pytest.mark.parametrize(
    ("agent", "problem"),
    [
        ("", "ORRERY_A2A_ADK_AGENT: is required: module:attribute of your ADK agent"),
        ("root_agent", "ORRERY_A2A_ADK_AGENT: expected module:attribute, got 'root_agent'"),
        (
            "no_such_module:root_agent",
            "ORRERY_A2A_ADK_AGENT: cannot load 'no_such_module:root_agent'",
        ),
        (
            "gateways.adk.example:nothing",
            "ORRERY_A2A_ADK_AGENT: cannot load 'gateways.adk.example:nothing'",
        ),
        (
            NOT_AN_AGENT,
            f"ORRERY_A2A_ADK_AGENT: {NOT_AN_AGENT!r} is a str, not an ADK agent (BaseAgent)",
        ),
    ],
)
def test_a_bad_agent_path_is_one_clear_problem(agent: str, problem: str) -> None:
    """Missing, malformed, unimportable or not an agent: the problem names the variable."""
    (found,) = check({"ORRERY_A2A_ADK_AGENT": agent})
    assert found.startswith(problem)


def test_the_adapters_check_asks_the_gateway() -> None:
    """`python -m adapter check` reports the gateway's own problems (`gateway_problems`)."""
    problems = gateway_problems("gateways.adk:create", {"ORRERY_A2A_ADK_AGENT": "nowhere:agent"})
    assert problems == [
        "ORRERY_A2A_ADK_AGENT: cannot load 'nowhere:agent': No module named 'nowhere'"
    ]


@pytest.fixture
def without_adk(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the `adk` extra were not installed: google.adk cannot be found."""
    find_spec = importlib.util.find_spec

    def missing(name: str, package: str | None = None) -> object:
        if name.startswith("google.adk"):
            return None
        return find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", missing)


@pytest.mark.usefixtures("without_adk")
async def test_without_the_extra_check_and_create_say_how_to_install_it() -> None:
    """No `adk` extra: one problem naming the extra, and `create` refuses with it (exit 2)."""
    assert check({"ORRERY_A2A_ADK_AGENT": EXAMPLE}) == [MISSING_EXTRA]
    assert "pip install 'orrery-a2a-edge[adk]'" in MISSING_EXTRA
    with pytest.raises(ConfigError) as refused:
        await create(GatewayContext(MemoryConfirmationStore(), 600.0))
    assert refused.value.problems == [MISSING_EXTRA]


def test_the_factory_module_imports_without_adk() -> None:
    """The adapter imports `gateways.adk:create` even where ADK cannot be imported at all."""
    blocked = "import sys; sys.modules['google.adk'] = None; import gateways.adk; print('ok')"
    result = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, check=False, timeout=60
    )
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
