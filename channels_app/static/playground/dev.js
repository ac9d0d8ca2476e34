// Dev mode only (serve --dev): buttons that fire schedules and reminders by hand
// through the dev routes, which take the same path as a real firing.
"use strict";

async function devPost(url) {
  const token = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const response = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json", "X-CSRFToken": token }, body: "{}" });
  const payload = await response.json().catch(() => null);
  if (!response.ok) throw new Error(payload && payload.error ? payload.error.message : `HTTP ${response.status}`);
  return payload;
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-fire]");
  if (!button) return;
  const output = button.parentElement.querySelector(".fire-result") || button;
  button.disabled = true;
  try {
    const result = await devPost(button.dataset.fire);
    if (result.sessionIds) {
      output.textContent = "";
      for (const id of result.sessionIds) {
        const link = document.createElement("a");
        link.href = `/playground/${button.dataset.slug}/session/${id}`;
        link.textContent = id;
        output.append(link, " ");
      }
      if (!result.sessionIds.length) output.textContent = "fired (no session started)";
    } else {
      output.textContent = `fired (${result.fireCount}×, ${result.status})`;
    }
  } catch (e) {
    output.textContent = e.message;
  } finally {
    button.disabled = false;
  }
});
