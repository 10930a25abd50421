/* Shared by every view: the page's data, DOM building, formatting, fetching, the
 * breadcrumbs and the problems banner.
 *
 * Everything taken from a session file reaches the page through textContent or
 * attribute values (h() and fill() below), never as HTML.
 */

export const DATA = JSON.parse(document.getElementById("ls-data").textContent);
export const REPORT = DATA.mode === "report";
export const app = document.getElementById("app");
const crumbs = document.getElementById("crumbs");
export const KINDS = ["model", "tool", "turn", "agent", "context"];
export const MESSAGE_TAGS = { user: 1, assistant: 1, system: 1, tool_result: 1 };

// -- small helpers ---------------------------------------------------------------

export function h(tag, attrs) {
  var el = document.createElement(tag);
  if (attrs) {
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === "style") Object.assign(el.style, v);
      else if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    });
  }
  for (var i = 2; i < arguments.length; i++) add(el, arguments[i]);
  return el;
}
export function add(el, kid) {
  if (kid === null || kid === undefined || kid === false) return;
  if (Array.isArray(kid)) { kid.forEach(function (k) { add(el, k); }); return; }
  el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
}
export function fill(el) {
  // Like replaceChildren, but skips null and flattens arrays (as h() does).
  el.replaceChildren();
  for (var i = 1; i < arguments.length; i++) add(el, arguments[i]);
  return el;
}
export function enc(s) { return encodeURIComponent(s); }
export function kindClass(kind) { return KINDS.indexOf(kind) >= 0 ? kind : "other"; }
export function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
export function dur(us) {
  if (us === null || us === undefined) return "–";
  if (us < 1000) return us + " µs";
  if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 2 : us < 1e5 ? 1 : 0) + " ms";
  if (us < 6e7) return (us / 1e6).toFixed(us < 1e7 ? 2 : 1) + " s";
  var secs = Math.round(us / 1e6);
  if (secs < 3600) return Math.floor(secs / 60) + " m " + (secs % 60) + " s";
  var mins = Math.round(us / 6e7);
  if (mins < 1440) return Math.floor(mins / 60) + " h " + (mins % 60) + " m";
  var hours = Math.round(us / 3.6e9);
  return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
}
export function clean(s) {
  // One line of text for a chip or a summary: tags such as <tool_use_error> dropped
  // (their text kept), escaped newlines that a tool printed literally read as spaces.
  return String(s === null || s === undefined ? "" : s)
    .replace(/<\/?[A-Za-z_][\w-]*>/g, " ")
    .replace(/\\[nrt]/g, " ")
    .replace(/\s+/g, " ")
    .trim();
}
export function words(s, n) {
  var t = clean(s);
  return t.length > n ? t.slice(0, n - 1).replace(/\s+\S*$/, "") + "…" : t;
}
export function when(iso) {
  if (!iso) return "–";
  var d = new Date(iso);
  if (isNaN(d)) return iso;
  var p = function (n) { return String(n).padStart(2, "0"); };
  return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
    p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
}
export function bytes(n) {
  if (n < 1024) return n + " B";
  if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1048576).toFixed(1) + " MiB";
}
export function usOf(iso) {
  // Microsecond epoch of a stored timestamp ("...T07:48:57.856426Z").
  var m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?Z$/.exec(iso || "");
  if (!m) return null;
  return Date.parse(m[1] + "Z") * 1000 + Number(((m[2] || "") + "000000").slice(0, 6));
}
export function chip(text, cls) { return h("span", { class: "chip " + (cls || "") }, text); }
export function stateChip(state, errorType) {
  var label = { ok: "ok", error: "error", open: "open", incomplete: "incomplete" }[state] || state;
  // _OTHER (an error with no type name) says nothing: the error's text is shown beside it.
  return chip(errorType && errorType !== "_OTHER" ? label + " · " + errorType : label, "s-" + state);
}
export function link(href, text, attrs) {
  if (REPORT) return h("span", attrs || null, text);
  return h("a", Object.assign({ href: href }, attrs || {}), text);
}
export function setCrumbs(items) {
  crumbs.replaceChildren();
  items.forEach(function (item, i) {
    if (i) crumbs.appendChild(h("span", { class: "sep" }, "›"));
    crumbs.appendChild(item[1] && !REPORT ? h("a", { href: item[1] }, item[0]) : h("span", null, item[0]));
  });
}
export function getJSON(url) {
  return fetch(url, { headers: { Accept: "application/json" } }).then(function (r) {
    return r.json().then(function (body) {
      if (!r.ok) throw new Error(body.error || r.status + " " + r.statusText);
      return body;
    });
  });
}
export function sessionName(s) { return s.title || "session " + s.id.slice(0, 12); }
// A cost as the server computed it from usage: dollars, or "unknown" (never shown as 0).
export function cost(v) {
  if (v === null || v === undefined) return "–";
  if (v === "unknown") return "unknown";
  if (v === 0) return "$0";
  return "$" + (v >= 100 ? Math.round(v).toLocaleString("en-US") : v >= 1 ? v.toFixed(2) : v.toFixed(4));
}

// A run by what a person recognises: the first words of its prompt, else its agent.
export function runName(r) { return r.prompt ? words(r.prompt, 80) : (r.agent || "run") + " " + r.run_id.slice(0, 8); }
export function runAgent(r, s) { return r.agent || (s && (s.agent_name || s.source)) || null; }

export function errorLabel(type, text) {
  // An error without a type name is exported as _OTHER: show what the record says instead.
  text = clean(text);
  if (type === "_OTHER" || !type) return text || "error";
  return text ? type + ": " + text : type;
}

// -- problems: what the server could not do (a store's copy), on every page -------------

export function drawProblems(problems) {
  var el = document.getElementById("problems");
  if (!el) {
    el = h("section", { id: "problems", class: "problems", role: "status", "aria-label": "problems" });
    app.parentNode.insertBefore(el, app);
  }
  var list = problems || [];
  el.hidden = !list.length;
  fill(el, list.length ? [h("strong", null, list.length === 1 ? "A problem: " : "Problems:"),
    h("ul", null, list.map(function (p) { return h("li", null, p); }))] : null);
}
