"""In headless Chromium: the session list, the conversation, zoom, and a span's deep link.

Set ``LOOPSCRIBE_SCREENSHOTS=docs`` to keep the screenshots the README shows.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loopscribe.viewer import write_report

from .conftest import SUBAGENT_OUTPUT, TOOL_OUTPUT, Demo, Server, record_chat, record_demo

pytestmark = pytest.mark.slow

WAIT_SECONDS = 15
POLL_SECONDS = 0.05


def until(driver: Any, condition: Callable[[Any], Any]) -> Any:
    """What ``condition(driver)`` returns once it is true (checked every 50 ms, not 500)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_SECONDS, poll_frequency=POLL_SECONDS).until(condition)


def choose(driver: Any, select_id: str, option: str | int) -> None:
    """Pick ``option`` (visible text or index) in a select the page may redraw meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    def picked(d: Any) -> bool:
        try:
            select = Select(d.find_element(By.ID, select_id))
            if isinstance(option, int):
                select.select_by_index(option)
            else:
                select.select_by_visible_text(option)
        except StaleElementReferenceException:  # redrawn between finding and picking: again
            return False
        return True

    until(driver, picked)


def wait_for(driver: Any, css: str) -> Any:
    """The first element matching ``css``, once the page's script has drawn it."""
    from selenium.webdriver.common.by import By

    return until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, css))[0]


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


def screenshot(driver: Any, tmp_path: Path, name: str) -> Path:
    """Save a screenshot (and keep it in ``$LOOPSCRIBE_SCREENSHOTS`` when that is set)."""
    path = tmp_path / name
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    keep = os.environ.get("LOOPSCRIBE_SCREENSHOTS")
    if keep:
        shutil.copy(path, Path(keep) / name)
    return path


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
    screenshot(browser, tmp_path, "viewer-timeline.png")

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
    # Folding works in the report too (it holds every row and folds them itself).
    from selenium.webdriver.common.by import By

    rows = len(browser.find_elements(By.CSS_SELECTOR, ".tl-row[data-exec]"))
    browser.find_element(By.CSS_SELECTOR, '.tl-row[data-exec="turn_2"] button.twisty').click()
    wait_for(browser, '.tl-row[data-exec="turn_2"] .folded')
    assert len(browser.find_elements(By.CSS_SELECTOR, ".tl-row[data-exec]")) == rows - 2
    # An error chip opens what the fold hid.
    browser.find_element(By.CSS_SELECTOR, ".tl-errors .err-chip").click()
    wait_for(browser, f'.bar.selected[data-span="{demo.span_hex("model_2", 1)}"]')
    no_console_errors(browser)


def nested_folder(tmp_path: Path) -> tuple[Path, Demo, Demo]:
    from loopscribe.importers.claude_code import import_transcript

    root = tmp_path / "sessions"
    (root / "team-a" / "2026").mkdir(parents=True)
    (root / "team-b").mkdir()
    research = record_demo(root / "team-a" / "2026" / "research.jsonl")
    chat = record_chat(root / "team-b" / "chat.jsonl")
    transcripts = Path(__file__).parents[1] / "data" / "transcripts" / "claude-code"
    import_transcript(transcripts / "subagent.jsonl", root / "imported", finished=False)
    return root, research, chat


def listed(driver: Any) -> list[str]:
    """The IDs of the sessions the list shows, sorted; read in one script, so a redraw
    cannot come between finding the rows and reading them (nor 100 round trips)."""
    rows: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll('table.sessions tbody tr'),"
        " function (r) { return r.getAttribute('data-session'); });"
    )
    return sorted(rows)


