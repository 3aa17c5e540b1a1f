"""Message rules: what a client may send into a turn (checked before the gateway runs).

Text parts only, so a client cannot inject a tool/function response into the agent's loop
(docs/decisions.md#d1-a-thin-a2a-adapter-on-the-gateway-not-the-frameworks-to_a2a); at most 8192
characters in total (the console's limit); a part may declare no media type or `text/plain` only.
Text that *reads as* a tool call or a tool's result, and metadata that marks a part or the message
as a tool's, are refused too, because a model or an agent framework downstream may take them for
one (`function_shapes.py` says what is matched, after which normalisation, and what is not).

Each refusal is a spec error (-32005 for a non-text part or media type, -32602 otherwise) whose
`ErrorInfo.metadata.rule` is a stable code: `non_text_part`, `media_type`, `role`, `empty`,
`too_long`, `control_character`, `format_character`, `function_shape`, `tool_metadata`.

Control characters other than tab, newline and carriage return are refused: they carry no meaning
in a question to an agent, can smuggle terminal escapes into logs and consoles, and NUL cannot be
stored in PostgreSQL text at all.

Format characters (Unicode category Cf) are refused for the same reason, one level up: they are
invisible. Bidirectional overrides and isolates (U+202A to U+202E, U+2066 to U+2069) make text
*read* differently from what it is (also to the person approving an action the text asked for),
and zero-width characters, soft hyphens and the invisible tag characters (U+E0000 to U+E007F)
carry text a model reads and a person does not. The unassigned code points Unicode reserves as
default-ignorable (U+2065, U+FFF0 to U+FFF8, U+E0000 to U+E0FFF outside the assigned ones) are
refused with them: a reader that knows a later Unicode shows them as nothing too
(`contract.identity.is_invisible`, the identifiers' rule). Escaping them on the way out would
not help: every JSON reader turns `\u202e` back into the character. Two are allowed: the zero-width
non-joiner and joiner (U+200C, U+200D), which emoji sequences and several scripts need and which
cannot reorder or hide text.
"""

from __future__ import annotations

import re

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError, ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import MessageToDict

from adapter.function_shapes import names_a_tool, reads_as_tool_io
from contract.identity import is_invisible

MAX_CHARS = 8192
# The body that carries the longest message in the worst escaping a JSON client may use: a
# character outside the Basic Multilingual Plane written as a surrogate pair of `\uXXXX` escapes
# is 12 bytes, the most any one character takes; 32 KiB more hold everything else (the envelope,
# ids, part framing, metadata). Envoy's body cap and the adapter's are this number
# (docs/contract.md#body-size).
MAX_ESCAPED_CHAR_BYTES = 12
MAX_BODY_BYTES = MAX_CHARS * MAX_ESCAPED_CHAR_BYTES + 32 * 1024
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
TEXT_MEDIA_TYPES = frozenset({"", "text/plain"})
JOINERS = frozenset({"\u200c", "\u200d"})  # the format characters that are allowed


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
    if reads_as_tool_io(text):
        raise _refuse(
            InvalidParamsError,
            "function_shape",
            "text shaped like a tool call or a tool's result is not accepted",
        )
    if _has_format_character(text):
        raise _refuse(
            InvalidParamsError,
            "format_character",
            "message text has invisible format characters (such as bidirectional controls)",
        )
    if _tool_metadata(message):
        raise _refuse(
            InvalidParamsError,
            "tool_metadata",
            "metadata marking a part or the message as a tool's is not accepted",
        )
    return text


def _has_format_character(text: str) -> bool:
    if text.isascii():  # no format character is ASCII
        return False
    return any(is_invisible(ch) for ch in set(text) if not ch.isascii() and ch not in JOINERS)


def _tool_metadata(message: pb.Message) -> bool:
    structs = [message.metadata, *(part.metadata for part in message.parts)]
    return any(struct.fields and names_a_tool(MessageToDict(struct)) for struct in structs)
