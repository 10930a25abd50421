/* The details pane of the run view: the selected bar's facts and its records,
 * a page at a time.
 */

import {
  cost, dur, errorLabel, fill, h, num, REPORT, runAgent, runName, stateChip, usOf, when,
} from "./common.js";
import { renderRecord } from "./record.js";
import { source } from "./records.js";

export function showDetails(view, found) {
  var run = view.run, pane = view.detailsEl;
  var facts = [];
  function fact(k, v, wide) {
    if (v === null || v === undefined || v === "") return;
    facts.push(h("dt", wide ? { class: "wide" } : null, k), h("dd", wide ? { class: "wide" } : null, v));
  }
  var title, bar = found.bar, t0;
  if (bar) {
    title = h("h2", null, bar.name, " ", stateChip(bar.state, bar.error_type));
    fact("execution", h("span", { class: "mono" }, bar.id));
    fact("kind", bar.kind);
    fact("attempt", bar.attempt + (bar.retried ? " (retried)" : "") + (bar.attempt > 1 ? " (a retry)" : ""));
    fact("parent", bar.parent_id ? h("span", { class: "mono" }, bar.parent_id) : "the run");
    if (bar.model) fact("model", bar.model + (bar.provider ? " · " + bar.provider : ""));
    if (bar.tool) fact("tool", bar.tool);
    if (bar.state === "error") fact("error", h("span", { class: "err" }, errorLabel(bar.error_type, bar.error_text)), true);
    if (bar.agent) fact("agent", bar.agent);
    if (bar.input_tokens !== null || bar.output_tokens !== null) fact("tokens", num(bar.input_tokens) + " in / " + num(bar.output_tokens) + " out");
    if (bar.kind === "model" && bar.cost_usd !== null && bar.cost_usd !== undefined) fact("cost", h("span", { class: "cost" }, cost(bar.cost_usd)));
    fact("start", when(bar.start));
    fact("duration", dur(bar.end_us - bar.start_us) + (bar.end ? "" : " so far"));
    fact("records", "seq " + bar.seqs.join(", "), true);
    t0 = usOf(bar.start);
  } else {
    title = h("h2", null, runName(run), " ", stateChip(run.state, run.error_type));
    fact("run", h("span", { class: "mono" }, run.run_id));
    fact("agent", runAgent(run, view.session));
    fact("start", when(run.start));
    fact("end", run.end ? when(run.end) : "not closed");
    if (run.cost_text) fact("cost", h("span", { class: "cost" }, run.cost_text));
    fact("records", "the run's own records (seq " + run.records.join(", ") + ")", true);
    t0 = usOf(run.start);
  }
  fact("span id", h("span", { class: "mono" }, found.span), true);
  fact("trace id", h("span", { class: "mono" }, run.trace_id), true);
  if (!REPORT) fact("link", h("a", { href: "/trace/" + run.trace_id + "/span/" + found.span, class: "mono" }, "/trace/…/span/" + found.span), true);
  var list = h("div", { class: "records", "aria-live": "polite" }, h("div", { class: "note" }, "loading records…"));
  fill(pane, title, h("dl", { class: "facts" }, facts), list);
  pane.scrollTop = 0;
  loadRecords(view, list, found.span, 0, t0, true);
}

// A page of the bar's records into ``list``; a button loads the next page.
function loadRecords(view, list, span, offset, t0, first) {
  source.spanRecords(view.session.id, span, offset).then(function (res) {
    if (view.selected !== span) return;
    if (first) fill(list);
    res.records.forEach(function (rec) { list.appendChild(renderRecord(rec, { t0: t0 })); });
    var next = res.offset + res.records.length;
    if (next < res.total) {
      var more = h("button", { class: "more", type: "button", onclick: function () {
        more.remove(); loadRecords(view, list, span, next, t0, false);
      } }, "load " + num(res.total - next) + " more records");
      list.appendChild(more);
    }
  }).catch(function (err) {
    fill(list, h("div", { class: "error-box" }, "could not load the records: " + err.message));
  });
}
