"""Message rules: what a client may send into a turn (checked before the gateway runs).

Text parts only, so a client cannot inject a tool/function response into the agent's loop
(docs/decisions.md#d1-a-thin-a2a-adapter-on-the-gateway-not-the-frameworks-to_a2a); at most 8192
characters in total (the console's limit); a part may declare no media type or `text/plain` only.
Text that *looks like* a function call or response — a JSON-ish object with a `functionCall`,
`function_response`, `tool_result`… member — is refused too, because an agent framework
downstream may parse it back into one.

Each refusal is a spec error (-32005 for a non-text part or media type, -32602 otherwise) whose
`ErrorInfo.metadata.rule` is a stable code: `non_text_part`, `media_type`, `role`, `empty`,
`too_long`, `control_character`, `function_shape`.

Control characters other than tab, newline and carriage return are refused: they carry no meaning
in a question to an agent, can smuggle terminal escapes into logs and consoles, and NUL cannot be
stored in PostgreSQL text at all.
"""

from __future__ import annotations

import re

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError, ContentTypeNotSupportedError, InvalidParamsError

MAX_CHARS = 8192
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
TEXT_MEDIA_TYPES = frozenset({"", "text/plain"})

# A member name that agent frameworks treat as a function/tool call or response, appearing as a
# key (after `{` or `,`, optionally quoted) — prose that merely mentions the word passes.
_FUNCTION_SHAPE = re.compile(
    r"""[{,]\s*["']?(?:function_?calls?|function_?responses?|tool_?calls?|tool_?responses?|"""
    r"""tool_?results?|tool_?use|tool_?outputs?)["']?\s*:""",
    re.IGNORECASE,
)


def _refuse(error: type[A2AError], rule: str, message: str) -> A2AError:
    return error(message=message, data={"rule": rule})


def check_message(message: pb.Message) -> str:
    """Return the message text (parts joined by newlines) or raise the rule it breaks."""
    if message.role != pb.ROLE_USER:
        raise _refuse(InvalidParamsError, "role", "message role must be ROLE_USER")
    texts: list[str] = []
    total = 0
    for part in message.parts:
        if part.WhichOneof("content") != "text":
            raise _refuse(
                ContentTypeNotSupportedError, "non_text_part", "only text parts are accepted"
            )
        media_type = part.media_type.split(";", 1)[0].strip().lower()
        if media_type not in TEXT_MEDIA_TYPES:
            raise _refuse(
                ContentTypeNotSupportedError, "media_type", "only text/plain parts are accepted"
            )
        total += len(part.text)
        if total > MAX_CHARS:
            raise _refuse(
                InvalidParamsError, "too_long", f"message text is over {MAX_CHARS} characters"
            )
        texts.append(part.text)
    text = "\n".join(texts)
    if not text.strip():
        raise _refuse(InvalidParamsError, "empty", "message has no text")
    if _CONTROL.search(text):
        raise _refuse(
            InvalidParamsError, "control_character", "message text has control characters"
        )
    if _FUNCTION_SHAPE.search(text):
        raise _refuse(
            InvalidParamsError,
            "function_shape",
            "text shaped like a function call or response is not accepted",
        )
    return text
