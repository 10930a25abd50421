"""Another process running a short script, told when to go on: a writer beside the test.

Also how to run a process that file modes hold back even when the tests run as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import IO

import pytest


class Scripted:
    """A running script that reads a line from stdin at each point where it waits."""

    def __init__(self, process: subprocess.Popen[str], stdin: IO[str], stdout: IO[str]) -> None:
        self.process = process
        self._stdin = stdin
        self._stdout = stdout

    def go(self) -> None:
        """Let the script go on past the line it waits for."""
        self._stdin.write("go\n")
        self._stdin.flush()

    def said(self) -> str:
        """The next line the script printed."""
        return self._stdout.readline().strip()


@contextlib.contextmanager
def scripted(script: str, *args: str) -> Iterator[Scripted]:
    """Run ``script`` in a fresh interpreter; yield once it printed ``ready``.

    The process is killed on the way out, whether or not it ended.
    """
    with subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            agent = Scripted(process, process.stdin, process.stdout)
            assert agent.said() == "ready"
            yield agent
        finally:
            process.kill()


READ_OVERRIDE = ("setpriv", "--bounding-set=-dac_override,-dac_read_search", "--")
"""Runs a command held to file modes even as root: without these two capabilities,
root no longer reads every file."""


def held_to_file_modes(argv: list[str]) -> list[str]:
    """``argv`` run so that a file of mode 000 cannot be read, also when the tests run as root.

    Skips the test when running as root without setpriv (util-linux).
    """
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("root reads every file, and setpriv (util-linux) is not here to stop that")
    return [*READ_OVERRIDE, *argv]
