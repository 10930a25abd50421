"""Coverage-guided fuzzing of the reader with atheris (libFuzzer).

Every input is written as a session file and given to ``read`` (touching
each record's data) and to ``Session.open``. Only loopscribe's documented
errors may come out; anything else is a crash that libFuzzer reports with
the input that caused it.

    .venv/bin/python fuzz/read_fuzzer.py -max_total_time=60
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from loopscribe import LoopscribeError, Session, read

logging.disable(logging.WARNING)  # open() logs each repaired tail; millions of runs
_FOLDER = tempfile.mkdtemp(prefix="loopscribe-fuzz-")
_PATH = os.path.join(_FOLDER, "s.jsonl")
_HEADER = b'{"session_id":"' + b"a" * 32 + b'","seq":0,"type":"session_start",'
_HEADER += b'"ts":"2026-01-01T00:00:00.000000Z","data":{"format_version":1}}\n'


def test_one_input(data: bytes) -> None:
    """Read and open one file: the raw input, or a valid first line followed by it."""
    for content in (data, _HEADER + data):
        with open(_PATH, "wb") as f:
            f.write(content)
        with contextlib.suppress(LoopscribeError):
            for record in read(_PATH):
                dict(record.data)
        with contextlib.suppress(LoopscribeError):
            Session.open(_PATH).close()
        os.unlink(_PATH)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
