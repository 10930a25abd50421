/* The run page (/session/{id}/run/{run}) and the timeline of a run: a row per
 * execution, a bar per attempt, zoom, pan, the minimap, folding and paging of rows.
 * The report draws each of its runs with the same RunView.
 */

import {
  app, chip, DATA, dur, enc, errorLabel, fill, h, kindClass, KINDS, num, REPORT, runAgent,
  runName, sessionName, setCrumbs, stateChip, usOf, when, words,
} from "./common.js";
import { showDetails } from "./details.js";
import { allRows, server } from "./records.js";

function niceStep(raw) {
  var p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
  var f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

function legend() {
  var items = KINDS.concat(["other"]).map(function (k) {
    return h("span", null, h("span", { class: "sw k-" + k }), k);
  });
  items.push(h("span", null, h("span", { class: "sw", style: { background: "var(--error)" } }), "error"));
  items.push(h("span", null, h("span", { class: "sw k-other s-open", style: { backgroundColor: "#98a2b3" } }), "open"));
  items.push(h("span", null, "↻ retried"));
  return h("div", { class: "legend" }, items);
}

export function RunView(container, session, run, opts) {
  this.container = container;
  this.session = session;
  this.opts = opts || {};
  this.selected = null;
  this.selectedSeqs = -1;
  this.collapsed = {};
  (run.collapsed || []).forEach(function (id) { this.collapsed[id] = true; }, this);
  if (REPORT) {
    // The report holds every row and pages them here, as the server does.
    this.full = run;
    this.localPage({ span: this.opts.select });
  } else this.setRun(run);
  this.view = null; // [start_us, end_us] shown; null: the whole run
  this.render();
}

const ROW_PAGE = 300;

RunView.prototype.localPage = function (params) {
  var full = this.full, rows = full.rows, collapsed = this.collapsed;
  var at = -1;
  if (params.span) {
    rows.forEach(function (r, i) { r.bars.forEach(function (b) { if (b.span_id === params.span) at = i; }); });
    if (at >= 0) {
      // Open every folded row above it.
      for (var j = at - 1, depth = rows[at].depth; j >= 0 && depth > 0; j--) {
        if (rows[j].depth < depth) { depth = rows[j].depth; delete collapsed[rows[j].id]; }
      }
    }
  }
  var visible = [];
  for (var i = 0; i < rows.length; i++) {
    visible.push(i);
    if (collapsed[rows[i].id] && rows[i].descendants) i += rows[i].descendants;
  }
  var offset = params.offset || 0;
  if (at >= 0) offset = Math.floor(visible.indexOf(at) / ROW_PAGE) * ROW_PAGE;
  offset = Math.max(0, Math.min(offset, Math.floor(Math.max(0, visible.length - 1) / ROW_PAGE) * ROW_PAGE));
  // Until the rest of the rows are read, the count is the run's.
  var count = full.rows_element ? full.all_rows : visible.length;
  this.run = Object.assign({}, full, {
    rows: visible.slice(offset, offset + ROW_PAGE).map(function (k) { return rows[k]; }),
    offset: offset, limit: ROW_PAGE, total_rows: count, all_rows: full.rows_element ? count : rows.length,
  });
  this.paged = true;
};

RunView.prototype.setRun = function (run) {
  this.run = run;
  this.paged = !REPORT && run.limit !== null && run.limit !== undefined;
};

RunView.prototype.bars = function () {
  var out = [];
  this.run.rows.forEach(function (row) { row.bars.forEach(function (b) { out.push(b); }); });
  return out;
};

RunView.prototype.find = function (span) {
  if (span === this.run.span_id) return { run: true, span: span, seqs: this.run.records };
  var bar = null;
  this.bars().forEach(function (b) { if (b.span_id === span) bar = b; });
  return bar ? { bar: bar, span: span, seqs: bar.seqs } : null;
};

// Rows shown: a collapsed row hides its subtree. The server pages and folds
// rows itself; the report holds every row and folds them here.
RunView.prototype.visibleRows = function () {
  if (this.paged) return this.run.rows;
  var out = [], rows = this.run.rows, collapsed = this.collapsed;
  for (var i = 0; i < rows.length; i++) {
    var row = rows[i];
    out.push(row);
    if (collapsed[row.id] && row.descendants) i += row.descendants;
  }
  return out;
};

RunView.prototype.render = function () {
  this.headEl = h("div", { class: "run-head" });
  this.toolsEl = h("div", { class: "tl-tools", role: "toolbar", "aria-label": "timeline zoom" });
  this.minimapEl = h("div", { class: "minimap", role: "slider", tabindex: "0",
    "aria-label": "minimap: the whole run; click or drag to move the view" });
  this.errorsEl = h("div", { class: "tl-errors" });
  this.timelineEl = h("section", { class: "panel timeline", "aria-label": "timeline", tabindex: "-1" });
  this.pagerEl = h("div", { class: "pager" });
  this.detailsEl = h("aside", { class: "panel details", id: "details", "aria-label": "records of the selected bar" },
    h("div", { class: "empty" }, "Select a bar to see its records: messages, tool arguments and results, errors."));
  fill(this.container, this.headEl, legend(), this.errorsEl,
    h("div", { class: "run-grid" },
      h("div", { class: "tl-col" }, this.toolsEl, this.minimapEl, this.pagerEl, this.timelineEl),
      this.detailsEl));
  this.drawHead();
  this.drawTools();
  this.drawTimeline();
  this.bindPan();
  var want = this.opts.select;
  if (want && this.find(want)) this.select(want, true);
  else if (want && REPORT) this.show(want);  // on a page of rows not read yet
};

RunView.prototype.drawHead = function () {
  var run = this.run, c = run.counts;
  fill(this.headEl,
    h("h1", { class: "run-title", title: run.prompt || null }, runName(run)),
    h("div", { class: "meta" },
      runAgent(run, this.session) ? h("span", null, "agent ", h("b", null, runAgent(run, this.session))) : null,
      run.models && run.models.length ? h("span", null, "model ", h("b", null, run.models.join(", "))) : null,
      h("span", { class: "mono" }, "run " + run.run_id),
      stateChip(run.state, run.error_type),
      this.session.live && !REPORT ? chip(this.session.status, "st-" + this.session.status) : null,
      h("span", null, "started ", h("b", null, when(run.start))),
      h("span", null, "duration ", h("b", null, dur(run.duration_us))),
      h("span", null, h("b", null, num(c.model_calls)), " model calls"),
      h("span", null, h("b", null, num(c.tool_calls)), " tool calls"),
      h("span", { class: c.errors ? "has-errors" : null }, h("b", null, num(c.errors)), " errors"),
      h("span", null, h("b", null, num(c.retries)), " retries"),
      run.cost_text ? h("span", null, "cost ", h("b", { class: "cost" }, run.cost_text)) : null,
      h("span", { class: "mono" }, "trace " + run.trace_id)));
  this.drawErrors();
};


RunView.prototype.drawErrors = function () {
  var errs = this.run.errors || [], self = this;
  if (!errs.length) { fill(this.errorsEl); return; }
  var shown = errs.slice(0, 6).map(function (e) {
    return h("button", { type: "button", class: "err-chip", "data-span": e.span_id,
      title: e.name + " · " + e.id + " #" + e.attempt + " · " + errorLabel(e.error_type, e.error_text),
      onclick: function () { self.show(e.span_id); } },
      h("b", null, e.label || e.name), " ", errorLabel(e.error_type, e.error_text));
  });
  var more = this.run.counts.errors - shown.length;
  fill(this.errorsEl, h("span", { class: "err-title" }, "⚠ " + num(this.run.counts.errors) + " failed"), shown,
    more > 0 ? h("span", { class: "note" }, " and " + num(more) + " more (red on the minimap)") : null);
};

RunView.prototype.window = function () {
  var total = Math.max(this.run.duration_us, 1);
  if (!this.view) return [0, total];
  return this.view;
};

RunView.prototype.zoom = function (factor, centre) {
  var total = Math.max(this.run.duration_us, 1), w = this.window();
  var width = w[1] - w[0];
  var sel = this.selectedBar();
  // The buttons and keys zoom around the selected bar, so it stays in view.
  if (centre === undefined && sel) centre = Math.max(w[0], Math.min(w[1], (sel.start_us + sel.end_us) / 2));
  var c = centre === undefined ? (w[0] + w[1]) / 2 : centre;
  var next = Math.min(total, Math.max(width / factor, Math.min(total, 50)));
  var start = Math.max(0, Math.min(total - next, c - (c - w[0]) / width * next));
  if (sel && sel.start_us < start + next && sel.end_us > start) {
    // It was in view: keep it whole when it fits, else its start.
    if (sel.end_us - sel.start_us <= next) start = Math.min(start, sel.start_us, total - next);
    if (sel.end_us > start + next && sel.end_us - sel.start_us <= next) start = sel.end_us - next;
    else if (sel.start_us < start && sel.end_us - sel.start_us > next) start = sel.start_us;
    start = Math.max(0, Math.min(total - next, start));
  }
  this.view = next >= total ? null : [start, start + next];
  this.redraw();
};

RunView.prototype.selectedBar = function () {
  var found = this.selected ? this.find(this.selected) : null;
  return found && found.bar ? found.bar : null;
};

RunView.prototype.pan = function (deltaUs) {
  if (!this.view) return;
  var total = Math.max(this.run.duration_us, 1), width = this.view[1] - this.view[0];
  var start = Math.max(0, Math.min(total - width, this.view[0] + deltaUs));
  this.view = [start, start + width];
  this.redraw();
};

RunView.prototype.centre = function (us) {
  var total = Math.max(this.run.duration_us, 1), w = this.window(), width = w[1] - w[0];
  if (width >= total) return;
  var start = Math.max(0, Math.min(total - width, us - width / 2));
  this.view = [start, start + width];
  this.redraw();
};

RunView.prototype.redraw = function () {
  this.drawTools();
  this.drawTimeline();
};

RunView.prototype.drawTools = function () {
  var self = this, w = this.window(), total = Math.max(this.run.duration_us, 1);
  var pct = Math.round(total / (w[1] - w[0]) * 100);
  fill(this.toolsEl,
    h("button", { type: "button", class: "tool", "data-zoom": "in", title: "zoom in (+, or ctrl + wheel)", "aria-label": "zoom in",
      onclick: function () { self.zoom(2); } }, "+"),
    h("button", { type: "button", class: "tool", "data-zoom": "out", title: "zoom out (−)", "aria-label": "zoom out",
      onclick: function () { self.zoom(0.5); } }, "−"),
    h("button", { type: "button", class: "tool", "data-zoom": "reset", title: "the whole run (0)", "aria-label": "show the whole run",
      disabled: !this.view, onclick: function () { self.view = null; self.redraw(); } }, "whole run"),
    h("span", { class: "note zoom-level" }, pct + "% · " + dur(w[0]) + " – " + dur(w[1]) +
      (this.view ? " · drag the timeline or use ← → to pan" : "")));
  this.drawMinimap();
};

RunView.prototype.drawMinimap = function () {
  var mm = this.run.minimap, self = this, total = Math.max(this.run.duration_us, 1);
  if (!mm) { fill(this.minimapEl); return; }
  var max = 1;
  mm.bars.forEach(function (n, i) { max = Math.max(max, n + mm.errors[i]); });
  var cols = mm.bars.map(function (n, i) {
    var e = mm.errors[i];
    var hgt = n + e ? 15 + 85 * Math.log(1 + n + e) / Math.log(1 + max) : 0;
    return h("span", { class: "mm-col" + (e ? " mm-err" : ""), style: { height: hgt + "%" } });
  });
  var w = this.window();
  var win = h("span", { class: "mm-window" + (this.view ? "" : " whole"), style: { left: (w[0] / total * 100) + "%", width: Math.max(0.5, (w[1] - w[0]) / total * 100) + "%" } });
  fill(this.minimapEl, h("span", { class: "mm-cols" }, cols), win);
  this.minimapEl.setAttribute("aria-valuemin", "0");
  this.minimapEl.setAttribute("aria-valuemax", String(total));
  this.minimapEl.setAttribute("aria-valuenow", String(Math.round((w[0] + w[1]) / 2)));
  if (!this.minimapEl.bound) {
    this.minimapEl.bound = true;
    var drag = false;
    var at = function (ev) {
      var r = self.minimapEl.getBoundingClientRect();
      return Math.max(0, Math.min(1, (ev.clientX - r.left) / r.width)) * Math.max(self.run.duration_us, 1);
    };
    this.minimapEl.addEventListener("mousedown", function (ev) {
      drag = true;
      if (!self.view) self.zoom(8, at(ev)); else self.centre(at(ev));
      ev.preventDefault();
    });
    window.addEventListener("mousemove", function (ev) { if (drag) self.centre(at(ev)); });
    window.addEventListener("mouseup", function () { drag = false; });
    this.minimapEl.addEventListener("keydown", function (ev) {
      var w2 = self.window(), step = (w2[1] - w2[0]) / 4;
      if (ev.key === "ArrowLeft") { self.pan(-step); ev.preventDefault(); }
      if (ev.key === "ArrowRight") { self.pan(step); ev.preventDefault(); }
    });
  }
};

RunView.prototype.bindPan = function () {
  var self = this, el = this.timelineEl, start = null;
  el.addEventListener("wheel", function (ev) {
    if (!(ev.ctrlKey || ev.metaKey || ev.altKey)) return;
    var track = el.querySelector(".tl-track:not(.tl-axis)");
    if (!track) return;
    var r = track.getBoundingClientRect(), w = self.window();
    var frac = Math.max(0, Math.min(1, (ev.clientX - r.left) / r.width));
    self.zoom(ev.deltaY < 0 ? 1.5 : 1 / 1.5, w[0] + frac * (w[1] - w[0]));
    ev.preventDefault();
  }, { passive: false });
  el.addEventListener("mousedown", function (ev) {
    if (!self.view || ev.target.closest(".bar, .tl-label")) return;
    start = { x: ev.clientX, view: self.view.slice() };
    ev.preventDefault();
  });
  window.addEventListener("mousemove", function (ev) {
    if (!start) return;
    var track = el.querySelector(".tl-track:not(.tl-axis)");
    var width = track ? track.getBoundingClientRect().width : 600;
    var us = (start.x - ev.clientX) / width * (start.view[1] - start.view[0]);
    self.view = start.view.slice();
    self.pan(us);
  });
  window.addEventListener("mouseup", function () { start = null; });
  el.addEventListener("keydown", function (ev) {
    if (ev.target.closest && ev.target.closest("input, textarea")) return;
    var w = self.window(), step = (w[1] - w[0]) / 4;
    if (ev.key === "+" || ev.key === "=") { self.zoom(2); ev.preventDefault(); }
    else if (ev.key === "-") { self.zoom(0.5); ev.preventDefault(); }
    else if (ev.key === "0") { self.view = null; self.redraw(); ev.preventDefault(); }
    else if (ev.key === "ArrowLeft" && self.view) { self.pan(-step); ev.preventDefault(); }
    else if (ev.key === "ArrowRight" && self.view) { self.pan(step); ev.preventDefault(); }
  });
};

// Load another page of rows, or fold a subtree (server: the server pages and folds).
RunView.prototype.fetchRows = function (params) {
  var self = this, run = this.run;
  if (REPORT) {
    return allRows().then(function () {
      self.localPage(params);
      self.drawHead();
      self.redraw();
    });
  }
  var q = ["limit=" + (run.limit || 300), "collapsed=" + enc(Object.keys(this.collapsed).join(","))];
  if (params.span) q.push("span=" + params.span); else q.push("offset=" + (params.offset || 0));
  return server.runPage(this.session.id, run.run_id, q.join("&")).then(function (res) {
    self.setRun(res.run);
    self.collapsed = {};
    (res.run.collapsed || []).forEach(function (id) { self.collapsed[id] = true; });
    self.drawHead();
    self.redraw();
  });
};

RunView.prototype.toggle = function (row) {
  if (this.collapsed[row.id]) delete this.collapsed[row.id]; else this.collapsed[row.id] = true;
  if (this.paged) this.fetchRows({ offset: this.run.offset });
  else this.drawTimeline();
};

// Select a bar, loading the page of rows that holds it first when needed.
RunView.prototype.show = function (span) {
  var self = this;
  if (this.find(span) && this.timelineEl.querySelector('.bar[data-span="' + span + '"]')) { this.select(span, true); return; }
  if (this.paged) this.fetchRows({ span: span }).then(function () { self.select(span, true); });
  else {
    // The report: open any collapsed row above it.
    var rows = this.run.rows, idx = -1;
    rows.forEach(function (r, i) { r.bars.forEach(function (b) { if (b.span_id === span) idx = i; }); });
    if (idx < 0) return;
    var depth = rows[idx].depth;
    for (var i = idx - 1; i >= 0 && depth > 0; i--) {
      if (rows[i].depth < depth) { depth = rows[i].depth; delete this.collapsed[rows[i].id]; }
    }
    this.drawTimeline();
    this.select(span, true);
  }
};

RunView.prototype.drawPager = function () {
  var run = this.run, self = this;
  if (!this.paged || run.total_rows <= run.rows.length) { fill(this.pagerEl); return; }
  var first = run.offset + 1, last = run.offset + run.rows.length;
  fill(this.pagerEl,
    h("button", { type: "button", class: "tool", disabled: run.offset === 0, "data-page": "prev",
      onclick: function () { self.fetchRows({ offset: Math.max(0, run.offset - run.limit) }); } }, "‹ previous"),
    h("span", { class: "note" }, "rows " + num(first) + "–" + num(last) + " of " + num(run.total_rows) +
      (run.total_rows !== run.all_rows ? " shown (" + num(run.all_rows) + " in all)" : "")),
    h("button", { type: "button", class: "tool", disabled: last >= run.total_rows, "data-page": "next",
      onclick: function () { self.fetchRows({ offset: run.offset + run.limit }); } }, "next ›"));
};

function previewOf(b) {
  if (b.state === "error") return { text: "⚠ " + errorLabel(b.error_type, b.error_text), error: true };
  var parts = [];
  if (b.preview) parts.push(b.preview);
  if (b.outcome) parts.push("→ " + b.outcome);
  return { text: parts.join(" "), error: false };
}

RunView.prototype.drawTimeline = function () {
  var run = this.run, self = this;
  var w = this.window(), span = Math.max(w[1] - w[0], 1);
  var live = this.session.live && !REPORT;
  var step = niceStep(span / 6);
  var axis = h("div", { class: "tl-track tl-axis" });
  for (var t = Math.ceil(w[0] / step) * step; t <= w[1]; t += step) {
    axis.appendChild(h("span", { class: "tick", style: { left: ((t - w[0]) / span * 100) + "%" } }, t ? dur(t) : "0"));
  }
  var rows = [h("div", { class: "tl-row" }, h("div", { class: "tl-label note" }, "execution"), axis)];

  function pos(startUs, endUs) {
    var left = (startUs - w[0]) / span * 100;
    var right = (endUs - w[0]) / span * 100;
    if (right < 0 || left > 100) return null;
    left = Math.max(0, left);
    right = Math.min(100, right);
    return { left: left + "%", width: Math.max(0, right - left) + "%" };
  }
  function grid() {
    var g = [];
    for (var t = Math.ceil(w[0] / step) * step; t < w[1]; t += step) {
      if (t > w[0]) g.push(h("span", { class: "tl-grid", style: { left: ((t - w[0]) / span * 100) + "%" } }));
    }
    return g;
  }
  function barEl(b, cls, text, title, spanId) {
    return h("button", {
      type: "button", class: "bar " + cls, "data-span": spanId, title: title,
      "aria-label": title, style: b,
      onclick: function () { self.select(spanId, false); },
    }, h("span", { class: "bt" }, text));
  }

  var runT0 = usOf(run.t0);
  var runStart = usOf(run.start) - runT0;
  var runEnd = run.duration_us;
  var runTitle = "run " + run.run_id + " · " + run.state + " · " + dur(runEnd - runStart);
  var runPos = pos(runStart, runEnd);
  rows.push(h("div", { class: "tl-row", "data-span": run.span_id },
    h("div", { class: "tl-label", title: "run " + run.run_id },
      h("span", { class: "kind k-run" }, "run"), runAgent(run, self.session) || "invoke_agent",
      run.prompt ? h("span", { class: "rprompt" }, " · " + words(run.prompt, 60)) : null),
    h("div", { class: "tl-track" }, grid(), runPos ? barEl(runPos, "k-run s-" + run.state + (live && run.state === "open" ? " live" : ""),
      dur(runEnd - runStart), runTitle, run.span_id) : null)));

  this.visibleRows().forEach(function (row) {
    var track = h("div", { class: "tl-track" }, grid());
    var failed = false;
    row.bars.forEach(function (b) {
      if (b.state === "error") failed = true;
      var p = pos(b.start_us, b.end_us);
      var d = b.end_us - b.start_us;
      var title = b.name + " · " + b.id + " · attempt " + b.attempt + " · " + b.state +
        (b.state === "error" ? " (" + errorLabel(b.error_type, b.error_text) + ")" : "") + " · " + dur(d);
      if (!p) {
        // Out of the zoomed window: an error still shows, as a mark at the edge.
        if (b.state === "error") {
          var edge = b.end_us < w[0] ? "left" : "right";
          track.appendChild(h("button", { type: "button", class: "err-edge " + edge, "data-span": b.span_id, title: title,
            "aria-label": title, onclick: function () { self.select(b.span_id, false); } }, edge === "left" ? "◂⚠" : "⚠▸"));
        }
        return;
      }
      var text = (b.attempt > 1 ? "#" + b.attempt + " " : "") + dur(d);
      var cls = "k-" + kindClass(b.kind) + " s-" + b.state + (b.retried ? " retried" : "") +
        (live && b.state === "open" ? " live" : "");
      var el = barEl(p, cls, text, title, b.span_id);
      el.style.setProperty("--kc", "var(--" + kindClass(b.kind) + ")");
      track.appendChild(el);
    });
    var last = row.bars[row.bars.length - 1];
    var pv = previewOf(failed && last.state !== "error" ? row.bars.filter(function (b) { return b.state === "error"; })[0] : last);
    var toggle = row.descendants ? h("button", {
      type: "button", class: "twisty", "aria-expanded": self.collapsed[row.id] ? "false" : "true",
      "aria-label": (self.collapsed[row.id] ? "expand " : "collapse ") + row.label + " (" + row.descendants + " below)",
      title: (self.collapsed[row.id] ? "show " : "hide ") + num(row.descendants) + " rows below",
      onclick: function (ev) { ev.stopPropagation(); self.toggle(row); },
    }, self.collapsed[row.id] ? "▸" : "▾") : h("span", { class: "twisty-pad" });
    var label = h("div", { class: "tl-label" + (failed ? " failed" : ""), title: row.kind + " " + row.id + (pv.text ? "\n" + pv.text : ""),
      style: { paddingLeft: (4 + row.depth * 14) + "px" } },
      h("div", { class: "tl-name" }, toggle,
        h("span", { class: "kind k-" + kindClass(row.kind) }, row.kind), row.label,
        self.collapsed[row.id] ? h("span", { class: "folded" }, " +" + num(row.descendants)) : null),
      pv.text ? h("div", { class: "tl-preview" + (pv.error ? " err" : "") }, pv.text) : null);
    rows.push(h("div", { class: "tl-row" + (failed ? " failed" : ""), "data-exec": row.id }, label, track));
  });
  fill(this.timelineEl, rows);
  this.drawPager();
  // A bar too narrow for its text shows the text beside it, unless the next
  // bar of the row is in the way (the tooltip still has it).
  // Measure every bar first, then change classes: one layout, not one per bar.
  var plan = [];
  Array.prototype.forEach.call(this.timelineEl.querySelectorAll(".tl-track"), function (track) {
    var bars = Array.prototype.slice.call(track.querySelectorAll(".bar"));
    var boxes = bars.map(function (el) {
      var text = el.querySelector(".bt");
      return { el: el, left: el.offsetLeft, width: el.offsetWidth, inner: el.clientWidth, text: text ? text.scrollWidth : 0 };
    });
    boxes.forEach(function (b, i) {
      if (!b.text || b.inner >= b.text + 10) return;
      var next = boxes[i + 1];
      var reach = b.left + b.width + 4 + b.text;  // the text beside the bar
      plan.push([b.el, next && next.left < reach + 4]);
    });
  });
  plan.forEach(function (p) {
    p[0].classList.add("narrow");
    if (p[1]) p[0].classList.add("mute");
  });
  if (this.selected) this.mark(this.selected);
};

RunView.prototype.mark = function (span) {
  Array.prototype.forEach.call(this.timelineEl.querySelectorAll(".selected"), function (el) {
    el.classList.remove("selected");
  });
  var el = this.timelineEl.querySelector('.bar[data-span="' + span + '"]');
  if (el) {
    el.classList.add("selected");
    if (el.parentNode && el.parentNode.parentNode) el.parentNode.parentNode.classList.add("selected");
  }
  return el;
};

RunView.prototype.select = function (span, initial) {
  var found = this.find(span);
  if (!found) return;
  this.selected = span;
  this.selectedSeqs = found.seqs.length;
  var el = this.mark(span);
  if (initial && el && el.scrollIntoView) el.scrollIntoView({ block: "nearest" });
  if (this.opts.onSelect) this.opts.onSelect(span);
  showDetails(this, found);
};


RunView.prototype.update = function (run, session) {
  var seqLast = this.run.seq_last;
  this.setRun(run);
  this.session = session;
  if (run.seq_last === seqLast && session.live) return;
  this.drawHead();
  this.redraw();
  if (this.selected) {
    var found = this.find(this.selected);
    if (found && found.seqs.length !== this.selectedSeqs) {
      this.selectedSeqs = found.seqs.length;
      showDetails(this, found);
    }
  }
};

// The same page of rows, again (a live session grows).
RunView.prototype.query = function () {
  var run = this.run;
  return "limit=" + (run.limit || 300) + "&offset=" + (run.offset || 0) +
    "&collapsed=" + enc(Object.keys(this.collapsed).join(","));
};

// -- the run page: /session/{id}/run/{run}; a live run is polled ------------------------

export function runPage() {
  var s = DATA.session, run = DATA.run;
  setCrumbs([["sessions", "/"], [sessionName(s), "/session/" + enc(s.id)], [runName(run), null]]);
  var base = location.pathname;
  var view = new RunView(app, s, run, {
    select: DATA.select,
    onSelect: function (span) {
      history.replaceState(null, "", base + "?span=" + span);
    },
  });
  if (s.live || run.state === "open") {
    var timer = setInterval(function () {
      server.runPage(s.id, run.run_id, view.query()).then(function (res) {
        view.update(res.run, res.session);
        if (!res.session.live && res.run.state !== "open") clearInterval(timer);
      }).catch(function () { /* the next poll tries again */ });
    }, 2000);
  }
}
