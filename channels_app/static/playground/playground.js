// agentsite playground: renders a session's events as they stream over the
// session websocket, and posts new conversations, follow-ups, stops, approval
// decisions and answers to the agent's questions (question.js) to the HTTP API.
// No build step, no dependencies.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}

// A turn's waterfall from the `timings` of its turn.completed / turn.failed: one bar per step,
// placed and sized by its share of the whole turn (the trace page draws the same, server-side).
const WATERFALL_TOTALS = [["queue", "queueMs"], ["load", "loadMs"], ["workspace", "workspaceMs"], ["runtime", "runtimeMs"],
  ["model", "modelMs"],
  ["first output", "firstTokenMs"], ["tools", "toolsMs"], ["approval", "approvalMs"], ["settle", "settleMs"],
  ["total", "totalMs"]];

function waterfall(timings, traceId) {
  if (!timings || !timings.totalMs) return null;
  const total = timings.totalMs;
  const totals = el("p", { class: "totals" });
  // Traced turns (OpenTelemetry on) name their trace: look it up in the collector's viewer.
  if (traceId) totals.append(el("span", { class: "total" }, el("b", { text: "trace" }), " ", el("code", { class: "trace-id", text: traceId })));
  for (const [label, key] of WATERFALL_TOTALS) {
    if (timings[key] != null) totals.append(el("span", { class: "total" }, el("b", { text: label }), ` ${timings[key]} ms`));
  }
  const box = el("details", { class: "waterfall" }, el("summary", { text: `timings · ${total} ms` }), totals);
  for (const step of timings.steps || []) {
    const left = Math.min(Math.max(100 * step.startMs / total, 0), 99.5);
    const width = Math.min(Math.max(100 * step.durationMs / total, 0.5), 100 - left);
    const bar = el("span", { class: "bar" });
    bar.style.marginLeft = `${left}%`;
    bar.style.width = `${width}%`;
    box.append(el("div", { class: `lane wf-${step.kind}`, "data-kind": step.kind, title: `starts at ${step.startMs} ms` },
      el("span", { class: "label", text: `${step.kind} ${step.name || ""}`.trim() }),
      el("span", { class: "bar-wrap" }, bar),
      el("span", { class: "ms", text: `${step.durationMs} ms` })));
  }
  return box;
}

function csrfToken() {
  // Needed when the caller is an admin login (a session cookie); harmless otherwise.
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

// A refusal of the API: its message, with the HTTP status and the error's code and body to act on.
class APIError extends Error {
  constructor(status, payload) {
    const error = payload && payload.error ? payload.error : {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || "";
    this.error = error;
  }
}

async function requestJSON(url, method = "GET", body = undefined) {
  const headers = { Accept: "application/json", "X-CSRFToken": csrfToken() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
  });
  let payload = null;
  try { payload = await response.json(); } catch (_) { /* empty body */ }
  if (!response.ok) throw new APIError(response.status, payload);
  return payload;
}

function postJSON(url, body) {
  return requestJSON(url, "POST", body);
}

function sendOnCtrlEnter(form) {
  form.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });
}

// --- agent page: start a conversation --------------------------------------

function setupNewSession(form) {
  sendOnCtrlEnter(form);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = form.querySelector(".form-error");
    error.textContent = "";
    const data = new FormData(form);
    const slug = form.dataset.slug;
    try {
      const body = { message: data.get("message"), mode: data.get("mode"), dryRun: data.get("dryRun") === "on" };
      if (data.get("model")) body.model = data.get("model");  // offered when the agent has several
      const created = await postJSON(`/${slug}/v1/session`, body);
      window.location.href = `/playground/${slug}/session/${created.sessionId}`;
    } catch (e) {
      error.textContent = e.message;
    }
  });
}

// --- session page: the live conversation -----------------------------------

// An operator's act on someone else's session: the admin's sentence (sessions.eventlog.events.describe_act), naming the role.
function describeAct(data) {
  const who = data.operator || "an operator";
  const did = {
    approve: `approved call ${data.callId}`,
    deny: `denied call ${data.callId}`,
    answer: `answered question ${data.callId}`,
    stop: data.turnId ? `stopped turn ${data.turnId}` : "stopped the session",
    cancel_reminder: `cancelled reminder ${data.reminderId}`,
  }[data.action] || data.action;
  return `${who} (operator) ${did}`;
}

