// fedchain dashboard: live panels over server-sent events, the control panel's forms and
// buttons. No framework and nothing loaded from elsewhere: the server renders every panel's
// HTML; this script swaps in the panels that changed and posts the panel's actions.
(function () {
  "use strict";
  const body = document.body;
  const conn = document.getElementById("conn");
  // What the browser applied and when (read by the latency benchmark and the tests).
  const applied = [];
  window.__fedchain = { applied: applied, version: 0 };

  function relativeTimes() {
    const now = Date.now() / 1000;
    document.querySelectorAll("time[data-t]").forEach(function (el) {
      const age = Math.max(0, now - parseFloat(el.dataset.t));
      el.textContent = age < 90 ? age.toFixed(0) + " s ago" : (age / 60).toFixed(0) + " min ago";
    });
  }

  function applyPanels(msg) {
    Object.keys(msg.panels || {}).forEach(function (id) {
      const el = document.getElementById("panel-" + id);
      if (!el) return;
      // keep open <details> open across updates
      const open = Array.from(el.querySelectorAll("details[open]")).map(function (d, i) { return i; });
      el.innerHTML = msg.panels[id];
      const details = el.querySelectorAll("details");
      open.forEach(function (i) { if (details[i]) details[i].open = true; });
    });
    applied.push({ at: Date.now(), n_events: msg.n_events, last_t: msg.last_t, version: msg.version });
    if (msg.n_events !== undefined) body.dataset.nEvents = String(msg.n_events);
    window.__fedchain.version += 1;
    body.dataset.updates = String(window.__fedchain.version);
    relativeTimes();
  }

  // The browser retries a dropped stream by itself, but gives up for good after a failed
  // reconnect (an HTTP error such as 500 or 503, or a wrong content type): then this page
  // reconnects itself, waiting 1, 2, 4 ... up to 30 s between attempts, forever.
  const RETRY_MIN_MS = 1000, RETRY_MAX_MS = 30000;
  let retryMs = RETRY_MIN_MS;
  window.__fedchain.reconnects = 0;

  function connect(url) {
    const source = new EventSource(url);
    source.addEventListener("panels", function (e) { applyPanels(JSON.parse(e.data)); });
    source.onopen = function () {
      retryMs = RETRY_MIN_MS;
      if (conn) { conn.textContent = "● live"; conn.className = "conn live"; }
    };
    source.onerror = function () {
      if (conn) { conn.textContent = "○ reconnecting…"; conn.className = "conn down"; }
      if (source.readyState !== EventSource.CLOSED) return;  // the browser retries itself
      source.close();
      const wait = retryMs;
      retryMs = Math.min(RETRY_MAX_MS, retryMs * 2);
      if (conn) conn.textContent = "○ reconnecting in " + Math.round(wait / 1000) + " s…";
      setTimeout(function () { window.__fedchain.reconnects += 1; connect(url); }, wait);
    };
  }

  // A list typed into a text box: whitespace-separated, "double" or 'single' quotes keep a
  // value with spaces whole. The server gets a JSON list and never splits its elements.
  function words(text) {
    const out = [];
    const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
    let m;
    while ((m = re.exec(text)) !== null) out.push(m[1] !== undefined ? m[1] : m[2] !== undefined ? m[2] : m[3]);
    return out.filter(function (v) { return v !== ""; });
  }

    async function post(url, payload) {
    const resp = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Fedchain-Dashboard": "1" },
      body: JSON.stringify(payload || {}),
    });
    let data = {};
    try { data = await resp.json(); } catch (err) { data = { error: resp.status + " " + resp.statusText }; }
    if (!resp.ok && !data.error) data.error = resp.status + " " + resp.statusText;
    return data;
  }

  // Buttons of the panels (kill/start a node, stop a job): delegated, panels are replaced.
  document.addEventListener("click", async function (e) {
    const tab = e.target.closest("[data-tab]");
    if (tab) {
      document.querySelectorAll("[data-tab]").forEach(function (t) { t.classList.toggle("active", t === tab); });
      document.querySelectorAll("form.command-form").forEach(function (f) {
        f.classList.toggle("hidden", f.getAttribute("data-command") !== tab.dataset.tab);
      });
      return;
    }
    const legend = e.target.closest("fieldset > legend");
    if (legend) { legend.parentElement.classList.toggle("collapsed"); return; }
    const button = e.target.closest("[data-post]");
    if (!button) return;
    e.preventDefault();
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    const out = document.getElementById("action-result");
    const data = await post(button.dataset.post);
    if (out) {
      out.textContent = data.error || data.message || "";
      out.className = "action-result small " + (data.error ? "bad" : "good");
    }
    button.disabled = false;
  });

  // Control-panel forms: field values (as typed) go to the server, which checks them with
  // the CLI's own parser and answers with its one-line error, or starts the command.
  document.addEventListener("submit", async function (e) {
    const form = e.target.closest("form[data-api]");
    if (!form) return;
    e.preventDefault();
    const values = {};
    form.querySelectorAll("input, select").forEach(function (el) {
      if (!el.name) return;
      let value;
      if (el.type === "checkbox") value = el.checked;
      else if (el.multiple) value = Array.from(el.selectedOptions).map(function (o) { return o.value; });
      else if (el.dataset.list) value = words(el.value);
      else value = el.value;
      if (values[el.name] === undefined) values[el.name] = value;
      else values[el.name] = [].concat(values[el.name], value);  // scenarios: list + paths
    });
    const error = form.querySelector(".form-error");
    const ok = form.querySelector(".form-ok");
    error.textContent = ""; ok.textContent = "";
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    // getAttribute, not form.dataset: a field named "dataset" (--dataset) shadows it
    const data = await post(form.getAttribute("data-api"), {
      command: form.getAttribute("data-command"), values: values,
    });
    button.disabled = false;
    if (data.error) { error.textContent = data.error; return; }
    ok.textContent = "started: " + data.job.command + " (pid " + data.job.pid + ")";
  });

  if (body.dataset.stream) connect(body.dataset.stream);
  relativeTimes();
  setInterval(relativeTimes, 1000);
})();
