"""In headless Chromium: what tripped a newcomer's first hour in the viewer, fixed.

Durations with hours, a folder column, the search kept across back and
reload, runs and rows named by what a person recognises, failures as clean
text, zoom that keeps the selected bar, previous/next on a record page,
long result rows that keep their links, no empty assistant bubbles.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, free_port
from .first_hour import PROMPT, Folder, record_folder, rect
from .test_browser import no_console_errors, until, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Folder:
    """The sessions of ``first_hour.record_folder``."""
    return record_folder(tmp_path_factory.mktemp("first-hour") / "sessions")


@pytest.fixture(scope="module")
def server(folder: Folder) -> Iterator[Server]:
    """One ``loopscribe serve`` of the folder for the whole module; always stopped."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "loopscribe.viewer", "serve", str(folder.root), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        import urllib.request

        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/sessions") as r:
                    body = r.read()
                if b'"indexing":null' in body:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "serve did not index the folder in 30 s"
            time.sleep(0.05)
        yield Server(process, f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def _row(browser: Any, session_id: str) -> Any:
    return wait_for(browser, f'tr[data-session="{session_id}"]')


def test_durations_read_in_hours_and_each_session_names_its_folder(
    browser: Any, server: Server, folder: Folder
) -> None:
    """A 5 h 1 m 9 s session reads "5 h 1 m", and the list has a folder column."""
    from selenium.webdriver.common.by import By

    browser.get(server.url + "/")
    cells = _row(browser, folder.long_id).find_elements(By.TAG_NAME, "td")
    heads = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "table.sessions th")]
    duration = cells[heads.index("duration")].text
    assert duration == "5 h 1 m", duration
    assert heads.index("folder") == 1
    assert cells[1].text == "codex"
    fix = _row(browser, folder.fix_id).find_elements(By.TAG_NAME, "td")
    assert fix[1].text == "claude-code"
    no_console_errors(browser)


def test_the_search_survives_back_and_reload(browser: Any, server: Server, folder: Folder) -> None:
    """A search typed in the box is in the URL; back from a session and reload both keep it."""
    from selenium.webdriver.common.by import By

    browser.get(server.url + "/")
    _row(browser, folder.codex_id)
    browser.find_element(By.ID, "q").send_keys("five hours")
    until(browser, lambda d: "q=five%20hours" in d.current_url)
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-session]")) == 1)
    _row(browser, folder.long_id).find_element(By.CSS_SELECTOR, "td a").click()
    until(browser, lambda d: "/session/" in d.current_url)
    browser.back()
    until(browser, lambda d: d.find_elements(By.ID, "q"))
    assert "q=five%20hours" in browser.current_url
    assert browser.find_element(By.ID, "q").get_attribute("value") == "five hours"
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-session]")) == 1)
    browser.refresh()
    until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-session]"))
    assert browser.find_element(By.ID, "q").get_attribute("value") == "five hours"
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr[data-session]")) == 1
    # A second search, then back: the first one is there again.
    box = browser.find_element(By.ID, "q")
    box.clear()
    box.send_keys("other")
    until(browser, lambda d: "q=other" in d.current_url)
    until(
        browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-session="{folder.codex_id}"]')
    )
    browser.back()
    until(browser, lambda d: "q=five%20hours" in d.current_url)
    until(browser, lambda d: d.find_element(By.ID, "q").get_attribute("value") == "five hours")
    until(
        browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-session="{folder.long_id}"]')
    )
    no_console_errors(browser)


def test_runs_and_rows_are_named_by_prompt_agent_tool_and_model(
    browser: Any, server: Server, folder: Folder
) -> None:
    """The run reads as its prompt and agent; timeline rows as tools and models, not IDs."""
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/session/{folder.fix_id}")
    name = wait_for(browser, f'tr[data-run="{folder.fix_run}"] a.run-name')
    assert name.text.startswith("Fix the flaky login test")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{folder.fix_run}"]')
    assert "claude-code" in row.text  # the agent: the session's source
    assert "claude-demo" in row.text  # the model
    name.click()
    title = wait_for(browser, "h1.run-title")
    assert title.text == PROMPT
    labels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".tl-row .tl-name")]
    assert labels, "no timeline rows"
    assert not [label for label in labels if "toolu_" in label or "msg_0" in label], labels
    assert any(label.endswith("Read") for label in labels)
    assert any(label.endswith("claude-demo") for label in labels)
    run_label = browser.find_element(
        By.CSS_SELECTOR, ".tl-row[data-span]:not([data-exec]) .tl-label"
    )
    assert "claude-code" in run_label.text
    assert "Fix the flaky" in run_label.text
    no_console_errors(browser)


