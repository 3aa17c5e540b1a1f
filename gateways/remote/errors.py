"""The one error tree of `gateways.remote`: every refusal has a stable reason code.

The reason is the same in the error result the agent sees, the `remote_call` log event and the
`outcome` label of `orrery_a2a_remote_calls_total`. A description is safe to show the agent and
the caller: it never echoes a token, a header value or a library's exception text.
"""

from __future__ import annotations

from typing import Final

# Every reason code a remote call can end with (besides `ok`); docs/contract.md lists them.
REASONS: Final = frozenset(
    {
        "not_allowlisted",  # the agent name is not in ORRERY_A2A_REMOTE_AGENTS
        "insecure_url",  # http:// outside loopback, userinfo, or another origin than the card's
        "address_refused",  # a private, link-local, loopback or reserved address not allowlisted
        "redirect_refused",  # the remote answered 3xx: redirects are never followed
        "card_unavailable",  # the card (or its key set) could not be fetched
        "card_invalid",  # not an A2A 1.0 card with a JSON-RPC interface on the card's origin
        "card_signature_invalid",  # a signature that does not verify, or none where one is pinned
        "credentials_unavailable",  # no outbound token could be read or obtained
        "busy",  # the principal already has as many remote calls running as allowed
        "timeout",  # the remote did not answer in time
        "too_large",  # a response body over the byte cap
        "remote_refused",  # the remote answered an HTTP error (e.g. 508 loop_detected)
        "remote_error",  # the remote answered a JSON-RPC error, or the connection failed
        "remote_failed",  # the remote task ended failed, rejected or canceled
        "remote_needs_input",  # the remote task stopped at input-required or auth-required
        "reply_not_text",  # the reply holds a part other than text
        "reply_too_long",  # the reply text is over the message limit
    }
)


class RemoteAgentError(Exception):
    """A remote call refused or failed, with its stable `reason` and a safe `description`."""

    def __init__(self, reason: str, description: str, *, remote_reason: str | None = None) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown reason code {reason!r}")
        super().__init__(description)
        self.reason = reason
        self.description = description
        # The reason code a remote Orrery edge answered with (`loop_detected`), when it said one.
        self.remote_reason = remote_reason
