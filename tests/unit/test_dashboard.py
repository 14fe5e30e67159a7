"""The Grafana dashboard can only show what the code exports: every PromQL expression parses,
names a metric defined in shared/metrics.py, and groups or filters by labels it has."""

import json
from pathlib import Path

import promql_parser

from zapomni.shared import metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "grafana" / "dashboards" / "zapomni.json").read_text())
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> dict[str, set[str]]:
    """Sample name -> its labels, for every metric the code defines."""
    names = {}
    for metric in metrics.ALL:
        family = next(iter(metric.describe()))
        labels = set(metric._labelnames)
        for suffix in SUFFIXES[family.type]:
            names[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return names


def walk(node):
    yield node
    for attr in ("lhs", "rhs", "expr", "vector_selector", "param"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, int | float | str):
            yield from walk(child)
    for arg in getattr(node, "args", None) or []:
        yield from walk(arg)


def expressions() -> list[str]:
    return [t["expr"] for p in DASHBOARD["panels"] for t in p["targets"]]


def test_every_expression_parses_and_uses_exported_metrics_and_labels():
    names = exported()
    for expr in expressions():
        tree = promql_parser.parse(expr)
        selectors = [n for n in walk(tree) if isinstance(n, promql_parser.VectorSelector)]
        assert selectors, expr
        labels = set()
        for selector in selectors:
            assert selector.name in names, (selector.name, expr)
            labels |= names[selector.name]
            for matcher in selector.matchers.matchers:
                assert matcher.name in names[selector.name], (matcher.name, expr)
        for node in walk(tree):
            if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
                assert set(node.modifier.labels) <= labels, (node.modifier.labels, expr)


def test_the_dashboard_shows_what_an_operator_watches():
    used = " ".join(expressions())
    for name in ("zapomni_chunks_embedded_total", "zapomni_queue_depth",
                 "zapomni_queue_oldest_age_seconds", "zapomni_stage_seconds_bucket",
                 "zapomni_search_seconds_bucket", "zapomni_embed_request_seconds_bucket",
                 "zapomni_embed_in_flight", "zapomni_jobs_total", "zapomni_tool_calls_total",
                 "zapomni_workers_alive", "zapomni_tasks"):
        assert name in used, name
    assert all(p["title"] and p["description"] for p in DASHBOARD["panels"])
    uids = {t["datasource"]["uid"] for p in DASHBOARD["panels"] for t in p["targets"]}
    datasource = (ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text()
    assert uids == {"prometheus"} and "uid: prometheus" in datasource


def test_metric_names_follow_the_house_rules():
    for metric in metrics.ALL:
        family = next(iter(metric.describe()))
        assert family.name.startswith("zapomni_")
        assert family.type != "histogram" or family.name.endswith("_seconds") or \
            family.name == "zapomni_search_candidates"