// The model the session runs on, in the page's head; the handoff panel (handoff.js) listens for changes.
function showModel(root, model) {
  if (!model || root.dataset.model === model) return;
  root.dataset.model = model;
  const badge = document.getElementById("model");
  if (badge) badge.textContent = model;
  const runtime = document.getElementById("runtime");  // a handoff may move the session to another runtime
  if (runtime) runtime.textContent = model.startsWith("claude-agent:") ? "Claude Agent SDK" : "agentsite's loop";
  root.dispatchEvent(new CustomEvent("session:model", { detail: model }));
}

// The models a turn's calls ran on (a fall-over adds its fallback), from its timings.
function turnModels(timings) {
  const steps = (timings && timings.steps) || [];
  return [...new Set(steps.filter((step) => step.kind === "model" && step.name).map((step) => step.name))];
}

function setupReminderCancels() {
  // Owners and operators alike: DELETE the reminder, then drop it from the panel.
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-cancel]");
    if (!button) return;
    button.disabled = true;
    const response = await fetch(button.dataset.cancel, {
      method: "DELETE", credentials: "same-origin", headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
    });
    if (response.ok || response.status === 409) {  // 409: it had ended already
      const text = response.ok ? "reminder cancelled" : "reminder had already ended";
      button.closest(".reminder").replaceWith(el("p", { class: "muted reminder-cancelled", text }));
    } else {
      button.disabled = false;
      button.after(el("span", { class: "error", text: ` HTTP ${response.status}` }));
    }
  });
}

class SessionView {
  constructor(root) {
    this.root = root;
    this.slug = root.dataset.slug;
    this.sessionId = root.dataset.session;
    this.api = `/${this.slug}/v1/session/${this.sessionId}`;
    this.list = document.getElementById("conversation");
    this.approvals = document.getElementById("approvals");
    this.status = document.getElementById("status");
    this.connection = document.getElementById("connection");
    this.stopButton = document.getElementById("stop");
    this.nextIndex = 0;      // the first index not rendered yet: resume point after a drop
    this.rendered = [];      // every index rendered, in order: exactly 0..N-1 across drops and replays
    this.turns = new Map();  // turnId -> {bubble, reasoning}
    this.calls = new Map();  // callId -> tool card
    this.retryDelay = 500;
    this.closedForGood = false;
    this.ended = false;      // a task session's log is complete: the server will send nothing more
    this.stopButton.addEventListener("click", () => this.stop());
    const form = document.getElementById("follow-up");
    if (form) this.setupFollowUp(form);
    this.connect();
  }

  connect() {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const url = `${scheme}://${window.location.host}${this.api}/ws?startIndex=${this.nextIndex}`;
    const socket = new WebSocket(url);
    this.socket = socket;
    socket.onopen = () => { this.connection.textContent = "live"; this.retryDelay = 500; };
    socket.onmessage = (message) => {
      const event = JSON.parse(message.data);
      if (typeof event.index !== "number") return; // acks and errors of frames we sent
      if (event.index < this.nextIndex) return;     // already rendered (replay overlap)
      this.render(event);
      this.rendered.push(event.index);
      this.nextIndex = event.index + 1;
      this.root.dataset.nextIndex = String(this.nextIndex);
    };
    socket.onclose = (closed) => {
      const refusals = { 4401: "not signed in", 4403: "not allowed", 4404: "session not found", 4400: "bad request" };
      if (refusals[closed.code]) {
        this.closedForGood = true;
        this.connection.textContent = refusals[closed.code];
        return;
      }
      // The close code cannot tell an ended log from a drop: a close the page's
      // side started (or a proxy's) also ends in 1000. The log itself can: only
      // a finished task session has nothing more to stream. A deleted session
      // answers the reconnect with 4404.
      if (this.ended) {
        this.closedForGood = true;
        this.connection.textContent = "ended";
        return;
      }
      this.connection.textContent = "reconnecting…";
      setTimeout(() => this.connect(), this.retryDelay);
      this.retryDelay = Math.min(this.retryDelay * 2, 5000);
    };
  }