def test_failures_read_as_clean_text(browser: Any, server: Server, folder: Folder) -> None:
    """No literal \\n and no <tool_use_error> tags in failure chips, previews or results."""
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/session/{folder.fix_id}/run/{folder.fix_run}")
    wait_for(browser, ".tl-errors .err-chip")
    chips = [c.text for c in browser.find_elements(By.CSS_SELECTOR, ".tl-errors .err-chip")]
    # Each chip is named by its tool, as its row is.
    assert sorted(c.split(" ")[0] for c in chips) == ["Bash", "Read"]
    previews = [p.text for p in browser.find_elements(By.CSS_SELECTOR, ".tl-preview.err")]
    browser.get(f"{server.url}/session/{folder.fix_id}")
    wait_for(browser, "details.result.failed")
    failed = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "details.result.failed")]
    for texts in (chips, previews, failed):
        assert len(texts) == 2, texts
        joined = " | ".join(texts)
        assert "File does not exist." in joined
        assert "Pre-commit validation failed: [FORMAT] Code is not formatted." in joined
        assert "\\n" not in joined, joined
        assert "tool_use_error" not in joined, joined
    no_console_errors(browser)


def test_zoom_keeps_the_selected_bar_in_view(browser: Any, server: Server, folder: Folder) -> None:
    """A bar near the end of the run, selected, stays selected and on screen through zooming."""
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/session/{folder.fix_id}/run/{folder.fix_run}")
    bars = until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".tl-row[data-exec] .bar"))
    # The Grep call: early in a run whose last call takes ten minutes.
    grep = browser.find_element(
        By.XPATH,
        "//div[contains(@class,'tl-row')][.//div[contains(@class,'tl-name')][contains(.,'Grep')]]//button[contains(@class,'bar')]",
    )
    span = grep.get_attribute("data-span")
    assert span
    assert bars
    grep.click()
    until(browser, lambda d: "span=" + span in d.current_url)
    for _ in range(6):
        browser.find_element(By.CSS_SELECTOR, '[data-zoom="in"]').click()
    assert "6400%" in browser.find_element(By.CSS_SELECTOR, ".zoom-level").text
    selected = browser.find_element(By.CSS_SELECTOR, f'.bar.selected[data-span="{span}"]')
    box, track = rect(browser, selected), rect(browser, selected.find_element(By.XPATH, ".."))
    assert box["width"] > 0
    assert track["left"] - 1 <= box["left"], (box, track)
    assert box["right"] <= track["right"] + 1, (box, track)
    # The details pane still shows the selected bar's records.
    assert "Grep" in browser.find_element(By.CSS_SELECTOR, "#details h2").text
    no_console_errors(browser)


def test_a_record_page_steps_to_the_previous_and_next_record(
    browser: Any, server: Server, folder: Folder
) -> None:
    """The previous and next links (and the arrow keys) walk the session's records."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{server.url}/session/{folder.fix_id}/record/3")
    wait_for(browser, ".rec-nav")
    browser.find_element(By.CSS_SELECTOR, '.rec-nav [data-page="next"]').click()
    until(browser, lambda d: d.current_url.endswith("/record/4"))
    assert "record 4" in wait_for(browser, "h1").text
    browser.find_element(By.CSS_SELECTOR, '.rec-nav [data-page="prev"]').click()
    until(browser, lambda d: d.current_url.endswith("/record/3"))
    wait_for(browser, ".rec-nav")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_LEFT)
    until(browser, lambda d: d.current_url.endswith("/record/2"))
    browser.get(f"{server.url}/session/{folder.fix_id}/record/0")
    wait_for(browser, ".rec-nav")
    assert not browser.find_elements(By.CSS_SELECTOR, '.rec-nav [data-page="prev"]')
    last = folder.fix_records - 1
    browser.get(f"{server.url}/session/{folder.fix_id}/record/{last}")
    wait_for(browser, ".rec-nav")
    assert not browser.find_elements(By.CSS_SELECTOR, '.rec-nav [data-page="next"]')
    assert browser.find_elements(By.CSS_SELECTOR, '.rec-nav [data-page="prev"]')
    no_console_errors(browser)


def test_conversation_rows_keep_their_links_and_skip_empty_bubbles(
    browser: Any, server: Server, folder: Folder
) -> None:
    """A 18,000-character result row still shows its links; no bubble is empty."""
    from selenium.webdriver.common.by import By

    browser.set_window_size(1000, 900)
    browser.get(f"{server.url}/session/{folder.fix_id}")
    wait_for(browser, "details.result")
    for item in browser.find_elements(By.CSS_SELECTOR, ".ci-call, .ci-result"):
        summary = item.find_element(By.CSS_SELECTOR, "summary")
        link = summary.find_element(By.CSS_SELECTOR, ".ci-links a")
        outer, box = rect(browser, summary), rect(browser, link)
        assert box["width"] > 0, summary.text
        assert box["right"] <= outer["right"] + 1, (summary.text, box, outer)
    bubbles = browser.find_elements(By.CSS_SELECTOR, ".bubble.role-assistant")
    assert bubbles
    for bubble in bubbles:
        assert bubble.find_element(By.CSS_SELECTOR, ".ci-body").text.strip(), bubble.text
    # The message that only calls a tool shows the call.
    calls = browser.find_elements(
        By.CSS_SELECTOR, '.bubble.role-assistant details.call[data-call="toolu_01ReadCall"]'
    )
    standalone = browser.find_elements(
        By.CSS_SELECTOR, '.ci-call details.call[data-call="toolu_01ReadCall"]'
    )
    assert len(calls) + len(standalone) == 1
    no_console_errors(browser)


# Everything a hostile body could try, checked in the page: nothing ran, nothing loads.
_HOSTILE_CHECK = """
const md = Array.from(document.querySelectorAll('.md'));
const bad = [];
for (const root of md) {
  for (const el of root.querySelectorAll('*')) {
    const tag = el.tagName.toLowerCase();
    if (!['p','strong','em','del','code','pre','a','ul','ol','li','blockquote','hr','h3','h4','h5',
          'h6','table','thead','tbody','tr','th','td','br'].includes(tag)) bad.push('tag ' + tag);
    for (const a of el.attributes) {
      const n = a.name;
      if (/^on/i.test(n) || n === 'style' || n === 'src') bad.push(tag + ' ' + n);
      if (n === 'href' && !/^(https?:\\/\\/|mailto:)/i.test(a.value)) bad.push('href ' + a.value);
    }
  }
}
return {pwned: window.__pwned === undefined ? null : window.__pwned, md: md.length, bad: bad,
        text: md.map(e => e.textContent).join('\\n')};
