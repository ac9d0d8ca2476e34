// agentsite playground: "Switch model…" on a session page. The person picks another of the
// agent's models, reads the review of the switch (GET …/handoff?to=), then hands off
// (POST …/handoff with the review's id). Builds on el(), requestJSON() and showModel()
// from playground.js; every text from the server goes in through textContent.
"use strict";

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

// A review's `lost` / `transformed` rows: [{kind, count, detail}].
function changeList(rows, none) {
  const list = el("ul", {});
  for (const row of rows || []) {
    const count = row.count != null ? `${row.count} × ` : "";
    list.append(el("li", { "data-kind": row.kind || "" },
      el("strong", { text: `${count}${row.kind || "?"}` }), row.detail ? ` — ${row.detail}` : null));
  }
  if (!list.children.length) list.append(el("li", { class: "muted none", text: none }));
  return list;
}

// The workspace part of `carriesOver`, whatever it names: "workspace: kind local · files 3".
function describeWorkspace(workspace) {
  const parts = Object.entries(workspace || {}).map(([key, value]) =>
    `${key} ${value !== null && typeof value === "object" ? JSON.stringify(value) : value}`);
  return parts.length ? `workspace: ${parts.join(" · ")}` : "";
}

class HandoffPanel {
  constructor(root, models) {
    this.root = root;
    this.models = models;
    this.session = `/${root.dataset.slug}/v1/session/${root.dataset.session}`;
    this.panel = document.getElementById("handoff");
    this.opener = document.getElementById("switch-open");
    this.select = document.getElementById("handoff-to");
    this.body = document.getElementById("handoff-body");
    this.result = document.getElementById("handoff-result");
    this.opener.addEventListener("click", () => this.toggle(this.panel.hidden));
    document.getElementById("handoff-close").addEventListener("click", () => this.toggle(false));
    document.getElementById("handoff-review").addEventListener("click", () => this.review(this.select.value));
    root.addEventListener("session:model", () => this.fillTargets());
    this.fillTargets();
  }

  get current() {
    return this.root.dataset.model;
  }

  fillTargets() {
    const kept = this.select.value;
    const targets = this.models.filter((model) => model !== this.current);
    this.select.replaceChildren(...targets.map((model) => el("option", { value: model, text: model })));
    if (targets.includes(kept)) this.select.value = kept;
  }

  toggle(open) {
    this.panel.hidden = !open;
    this.opener.setAttribute("aria-expanded", String(open));
    if (!open) { this.body.replaceChildren(); this.say(""); }
  }

  say(text, kind = "", ...extra) {
    this.result.className = kind;
    this.result.replaceChildren(text, ...extra);
  }

  async review(to) {
    if (!to) return;
    this.select.value = to;
    this.say("");
    this.body.replaceChildren(el("p", { class: "muted", text: `Reviewing a switch to ${to}…` }));
    try {
      const review = await requestJSON(`${this.session}/handoff?to=${encodeURIComponent(to)}`);
      this.showReview(review);
    } catch (e) {
      this.body.replaceChildren(el("p", { class: "error", "data-code": e.code || "", text: `Cannot review the switch to ${to}: ${e.message}` }));
    }
  }

