/* loopscribe viewer: builds every page from the JSON in <script id="ls-data">.
 *
 * The same script runs in two modes:
 *   server  pages of `loopscribe serve`; bodies are fetched on demand from /api/...
 *           and a clipped body's full line from /session/{id}/record/{seq}/raw;
 *   report  `loopscribe report`: one file, every record embedded, no network at all.
 *
 * Everything taken from a session file reaches the page through textContent or
 * attribute values, never as HTML.
 */
(function () {
  "use strict";

  var DATA = JSON.parse(document.getElementById("ls-data").textContent);
  var REPORT = DATA.mode === "report";
  var app = document.getElementById("app");
  var crumbs = document.getElementById("crumbs");
  var KINDS = ["model", "tool", "turn", "agent", "context"];
  var MESSAGE_TAGS = { user: 1, assistant: 1, system: 1, tool_result: 1 };

  // -- small helpers ---------------------------------------------------------------

  function h(tag, attrs) {
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
  function add(el, kid) {
    if (kid === null || kid === undefined || kid === false) return;
    if (Array.isArray(kid)) { kid.forEach(function (k) { add(el, k); }); return; }
    el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  function fill(el) {
    // Like replaceChildren, but skips null and flattens arrays (as h() does).
    el.replaceChildren();
    for (var i = 1; i < arguments.length; i++) add(el, arguments[i]);
    return el;
  }
  function enc(s) { return encodeURIComponent(s); }
  function kindClass(kind) { return KINDS.indexOf(kind) >= 0 ? kind : "other"; }
  function num(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
  function dur(us) {
    if (us === null || us === undefined) return "–";
    if (us < 1000) return us + " µs";
    if (us < 1e6) return (us / 1000).toFixed(us < 1e4 ? 2 : us < 1e5 ? 1 : 0) + " ms";
    if (us < 6e7) return (us / 1e6).toFixed(us < 1e7 ? 2 : 1) + " s";
    var m = Math.floor(us / 6e7);
    return m + " m " + Math.round((us - m * 6e7) / 1e6) + " s";
  }
  function when(iso) {
    if (!iso) return "–";
    var d = new Date(iso);
    if (isNaN(d)) return iso;
    var p = function (n) { return String(n).padStart(2, "0"); };
    return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
      p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
  }
  function bytes(n) {
    if (n < 1024) return n + " B";
    if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
    return (n / 1048576).toFixed(1) + " MiB";
  }
  function usOf(iso) {
    // Microsecond epoch of a stored timestamp ("...T07:48:57.856426Z").
    var m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?Z$/.exec(iso || "");
    if (!m) return null;
    return Date.parse(m[1] + "Z") * 1000 + Number(((m[2] || "") + "000000").slice(0, 6));
  }
  function chip(text, cls) { return h("span", { class: "chip " + (cls || "") }, text); }
  function stateChip(state, errorType) {
    var label = { ok: "ok", error: "error", open: "open", incomplete: "incomplete" }[state] || state;
    return chip(errorType ? label + " · " + errorType : label, "s-" + state);
  }
  function link(href, text, attrs) {
    if (REPORT) return h("span", attrs || null, text);
    return h("a", Object.assign({ href: href }, attrs || {}), text);
  }
  function setCrumbs(items) {
    crumbs.replaceChildren();
    items.forEach(function (item, i) {
      if (i) crumbs.appendChild(h("span", { class: "sep" }, "›"));
      crumbs.appendChild(item[1] && !REPORT ? h("a", { href: item[1] }, item[0]) : h("span", null, item[0]));
    });
  }
  function getJSON(url) {
    return fetch(url, { headers: { Accept: "application/json" } }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) throw new Error(body.error || r.status + " " + r.statusText);
        return body;
      });
    });
  }
  function sessionName(s) { return s.title || "session " + s.id.slice(0, 12); }

  // -- where records come from -------------------------------------------------------

  var server = {
    spanRecords: function (sid, span, offset) {
      return getJSON("/api/session/" + enc(sid) + "/span/" + span + "?offset=" + (offset || 0));
    },
    run: function (sid, rid) { return getJSON("/api/session/" + enc(sid) + "/run/" + enc(rid)); },
    full: function (rec) {
      return fetch("/session/" + enc(rec.session_id) + "/record/" + rec.seq + "/raw")
        .then(function (r) {
          if (!r.ok) return r.text().then(function (t) { throw new Error(t); });
          return r.text();
        })
        .then(function (line) {
          var obj = JSON.parse(line);
          return Object.assign({}, rec, { data: obj.data || {}, cuts: [] });
        });
    },
  };

  var embedded = {
    spanRecords: function (sid, span) {
      var seqs = null;
      (DATA.runs || []).forEach(function (run) {
        if (run.span_id === span) seqs = run.records;
        run.rows.forEach(function (row) {
          row.bars.forEach(function (bar) { if (bar.span_id === span) seqs = bar.seqs; });
        });
      });
      var recs = (seqs || []).map(function (s) { return DATA.records[String(s)]; }).filter(Boolean);
      return Promise.resolve({ records: recs, total: recs.length, offset: 0 });
    },
  };

  var source = REPORT ? embedded : server;

  // -- rendering record bodies ----------------------------------------------------------

  function isMessage(v) {
    if (!v || typeof v !== "object" || Array.isArray(v)) return false;
    if (MESSAGE_TAGS[v.$ls]) return true;
    return typeof v.role === "string" && "content" in v;
  }
  function isBlock(v) {
    if (!v || typeof v !== "object" || Array.isArray(v)) return false;
    var t = v.$ls || v.type;
    return t === "text" || t === "thinking" || t === "tool_call" || t === "tool_use" ||
      t === "image" || (t === "function" && v.function);
  }

  function Ctx(rec, onFull) {
    this.rec = rec;
    this.cuts = {};
    var self = this;
    (rec.cuts || []).forEach(function (c) { self.cuts[JSON.stringify(c.path)] = c; });
    this.onFull = onFull;
  }
  Ctx.prototype.cutNote = function (path) {
    var c = this.cuts[JSON.stringify(path)];
    if (!c) return null;
    var what = c.kind === "string"
      ? num(c.total - c.shown) + " more characters (" + num(c.total) + " in all)"
      : num(c.total - c.shown) + " more " + (c.kind === "items" ? "items" : "fields");
    var note = h("div", { class: "cut" }, "… " + what);
    if (this.onFull) {
      var self = this;
      note.appendChild(h("button", {
        class: "more", type: "button", "data-seq": this.rec.seq,
        onclick: function (ev) { ev.target.disabled = true; ev.target.textContent = "loading…"; self.onFull(); },
      }, "load full body"));
    } else if (REPORT) {
      note.appendChild(h("span", null, " — cut in this report; the whole body is record " +
        this.rec.seq + " of the session file (or make the report with --full)"));
    }
    return note;
  };

  function renderString(s, path, ctx) {
    var note = ctx.cutNote(path);
    if (!note && s.length <= 120 && s.indexOf("\n") < 0) return h("span", { class: "str" }, s);
    return h("div", null, h("pre", { class: "text" }, s), note);
  }

  function renderValue(v, path, ctx) {
    if (v === null || typeof v !== "object") {
      if (typeof v === "string") return renderString(v, path, ctx);
      return h("span", { class: "lit" }, JSON.stringify(v));
    }
    if (Array.isArray(v)) {
      if (!v.length) return h("span", { class: "lit" }, "[]");
      var scalars = v.every(function (x) { return x === null || typeof x !== "object"; });
      var inline = JSON.stringify(v);
      if (scalars && inline.length <= 100 && !ctx.cutNote(path)) return h("span", { class: "lit" }, inline);
      return h("div", null,
        h("ol", { class: "arr", start: 0 }, v.map(function (x, i) {
          return h("li", null, renderValue(x, path.concat([i]), ctx));
        })),
        ctx.cutNote(path));
    }
    if (isMessage(v)) return renderMessage(v, path, ctx);
    if (v.$ls === "usage" && renderUsage(v)) return renderUsage(v);
    if (isBlock(v)) return renderBlock(v, path, ctx);
    var keys = Object.keys(v).filter(function (k) { return k !== "$ls"; });
    if (!keys.length) return h("span", { class: "lit" }, v.$ls ? v.$ls + " {}" : "{}");
    return h("div", null,
      v.$ls ? h("div", { class: "tag" }, v.$ls) : null,
      h("dl", { class: "obj" }, keys.map(function (k) {
        return [h("dt", null, k), h("dd", null, renderValue(v[k], path.concat([k]), ctx))];
      })),
      ctx.cutNote(path));
  }

  function renderBlock(b, path, ctx) {
    var t = b.$ls || b.type;
    if (t === "text") return renderString(String(b.text || ""), path.concat(["text"]), ctx);
    if (t === "thinking") {
      var th = h("pre", { class: "text thinking" }, String(b.thinking || ""));
      return h("div", null, th, ctx.cutNote(path.concat(["thinking"])));
    }
    if (t === "image") {
      return h("span", { class: "tag" }, "[image " + (b.mime_type || b.media_type || "") + "]");
    }
    var name = b.name, args = b.arguments, argKey = "arguments";
    if (t === "tool_use") { args = b.input; argKey = "input"; }
    if (t === "function") { name = b.function.name; args = b.function.arguments; }
    return h("div", { class: "toolcall" },
      h("span", null, "→ call "), h("span", { class: "tn" }, name || "?"),
      b.id ? h("span", { class: "tag" }, "  " + b.id) : null,
      args === undefined ? null : h("div", null,
        renderValue(args, t === "function" ? path.concat(["function", "arguments"]) : path.concat([argKey]), ctx)));
  }

  function renderMessage(m, path, ctx) {
    var role = m.role || (m.$ls === "tool_result" ? "tool" : m.$ls);
    var head = h("div", { class: "msg-head" }, role);
    ["model", "tool_name", "name", "tool_call_id", "stop_reason"].forEach(function (k) {
      if (typeof m[k] === "string" && m[k]) head.appendChild(chip(k === "tool_call_id" ? m[k] : m[k]));
    });
    if (m.is_error === true) head.appendChild(chip("is_error", "s-error"));
    if (m.error_message) head.appendChild(chip("error", "s-error"));
    var body = h("div", { class: "msg-body" });
    var content = m.content;
    if (typeof content === "string") body.appendChild(renderString(content, path.concat(["content"]), ctx));
    else if (Array.isArray(content)) {
      content.forEach(function (b, i) { body.appendChild(renderValue(b, path.concat(["content", i]), ctx)); });
      add(body, ctx.cutNote(path.concat(["content"])));
    } else if (content !== undefined && content !== null) {
      body.appendChild(renderValue(content, path.concat(["content"]), ctx));
    }
    var skip = { $ls: 1, role: 1, content: 1, model: 1, tool_name: 1, name: 1, tool_call_id: 1, stop_reason: 1, is_error: 1, provider: 1 };
    var extra = Object.keys(m).filter(function (k) { return !skip[k] && m[k] !== null && m[k] !== undefined; });
    if (extra.length) {
      body.appendChild(h("dl", { class: "obj" }, extra.map(function (k) {
        return [h("dt", null, k), h("dd", null, renderValue(m[k], path.concat([k]), ctx))];
      })));
    }
    return h("div", { class: "msg role-" + role }, head, body);
  }

  function renderError(e, path, ctx) {
    if (e && typeof e === "object" && !Array.isArray(e)) {
      var rest = Object.assign({}, e);
      delete rest.type; delete rest.message;
      return h("div", { class: "error-box" },
        e.type ? h("span", { class: "et" }, e.type) : null,
        e.message ? [e.type ? ": " : "", renderValue(e.message, path.concat(["message"]), ctx)] : null,
        Object.keys(rest).length ? renderValue(rest, path, ctx) : null);
    }
    return h("div", { class: "error-box" }, renderValue(e, path, ctx));
  }

  function renderUsage(u) {
    if (!u || typeof u !== "object") return null;
    var i = u.input_tokens !== undefined ? u.input_tokens : u.prompt_tokens;
    var o = u.output_tokens !== undefined ? u.output_tokens : u.completion_tokens;
    if (i === undefined && o === undefined) return null;
    return h("span", { class: "str" }, num(i) + " in / " + num(o) + " out");
  }

  function renderRecord(rec, opts) {
    opts = opts || {};
    var card = h("article", { class: "rec", id: "rec-" + rec.seq, "data-seq": rec.seq, "data-type": rec.type });
    var rel = opts.t0 !== undefined && opts.t0 !== null ? usOf(rec.ts) - opts.t0 : null;
    card.appendChild(h("header", null,
      link("/session/" + enc(rec.session_id) + "/record/" + rec.seq, "#" + rec.seq, { class: "mono" }),
      h("span", { class: "type" }, rec.type),
      rec.execution ? h("span", { class: "tag" }, rec.execution.kind + " " + rec.execution.id + " #" + rec.execution.attempt) : null,
      h("span", { class: "spacer" }),
      h("span", { class: "when", title: rec.ts }, rel === null ? when(rec.ts) : rel <= 0 ? "at start" : "+" + dur(rel)),
      h("span", { class: "size" }, bytes(rec.size)),
      REPORT ? null : h("a", { href: "/session/" + enc(rec.session_id) + "/record/" + rec.seq + "/raw", class: "size" }, "raw")));
    var onFull = REPORT ? null : function () {
      server.full(rec).then(function (full) {
        card.replaceWith(renderRecord(full, opts));
      }).catch(function (err) {
        card.appendChild(h("div", { class: "error-box" }, "could not load the full body: " + err.message));
      });
    };
    var ctx = new Ctx(rec, onFull);
    var body = h("div", { class: "body" });
    var data = rec.data || {};
    var keys = Object.keys(data);
    if (!keys.length) body.appendChild(h("span", { class: "note" }, "(no data)"));
    keys.forEach(function (k) {
      var v = data[k], path = ["data", k], shown;
      if (k === "error" && v) shown = renderError(v, path, ctx);
      else if (k === "usage" && renderUsage(v)) shown = renderUsage(v);
      else if (k === "messages" && Array.isArray(v)) {
        shown = h("div", null, v.map(function (m, i) { return renderValue(m, path.concat([i]), ctx); }), ctx.cutNote(path));
      } else shown = renderValue(v, path, ctx);
      body.appendChild(h("div", { class: "field", "data-key": k }, h("div", { class: "fk" }, k), shown));
    });
    add(body, ctx.cutNote(["data"]));
    card.appendChild(body);
    return card;
  }

  // -- the run view: timeline + details -------------------------------------------------

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

  function RunView(container, session, run, opts) {
    this.container = container;
    this.session = session;
    this.run = run;
    this.opts = opts || {};
    this.selected = null;
    this.selectedSeqs = -1;
    this.render();
  }

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

  RunView.prototype.render = function () {
    this.headEl = h("div", { class: "run-head" });
    this.timelineEl = h("section", { class: "panel timeline", "aria-label": "timeline" });
    this.detailsEl = h("aside", { class: "panel details", id: "details" },
      h("div", { class: "empty" }, "Select a bar to see its records: messages, tool arguments and results, errors."));
    fill(this.container, this.headEl, legend(),
      h("div", { class: "run-grid" }, this.timelineEl, this.detailsEl));
    this.drawHead();
    this.drawTimeline();
    var want = this.opts.select;
    if (want && this.find(want)) this.select(want, true);
  };

  RunView.prototype.drawHead = function () {
    var run = this.run, c = run.counts;
    fill(this.headEl,
      h("h1", null, (run.agent ? run.agent + " · " : "") + "run " + run.run_id),
      h("div", { class: "meta" },
        stateChip(run.state, run.error_type),
        this.session.status === "running" && !REPORT ? chip("running", "st-running") : null,
        h("span", null, "started ", h("b", null, when(run.start))),
        h("span", null, "duration ", h("b", null, dur(run.duration_us))),
        h("span", null, h("b", null, num(c.model_calls)), " model calls"),
        h("span", null, h("b", null, num(c.tool_calls)), " tool calls"),
        h("span", null, h("b", null, num(c.errors)), " errors"),
        h("span", null, h("b", null, num(c.retries)), " retries"),
        h("span", { class: "mono" }, "trace " + run.trace_id)));
  };

  RunView.prototype.drawTimeline = function () {
    var run = this.run, self = this;
    var total = Math.max(run.duration_us, 1);
    var live = this.session.status === "running" && !REPORT;
    var step = niceStep(total / 6);
    var axis = h("div", { class: "tl-track tl-axis" });
    for (var t = 0; t <= total; t += step) {
      axis.appendChild(h("span", { class: "tick", style: { left: (t / total * 100) + "%" } }, t ? dur(t) : "0"));
    }
    var rows = [h("div", { class: "tl-row" }, h("div", { class: "tl-label note" }, "execution"), axis)];

    function pos(startUs, endUs) {
      var left = Math.max(0, Math.min(100, startUs / total * 100));
      var width = Math.max(0, Math.min(100 - left, (endUs - startUs) / total * 100));
      return { left: left + "%", width: width + "%" };
    }
    function grid() {
      var g = [];
      for (var t = step; t < total; t += step) g.push(h("span", { class: "tl-grid", style: { left: (t / total * 100) + "%" } }));
      return g;
    }
    function barEl(b, cls, text, title, span) {
      var el = h("button", {
        type: "button", class: "bar " + cls, "data-span": span, title: title,
        "aria-label": title, style: b,
        onclick: function () { self.select(span, false); },
      }, h("span", { class: "bt" }, text));
      return el;
    }

    var runT0 = usOf(run.t0);
    var runStart = usOf(run.start) - runT0;
    var runEnd = run.duration_us;
    var runTitle = "run " + run.run_id + " · " + run.state + " · " + dur(runEnd - runStart);
    var runBar = barEl(pos(runStart, runEnd), "k-run s-" + run.state + (live && run.state === "open" ? " live" : ""),
      dur(runEnd - runStart), runTitle, run.span_id);
    rows.push(h("div", { class: "tl-row", "data-span": run.span_id },
      h("div", { class: "tl-label", title: "run " + run.run_id },
        h("span", { class: "kind k-run" }, "run"), run.agent || "invoke_agent", h("span", { class: "rid" }, run.run_id.slice(0, 8))),
      h("div", { class: "tl-track" }, grid(), runBar)));

    run.rows.forEach(function (row) {
      var track = h("div", { class: "tl-track" }, grid());
      row.bars.forEach(function (b) {
        var d = b.end_us - b.start_us;
        var text = (b.attempt > 1 ? "#" + b.attempt + " " : "") + dur(d);
        var title = b.name + " · " + b.id + " · attempt " + b.attempt + " · " + b.state +
          (b.error_type ? " (" + b.error_type + ")" : "") + " · " + dur(d);
        var cls = "k-" + kindClass(b.kind) + " s-" + b.state + (b.retried ? " retried" : "") +
          (live && b.state === "open" ? " live" : "");
        var el = barEl(pos(b.start_us, b.end_us), cls, text, title, b.span_id);
        el.style.setProperty("--kc", "var(--" + kindClass(b.kind) + ")");
        track.appendChild(el);
      });
      var label = h("div", { class: "tl-label", title: row.kind + " " + row.id, style: { paddingLeft: (10 + row.depth * 14) + "px" } },
        h("span", { class: "kind k-" + kindClass(row.kind) }, row.kind), row.label,
        row.label !== row.id ? h("span", { class: "rid" }, row.id) : null);
      rows.push(h("div", { class: "tl-row", "data-exec": row.id }, label, track));
    });
    fill(this.timelineEl, rows);
    // A bar too narrow for its text shows the text beside it, unless the next
    // bar of the row is in the way (the tooltip still has it).
    Array.prototype.forEach.call(this.timelineEl.querySelectorAll(".tl-track"), function (track) {
      var bars = Array.prototype.slice.call(track.querySelectorAll(".bar"));
      bars.forEach(function (el, i) {
        var text = el.querySelector(".bt");
        if (!text || el.clientWidth >= text.scrollWidth + 10) return;
        el.classList.add("narrow");
        var next = bars[i + 1];
        var reach = el.offsetLeft + el.offsetWidth + text.offsetLeft - el.clientWidth + text.scrollWidth;
        if (next && next.offsetLeft < reach + 4) el.classList.add("mute");
      });
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
    this.showDetails(found);
  };

  RunView.prototype.showDetails = function (found) {
    var run = this.run, sid = this.session.id, pane = this.detailsEl;
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
      if (bar.agent) fact("agent", bar.agent);
      if (bar.input_tokens !== null || bar.output_tokens !== null) fact("tokens", num(bar.input_tokens) + " in / " + num(bar.output_tokens) + " out");
      fact("start", when(bar.start));
      fact("duration", dur(bar.end_us - bar.start_us) + (bar.end ? "" : " so far"));
      fact("records", "seq " + bar.seqs.join(", "), true);
      t0 = usOf(bar.start);
    } else {
      title = h("h2", null, "run " + run.run_id, " ", stateChip(run.state, run.error_type));
      fact("agent", run.agent);
      fact("start", when(run.start));
      fact("end", run.end ? when(run.end) : "not closed");
      fact("records", "the run's own records (seq " + run.records.join(", ") + ")", true);
      t0 = usOf(run.start);
    }
    fact("span id", h("span", { class: "mono" }, found.span), true);
    fact("trace id", h("span", { class: "mono" }, run.trace_id), true);
    if (!REPORT) fact("link", h("a", { href: "/trace/" + run.trace_id + "/span/" + found.span, class: "mono" }, "/trace/…/span/" + found.span), true);
    var list = h("div", { class: "records", "aria-live": "polite" }, h("div", { class: "note" }, "loading records…"));
    fill(pane, title, h("dl", { class: "facts" }, facts), list);
    pane.scrollTop = 0;
    var self = this;
    this.loadRecords(list, found.span, 0, t0, true);
  };

  RunView.prototype.loadRecords = function (list, span, offset, t0, first) {
    var self = this;
    source.spanRecords(this.session.id, span, offset).then(function (res) {
      if (self.selected !== span) return;
      if (first) fill(list);
      res.records.forEach(function (rec) { list.appendChild(renderRecord(rec, { t0: t0 })); });
      var next = res.offset + res.records.length;
      if (next < res.total) {
        var more = h("button", { class: "more", type: "button", onclick: function () {
          more.remove(); self.loadRecords(list, span, next, t0, false);
        } }, "load " + num(res.total - next) + " more records");
        list.appendChild(more);
      }
    }).catch(function (err) {
      fill(list, h("div", { class: "error-box" }, "could not load the records: " + err.message));
    });
  };

  RunView.prototype.update = function (run, session) {
    var seqLast = this.run.seq_last;
    this.run = run;
    this.session = session;
    if (run.seq_last === seqLast && session.status === "running") return;
    this.drawHead();
    this.drawTimeline();
    if (this.selected) {
      var found = this.find(this.selected);
      if (found && found.seqs.length !== this.selectedSeqs) {
        this.selectedSeqs = found.seqs.length;
        this.showDetails(found);
      }
    }
  };

  // -- pages --------------------------------------------------------------------------------

  function sessionsPage() {
    setCrumbs([["sessions", null]]);
    var rows = DATA.sessions.map(function (s) {
      return h("tr", { "data-session": s.id },
        h("td", null, h("a", { href: "/session/" + enc(s.id) }, sessionName(s)),
          h("div", { class: "tag" }, s.id)),
        h("td", null, chip(s.status, "st-" + s.status)),
        h("td", null, s.model || "–"),
        h("td", { class: "num" }, num(s.runs)),
        h("td", { class: "num" }, num(s.messages)),
        h("td", { class: "num" }, num(s.input_tokens) + " / " + num(s.output_tokens)),
        h("td", null, when(s.updated)));
    });
    fill(app,
      h("h1", null, "Sessions"),
      h("p", { class: "note" }, DATA.root),
      DATA.sessions.length ? h("table", { class: "list" },
        h("thead", null, h("tr", null, h("th", null, "session"), h("th", null, "status"), h("th", null, "model"),
          h("th", { class: "num" }, "runs"), h("th", { class: "num" }, "messages"),
          h("th", { class: "num" }, "tokens in / out"), h("th", null, "updated"))),
        h("tbody", null, rows)) : h("p", { class: "note" }, "No session files here yet."),
      DATA.skipped.length ? h("details", null, h("summary", null, DATA.skipped.length + " files skipped"),
        h("ul", null, DATA.skipped.map(function (s) { return h("li", { class: "mono" }, s.file + ": " + s.error); }))) : null);
  }

  function runsTable(sid, runs) {
    return h("table", { class: "list" },
      h("thead", null, h("tr", null, h("th", null, "run"), h("th", null, "agent"), h("th", null, "started"),
        h("th", { class: "num" }, "duration"), h("th", null, "state"), h("th", { class: "num" }, "model calls"),
        h("th", { class: "num" }, "tool calls"), h("th", { class: "num" }, "errors"), h("th", { class: "num" }, "retries"),
        h("th", null, "trace id"))),
      h("tbody", null, runs.map(function (r) {
        return h("tr", { "data-run": r.run_id },
          h("td", null, h("a", { href: "/session/" + enc(r.session_id || sid) + "/run/" + enc(r.run_id), class: "mono" }, r.run_id)),
          h("td", null, r.agent || "–"),
          h("td", null, when(r.start)),
          h("td", { class: "num" }, dur(r.duration_us)),
          h("td", null, stateChip(r.state, r.error_type)),
          h("td", { class: "num" }, num(r.counts.model_calls)),
          h("td", { class: "num" }, num(r.counts.tool_calls)),
          h("td", { class: "num" }, num(r.counts.errors)),
          h("td", { class: "num" }, num(r.counts.retries)),
          h("td", { class: "mono" }, r.trace_id));
      })));
  }

  function sessionHead(s) {
    return [h("h1", null, sessionName(s)),
      h("div", { class: "meta" }, chip(s.status, "st-" + s.status),
        h("span", { class: "mono" }, s.id),
        s.model ? h("span", null, "model ", h("b", null, s.model)) : null,
        h("span", null, h("b", null, num(s.messages)), " messages"),
        h("span", null, "tokens ", h("b", null, num(s.input_tokens) + " / " + num(s.output_tokens))),
        h("span", null, "created ", h("b", null, when(s.created))),
        h("span", { class: "mono" }, s.file))];
  }

  function sessionPage() {
    var s = DATA.session;
    setCrumbs([["sessions", "/"], [sessionName(s), null]]);
    fill(app, sessionHead(s).concat([
      h("h2", null, "Runs"),
      DATA.runs.length ? runsTable(s.id, DATA.runs) : h("p", { class: "note" }, "No runs yet.")]));
  }

  function runPage() {
    var s = DATA.session, run = DATA.run;
    setCrumbs([["sessions", "/"], [sessionName(s), "/session/" + enc(s.id)], ["run " + run.run_id, null]]);
    var base = location.pathname;
    var view = new RunView(app, s, run, {
      select: DATA.select,
      onSelect: function (span) {
        history.replaceState(null, "", base + "?span=" + span);
      },
    });
    if (s.status === "running" || run.state === "open") {
      var timer = setInterval(function () {
        server.run(s.id, run.run_id).then(function (res) {
          view.update(res.run, res.session);
          if (res.session.status !== "running" && res.run.state !== "open") clearInterval(timer);
        }).catch(function () { /* the next poll tries again */ });
      }, 2000);
    }
  }

  function recordPage() {
    var s = DATA.session, rec = DATA.record;
    setCrumbs([["sessions", "/"], [sessionName(s), "/session/" + enc(s.id)],
      DATA.run ? ["run " + DATA.run, "/session/" + enc(s.id) + "/run/" + enc(DATA.run)] : null,
      ["record " + rec.seq, null]].filter(Boolean));
    var span = DATA.span;
    fill(app,
      h("h1", null, "record " + rec.seq + " · " + rec.type),
      h("div", { class: "meta" }, h("span", null, when(rec.ts)), h("span", null, bytes(rec.size) + " at byte " + num(rec.offset)),
        span ? h("a", { href: "/session/" + enc(s.id) + "/run/" + enc(DATA.run) + "?span=" + span.span_id }, "show on the timeline") : null,
        h("a", { href: "/session/" + enc(s.id) + "/record/" + rec.seq + "/raw" }, "raw line")),
      h("h2", null, "Body"),
      renderRecord(rec, {}));
  }

  function tracePage() {
    setCrumbs([["sessions", "/"], ["trace " + DATA.trace_id, null]]);
    fill(app, h("h1", null, "trace " + DATA.trace_id),
      h("p", { class: "note" }, "Several runs belong to this trace (their host began them inside one of its spans)."),
      runsTable(null, DATA.runs));
  }

  function errorPage() {
    setCrumbs([["sessions", "/"], [String(DATA.status), null]]);
    fill(app, h("div", { class: "error-page" },
      h("h1", null, DATA.status === 404 ? "Not found" : "Error " + DATA.status),
      h("p", { class: "message" }, DATA.message),
      h("p", null, h("a", { href: "/" }, "All sessions"))));
  }

  function reportPage() {
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
      var run = runs[0];
      runs.forEach(function (r) {
        if (want.run === r.run_id) run = r;
        if (want.span && (r.span_id === want.span ||
          r.rows.some(function (row) { return row.bars.some(function (b) { return b.span_id === want.span; }); }))) run = r;
      });
      if (run) show(run, want.span);
    }
    runs.forEach(function (r) {
      tabs.appendChild(h("button", { type: "button", "data-run": r.run_id, onclick: function () {
        history.replaceState(null, "", "#run=" + r.run_id); show(r, null);
      } }, (r.agent || "run") + " " + r.run_id.slice(0, 8)));
    });
    fill(app, sessionHead(s).concat([
      h("p", { class: "note" }, "Made by loopscribe report on " + when(DATA.generated) + ". " + DATA.note),
      runs.length > 1 ? tabs : null,
      runs.length ? holder : h("p", { class: "note" }, "This session has no runs.")]));
    window.addEventListener("hashchange", route);
    route();
  }

  var pages = {
    sessions: sessionsPage, session: sessionPage, run: runPage, record: recordPage,
    trace: tracePage, error: errorPage, report: reportPage,
  };
  (pages[DATA.view] || errorPage)();
})();