"""


def _markdown_is_safe_and_rendered(browser: Any) -> None:
    from selenium.webdriver.common.by import By

    wait_for(browser, ".md")
    found = browser.execute_script(_HOSTILE_CHECK)
    assert found["pwned"] is None
    assert found["bad"] == []
    text = found["text"]
    # Hostile markup is there to read, as text.
    assert "<script>window.__pwned = 1</script>" in text
    assert '<img src=x onerror="window.__pwned = 2">' in text
    assert "[click](javascript:window.__pwned=3)" in text
    assert "&lt;b&gt;not bold&lt;/b&gt; &amp;" in text
    # The Markdown is drawn: a heading, bold, code, a list, a quote, a code block, a safe link.
    md = browser.find_elements(By.CSS_SELECTOR, ".md")
    rendered = next(e for e in md if e.find_elements(By.CSS_SELECTOR, "h4"))
    assert rendered.find_element(By.CSS_SELECTOR, "h4").text == "The cause"
    assert rendered.find_element(By.CSS_SELECTOR, "strong").text == "races"
    assert rendered.find_element(By.CSS_SELECTOR, "p code").text == "auth.py"
    assert [li.text for li in rendered.find_elements(By.CSS_SELECTOR, "ul li")] == [
        "first item",
        "second item",
    ]
    assert len(rendered.find_elements(By.CSS_SELECTOR, "ol li")) == 2
    assert rendered.find_element(By.CSS_SELECTOR, "blockquote").text == "a quote"
    assert rendered.find_element(By.CSS_SELECTOR, "pre code").text == "print('<b>not bold</b>')"
    link = rendered.find_element(By.CSS_SELECTOR, "a")
    assert link.get_attribute("href") == "https://example.org/auth"
    assert link.get_attribute("rel") == "noopener noreferrer nofollow"
    # Nothing was fetched from elsewhere, and nothing was refused (a CSP violation).
    hosts = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).host)"
    )
    assert "evil.example" not in hosts
    no_console_errors(browser)


def test_message_bodies_are_markdown_and_hostile_ones_stay_text(
    browser: Any, server: Server, folder: Folder
) -> None:
    """Bodies render as Markdown; script, handlers, javascript:/data: links, entities stay text."""
    browser.get(f"{server.url}/session/{folder.fix_id}")
    _markdown_is_safe_and_rendered(browser)
    # The record page renders the same message the same way.
    browser.get(f"{server.url}/session/{folder.fix_id}/record/{folder.fix_records - 4}")
    wait_for(browser, ".rec .md")
    assert browser.execute_script(_HOSTILE_CHECK)["bad"] == []


def test_markdown_in_the_report_is_as_safe(browser: Any, folder: Folder, tmp_path: Path) -> None:
    """The report allows inline script (its own), so a body that injected one would run there."""
    from selenium.webdriver.common.by import By

    from loopscribe.viewer import write_report

    report = write_report(folder.root / "claude-code" / "fix.jsonl", tmp_path / "report.html")
    browser.get(report.as_uri())
    wait_for(browser, ".tl-row[data-exec]")
    # The answer's bar: its records hold the Markdown message and the hostile one.
    answer = browser.find_element(
        By.XPATH, "(//div[contains(@class,'tl-row')][@data-exec='msg_02Answer']//button)[last()]"
    )
    answer.click()
    _markdown_is_safe_and_rendered(browser)
