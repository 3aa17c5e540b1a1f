"""checkov over every rendering: no failed check, and every skipped one says why.

A skip is a `checkov.io/skipN: CHECK_ID=reason` annotation on the resource (in the repo, next to
what it excuses); one without a reason fails here as surely as a failed check.

checkov runs once over all the renderings (a file each) and its report is split by file: most of
a checkov run is loading its checks (about 6 s of CPU), which ten runs paid ten times.
"""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import Manifests, checkov

MIN_REASON = 40  # characters: a reason, not a shrug

Findings = dict[str, list[dict[str, Any]]]  # "passed" | "failed" | "skipped" → checks


@pytest.fixture(scope="module")
def findings(
    renderings: dict[str, Manifests], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Findings]:
    """Rendering name → checkov's passed, failed and skipped checks on it, and the files it could
    not parse (`"unparsed"`), from one checkov run over every rendering."""
    folder = tmp_path_factory.mktemp("checkov").resolve()
    files = {}
    for name, manifests in renderings.items():
        files[name] = folder / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump_all(manifests.objects, sort_keys=False))
    result = subprocess.run(
        [
            checkov(),
            *(argument for path in files.values() for argument in ("--file", str(path))),
            "--framework",
            "kubernetes",
            "--skip-download",  # no platform lookups: the machine has no such network
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    results = json.loads(result.stdout)["results"]
    by_file: dict[str, Findings] = {str(path): defaultdict(list) for path in files.values()}
    for outcome in ("passed", "failed", "skipped"):
        for check in results[f"{outcome}_checks"]:
            by_file[str(Path(check["file_abs_path"]).resolve())][outcome].append(check)
    for path in results["parsing_errors"]:
        by_file[str(Path(path).resolve())]["unparsed"].append({"file": path})
    return {name: by_file[str(path)] for name, path in files.items()}


def test_checkov_reports_no_unjustified_finding(
    manifests: Manifests, findings: dict[str, Findings]
) -> None:
    """Zero failed checks; each skipped check carries a real reason."""
    found = findings[manifests.name]
    failed = [(c["check_id"], c["resource"], c["check_name"]) for c in found["failed"]]
    assert failed == []
    assert len(found["passed"]) > 50
    assert found["unparsed"] == []
    for check in found["skipped"]:
        reason = check["check_result"].get("suppress_comment") or ""
        assert len(reason) >= MIN_REASON, (check["check_id"], reason)
