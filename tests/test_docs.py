"""The documentation lives in the repository, and what it promises is complete.

docs/contract.md is the source of truth for the contract. A reference to a document no clone
contains is a dead end for a reader, so every `.md` file a document, comment or docstring cites
must exist here (an outside document is cited by its URL), the names of the old out-of-repository
design documents must not come back, every relative Markdown link and `#anchor` must resolve, and
every page under docs/ must be reachable from the README. The contract must also name every
environment variable the product reads and every reason code its error trees and Envoy answer with.

Each failure names the file and line to fix.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs/contract.md"

# Names of the design documents that lived outside the repository (written so that this file
# does not match itself).
FORBIDDEN = [
    (re.compile(r"\bDESIG[N]\b|\bCONTRACT[S]\b"), "the old design documents"),
    (re.compile(r"\b(?:ADR|AEP)-\d+"), "a decision record outside the repository"),
    (re.compile(r"research\s*§|\bresearch/", re.IGNORECASE), "the research notes"),
    (re.compile(r"shared\s+design", re.IGNORECASE), "the design folder outside the repository"),
]
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
# A cited Markdown file, optionally with an anchor: `docs/contract.md#ports`, `../README.md`.
CITED_MD = re.compile(r"(?<![\w/.-])((?:\.{1,2}/|[\w-]+/)*[\w.-]*\w\.md)(?:#([\w-]+))?(?![\w])")
MD_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MD_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
FENCE = re.compile(r"^\s{0,3}(```|~~~)")


@cache
def repo_files() -> tuple[Path, ...]:
    """What a clone holds (tracked files) plus new files not ignored, as they are on disk."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    paths = {ROOT / name for name in listed.split("\0") if name}
    return tuple(sorted(path for path in paths if path.is_file()))


@cache
def text(path: Path) -> str | None:
    """The file as UTF-8 text, or None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def text_files() -> Iterator[tuple[Path, str]]:
    for path in repo_files():
        content = text(path)
        if content is not None:
            yield path, content


def markdown_files() -> list[Path]:
    return [path for path in repo_files() if path.suffix == ".md"]


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def prose_lines(content: str) -> Iterator[tuple[int, str]]:
    """Markdown lines outside fenced code blocks, with inline code spans kept."""
    fenced = False
    for number, line in enumerate(content.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a Markdown file offers: its headings (duplicates numbered) and HTML ids."""
    content = text(path) or ""
    found: set[str] = set(HTML_ANCHOR.findall(content))
    seen: dict[str, int] = {}
    for _, line in prose_lines(content):
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def resolve_citation(source: Path, cited: str) -> Path | None:
    """A cited file, relative to the citing file or to the repository root."""
    for base in (source.parent, ROOT):
        candidate = (base / cited).resolve()
        if candidate.is_file() and candidate.is_relative_to(ROOT):
            return candidate
    return None


def test_no_file_names_the_old_out_of_repository_design_documents() -> None:
    """No document, comment or docstring names the design, decision records or research notes
    that lived outside the repository; docs/ carries them now."""
    problems = [
        f"{where(path, number)}: names {what}; cite docs/ instead: {line.strip()}"
        for path, content in text_files()
        for number, line in enumerate(content.splitlines(), start=1)
        for pattern, what in FORBIDDEN
        if pattern.search(line)
    ]
    assert not problems, "\n".join(problems)


def test_every_cited_markdown_file_is_in_the_repository() -> None:
    """A `.md` file named anywhere (a document, a comment, a docstring) exists in the repository,
    and its `#anchor`, if any, is one of its headings; an outside document is cited by URL."""
    problems = []
    for path, content in text_files():
        for number, line in enumerate(content.splitlines(), start=1):
            for match in CITED_MD.finditer(URL.sub("", line)):
                cited, anchor = match[1], match[2]
                target = resolve_citation(path, cited)
                if target is None:
                    problems.append(f"{where(path, number)}: {cited} is not in the repository")
                elif anchor is not None and anchor not in anchors(target):
                    problems.append(f"{where(path, number)}: {cited} has no heading #{anchor}")
    assert not problems, "\n".join(problems)


def link_targets(path: Path) -> Iterator[tuple[int, str]]:
    """The targets of the Markdown links of a file (inline and reference style), with lines."""
    for number, line in prose_lines(text(path) or ""):
        prose = INLINE_CODE.sub("", line)
        for match in MD_LINK.finditer(prose):
            yield number, match[1]
        reference = MD_REFERENCE.match(prose)
        if reference is not None:
            yield number, reference[1]