  setStatus(status) {
    this.status.textContent = status;
    this.status.className = `status status-${status}`;
    this.stopButton.disabled = status !== "running" && status !== "awaiting_approval";
  }

  turn(turnId) {
    if (!this.turns.has(turnId)) this.turns.set(turnId, { bubble: null, reasoning: null });
    return this.turns.get(turnId);
  }

  item(event, ...children) {
    const li = el("li", { "data-index": String(event.index), "data-type": event.type }, ...children);
    this.list.append(li);
    return li;
  }

  assistantBubble(event) {
    const state = this.turn(event.turnId);
    if (!state.bubble) {
      state.bubble = el("div", { class: "msg assistant" });
      this.item(event, state.bubble);
    }
    return state.bubble;
  }

  render(event) {
    const data = event.data || {};
    switch (event.type) {
      case "session.started":
        this.setStatus("idle");
        break;
      case "message.received": {
        const source = data.source && data.source !== "user" ? el("span", { class: "source", text: data.source }) : null;
        this.item(event, el("div", { class: "msg user" }, source, data.text || ""));
        break;
      }
      case "turn.queued":
        this.item(event, el("div", { class: "turn-meta",
          text: `queued: ${data.runningTurnsCap} of your turns are running; this one starts when one ends` }));
        break;
      case "turn.started":
        this.setStatus("running");
        break;
      case "step.started":
        this.turn(event.turnId).bubble = null; // each step's text gets its own bubble
        break;
      case "reasoning.appended": {
        const state = this.turn(event.turnId);
        if (!state.reasoning) {
          state.reasoning = el("pre", {});
          this.item(event, el("details", { class: "reasoning" }, el("summary", { text: "Reasoning" }), state.reasoning));
        }
        state.reasoning.textContent += data.delta;
        break;
      }
      case "reasoning.completed": {
        const state = this.turn(event.turnId);
        if (state.reasoning) state.reasoning.textContent = data.text;
        state.reasoning = null;
        break;
      }
      case "message.appended":
        this.assistantBubble(event).textContent += data.delta;
        break;
      case "message.completed":
        this.assistantBubble(event).textContent = data.text;
        break;
      case "actions.requested":
        for (const call of data.calls || []) {
          const head = el("div", { class: "head" }, el("code", { text: call.toolName }));
          if (call.family) head.append(el("span", { class: `badge family-${call.family}`, text: call.family }));
          head.append(el("span", { class: "dur" }));
          const card = el("div", { class: `tool-call${call.family ? " " + call.family : ""}`, "data-call": call.callId },
            head,
            el("pre", { class: "args", text: JSON.stringify(call.input, null, 2) }),
            el("pre", { class: "result", hidden: true }));
          this.calls.set(call.callId, card);
          this.item(event, card);
        }
        break;
      case "action.result": {
        const card = this.calls.get(data.callId);
        if (!card) break;
        const result = card.querySelector(".result");
        result.hidden = false;
        const failed = "error" in data && data.error != null;
        card.classList.add(failed ? "failed" : "done");
        result.textContent = failed ? `error: ${data.error}` : JSON.stringify(data.output, null, 2);
        card.querySelector(".dur").textContent = `${data.durationMs ?? 0} ms${data.stubbed ? " · stubbed" : ""}`;
        this.removeApproval(data.callId);
        break;
      }
      case "action.approval_requested":
        this.addApproval(data);
        this.setStatus("awaiting_approval");
        break;
      case "action.approval_resolved": {
        const who = data.decidedBy ? data.decidedBy.principalId : "someone";
        this.removeApproval(data.callId);
        if (!this.approvals.querySelector(".approval")) this.setStatus("running");
        const card = this.calls.get(data.callId);
        const decided = data.decision === "answer" ? "answered" : `${data.decision}d`;
        if (card) card.querySelector(".head").append(el("span", { class: "badge", text: `${decided} by ${who}` }));
        break;
      }
      case "artifact.saved":
        this.addArtifact(data);
        break;
      case "todos.updated":
        this.showTodos(data.items || []);
        break;
      case "session.handoff": {
        // Written by the handoff itself: the page that asked and any other page on the session see it alike.
        const failed = data.status === "failed";
        const text = failed
          ? `handoff to ${data.to} failed${data.error ? `: ${data.error}` : ""}; stayed on ${data.from}`
          : `handed off from ${data.from} to ${data.to}${data.status && data.status !== "completed" ? ` (${data.status})` : ""}`;
        this.item(event, el("div", { class: `handoff-event${failed ? " failed" : ""}`, "data-status": data.status || "",
          text }));
        if (data.status === "completed") showModel(this.root, data.to);
        break;
      }
      case "model.fallback":
        this.item(event, el("div", { class: "handoff-event fallback",
          text: `fell over from ${data.from} to ${data.to}${data.reason ? `: ${data.reason}` : ""}` }));
        break;
      case "operator.acted":
        this.item(event, el("div", { class: "operator-act", text: describeAct(data) }));
        break;
      case "subagent.called":
        this.item(event, el("div", { class: "tool-call subagent" },
          el("div", { class: "head" }, el("span", { text: "→ subagent " }), el("code", { text: data.subagent })),
          el("pre", { text: data.task })));
        break;
      case "subagent.completed":
        this.item(event, el("div", { class: `tool-call subagent ${data.error ? "failed" : "done"}` },
          el("div", { class: "head" }, el("span", { text: "← subagent " }), el("code", { text: data.subagent }),
            el("span", { class: "dur", text: `${data.durationMs} ms` })),
          el("pre", { text: data.error ? `error: ${data.error}` : data.reply })));
        break;
      case "turn.completed": {
        const usage = data.usage;  // null: the provider reported none
        const tokens = usage ? `in ${usage.inputTokens ?? 0} / out ${usage.outputTokens ?? 0} tokens` : "usage unknown";
        const models = turnModels(data.timings);
        const on = models.length ? `on ${models.join(" then ")} · ` : "";
        this.item(event, el("div", { class: "turn-meta", "data-models": models.join(" "),
          text: `${on}${tokens} · ${((data.durationMs || 0) / 1000).toFixed(2)} s` }), waterfall(data.timings, data.traceId));
        break;
      }
      case "turn.failed":
        this.item(event, el("div", { class: "turn-meta failed", text: `turn failed: ${data.error}` }),
          waterfall(data.timings, data.traceId));
        for (const node of this.approvals.querySelectorAll(".approval")) node.remove();
        break;
      case "session.waiting":
      case "session.completed":
      case "session.failed":
        this.setStatus(event.type.split(".")[1]);
        this.ended = this.root.dataset.mode === "task" && event.type !== "session.waiting";
        break;
      default:
        break;
    }
  }

