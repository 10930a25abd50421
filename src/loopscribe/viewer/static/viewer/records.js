/* Where records come from: the server's /api (served pages), or the gzip chunks
 * embedded after the script (the report, which makes no request at all).
 */

import { DATA, enc, getJSON, REPORT } from "./common.js";

export const server = {
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
export const LOADED = {};
let chunkOf = null;
const chunkWaits = {};
function parsed() {
  // The rest of the report (after this script) has been read.
  return document.readyState === "loading"
    ? new Promise(function (ok) { document.addEventListener("DOMContentLoaded", ok); })
    : Promise.resolve();
}
let rowsRead = null;
export function allRows() {
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

const embedded = {
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

export const source = REPORT ? embedded : server;
