"""In headless Chromium: a large report pages its rows and reads its records only when asked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopscribe import Execution, Session
from loopscribe import events as ev
from loopscribe.otel import span_id, trace_id
from loopscribe.viewer import write_report

from .test_browser import no_console_errors, until, wait_for
from .test_report import embedded

pytestmark = pytest.mark.slow

CALLS = 700


def record_many(path: Path) -> tuple[str, str]:
    """One run of ``CALLS`` tool calls; the last one fails."""
    t0 = datetime.now(UTC) - timedelta(seconds=CALLS)
    with (
        Session.create(path, metadata={"title": "many calls"}) as session,
        session.begin_run(timestamp=t0) as run,
    ):
        for i in range(CALLS):
            ex = Execution(f"call_{i}", "tool")
            at = t0 + timedelta(seconds=i)
            run.record(ev.tool_exec_start(ex, "lookup", {"key": i}, timestamp=at))
            failed = i == CALLS - 1
            run.record(
                ev.tool_exec_end(
                    ex,
                    "lookup",
                    f"value of key {i} " + "x" * 2_000,
                    error={"type": "KeyError", "message": f"no key {i}"} if failed else None,
                    timestamp=at + timedelta(milliseconds=500),
                )
            )
        return session.id, run.id


def test_a_large_report_pages_rows_and_loads_records_on_demand(
    tmp_path: Path, browser: Any
) -> None:
    """300 rows a page; an error chip opens the page of its bar; records arrive when selected."""
    from selenium.webdriver.common.by import By

    path = tmp_path / "many.jsonl"
    session_id, run_id = record_many(path)
    report = write_report(path, tmp_path / "report.html")
    html = report.read_text()
    assert html.count('type="application/gzip"') > 1  # the records are in several chunks
    assert "x" * 2_000 not in html  # compressed: no whole body is in the page as text
    # The data before the script holds the first 300 rows; the others follow it.
    (run,) = embedded(html)["runs"]
    assert len(run["rows"]) == 300
    assert run["rows_element"] == "ls-rows-0"
    assert '<script type="application/json" id="ls-rows-0">' in html
    browser.get(report.as_uri())
    wait_for(browser, ".tl-row[data-exec]")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".tl-row[data-exec]")) == 300
    assert f"rows 1\u2013300 of {CALLS:,}" in browser.find_element(By.CSS_SELECTOR, ".pager").text
    # Nothing decompressed yet: no records drawn until a bar is selected.
    assert not browser.find_elements(By.CSS_SELECTOR, "#details .rec")
    browser.find_element(By.CSS_SELECTOR, '.tl-row[data-exec="call_5"] .bar').click()
    end = wait_for(browser, '#details .rec[data-type="tool_exec_end"]')
    assert "value of key 5 " in end.text
    # The failed call is on the last page: its chip goes there and shows its records.
    browser.find_element(By.CSS_SELECTOR, ".tl-errors .err-chip").click()
    until(
        browser,
        lambda d: d.find_elements(
            By.CSS_SELECTOR, f'.tl-row[data-exec="call_{CALLS - 1}"] .bar.selected'
        ),
    )
    assert (
        f"rows 601\u2013{CALLS} of {CALLS:,}"
        in browser.find_element(By.CSS_SELECTOR, ".pager").text
    )
    end = wait_for(browser, '#details .rec[data-type="tool_exec_end"] .error-box')
    assert f"no key {CALLS - 1}" in end.text
    browser.find_element(By.CSS_SELECTOR, '[data-page="prev"]').click()
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '.tl-row[data-exec="call_300"]'))
    # A deep link to a bar on a page whose rows follow the script.
    span = f"{span_id(session_id, run_id, 'call_650', 1):016x}"
    browser.get("about:blank")  # a fresh load, not a change of the fragment
    browser.get(f"{report.as_uri()}#/trace/{trace_id(session_id, run_id):032x}/span/{span}")
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'.bar.selected[data-span="{span}"]'))
    end = wait_for(browser, '#details .rec[data-type="tool_exec_end"]')
    assert "value of key 650 " in end.text
    no_console_errors(browser)
