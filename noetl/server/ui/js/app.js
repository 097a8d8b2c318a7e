// The console's shell: hash routes to views, the navigation, the workers indicator and
// the banner shown while the server does not answer.
import { api, askToken } from "./api.js";
import { h, fill } from "./dom.js";
import { poll } from "./poll.js";
import { renderExecutions } from "./views/executions.js";
import { renderExecution } from "./views/execution.js";
import { renderExecutionPlaybook } from "./views/execution_playbook.js";
import { renderDlqList, renderDlqEntry } from "./views/dlq.js";
import { renderPlaybooks, renderPlaybook, renderPlaybookEditor } from "./views/playbooks.js";
import { renderSchedules } from "./views/schedules.js";

const main = document.getElementById("view");
const banner = document.getElementById("banner");
let current = null; // AbortController of the view on screen

/** Parse "#/a/b?x=1" into {parts: ["a", "b"], query: {x: "1"}}. */
export function parseHash(hash) {
  const raw = (hash || "").replace(/^#\/?/, "");
  const [path, qs = ""] = raw.split("?", 2);
  const parts = path ? path.split("/").map((p) => decodeURIComponent(p)) : [];
  return { parts, query: Object.fromEntries(new URLSearchParams(qs)) };
}

function route({ parts, query }) {
  const [section = "executions", id, ...rest] = parts;
  if (section === "executions" && id && rest[0] === "playbook") return ["executions", (ctx) => renderExecutionPlaybook(ctx, id)];
  if (section === "executions" && id) return ["executions", (ctx) => renderExecution(ctx, id, query)];
  if (section === "executions") return ["executions", (ctx) => renderExecutions(ctx, query)];
  if (section === "dlq" && id) return ["dlq", (ctx) => renderDlqEntry(ctx, [id, ...rest].join("/"))];
  if (section === "dlq") return ["dlq", (ctx) => renderDlqList(ctx, query)];
  if (section === "playbooks" && id === "new") return ["playbooks", (ctx) => renderPlaybookEditor(ctx, query)];
  if (section === "playbooks" && id === "view") return ["playbooks", (ctx) => renderPlaybook(ctx, query)];
  if (section === "playbooks") return ["playbooks", (ctx) => renderPlaybooks(ctx, query)];
  if (section === "schedules") return ["schedules", (ctx) => renderSchedules(ctx)];
  return [null, (ctx) => fill(ctx.root, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/executions" }, "Executions")))];
}

export function showBanner(message) {
  banner.textContent = message;
  banner.hidden = !message;
}

function navigate(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function render() {
  if (current) current.abort();
  current = new AbortController();
  const [section, view] = route(parseHash(location.hash));
  for (const link of document.querySelectorAll(".topbar nav a")) {
    link.classList.toggle("active", link.dataset.section === section);
  }
  const ctx = {
    root: main,
    signal: current.signal,
    navigate,
    // A failure shows the banner, the next success of a poll hides it. A request cut
    // short by leaving the view is no failure.
    onError: (err) => {
      if (err && err.name === "AbortError") return;
      showBanner(err.status === 0 ? "The server does not answer; retrying…" : `Error: ${err.message}`);
    },
    onOk: () => showBanner(""),
  };
  showBanner("");
  fill(main, h("p", { class: "muted" }, "Loading…"));
  Promise.resolve(view(ctx)).catch((err) => {
    if (err && err.name === "AbortError") return;
    fill(main, h("h1", {}, "Error"), h("p", { class: "notice error", role: "alert" }, err.message || String(err)));
  });
}

function watchStatus() {
  const el = document.getElementById("workers");
  const dlqLink = document.querySelector('.topbar nav a[data-section="dlq"]');
  const pending = h("span", { class: "pending-count", id: "dlq-pending" });
  dlqLink.appendChild(pending);
  poll(
    async () => {
      // Pending dead letters wait for a decision: their count sits on the navigation.
      try {
        const dlq = await api("/api/dlq", { query: { status: "pending", limit: 1 } });
        const count = (dlq.counts && dlq.counts.pending) || 0;
        pending.textContent = count ? String(count) : "";
        pending.hidden = !count;
      } catch (err) {
        if (err.status !== 404) throw err;
        pending.hidden = true; // a server without the dead-letter API
      }
      const data = await api("/api/workers");
      const alive = data.alive;
      el.textContent = alive ? `${alive} worker${alive === 1 ? "" : "s"} alive` : "no worker alive";
      el.classList.toggle("none", !alive);
      el.title = data.items.map((w) => `${w.worker_id} (${w.pool}, ${w.status})`).join("\n") || "Start one with: noetl worker start";
      document.body.dataset.workers = String(alive);
    },
    5000,
    {
      onError: () => {
        el.textContent = "workers: ?";
      },
    },
  );
}

document.getElementById("token-button").addEventListener("click", () => askToken());
window.addEventListener("hashchange", render);
if (!location.hash) history.replaceState(null, "", "#/executions");
render();
watchStatus();
