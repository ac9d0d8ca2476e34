// agentsite playground: a list of records (skills, subagents, schedules, webhooks) edited a record at a time.
// The list's JSON textarea stays the one source of what is saved: every change to a record writes the whole
// list back into it, and a change made in the JSON draws the records again (when it is a list of objects).
// Keys a record has but the form does not show are kept. Builds on el() from playground.js.
"use strict";

class Rows {
  constructor(box) {
    this.box = box;
    this.text = box.querySelector("textarea.json");
    this.list = box.querySelector(".records");
    this.noun = box.dataset.noun;
    // "name,body:long,files:json": a field is a line of text, a longer text, or JSON of its own.
    this.fields = box.dataset.fields.split(",").map((spec) => {
      const [name, kind] = spec.split(":");
      return { name, kind: kind || "text" };
    });
    this.items = [];
    // While the JSON holds what does not parse, the records are not written over it (it would be lost):
    // they stay as they were, read-only, until the JSON parses again.
    this.note = el("p", { class: "hint",
      text: "The JSON below does not parse: fix it there (or clear it) to edit these again." });
    this.note.hidden = true;
    this.list.before(this.note);
    box.querySelector("button.add").addEventListener("click", () => {
      if (this.broken) return;
      this.items.push({});
      this.write();
      this.draw();
      const first = this.list.lastElementChild && this.list.lastElementChild.querySelector("input, textarea");
      if (first) first.focus();
    });
    this.text.addEventListener("input", () => this.read());
  }

  read() {
    const text = this.text.value.trim();
    let items = [];
    let parsed = true;
    if (text) {
      try { items = JSON.parse(text); } catch (e) { parsed = false; }  // left as typed: saving names it
    }
    const records = parsed && Array.isArray(items)
      && items.every((item) => item && typeof item === "object" && !Array.isArray(item));
    this.broken = !records;
    this.note.hidden = records;
    for (const control of this.box.querySelectorAll(".records input, .records textarea, .records button, button.add")) {
      control.disabled = !records;
    }
    if (!records) return;
    this.items = items;
    this.draw();
  }

  write() {
    this.text.value = this.items.length ? JSON.stringify(this.items, null, 2) : "";
  }

  draw() {
    this.list.replaceChildren(...this.items.map((item, index) => this.record(item, index)));
  }

  record(item, index) {
    const labels = this.fields.map(({ name, kind }) => {
      const input = kind === "text" ? el("input", { type: "text" }) : el("textarea", { rows: kind === "json" ? 2 : 3 });
      input.setAttribute("data-field", name);
      const value = item[name];
      input.value = value == null ? "" : kind === "json" ? JSON.stringify(value) : String(value);
      input.addEventListener("input", () => this.set(index, name, kind, input.value));
      return el("label", { class: kind === "text" ? "short" : "long" }, name + (kind === "json" ? " (JSON)" : ""), input);
    });
    const remove = el("button", { type: "button", class: "secondary remove", text: `Remove ${this.noun}` });
    remove.addEventListener("click", () => {
      if (this.broken) return;
      this.items.splice(index, 1);
      this.write();
      this.draw();
    });
    const record = el("div", { class: "record" }, ...labels, remove);
    record.setAttribute("data-index", String(index));
    return record;
  }

  set(index, name, kind, value) {
    if (this.broken) return;
    const item = this.items[index];
    if (value.trim() === "") delete item[name];
    else if (kind !== "json") item[name] = value;
    else {
      // JSON that does not parse is kept as typed, so the save's refusal names this field.
      try { item[name] = JSON.parse(value); } catch (e) { item[name] = value; }
    }
    this.write();
  }
}
