// flowd's live page: one more session of the repository's daemon, speaking the declared protocol
// (docs/protocol.md) as JSON-RPC 2.0 over a WebSocket. Nothing is loaded from elsewhere.
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
const state = { runs: new Map(), lanes: new Map(), attention: new Map(), cost: new Map(), selected: null };
let socket = null, nextId = 1;
const pending = new Map();
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}
const badge = (status) => el("span", { class: `badge s-${status}` }, status);

function request(method, params) {
  const id = nextId++;
  socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}
const command = (name, argument) => request("workspace/executeCommand", { command: name, arguments: [argument] });

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/rpc?token=${encodeURIComponent(token)}`);
  socket.onopen = async () => {
    $("conn").textContent = "live"; $("conn").className = "conn on";
    await request("initialize", { processId: null, rootUri: null, capabilities: {}, clientInfo: { name: "flowd page" } });
    socket.send(JSON.stringify({ jsonrpc: "2.0", method: "initialized", params: {} }));
    await refresh();
  };
  socket.onclose = () => {
    $("conn").textContent = "disconnected; retrying"; $("conn").className = "conn off";
    for (const { reject } of pending.values()) reject(new Error("disconnected"));
    pending.clear();
    setTimeout(connect, 1500);
  };
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.id != null && pending.has(message.id) && message.method === undefined) {
      const { resolve, reject } = pending.get(message.id);
      pending.delete(message.id);
      if (message.error) reject(new Error(message.error.message)); else resolve(message.result);
    } else if (message.method && message.id != null) {
      socket.send(JSON.stringify({ jsonrpc: "2.0", id: message.id, result: null })); // e.g. registerCapability
    } else if (message.method) {
      notified(message.method, message.params || {});
    }
  };
}

async function refresh() {
  const status = await request("flow/status", {});
  state.runs.clear();
  for (const run of status.runs) {
    state.runs.set(run.runId, run);
    for (const lane of run.lanes || []) state.lanes.set(`${run.runId}/${lane.lane}`, lane);
    if (run.totals) state.cost.set(run.runId, run.totals);
  }
  if (!state.selected && status.runs.length) state.selected = status.runs[0].runId;
  render();
  await details();
}

let detailsTimer = null;
function notified(method, p) {
  if (method === "flow/run") state.runs.set(p.runId, { ...(state.runs.get(p.runId) || {}), ...p });
  else if (method === "flow/lane") state.lanes.set(`${p.runId}/${p.lane}`, p);
  else if (method === "flow/cost") state.cost.set(p.runId, p);
  else if (method === "flow/attention") {
    const key = `${p.runId}/${p.lane || ""}`;
    if (p.reason === "cleared") state.attention.delete(key); else state.attention.set(key, p);
  } else if (method === "flow/task" || method === "flow/clone") { /* shown through flow/lane */ }
  if (!state.selected && p.runId) state.selected = p.runId;
  render();
  clearTimeout(detailsTimer);
  detailsTimer = setTimeout(details, 300); // the graph and timeline follow, at most ~3 times a second
}

function money(x) { return x == null ? "–" : `$${Number(x).toFixed(4)}`; }

function render() {
  const runs = $("runs");
  runs.replaceChildren(...[...state.runs.values()].map((run) =>
    el("li", { class: run.runId === state.selected ? "sel" : "", onclick: () => { state.selected = run.runId; render(); details(); } },
      el("span", {}, run.epicId || run.runId, el("br"), el("small", {}, run.runId)), badge(run.status || "running"))));
  const run = state.runs.get(state.selected);
  if (!run) return;
  $("run-title").textContent = `Epic ${run.epicId || ""} · ${run.runId}`;
  $("run-status").replaceChildren(badge(run.status || "running"),
    run.total != null ? ` ${run.done || 0}/${run.total} stories` : "");
  $("cancel").hidden = run.status !== "running";
  const cost = state.cost.get(run.runId) || {};
  $("cost").textContent = `${cost.tokens ?? 0} tokens · ${money(cost.costUsd)}` +
    (cost.budgetUsd != null ? ` of a ${money(cost.budgetUsd)} budget` : "") +
    (cost.estimatedTokens ? ` · ${cost.estimatedTokens} estimated` : "");
  const lanes = [...state.lanes.values()].filter((l) => l.runId === run.runId);
  $("lanes").tBodies[0].replaceChildren(...lanes.map((l) => el("tr", {},
    el("td", {}, el("strong", {}, l.lane), el("br"), el("span", { class: "msg" }, l.title || "")),
    el("td", {}, badge(l.status)),
    el("td", {}, l.task ? `${l.task.index}/${l.task.count} ${l.task.title}` : "–"),
    el("td", {}, l.executor ? `${l.executor}${l.clone != null ? ` · #${l.clone}` : ""}` : "–"),
    el("td", { class: "num" }, String(l.tokens ?? 0)),
    el("td", { class: "num" }, money(l.costUsd)))));
  const items = [...state.attention.values()].filter((a) => a.runId === run.runId);
  $("attention").replaceChildren(...(items.length ? items.map(attentionItem) : [el("li", { class: "quiet" }, "Nothing.")]));
}

function attentionItem(a) {
  const text = el("input", { type: "text", placeholder: "an answer, or what to change" });
  const answer = (value) => command("flow.answer", { runId: a.runId, story: a.lane || undefined, answer: value })
    .then(refresh).catch((e) => alert(e.message));
  const buttons = (a.actions || []).map((action) => el("button", { class: action === "approve" ? "primary" : "", onclick: () => answer(action) }, action));
  buttons.push(el("button", { onclick: () => text.value && answer(text.value) }, "Answer"));
  if (a.lane) {
    const where = el("input", { type: "text", placeholder: "path:line" });
    buttons.push(where, el("button", { onclick: () => {
      const [path, line] = where.value.split(":");
      if (!path || !line || !text.value) return;
      command("flow.addRevision", { runId: a.runId, story: a.lane, uri: path, line: Number(line), text: text.value })
        .then(refresh).catch((e) => alert(e.message));
    } }, "Request changes"));
  }
  return el("li", {}, el("strong", {}, `${a.lane ? a.lane + ": " : ""}${a.reason}`), " ", a.message,
    el("div", { class: "actions" }, text, ...buttons));
}

async function details() {
  const runId = state.selected;
  if (!runId || !socket || socket.readyState !== 1) return;
  try {
    const [graph, timeline] = await Promise.all([request("flow/graph", { runId }), request("flow/timeline", { runId })]);
    if (runId !== state.selected) return;
    $("graph").replaceChildren(...graph.stories.map((s) => el("div", { class: "graph-row" },
      badge(s.status), el("span", { class: s.critical ? "critical" : "" }, `${s.id} · ${s.title}`),
      el("span", { class: "deps" }, s.dependsOn.length ? `after ${s.dependsOn.join(", ")}` : ""))));
    const t0 = Date.parse(timeline.startedAt || new Date().toISOString());
    const t1 = Math.max(Date.parse(timeline.endedAt || new Date().toISOString()), t0 + 1);
    $("timeline").replaceChildren(...timeline.lanes.map((lane) => {
      const bar = el("div", { class: "tl-bar" });
      for (const p of lane.phases) {
        const a = Date.parse(p.start), b = Date.parse(p.end || new Date().toISOString());
        const seg = el("div", { class: `tl-seg p-${p.phase}`, title: `${p.phase} ${p.start}${p.end ? " – " + p.end : ""}` });
        seg.style.left = `${(100 * (a - t0)) / (t1 - t0)}%`;
        seg.style.width = `${(100 * Math.max(b - a, 0)) / (t1 - t0)}%`;
        bar.append(seg);
      }
      return el("div", { class: "tl-row" }, el("span", {}, lane.lane, " ", badge(lane.status)), bar);
    }));
  } catch (e) {
    $("graph").replaceChildren(el("span", { class: "msg" }, e.message)); // e.g. a run no longer followed
  }
}

$("cancel").addEventListener("click", () => {
  if (state.selected && confirm(`Cancel run ${state.selected}? It stays resumable.`))
    command("flow.cancelEpic", { runId: state.selected }).then(refresh).catch((e) => alert(e.message));
});
window.addEventListener("unhandledrejection", (e) => { $("conn").textContent = `error: ${e.reason && e.reason.message}`; });
window.addEventListener("error", (e) => { $("conn").textContent = `error: ${e.message}`; });
connect();
