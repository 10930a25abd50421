/* The session page (/session/{id}): its head, its runs, its conversation; and the
 * trace page (/trace/{id}) that lists the runs of a trace.
 */

import {
  app, chip, DATA, dur, enc, fill, h, num, runAgent, runName, sessionName, setCrumbs, stateChip,
  when,
} from "./common.js";
import { Conversation } from "./conversation.js";

function runsTable(sid, runs, session) {
  return h("table", { class: "list runs" },
    h("thead", null, h("tr", null, h("th", null, "run"), h("th", null, "agent"), h("th", null, "models"), h("th", null, "started"),
      h("th", { class: "num" }, "duration"), h("th", null, "state"), h("th", { class: "num" }, "model calls"),
      h("th", { class: "num" }, "tool calls"), h("th", { class: "num" }, "errors"), h("th", { class: "num" }, "retries"),
      h("th", { class: "num" }, "cost"), h("th", null, "trace id"))),
    h("tbody", null, runs.map(function (r) {
      return h("tr", { "data-run": r.run_id },
        h("td", null, h("a", { href: "/session/" + enc(r.session_id || sid) + "/run/" + enc(r.run_id), class: "run-name", title: r.prompt || null }, runName(r)),
          h("div", { class: "tag" }, r.run_id)),
        h("td", null, runAgent(r, session) || "–"),
        h("td", null, (r.models || []).join(", ") || "–"),
        h("td", null, when(r.start)),
        h("td", { class: "num" }, dur(r.duration_us)),
        h("td", null, stateChip(r.state, r.error_type)),
        h("td", { class: "num" }, num(r.counts.model_calls)),
        h("td", { class: "num" }, num(r.counts.tool_calls)),
        h("td", { class: "num" }, num(r.counts.errors)),
        h("td", { class: "num" }, num(r.counts.retries)),
        h("td", { class: "num cost" }, r.cost_text || "–"),
        h("td", { class: "mono" }, r.trace_id));
    })));
}

export function sessionHead(s) {
  return [h("h1", null, sessionName(s)),
    h("div", { class: "meta" }, chip(s.status, "st-" + s.status),
      h("span", { class: "mono" }, s.id),
      s.model ? h("span", null, "model ", h("b", null, s.model)) : null,
      h("span", null, h("b", null, num(s.messages)), " messages"),
      h("span", null, "tokens ", h("b", null, num(s.input_tokens) + " / " + num(s.output_tokens))),
      s.cost_text ? h("span", null, "cost ", h("b", { class: "cost" }, s.cost_text)) : null,
      h("span", null, "created ", h("b", null, when(s.created))),
      h("span", { class: "mono" }, s.file))];
}

export function sessionPage() {
  var s = DATA.session;
  setCrumbs([["sessions", "/"], [sessionName(s), null]]);
  var convo = new Conversation(s.id, DATA.conversation);
  fill(app, sessionHead(s).concat([
    h("h2", null, "Runs"),
    DATA.runs.length ? runsTable(s.id, DATA.runs, s) : h("p", { class: "note" }, "No runs yet."),
    h("h2", { id: "conversation" }, "Conversation"),
    h("p", { class: "note" }, "Messages as the agent saw them; tool calls and results fold open, thinking is folded. " +
      "Each item links to its record (#) and to its bar on the timeline."),
    convo.root]));
}

export function tracePage() {
  setCrumbs([["sessions", "/"], ["trace " + DATA.trace_id, null]]);
  fill(app, h("h1", null, "trace " + DATA.trace_id),
    h("p", { class: "note" }, "Several runs belong to this trace (their host began them inside one of its spans)."),
    runsTable(null, DATA.runs));
}
