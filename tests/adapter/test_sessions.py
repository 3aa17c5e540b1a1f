"""Derived session ids: stable, per principal, unambiguous."""

from __future__ import annotations

from adapter.sessions import session_id
from contract.identity import principal_key


def test_same_inputs_same_session() -> None:
    """The derivation is deterministic, so it works on any replica."""
    assert session_id("k", "c") == session_id("k", "c")


def test_principal_changes_the_session() -> None:
    """One contextId under two principal keys gives two sessions."""
    assert session_id("k1", "c") != session_id("k2", "c")


def test_concatenation_ambiguity_does_not_collide() -> None:
    """("ab", "c") and ("a", "bc") hash different inputs."""
    assert session_id("ab", "c") != session_id("a", "bc")


def test_separator_in_context_id_does_not_collide() -> None:
    """A contextId carrying JSON punctuation cannot forge another pair's encoding."""
    key = principal_key("delegated", "c", "bot", "alice")
    assert session_id(key, '","x') != session_id(key + '","', "x")


def test_shape() -> None:
    """a2a- + 64 hex characters: outside the console's id space."""
    value = session_id("k", "c")
    assert value.startswith("a2a-") and len(value) == 68
    int(value[4:], 16)
