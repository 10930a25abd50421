"""The team viewer: a store served through a local copy that fetches only what is new."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import orjson

from loopscribe import Session, Workspace
from loopscribe.store import Shipper
from loopscribe.store._mirror import Mirror

from .conftest import child_env, converse


def test_the_copy_fetches_only_new_segments(tmp_path: Path, store_url: str) -> None:
    """A sync copies each session byte for byte; the next one fetches just what was added."""
    ws = Workspace(tmp_path / "src")
    with ws.create(title="a") as s:
        converse(s, 3, size=300)
        sid = s.id
    (ws.artifact_dir(sid)).mkdir()
    (ws.artifact_dir(sid) / "report.md").write_text("# done")
    shipper = Shipper(ws.root, store_url, segment_bytes=2048)
    shipper.ship_once()
    mirror = Mirror(store_url, tmp_path / "cache")
    assert mirror.sync() == 1
    copy = tmp_path / "cache" / f"{sid}.jsonl"
    assert copy.read_bytes() == ws.path(sid).read_bytes()
    assert (tmp_path / "cache" / f"{sid}.artifacts" / "report.md").read_text() == "# done"
    before, fetched = ws.path(sid).stat().st_size, mirror.bytes_fetched
    with Session.open(ws.path(sid)) as s:
        converse(s, 1, tag="late ")
    shipper.ship_once()
    assert mirror.sync() == 1
    assert mirror.bytes_fetched - fetched == ws.path(sid).stat().st_size - before
    assert copy.read_bytes() == ws.path(sid).read_bytes()
    assert mirror.sync() == 0


def test_serve_a_store_behind_a_proxy_host(tmp_path: Path, folder_url: str) -> None:
    """`loopscribe serve URL --allow-host NAME` answers that Host, refuses others."""
    ws = Workspace(tmp_path / "src")
    with ws.create(title="team") as s:
        converse(s, 2)
        sid = s.id
    Shipper(ws.root, folder_url).ship_once()
    env = child_env({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    cmd = [sys.executable, "-m", "loopscribe", "--json", "serve", folder_url, "--port", "0"]
    cmd += ["--allow-host", "viewer.team.example"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else b""
            url = orjson.loads(line)["url"]
            page = httpx.get(
                f"{url}session/{sid}/record/3", headers={"Host": "viewer.team.example"}
            )
            assert page.status_code == 200
            assert sid in page.text
            local = httpx.get(f"{url}api/sessions")
            assert local.status_code == 200
            assert sid in local.text
            other = httpx.get(f"{url}api/sessions", headers={"Host": "evil.example"})
            assert other.status_code == 400
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def test_team_viewer_links_resolve_on_a_served_store(tmp_path: Path, folder_url: str) -> None:
    """collector-config/team-viewer links, filled from a span, open pages of the store's copy."""
    import json
    import re
    from urllib.parse import quote, urlsplit

    from starlette.testclient import TestClient

    from loopscribe.otel import replay
    from loopscribe.testing import captured_spans
    from loopscribe.viewer import create_app

    config = Path(__file__).parents[2] / "collector-config" / "team-viewer"
    ws = Workspace(tmp_path / "src")
    with ws.create(title="team") as s:
        converse(s, 2)
        sid = s.id
    Shipper(ws.root, folder_url).ship_once()
    mirror = Mirror(folder_url, tmp_path / "cache")
    mirror.sync()
    captured = captured_spans()
    replay(ws.path(sid), captured.processor, ref_base=folder_url)
    span = next(s for s in captured.spans if s.name.startswith("chat"))
    assert span.context is not None
    values: dict[str, object] = {
        "traceID": f"{span.context.trace_id:032x}",
        "spanID": f"{span.context.span_id:016x}",
        **(span.attributes or {}),
    }

    def fill(template: str) -> str:
        return re.sub(r"#\{([^}]+)\}", lambda m: quote(str(values[m[1]]), safe=""), template)

    app = create_app(mirror.cache, allowed_hosts=("viewer.example",))
    urls = [
        fill(p["url"]) for p in json.loads((config / "jaeger-ui.json").read_text())["linkPatterns"]
    ]
    grafana = re.search(r"url: (https://\S+)", (config / "grafana-tempo.yaml").read_text())
    assert grafana is not None
    urls.append(
        grafana[1]
        .replace("$${traceID}", str(values["traceID"]))
        .replace("$${spanID}", str(values["spanID"]))
    )
    with TestClient(app, base_url="https://viewer.example") as client:
        for url in urls:
            parts = urlsplit(url)
            assert parts.hostname == "viewer.example"
            response = client.get(parts.path + (f"?{parts.query}" if parts.query else ""))
            assert response.status_code == 200, url
