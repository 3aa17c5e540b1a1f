"""The private state directory and this run's generated secrets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contract.assertion import AssertionKeys
from stack.keys import load_signing_key
from stack.state import (
    StackError,
    default_state_dir,
    private_dir,
    write_private,
)
from stack.up import generate_secrets


def _mode(path: Path) -> int:
    return path.lstat().st_mode & 0o777


def test_state_dir_is_created_private(tmp_path: Path) -> None:
    """A new state directory (and its parents) is created 0700."""
    path = private_dir(tmp_path / "a" / "state")
    assert _mode(path) == 0o700


def test_state_dir_readable_by_others_is_refused(tmp_path: Path) -> None:
    """An existing directory others can read is not trusted with keys."""
    path = tmp_path / "open"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    with pytest.raises(StackError, match="readable by other users"):
        private_dir(path)


def test_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    """A symlink planted where the state directory goes is refused, not followed."""
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "state"
    link.symlink_to(target)
    with pytest.raises(StackError, match="not a directory"):
        private_dir(link)


def test_private_files_are_0600_and_replace_planted_symlinks(tmp_path: Path) -> None:
    """write_private never writes through a symlink at its path."""
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    planted = tmp_path / "key.pem"
    planted.symlink_to(victim)
    write_private(planted, b"secret")
    assert victim.read_text() == "untouched"
    assert not planted.is_symlink()
    assert planted.read_bytes() == b"secret"
    assert _mode(planted) == 0o600


def test_default_state_dir_prefers_the_override_then_the_runtime_dir() -> None:
    """ORRERY_A2A_STATE_DIR, else $XDG_RUNTIME_DIR/orrery-a2a, else a per-uid temp dir."""
    assert default_state_dir({"ORRERY_A2A_STATE_DIR": "/x/s", "XDG_RUNTIME_DIR": "/r"}) == Path(
        "/x/s"
    )
    assert default_state_dir({"XDG_RUNTIME_DIR": "/run/user/7"}) == Path("/run/user/7/orrery-a2a")
    assert default_state_dir({}).name == f"orrery-a2a-{os.getuid()}"


def test_generated_secrets_are_private_random_and_valid(tmp_path: Path) -> None:
    """The issuer and card keys are 0600 P-256 PEMs; assertion keys parse as authz expects; all
    differ between runs."""
    first = generate_secrets(tmp_path)
    first_pem = first.issuer_key.read_bytes()
    assert _mode(first.issuer_key) == 0o600
    load_signing_key(first.issuer_key)
    keys = AssertionKeys.parse(first.assertion_keys)
    assert len(keys.keys) == 1
    assert len(keys.keys[0][1]) >= 32
    first_card_pem = first.card_key.read_bytes()
    assert _mode(first.card_key) == 0o600
    load_signing_key(first.card_key)
    second = generate_secrets(tmp_path)
    assert second.issuer_key.read_bytes() != first_pem
    assert second.card_key.read_bytes() != first_card_pem
    assert second.assertion_keys != first.assertion_keys
    assert AssertionKeys.parse(second.assertion_keys).signing_kid != keys.signing_kid
