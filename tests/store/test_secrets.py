"""Credentials in a store URL are never shown or written; artifact symlinks are never followed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import orjson
import pytest

from loopscribe import Workspace
from loopscribe.store import Shipper, cursor_path
from loopscribe.store._mirror import Mirror

from .conftest import child_env, converse, store_keys

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzz"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"


def _forms(secret: str) -> list[str]:
    """A secret as it may leak: plain, URL-encoded, JSON-escaped, or a piece a parser cut."""
    pieces = [p for p in secret.split("/") if len(p) >= 6]
    return [secret, urllib.parse.quote(secret, safe=""), secret.replace("/", "\\/"), *pieces]


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopscribe", *args],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=120,
        check=False,
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _session(tmp_path: Path) -> tuple[Workspace, str]:
    ws = Workspace(tmp_path / "src")
    with ws.create(title="secret-free") as s:
        converse(s, 2)
    return ws, s.id


def _assert_clean(text: str, *secrets: str) -> None:
    for secret in secrets:
        for form in _forms(secret):
            assert form not in text


@pytest.mark.parametrize(
    "shape",
    ["ftp://deploy:{secret}@127.0.0.1:{port}/agents", "s3://{key}:{secret}@bucket/agents"],
)
def test_a_url_with_credentials_is_never_printed(
    tmp_path: Path, shape: str, s3_env: dict[str, str]
) -> None:
    """ship and ls fail on such a URL with one line, and no form of the secret is in it."""
    ws, _sid = _session(tmp_path)
    url = shape.format(secret=SECRET, key=KEY_ID, port=_closed_port())
    env = {"FSSPEC_S3": orjson.dumps({"config_kwargs": {"retries": {"max_attempts": 1}}}).decode()}
    for args in (["ship", str(ws.root), "--to", url], ["ls", url], ["--json", "ls", url]):
        done = _cli(args, env)
        assert done.returncode == 1
        _assert_clean(done.stdout + done.stderr, SECRET, KEY_ID)
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (
        not cursor_path(ws.path(_sid)).exists()
        or SECRET not in cursor_path(ws.path(_sid)).read_text()
    )


def test_a_query_token_reaches_no_output_cursor_or_manifest(tmp_path: Path) -> None:
    """A store URL with a token ships; the token is in no output, cursor or stored object."""
    ws, sid = _session(tmp_path)
    token = "T0k3n/Secret+Value"
    url = f"{(tmp_path / 'store').as_uri()}?token={urllib.parse.quote(token, safe='')}"
    outputs = []
    for args in (
        ["ship", str(ws.root), "--to", url],
        ["--json", "ship", str(ws.root), "--to", url],
        ["ls", url],
        ["--json", "ls", url],
    ):
        done = _cli(args)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    listed = orjson.loads(outputs[3].splitlines()[0])
    done = _cli(["--json", "show", f"{url}/sessions/{sid}"])
    assert done.returncode == 0, done.stderr
    outputs.append(done.stdout + done.stderr)
    _assert_clean("\n".join(outputs), token)
    _assert_clean(cursor_path(ws.path(sid)).read_text(), token)
    store = next(p for p in tmp_path.iterdir() if p.name.startswith("store"))
    for path in store.rglob("*"):
        if path.is_file():
            _assert_clean(path.read_bytes().decode(errors="replace"), token)
    assert listed["path"].endswith(f"/sessions/{sid}")


def test_a_cursor_of_an_earlier_version_loses_its_credentials_and_its_read_bits(
    tmp_path: Path, folder_url: str
) -> None:
    """A cursor keyed by a URL with a password (0644) is rewritten without it, 0600."""
    ws, sid = _session(tmp_path)
    cursor = cursor_path(ws.path(sid))
    cursor.write_bytes(orjson.dumps({f"ftp://deploy:{SECRET}@host/x": {"bytes": 1}}))
    cursor.chmod(0o644)
    assert not Shipper(ws.root, folder_url).ship_once().errors
    _assert_clean(cursor.read_text(), SECRET)
    assert folder_url in orjson.loads(cursor.read_bytes())
    assert cursor.stat().st_mode & 0o777 == 0o600


def test_the_mirror_never_names_the_credentials(tmp_path: Path) -> None:
    """Opening a copy of an unreachable store with a password fails in one line without it."""
    from loopscribe import StoreError

    url = f"ftp://deploy:{SECRET}@127.0.0.1:{_closed_port()}/agents"
    with pytest.raises(StoreError) as info:
        Mirror(url, tmp_path / "cache")
    _assert_clean(str(info.value), SECRET)
    assert "\n" not in str(info.value)


def test_symlinked_artifacts_are_refused_not_followed(tmp_path: Path, folder_url: str) -> None:
    """A link to a file, a linked folder, and a linked artifacts folder: one line each, no copy."""
    ws, sid = _session(tmp_path)
    private = tmp_path / "home"
    (private / "keys").mkdir(parents=True)
    (private / "credentials").write_text(f"aws_secret_access_key = {SECRET}\n")
    (private / "keys" / "id").write_text(f"key {SECRET}\n")
    artifacts = ws.artifact_dir(sid)
    artifacts.mkdir()
    (artifacts / "report.md").write_text("# fine")
    (artifacts / "creds.txt").symlink_to(private / "credentials")
    (artifacts / "keys").symlink_to(private / "keys")
    result = Shipper(ws.root, folder_url).ship_once()
    assert len(result.errors) == 2
    assert any("creds.txt" in e and "symbolic link" in e for e in result.errors)
    assert any("keys" in e and "symbolic link" in e for e in result.errors)
    assert all("\n" not in e for e in result.errors)
    assert [a.name for a in Workspace(folder_url).artifacts(sid)] == ["report.md"]
    store = Path(folder_url.removeprefix("file://"))
    for path in store.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_bytes().decode(errors="replace")
    # The whole artifacts folder a link: refused as well.
    other = Workspace(tmp_path / "other")
    with other.create() as s:
        converse(s, 1)
    os.symlink(private, other.artifact_dir(s.id))
    result = Shipper(other.root, folder_url).ship_once()
    assert len(result.errors) == 1
    assert "symbolic link" in result.errors[0]
    assert not any(k.startswith(f"sessions/{s.id}/artifacts") for k in store_keys(folder_url))
