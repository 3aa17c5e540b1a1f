"""compose.yaml gives the adapter every variable its settings read, and only those."""

from __future__ import annotations

from adapter.settings import AdapterSettings
from tests.docker.variables import compose_environment, variables_read, without_empty


def test_compose_passes_the_adapter_exactly_the_variables_its_settings_read() -> None:
    """A new adapter setting fails here until compose.yaml passes it; nothing else is passed."""
    assert set(compose_environment("adapter")) == variables_read(AdapterSettings)


def test_a_variable_compose_passes_empty_means_the_adapters_default() -> None:
    """Unset in `.env`, compose passes it empty: the settings equal those without it."""
    passed = compose_environment("adapter")
    assert AdapterSettings.from_env(passed) == AdapterSettings.from_env(without_empty(passed))
