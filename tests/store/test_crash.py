"""Crash safety: SIGKILL a real shipper process at random points, rerun, compare byte for byte."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopscribe import Session, Workspace, verify
from loopscribe.store import Shipper, Store

from .conftest import child_env, converse

CHILD = """
import sys
from loopscribe.store import Shipper
shipper = Shipper(sys.argv[1], sys.argv[2], workers=2, segment_bytes=1500)
print("ready", flush=True)
shipper.ship_once()
print("done", flush=True)
"""


def _kill_at_random(src: Path, url: str, delay_s: float) -> None:
    """Start a shipper and SIGKILL it ``delay_s`` after it is ready (mid-pass, mostly)."""
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(src), url], stdout=subprocess.PIPE, env=child_env()
    ) as child:
        assert child.stdout is not None
        try:
            assert child.stdout.readline() == b"ready\n"
            time.sleep(delay_s)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()


@pytest.mark.slow
def test_killed_shipper_rerun_leaves_the_store_equal_to_the_source(
    tmp_path: Path, store_url: str
) -> None:
    """Sessions grow between kills; after a clean pass every store copy equals its file."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    ws = Workspace(tmp_path / "src")
    ids = []
    for n in range(4):
        with ws.create(title=f"s{n}", chain=n % 2 == 0) as s:
            converse(s, 10 + 5 * n, size=rng.randrange(50, 400))
            ids.append(s.id)
    rounds = 3 if store_url.startswith("file:") else 2
    for r in range(rounds):
        for sid in rng.sample(ids, 2):
            with Session.open(ws.path(sid)) as s:
                converse(s, rng.randrange(1, 8), size=rng.randrange(10, 600), tag=f"r{r} ")
        _kill_at_random(ws.root, store_url, rng.uniform(0.0, 0.4))
    result = Shipper(ws.root, store_url).ship_once()
    assert not result.errors, f"seed {seed}: {result.errors}"
    store = Store(store_url)
    for sid in ids:
        source = ws.path(sid).read_bytes()
        view = store.session(sid)
        assert view.size == len(source), f"seed {seed}"
        assert view.pread(len(source), 0) == source, f"seed {seed}"
        # Nothing stored twice: the session folder holds exactly the chain of segments.
        listed = store.fs.ls(f"{store.root}/sessions/{sid}", detail=True, refresh=True)
        segments = [e for e in listed if str(e["name"]).endswith(".jsonl")]
        assert sum(int(e["size"]) for e in segments) == len(source), f"seed {seed}"
        if ids.index(sid) % 2 == 0:
            assert verify(f"{store_url}/sessions/{sid}").ok, f"seed {seed}"
    # And a pass after that has nothing to do.
    assert Shipper(ws.root, store_url).ship_once().bytes_uploaded == 0
