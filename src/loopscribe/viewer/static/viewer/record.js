/* One record drawn: its body (messages, tool calls, errors, usage; clipped parts
 * with a button that loads the whole line), the context derived for a model call
 * recorded without messages, and the record page (/session/{id}/record/{seq}).
 */

import {
  add, app, bytes, chip, DATA, dur, enc, fill, h, link, MESSAGE_TAGS, num, REPORT, sessionName,
  setCrumbs, usOf, when,
} from "./common.js";
import { markdown } from "./markdown.js";
import { LOADED, server } from "./records.js";

// -- rendering record bodies ----------------------------------------------------------

// Message text, as Markdown, with its cut note.
export function renderProse(s, path, ctx) {
  return h("div", { class: "prose" }, markdown(s), ctx.cutNote(path));
}

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

export function Ctx(rec, onFull) {
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

export function renderString(s, path, ctx) {
  var note = ctx.cutNote(path);
  if (!note && s.length <= 120 && s.indexOf("\n") < 0) return h("span", { class: "str" }, s);
  return h("div", null, h("pre", { class: "text" }, s), note);
}

export function renderValue(v, path, ctx) {
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

export function renderError(e, path, ctx) {
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

export function renderUsage(u) {
  if (!u || typeof u !== "object") return null;
  var i = u.input_tokens !== undefined ? u.input_tokens : u.prompt_tokens;
  var o = u.output_tokens !== undefined ? u.output_tokens : u.completion_tokens;
  if (i === undefined && o === undefined) return null;
  return h("span", { class: "str" }, num(i) + " in / " + num(o) + " out");
}

export function renderRecord(rec, opts) {
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

// -- the record page: /session/{id}/record/{seq} --------------------------------------

export function recordPage() {
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
