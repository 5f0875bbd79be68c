// Assay dashboard: live progress bars, the upload form, the "Score session" button and pairwise runs.
// Plain JavaScript, no framework, nothing from a CDN. Requests go to this site only, with the
// session cookie (or through the sign-on proxy); anything that changes state sends X-CSRF-Token.
(function () {
  "use strict";

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") || "" : "";
  }

  function api(method, url, body, headers) {
    var h = { Accept: "application/json" };
    Object.keys(headers || {}).forEach(function (k) { h[k] = headers[k]; });
    if (method !== "GET") h["X-CSRF-Token"] = csrfToken();
    return fetch(url, { method: method, headers: h, body: body, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        return response.text().then(function (text) {
          var data = null;
          try { data = text ? JSON.parse(text) : null; } catch (e) { data = { message: text }; }
          return { status: response.status, ok: response.ok, data: data };
        });
      });
  }

  function sleep(ms) { return new Promise(function (resolve) { setTimeout(resolve, ms); }); }

  function pct(v, digits) {
    if (v === null || v === undefined) return "—";
    return (100 * v).toFixed(digits === undefined ? 1 : digits) + "%";
  }

  function usd(v) {
    if (v === null || v === undefined) return "—";
    return v < 1 ? "$" + v.toFixed(4) : "$" + v.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }

  function errorText(res) {
    var d = res.data || {};
    var text = d.message || d.detail || ("HTTP " + res.status);
    if (typeof text !== "string") text = JSON.stringify(text);
    return text;
  }

  // --- live batches ------------------------------------------------------------------------------------

  function setField(el, name, text) {
    el.querySelectorAll('[data-field="' + name + '"]').forEach(function (f) { f.textContent = text; });
  }

  function updateBatch(el, b) {
    setField(el, "pass_rate", pct(b.pass_rate));
    setField(el, "errored", String(b.errored));
    setField(el, "passed", String(b.passed));
    setField(el, "failed", String(b.failed));
    setField(el, "cost_usd", usd(b.cost_usd));
    setField(el, "progress_text", b.done + " / " + b.total + " (" + b.percent.toFixed(1) + "%)");
    el.querySelectorAll('[data-field="status"]').forEach(function (s) {
      s.textContent = b.status;
      s.className = "pill status-" + b.status;
    });
    el.querySelectorAll('[data-field="progress"]').forEach(function (bar) {
      bar.setAttribute("aria-valuenow", String(b.percent));
      bar.classList.toggle("active", b.active);
      ["passed", "failed", "errored", "cancelled"].forEach(function (part) {
        var seg = bar.querySelector('[data-part="' + part + '"]');
        if (seg) seg.style.width = (b.total ? (100 * b[part]) / b.total : 0) + "%";
      });
    });
  }

  function pollBatches() {
    var els = Array.prototype.slice.call(document.querySelectorAll("[data-live-batches] [data-batch-id], [data-live-batches][data-batch-id]"));
    var ids = [];
    els.forEach(function (el) {
      var id = el.getAttribute("data-batch-id");
      if (el.getAttribute("data-active") === "true" && ids.indexOf(id) < 0) ids.push(id);
    });
    if (!ids.length) return;
    api("GET", "/dashboard/api/batches?ids=" + encodeURIComponent(ids.join(","))).then(function (res) {
      if (res.status === 401) { window.location.reload(); return; }
      var finished = false;
      ((res.data && res.data.batches) || []).forEach(function (b) {
        els.forEach(function (el) {
          if (el.getAttribute("data-batch-id") !== b.batch_id) return;
          updateBatch(el, b);
          if (!b.active) {
            el.setAttribute("data-active", "false");
            finished = true;
          }
        });
      });
      if (finished && document.querySelector("[data-reload-when-done]")) {
        window.location.reload(); // the summary sections are rendered by the server
        return;
      }
      setTimeout(pollBatches, 1500);
    }).catch(function () { setTimeout(pollBatches, 5000); });
  }

  // --- live results (the KQL scoring design: each result's lines as it finishes) -------------------------

  function setupLiveResults() {
    var feed = document.querySelector("[data-live-results]");
    if (!feed) return;
    var batchId = feed.getAttribute("data-batch-id-feed");
    var seen = {};
    var since = null;
    function tick() {
      var url = "/api/v1/batches/" + encodeURIComponent(batchId) + "/results?status=finished&limit=200" +
        (since ? "&finished_after=" + encodeURIComponent(since) : "&finished_after=1970-01-01T00:00:00Z");
      api("GET", url).then(function (res) {
        if (!res.ok) { setTimeout(tick, 5000); return; }
        (res.data.results || []).forEach(function (r) {
          if (r.completed_at && (!since || r.completed_at > since)) since = r.completed_at;
          if (seen[r.score_id]) return;
          seen[r.score_id] = true;
          var card = document.createElement("article");
          card.className = "result-card " + (r.passed ? "pass" : "fail");
          var head = document.createElement("header");
          var mark = document.createElement("span");
          mark.className = "mark " + (r.passed ? "ok" : "bad");
          mark.textContent = r.passed ? "✓" : "✗";
          var link = document.createElement("a");
          link.href = "/dashboard/items/" + r.item_id;
          link.textContent = "#" + r.position;
          head.appendChild(mark);
          head.appendChild(link);
          var lines = document.createElement("pre");
          lines.className = "lines";
          lines.textContent = (r.live || [r.status]).join("\n");
          card.appendChild(head);
          card.appendChild(lines);
          feed.insertBefore(card, feed.firstChild);
        });
        while (feed.childNodes.length > 200) feed.removeChild(feed.lastChild);
        setTimeout(tick, 1500);
      }).catch(function () { setTimeout(tick, 5000); });
    }
    tick();
  }

  // --- upload --------------------------------------------------------------------------------------------

  function randomKey() {
    if (window.crypto && window.crypto.randomUUID) return window.crypto.randomUUID();
    return "k-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2);
  }

  function setupUpload() {
    var form = document.getElementById("upload-form");
    if (!form) return;
    var out = document.getElementById("upload-result");
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var file = form.elements.file.files[0];
      if (!file) return;
      var suite = form.elements.suite.value;
      var partial = form.elements.partial.checked;
      var type = /\.json$/i.test(file.name) ? "application/json" : "application/x-ndjson";
      var button = form.querySelector('button[type="submit"]');
      button.disabled = true;
      out.className = "result";
      out.textContent = "Uploading " + file.name + "…";
      var url = form.getAttribute("data-endpoint") + "?suite=" + encodeURIComponent(suite) + "&partial=" + partial;
      api("POST", url, file, { "Content-Type": type, "Idempotency-Key": randomKey() }).then(function (res) {
        button.disabled = false;
        if (res.status === 202) {
          var d = res.data;
          out.className = "result ok";
          out.textContent = "Batch " + d.batch_id + ": " + d.accepted + " items accepted" +
            (d.rejected ? ", " + d.rejected + " bad lines skipped" : "") + ". Opening it…";
          window.location.href = "/dashboard/batches/" + d.batch_id;
          return;
        }
        out.className = "result error";
        out.textContent = "Not accepted: " + errorText(res);
        var bad = res.data && res.data.details && res.data.details.bad_lines;
        if (bad && bad.length) {
          var list = document.createElement("ul");
          bad.slice(0, 20).forEach(function (b) {
            var li = document.createElement("li");
            li.textContent = "line " + b.line + ": " + b.reason;
            list.appendChild(li);
          });
          out.appendChild(list);
        }
      }).catch(function (e) {
        button.disabled = false;
        out.className = "result error";
        out.textContent = "Upload failed: " + e;
      });
    });
  }

  // --- scores (the alert-session scoring design's badge colours) -----------------------------------------

  var BANDS = [[90, "band-darkgreen"], [75, "band-lightgreen"], [60, "band-yellow"], [45, "band-orange"], [0, "band-red"]];
  var BADGE_CLASSES = ["band-darkgreen", "band-lightgreen", "band-yellow", "band-orange", "band-red", "band-none", "band-busy", "band-failed"];

  function bandOf(value) {
    for (var i = 0; i < BANDS.length; i++) if (value >= BANDS[i][0]) return BANDS[i][1];
    return "band-red";
  }

  function score100(score) {
    var v = Number(score.total_score);
    if (score.total_score === null || score.total_score === undefined || isNaN(v)) return null;
    return Math.round(v);
  }

  function setBadge(sessionId, score) {
    document.querySelectorAll("[data-session-badge]").forEach(function (badge) {
      if (badge.getAttribute("data-session-badge") !== sessionId) return;
      BADGE_CLASSES.forEach(function (c) { badge.classList.remove(c); });
      if (!score) {
        badge.classList.add("band-none");
        badge.textContent = "Not scored";
      } else if (score.status === "pending" || score.status === "in_progress") {
        badge.classList.add("band-busy");
        badge.textContent = "Scoring…";
      } else if (score.status === "completed" && score100(score) !== null) {
        badge.classList.add(bandOf(score100(score)));
        badge.textContent = String(score100(score));
        badge.title = "criteria " + (score.criteria_hash || "");
      } else {
        badge.classList.add("band-failed");
        badge.textContent = "Scoring failed";
        badge.title = score.error_message || score.status;
      }
    });
  }

  function setScoreCells(sessionId, score) {
    if (!score || score.status !== "completed") return;
    document.querySelectorAll("[data-session-criteria]").forEach(function (cell) {
      if (cell.getAttribute("data-session-criteria") !== sessionId) return;
      var pill = document.createElement("span");
      var current = score.is_current_criteria !== false;
      pill.className = "pill " + (current ? "current" : "stale");
      pill.textContent = current ? "current" : "stale";
      pill.title = "criteria " + (score.criteria_hash || "");
      cell.textContent = "";
      cell.appendChild(pill);
    });
    document.querySelectorAll("[data-session-scored]").forEach(function (cell) {
      if (cell.getAttribute("data-session-scored") !== sessionId || !score.scored_at) return;
      cell.textContent = score.scored_at.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC");
    });
  }

  function setMessage(sessionId, text, isError) {
    document.querySelectorAll("[data-score-message]").forEach(function (el) {
      if (el.getAttribute("data-score-message") !== sessionId) return;
      el.textContent = text;
      el.classList.toggle("error", !!isError);
    });
  }

  function scoreUrl(sessionId) {
    return "/api/v1/scoring/sessions/" + encodeURIComponent(sessionId) + "/score";
  }

  function followScore(sessionId, score) {
    var deadline = Date.now() + 15 * 60 * 1000;
    function step(current) {
      if (current && (current.status === "pending" || current.status === "in_progress") && Date.now() < deadline) {
        return sleep(1000).then(function () {
          return api("GET", scoreUrl(sessionId)).then(function (res) {
            return step(res.ok ? res.data : current);
          });
        });
      }
      return Promise.resolve(current);
    }
    return step(score);
  }

  function scoreSession(button) {
    var sessionId = button.getAttribute("data-session-id");
    var force = button.getAttribute("data-force") === "true";
    button.disabled = true;
    button.classList.add("busy");
    setBadge(sessionId, { status: "in_progress" });
    setMessage(sessionId, "Scoring…", false);
    api("POST", scoreUrl(sessionId), JSON.stringify({ force_rescore: force }), { "Content-Type": "application/json" })
      .then(function (res) {
        if (res.status === 409) return api("GET", scoreUrl(sessionId)); // one is running already: follow it
        return res;
      })
      .then(function (res) {
        if (res.status !== 200 && res.status !== 202) throw new Error(errorText(res));
        return followScore(sessionId, res.data);
      })
      .then(function (score) {
        setBadge(sessionId, score);
        setScoreCells(sessionId, score);
        button.disabled = false;
        button.classList.remove("busy");
        if (score && score.status === "completed") {
          setMessage(sessionId, "Scored " + score100(score) + (score.is_current_criteria === false ? " (stale criteria)" : ""), false);
          button.textContent = "Re-score session";
        } else {
          setMessage(sessionId, "Scoring " + (score ? score.status : "failed") + (score && score.error_message ? ": " + score.error_message : ""), true);
        }
        button.setAttribute("data-force", "true");
        if (button.closest("[data-reload-after-score]")) setTimeout(function () { window.location.reload(); }, 600);
      })
      .catch(function (e) {
        button.disabled = false;
        button.classList.remove("busy");
        setBadge(sessionId, null);
        setMessage(sessionId, String(e.message || e), true);
      });
  }

  function setupScoring() {
    document.addEventListener("click", function (ev) {
      var button = ev.target.closest ? ev.target.closest(".score-session") : null;
      if (button && !button.disabled) scoreSession(button);
    });
    // Scores running when the page was drawn: follow them until they finish.
    var seen = {};
    document.querySelectorAll(".badge.band-busy[data-session-badge]").forEach(function (badge) {
      var id = badge.getAttribute("data-session-badge");
      if (seen[id]) return;
      seen[id] = true;
      api("GET", scoreUrl(id)).then(function (res) {
        if (res.ok) return followScore(id, res.data).then(function (score) { setBadge(id, score); });
      }).catch(function () {});
    });
  }

  // --- pairwise runs ---------------------------------------------------------------------------------------

  function line(parent, text, className) {
    var p = document.createElement("p");
    if (className) p.className = className;
    p.textContent = text;
    parent.appendChild(p);
    return p;
  }

  // The batches are compared in the order they are ticked: the first is A, the baseline.
  function setupPairwiseForm() {
    var form = document.getElementById("pairwise-form");
    if (!form) return;
    var out = document.getElementById("pairwise-result");
    var order = [];
    function showOrder() {
      form.querySelectorAll("tr[data-pick-batch]").forEach(function (row) {
        var at = order.indexOf(row.getAttribute("data-pick-batch"));
        row.querySelector('[data-field="order"]').textContent = at < 0 ? "" : (order.length === 2 ? ["A", "B"][at] : String(at + 1));
      });
    }
    form.querySelectorAll('input[name="batch"]').forEach(function (box) {
      box.addEventListener("change", function () {
        var at = order.indexOf(box.value);
        if (box.checked && at < 0) order.push(box.value);
        if (!box.checked && at >= 0) order.splice(at, 1);
        showOrder();
      });
    });
    function body(dryRun) {
      var labels = order.map(function (id) {
        var row = form.querySelector('tr[data-pick-batch="' + id + '"]');
        return row.querySelector('input[name="label"]').value.trim();
      });
      var named = labels.some(function (l) { return l; });
      var budget = form.elements.budget_usd.value;
      return {
        suite: form.elements.suite.value,
        batches: order.slice(),
        labels: named ? labels.map(function (l, i) { return l || order[i].slice(0, 8); }) : null,
        by: form.elements.by.value.trim() || null,
        budget_usd: budget ? Number(budget) : null,
        lane: form.elements.lane.value,
        dry_run: dryRun
      };
    }
    function estimateLines(d) {
      var e = d.estimate;
      line(out, "Pairwise criteria " + d.criteria_hash.slice(0, 12) + " · " + d.design.pairs + " pair(s) over " +
        d.design.items + " item(s) (" + d.design.rule + ")");
      line(out, "Estimate: " + e.judge_calls + " judge call(s) (" + e.carried_over + " carried over), ~" +
        e.input_tokens.toLocaleString("en-US") + " input + ~" + e.output_tokens.toLocaleString("en-US") +
        " output tokens, ~" + usd(e.cost_usd) + " on the " + e.lane + " lane").setAttribute("data-field", "estimate");
      d.notes.concat(e.notes).forEach(function (n) { line(out, n, "muted"); });
    }
    function send(dryRun) {
      out.className = "result";
      out.textContent = "";
      if (order.length < 2) {
        out.className = "result error";
        out.textContent = "Tick at least two batches to compare.";
        return;
      }
      var buttons = form.querySelectorAll("button");
      buttons.forEach(function (b) { b.disabled = true; });
      out.textContent = dryRun ? "Planning the pairs…" : "Starting the run…";
      api("POST", form.getAttribute("data-endpoint"), JSON.stringify(body(dryRun)), { "Content-Type": "application/json" })
        .then(function (res) {
          buttons.forEach(function (b) { b.disabled = false; });
          out.textContent = "";
          if (res.status === 200 || res.status === 202) {
            out.className = "result ok";
            estimateLines(res.data);
            if (res.data.run) {
              line(out, "Run " + res.data.run.id + " started. Opening it…");
              window.location.href = "/dashboard/pairwise/" + res.data.run.id;
            }
            return;
          }
          out.className = "result error";
          out.textContent = "Not started: " + errorText(res);
        })
        .catch(function (e) {
          buttons.forEach(function (b) { b.disabled = false; });
          out.className = "result error";
          out.textContent = "Request failed: " + e;
        });
    }
    document.getElementById("pairwise-estimate").addEventListener("click", function () { send(true); });
    form.addEventListener("submit", function (ev) { ev.preventDefault(); send(false); });
  }

  function setupPairwiseActions() {
    var box = document.getElementById("run-actions");
    if (!box) return;
    var base = "/api/v1/pairwise/" + encodeURIComponent(box.getAttribute("data-run-id"));
    var out = document.getElementById("run-action-result");
    function done(res) {
      if (res.ok) { window.location.reload(); return; }
      out.className = "result error";
      out.textContent = errorText(res);
    }
    var cancel = document.getElementById("pairwise-cancel");
    if (cancel) cancel.addEventListener("click", function () {
      if (!window.confirm(cancel.getAttribute("data-confirm"))) return;
      cancel.disabled = true;
      api("POST", base + "/cancel").then(done);
    });
    var resume = document.getElementById("pairwise-resume");
    if (resume) resume.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var budget = resume.elements.budget_usd.value;
      api("POST", base + "/resume", JSON.stringify({ budget_usd: budget ? Number(budget) : null }), { "Content-Type": "application/json" })
        .then(done);
    });
  }

  function setupAutosubmit() {
    document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      select.addEventListener("change", function () { select.form.submit(); });
    });
  }

  // Sign-out changes something, so it carries the CSRF token like every other such request (a plain
  // form post would rely on the browser's Origin header alone).
  function setupSignOut() {
    document.querySelectorAll('form[action="/dashboard/sign-out"]').forEach(function (form) {
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        api("POST", form.action).then(function (res) {
          if (res.ok) window.location.assign("/dashboard/sign-in");
          else window.alert("Sign-out failed: " + errorText(res));
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupSignOut();
    setupAutosubmit();
    setupUpload();
    setupScoring();
    setupLiveResults();
    setupPairwiseForm();
    setupPairwiseActions();
    setTimeout(pollBatches, 1000);
  });
})();
