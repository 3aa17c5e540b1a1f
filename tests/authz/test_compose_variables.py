"""compose.yaml gives authz every variable its settings read, and only those."""

from __future__ import annotations

from authz.settings import AuthzSettings
from tests.docker.variables import compose_environment, variables_read, without_empty


def test_compose_passes_authz_exactly_the_variables_its_settings_read() -> None:
    """A new authz setting fails here until compose.yaml passes it; nothing else is passed."""
    assert set(compose_environment("authz")) == variables_read(AuthzSettings)


def test_a_variable_compose_passes_empty_means_authzs_default() -> None:
    """Unset in `.env`, compose passes it empty: the settings equal those without it."""
    passed = compose_environment("authz")
    assert AuthzSettings.from_env(passed) == AuthzSettings.from_env(without_empty(passed))