def test_session_list_search_and_filters(
    tmp_path: Path, browser: Any, serve: Callable[[Path], Server]
) -> None:
    """Nested sessions are listed; the server's search and filters narrow the list, in the URL."""
    from selenium.webdriver.common.by import By

    root, research, chat = nested_folder(tmp_path)
    server = serve(root)
    browser.get(server.url + "/")
    wait_for(browser, "table.sessions tbody tr")
    everything = listed(browser)
    assert len(everything) == 3
    assert "3 sessions" in browser.find_element(By.ID, "count").text
    screenshot(browser, tmp_path, "viewer-sessions.png")

    search = browser.find_element(By.ID, "q")
    search.send_keys("research demo")  # a title
    shows(browser, [research.session_id])
    assert "q=research%20demo" in browser.current_url
    search.clear()
    search.send_keys("git_log")  # a tool name
    shows(browser, [chat.session_id])
    search.clear()
    search.send_keys("gpt-mini")  # a model of the subagent only
    shows(browser, [chat.session_id])
    search.clear()
    # Text that only a record body holds: found by the server's search of the records.
    (imported,) = set(everything) - {research.session_id, chat.session_id}
    search.send_keys("sibling tool call errored")
    shows(browser, [imported])
    # The search is in the URL: a reload shows the same list.
    browser.refresh()
    wait_for(browser, "table.sessions tbody tr")
    assert browser.find_element(By.ID, "q").get_attribute("value") == "sibling tool call errored"
    assert listed(browser) == [imported]
    search = browser.find_element(By.ID, "q")
    search.clear()
    search.send_keys(" ")
    shows(browser, 3)

    choose(browser, "f-source", "claude-code")
    shows(browser, [imported])
    choose(browser, "f-source", 0)
    shows(browser, 3)
    choose(browser, "f-status", "idle")
    shows(browser, sorted([research.session_id, chat.session_id]))
    choose(browser, "f-status", 0)
    shows(browser, 3)
    browser.find_element(By.ID, "f-errors").click()
    shows(browser, 3)  # every one of them has a failed call
    assert "errors=1" in browser.current_url
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-session="{research.session_id}"]')
    assert "3.54 s" in row.text  # duration
    assert "3,974 / 223" in row.text  # tokens in / out
    no_console_errors(browser)


