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
    var secs = Math.round(us / 1e6);
    if (secs < 3600) return Math.floor(secs / 60) + " m " + (secs % 60) + " s";
    var mins = Math.round(us / 6e7);
    if (mins < 1440) return Math.floor(mins / 60) + " h " + (mins % 60) + " m";
    var hours = Math.round(us / 3.6e9);
    return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
  }
  function clean(s) {
    // One line of text for a chip or a summary: tags such as <tool_use_error> dropped
    // (their text kept), escaped newlines that a tool printed literally read as spaces.
    return String(s === null || s === undefined ? "" : s)
      .replace(/<\/?[A-Za-z_][\w-]*>/g, " ")
      .replace(/\\[nrt]/g, " ")
      .replace(/\s+/g, " ")
      .trim();
  }
  function words(s, n) {
    var t = clean(s);
    return t.length > n ? t.slice(0, n - 1).replace(/\s+\S*$/, "") + "…" : t;
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
    // _OTHER (an error with no type name) says nothing: the error's text is shown beside it.
    return chip(errorType && errorType !== "_OTHER" ? label + " · " + errorType : label, "s-" + state);
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
  // A cost as the server computed it from usage: dollars, or "unknown" (never shown as 0).
  function cost(v) {
    if (v === null || v === undefined) return "–";
    if (v === "unknown") return "unknown";
    if (v === 0) return "$0";
    return "$" + (v >= 100 ? Math.round(v).toLocaleString("en-US") : v >= 1 ? v.toFixed(2) : v.toFixed(4));
  }

  // A run by what a person recognises: the first words of its prompt, else its agent.
  function runName(r) { return r.prompt ? words(r.prompt, 80) : (r.agent || "run") + " " + r.run_id.slice(0, 8); }
  function runAgent(r, s) { return r.agent || (s && (s.agent_name || s.source)) || null; }

  // -- Markdown, built as DOM nodes --------------------------------------------------------
  //
  // Message text is Markdown more often than not. It is drawn here with createElement and
  // text nodes only: raw HTML in a body stays visible text (never parsed), entities are not
  // decoded, a link is a link only to http(s) or mailto (anything else, javascript: and
  // data: included, is shown as text), and an image is never loaded (its link is shown).

  var MD_MAX_CHARS = 100000;  // longer text is shown as it is
  var SAFE_URL = /^(?:https?:\/\/|mailto:)[^\s\u0000-\u001f\u007f<>"'`\\]+$/i;
  var INLINE = [
    ["code", /`([^`\n]+)`/],
    ["link", /(!?)\[([^\]\n]{0,500})\]\(\s*<?([^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*)>?(?:\s+"[^"\n]*")?\s*\)/],
    ["auto", /<((?:https?:\/\/|mailto:)[^\s<>]+)>/],
    ["url", /\bhttps?:\/\/[^\s<>()"'`]*[^\s<>()"'`.,;:!?*_~]/],
    ["strong", /\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__/],
    ["del", /~~(?=\S)([\s\S]*?\S)~~/],
    ["em", /\*(?=[^\s*])([^*\n]*?[^\s*])\*|(?:^|(?<=[\s(]))_(?=\S)([^_\n]*?\S)_(?![A-Za-z0-9])/],
  ];

  function safeLink(url, text) {
    var u = String(url || "").trim();
    if (!SAFE_URL.test(u)) return null;
    return h("a", { href: u, rel: "noopener noreferrer nofollow", target: "_blank", referrerpolicy: "no-referrer" }, text);
  }

  function mdInline(text, depth) {
    var out = [];
    var rest = String(text);
    while (rest) {
      var best = null;
      if (depth < 4) {
        INLINE.forEach(function (p) {
          var m = p[1].exec(rest);
          if (m && (!best || m.index < best.m.index)) best = { kind: p[0], m: m };
        });
      }
      if (!best) { out.push(rest); break; }
      var m = best.m;
      if (m.index) out.push(rest.slice(0, m.index));
      rest = rest.slice(m.index + m[0].length);
      if (best.kind === "code") out.push(h("code", null, m[1]));
      else if (best.kind === "link") {
        var label = m[2], url = m[3];
        if (m[1]) {
          // An image: never loaded, shown as its link.
          out.push(safeLink(url, "image: " + (label || url)) || m[0]);
        } else {
          var a = safeLink(url, null);
          if (a) { add(a, mdInline(label || url, depth + 1)); out.push(a); }
          else out.push(m[0]);  // an unsafe link stays text, whole, so it can be read
        }
      } else if (best.kind === "auto" || best.kind === "url") {
        var target = best.kind === "auto" ? m[1] : m[0];
        out.push(safeLink(target, target) || m[0]);
      } else if (best.kind === "strong") out.push(h("strong", null, mdInline(m[1] || m[2], depth + 1)));
      else if (best.kind === "del") out.push(h("del", null, mdInline(m[1], depth + 1)));
      else out.push(h("em", null, mdInline(m[1] || m[2], depth + 1)));
    }
    return out;
  }

  function mdBlocks(lines, depth) {
    var out = [], i = 0, para = [];
    function flush() {
      if (para.length) out.push(h("p", null, mdInline(para.join("\n"), 0)));
      para = [];
    }
    while (i < lines.length) {
      var line = lines[i], m;
      if (/^\s*$/.test(line)) { flush(); i++; continue; }
      if ((m = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/.exec(line))) {
        flush();
        var fence = m[1], code = [];
        for (i++; i < lines.length && lines[i].trim().indexOf(fence) !== 0; i++) code.push(lines[i]);
        i++;
        out.push(h("pre", { class: "text md-code", "data-lang": m[2] || null }, h("code", null, code.join("\n"))));
        continue;
      }
      if ((m = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line))) {
        flush();
        out.push(h("h" + Math.min(6, m[1].length + 2), { class: "md-h" }, mdInline(m[2], 0)));
        i++; continue;
      }
      if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) { flush(); out.push(h("hr")); i++; continue; }
      if (/^\s{0,3}>/.test(line) && depth < 4) {
        flush();
        var quoted = [];
        for (; i < lines.length && /^\s{0,3}>/.test(lines[i]); i++) quoted.push(lines[i].replace(/^\s{0,3}>\s?/, ""));
        out.push(h("blockquote", null, mdBlocks(quoted, depth + 1)));
        continue;
      }
      var bullet = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(line);
      if (bullet) {
        flush();
        var ordered = /\d/.test(bullet[1]);
        var items = [];
        for (; i < lines.length; i++) {
          var b = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(lines[i]);
          if (b && /\d/.test(b[1]) === ordered) items.push([b[2]]);
          else if (items.length && /^\s{2,}\S/.test(lines[i])) items[items.length - 1].push(lines[i].trim());
          else break;
        }
        var start = ordered ? parseInt(bullet[1], 10) : null;
        out.push(h(ordered ? "ol" : "ul", ordered && start !== 1 ? { start: start } : null,
          items.map(function (it) { return h("li", null, mdInline(it.join("\n"), 0)); })));
        continue;
      }
      if (/\|/.test(line) && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/.test(lines[i + 1])) {
        flush();
        var cells = function (l) { return l.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map(function (c) { return c.trim(); }); };
        var head = cells(line), body = [];
        for (i += 2; i < lines.length && /\|/.test(lines[i]) && lines[i].trim(); i++) body.push(cells(lines[i]));
        out.push(h("table", { class: "md-table" },
          h("thead", null, h("tr", null, head.map(function (c) { return h("th", null, mdInline(c, 0)); }))),
          h("tbody", null, body.map(function (r) { return h("tr", null, r.map(function (c) { return h("td", null, mdInline(c, 0)); })); }))));
        continue;
      }
      para.push(line);
      i++;
    }
    flush();
    return out;
  }

  // Text as Markdown (see above); text too long to parse cheaply is shown as it is.
  function markdown(text) {
    var s = String(text);
    if (s.length > MD_MAX_CHARS) return h("pre", { class: "text" }, s);
    return h("div", { class: "md" }, mdBlocks(s.replace(/\r\n?/g, "\n").split("\n"), 0));
  }

  function renderProse(s, path, ctx) {
    return h("div", { class: "prose" }, markdown(s), ctx.cutNote(path));
  }

  // -- where records come from -------------------------------------------------------

  var server = {
    spanRecords: function (sid, span, offset) {
      return getJSON("/api/session/" + enc(sid) + "/span/" + span + "?offset=" + (offset || 0));
    },
    run: function (sid, rid) { return getJSON("/api/session/" + enc(sid) + "/run/" + enc(rid)); },
    runPage: function (sid, rid, query) { return getJSON("/api/session/" + enc(sid) + "/run/" + enc(rid) + "?" + query); },
    full: function (rec) {
      return fetch("/session/" + enc(rec.session_id) + "/record/" + rec.seq + "/raw")
        .then(function (r) {
          if (!r.ok) return r.text().then(function (t) { throw new Error(t); });
          return r.text();
        })
        .then(function (line) {
          var obj = JSON.parse(line);
          // The body is whole now; a derived context stays as it was sent (each of
          // its messages links to its own record, which loads whole there).
          var kept = (rec.cuts || []).filter(function (c) { return c.path[0] === "context"; });
          return Object.assign({}, rec, { data: obj.data || {}, cuts: kept });
        });
    },
  };

  // The report's records: gzip chunks after the script (see _report.py), each decompressed
  // the first time a record it holds is shown; LOADED keeps the records read so far.
  var LOADED = {};
  var chunkOf = null;
  var chunkWaits = {};
  function parsed() {
    // The rest of the report (after this script) has been read.
    return document.readyState === "loading"
      ? new Promise(function (ok) { document.addEventListener("DOMContentLoaded", ok); })
      : Promise.resolve();
  }
  var rowsRead = null;
  function allRows() {
    // A large run's data holds its first rows; the others follow the script.
    if (!rowsRead) {
      rowsRead = parsed().then(function () {
        (DATA.runs || []).forEach(function (run) {
          if (!run.rows_element) return;
          var el = document.getElementById(run.rows_element);
          if (!el) throw new Error("this report is missing part of its timeline (" + run.rows_element + ")");
          run.rows = JSON.parse(el.textContent);
          run.rows_element = null;
        });
      });
    }
    return rowsRead;
  }
  function loadChunk(n) {
    if (chunkWaits[n]) return chunkWaits[n];
    chunkWaits[n] = parsed().then(function () {
      var el = document.getElementById("ls-chunk-" + n);
      if (!el) throw new Error("this report is missing part of its records (chunk " + n + ")");
      var bin = atob(el.textContent.trim());
      var bytes = new Uint8Array(bin.length);
      for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      return new Response(stream).text();
    }).then(function (text) {
      var recs = JSON.parse(text);
      Object.keys(recs).forEach(function (k) { LOADED[k] = recs[k]; });
    });
    return chunkWaits[n];
  }
  function loadRecords(seqs) {
    if (!chunkOf) {
      chunkOf = {};
      ((DATA.records || {}).chunks || []).forEach(function (chunk, n) {
        chunk.forEach(function (seq) { chunkOf[seq] = n; });
      });
    }
    var want = {};
    seqs.forEach(function (s) { if (!LOADED[String(s)] && chunkOf[s] !== undefined) want[chunkOf[s]] = true; });
    return Promise.all(Object.keys(want).map(loadChunk));
  }

  var embedded = {
    spanRecords: function (sid, span) {
      return allRows().then(function () { return embedded.records(span); });
    },
    records: function (span) {
      var seqs = null;
      (DATA.runs || []).forEach(function (run) {
        if (run.span_id === span) seqs = run.records;
        run.rows.forEach(function (row) {
          row.bars.forEach(function (bar) { if (bar.span_id === span) seqs = bar.seqs; });
        });
      });
      seqs = seqs || [];
      return loadRecords(seqs).then(function () {
        var recs = seqs.map(function (s) { return LOADED[String(s)]; }).filter(Boolean);
        // A call recorded without messages shows the committed ones that formed its context.
        var more = [];
        recs.forEach(function (r) {
          if (r.context && !r.context.messages) {
            if (r.context.summary_seq !== null) more.push(r.context.summary_seq);
            more = more.concat(r.context.seqs);
          }
        });
        return loadRecords(more).then(function () { return { records: recs, total: recs.length, offset: 0 }; });
      });
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
    var prose = role === "user" || role === "assistant" || role === "system" || role === "developer" || role === "human";
    if (typeof content === "string") body.appendChild((prose ? renderProse : renderString)(content, path.concat(["content"]), ctx));
    else if (Array.isArray(content)) {
      content.forEach(function (b, i) {
        var p = path.concat(["content", i]);
        if (prose && b && typeof b === "object" && (b.$ls || b.type) === "text" && typeof b.text === "string") body.appendChild(renderProse(b.text, p.concat(["text"]), ctx));
        else body.appendChild(renderValue(b, p, ctx));
      });
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
    var contextShown = false;
    keys.forEach(function (k) {
      var v = data[k], path = ["data", k], shown;
      if (k === "messages" && rec.context && !(Array.isArray(v) && v.length)) {
        // Nothing recorded here: the derived context takes the messages' place.
        body.appendChild(h("div", { class: "field", "data-key": k }, h("div", { class: "fk" }, k),
          h("span", { class: "note" }, "not recorded; the context below is derived from the conversation")));
        body.appendChild(renderContext(rec, ctx));
        contextShown = true;
        return;
      }
      if (k === "error" && v) shown = renderError(v, path, ctx);
      else if (k === "usage" && renderUsage(v)) shown = renderUsage(v);
      else if (k === "messages" && Array.isArray(v)) {
        shown = h("div", null, v.map(function (m, i) { return renderValue(m, path.concat([i]), ctx); }), ctx.cutNote(path));
      } else shown = renderValue(v, path, ctx);
      body.appendChild(h("div", { class: "field", "data-key": k }, h("div", { class: "fk" }, k), shown));
    });
    add(body, ctx.cutNote(["data"]));
    if (rec.context && !contextShown) body.appendChild(renderContext(rec, ctx));
    card.appendChild(body);
    return card;
  }

  // A model call recorded without its messages (an imported transcript's): the
  // committed messages that formed its context, derived from the conversation.
  function renderContext(rec, ctx) {
    var c = rec.context, sid = rec.session_id;
    var items = [];  // [seq, message, path]
    if (c.messages) {
      var seqs = (c.summary_seq === null ? [] : [c.summary_seq]).concat(c.seqs);
      c.messages.forEach(function (m, i) { items.push([seqs[i], m, ["context", "messages", i]]); });
    } else {
      // The report embeds the records themselves: look each one up.
      var missing = 0;
      if (c.summary_seq !== null) {
        var s = LOADED[String(c.summary_seq)];
        var summary = s && s.data ? s.data.summary : undefined;
        if (summary === undefined) missing += 1;
        else items.push([c.summary_seq, typeof summary === "string" ? { role: "system", content: summary } : summary,
          ["records", c.summary_seq, "data", "summary"]]);
      }
      c.seqs.forEach(function (seq) {
        var r = LOADED[String(seq)];
        if (!r || !r.data) { missing += 1; return; }
        items.push([seq, r.data.message, ["records", seq, "data", "message"]]);
      });
    }
    var first = c.summary_seq !== null ? c.summary_seq : c.seqs[0];
    var last = c.seqs.length ? c.seqs[c.seqs.length - 1] : first;
    var what = items.length || c.seqs.length
      ? "This call was recorded without its messages (an imported transcript holds only the conversation). " +
        "Shown: the committed messages that formed its context" +
        (c.summary_seq !== null ? ", from the summary of the compaction at record #" + c.summary_seq : ", since the session began") +
        " (records #" + first + "–#" + last + ")."
      : "This call was recorded without its messages, and no message was committed before it.";
    var list = h("div", { class: "ctx-messages" }, items.map(function (it) {
      return h("div", { class: "ctx-item", "data-seq": it[0] },
        h("div", { class: "ctx-from" }, REPORT
          ? h("span", { class: "mono" }, "#" + it[0])
          : link("/session/" + enc(sid) + "/record/" + it[0], "#" + it[0], { class: "mono" }),
          it[0] === c.summary_seq ? " compaction summary" : " committed"),
        renderValue(it[1], it[2], ctx));
    }));
    return h("div", { class: "field context", "data-key": "context", "data-derived-from": c.derived_from },
      h("div", { class: "fk" }, "context ", chip("derived from the conversation", "derived")),
      h("p", { class: "note" }, what,
        c.omitted ? " " + num(c.omitted) + " earlier committed messages are not shown." : "",
        !c.messages && missing ? " " + num(missing) + " of them are not in this report." : ""),
      list);
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

  var ROW_PAGE = 300;

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

  function errorLabel(type, text) {
    // An error without a type name is exported as _OTHER: show what the record says instead.
    text = clean(text);
    if (type === "_OTHER" || !type) return text || "error";
    return text ? type + ": " + text : type;
  }

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
      fact("agent", runAgent(run, this.session));
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
    this.setRun(run);
    this.session = session;
    if (run.seq_last === seqLast && session.live) return;
    this.drawHead();
    this.redraw();
    if (this.selected) {
      var found = this.find(this.selected);
      if (found && found.seqs.length !== this.selectedSeqs) {
        this.selectedSeqs = found.seqs.length;
        this.showDetails(found);
      }
    }
  };

  // The same page of rows, again (a live session grows).
  RunView.prototype.query = function () {
    var run = this.run;
    return "limit=" + (run.limit || 300) + "&offset=" + (run.offset || 0) +
      "&collapsed=" + enc(Object.keys(this.collapsed).join(","));
  };

  // -- pages --------------------------------------------------------------------------------

  // -- the session list: a page at a time, searched and filtered by the server ----------

  // The folder a session file is in, below the served folder ("." for the folder itself).
  function folderOf(file, root) {
    var f = String(file || ""), r = String(root || "").replace(/\/+$/, "");
    var dir = f.slice(0, Math.max(0, f.lastIndexOf("/")));
    if (r && dir === r) return ".";
    if (r && dir.slice(0, r.length + 1) === r + "/") return dir.slice(r.length + 1);
    return dir || ".";
  }

  function sessionsPage() {
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

  // -- tokens and cost per day and model, over the folder ----------------------------------

  var PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

  function loadUsage(el) {
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

  // -- problems: what the server could not do (a store's copy), on every page -------------

  function drawProblems(problems) {
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

  // -- the conversation ---------------------------------------------------------------------

  function blank(text) { return !String(text === null || text === undefined ? "" : text).trim(); }

  function blockType(b) { return b && typeof b === "object" && !Array.isArray(b) ? (b.$ls || b.type) : null; }

  function Conversation(sid, data) {
    this.sid = sid;
    this.el = h("div", { class: "convo", role: "log", "aria-label": "conversation" });
    this.stack = [{ thread: null, el: this.el }];
    this.calls = {};    // tool call ids already shown (in a message or as a call)
    this.results = {};  // tool call ids whose result was shown
    this.moreEl = h("div", { class: "convo-more" });
    this.root = h("div", null, this.el, this.moreEl);
    this.add(data);
    if (!this.el.firstChild && (data.next === null || data.next === undefined)) {
      this.el.appendChild(h("p", { class: "note" }, "No messages or tool calls recorded in this session."));
    }
  }

  Conversation.prototype.add = function (data) {
    var self = this;
    data.items.forEach(function (item) { self.item(item); });
    if (data.next !== null && data.next !== undefined && !REPORT) {
      fill(this.moreEl, h("button", { class: "more", type: "button", onclick: function (ev) {
        ev.target.disabled = true; ev.target.textContent = "loading…";
        getJSON("/api/session/" + enc(self.sid) + "/conversation?from=" + data.next).then(function (res) { self.add(res); })
          .catch(function (err) { fill(self.moreEl, h("div", { class: "error-box" }, "could not load more: " + err.message)); });
      } }, "load more of the conversation (record " + num(data.next) + " of " + num(data.records) + ")"));
    } else fill(this.moreEl);
  };

  // The container an item goes into: its subagent's thread, nested as deep as it is.
  Conversation.prototype.container = function (item) {
    var depth = item.depth || 0;
    while (this.stack.length - 1 > depth) this.stack.pop();
    if (depth > 0 && this.stack[this.stack.length - 1].thread !== item.thread) {
      if (this.stack.length - 1 === depth) this.stack.pop();
      while (this.stack.length - 1 < depth) {
        var parent = this.stack[this.stack.length - 1].el;
        var body = h("div", { class: "thread-body" });
        var name = item.thread_agent || item.thread;
        var th = h("details", { class: "thread", open: true, "data-thread": item.thread },
          h("summary", null, h("span", { class: "kind k-agent" }, "subagent"), " ", name,
            h("span", { class: "tag" }, "  " + item.thread)), body);
        parent.appendChild(th);
        this.stack.push({ thread: item.thread, el: body });
      }
    }
    return this.stack[this.stack.length - 1].el;
  };

  Conversation.prototype.links = function (item) {
    if (REPORT) return null;
    return h("span", { class: "ci-links" },
      h("a", { href: "/session/" + enc(this.sid) + "/record/" + item.seq, title: "record " + item.seq + " (" + item.type + ")" }, "#" + item.seq),
      item.run_id && item.span_id ? h("a", { href: "/session/" + enc(this.sid) + "/run/" + enc(item.run_id) + "?span=" + item.span_id,
        class: "to-timeline", title: "this item's bar on the run's timeline" }, "timeline") : null);
  };

  Conversation.prototype.item = function (item) {
    var ctx = new Ctx({ seq: item.seq, cuts: (item.cuts || []).map(function (c) { return Object.assign({}, c, { path: ["body"].concat(c.path) }); }) }, null);
    var el = null, body = item.body;
    if (item.kind === "message") el = this.message(item, body, ctx);
    else if (item.kind === "tool_call") {
      if (item.call_id && this.calls[item.call_id]) return;
      this.calls[item.call_id] = true;
      el = h("div", { class: "ci ci-call" }, this.call(item.tool, body, item.call_id, ["body"], ctx, this.links(item)));
    } else if (item.kind === "tool_result") {
      if (item.call_id && this.results[item.call_id]) return;
      this.results[item.call_id] = true;
      el = h("div", { class: "ci ci-result" }, this.result(item.tool, body, item.is_error, item.error, item.error_text, ["body"], ctx, this.links(item)));
    } else if (item.kind === "error") {
      el = h("div", { class: "ci ci-error" }, h("div", { class: "ci-head" }, h("span", { class: "who err" }, "error"), this.links(item)),
        renderError(body, ["body"], ctx), item.error_text && body && body.type === undefined ? h("div", null, item.error_text) : null);
    } else if (item.kind === "agent") {
      if (item.event === "agent_end" && body) {
        el = h("div", { class: "ci ci-error" }, h("div", { class: "ci-head" }, h("span", { class: "who err" }, "subagent failed"), this.links(item)),
          renderError(body, ["body"], ctx));
      } else return this.container(item) && undefined;
    } else if (item.kind === "note") {
      el = h("details", { class: "ci ci-note" }, h("summary", null, item.note === "compaction" ? "context compacted: summary" : "context transformed: summary", " ", this.links(item)),
        renderValue(body, ["body"], ctx));
    }
    if (!el) return;
    el.setAttribute("data-seq", item.seq);
    el.setAttribute("data-kind", item.kind);
    if (item.span_id) el.setAttribute("data-span", item.span_id);
    this.container(item).appendChild(el);
  };

  Conversation.prototype.call = function (name, args, id, path, ctx, links) {
    var shown = args === undefined || args === null ? "" : typeof args === "string" ? args : JSON.stringify(args);
    return h("details", { class: "call", "data-call": id || null },
      h("summary", null, h("span", { class: "arrow" }, "→ "), h("span", { class: "tn" }, name || "tool"),
        h("span", { class: "args-line" }, "(" + (shown.length > 140 ? shown.slice(0, 139) + "…" : shown) + ")"), links || null),
      h("div", { class: "call-body" }, id ? h("div", { class: "tag" }, "call " + id) : null,
        args === undefined ? null : renderValue(args, path, ctx)));
  };

  Conversation.prototype.result = function (name, value, isError, error, errorText, path, ctx, links) {
    if (isError) value = readableFailure(value);
    var line = isError ? clean(errorText || textOf(value)) : errorText || textOf(value);
    return h("details", { class: "result" + (isError ? " failed" : ""), open: isError ? true : null },
      h("summary", null, h("span", { class: "arrow" }, isError ? "⚠ " : "← "), h("span", { class: "tn" }, (name || "tool") + (isError ? " failed" : " result")),
        h("span", { class: "args-line" }, line ? " " + (line.length > 160 ? line.slice(0, 159) + "…" : line) : ""), links || null),
      h("div", { class: "call-body" },
        error ? renderError(error, ["error"], ctx) : null,
        value === undefined || value === null ? null : renderValue(value, path, ctx)));
  };

  // A failure's text as a person reads it: Claude Code's <tool_use_error>…</tool_use_error>
  // wrapper gone, and newlines a tool printed escaped (\n) made real. Text only, never HTML.
  function readableFailure(v) {
    function fix(t) {
      var m = /^\s*<([A-Za-z_][\w-]*)>([\s\S]*)<\/\1>\s*$/.exec(t);
      if (m) t = m[2].trim();
      if (t.indexOf("\n") < 0 && /\\[nr]/.test(t)) t = t.replace(/\\r\\n|\\n|\\r/g, "\n").replace(/\\t/g, "\t");
      return t;
    }
    if (typeof v === "string") return fix(v);
    if (Array.isArray(v)) return v.map(readableFailure);
    if (v && typeof v === "object" && typeof v.text === "string") return Object.assign({}, v, { text: fix(v.text) });
    if (v && typeof v === "object" && v.content !== undefined) return Object.assign({}, v, { content: readableFailure(v.content) });
    return v;
  }

  function textOf(v) {
    // The readable text of a value, for one summary line.
    if (v === null || v === undefined) return "";
    if (typeof v === "string") return v.replace(/\s+/g, " ");
    if (Array.isArray(v)) return v.map(textOf).join(" ").trim();
    if (typeof v === "object") {
      if (typeof v.text === "string") return v.text.replace(/\s+/g, " ");
      if (v.content !== undefined) return textOf(v.content);
      if (v.output !== undefined) return textOf(v.output);
      return JSON.stringify(v);
    }
    return String(v);
  }

  Conversation.prototype.message = function (item, m, ctx) {
    var self = this;
    if (!m || typeof m !== "object" || Array.isArray(m)) {
      return h("div", { class: "ci bubble role-other" }, h("div", { class: "ci-head" }, h("span", { class: "who" }, item.role || "message"), this.links(item)),
        renderValue(m, ["body"], ctx));
    }
    var bare = blockType(m);
    if (!m.role && (bare === "reasoning" || bare === "thinking" || bare === "function_call" || bare === "function_call_output")) {
      // A Codex (OpenAI Responses) item recorded as a message: reasoning, a call, its output.
      return h("div", { class: "ci ci-item" }, h("div", { class: "ci-head" }, h("span", { class: "who" }, bare.replace(/_/g, " ")), this.links(item)),
        this.block(m, ["body"], ctx));
    }
    var role = m.role || (m.$ls === "tool_result" ? "tool" : m.$ls) || item.role || "message";
    if (role === "tool" || role === "tool_result") {
      var callId = m.tool_call_id || m.tool_use_id;
      if (callId && this.results[callId]) return null;
      this.results[callId] = true;
      return h("div", { class: "ci ci-result" }, this.result(m.tool_name || m.name, m.content, m.is_error === true, null, null, ["body", "content"], ctx, this.links(item)));
    }
    var parts = [];
    var content = m.content;
    var path = ["body", "content"];
    if (typeof content === "string") parts.push(blank(content) ? null : renderProse(content, path, ctx));
    else if (Array.isArray(content)) content.forEach(function (b, i) { parts.push(self.block(b, path.concat([i]), ctx, true)); });
    else if (content !== undefined && content !== null) parts.push(renderValue(content, path, ctx));
    // OpenAI: tool calls beside the content; a refusal; a legacy function call.
    if (Array.isArray(m.tool_calls)) m.tool_calls.forEach(function (c, i) { parts.push(self.block(c, ["body", "tool_calls", i], ctx)); });
    if (m.function_call && typeof m.function_call === "object") parts.push(this.block({ type: "function", function: m.function_call }, ["body", "function_call"], ctx));
    if (typeof m.refusal === "string" && m.refusal) parts.push(h("div", { class: "error-box" }, "refused: " + m.refusal));
    if (m.error_message) parts.push(h("div", { class: "error-box" }, m.error_message));
    var meta = [];
    if (m.model) meta.push(chip(m.model));
    if (m.stop_reason) meta.push(chip(m.stop_reason));
    if (m.usage && renderUsage(m.usage)) meta.push(h("span", { class: "tag" }, renderUsage(m.usage).textContent));
    parts = parts.filter(Boolean);
    // A message that says nothing (whitespace, or calls already shown) is no bubble at all.
    if (!parts.length && !ctx.cutNote(path)) return null;
    return h("div", { class: "ci bubble role-" + (role === "human" ? "user" : role) },
      h("div", { class: "ci-head" }, h("span", { class: "who" }, role), meta, this.links(item)),
      h("div", { class: "ci-body" }, parts, ctx.cutNote(path)));
  };

  Conversation.prototype.block = function (b, path, ctx, prose) {
    var t = blockType(b);
    var text = prose ? renderProse : renderString;
    if (typeof b === "string") return text(b, path, ctx);
    if (t === "text" || t === "input_text" || t === "output_text") {
      return blank(b.text) && !ctx.cutNote(path.concat(["text"])) ? null : text(String(b.text || ""), path.concat(["text"]), ctx);
    }
    if (t === "thinking" || t === "reasoning" || t === "redacted_thinking") {
      var text = b.thinking || b.text || (Array.isArray(b.summary) ? b.summary.map(textOf).join("\n") : "") || "";
      return h("details", { class: "thinking-block" }, h("summary", null, "thinking", h("span", { class: "tag" }, "  " + num(String(text).length) + " characters")),
        h("pre", { class: "text thinking" }, String(text) || "(redacted)"), ctx.cutNote(path.concat(["thinking"])));
    }
    if (t === "tool_call" || t === "tool_use" || t === "function_call") {
      var id = b.id || b.call_id;
      if (id) this.calls[id] = true;
      return this.call(b.name, b.arguments !== undefined ? b.arguments : b.input, id, path.concat([b.arguments !== undefined ? "arguments" : "input"]), ctx);
    }
    if (b && b.function && typeof b.function === "object") {
      if (b.id) this.calls[b.id] = true;
      var args = b.function.arguments;
      if (typeof args === "string") { try { args = JSON.parse(args); } catch (e) { /* shown as text */ } }
      return this.call(b.function.name, args, b.id, path.concat(["function", "arguments"]), ctx);
    }
    if (t === "tool_result" || t === "function_call_output") {
      var cid = b.tool_use_id || b.call_id;
      if (cid) this.results[cid] = true;
      return this.result(null, b.content !== undefined ? b.content : b.output, b.is_error === true, null, null, path.concat(["content"]), ctx);
    }
    if (t === "image" || t === "image_url" || t === "input_image") return imageOf(b);
    if (t === "file" || t === "document" || t === "input_file") {
      var name = b.name || b.uri || b.file_id || (b.source && b.source.url) || "";
      return h("div", { class: "attach" }, h("span", { class: "chip" }, "file"), " ", h("span", { class: "mono" }, String(name)),
        b.mime_type || b.media_type ? h("span", { class: "tag" }, "  " + (b.mime_type || b.media_type)) : null,
        b.modality ? h("span", { class: "tag" }, "  " + b.modality) : null);
    }
    return renderValue(b, path, ctx);
  };

  function imageOf(b) {
    // loopscribe's ImageContent (data + mime_type), Anthropic's base64 source, OpenAI's image_url.
    var mime = b.mime_type || (b.source && b.source.media_type) || "";
    var data = b.data || (b.source && b.source.type === "base64" ? b.source.data : null);
    var url = b.image_url && (b.image_url.url || b.image_url);
    var src = null;
    if (typeof data === "string" && /^image\/(png|jpeg|gif|webp)$/.test(mime) && /^[A-Za-z0-9+/=\s]+$/.test(data)) src = "data:" + mime + ";base64," + data;
    else if (typeof url === "string" && /^data:image\//.test(url)) src = url;
    return h("div", { class: "attach" }, src ? h("img", { src: src, alt: "image " + mime, class: "thumb" }) : null,
      h("span", { class: "chip" }, "image"), " ", h("span", { class: "tag" }, mime || (typeof url === "string" ? url.slice(0, 80) : "")));
  }


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

  function sessionHead(s) {
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

  function sessionPage() {
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

  function runPage() {
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

  function recordPage() {
    var s = DATA.session, rec = DATA.record;
    setCrumbs([["sessions", "/"], [sessionName(s), "/session/" + enc(s.id)],
      DATA.run ? ["run " + DATA.run, "/session/" + enc(s.id) + "/run/" + enc(DATA.run)] : null,
      ["record " + rec.seq, null]].filter(Boolean));
    var span = DATA.span;
    var base = "/session/" + enc(s.id) + "/record/";
    var nav = h("nav", { class: "pager rec-nav", "aria-label": "records" },
      rec.seq > 0 ? h("a", { href: base + (rec.seq - 1), rel: "prev", "data-page": "prev", title: "record " + (rec.seq - 1) + " (←)" }, "‹ previous") : null,
      h("span", { class: "note" }, "record " + num(rec.seq) + " (the last is " + num(Math.max(s.records - 1, rec.seq)) + ")"),
      rec.seq + 1 < s.records ? h("a", { href: base + (rec.seq + 1), rel: "next", "data-page": "next", title: "record " + (rec.seq + 1) + " (→)" }, "next ›") : null);
    document.addEventListener("keydown", function (ev) {
      if (ev.altKey || ev.ctrlKey || ev.metaKey || (ev.target.closest && ev.target.closest("input, textarea, select"))) return;
      var to = ev.key === "ArrowLeft" ? nav.querySelector("[rel=prev]") : ev.key === "ArrowRight" ? nav.querySelector("[rel=next]") : null;
      if (to) location.href = to.getAttribute("href");
    });
    fill(app, nav,
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

  var pages = {
    sessions: sessionsPage, session: sessionPage, run: runPage, record: recordPage,
    trace: tracePage, error: errorPage, report: reportPage,
  };
  if (!REPORT) drawProblems(DATA.problems);
  (pages[DATA.view] || errorPage)();
})();
