"""deploy/monitoring: the alert rules pass promtool, each alert has a unit test that passes, and
the dashboard and the rules query only metrics that exist.

"Exist" means: ours as the code defines them (authz's and the adapter's registries, with the
suffixes Prometheus adds), Envoy's as the real Envoy serves them on its diag listener, Istio's
standard metrics (Istio mode) and Prometheus' own `up`. Every alert links its runbook, a section
of docs/runbooks.md, and the copies a cluster takes (the PrometheusRules, the chart's file) are
the rules file's groups as they are now.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.deploy.conftest import MONITORING, REPO, promtool

ALERTS = MONITORING / "alerts.yaml"
RUNBOOKS = REPO / "docs/runbooks.md"
SYNCED = (
    "kubernetes/components/monitoring/prometheusrule.yaml",
    "kubernetes/components/monitoring-istio/prometheusrule.yaml",
    "helm/orrery-a2a-edge/files/alerts.yaml",
)
# Istio's standard metrics (the mesh proxy's, Istio mode) and Prometheus' own per-target series.
ISTIO_METRICS = {"istio_requests_total", "istio_request_duration_milliseconds_bucket"}
PROMETHEUS_METRICS = {"up"}
ALERT_TESTS = MONITORING / "alerts.test.yaml"
DASHBOARD = MONITORING / "dashboard.json"

# PromQL words that look like metric names: aggregations, functions, keywords.
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:$.])[a-zA-Z_:][\w:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"}
_SERIES = re.compile(r"^([a-zA-Z_:][\w:]*)[{ ]", re.MULTILINE)
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


def _rules() -> Iterator[dict[str, Any]]:
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        yield from group["rules"]


def _exprs_in_rules() -> Iterator[str]:
    for rule in _rules():
        yield str(rule["expr"])


def _exprs_in_dashboard() -> Iterator[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield str(target["expr"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield str(variable["definition"]).removeprefix("label_values(").split(",")[0]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label matchers, ranges, strings, grouping
    clauses and function calls removed first)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group() not in _KEYWORDS:
            names.add(match.group())
    return names


def _family_names(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        suffixes = _SUFFIXES.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names


def our_metrics() -> set[str]:
    """Every series name authz and the adapter can expose, from their metric definitions."""
    from adapter.metrics import Metrics as AdapterMetrics
    from authz.metrics import Metrics as AuthzMetrics

    every = AuthzMetrics(redis=True)  # the Redis gauge exists only when Redis is configured
    return _family_names(every.registry) | _family_names(AdapterMetrics().registry)


def test_metric_name_extraction_reads_promql() -> None:
    """The extractor finds selectors, not functions, labels or grouping clauses."""
    expr = (
        'histogram_quantile(0.99, sum by (le, method) (rate(a_bucket{x="y",le="1"}[5m])))'
        " / on (pod) group_left b_total and min(c) > 0"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


def test_alert_rules_pass_promtool_check() -> None:
    """`promtool check rules`: valid PromQL, templates and durations."""
    result = subprocess.run(
        [promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_passing_unit_test() -> None:
    """Each alert is exercised by `promtool test rules`, and all of those tests pass."""
    alerts = {
        rule["alert"]
        for group in yaml.safe_load(ALERTS.read_text())["groups"]
        for rule in group["rules"]
    }
    tested = {
        case["alertname"]
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert alerts == tested
    result = subprocess.run(
        [promtool(), "test", "rules", str(ALERT_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=MONITORING,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_covers_what_operators_watch() -> None:
    """Decisions by reason, latency, 429s, 503s, key health, tasks and approvals pending, the
    certificate's days left, the scrape targets, and Istio mode's answers from its own metrics."""
    dashboard = json.loads(DASHBOARD.read_text())
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {
        "TLS certificate days left",
        "scrape targets up",
        "Istio mode: answers by code",
        "Istio mode: 5xx share and authz failures",
        "authz decisions by reason",
        "authz Check latency",
        "adapter latency by method",
        "429s",
        "503s",
        "signing keys usable",
        "tasks",
        "approvals",
    } <= titles
    queried = {name for expr in _exprs_in_dashboard() for name in metric_names(expr)}
    assert "orrery_a2a_approvals_pending" in queried
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


@pytest.mark.envoy
async def test_dashboard_and_alerts_query_only_metrics_that_exist(tmp_path: Path) -> None:
    """Each orrery_* name is defined by authz or the adapter, each envoy_* name is served by the
    real Envoy on its diag listener (so a renamed metric breaks this test, not the pager)."""
    from tests.e2e.conftest import bound_socket, envoy_for, listener_port, raw_request

    queried = {
        name for expr in [*_exprs_in_rules(), *_exprs_in_dashboard()] for name in metric_names(expr)
    }
    with bound_socket() as closed, bound_socket() as probe:
        admin_port = probe.getsockname()[1]
        port = closed.getsockname()[1]
        probe.close()
        async with envoy_for(
            tmp_path, authz_port=port, adapter_port=port, admin_port=admin_port
        ) as envoy:
            diag = await listener_port(envoy.admin, "diag")
            response = await raw_request(diag, "GET", "/metrics")
    assert response.status == 200
    # Series names as served (Envoy's counters carry no `_total`, so no parser renaming here).
    envoy_names = set(_SERIES.findall(response.body.decode()))
    known = our_metrics() | envoy_names | ISTIO_METRICS | PROMETHEUS_METRICS
    assert sorted(queried - known) == []
    assert {n for n in queried if n.startswith("envoy_")} <= envoy_names


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower-cased, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    """Each alert's runbook_url is a section of docs/runbooks.md (the chart prefixes the
    operator's base URL); the page has a section for each anchor."""
    anchors = _anchors(RUNBOOKS.read_text())
    for rule in _rules():
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/runbooks.md", rule["alert"]
        assert anchor in anchors, rule["alert"]


def test_the_rules_copies_are_the_rules_file_as_it_is(tmp_path: Path) -> None:
    """The PrometheusRules of deploy/kubernetes and the chart's files/alerts.yaml are what
    deploy/monitoring/sync-rules writes now: edit alerts.yaml, and this fails until it is run."""
    subprocess.run([sys.executable, str(MONITORING / "sync-rules"), str(tmp_path)], check=True)
    deploy = REPO / "deploy"
    for relative in SYNCED:
        assert (tmp_path / relative).read_text() == (deploy / relative).read_text(), relative


def test_the_edge_5xx_alert_leaves_out_the_callers_508() -> None:
    """Both 5xx alerts (our Envoy's, Istio mode's) take 508 loop_detected away: a caller's loop
    refused is not the edge failing."""
    by_name = {rule["alert"]: str(rule["expr"]) for rule in _rules()}
    assert 'reason="loop_detected"' in by_name["OrreryEdgeServerErrors"]
    assert 'response_code!="508"' in by_name["OrreryIstioServerErrors"]
