// Under serve --dev or --reload: say when the agent's folder became a new release, or stopped
// validating, by asking the agent's release route every second (any web process answers it).
"use strict";

(() => {
  const box = document.getElementById("release-watch");
  if (!box) return;
  const slug = box.dataset.slug;
  const shown = Number(box.dataset.version);
  const fresh = box.querySelector(".release-new");
  const broken = box.querySelector(".folder-error");

  function show(state) {
    fresh.hidden = state.version === null || state.version === shown;
    fresh.querySelector(".release-version").textContent = state.version;
    broken.hidden = !state.folderError;
    if (!state.folderError) return;
    broken.querySelector(".serving-version").textContent = state.version;
    const list = broken.querySelector(".folder-problems");
    list.replaceChildren(...state.folderError.problems.map((problem) => {
      const item = document.createElement("li");
      const path = document.createElement("code");
      path.textContent = problem.path;
      item.append(path, `: ${problem.message}`);
      return item;
    }));
  }

  async function look() {
    try {
      const response = await fetch(`/${slug}/v1/release`, { headers: { Accept: "application/json" } });
      if (response.ok) show(await response.json());
    } catch (error) {
      // The server is restarting, or the network dropped: ask again at the next tick.
    }
    setTimeout(look, 1000);
  }
  setTimeout(look, 1000);
})();
