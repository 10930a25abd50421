"""In headless Chromium: a trace backend's span link opens the tool's output; so does the report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopscribe.viewer import write_report

from .conftest import TOOL_OUTPUT, Demo, Server, record_demo

pytestmark = pytest.mark.slow

WAIT_SECONDS = 15


def wait_for(driver: Any, css: str) -> Any:
    """The first element matching ``css``, once the page's script has drawn it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_SECONDS).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, css)
    )[0]


def tool_output_shown(driver: Any, span: str) -> None:
    """The tool's bar is selected and its result body is in the details pane."""
    from selenium.webdriver.common.by import By

    end = wait_for(driver, '#details .rec[data-type="tool_exec_end"]')
    assert TOOL_OUTPUT in end.text
    selected = driver.find_elements(By.CSS_SELECTOR, ".bar.selected")
    assert [b.get_attribute("data-span") for b in selected] == [span]
    # The tool's arguments are there too, from its first record.
    start = driver.find_element(By.CSS_SELECTOR, '#details .rec[data-type="tool_exec_start"]')
    assert "opentelemetry genai conventions" in start.text
    # Every bar of the run is drawn: 11 attempts plus the run's own bar.
    assert len(driver.find_elements(By.CSS_SELECTOR, ".timeline .bar")) == 12


def no_console_errors(driver: Any) -> None:
    """Nothing the page did was refused (a CSP violation is a console error)."""
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_span_link_in_the_served_viewer(
    tmp_path: Path, browser: Any, serve: Callable[[Path], Server]
) -> None:
    """/trace/{trace_id}/span/{span_id} of a tool span shows the tool's output body."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    demo = record_demo(folder / "research.jsonl", big_output="page " * 20_000)
    server = serve(folder)
    span = demo.span_hex("call_search")
    browser.get(f"{server.url}/trace/{demo.trace_hex}/span/{span}")
    tool_output_shown(browser, span)
    assert browser.current_url.endswith(f"/session/{demo.session_id}/run/{demo.run_id}?span={span}")
    browser.save_screenshot(str(tmp_path / "viewer-timeline.png"))
    assert (tmp_path / "viewer-timeline.png").stat().st_size > 10_000

    # A large body arrives clipped; "load full body" fetches the whole line.
    from selenium.webdriver.common.by import By

    browser.find_element(
        By.CSS_SELECTOR, f'.bar[data-span="{demo.span_hex("call_fetch")}"]'
    ).click()
    button = wait_for(browser, '#details .rec[data-type="tool_exec_end"] button.more')
    assert "(100,000 in all)" in button.find_element(By.XPATH, "..").text
    button.click()
    wait_for(browser, '#details .rec[data-type="tool_exec_end"]:not(:has(button.more))')
    text = browser.find_element(By.CSS_SELECTOR, '#details .rec[data-type="tool_exec_end"] pre')
    assert len(text.get_attribute("textContent")) == 100_000
    no_console_errors(browser)


def test_span_link_in_the_report_opened_from_disk(demo: Demo, tmp_path: Path, browser: Any) -> None:
    """report.html works from file://, with the same deep link in its fragment."""
    report = write_report(demo.path, tmp_path / "report.html")
    span = demo.span_hex("call_search")
    browser.get(f"{report.as_uri()}#/trace/{demo.trace_hex}/span/{span}")
    tool_output_shown(browser, span)
    browser.save_screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 10_000
    no_console_errors(browser)
