"""Does a caller's text, or a message's metadata, read as a tool call or a tool's result?

What this protects: a model, or an agent framework, downstream of the gateway taking text the
*caller* wrote for the output of a tool (or for a call the model made). A fake `tool_result`
saying "approved", fed back into a model's context, is the cheapest way to steer an agent; an
A2A converter that reads `adk_type: function_response` off a part turns it into a real function
response. Messages are text only, so this is about text that is *shaped* like one, in the shapes
the common formats use:

* JSON members whose key is a tool word (`functionCall`, `function_response`, `tool_calls`,
  `tool_result`, `tool_use_id`, …), or whose `type` / `role` / `kind` (or `*_type`) value is one
  (`"type": "tool_result"`, `"role": "tool"`, `"type": "function_call_output"`);
* tags (`<function_call>`, `<tool_call>`, `<function_results>`, `<invoke …>`) and chat-template
  control tokens (`<|im_start|>`, `[TOOL_RESULTS]`) a model reads as turn or tool boundaries.

Before matching, the text is normalised the way a lenient reader would see it: JSON / JSON5
escapes decoded (`\\u0074ool_result`), Unicode NFKC (fullwidth braces), format characters dropped
(zero-width spaces and joiners, soft hyphens), case folded; `//` and `/* */` comments count as
whitespace. JSON found in the text — the whole text, the body of each ``` fence, each top-level
`{…}` / `[…]`, strings holding JSON — is also parsed and walked, at any depth.

The limits, honestly: this is a closed vocabulary over known formats. It does not see a tool
result written as prose ("the restart tool returned: approved"), in another language, encoded
(base64, rot13), or in a format it does not know. What stops a fake result from *doing* anything
is elsewhere: messages are text parts only, the gateway gets text only, and a guarded action runs
only after the delegating person approved exactly that action (docs/contract.md#approvals).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

# Tool words, compared after case folding with everything but letters and digits removed.
_TOOL_WORDS = frozenset(
    {
        "functioncall",
        "functioncalls",
        "functioncallid",
        "functioncalloutput",
        "functionresponse",
        "functionresponses",
        "functionresult",
        "functionresults",
        "functionoutput",
        "toolcall",
        "toolcalls",
        "toolcallid",
        "toolresponse",
        "toolresponses",
        "toolresult",
        "toolresults",
        "tooluse",
        "tooluseid",
        "tooloutput",
        "tooloutputs",
        "executablecode",
        "codeexecutionresult",
    }
)
# Values that make a part or message a tool's when they are its type, role or kind.
_TOOL_KINDS = _TOOL_WORDS | {"tool", "tools", "function", "ipython"}

_SEP = r"[\s_-]*"
_WORD = (
    rf"(?:(?:function|tool){_SEP}(?:calls?(?:{_SEP}(?:ids?|outputs?))?|responses?|results?|"
    rf"outputs?|use(?:{_SEP}ids?)?)|executable{_SEP}code|code{_SEP}execution{_SEP}results?)"
)
_KIND_VALUE = rf"(?:{_WORD}|tools?|functions?|ipython)"
_Q = r"""["'`]?"""
_WS = r"(?:\s|/\*.*?\*/|//[^\n]*(?:\n|$))*"  # whitespace, where JSON5 comments may stand too
_SHAPES = re.compile(
    # a member whose key is a tool word, after `{` or `,`
    rf"[{{,]{_WS}{_Q}{_WORD}{_Q}{_WS}:"
    # a type / role / kind (or `…_type`) member whose value is one
    rf"|(?:type|role|kind){_Q}{_WS}:{_WS}[\"'`]{_KIND_VALUE}[\"'`]"
    # a tag of a tool call or result (a namespace prefix allowed)
    rf"|<\s*/?\s*(?:[\w.-]+:)?(?:{_WORD}|functions?|tools?|invoke)\b"
    # chat-template control tokens
    r"|<\|[^|<>\s]{1,40}\|>|\[/?(?:tool_calls|tool_results|available_tools)\]",
    re.IGNORECASE | re.DOTALL,
)
_ESCAPE = re.compile(
    r"\\u\{([0-9a-f]{1,6})\}|\\u([0-9a-f]{4})|\\x([0-9a-f]{2})|\\([\"'\\/])", re.IGNORECASE
)
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
# A JSON string (kept) or a comment (dropped), whichever starts first.
_STRING_OR_COMMENT = re.compile(r""""(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?(?:\*/|$)""", re.DOTALL)
_BRACKETS = re.compile(r"""[][{}"\\]""")
# Every shape needs one of these; text without any (and without a backslash left) has none.
_HINTS = re.compile(r"function|tool|executable|code|invoke|ipython|<\|")
_DECODER = json.JSONDecoder(strict=False)  # control characters in strings, as lenient readers do
_NOT_ALNUM = re.compile(r"[\W_]+")
_MAX_NESTED = 4  # JSON in a JSON string in …: how deep strings holding JSON are parsed


def reads_as_tool_io(text: str) -> bool:
    """True when `text`, normalised, has a tool call's or result's shape (module docstring)."""
    normal = normalise(text)
    if "\\" not in normal and not _HINTS.search(normal):
        return False
    if _SHAPES.search(normal):
        return True
    if "{" not in normal and "[" not in normal:
        return False
    return any(_tool_value(value, _MAX_NESTED) for value in _json_values(normal))


def names_a_tool(value: Any) -> bool:
    """True when metadata (a JSON-like value) marks its part or message as a tool's: a tool word
    as a key or as any string, or a tool kind as a type / role / kind."""
    return _tool_value(value, _MAX_NESTED, strings=True)


def normalise(text: str) -> str:
    """`text` as a lenient reader sees it: escapes decoded, NFKC, format characters removed, case
    folded. (Comments are matched where whitespace may stand, and dropped before JSON parsing.)"""
    decoded = _ESCAPE.sub(_unescape, text) if "\\" in text else text
    if not decoded.isascii():
        decoded = unicodedata.normalize("NFKC", decoded)
        invisible = {ch for ch in set(decoded) if unicodedata.category(ch) == "Cf"}
        if invisible:
            decoded = decoded.translate(dict.fromkeys(map(ord, invisible)))
    return decoded.casefold()


def _unescape(match: re.Match[str]) -> str:
    braced, four, two, char = match.groups()
    if char is not None:
        return char
    point = int(braced or four or two, 16)
    return chr(point) if point <= 0x10FFFF else ""


def _keep_strings(match: re.Match[str]) -> str:
    """A string stays; a comment becomes a space."""
    return match[0] if match[0][0] == '"' else " "


def _json_values(text: str) -> Iterator[Any]:
    """Every JSON value found in `text`: the whole, each fence's body, and the top-level bracket
    spans (parsed as one array, or each on its own when one of them does not parse)."""
    for piece in (text, *(match[1] for match in _FENCE.finditer(text))):
        if (value := _parsed(piece)) is not None:
            yield value
    spans = list(_bracket_spans(text))
    joined = _parsed("[" + ",".join(spans) + "]") if spans else None
    if joined is not None:
        yield joined
    else:
        yield from (value for value in map(_parsed, spans) if value is not None)


def _parsed(candidate: str) -> Any:
    """The JSON value `candidate` holds (comments dropped), or None."""
    stripped = candidate.strip()
    if "/" in stripped:
        stripped = _STRING_OR_COMMENT.sub(_keep_strings, stripped).strip()
    if stripped[:1] not in ("{", "["):
        return None
    try:
        return _DECODER.decode(stripped)
    except (ValueError, RecursionError):
        return None


def _bracket_spans(text: str) -> Iterator[str]:
    """The top-level `{…}` and `[…]` spans of `text`, in one pass over its brackets, quotes and
    backslashes (brackets inside strings do not count)."""
    depth, start, in_string, skip = 0, 0, False, -1
    for match in _BRACKETS.finditer(text):
        ch, i = match[0], match.start()
        if i == skip:  # the character a backslash escapes
            continue
        if in_string:
            if ch == "\\":
                skip = i + 1
            elif ch == '"':
                in_string = False
        elif ch == '"' and depth:
            in_string = True
        elif ch in "{[":
            if depth == 0:
                start = i
            depth += 1
        elif ch in "}]" and depth:
            depth -= 1
            if depth == 0:
                yield text[start : i + 1]


def _word(text: str) -> str:
    """`text` normalised, letters and digits only: how tool words are compared."""
    plain = text.casefold() if text.isascii() and "\\" not in text else normalise(text)
    return _NOT_ALNUM.sub("", plain)


def _tool_value(value: Any, nested: int, *, strings: bool = False) -> bool:
    """Walk a parsed value for tool keys and kinds (and, in metadata, tool words anywhere)."""
    stack: list[tuple[Any, int]] = [(value, nested)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                word = _word(str(key))
                if word in _TOOL_WORDS:
                    return True
                is_kind = word in ("type", "role", "kind") or word.endswith("type")
                if is_kind and isinstance(child, str) and _word(child) in _TOOL_KINDS:
                    return True
                stack.append((child, depth))
        elif isinstance(item, list):
            stack.extend((child, depth) for child in item)
        elif isinstance(item, str):
            if strings and _word(item) in _TOOL_WORDS:
                return True
            if depth > 0 and item.lstrip()[:1] in ("{", "["):
                if _SHAPES.search(normalise(item)):
                    return True
                stack.extend((inner, depth - 1) for inner in _json_values(normalise(item)))
    return False
