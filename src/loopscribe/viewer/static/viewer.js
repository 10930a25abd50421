/* loopscribe viewer: builds every page from the JSON in <script id="ls-data">.
 *
 * The same script runs in two modes:
 *   server  pages of `loopscribe serve`; bodies are fetched on demand from /api/...
 *           and a clipped body's full line from /session/{id}/record/{seq}/raw;
 *   report  `loopscribe report`: one file, every record embedded, no network at all.
 *
 * Native ES modules, one per view, with no build step: the server serves them as they
 * are (this file is the entry, viewer/*.js its imports); the report inlines them as one
 * script (loopscribe/viewer/_script.py links them). So the modules keep to one form:
 * `import { a, b } from "./x.js";` and `export function` / `export const`, nothing else.
 *
 *   viewer/common.js        the page's data, DOM building, formatting, fetch, problems
 *   viewer/markdown.js      message text as Markdown, built as DOM nodes
 *   viewer/records.js       where records come from: /api, or the report's chunks
 *   viewer/record.js        a record's body drawn; the record page
 *   viewer/timeline.js      the run page and its timeline (RunView)
 *   viewer/details.js       the selected bar's facts and records
 *   viewer/sessions.js      the session list, its search and filters
 *   viewer/usage.js         tokens and cost per day and model (the chart)
 *   viewer/conversation.js  the conversation on the session page
 *   viewer/session.js       the session page and the trace page
 *   viewer/report.js        the report's page
 *
 * Everything taken from a session file reaches the page through textContent or
 * attribute values, never as HTML.
 */

import { app, DATA, drawProblems, fill, h, REPORT, setCrumbs } from "./viewer/common.js";
import { recordPage } from "./viewer/record.js";
import { reportPage } from "./viewer/report.js";
import { sessionPage, tracePage } from "./viewer/session.js";
import { sessionsPage } from "./viewer/sessions.js";
import { runPage } from "./viewer/timeline.js";

function errorPage() {
  setCrumbs([["sessions", "/"], [String(DATA.status), null]]);
  fill(app, h("div", { class: "error-page" },
    h("h1", null, DATA.status === 404 ? "Not found" : "Error " + DATA.status),
    h("p", { class: "message" }, DATA.message),
    h("p", null, h("a", { href: "/" }, "All sessions"))));
}

const pages = {
  sessions: sessionsPage, session: sessionPage, run: runPage, record: recordPage,
  trace: tracePage, error: errorPage, report: reportPage,
};
if (!REPORT) drawProblems(DATA.problems);
(pages[DATA.view] || errorPage)();
