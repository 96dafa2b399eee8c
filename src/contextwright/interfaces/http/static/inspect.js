// contextwright inspector: reads the /v1 API of the server that serves it.
//
// Safety rules of this file: every piece of data is put in the page as text
// (createTextNode / textContent through `h`), never parsed as HTML; the key lives in
// sessionStorage and travels only in the Authorization header; nothing is loaded
// from another origin (the server's Content-Security-Policy enforces it too).
"use strict";

(() => {
  const KEY = "contextwright.key";
  const PAGE = 50; // stored messages per page of the window view
  const LEFT_OUT = ["dropped", "failed", "timed_out"];
  const state = {
    key: sessionStorage.getItem(KEY) || "",
    insecure: false,
    conv: null, // the conversation dict shown
    summary: null, // its summary answer (coverage)
    receipts: [],
    picked: 0, // index in receipts
    win: 0, // after_seq of the window page shown
    tab: "receipts",
  };

  // -- DOM ---------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  // h("td", {class: "x", title: t}, child, "text", …): children are nodes or text.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") el.className = value;
      else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
      else el.setAttribute(name, String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  function fill(target, ...children) {
    const el = typeof target === "string" ? $(target) : target;
    el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined));
    return el;
  }

  const when = (at) => (at ? new Date(at * 1000).toLocaleString() : "");
  const num = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : "–");
  const ms = (v) => (typeof v === "number" ? `${v.toFixed(v < 10 ? 2 : 1)} ms` : "");

  function showError(err) {
    const box = $("error");
    if (!err) {
      box.hidden = true;
      return;
    }
    const title = err.title ? `${err.title}: ` : "";
    fill(box, `${title}${err.message || String(err)}`);
    box.hidden = false;
  }

  // -- API ---------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, title, detail) {
      super(detail || `HTTP ${status}`);
      this.status = status;
      this.title = title || "";
    }
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (state.key) headers.Authorization = `Bearer ${state.key}`;
    const init = { method, headers, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    if (resp.headers.get("x-contextwright-insecure")) state.insecure = true;
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = null;
    }
    if (!resp.ok) {
      const p = data && typeof data === "object" ? data : {};
      throw new ApiError(resp.status, p.title, p.detail || text.slice(0, 300));
    }
    return data;
  }

  const enc = encodeURIComponent;
  const convPath = (rest) => `/v1/conversations/${enc(state.conv.id)}${rest || ""}`;

  // -- key and start -----------------------------------------------------------------

  async function start() {
    try {
      await loadConversations();
      openApp();
    } catch (err) {
      if (err.status === 401) {
        askKey(state.key ? "That key was refused (unknown, malformed or revoked)." : "");
      } else {
        showError(err);
      }
    }
  }

  function askKey(message) {
    state.key = "";
    sessionStorage.removeItem(KEY);
    $("app").hidden = true;
    $("forget").hidden = true;
    $("login").hidden = false;
    fill("login-error", message || "");
    $("key").value = "";
    $("key").focus();
  }

  function openApp() {
    $("login").hidden = true;
    $("app").hidden = false;
    $("forget").hidden = state.insecure;
    const mode = $("mode");
    mode.hidden = false;
    mode.className = state.insecure ? "mode insecure" : "mode";
    fill(mode, state.insecure ? "no authentication (--insecure-single-tenant)" : "key in this tab");
    const wanted = decodeURIComponent(location.hash.slice(1));
    if (wanted && !state.conv) guard(() => pick(wanted));
  }

  $("key-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const key = $("key").value.trim();
    if (!key) return;
    state.key = key;
    $("key").value = "";
    try {
      await loadConversations();
      sessionStorage.setItem(KEY, key);
      openApp();
    } catch (err) {
      if (err.status === 401) askKey("That key was refused (unknown, malformed or revoked).");
      else showError(err);
    }
  });

  $("forget").addEventListener("click", () => {
    state.conv = null;
    fill("conversations");
    $("conversation").hidden = true;
    $("pick").hidden = false;
    history.replaceState(null, "", location.pathname);
    askKey("");
  });

  // Every action goes through `guard`: a 401 (key revoked meanwhile) asks for a key again.
  async function guard(action) {
    try {
      showError(null);
      await action();
    } catch (err) {
      if (err.status === 401 && !state.insecure) askKey("The key was refused; enter a key.");
      else showError(err);
    }
  }

  // -- conversations ------------------------------------------------------------------

  async function loadConversations() {
    const user = $("user-filter").value.trim();
    const query = user ? `?user=${enc(user)}` : "";
    const data = await api("GET", `/v1/conversations${query}`);
    const list = data.conversations;
    fill(
      "conversations",
      list.length === 0 ? h("li", { class: "hint" }, "No conversations yet.") : null,
      list.map((c) =>
        h(
          "li",
          {},
          h(
            "button",
            {
              type: "button",
              class: state.conv && state.conv.id === c.id ? "conv picked" : "conv",
              "data-id": c.id,
              onclick: () => guard(() => pick(c.id)),
            },
            h("strong", {}, c.id),
            h("span", { class: "meta" }, `${c.user} · ${num(c.message_count)} msgs · ${num(c.token_total)} tok`),
          ),
        ),
      ),
    );
  }

  $("filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    guard(loadConversations);
  });

  async function pick(id) {
    state.conv = await api("GET", `/v1/conversations/${enc(id)}`);
    state.picked = 0;
    state.win = Math.max(0, state.conv.last_seq - PAGE);
    history.replaceState(null, "", `#${enc(id)}`);
    for (const b of document.querySelectorAll(".conv")) {
      b.classList.toggle("picked", b.getAttribute("data-id") === id);
    }
    $("pick").hidden = true;
    $("conversation").hidden = false;
    fill("build-result");
    $("memory-user").value = state.conv.user;
    showMeta();
    state.summary = await api("GET", convPath("/summary"));
    await showTab(state.tab);
  }

  function showMeta() {
    const c = state.conv;
    fill("conv-title", c.id);
    fill(
      "conv-meta",
      `user ${c.user} · ${num(c.message_count)} messages · ${num(c.token_total)} tokens stored · ` +
        `last seq ${c.last_seq} · updated ${when(c.updated_at)}`,
    );
  }

  async function refreshConversation() {
    state.conv = await api("GET", convPath());
    showMeta();
  }

  // -- tabs -----------------------------------------------------------------------------

  const loaders = {
    receipts: loadReceipts,
    build: async () => $("build-message").focus(),
    window: loadWindow,
    summary: loadSummary,
    compactions: loadCompactions,
    memories: loadMemories,
  };

  async function showTab(name) {
    state.tab = name;
    for (const b of document.querySelectorAll("[data-tab]")) {
      const on = b.getAttribute("data-tab") === name;
      b.classList.toggle("on", on);
      b.setAttribute("aria-selected", on ? "true" : "false");
    }
    for (const s of document.querySelectorAll(".tab")) s.hidden = s.id !== `tab-${name}`;
    await loaders[name]();
  }

  for (const b of document.querySelectorAll("[data-tab]")) {
    b.addEventListener("click", () => guard(() => showTab(b.getAttribute("data-tab"))));
  }

  // -- receipts -------------------------------------------------------------------------

  async function loadReceipts() {
    const data = await api("GET", convPath("/receipts?limit=20"));
    state.receipts = data.receipts;
    if (state.picked >= state.receipts.length) state.picked = 0;
    showReceipts();
  }

  function showReceipts() {
    const rows = state.receipts.map((r, i) => {
      const rc = r.receipt;
      const out = rc.blocks.filter((b) => LEFT_OUT.includes(b.status)).length;
      const cut = rc.blocks.filter((b) => b.status === "truncated").length;
      return h(
        "tr",
        {
          class: i === state.picked ? "pickable picked" : "pickable",
          onclick: () => {
            state.picked = i;
            showReceipts();
          },
        },
        h("td", {}, when(r.at)),
        h("td", {}, num(rc.budget)),
        h("td", {}, `${num(rc.used)} (${Math.round((rc.utilisation || 0) * 100)}%)`),
        h("td", { class: out ? "bad" : "" }, String(out)),
        h("td", { class: cut ? "warn" : "" }, String(cut)),
        h("td", {}, ms((rc.timings_ms || {}).total)),
      );
    });
    fill("receipt-list", rows.length ? rows : h("tr", {}, h("td", { colspan: 6, class: "hint" }, "No builds yet: try “Build now”.")));
    const chosen = state.receipts[state.picked];
    fill("receipt-view", chosen ? receiptView(chosen.receipt, chosen.at) : null);
  }

  // The receipt of one build: what was left out first, then the bar, blocks, timings.
  function receiptView(rc, at) {
    const blocks = rc.blocks || [];
    const out = blocks.filter((b) => LEFT_OUT.includes(b.status));
    const cut = blocks.filter((b) => b.status === "truncated");
    const head = h(
      "p",
      { class: "meta" },
      at ? `${when(at)} · ` : "",
      `budget ${num(rc.budget)} · used ${num(rc.used)} (${((rc.utilisation || 0) * 100).toFixed(1)}%) · `,
      `protected ${num(rc.protected_tokens)} · counter ${rc.counter}${rc.exact ? " (exact)" : ""}`,
      rc.last_seq !== null && rc.last_seq !== undefined ? ` · read up to seq ${rc.last_seq}` : "",
    );
    return h(
      "div",
      { class: "receipt", "data-testid": "receipt" },
      head,
      leftOut(out, cut),
      sectionBar(rc),
      blockTable(blocks),
      h("div", { class: "cols" }, timings(rc.timings_ms || {}), facts(rc)),
    );
  }

  function leftOut(out, cut) {
    if (!out.length && !cut.length) {
      return h("p", { class: "ok-box" }, "Nothing was left out or cut: every block that had content is in the prompt.");
    }
    return h(
      "div",
      { class: "left-out", "data-testid": "left-out" },
      out.length ? h("h3", {}, `Not in the prompt (${out.length})`) : null,
      out.length
        ? h("ul", {}, out.map((b) =>
            h("li", { class: "dropped-block" },
              h("strong", {}, b.name), " ",
              h("span", { class: `status s-${b.status}` }, b.status.replace("_", " ")),
              " — ", h("span", { class: "reason" }, b.reason || "(no reason given)"),
              b.original_tokens ? h("span", { class: "meta" }, ` (${num(b.original_tokens)} tokens wanted)`) : null,
            )))
        : null,
      cut.length ? h("h4", {}, `Cut to fit (${cut.length})`) : null,
      cut.length
        ? h("ul", {}, cut.map((b) =>
            h("li", {},
              h("strong", {}, b.name),
              b.original_tokens ? ` ${num(b.tokens)} of ${num(b.original_tokens)} tokens — ` : ` ${num(b.tokens)} tokens — `,
              h("span", { class: "reason" }, b.reason || ""),
            )))
        : null,
    );
  }

  // Tokens per section, stacked against the budget (the bar's full width).
  function sectionBar(rc) {
    const sections = Object.entries(rc.sections || {}).filter(([, s]) => s.used > 0);
    const whole = Math.max(rc.budget || 0, rc.used || 0, 1);
    const bar = h("div", { class: "bar", "data-testid": "section-bar", role: "img",
      "aria-label": `${num(rc.used)} of ${num(rc.budget)} tokens used` });
    const legend = h("ul", { class: "legend" });
    sections.forEach(([name, s], i) => {
      const seg = h("div", { class: `seg c${i % 8}`, "data-section": name,
        title: `${name}: ${s.used} tokens (allotted ${s.allotted}, share ${Math.round(s.share * 100)}%)` },
        s.used / whole > 0.08 ? name : "");
      seg.style.width = `${(100 * s.used) / whole}%`;
      bar.append(seg);
      legend.append(h("li", {}, h("span", { class: `swatch c${i % 8}` }),
        `${name} ${num(s.used)}`, h("span", { class: "meta" }, ` / ${num(s.allotted)} allotted`)));
    });
    const free = whole - (rc.used || 0);
    if (free > 0) {
      const seg = h("div", { class: "seg free", title: `unused: ${free} tokens` });
      seg.style.width = `${(100 * free) / whole}%`;
      bar.append(seg);
      legend.append(h("li", {}, h("span", { class: "swatch free" }), `unused ${num(free)}`));
    }
    return h("div", { class: "bar-box" },
      h("div", { class: "bar-scale" }, h("span", {}, "0"), h("span", {}, `budget ${num(rc.budget)}`)),
      bar, legend);
  }

  function blockTable(blocks) {
    const order = { dropped: 0, failed: 0, timed_out: 0, truncated: 1 };
    const sorted = blocks.slice().sort((a, b) => (order[a.status] ?? 2) - (order[b.status] ?? 2));
    return h(
      "table",
      { class: "list blocks" },
      h("thead", {}, h("tr", {}, ["item", "source", "section", "P", "tokens", "status", "reason", "fetch"].map((t) => h("th", {}, t)))),
      h("tbody", {}, sorted.map((b) => {
        const tokens = b.original_tokens !== null && b.original_tokens !== undefined && b.original_tokens !== b.tokens
          ? `${num(b.tokens)} / ${num(b.original_tokens)}` : num(b.tokens);
        return h("tr", { class: `row-${b.status}`, "data-block": b.name },
          h("td", {}, b.name), h("td", {}, b.source), h("td", {}, b.section),
          h("td", {}, `P${b.priority}`), h("td", { class: "num" }, tokens),
          h("td", {}, h("span", { class: `status s-${b.status}` }, b.status.replace("_", " ")),
            b.cached ? h("span", { class: "status s-cached" }, "cached") : null),
          h("td", { class: "reason" }, b.reason || ""), h("td", { class: "num" }, ms(b.fetch_ms)));
      })),
    );
  }

  function timings(t) {
    const total = t.total || Math.max(...Object.values(t), 1);
    const stages = Object.entries(t).filter(([k]) => k !== "total");
    return h("div", { class: "timings" }, h("h4", {}, `Stages (${ms(t.total)})`),
      h("table", { class: "list" }, h("tbody", {}, stages.map(([k, v]) => {
        const fill_ = h("span", { class: "tbar" });
        fill_.style.width = `${Math.min(100, (100 * v) / total)}%`;
        return h("tr", {}, h("td", {}, k), h("td", { class: "num" }, ms(v)), h("td", { class: "tcell" }, fill_));
      }))));
  }

  function facts(rc) {
    const c = rc.compaction;
    const items = [
      `history: ${rc.history_messages} messages in ${rc.history_units} units kept of ${rc.history_total}; ` +
        `${rc.history_shortened} shortened; stopped at: ${rc.history_stopped || "–"}`,
      `block cache: ${rc.cache_hits} hits, ${rc.cache_misses} misses` +
        (rc.cache_unavailable ? ` (skipped: ${rc.cache_unavailable})` : ""),
    ];
    if (c) {
      items.push(`compaction: urgency ${c.urgency}` + (c.performed
        ? `, performed (${(c.strategies || []).join(", ")}): ${num(c.tokens_before)} → ${num(c.tokens_after)} tokens`
        : ", not performed"));
    }
    return h("div", { class: "facts" }, h("h4", {}, "Build"),
      h("ul", {}, items.map((t) => h("li", {}, t)),
        (rc.warnings || []).map((w) => h("li", { class: "warn" }, `warning: ${w}`))));
  }

  // -- build now ------------------------------------------------------------------------

  $("build-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    guard(async () => {
      const body = {
        message: $("build-message").value,
        format: $("build-format").value,
        store_message: $("build-store").checked,
      };
      const budget = $("build-budget").value.trim();
      if (budget) body.budget = Number(budget);
      const button = ev.submitter || $("build-form").querySelector("button");
      button.disabled = true;
      fill("build-result", h("p", { class: "hint" }, "Building…"));
      try {
        const data = await api("POST", convPath("/context"), body);
        fill("build-result",
          h("h3", {}, "Receipt of this build"),
          receiptView(data.receipt, Date.now() / 1000),
          h("details", { class: "request" }, h("summary", {}, `Rendered ${body.format} request`),
            h("pre", { "data-testid": "request" }, JSON.stringify(data.request, null, 2))));
        state.picked = 0;
        await refreshConversation();
        state.summary = await api("GET", convPath("/summary"));
      } catch (err) {
        fill("build-result");
        throw err;
      } finally {
        button.disabled = false;
      }
    });
  });

  // -- window ---------------------------------------------------------------------------

  function partText(p) {
    if (p.type === "text") return p.text;
    if (p.type === "tool_call") return `→ ${p.name}(${p.arguments})`;
    if (p.type === "tool_result") {
      const c = typeof p.content === "string" ? p.content : p.content.map(partText).join("\n");
      return `← ${p.name || p.call_id}${p.is_error ? " (error)" : ""}: ${c}`;
    }
    if (p.type === "image") return "[image]";
    return `[${p.type}]`;
  }

  async function loadWindow() {
    const data = await api("GET", convPath(`/messages?after_seq=${state.win}&limit=${PAGE}`));
    const upto = state.summary && state.summary.coverage ? state.summary.coverage.upto_seq : 0;
    const rows = data.messages.map((m) => {
      const summarised = m.seq <= upto;
      return h("tr", { class: summarised ? "summarised" : "" },
        h("td", { class: "num" }, String(m.seq)), h("td", {}, m.role),
        h("td", {}, h("span", { class: summarised ? "status s-skipped" : "status s-included" },
          summarised ? "in summary" : "after summary")),
        h("td", {}, h("div", { class: "text" }, m.parts.map(partText).join("\n"))));
    });
    fill("win-rows", rows.length ? rows : h("tr", {}, h("td", { colspan: 4, class: "hint" }, "No messages stored.")));
    const first = data.messages.length ? data.messages[0].seq : state.win;
    const last = data.messages.length ? data.messages[data.messages.length - 1].seq : state.win;
    fill("win-range", `messages ${first}–${last} of ${state.conv.last_seq}`);
    $("win-prev").disabled = state.win <= 0;
    $("win-first").disabled = state.win <= 0;
    $("win-next").disabled = last >= state.conv.last_seq;
    $("win-last").disabled = last >= state.conv.last_seq;
  }

  const page = (to) => () => guard(async () => {
    state.win = Math.max(0, to());
    await loadWindow();
  });
  $("win-first").addEventListener("click", page(() => 0));
  $("win-prev").addEventListener("click", page(() => state.win - PAGE));
  $("win-next").addEventListener("click", page(() => state.win + PAGE));
  $("win-last").addEventListener("click", page(() => state.conv.last_seq - PAGE));

  // -- summary and compactions ----------------------------------------------------------

  async function loadSummary() {
    state.summary = await api("GET", convPath("/summary"));
    const { summary: s, coverage: cov } = state.summary;
    const bar = h("div", { class: "bar", role: "img", "aria-label": "summary coverage" });
    const covered = h("div", { class: "seg c1" }, cov.upto_seq ? `summarised 1–${cov.upto_seq}` : "");
    covered.style.width = `${cov.last_seq ? (100 * cov.upto_seq) / cov.last_seq : 0}%`;
    const after = h("div", { class: "seg c3" }, cov.messages_after ? `${cov.messages_after} after` : "");
    after.style.width = `${cov.last_seq ? (100 * cov.messages_after) / cov.last_seq : 0}%`;
    bar.append(covered, after);
    fill("summary-view",
      h("p", { class: "meta" }, `covers messages up to seq ${cov.upto_seq} of ${cov.last_seq}; ` +
        `${cov.messages_after} message(s) after it reach the prompt as recent turns (if they fit)`),
      bar,
      s
        ? [h("p", { class: "meta" }, `version ${s.version} · seq ${s.from_seq}–${s.upto_seq} · ${num(s.tokens)} tokens · ` +
            `method ${s.method} · ${when(s.created_at)}`),
           h("pre", { class: "text" }, s.content)]
        : h("p", { class: "hint" }, "No summary yet: the conversation has not been compacted."));
  }

  async function loadCompactions() {
    const data = await api("GET", convPath("/compactions"));
    const rows = data.compactions.slice().reverse().map((e) => {
      const saved = e.tokens_before ? Math.round(100 * (1 - e.tokens_after / e.tokens_before)) : 0;
      return h("tr", {}, h("td", {}, when(e.at)), h("td", {}, e.urgency),
        h("td", {}, e.applied ? "yes" : "no"),
        h("td", { class: "num" }, `${num(e.tokens_before)} → ${num(e.tokens_after)} (−${saved}%)`),
        h("td", {}, e.strategies.join(", ")),
        h("td", {}, e.summary_version ? `v${e.summary_version} up to seq ${e.upto_seq}` : ""),
        h("td", {}, e.notes.join("; ")));
    });
    fill("compaction-rows", rows.length ? rows : h("tr", {}, h("td", { colspan: 7, class: "hint" }, "No compactions yet.")));
  }

  // -- memories -------------------------------------------------------------------------

  async function loadMemories() {
    const user = $("memory-user").value.trim() || state.conv.user;
    const sup = $("memory-superseded").checked ? "&include_superseded=true" : "";
    const data = await api("GET", `/v1/memories?user=${enc(user)}${sup}`);
    const rows = data.memories.map((m) => h("tr", { class: m.superseded_by ? "summarised" : "" },
      h("td", {}, h("div", { class: "text" }, m.content)), h("td", {}, m.category), h("td", { class: "num" }, String(m.importance)),
      h("td", {}, m.key || ""),
      h("td", {}, m.source_message_ids.length ? m.source_message_ids.join(", ") : h("span", { class: "meta" }, "none recorded"),
        Object.keys(m.meta || {}).length ? h("div", { class: "meta" }, JSON.stringify(m.meta)) : null),
      h("td", {}, when(m.created_at)),
      h("td", {}, m.superseded_by ? `superseded by ${m.superseded_by} (${when(m.superseded_at)})` : "live")));
    fill("memory-rows", rows.length ? rows : h("tr", {}, h("td", { colspan: 7, class: "hint" }, `No memories of ${user}.`)));
  }

  $("memory-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    guard(loadMemories);
  });

  start();
})();
