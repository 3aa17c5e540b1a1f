"""`orrery-a2a`'s command line on its own: help everywhere, one version, where tokens come from,
what `--url` means, and that no error ever echoes a token."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from stack import cli
from stack.state import StackError

FAKE_TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJkZXYtdXNlciJ9.c2lnbmF0dXJlLWJ5dGVz"


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every subcommand's parser, depth first."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_every_option_and_command_has_help() -> None:
    """Walk the whole argparse tree: an option, argument or command without help fails."""
    missing = []
    for parser in _parsers(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [
                    f"{parser.prog} {choice.dest}"
                    for choice in action._choices_actions
                    if not choice.help
                ]
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "http://127.0.0.1:8080/a2a",
            "names an endpoint; give the edge's base URL, http://127.0.0.1:8080",
        ),
        ("http://127.0.0.1:8080/a2a/", "give the edge's base URL, http://127.0.0.1:8080"),
        (
            "https://edge.example/.well-known/agent-card.json",
            "give the edge's base URL, https://edge.example",
        ),
        ("127.0.0.1:8080", "not an http(s) URL; give the edge's base URL with its scheme"),
        ("edge.example", "not an http(s) URL"),
        ("http://127.0.0.1:8080/?x=1", "no query or fragment"),
    ],
)
@pytest.mark.parametrize("command", [["ask", "hello"], ["approve", "act-1"]])
def test_a_url_that_is_not_the_base_url_is_explained(
    command: list[str], url: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--url` is the base URL the agent card is served from; /a2a (the card decides where the
    request goes) or a URL without a scheme is refused with what to give instead (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        cli.main([*command, "--url", url], env={})
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_the_base_url_is_kept_without_a_trailing_slash() -> None:
    """A base URL (with or without a path prefix) is accepted as given, minus a final `/`."""
    parse = cli.build_parser().parse_args
    assert parse(["ask", "x", "--url", "http://127.0.0.1:8080/"]).url == "http://127.0.0.1:8080"
    assert parse(["ask", "x", "--url", "https://h/edge"]).url == "https://h/edge"


def test_ask_help_says_the_card_decides_where_the_message_goes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The help of `ask --url` tells the user the card's interface URL is what is called."""
    with pytest.raises(SystemExit):
        cli.main(["ask", "--help"], env={})
    assert "the card's interface URL, not this, decides where the message goes" in " ".join(
        capsys.readouterr().out.split()
    )


def _given(argv: list[str], env: dict[str, str], stdin: str = "") -> str | None:
    args = cli.build_parser().parse_args(["ask", "hi", *argv])
    return cli.given_token(args, env, io.StringIO(stdin))


def test_a_token_comes_from_stdin_a_file_or_the_environment(tmp_path: Path) -> None:
    """`--token-file -` reads stdin, `--token-file PATH` a file, else ORRERY_A2A_TOKEN; the
    flags win over the variable; nothing given is None (mint one)."""
    path = tmp_path / "token"
    path.write_text("from-file\n")
    env = {"ORRERY_A2A_TOKEN": "from-env"}
    assert _given(["--token-file", "-"], env, stdin="from-stdin\n") == "from-stdin"
    assert _given(["--token-file", str(path)], env) == "from-file"
    assert _given(["--token", "from-argv"], env) == "from-argv"
    assert _given([], env) == "from-env"
    assert _given([], {}) is None


@pytest.mark.parametrize("stdin", ["", "\n", "two tokens\n"])
def test_stdin_without_exactly_one_token_is_refused(stdin: str) -> None:
    """An empty stdin or one with more than a token is an error, not an empty bearer."""
    with pytest.raises(StackError, match="stdin does not hold one token"):
        _given(["--token-file", "-"], {}, stdin=stdin)


def test_token_and_token_file_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    """Two sources at once is a usage error — and the usage error never echoes the token."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["ask", "hi", "--token", FAKE_TOKEN, "--token-file", "-"], env={})
    assert exited.value.code == 2
    assert FAKE_TOKEN not in capsys.readouterr().err


def test_a_token_in_the_wrong_place_is_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse names unrecognised arguments; a token pasted as one is redacted."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["approve", "act-1", FAKE_TOKEN], env={})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert FAKE_TOKEN not in err
    assert "unrecognized arguments: [redacted token]" in err


def test_a_failure_message_never_echoes_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    """An unreadable token file is reported by its path, never by what it held."""
    assert cli.redact(f"cannot use {FAKE_TOKEN} here") == "cannot use [redacted token] here"
    assert cli.redact("https://idp.example.com/v1.2.3") == "https://idp.example.com/v1.2.3"
    code = cli.main(["ask", "hi", "--token-file", "/nonexistent/token"], env={})
    assert code == 1
    assert "cannot read a token from /nonexistent/token" in capsys.readouterr().err