  showTodos(items) {
    // The model's plan, whole each time: the newest todos.updated is the plan.
    const box = document.getElementById("todos");
    const list = document.getElementById("todo-list");
    if (!box || !list) return;
    const mark = { pending: "to do", in_progress: "doing", done: "done" };
    list.replaceChildren(...items.map((item) => el("li", { class: `todo todo-${item.status}`, "data-status": item.status },
      el("span", { class: "badge", text: mark[item.status] || item.status }), " ", el("span", { text: item.content }))));
    const done = items.filter((item) => item.status === "done").length;
    document.getElementById("todo-counts").textContent = `${done} of ${items.length} done`;
    box.hidden = items.length === 0;
  }

  addArtifact(data) {
    // Saved again under the same name: the one link now downloads the new content.
    const box = document.getElementById("artifacts");
    const list = document.getElementById("artifact-list");
    if (!box || !list) return;
    const url = `${this.api}/artifacts/${encodeURIComponent(data.name)}`;
    const kb = data.size < 1024 ? `${data.size} bytes` : `${(data.size / 1024).toFixed(1)} KB`;
    const li = el("li", { "data-artifact": data.name },
      el("a", { href: url, download: data.name, text: data.name }), " ",
      el("span", { class: "muted", text: `${data.contentType} · ${kb}` }));
    const old = [...list.children].find((node) => node.dataset.artifact === data.name);
    if (old) old.replaceWith(li); else list.append(li);
    box.hidden = false;
  }

