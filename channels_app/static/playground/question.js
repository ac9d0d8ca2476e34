// agentsite playground: a question the agent asked (the ask_question built-in), answered here with one
// click on an option or in the person's own words (POST …/questions/<callId>). Builds on el() and
// postJSON() from playground.js; the question's text goes in through textContent.
"use strict";

function questionBox(data, url) {
  const error = el("span", { class: "error" });
  const send = async (answer) => {
    error.textContent = "";
    try {
      await postJSON(url, { answer });
    } catch (e) {
      error.textContent = e.message;
    }
  };
  const own = el("input", { type: "text", name: "answer", placeholder: "Your answer", maxLength: 4000 });
  const form = el("form", { class: "row answer" }, own, el("button", { type: "submit", text: "Answer" }), error);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (own.value.trim()) send(own.value);
  });
  const options = (data.options || []).map((option) =>
    el("button", { type: "button", class: "option", text: option, onclick: () => send(option) }));
  return el("div", { class: "approval question", "data-call": data.callId },
    el("div", {}, el("strong", { text: "The agent asks: " }), el("span", { class: "question-text", text: data.question })),
    options.length ? el("div", { class: "row options" }, ...options) : null,
    form);
}