def resolve_link(source: Path, target: str) -> tuple[Path | None, str | None]:
    """A relative link's file (relative to the linking file, as a renderer reads it) and anchor."""
    location, _, anchor = target.partition("#")
    if not location:
        return source, anchor or None
    resolved = (source.parent / location).resolve()
    return (resolved if resolved.exists() else None), anchor or None


def test_relative_markdown_links_resolve() -> None:
    """Every relative link in a Markdown file reaches an existing file or folder, and every
    `#anchor` into a Markdown file is one of its headings."""
    problems = []
    for path in markdown_files():
        for number, target in link_targets(path):
            if URL.match(target) or target.startswith("mailto:"):
                continue
            resolved, anchor = resolve_link(path, target)
            if resolved is None:
                problems.append(f"{where(path, number)}: link target {target} does not exist")
            elif (
                anchor is not None and resolved.suffix == ".md" and anchor not in anchors(resolved)
            ):
                problems.append(f"{where(path, number)}: {target}: no such heading")
    assert not problems, "\n".join(problems)


def test_every_page_under_docs_is_reachable_from_the_readme() -> None:
    """Following Markdown links from README.md reaches every page under docs/ (none is hidden)."""
    reached: set[Path] = set()
    pending = [ROOT / "README.md"]
    while pending:
        page = pending.pop()
        if page in reached:
            continue
        reached.add(page)
        for _, target in link_targets(page):
            resolved, _ = resolve_link(page, target)
            if resolved is not None and resolved.suffix == ".md" and not URL.match(target):
                pending.append(resolved)
    orphans = [
        f"{where(page, 1)}: not linked from README.md or a page it links to"
        for page in markdown_files()
        if page.is_relative_to(ROOT / "docs") and page not in reached
    ]
    assert not orphans, "\n".join(orphans)


def product_sources() -> list[Path]:
    """The shipped packages' modules (pyproject's setuptools list) and compose.yaml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [ROOT / name for name in config["tool"]["setuptools"]["packages"]]
    return [
        path
        for path in repo_files()
        if (path.suffix == ".py" and any(path.is_relative_to(package) for package in packages))
        or path == ROOT / "compose.yaml"
    ]


# A variable name as the code spells it: a string literal in Python (a constant named ORRERY_…
# is not a variable), an interpolation `${NAME` in compose.yaml.
VARIABLE = {
    ".py": re.compile(r"[\"'](?P<name>(?:ORRERY|OTEL)_[A-Z0-9_]*[A-Z0-9]|DATABASE_URL)[\"']"),
    ".yaml": re.compile(r"\$\{(?P<name>[A-Z][A-Z0-9_]*)"),
}


def test_the_contract_names_every_environment_variable_the_product_reads() -> None:
    """Each variable the packages read or compose.yaml interpolates is in docs/contract.md."""
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", CONTRACT.read_text()))
    found: dict[str, str] = {}
    for path in product_sources():
        for number, line in enumerate((text(path) or "").splitlines(), start=1):
            for match in VARIABLE[path.suffix].finditer(line):
                found.setdefault(match["name"], where(path, number))
    assert {"ORRERY_A2A_ASSERTION_KEYS", "ORRERY_A2A_PUBLISH"} <= set(found)  # the scan works
    missing = [
        f"{at}: {name} is not in docs/contract.md"
        for name, at in sorted(found.items())
        if name not in documented
    ]
    assert not missing, "\n".join(missing)


REASON_IN_PYTHON = re.compile(r"^\s+(?:default_)?reason(?:\s*:[^=]+)?\s*=\s*\"([a-z_]+)\"")
REASON_IN_ENVOY = re.compile(r"(?:^\s*error:\s*|\"error\":\")([a-z_]+)")


def test_the_contract_names_every_reason_code() -> None:
    """Each reason code of the error trees, and each of Envoy's own, appears in docs/contract.md."""
    documented = set(re.findall(r"`([a-z_]+)`", CONTRACT.read_text()))
    sources = [(path, REASON_IN_PYTHON) for path in product_sources() if path.suffix == ".py"]
    sources.append((ROOT / "envoy" / "envoy.yaml", REASON_IN_ENVOY))
    found: dict[str, str] = {}
    for path, regex in sources:
        for number, line in enumerate((text(path) or "").splitlines(), start=1):
            for match in regex.finditer(line):
                found.setdefault(match[1], where(path, number))
    assert {"reserved_header", "assertion_invalid", "authz_unavailable"} <= set(found)
    missing = [
        f"{at}: reason {reason} is not in docs/contract.md"
        for reason, at in sorted(found.items())
        if reason not in documented
    ]
    assert not missing, "\n".join(missing)
