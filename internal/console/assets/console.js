// Funnel console: polls the JSON endpoints under /ui/api/ and draws the
// live charts as inline SVG. No library, no inline script (the page's
// Content-Security-Policy forbids it).
"use strict";
(function () {
  var csrf = document.querySelector('meta[name="csrf"]').getAttribute("content");
  var SVG = "http://www.w3.org/2000/svg";
  var colors = { allowed: "#2e7d32", delayed: "#1565c0", refused: "#c62828", banned: "#6a1b9a", fallback: "#ef6c00", error: "#555" };

  function $(id) { return document.getElementById(id); }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function status(msg, bad) { var s = $("status"); s.textContent = msg; s.className = bad ? "error" : ""; }
  function getJSON(path) {
    return fetch(path, { credentials: "same-origin" }).then(function (r) {
      return r.json().then(function (j) { if (!r.ok) throw new Error(j.detail || r.statusText); return j; });
    });
  }
  function post(path, key) {
    var body = new URLSearchParams({ key: key });
    return fetch(path, { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": csrf }, body: body })
      .then(function (r) { return r.json().then(function (j) { if (!r.ok) throw new Error(j.detail || r.statusText); return j; }); });
  }
  function dur(ms) {
    if (ms < 1000) return ms + " ms";
    var s = Math.round(ms / 1000);
    if (s < 120) return s + " s";
    var m = Math.floor(s / 60);
    return m < 120 ? m + " min " + (s % 60) + " s" : Math.floor(m / 60) + " h " + (m % 60) + " min";
  }
  function confirmThen(text, f) {
    var d = $("confirm");
    $("confirm-text").textContent = text;
    d.returnValue = "";
    d.onclose = function () { if (d.returnValue === "yes") f(); };
    d.showModal();
  }

  // Live view.
  function chart(points, byOutcome, w, h) {
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("class", "chart");
    var top = 1;
    Object.keys(byOutcome).forEach(function (o) { byOutcome[o].forEach(function (v) { if (v > top) top = v; }); });
    Object.keys(byOutcome).forEach(function (o) {
      var p = byOutcome[o], line = document.createElementNS(SVG, "polyline"), pts = [];
      for (var i = 0; i < p.length; i++) pts.push((w * (i + points - p.length) / Math.max(1, points - 1)).toFixed(1) + "," + (h - 1 - (h - 2) * p[i] / top).toFixed(1));
      line.setAttribute("points", pts.join(" "));
      line.setAttribute("fill", "none");
      line.setAttribute("stroke", colors[o] || "#000");
      line.setAttribute("stroke-width", "1.5");
      line.setAttribute("vector-effect", "non-scaling-stroke");
      svg.appendChild(line);
    });
    var t = document.createElementNS(SVG, "text");
    t.setAttribute("x", "2"); t.setAttribute("y", "10"); t.setAttribute("font-size", "9"); t.setAttribute("fill", "#444");
    t.textContent = "max " + top + "/s";
    svg.appendChild(t);
    return svg;
  }
  function live() {
    getJSON("/ui/api/live").then(function (j) {
      var total = 0, rates = { allowed: 0, delayed: 0, refused: 0, banned: 0, fallback: 0 }, groups = {};
      j.series.forEach(function (s) {
        if (s.outcome !== "delayed") total += s.total; // delayed ones are among the allowed
        var last = s.points.length ? s.points[s.points.length - 1] : 0;
        if (s.outcome in rates) rates[s.outcome] += last;
        var g = s.edge + " · " + s.rule;
        (groups[g] = groups[g] || {})[s.outcome] = s.points;
      });
      $("total-decisions").textContent = total;
      Object.keys(rates).forEach(function (o) { $("rate-" + o).textContent = rates[o]; });
      var charts = $("charts");
      charts.textContent = "";
      Object.keys(groups).sort().forEach(function (g) {
        var fig = el("figure"), n = 0;
        Object.keys(groups[g]).forEach(function (o) { n = Math.max(n, groups[g][o].length); });
        // The last 15 minutes, or since the server started, at least a minute.
        var span = Math.max(60, n);
        fig.appendChild(chart(span, groups[g], 300, 60));
        var cap = el("figcaption", g + " · last " + (span >= 120 ? Math.round(span / 60) + " min" : span + " s"));
        fig.appendChild(cap);
        charts.appendChild(fig);
      });
      var tb = $("health").tBodies[0];
      tb.textContent = "";
      function row(k, v) { var tr = el("tr"); tr.appendChild(el("th", k)); tr.appendChild(el("td", v)); tb.appendChild(tr); }
      row("store", j.store);
      row("keys held", j.keys < 0 ? "unknown" : j.keys);
      Object.keys(j.store_stats || {}).sort().forEach(function (k) { row("store " + k, j.store_stats[k]); });
      function msText(v) { return (v < 1 ? v.toPrecision(3) : v.toFixed(2)) + " ms"; }
      if (j.store_latency_calls) row("store decision latency p50 / p99 (last minute)", msText(j.store_p50_ms) + " / " + msText(j.store_p99_ms) +
        " over " + j.store_latency_calls + " calls (within 0.8 %)");
      else if (j.store_p50_ms !== undefined) row("store latency p50 / p99 (last minute)", "≤ " + j.store_p50_ms + " ms / ≤ " + j.store_p99_ms + " ms");
      Object.keys(j.clients || {}).sort().forEach(function (p) { row("clients " + p, j.clients[p]); });
      var zero = [];
      Object.keys(j.health || {}).sort().forEach(function (k) { if (j.health[k]) row(k, j.health[k]); else zero.push(k); });
      if (zero.length) row("at zero", zero.length + " counters (store errors, fail-open answers, …: see /metrics)");
      row("rules", j.rules.version + " · " + j.rules.reloads + " loads, " + j.rules.failures + " refused" +
        (j.rules.last_reload_ms ? " · last " + new Date(j.rules.last_reload_ms).toLocaleTimeString() : "") +
        (j.rules.last_reload_error ? " · error: " + j.rules.last_reload_error : ""));
      row("top limited", j.top_refusals + " refusals counted, " + j.top_skipped + " left out while the sketch was busy" +
        (j.top_sampling ? "; sampling now: one in 16 counted as 16" : ""));
      $("clock").textContent = new Date(j.at_ms).toLocaleTimeString();
    }).catch(function (e) { status("live: " + e.message, true); });
  }

  // Top limited.
  function topLimited() {
    var q = new URLSearchParams({ window: $("top-window").value, edge: $("top-edge").value, rule: $("top-rule").value });
    getJSON("/ui/api/top?" + q).then(function (j) {
      var tb = $("top-table").tBodies[0];
      tb.textContent = "";
      j.entries.forEach(function (e) {
        var tr = el("tr");
        tr.appendChild(el("td", e.key + (e.truncated ? "…" : ""), "key"));
        tr.appendChild(el("td", e.count, "n"));
        tr.appendChild(el("td", e.error, "n"));
        tr.appendChild(el("td", e.edge));
        tr.appendChild(el("td", e.rule));
        var td = el("td"), b = el("button", "inspect");
        b.dataset.key = e.key;
        b.addEventListener("click", function () { $("inspect-key").value = e.key; inspect(); location.hash = "inspect"; });
        td.appendChild(b);
        tr.appendChild(td);
        tb.appendChild(tr);
      });
      $("top-note").textContent = "A Space-Saving sketch of the refusals (" + j.refusals + " counted, " + j.skipped +
        " left out while busy): counts may exceed the truth by the error shown. Beyond 20,000 refusals in 15 seconds, " +
        "one in 16 is counted, as 16" + (j.sampling ? " — sampling now." : ".");
    }).catch(function (e) { status("top: " + e.message, true); });
  }

  // Bans.
  function bans() {
    getJSON("/ui/api/bans").then(function (j) {
      var f = $("bans-filter").value, tb = $("bans-table").tBodies[0];
      tb.textContent = "";
      j.bans.forEach(function (b) {
        if (f && b.key.indexOf(f) < 0) return;
        var tr = el("tr");
        tr.appendChild(el("td", b.key, "key"));
        tr.appendChild(el("td", dur(b.left_ms)));
        var td = el("td"), btn = el("button", "lift", "danger lift");
        btn.dataset.key = b.key;
        btn.addEventListener("click", function () {
          confirmThen("Lift the ban of " + b.key + "?", function () {
            post("/ui/api/unban", b.key).then(function (r) { status((r.done ? "ban lifted: " : "was not banned: ") + r.key); bans(); })
              .catch(function (e) { status("unban: " + e.message, true); });
          });
        });
        td.appendChild(btn);
        tr.appendChild(td);
        tb.appendChild(tr);
      });
    }).catch(function (e) { status("bans: " + e.message, true); });
  }

  // Inspect.
  var inspected = "";
  function showKV(dl, obj) {
    dl.textContent = "";
    Object.keys(obj).forEach(function (k) { dl.appendChild(el("dt", k)); dl.appendChild(el("dd", obj[k])); });
  }
  function showKey(j) {
    inspected = j.key;
    var o = { key: j.key, limit: j.limit, "held by the store": j.held ? "yes, " + dur(j.ttl_ms) + " until empty" : "no (a full bucket)",
      remaining: j.remaining + " of " + j.capacity, "retry after": dur(j.retry_after_ms), "reset after": dur(j.reset_after_ms),
      ban: j.banned ? dur(j.ban_left_ms) + " left" : "none" };
    if (j.rule) o.rule = j.rule;
    if (j.fallback) o.fallback = "the store could not answer";
    showKV($("key-state"), o);
    $("reset-key").disabled = false;
    $("unban-key").disabled = !j.banned;
  }
  function inspect(ev) {
    if (ev) ev.preventDefault();
    var q = new URLSearchParams(new FormData($("inspect-form")));
    getJSON("/ui/api/key?" + q).then(showKey).catch(function (e) { status("inspect: " + e.message, true); });
  }
  function act(path, what) {
    var k = inspected;
    confirmThen(what + " " + k + "?", function () {
      post(path, k).then(function (r) { status(what + ": " + r.key + (r.done ? " done" : " (nothing to do)")); inspect(); bans(); })
        .catch(function (e) { status(what + ": " + e.message, true); });
    });
  }

  // Dry run.
  function dryQuery() { return new URLSearchParams(new FormData($("dryrun-form"))); }
  function dryrun(ev) {
    ev.preventDefault();
    getJSON("/ui/api/dryrun?" + dryQuery()).then(function (j) {
      var o = { answer: j.answer, rule: j.matched ? j.rule : "no rule matches", limit: j.limit || "—" };
      if (j.key) { o.key = j.key; o.remaining = j.remaining; }
      if (j.key) o["full again in"] = dur(j.reset_after_ms);
      if (j.shadow_mode) o.mode = "shadow: the service answers OK";
      if (j.quota_mode) o.mode = "quota";
      showKV($("dryrun-result"), o);
    }).catch(function (e) { status("dry run: " + e.message, true); });
  }

  $("top-form").addEventListener("change", topLimited);
  $("top-rule").addEventListener("input", topLimited);
  $("bans-filter").addEventListener("input", bans);
  $("inspect-form").addEventListener("submit", inspect);
  $("reset-key").addEventListener("click", function () { act("/ui/api/reset", "Reset"); });
  $("unban-key").addEventListener("click", function () { act("/ui/api/unban", "Lift the ban of"); });
  $("dryrun-form").addEventListener("submit", dryrun);
  $("dryrun-inspect").addEventListener("click", function () {
    getJSON("/ui/api/key?" + dryQuery()).then(showKey).catch(function (e) { status("inspect: " + e.message, true); });
  });
  function tick() { live(); topLimited(); bans(); }
  tick();
  setInterval(tick, 1000);
})();