  addApproval(data) {
    if (this.approvals.querySelector(`[data-call="${CSS.escape(data.callId)}"]`)) return;
    if (data.kind === "question") {  // question.js: answered, not decided
      this.approvals.append(questionBox(data, `${this.api}/questions/${encodeURIComponent(data.callId)}`));
      return;
    }
    const error = el("span", { class: "error" });
    const decide = async (decision) => {
      error.textContent = "";
      try {
        await postJSON(`${this.api}/approvals/${encodeURIComponent(data.callId)}`, { decision });
      } catch (e) {
        error.textContent = e.message;
      }
    };
    const box = el("div", { class: "approval", "data-call": data.callId },
      el("div", {}, el("strong", { text: "Approval needed: " }), el("code", { text: data.toolName })),
      el("pre", { text: JSON.stringify(data.input, null, 2) }),
      el("div", { class: "row" },
        el("button", { type: "button", class: "approve", text: "Approve", onclick: () => decide("approve") }),
        el("button", { type: "button", class: "deny", text: "Deny", onclick: () => decide("deny") }),
        error));
    this.approvals.append(box);
  }

  removeApproval(callId) {
    const box = this.approvals.querySelector(`[data-call="${CSS.escape(callId)}"]`);
    if (box) box.remove();
  }

  async stop() {
    this.stopButton.disabled = true;
    try { await postJSON(`${this.api}/stop`, {}); } catch (_) { /* nothing was running */ }
  }

  setupFollowUp(form) {
    sendOnCtrlEnter(form);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const error = form.querySelector(".form-error");
      error.textContent = "";
      const data = new FormData(form);
      try {
        await postJSON(`${this.api}/message`, { message: data.get("message"), admission: data.get("admission") });
        form.reset();
        if (this.closedForGood === false && this.socket.readyState > 1) this.connect();
      } catch (e) {
        error.textContent = e.message;
      }
    });
  }
}

function setupHints() {
  for (const hints of document.querySelectorAll(".hints")) {
    const target = document.getElementById(hints.dataset.target);
    hints.addEventListener("click", (event) => {
      const text = event.target.dataset && event.target.dataset.text;
      if (!target || !text) return;
      target.value = text;
      target.focus();
    });
  }
}

function setupChannelTries() {
  // A "Try" form per custom channel route: fill the :params, send the body or query, show the answer.
  for (const form of document.querySelectorAll("form.channel-try")) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const output = form.querySelector(".try-result");
      let url = form.dataset.url;
      for (const input of form.querySelectorAll("[data-param]")) {
        url = url.replace(`:${input.dataset.param}`, encodeURIComponent(input.value));
      }
      const init = { method: form.dataset.method, credentials: "same-origin",
                     headers: { Accept: "application/json", "X-CSRFToken": csrfToken() } };
      const text = form.elements.input ? form.elements.input.value.trim() : "";
      try {
        if (form.dataset.takes === "raw") {
          // A provider's webhook: the body goes as typed, with the headers that name the event.
          const now = String(Date.now());
          const headers = JSON.parse(form.elements.headers.value.trim() || "{}");
          for (const [k, v] of Object.entries(headers)) init.headers[k] = String(v).replaceAll("{now}", now);
          init.headers["Content-Type"] = "application/json";
          init.body = text;
        }
        const value = form.dataset.takes === "raw" ? {} : text ? JSON.parse(text) : {};
        if (form.dataset.takes === "query") {
          const query = new URLSearchParams();
          for (const [k, v] of Object.entries(value)) query.append(k, typeof v === "string" ? v : JSON.stringify(v));
          if ([...query].length) url += `?${query}`;
        } else if (form.dataset.takes === "body") {
          init.headers["Content-Type"] = "application/json";
          init.body = JSON.stringify(value);
        }
      } catch (e) {
        output.textContent = `not JSON: ${e.message}`;
        return;
      }
      output.textContent = "…";
      const response = await fetch(url, init);
      const answer = await response.text();
      let shown = answer;
      try { shown = JSON.stringify(JSON.parse(answer), null, 2); } catch (_) { /* not JSON */ }
      output.textContent = `HTTP ${response.status}\n${shown}`;
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  setupHints();
  setupChannelTries();
  setupReminderCancels();
  const newSession = document.getElementById("new-session");
  if (newSession) setupNewSession(newSession);
  const session = document.getElementById("session");
  if (session) window.sessionView = new SessionView(session);
});