def text_of(driver: Any, css: str) -> str:
    """The text of the first element matching ``css``, read again if it was redrawn meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    while True:
        try:
            text: str = driver.find_element(By.CSS_SELECTOR, css).text
            return text
        except StaleElementReferenceException:
            continue


def shows(driver: Any, expected: list[str] | int) -> list[str]:
    """Wait until the list shows ``expected`` (these IDs, or this many rows); returns them."""

    def done(d: Any) -> bool:
        now = listed(d)
        return now == expected if isinstance(expected, list) else len(now) == expected

    until(driver, done)
    return listed(driver)


def test_session_list_pages_follow_indexing_and_show_problems(
    tmp_path: Path, browser: Any, serve_app: Callable[[Any], str]
) -> None:
    """A folder still being indexed fills in on its own; "next" pages through it, and through
    a search, by cursor; a problem with markup and control characters is shown as text."""
    import threading

    from selenium.webdriver.common.by import By

    from loopscribe.viewer import Catalog, create_app

    from .many_sessions import write_sessions

    ids = write_sessions(tmp_path / "s", 250)
    release = threading.Event()
    catalog = Catalog(tmp_path / "s", on_file=lambda _p: release.wait(60), list_wait=0)
    problem = "<img src=x onerror=alert(1)>\x1b[31m the store's copy failed"
    try:
        url = serve_app(create_app(tmp_path / "s", catalog=catalog, problems=lambda: [problem]))
        browser.get(url + "/")
        shown = problem.replace("\x1b", "\\u001b")
        wait_for(browser, "#problems li")
        assert text_of(browser, "#problems li") == shown
        assert not browser.find_elements(By.CSS_SELECTOR, "#problems img, img[src=x]")
        wait_for(browser, "#indexing")
        assert "of 250 session files read" in text_of(browser, "#indexing")
        release.set()
        # The page follows indexing: the rows arrive without a reload.
        first = shows(browser, 100)
        until(browser, lambda d: not d.find_elements(By.ID, "indexing"))
        assert sorted(first) == sorted(ids[150:])
        browser.find_element(By.CSS_SELECTOR, 'a[data-page="next"]').click()
        until(browser, lambda d: "cursor=" in d.current_url)
        second = shows(browser, 100)
        assert sorted(second) == sorted(ids[50:150])
        browser.find_element(By.CSS_SELECTOR, 'a[data-page="next"]').click()
        assert sorted(shows(browser, 50)) == sorted(ids[:50])
        assert not browser.find_elements(By.CSS_SELECTOR, 'a[data-page="next"]')
        browser.find_element(By.CSS_SELECTOR, 'a[data-page="first"]').click()
        assert sorted(shows(browser, 100)) == sorted(first)
        # A search is paged too, and "next" keeps it in the URL: "task 1" is in the titles of
        # sessions 1, 10 to 19 and 100 to 199, newest first.
        browser.find_element(By.ID, "q").send_keys("task 1")
        shows(browser, sorted(ids[100:200]))
        assert "q=task%201" in browser.current_url
        browser.find_element(By.CSS_SELECTOR, 'a[data-page="next"]').click()
        until(browser, lambda d: "cursor=" in d.current_url)
        assert "q=task%201" in browser.current_url
        shows(browser, sorted([ids[1], *ids[10:20]]))
        assert browser.find_element(By.ID, "q").get_attribute("value") == "task 1"
        assert not browser.find_elements(By.CSS_SELECTOR, 'a[data-page="next"]')
        assert text_of(browser, "#problems li") == shown  # after a page load, still there
        # The banner is on every page.
        browser.get(f"{url}/session/{ids[3]}")
        wait_for(browser, "#problems li")
        assert text_of(browser, "#problems li") == shown
        no_console_errors(browser)
    finally:
        release.set()
        catalog.close()


def test_conversation_view_links_each_item_to_its_record_and_bar(
    tmp_path: Path, browser: Any, serve: Callable[[Path], Server]
) -> None:
    """Messages as a chat; calls and results fold; thinking folded; a subagent is a thread."""
    from selenium.webdriver.common.by import By

    root, _research, chat = nested_folder(tmp_path)
    server = serve(root)
    browser.get(f"{server.url}/session/{chat.session_id}")
    wait_for(browser, ".convo .ci")
    user = browser.find_element(By.CSS_SELECTOR, ".convo .bubble.role-user")
    assert "Write the release notes" in user.text
    assert user.find_elements(By.CSS_SELECTOR, "img.thumb")  # the ImageContent
    assert "file:///repo/CHANGELOG.md" in user.text  # the FileContent, by reference
    thinking = browser.find_element(By.CSS_SELECTOR, ".convo details.thinking-block")
    assert thinking.get_attribute("open") is None  # folded
    assert "c2lnbmF0dXJl" not in browser.find_element(By.ID, "app").text  # never the signature
    # Each tool call once (from the assistant's message), folded; its result folded.
    calls = browser.find_elements(By.CSS_SELECTOR, ".convo details.call")
    names = [c.find_element(By.CSS_SELECTOR, ".tn").text for c in calls]
    assert names == ["git_log", "count_commits", "publish"]
    assert all(c.get_attribute("open") is None for c in calls)
    calls[0].find_element(By.TAG_NAME, "summary").click()
    assert "v1.2" in calls[0].find_element(By.CSS_SELECTOR, ".call-body").text
    # The failing call's result is open and says why (no error type: its text).
    failed = browser.find_element(By.CSS_SELECTOR, ".convo details.result.failed")
    assert failed.get_attribute("open") is not None
    assert "channel #releases is archived" in failed.text
    # The subagent's items sit in a nested thread.
    thread = browser.find_element(By.CSS_SELECTOR, '.convo details.thread[data-thread="sub_1"]')
    assert "summariser" in thread.find_element(By.TAG_NAME, "summary").text
    assert thread.find_elements(By.CSS_SELECTOR, ".bubble.role-assistant")
    assert SUBAGENT_OUTPUT in thread.get_attribute("textContent")
    # The Anthropic-shaped reply renders its text, with its thinking folded.
    last = browser.find_elements(By.CSS_SELECTOR, ".convo > .bubble.role-assistant")[-1]
    assert "Release notes drafted" in last.text
    screenshot(browser, tmp_path, "viewer-conversation.png")

    # The item's "timeline" link opens the run with its bar selected.
    span = chat.span_hex("call_publish")
    item = browser.find_element(By.CSS_SELECTOR, f'.ci-result[data-span="{span}"]')
    item.find_element(By.CSS_SELECTOR, "a.to-timeline").click()
    wait_for(browser, f'.bar.selected[data-span="{span}"]')
    wait_for(browser, '#details .rec[data-type="tool_exec_end"]')
    assert "channel #releases is archived" in browser.find_element(By.ID, "details").text
    # And "#seq" opens the record itself.
    browser.back()
    seq = wait_for(browser, f'.ci-result[data-span="{span}"]').get_attribute("data-seq")
    browser.find_element(
        By.CSS_SELECTOR, f'.ci-result[data-span="{span}"] .ci-links a[href$="/record/{seq}"]'
    ).click()
    heading = wait_for(browser, "main h1")
    assert heading.text == f"record {seq} · tool_exec_end"

    # An imported Codex session: its reasoning folded (never the encrypted blob).
    from loopscribe.importers.codex import import_transcript

    rollouts = sorted((Path(__file__).parents[1] / "data" / "transcripts" / "codex").glob("*"))
    codex = import_transcript(rollouts[0], root / "codex")
    browser.get(f"{server.url}/session/{codex.session_id}")
    reasoning = wait_for(browser, ".convo .ci-item details.thinking-block")
    reasoning.find_element(By.TAG_NAME, "summary").click()
    assert reasoning.find_element(By.TAG_NAME, "pre").text.startswith("**")  # its summary
    assert "gAAAA" not in browser.find_element(By.ID, "app").text
    assert browser.find_elements(By.CSS_SELECTOR, ".convo details.call")
    no_console_errors(browser)


def bar_width(driver: Any, span: str) -> float:
    from selenium.webdriver.common.by import By

    bar = driver.find_element(By.CSS_SELECTOR, f'.timeline .bar[data-span="{span}"]')
    return float(bar.rect["width"])


def test_timeline_zoom_pan_collapse_and_previews(
    tmp_path: Path, browser: Any, serve: Callable[[Path], Server]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    folder = tmp_path / "sessions"
    folder.mkdir()
    demo = record_demo(folder / "research.jsonl")
    server = serve(folder)
    browser.get(f"{server.url}/session/{demo.session_id}/run/{demo.run_id}")
    wait_for(browser, ".timeline .bar")
    # One line of content on each row: the arguments and result, the error's text.
    search_row = browser.find_element(By.CSS_SELECTOR, '.tl-row[data-exec="call_search"]')
    assert "opentelemetry genai conventions" in search_row.find_element(
        By.CSS_SELECTOR, ".tl-preview"
    ).get_attribute("textContent")
    failed = browser.find_element(By.CSS_SELECTOR, '.tl-row.failed[data-exec="call_py"]')
    assert "NameError" in failed.find_element(By.CSS_SELECTOR, ".tl-preview.err").text
    assert len(browser.find_elements(By.CSS_SELECTOR, ".tl-errors .err-chip")) == 2

    turn = demo.span_hex("turn_3")
    before = bar_width(browser, turn)
    zoom_in = browser.find_element(By.CSS_SELECTOR, 'button[data-zoom="in"]')
    zoom_in.click()
    zoom_in = browser.find_element(By.CSS_SELECTOR, 'button[data-zoom="in"]')
    zoom_in.click()
    assert "400%" in browser.find_element(By.CSS_SELECTOR, ".zoom-level").text
    # The window is centred; turn_3 ends the run, so pan right to reach it.
    timeline = browser.find_element(By.CSS_SELECTOR, ".timeline")
    browser.execute_script("arguments[0].focus()", timeline)
    for _ in range(8):
        timeline.send_keys(Keys.ARROW_RIGHT)
    after = bar_width(browser, turn)
    assert 3.0 < after / before < 5.0, (before, after)
    window = browser.find_element(By.CSS_SELECTOR, ".minimap .mm-window")
    assert "whole" not in (window.get_attribute("class") or "")
    minimap = browser.find_element(By.CSS_SELECTOR, ".minimap")
    assert 0.15 < window.rect["width"] / minimap.rect["width"] < 0.35
    screenshot(browser, tmp_path, "viewer-zoom.png")
    browser.find_element(By.CSS_SELECTOR, 'button[data-zoom="reset"]').click()
    assert abs(bar_width(browser, turn) - before) < 2

    # Folding turn_1 hides its three executions; unfolding brings them back.
    rows = len(browser.find_elements(By.CSS_SELECTOR, ".tl-row[data-exec]"))
    browser.find_element(By.CSS_SELECTOR, '.tl-row[data-exec="turn_1"] button.twisty').click()
    wait_for(browser, '.tl-row[data-exec="turn_1"] .folded')
    assert len(browser.find_elements(By.CSS_SELECTOR, ".tl-row[data-exec]")) == rows - 3
    assert not browser.find_elements(By.CSS_SELECTOR, '.tl-row[data-exec="call_search"]')
    browser.find_element(By.CSS_SELECTOR, '.tl-row[data-exec="turn_1"] button.twisty').click()
    wait_for(browser, '.tl-row[data-exec="call_search"]')
    # An error chip selects the failed attempt.
    browser.find_element(By.CSS_SELECTOR, ".tl-errors .err-chip").click()
    wait_for(browser, f'.bar.selected[data-span="{demo.span_hex("model_2", 1)}"]')
    # In a narrow window the failed bars stay visible and the failures listed.
    browser.set_window_size(640, 900)
    browser.refresh()
    wait_for(browser, ".timeline .bar")
    failed_bars = browser.find_elements(By.CSS_SELECTOR, ".timeline .bar.s-error")
    assert len(failed_bars) == 2
    assert all(b.is_displayed() and b.rect["width"] >= 5 for b in failed_bars)
    assert browser.find_element(By.CSS_SELECTOR, ".tl-errors").is_displayed()
    no_console_errors(browser)


def test_an_imported_call_shows_the_context_derived_from_the_conversation(
    tmp_path: Path, browser: Any, serve: Callable[[Path], Server]
) -> None:
    """An imported model call has no recorded messages; the page shows its derived context.

    The same messages the call's ``gen_ai.input.messages_ref`` resolves to: the
    compaction's summary, then what was committed after it, each linked to its
    record; on the run page, the record page and in the report.
    """
    from selenium.webdriver.common.by import By

    from loopscribe import read
    from loopscribe._timeline import load_timeline
    from loopscribe.importers.claude_code import import_transcript
    from loopscribe.otel import resolve_reference

    folder = tmp_path / "sessions"
    transcript = Path(__file__).parents[1] / "data" / "transcripts" / "claude-code"
    session = import_transcript(
        transcript / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl", folder, finished=True
    )
    path = next(folder.glob("*.jsonl"))
    records = list(read(path, decode=False))
    compaction = next(r.seq for r in records if r.type == "compaction")
    request = [r for r in records if r.type == "model_request"][-1]
    assert request.seq > compaction
    assert not request.data.get("messages")
    resolved = resolve_reference(path, request.seq)["gen_ai.input.messages"]
    committed = [
        r.seq for r in records if r.type == "message_end" and compaction < r.seq < request.seq
    ]
    assert len(resolved) == len(committed) + 1
    last_text = next(
        p["content"] for p in reversed(resolved[-1]["parts"]) if p.get("type") == "text"
    )
    timeline = load_timeline(path)
    run = timeline.runs[request.run_id or ""]
    bar = next(b for b in run.bars.values() if request.seq in b.seqs)
    span = f"{bar.span_id:016x}"

    def context_shown(css: str) -> None:
        context = wait_for(browser, css)
        text = context.get_attribute("textContent")
        assert "derived from the conversation" in text
        assert f"compaction at record #{compaction}" in text
        assert "continued from a previous conversation" in text  # the summary first
        assert last_text[:60] in text  # ... up to the last message before the call
        items = context.find_elements(By.CSS_SELECTOR, ".ctx-item")
        assert [int(i.get_attribute("data-seq")) for i in items] == [compaction, *committed]

    server = serve(folder)
    browser.get(f"{server.url}/session/{session.session_id}/run/{request.run_id}?seq={request.seq}")
    wait_for(browser, f'.bar.selected[data-span="{span}"]')
    context_shown('#details .rec[data-type="model_request"] .field.context')
    # Each message links to its record.
    link = browser.find_element(
        By.CSS_SELECTOR, f'#details .ctx-item[data-seq="{committed[-1]}"] a.mono'
    )
    assert link.get_attribute("href").endswith(f"/record/{committed[-1]}")
    screenshot(browser, tmp_path, "viewer-derived-context.png")

    browser.get(f"{server.url}/session/{session.session_id}/record/{request.seq}")
    context_shown('.rec[data-type="model_request"] .field.context')
    no_console_errors(browser)

    report = write_report(path, tmp_path / "report.html")
    browser.get(f"{report.as_uri()}#/trace/{run.trace_id:032x}/span/{span}")
    context_shown('#details .rec[data-type="model_request"] .field.context')
    no_console_errors(browser)


def record_priced(path: Path) -> tuple[str, str]:
    """Calls on two days: claude-sonnet-4-5 both days, a model without a price on the first."""
    from datetime import UTC, datetime

    from loopscribe import AssistantMessage, Execution, Session, TextContent, Usage
    from loopscribe import events as ev

    day1, day2 = datetime(2026, 3, 1, 9, tzinfo=UTC), datetime(2026, 3, 2, 9, tzinfo=UTC)
    calls = [
        ("claude-sonnet-4-5", day1, Usage(1_000, 1_000)),  # $0.003 + $0.015
        ("house-model-1", day1, Usage(500, 50)),  # no price: unknown
        ("claude-sonnet-4-5", day2, Usage(2_000, 0)),  # $0.006
    ]
    with Session.create(path) as session, session.begin_run() as run:
        for number, (model, at, usage) in enumerate(calls):
            ex = Execution(f"m{number}", "model")
            run.record(ev.model_exec_start(ex, model, provider="anthropic", timestamp=at))
            message = AssistantMessage((TextContent("ok"),), model=model, usage=usage)
            run.record(ev.model_exec_end(ex, message=message, usage=usage, timestamp=at))
    return session.id, run.id


def test_tokens_and_cost_per_day_chart_and_costs(
    tmp_path: Path, browser: Any, serve: Callable[[Path], Server]
) -> None:
    """The sessions page charts tokens per day and model, with costs; a call shows its own."""
    from selenium.webdriver.common.by import By

    from loopscribe.otel import span_id, trace_id

    folder = tmp_path / "sessions"
    folder.mkdir()
    session_id, run_id = record_priced(folder / "priced.jsonl")
    server = serve(folder)
    browser.get(server.url + "/")
    wait_for(browser, "#usage .usage-seg")
    days = browser.find_elements(By.CSS_SELECTOR, "#usage .usage-day")
    assert [d.get_attribute("data-day") for d in days] == ["2026-03-01", "2026-03-02"]
    assert [d.get_attribute("data-tokens") for d in days] == ["2550", "2000"]
    segments = [
        (s.get_attribute("data-model"), s.get_attribute("data-tokens"))
        for s in browser.find_elements(By.CSS_SELECTOR, "#usage .usage-seg")
    ]
    assert segments == [
        ("claude-sonnet-4-5", "2000"),
        ("house-model-1", "550"),
        ("claude-sonnet-4-5", "2000"),
    ]
    costs = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#usage .usage-cost")]
    assert costs == ["≥$0.0180", "$0.0060"]  # a model without a price is never $0
    assert "≥$0.0240" in text_of(browser, "#usage-total")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-session="{session_id}"]')
    assert "≥$0.0240" in row.text

    # The run page and a call's details give their own cost.
    span = f"{span_id(session_id, run_id, 'm0', 1):016x}"
    browser.get(f"{server.url}/trace/{trace_id(session_id, run_id):032x}/span/{span}")
    assert wait_for(browser, "#details .cost").text == "$0.0180"
    assert "≥$0.0240" in text_of(browser, ".meta .cost")
    unknown = f"{span_id(session_id, run_id, 'm1', 1):016x}"
    browser.find_element(By.CSS_SELECTOR, f'.bar[data-span="{unknown}"]').click()
    until(browser, lambda d: text_of(d, "#details .cost") == "unknown")
    no_console_errors(browser)

    # The report (opened from disk) gives the same costs.
    report = write_report(folder / "priced.jsonl", tmp_path / "report.html")
    browser.get(f"{report.as_uri()}#/trace/{trace_id(session_id, run_id):032x}/span/{span}")
    assert wait_for(browser, "#details .cost").text == "$0.0180"
    assert "≥$0.0240" in text_of(browser, ".meta .cost")
    no_console_errors(browser)
