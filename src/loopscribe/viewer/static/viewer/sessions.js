/* The session list (/): a page at a time, searched and filtered by the server; the
 * search and filters live in the URL, so a page of results can be shared or reloaded.
 */

import {
  app, chip, DATA, drawProblems, dur, enc, fill, getJSON, h, num, sessionName, setCrumbs, when,
} from "./common.js";
import { loadUsage } from "./usage.js";

// The folder a session file is in, below the served folder ("." for the folder itself).
function folderOf(file, root) {
  var f = String(file || ""), r = String(root || "").replace(/\/+$/, "");
  var dir = f.slice(0, Math.max(0, f.lastIndexOf("/")));
  if (r && dir === r) return ".";
  if (r && dir.slice(0, r.length + 1) === r + "/") return dir.slice(r.length + 1);
  return dir || ".";
}

export function sessionsPage() {
  setCrumbs([["sessions", null]]);
  var data = DATA;
  var search = h("input", { type: "search", id: "q", placeholder: "search title, model, tool, source, text…",
    "aria-label": "search sessions: title, model, tool names, source, and the text of their records", autocomplete: "off" });
  search.value = DATA.q || "";
  var source = h("select", { id: "f-source", "aria-label": "source" });
  var status = h("select", { id: "f-status", "aria-label": "status" });
  var errors = h("input", { type: "checkbox", id: "f-errors" });
  errors.checked = !!DATA.errors;
  var count = h("span", { class: "note", id: "count", "aria-live": "polite" });
  var tbody = h("tbody");
  var pager = h("nav", { class: "pager", id: "list-pager", "aria-label": "pages of sessions" });
  var state = h("div", { id: "list-state" });
  var table = h("table", { class: "list sessions" },
    h("thead", null, h("tr", null, h("th", null, "session"), h("th", null, "folder"), h("th", null, "source"), h("th", null, "status"),
      h("th", null, "model"), h("th", { class: "num" }, "duration"), h("th", { class: "num" }, "runs"),
      h("th", { class: "num" }, "messages"), h("th", { class: "num" }, "tool calls"), h("th", { class: "num" }, "errors"),
      h("th", { class: "num" }, "tokens in / out"), h("th", { class: "num" }, "cost"), h("th", null, "updated"))),
    tbody);
  var empty = h("p", { class: "note", id: "list-empty" });
  var usage = h("section", { id: "usage", class: "usage", "aria-label": "tokens and cost per day", hidden: true });
  function options(select, values, chosen, any) {
    var all = values.slice();
    if (chosen && all.indexOf(chosen) < 0) all.push(chosen);
    fill(select, h("option", { value: "" }, any), all.map(function (v) { return h("option", { value: v }, v); }));
    select.value = chosen || "";
  }
  function row(s) {
    return h("tr", { "data-session": s.id },
      h("td", null, h("a", { href: "/session/" + enc(s.id) }, sessionName(s)),
        h("div", { class: "tag" }, s.id),
        s.tools && s.tools.length ? h("div", { class: "tools-list", title: s.tools.join(", ") }, s.tools.slice(0, 6).join(" · ") +
          (s.tools.length > 6 ? " · +" + (s.tools.length - 6) : "")) : null),
      h("td", { class: "folder mono", title: s.file }, folderOf(s.file, data.root)),
      h("td", null, chip(s.source || "–", "src")),
      h("td", null, chip(s.status, "st-" + s.status)),
      h("td", null, s.model || "–"),
      h("td", { class: "num" }, dur(s.duration_us)),
      h("td", { class: "num" }, num(s.runs)),
      h("td", { class: "num" }, num(s.messages)),
      h("td", { class: "num" }, num(s.tool_calls)),
      h("td", { class: "num" + (s.errors ? " has-errors" : "") }, s.errors ? "⚠ " + num(s.errors) : "0"),
      h("td", { class: "num" }, num(s.input_tokens) + " / " + num(s.output_tokens)),
      h("td", { class: "num cost" }, s.cost_text || "–"),
      h("td", null, when(s.updated)));
  }
  // The search and the filters live in the URL, so a page of results can be shared or reloaded.
  function query(cursor) {
    var parts = [];
    var q = search.value.trim();
    if (q) parts.push("q=" + enc(q));
    if (DATA.text) parts.push("text=" + enc(DATA.text));
    if (source.value) parts.push("source=" + enc(source.value));
    if (status.value) parts.push("status=" + enc(status.value));
    if (errors.checked) parts.push("errors=1");
    if (cursor) parts.push("cursor=" + enc(cursor));
    return parts.length ? "?" + parts.join("&") : "";
  }
  function counted(d) {
    if (d.matched === null || d.matched === undefined) {
      var found = num(d.sessions.length) + (d.next ? "+" : "");
      return found + " found";
    }
    var noun = d.count === 1 ? " session" : " sessions";
    return d.matched === d.count ? num(d.count) + noun : num(d.matched) + " of " + num(d.count) + noun;
  }
  function progress(d) {
    var ix = d.indexing;
    if (!ix) return null;
    var text = ix.filling ? "Fetching the sessions from the store; the list fills in as they arrive." :
      ix.walking ? "Looking for session files: " + num(ix.total) + " found so far." :
      "Indexing: " + num(ix.done) + " of " + num(ix.total) + " session files read; the list fills in as they are.";
    return h("p", { class: "note indexing", id: "indexing" }, text);
  }
  function draw(d) {
    data = d;
    options(source, d.sources || [], d.source, "any source");
    options(status, d.statuses || [], d.status, "any status");
    fill(tbody, d.sessions.map(row));
    table.hidden = !d.sessions.length;
    empty.textContent = d.sessions.length ? "" : d.count ? "No session matches." : d.indexing ? "" : "No session files here yet.";
    count.textContent = counted(d);
    fill(pager,
      d.cursor ? h("a", { href: "/" + query(null), "data-page": "first" }, "« newest") : null,
      d.next ? h("a", { href: "/" + query(d.next), "data-page": "next" }, d.partial ? "search on ›" : "next ›") : null);
    fill(state,
      progress(d),
      d.partial ? h("p", { class: "note" }, "Searched the records of " + num(d.searched) +
        " sessions so far; “search on” reads more.") : null,
      d.skipped_count ? h("details", null, h("summary", null, num(d.skipped_count) + " files skipped"),
        h("ul", null, d.skipped.map(function (s) { return h("li", { class: "mono" }, s.file + ": " + s.error); }),
          d.skipped_count > d.skipped.length ? h("li", null, "… and " + num(d.skipped_count - d.skipped.length) + " more") : null)) : null);
    drawProblems(d.problems);
  }
  var asked = 0, timer = null;
  function load(cursor) {
    var q = query(cursor);
    var mine = ++asked;
    return getJSON("/api/sessions" + q).then(function (d) {
      if (mine === asked) draw(d);
    }).catch(function (err) {
      if (mine === asked) count.textContent = "could not load the list: " + err.message;
    });
  }
  var lastChange = 0;
  function changed() {
    // A new search or filter starts from the newest session again. It is a new entry in
    // the history (back returns to the search before), except while it is being typed.
    var url = "/" + query(null);
    if (url !== location.pathname + location.search) {
      if (Date.now() - lastChange > 1500) history.pushState(null, "", url);
      else history.replaceState(null, "", url);
    }
    lastChange = Date.now();
    load(null);
  }
  window.addEventListener("popstate", function () {
    // Back or forward to another search: show it.
    var p = new URLSearchParams(location.search);
    search.value = p.get("q") || "";
    DATA.text = p.get("text") || null;
    options(source, data.sources || [], p.get("source"), "any source");
    options(status, data.statuses || [], p.get("status"), "any status");
    errors.checked = /^(1|true|on)$/.test(p.get("errors") || "");
    clearTimeout(timer);
    timer = null;
    lastChange = 0;
    load(p.get("cursor"));
  });
  search.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () { timer = null; changed(); }, 250);
  });
  [source, status, errors].forEach(function (el) { el.addEventListener("change", changed); });
  // While the folder is being indexed, the page follows it (unless a search is being typed).
  setInterval(function () { if (data.indexing && timer === null) load(data.cursor); }, 2000);
  fill(app,
    h("h1", null, "Sessions"),
    h("p", { class: "note" }, DATA.root),
    h("div", { class: "filters", role: "search" }, search, source, status,
      h("label", { for: "f-errors" }, errors, " with errors"), count),
    state, table, empty, pager, usage);
  draw(DATA);
  loadUsage(usage);
  // While indexing, the chart follows the list.
  setInterval(function () { if (data.indexing) loadUsage(usage); }, 4000);
}
