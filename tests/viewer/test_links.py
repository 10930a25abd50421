"""The links in collector-config/ lead from a real span to its records in the viewer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote, urlsplit

from starlette.testclient import TestClient

from loopscribe.cli._viewer import DEFAULT_PORT
from loopscribe.otel import replay
from loopscribe.testing import captured_spans
from loopscribe.viewer import create_app

from .conftest import Demo

CONFIG = Path(__file__).parents[2] / "collector-config"


def exported_spans(demo: Demo) -> dict[str, dict[str, object]]:
    """The demo's spans as a backend holds them: hex IDs and attributes, by execution."""
    captured = captured_spans()
    replay(demo.path, captured.processor)
    out: dict[str, dict[str, object]] = {}
    for span in captured.exporter.get_finished_spans():
        assert span.context is not None
        assert span.attributes is not None
        key = str(span.attributes.get("loopscribe.execution.id", "<run>"))
        out[key] = {
            "traceID": f"{span.context.trace_id:032x}",
            "spanID": f"{span.context.span_id:016x}",
            **span.attributes,
        }
    return out


def local(url: str) -> str:
    """The path and query of a link to the viewer's default address."""
    parts = urlsplit(url)
    assert (parts.hostname, parts.port) == ("127.0.0.1", DEFAULT_PORT)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def test_grafana_correlation_opens_the_span(demo: Demo) -> None:
    """Tempo's correlation URL, filled from a tool span, selects that tool's bar."""
    text = (CONFIG / "grafana/provisioning/datasources/tempo.yaml").read_text()
    match = re.search(r"url: (http://\S+/trace/\$\$\{traceID\}/span/\$\$\{spanID\})", text)
    assert match is not None, "the Tempo data source has no loopscribe correlation"
    span = exported_spans(demo)["call_search"]
    url = match[1].replace("$${traceID}", str(span["traceID"]))
    url = url.replace("$${spanID}", str(span["spanID"]))
    with TestClient(create_app(demo.path.parent), base_url="http://127.0.0.1") as client:
        response = client.get(local(url), follow_redirects=False)
    assert response.status_code == 302
    assert response.headers["location"].endswith(f"?span={demo.span_hex('call_search')}")


def test_jaeger_link_patterns_open_the_run_and_the_execution(demo: Demo) -> None:
    """Every Jaeger link pattern, filled from span tags as Jaeger UI does, resolves."""
    patterns = json.loads((CONFIG / "jaeger-ui.json").read_text())["linkPatterns"]
    spans = exported_spans(demo)
    retry = spans["model_2"] if spans["model_2"]["loopscribe.attempt"] == 2 else None
    assert retry is not None

    def fill(template: str, values: dict[str, object]) -> str:
        def one(m: re.Match[str]) -> str:
            name = m[1].removeprefix("trace.")
            return quote(str(values[name]), safe="")

        return re.sub(r"#\{([^}]+)\}", one, template)

    with TestClient(create_app(demo.path.parent), base_url="http://127.0.0.1") as client:
        for pattern in patterns:
            response = client.get(local(fill(pattern["url"], retry)))
            assert response.status_code == 200, pattern
            if pattern.get("key") == "loopscribe.execution.id":
                assert f'"select":"{demo.span_hex("model_2", 2)}"' in response.text