  showReview(review) {
    const box = el("div", { class: "review", "data-review": review.reviewId || "", "data-to": review.to || "" },
      el("h3", {}, "From ", el("code", { text: review.from }), " to ", el("code", { text: review.to })));
    const refusal = review.refusal || (review.configured === false
      ? { code: "not_configured", message: `${review.to} is not configured on this server.`, alternatives: [] } : null);
    if (refusal) box.append(this.refusalBox(refusal));
    const carried = review.carriesOver || {};
    const kept = el("ul", {},
      el("li", { class: "messages", text: `${plural(carried.messages ?? 0, "message", "messages")} `
        + `(${carried.userMessages ?? 0} from the user, ${carried.assistantMessages ?? 0} from the assistant)` }),
      el("li", { class: "tools", text: `${plural(carried.toolCalls ?? 0, "tool call", "tool calls")} and `
        + `${plural(carried.toolResults ?? 0, "tool result", "tool results")}` }));
    const workspace = describeWorkspace(carried.workspace);
    if (workspace) kept.append(el("li", { class: "workspace", text: workspace }));
    box.append(
      el("div", { class: "carries-over" }, el("h4", { text: "Carries over" }), kept),
      el("div", { class: "lost" }, el("h4", { text: "Lost" }), changeList(review.lost, "nothing")),
      el("div", { class: "transformed" }, el("h4", { text: "Transformed" }), changeList(review.transformed, "nothing")));
    if (review.atIndex != null) {
      box.append(el("p", { class: "muted", text: `Reviewed as of event ${review.atIndex}: if the session moves on first, `
        + "the handoff asks for a new review." }));
    }
    const go = el("button", { type: "button", class: "handoff-go", text: "Hand off", disabled: Boolean(refusal) });
    go.addEventListener("click", () => this.handOff(review, go));
    box.append(el("div", { class: "row" }, go));
    this.body.replaceChildren(box);
  }

  refusalBox(refusal) {
    const box = el("div", { class: "refusal", role: "alert", "data-code": refusal.code || "" },
      el("strong", { text: "Refused: " }), el("code", { text: refusal.code || "" }), " ", refusal.message || "");
    const alternatives = (refusal.alternatives || []).map((a) => (typeof a === "string" ? a : a.model || a.id || ""))
      .filter(Boolean);
    if (alternatives.length) {
      const line = el("p", { class: "alternatives" }, "Configured instead: ");
      for (const model of alternatives) {
        if (this.models.includes(model) && model !== this.current) {
          line.append(el("button", { type: "button", class: "alternative", "data-model": model, text: `Review ${model}`,
            onclick: () => this.review(model) }), " ");
        } else {
          line.append(el("code", { text: model }), " ");
        }
      }
      box.append(line);
    }
    return box;
  }

  async handOff(review, button) {
    button.disabled = true;
    const from = this.current;
    this.say(`Handing off to ${review.to}…`, "muted");
    try {
      const done = await requestJSON(`${this.session}/handoff`, "POST", { to: review.to, reviewId: review.reviewId });
      const model = (done.session && done.session.model) || done.handoff.to;
      showModel(this.root, model);
      this.body.replaceChildren();
      this.say(`Handed off from ${done.handoff.from} to ${done.handoff.to}: the next turn runs on ${model}.`, "ok");
    } catch (e) {
      const stayed = await this.boundModel(from);
      const failure = el("span", { class: "error", "data-code": e.code || "" },
        `Handoff failed (${e.code || `HTTP ${e.status}`}): ${e.message} `);
      const where = el("span", { class: "stayed" }, "The session stayed on ", el("code", { text: stayed }), ".");
      if (e.code === "review_stale") {
        // The session moved on since the review: what carries over may differ now.
        const again = el("button", { type: "button", class: "review-again", text: "Review again",
          onclick: () => this.review(review.to) });
        this.say(failure, "", where, " ", again);
      } else {
        // Busy or failed on the way: the same review may be tried again; any other refusal stands.
        button.disabled = !(e.code === "session_busy" || e.status >= 500);
        this.say(failure, "", where);
      }
    }
  }

  // What the server says the session is bound to (the page's belief if it cannot be read).
  async boundModel(fallback) {
    try {
      const detail = await requestJSON(this.session);
      if (detail && detail.model) {
        showModel(this.root, detail.model);
        return detail.model;
      }
    } catch (_) { /* keep the page's */ }
    return fallback;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("session");
  const models = document.getElementById("session-models");
  if (root && models && document.getElementById("handoff")) {
    window.handoffPanel = new HandoffPanel(root, JSON.parse(models.textContent));
  }
});
