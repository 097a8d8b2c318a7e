// The playbook an execution runs: the text it was started with (an execution keeps it,
// registered or not: `noetl run` never registers the file it runs), its diagnostics, and
// the catalog version with the same text when there is one.
import { api } from "../api.js";
import { h, fill, href } from "../dom.js";
import { codeWithDiagnostics } from "./playbooks.js";

function catalogNote(p) {
  if (p.catalog_version) {
    const latest = p.catalog_version === p.catalog_latest ? " (the latest)" : `; the latest is v${p.catalog_latest}`;
    return h(
      "p",
      { class: "notice ok", id: "catalog-note" },
      "Registered in the catalog as ",
      h("a", { href: href(["playbooks", "view"], { path: p.playbook_path, version: p.catalog_version }), id: "catalog-link" }, `${p.playbook_path} v${p.catalog_version}`),
      `${latest}.`,
    );
  }
  if (p.catalog_latest) {
    return h(
      "p",
      { class: "notice warn", id: "catalog-note" },
      "The catalog's ",
      h("a", { href: href(["playbooks", "view"], { path: p.playbook_path }), id: "catalog-link" }, p.playbook_path),
      ` (latest v${p.catalog_latest}) has other text than this execution runs.`,
    );
  }
  const why = p.playbook_path
    ? `${p.playbook_path} is not registered in the catalog: the execution was started from a file (noetl run) or inline.`
    : "An inline playbook: the execution was started with its text, not from the catalog.";
  return h("p", { class: "notice", id: "catalog-note" }, why);
}

export async function renderExecutionPlaybook(ctx, executionId) {
  let p;
  try {
    p = await api(`/api/executions/${encodeURIComponent(executionId)}/playbook`, { signal: ctx.signal });
  } catch (err) {
    if (err.status !== 404) throw err;
    fill(ctx.root, h("h1", {}, "Execution not found"), h("p", { class: "notice error", role: "alert" }, err.message));
    return;
  }
  let diagnostics = [];
  try {
    const check = await api("/api/playbooks/validate", { method: "POST", body: { content: p.content, path: p.playbook_path }, signal: ctx.signal });
    diagnostics = check.diagnostics;
  } catch (err) {
    if (err.name === "AbortError") throw err;
    // The text still shows without its diagnostics.
  }
  if (ctx.signal.aborted) return;
  fill(
    ctx.root,
    h("h1", {}, "Playbook ", h("span", { class: "mono", id: "execution-playbook-name" }, p.playbook_name)),
    h(
      "p",
      { class: "muted" },
      "The text execution ",
      h("a", { href: href(["executions", executionId]), id: "back-to-execution", class: "mono" }, executionId),
      " runs (its graph and state are on the execution's page).",
    ),
    catalogNote(p),
    h("section", { class: "panel" }, h("h2", {}, "Text"), codeWithDiagnostics(p.content, diagnostics)),
  );
}
