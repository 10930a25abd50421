"""References that resolve anywhere: ref_base, and a span's link opened on another machine."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loopscribe import Workspace, read
from loopscribe.cli import main
from loopscribe.otel import SpanBridge, replay
from loopscribe.testing import captured_spans

from ..otlp_receiver import http_receiver
from .conftest import child_env, converse

OUTPUT_REF = "gen_ai.output.messages_ref"


def _one_session(tmp_path: Path) -> tuple[Workspace, str]:
    ws = Workspace(tmp_path / "src")
    with ws.create(title="linked") as s:
        converse(s, 2)
        sid = s.id
    return ws, sid


def test_ref_base_store_url_names_the_shipped_location(tmp_path: Path) -> None:
    """With a store URL, *_ref name <store>/sessions/<id>#seq=N and the run names the session."""
    ws, sid = _one_session(tmp_path)
    captured = captured_spans()
    replay(ws.path(sid), captured.processor, ref_base="s3://team/agents/")
    chats = captured.named("chat demo-1") or [
        s for s in captured.spans if s.name.startswith("chat")
    ]
    assert chats
    for span in chats:
        attrs = dict(span.attributes or {})
        assert "loopscribe.file" not in attrs  # each reference once: the refs name it
        assert str(attrs[OUTPUT_REF]).startswith(f"s3://team/agents/sessions/{sid}#seq=")
        seq = int(str(attrs[OUTPUT_REF]).rsplit("=", 1)[1])
        assert attrs["loopscribe.seq.first"] <= seq <= attrs["loopscribe.seq.last"]  # type: ignore[operator]
    run = next(s for s in captured.spans if s.name.startswith("invoke_agent"))
    assert dict(run.attributes or {})["loopscribe.file"] == f"s3://team/agents/sessions/{sid}"


def test_ref_base_template_names_a_viewer_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A template fills {session_id} and {seq}; LOOPSCRIBE_REF_BASE is the default."""
    ws, sid = _one_session(tmp_path)
    monkeypatch.setenv(
        "LOOPSCRIBE_REF_BASE", "https://viewer.example/session/{session_id}/record/{seq}"
    )
    captured = captured_spans()
    bridge = SpanBridge(captured.processor, file_uri=ws.path(sid))
    for record in read(ws.path(sid), decode=False):
        bridge(record)
    chat = next(s for s in captured.spans if s.name.startswith("chat"))
    attrs = dict(chat.attributes or {})
    assert str(attrs[OUTPUT_REF]).startswith(f"https://viewer.example/session/{sid}/record/")
    assert attrs["loopscribe.file"] == ws.path(sid).absolute().as_uri()  # the file stays named


def test_export_ref_base_reaches_the_exported_spans(tmp_path: Path) -> None:
    """`loopscribe export FILE --ref-base URL` writes the references into what it exports."""
    ws, sid = _one_session(tmp_path)
    assert main(["export", str(ws.path(sid)), "--ref-base", "gs://bucket/p"]) == 0
    exported = ws.path(sid).with_name(ws.path(sid).name + ".otlp.jsonl").read_text()
    assert f"gs://bucket/p/sessions/{sid}#seq=" in exported
    assert "file://" not in exported


def test_a_span_exported_on_one_machine_opens_on_another_from_the_store(
    tmp_path: Path,
    s3_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Export spans (OTLP over HTTP) and ship; with the source gone, find and show read S3."""
    ws, sid = _one_session(tmp_path)
    with http_receiver() as received:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", received.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        assert main(["export", str(ws.path(sid)), "--ref-base", s3_url]) == 0
        spans = received.spans()
    assert main(["ship", str(ws.root), "--to", s3_url]) == 0
    shutil.rmtree(ws.root)  # the pod is gone
    capsys.readouterr()

    chat = next(s for s in spans if s.name.startswith("chat"))
    attrs = {a.key: a.value.string_value or a.value.int_value for a in chat.attributes}
    ref = str(attrs[OUTPUT_REF])
    assert ref.startswith(f"{s3_url}/sessions/{sid}#seq=")
    seq = int(ref.rsplit("=", 1)[1])
    # A teammate: another process, another home and working folder, the same bucket.
    teammate = tmp_path / "teammate"
    teammate.mkdir()
    found = subprocess.run(
        [
            sys.executable,
            "-m",
            "loopscribe",
            "--json",
            "find",
            s3_url,
            "--trace-id",
            chat.trace_id.hex(),
            "--span-id",
            chat.span_id.hex(),
        ],
        capture_output=True,
        check=True,
        cwd=teammate,
        env=child_env({"HOME": str(teammate)}),
        timeout=60,
    )
    records = [orjson.loads(line) for line in found.stdout.splitlines()]
    assert seq in [r["seq"] for r in records]
    reply = next(r for r in records if r["seq"] == seq)
    assert "answer" in orjson.dumps(reply["data"]).decode()
    assert main(["--json", "show", ref, "--last", "1"]) == 0
    assert "answer 1" in capsys.readouterr().out
