"""Where ``fcntl`` is missing (Windows), loopscribe reads; writing says it cannot.

A subprocess simulates such a platform: a ``sitecustomize`` puts a finder in
front of ``sys.meta_path`` that refuses ``fcntl`` (and forgets it if the
interpreter loaded it already).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson

from loopscribe import read

from .test_cli import record_demo

BLOCKER = """
import sys

class _NoFcntl:
    def find_spec(self, name, path=None, target=None):
        if name == "fcntl":
            raise ModuleNotFoundError("No module named 'fcntl'", name="fcntl")
        return None

sys.modules.pop("fcntl", None)
sys.meta_path.insert(0, _NoFcntl())
"""


def without(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python that cannot import fcntl."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    src = Path(__file__).parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(src)])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_reading_works_without_fcntl(tmp_path: Path) -> None:
    """import, read, ls, show, find, stats, report and export: no fcntl needed."""
    session = record_demo(tmp_path / "s.jsonl")
    seq = next(r.seq for r in read(tmp_path / "s.jsonl") if r.type == "tool_exec_end")
    done = without(
        tmp_path,
        f"""
        import sys, json
        try:
            import fcntl
        except ImportError:
            pass
        else:
            raise SystemExit("the blocker did not block fcntl")
        import loopscribe
        import loopscribe._locks
        from loopscribe.cli import main
        assert not loopscribe._locks.HAVE_LOCKS
        records = list(loopscribe.read("s.jsonl"))
        codes = [
            main(["--json", "ls", "."]),
            main(["--json", "show", "{session.id[:8]}", "--dir", "."]),
            main(["--json", "find", "s.jsonl#seq={seq}"]),
            main(["--json", "stats", "s.jsonl"]),
            main(["--json", "report", "s.jsonl", "-o", "r.html"]),
            main(["--json", "export", "s.jsonl"]),
            main(["--json", "tail", "s.jsonl"]),
        ]
        print(json.dumps({{"records": len(records), "codes": codes}}))
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    result = orjson.loads(done.stdout.splitlines()[-1])
    assert result["codes"] == [0] * 7, done.stderr
    assert result["records"] == len(list(read(tmp_path / "s.jsonl")))
    assert (tmp_path / "r.html").is_file()
    assert (tmp_path / "s.jsonl.otlp.jsonl").is_file()


def test_writing_without_fcntl_says_it_cannot(tmp_path: Path) -> None:
    """Session.create and an import refuse with one line naming the platform, and leave
    no file behind."""
    done = without(
        tmp_path,
        """
        import loopscribe
        try:
            loopscribe.Session.create("new.jsonl")
        except loopscribe.UnsupportedPlatformError as exc:
            print(exc)
        else:
            raise SystemExit("Session.create wrote without a lock")
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "needs POSIX file locks (fcntl)" in done.stdout
    assert "Linux or macOS" in done.stdout
    assert not (tmp_path / "new.jsonl").exists()
