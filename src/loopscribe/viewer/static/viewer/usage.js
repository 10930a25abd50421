/* The chart under the session list: tokens and cost per day and model, over the folder. */

import { cost, fill, getJSON, h, num, REPORT } from "./common.js";

const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

export function loadUsage(el) {
  if (REPORT) return;
  getJSON("/api/usage").then(function (u) { drawUsage(el, u); }).catch(function () {});
}

function drawUsage(el, u) {
  el.hidden = !u.rows.length;
  if (!u.rows.length) { fill(el); return; }
  var colour = {};
  u.models.forEach(function (m, i) { colour[m] = PALETTE[i % PALETTE.length]; });
  var perDay = {}, most = 1, tokens = 0;
  u.rows.forEach(function (r) {
    var d = perDay[r.day] || (perDay[r.day] = { rows: [], tokens: 0, cost: 0, unknown: 0 });
    var t = r.input_tokens + r.output_tokens;
    d.rows.push(r);
    d.tokens += t;
    tokens += t;
    if (r.cost_usd === "unknown") d.unknown += r.cost_unknown_calls; else { d.cost += r.cost_usd; d.unknown += r.cost_unknown_calls; }
    most = Math.max(most, d.tokens);
  });
  var HEIGHT = 120;
  var days = u.days.map(function (day) {
    var d = perDay[day];
    var dayCost = d.unknown && !d.cost ? "unknown" : (d.unknown ? "≥" : "") + cost(d.cost);
    return h("div", { class: "usage-day", "data-day": day, "data-tokens": d.tokens, title: day + ": " + num(d.tokens) + " tokens, " + dayCost },
      h("div", { class: "usage-stack", style: { height: HEIGHT + "px" } }, d.rows.map(function (r) {
        var t = r.input_tokens + r.output_tokens;
        return h("div", {
          class: "usage-seg", "data-model": r.model, "data-tokens": t, "data-cost": String(r.cost_usd),
          title: r.model + " · " + day + ": " + num(r.input_tokens) + " in / " + num(r.output_tokens) + " out, " + cost(r.cost_usd),
          style: { height: Math.max(1, Math.round(t / most * HEIGHT)) + "px", background: colour[r.model] },
        });
      })),
      h("div", { class: "usage-label" }, day.slice(5)),
      h("div", { class: "usage-cost" }, dayCost));
  });
  fill(el,
    h("h2", null, "Tokens and cost per day"),
    h("p", { class: "note", id: "usage-total" }, num(tokens) + " tokens · " + u.cost_text + " over " + num(u.days.length) +
      (u.days.length === 1 ? " day" : " days") + (u.cost_unknown_calls ? " (" + num(u.cost_unknown_calls) + " calls of models without a price)" : "")),
    h("div", { class: "usage-chart", role: "img", "aria-label": "tokens per day, by model" }, days),
    h("ul", { class: "usage-legend" }, u.models.map(function (m) {
      return h("li", null, h("span", { class: "usage-swatch", style: { background: colour[m] } }), m);
    })),
    h("details", null, h("summary", null, "per day and model"),
      h("table", { class: "list usage-table" },
        h("thead", null, h("tr", null, h("th", null, "day"), h("th", null, "model"), h("th", { class: "num" }, "calls"),
          h("th", { class: "num" }, "tokens in / out"), h("th", { class: "num" }, "cost"))),
        h("tbody", null, u.rows.map(function (r) {
          return h("tr", null, h("td", null, r.day), h("td", null, r.model), h("td", { class: "num" }, num(r.calls)),
            h("td", { class: "num" }, num(r.input_tokens) + " / " + num(r.output_tokens)), h("td", { class: "num" }, cost(r.cost_usd)));
        })))));
}
