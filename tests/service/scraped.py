"""``/metrics`` of a real server as Prometheus reads it: prometheus_client's own parser of the text format, and the
rules of the format a scraper relies on."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.service.real_server import HTTP

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base: str) -> tuple[Series, int]:
    """Every sample of ``/metrics`` by name and labels, and the answer's size, once the text format's rules a scraper
    relies on are checked: each family described and typed, no sample twice, each histogram's buckets cumulative up
    to ``+Inf``, which equals its ``_count``."""
    text = HTTP.get(f"{base}/metrics").text
    series: Series = {}
    for family in text_string_to_metric_families(text):
        assert family.documentation and family.type in ("counter", "gauge", "histogram"), family
        buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in series, key
            series[key] = sample.value
            if sample.name.endswith("_bucket"):
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
                buckets.setdefault(labels, []).append((float(sample.labels["le"]), sample.value))
        for labels, counts in buckets.items():
            counts.sort()
            assert [count for _, count in counts] == sorted(count for _, count in counts), (family.name, labels)
            assert counts[-1] == (float("inf"), series[(f"{family.name}_count", labels)]), (family.name, labels)
    return series, len(text)


def never_less(before: Series, after: Series) -> None:
    """Counters and histograms only add up: no sample of theirs gone or lower."""
    lower = {
        key: (value, after.get(key))
        for key, value in before.items()
        if key[0].endswith(("_total", "_bucket", "_count", "_sum")) and not after.get(key, -1.0) >= value
    }
    assert lower == {}


def shard_failures(base: str) -> dict[tuple[str, str], float]:
    """``embedding_shard_failures_total`` of a front by (table, shard)."""
    return {
        (dict(labels)["table"], dict(labels)["shard"]): value
        for (name, labels), value in scrape(base)[0].items()
        if name == "embedding_shard_failures_total"
    }
