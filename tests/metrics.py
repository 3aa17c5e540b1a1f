"""Reading a Prometheus `/metrics` endpoint the way a scraper would, for tests."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


async def metric(url: str, name: str, **labels: str) -> float:
    """The sum of every sample named `name` that `url` exposes now: over all label sets, or over
    those with these `labels`."""
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(url)).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )
