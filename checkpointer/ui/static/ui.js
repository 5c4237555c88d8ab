// checkpointer ui: loads parts of the page on click. Every piece of HTML it inserts comes
// from the server, rendered with every value escaped; text it sets itself goes through
// textContent.
"use strict";

(function () {
  const tree = document.getElementById("tree");
  const panel = document.getElementById("panel");
  if (!tree || !panel) return;
  const thread = tree.dataset.thread;
  const ns = tree.dataset.ns;
  let selected = tree.dataset.selected || null;

  function params(extra) {
    const p = new URLSearchParams({ thread: thread, ns: ns });
    for (const [k, v] of Object.entries(extra)) p.set(k, v);
    return p.toString();
  }

  async function fetchText(url) {
    const res = await fetch(url, { credentials: "same-origin" });
    const text = await res.text();
    if (!res.ok && !text) throw new Error(res.status + " " + res.statusText);
    return text;
  }

  function markSelected() {
    for (const el of tree.querySelectorAll(".node.selected")) el.classList.remove("selected");
    if (!selected) return;
    for (const el of tree.querySelectorAll(".node")) {
      if (el.dataset.id === selected) el.classList.add("selected");
    }
  }

  async function select(id) {
    selected = id;
    markSelected();
    panel.classList.add("loading");
    try {
      panel.innerHTML = await fetchText("/frag/checkpoint?" + params({ c: id }));
    } catch (err) {
      panel.textContent = "could not load the checkpoint: " + err;
    }
    panel.classList.remove("loading");
    applyInternal();
    const url = new URL(window.location.href);
    url.searchParams.set("c", id);
    history.replaceState(null, "", url.toString());
  }

  async function compare(a) {
    if (!selected || a === selected) return;
    const box = document.getElementById("diff");
    if (!box) return;
    box.outerHTML = await fetchText("/frag/diff?" + params({ a: a, b: selected }));
    applyInternal();
  }

  async function more(button) {
    const li = button.closest("li");
    const html = await fetchText(
      "/frag/run?" +
        params({
          first: button.dataset.first,
          start: button.dataset.start,
          count: button.dataset.count,
        })
    );
    li.insertAdjacentHTML("beforebegin", html);
    li.remove();
    markSelected();
  }

  function applyInternal() {
    const box = document.getElementById("show-internal");
    panel.classList.toggle("show-internal", !!(box && box.checked));
  }

  // ---------------------------------------------------------------- actions
  const dialog = document.getElementById("confirm");
  const text = document.getElementById("confirm-text");
  const targetLabel = document.getElementById("confirm-target-label");
  const target = document.getElementById("confirm-target");
  const error = document.getElementById("confirm-error");
  const ok = document.getElementById("confirm-ok");
  let pending = null;

  const ACTIONS = {
    fork: {
      ask: (id) => "Fork thread “" + thread + "” at checkpoint …" + id.slice(-8) +
        "? A copy of it becomes the thread's new head; the next run continues from there. " +
        "The existing branch stays as it is.",
      url: "/api/fork",
    },
    "copy-branch": {
      ask: (id) => "Copy the branch ending at …" + id.slice(-8) +
        " (it and every ancestor) into a new thread?",
      url: "/api/copy-branch",
      target: true,
    },
    "copy-thread": {
      ask: () => "Copy thread “" + thread + "” (every branch and namespace) to a new thread?",
      url: "/api/copy-thread",
      target: true,
      thread: true,
    },
    export: {
      ask: () => "Export thread “" + thread + "” as a JSONL file (checkpointer import reads it)?",
      download: true,
      thread: true,
    },
  };

  function openAction(name) {
    const action = ACTIONS[name];
    if (!action) return;
    if (!action.thread && !selected) return;
    text.textContent = action.ask(selected || "");
    targetLabel.hidden = !action.target;
    target.value = action.target ? thread + "-copy" : "";
    error.hidden = true;
    pending = action;
    dialog.showModal();
  }

  ok.addEventListener("click", async () => {
    const action = pending;
    if (!action) return;
    if (action.download) {
      dialog.close();
      window.location.href = "/export?" + new URLSearchParams({ thread: thread }).toString();
      return;
    }
    const body = { confirm: true, thread: thread, ns: ns, checkpoint: selected || "" };
    if (action.target) body.target = target.value;
    ok.disabled = true;
    try {
      const res = await fetch(action.url, {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const data = await res.json();
      if (!res.ok) throw new Error(data.error || res.status);
      dialog.close();
      const next = new URLSearchParams({ thread: data.thread, ns: data.ns || "" });
      if (data.checkpoint) next.set("c", data.checkpoint);
      window.location.href = "/?" + next.toString();
    } catch (err) {
      error.textContent = String(err.message || err);
      error.hidden = false;
    } finally {
      ok.disabled = false;
    }
  });

  // ---------------------------------------------------------------- wiring
  document.addEventListener("click", (event) => {
    const el = event.target.closest("button, .node, a.goto");
    if (!el) return;
    if (el.matches("button.cmp")) {
      event.stopPropagation();
      compare(el.dataset.id);
    } else if (el.matches("button.more")) {
      more(el);
    } else if (el.matches("button[data-action]")) {
      if (!el.disabled) openAction(el.dataset.action);
    } else if (el.matches("a.goto")) {
      event.preventDefault();
      select(el.dataset.id);
    } else if (el.matches(".node")) {
      select(el.dataset.id);
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target.matches && event.target.matches(".node")) {
      select(event.target.dataset.id);
    }
  });
  document.addEventListener("change", (event) => {
    if (event.target.id === "show-internal") applyInternal();
  });

  markSelected();
  if (selected) select(selected);
})();
