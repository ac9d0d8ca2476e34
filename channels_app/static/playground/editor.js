// agentsite playground: the console's agent editor. Fills the form from the agent's definition,
// saves it as data (POST /v1/agents for a new agent, PUT /v1/agents/<slug> for a new release of one),
// shows each refusal by the field it names, previews the instructions, and makes a release active.
// Builds on el() and requestJSON() from playground.js and Rows from rows.js; every text from the server
// goes in as text.
"use strict";

const LINES = ["models", "fallback", "peers"];
const JSON_FIELDS = ["params", "budget", "toolsFrom", "mcpServers", "skills", "subagents", "schedules", "experiments", "slack", "webhooks"];
const NUMBERS = ["maxSteps", "retentionDays"];

function lines(text) {
  return text.split("\n").map((line) => line.trim()).filter(Boolean);
}

class Editor {
  constructor(form) {
    this.form = form;
    this.slug = form.dataset.slug;
    this.problems = document.getElementById("problems");
    this.saved = document.getElementById("saved");
    this.rows = [...form.querySelectorAll("fieldset.rows")].map((box) => new Rows(box));
    const definition = JSON.parse(document.getElementById("definition").textContent);
    if (definition) this.fill(definition);
    else this.form.elements.allWorkspaceTools.checked = true;
    this.syncWorkspace();
    this.form.elements.allWorkspaceTools.addEventListener("change", () => this.syncWorkspace());
    form.addEventListener("submit", (event) => { event.preventDefault(); this.save(); });
    document.getElementById("preview-button").addEventListener("click", () => this.preview());
    for (const button of document.querySelectorAll("button.activate")) {
      button.addEventListener("click", () => this.activate(button.dataset.version));
    }
  }

  field(name) { return this.form.elements[name]; }

  fill(d) {
    for (const name of ["name", "description", "instructions"]) this.field(name).value = d[name] || "";
    for (const name of LINES) this.field(name).value = (d[name] || []).join("\n");
    for (const name of NUMBERS) this.field(name).value = d[name] ?? "";
    for (const name of JSON_FIELDS) {
      const value = d[name];
      // Slack's {} is a channel with every default, not nothing.
      const empty = value == null || (name !== "slack" && (Array.isArray(value) ? !value.length : !Object.keys(value).length));
      this.field(name).value = empty ? "" : JSON.stringify(value, null, 2);
    }
    for (const rows of this.rows) rows.read();
    for (const box of this.form.querySelectorAll('input[name="builtins"]')) box.checked = (d.builtins || []).includes(box.value);
    this.field("remindersTool").checked = !!d.remindersTool;
    this.field("sandboxNetwork").checked = !!d.sandboxNetwork;
    this.field("allWorkspaceTools").checked = d.workspaceTools == null;
    for (const box of this.form.querySelectorAll('input[name="workspaceTools"]')) {
      box.checked = d.workspaceTools == null || d.workspaceTools.includes(box.value);
    }
  }

  syncWorkspace() {
    const all = this.field("allWorkspaceTools").checked;
    for (const box of this.form.querySelectorAll('input[name="workspaceTools"]')) box.disabled = all;
  }

  // The form as the agent's data; a field whose JSON does not parse is a problem of that field.
  collect() {
    const data = {};
    const problems = [];
    if (!this.slug) data.slug = this.field("slug").value.trim();
    for (const name of ["name", "description"]) data[name] = this.field(name).value.trim();
    data.instructions = this.field("instructions").value;
    for (const name of LINES) data[name] = lines(this.field(name).value);
    for (const name of NUMBERS) if (this.field(name).value !== "") data[name] = Number(this.field(name).value);
    for (const name of JSON_FIELDS) {
      const text = this.field(name).value.trim();
      if (!text) continue;
      try { data[name] = JSON.parse(text); } catch (e) { problems.push({ field: name, message: `not JSON: ${e.message}` }); }
    }
    data.builtins = [...this.form.querySelectorAll('input[name="builtins"]:checked')].map((box) => box.value);
    data.remindersTool = this.field("remindersTool").checked;
    data.sandboxNetwork = this.field("sandboxNetwork").checked;
    if (!this.field("allWorkspaceTools").checked) {
      data.workspaceTools = [...this.form.querySelectorAll('input[name="workspaceTools"]:checked')].map((box) => box.value);
    }
    return { data, problems };
  }

  show(problems) {
    for (const p of problems) {  // a field folded away in the JSON section is opened to be seen
      const target = this.form.elements[(p.field || "").split(/[.[]/)[0]];
      const folded = target && target.closest ? target.closest("details") : null;
      if (folded) folded.open = true;
    }
    this.problems.replaceChildren(...problems.map((p) =>
      el("li", { "data-field": p.field || "" }, el("code", { text: p.field || "agent" }), ` ${p.message}`)));
  }

  async save() {
    const { data, problems } = this.collect();
    this.saved.textContent = "";
    this.show(problems);
    if (problems.length) return;
    const replace = this.form.dataset.kind !== "console" ? "?replace=true" : "";
    try {
      // Saved on the release this page was opened on: one made meanwhile (another operator's) is a 409.
      const base = `${replace ? "&" : "?"}baseVersion=${this.form.dataset.version}`;
      const body = this.slug
        ? await requestJSON(`/v1/agents/${encodeURIComponent(this.slug)}${replace}${base}`, "PUT", data)
        : await requestJSON("/v1/agents", "POST", data);
      // A new release (or the one already saved with this content) is active: the page shows its history.
      window.location.assign(`/playground/${encodeURIComponent(body.slug)}/edit?saved=${body.release.version}`);
    } catch (e) {
      this.show(e.error && Array.isArray(e.error.details) ? e.error.details : [{ field: "", message: e.message }]);
    }
  }

  async preview() {
    const box = document.getElementById("preview");
    try {
      const body = await requestJSON("/playground/agents/preview", "POST", { markdown: this.field("instructions").value });
      const shown = new DOMParser().parseFromString(body.html, "text/html").body;  // rendered with raw HTML escaped
      box.replaceChildren(...shown.childNodes);
      box.hidden = false;
    } catch (e) {
      box.textContent = e.message;
      box.hidden = false;
    }
  }

  async activate(version) {
    try {
      await requestJSON(`/v1/agents/${encodeURIComponent(this.slug)}/deployments/${version}/activate`, "POST");
      window.location.reload();
    } catch (e) {
      this.show([{ field: "", message: e.message }]);
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("editor");
  if (form) window.editor = new Editor(form);
  const saved = new URLSearchParams(window.location.search).get("saved");
  if (saved && document.getElementById("saved")) document.getElementById("saved").textContent = `Saved: v${saved} is active.`;
});
