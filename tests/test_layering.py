"""The packages' layering, read from every module's imports (`ast`), so it stays true.

authz and the adapter are separate services that meet only at the signed header, so they share
code only through two leaf packages: `contract` (the wire contract) and `runtime` (process
plumbing). Neither leaf imports anything of ours, no service imports another, and outside authz's
own tests, its benchmark and the deployment's tests nothing imports authz: everything else reaches
it over the wire.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Every top-level package in the repository (`envoy/` holds Envoy's config, not Python).
OURS = frozenset(path.parent.name for path in ROOT.glob("*/__init__.py"))
SHARED = frozenset({"contract", "runtime"})

# What each area may import of ours (an area is a package, a test folder or a benchmark).
ALLOWED: dict[str, frozenset[str]] = {
    "contract": frozenset({"contract"}),
    "runtime": frozenset({"runtime"}),
    "authz": SHARED | {"authz"},
    "adapter": SHARED | {"adapter"},
    # A gateway reaches the adapter only through the seam (`GATEWAY_SEAM`, checked below).
    "gateways": SHARED | {"adapter", "gateways"},
    "stack": SHARED | {"stack"},
    "tests/contract": frozenset({"contract", "tests"}),
    "tests/runtime": frozenset({"runtime", "tests"}),
    "tests/authz": SHARED | {"authz", "tests"},
    "tests/adapter": SHARED | {"adapter", "gateways", "tests"},
    "tests/gateways": SHARED | {"adapter", "gateways", "tests"},
    "tests/stack": SHARED | {"stack", "tests"},
    "tests/e2e": SHARED | {"adapter", "gateways", "stack", "tests"},
    "tests/docker": SHARED | {"stack", "tests"},
    # The deployment is both services at once: its tests read each one's settings and metric
    # definitions to check the manifests, alerts and dashboard against them.
    "tests/deploy": SHARED | {"adapter", "authz", "stack", "tests"},
    "bench/authz_bench.py": SHARED | {"authz"},
    "bench/adapter_bench.py": SHARED | {"adapter"},
    "bench/adapter_stock_server.py": SHARED | {"adapter", "gateways"},
    "bench/e2e_bench.py": SHARED | {"adapter", "stack"},
    "bench/flood_bench.py": SHARED | {"stack"},
    "bench/list_tasks_bench.py": SHARED | {"adapter"},
    "bench/check_profile.py": SHARED | {"authz"},
    "bench/memory_bench.py": SHARED | {"authz"},
    "bench/adapter_memory.py": SHARED | {"adapter"},
    "bench/adk_bench.py": SHARED | {"adapter", "gateways"},
    "bench/adk_to_a2a_server.py": SHARED | {"gateways"},
    "bench/proxy_bench.py": SHARED | {"stack"},
    "bench/outbound_bench.py": SHARED | {"gateways"},
    "bench/__main__.py": SHARED,
}
# Of the adapter, a gateway imports only the seam: the adapter loads gateways by name.
GATEWAY_SEAM = "adapter.gateway"
# The contract is the one piece both services run: nothing beyond these may come with it.
CONTRACT_THIRD_PARTY = frozenset({"cryptography"})


def python_files(area: str) -> list[Path]:
    path = ROOT / area
    return [path] if path.is_file() else sorted(path.rglob("*.py"))


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level module) of every import in the file, those inside functions included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: always within the file's own package
                continue
            yield node.lineno, (node.module or "").partition(".")[0]


def violations(area: str, allowed: frozenset[str]) -> list[str]:
    found = []
    for path in python_files(area):
        for line, module in imports(path):
            if module in OURS and module not in allowed:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return found


@pytest.mark.parametrize("area", sorted(ALLOWED))
def test_each_area_imports_only_what_its_layer_allows(area: str) -> None:
    """A package, test folder or benchmark imports only the packages of ours its layer allows."""
    assert python_files(area), f"{area} has no Python files: update ALLOWED"
    assert violations(area, ALLOWED[area]) == []


def test_every_area_of_ours_has_a_rule() -> None:
    """A new package or test folder cannot slip past the rules unnoticed."""
    areas = set(OURS - {"tests"})
    areas |= {str(path.parent.relative_to(ROOT)) for path in ROOT.glob("tests/*/__init__.py")}
    areas |= {str(path.relative_to(ROOT)) for path in ROOT.glob("bench/*.py")}
    assert sorted(areas - ALLOWED.keys()) == []


def adapter_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of the adapter's modules in the file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        yield from ((node.lineno, name) for name in names if name.partition(".")[0] == "adapter")


def test_gateways_reach_the_adapter_only_through_the_seam() -> None:
    """A gateway imports `adapter.gateway` and nothing else of the adapter."""
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in python_files("gateways")
        for line, module in adapter_modules(path)
        if module != GATEWAY_SEAM
    ]
    assert found == []


def test_top_level_test_modules_do_not_import_authz() -> None:
    """The shared test modules (conftest, this one) reach authz only over the wire."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in ROOT.glob("tests/*.py")
        for line, module in imports(path)
        if module == "authz"
    ]
    assert found == []


def test_the_contract_needs_only_the_standard_library_and_cryptography() -> None:
    """The contract brings no dependency into the adapter that authz does not also need."""
    foreign = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in python_files("contract")
        for line, module in imports(path)
        if module not in sys.stdlib_module_names
        and module not in CONTRACT_THIRD_PARTY
        and module != "contract"
    ]
    assert foreign == []
