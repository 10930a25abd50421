/* The report's one page (`loopscribe report`): the session's runs as tabs, each a
 * RunView, with the selected bar kept in the URL's fragment (#run=...&span=...).
 */

import { app, DATA, fill, h, runName, sessionName, setCrumbs, when } from "./common.js";
import { allRows } from "./records.js";
import { sessionHead } from "./session.js";
import { RunView } from "./timeline.js";

export function reportPage() {
  var s = DATA.session;
  document.getElementById("brand").removeAttribute("href");
  setCrumbs([[sessionName(s), null], ["report", null]]);
  var runs = DATA.runs;
  var holder = h("div");
  var tabs = h("div", { class: "tabs" });
  var current = null;
  function parseHash() {
    var hsh = decodeURIComponent(location.hash.replace(/^#/, ""));
    var m = /(?:^|\/)span\/([0-9a-f]{16})/.exec(hsh) || /(?:^|&)span=([0-9a-f]{16})/.exec(hsh);
    var r = /(?:^|&)run=([^&]+)/.exec(hsh);
    return { span: m ? m[1] : null, run: r ? r[1] : null };
  }
  function show(run, span) {
    current = run;
    Array.prototype.forEach.call(tabs.children, function (b) {
      b.classList.toggle("active", b.getAttribute("data-run") === run.run_id);
    });
    new RunView(holder, s, run, {
      select: span,
      onSelect: function (sp) { history.replaceState(null, "", "#run=" + run.run_id + "&span=" + sp); },
    });
  }
  function route() {
    var want = parseHash();
    var run = runs[0], found = false;
    runs.forEach(function (r) {
      if (want.run === r.run_id) run = r;
      if (want.span && (r.span_id === want.span ||
        r.rows.some(function (row) { return row.bars.some(function (b) { return b.span_id === want.span; }); }))) { run = r; found = true; }
    });
    if (want.span && !found && runs.some(function (r) { return r.rows_element; })) {
      // The span may be on rows not read yet: read them, then look again.
      allRows().then(route);
      return;
    }
    if (run) show(run, want.span);
  }
  runs.forEach(function (r) {
    tabs.appendChild(h("button", { type: "button", "data-run": r.run_id, onclick: function () {
      history.replaceState(null, "", "#run=" + r.run_id); show(r, null);
    }, title: r.run_id }, runName(r)));
  });
  fill(app, sessionHead(s).concat([
    h("p", { class: "note" }, "Made by loopscribe report on " + when(DATA.generated) + ". " + DATA.note),
    runs.length > 1 ? tabs : null,
    runs.length ? holder : h("p", { class: "note" }, "This session has no runs.")]));
  window.addEventListener("hashchange", route);
  route();
}
