// Playbooks: the catalog, one playbook's text with its diagnostics marked on their lines,
// a form to start an execution with a workload (a field per key of its defaults, or JSON),
// and an editor to register a new version.
import { api } from "../api.js";
import { h, fill, href } from "../dom.js";
import { fmtTime, jsonText } from "../format.js";

export async function renderPlaybooks(ctx) {
  const data = await api("/api/playbooks", { signal: ctx.signal });
  const rows = data.items.map((p) =>
    h(
      "tr",
      { dataset: { path: p.path } },
      h("td", { class: "mono" }, h("a", { href: href(["playbooks", "view"], { path: p.path }) }, p.path)),
      h("td", {}, p.name),
      h("td", { class: "num" }, `v${p.version}`),
      h("td", {}, fmtTime(p.created_at)),
    ),
  );
  fill(
    ctx.root,
    h("h1", {}, "Playbooks", h("a", { href: "#/playbooks/new", class: "small", id: "new-playbook" }, "Register a playbook…")),
    h(
      "table",
      { id: "playbooks" },
      h("thead", {}, h("tr", {}, ["Path", "Name", "Latest", "Registered"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No playbook registered yet."))),
    ),
  );
}

/** The playbook text, one row per line, with each diagnostic under its line. */
export function codeWithDiagnostics(text, diagnostics) {
  const byLine = new Map();
  const unplaced = [];
  for (const d of diagnostics) {
    if (d.line) (byLine.get(d.line) || byLine.set(d.line, []).get(d.line)).push(d);
    else unplaced.push(d);
  }
  const diagRow = (d) =>
    h(
      "div",
      { class: `diag ${d.severity === "error" ? "error" : "warning"}`, dataset: { code: d.code, line: d.line ?? "" } },
      `${d.severity} ${d.code}${d.step ? ` (step ${d.step})` : ""}: ${d.message}${d.key ? ` [${d.key}]` : ""}`,
    );
  const lines = text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  const rows = [];
  for (const d of unplaced) rows.push(diagRow(d));
  lines.forEach((line, i) => {
    const found = byLine.get(i + 1) || [];
    const worst = found.some((d) => d.severity === "error") ? " has-error" : found.length ? " has-warning" : "";
    rows.push(h("div", { class: `line${worst}`, dataset: { line: i + 1 } }, h("span", { class: "no" }, String(i + 1)), h("span", {}, line)));
    for (const d of found) rows.push(diagRow(d));
  });
  // A diagnostic past the last line (end of file) still shows.
  for (const [line, found] of byLine) if (line > lines.length) for (const d of found) rows.push(diagRow(d));
  return h("div", { class: "code-lines", id: "playbook-text" }, rows);
}

function summaryOf(result) {
  const errors = result.diagnostics.filter((d) => d.severity === "error").length;
  const warnings = result.diagnostics.length - errors;
  if (result.valid) {
    return h("p", { class: "notice ok", id: "validation" }, `Valid${warnings ? `, ${warnings} warning${warnings === 1 ? "" : "s"}` : ""}.`);
  }
  return h("p", { class: "notice error", id: "validation", role: "alert" }, `${errors} error${errors === 1 ? "" : "s"}${warnings ? `, ${warnings} warning${warnings === 1 ? "" : "s"}` : ""}.`);
}

function parseWorkload(text) {
  const trimmed = text.trim();
  if (!trimmed) return {};
  let value;
  try {
    value = JSON.parse(trimmed);
  } catch (err) {
    throw new Error(`The workload is not valid JSON: ${err.message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error("The workload must be a JSON object.");
  }
  return value;
}

const MASKED = "***"; // how the API shows a sensitive default

/** The kind of field for a workload default: number, boolean, text, json or secret. */
export function fieldKind(value) {
  if (value === MASKED) return "secret";
  if (typeof value === "number") return "number";
  if (typeof value === "boolean") return "boolean";
  if (typeof value === "string") return "text";
  return "json"; // lists, objects, null
}

/** A field per workload key, typed from its default: {key, kind, input, read(), write(v)}. */
function workloadField(key, value, i) {
  const kind = fieldKind(value);
  const id = `workload-field-${i}`;
  const attrs = { id, name: key, dataset: { key, kind } };
  let input;
  if (kind === "number") input = h("input", { ...attrs, type: "number", step: "any", value: String(value) });
  else if (kind === "boolean") input = h("input", { ...attrs, type: "checkbox", checked: value });
  // A text input would drop the newlines of a multi-line default.
  else if (kind === "text" && value.includes("\n")) input = h("textarea", { ...attrs, rows: 3 }, value);
  else if (kind === "text") input = h("input", { ...attrs, type: "text", value, size: 30 });
  else if (kind === "secret") input = h("input", { ...attrs, type: "password", autocomplete: "off", placeholder: "secret default kept", size: 30 });
  else input = h("textarea", { ...attrs, rows: 3, spellcheck: "false" }, jsonText(value));
  const fail = (what) => {
    throw new Error(`${key}: ${what}`);
  };
  // What the field says: {set: false} when it leaves the default as it is.
  const read = () => {
    if (kind === "boolean") return { set: input.checked !== value, value: input.checked };
    if (kind === "secret") return input.value ? { set: true, value: input.value } : { set: false };
    if (kind === "text") return { set: input.value !== value, value: input.value };
    if (kind === "number") {
      if (input.value.trim() === "") return { set: false };
      const number = Number(input.value);
      if (!Number.isFinite(number)) fail("not a number");
      return { set: number !== value, value: number };
    }
    let parsed;
    try {
      parsed = JSON.parse(input.value);
    } catch (err) {
      fail(`not valid JSON: ${err.message}`);
    }
    return { set: JSON.stringify(parsed) !== JSON.stringify(value), value: parsed };
  };
  // Show `v` (undefined: the default again).
  const write = (v) => {
    const shown = v === undefined ? value : v;
    if (kind === "boolean") input.checked = Boolean(shown);
    else if (kind === "secret") input.value = v === undefined ? "" : String(v);
    else if (kind === "json") input.value = jsonText(shown);
    else input.value = String(shown);
  };
  const hint = kind === "json" ? (Array.isArray(value) ? "list, JSON" : "JSON") : kind;
  const label = h("label", { for: id, class: "mono" }, key, h("span", { class: "muted small" }, ` (${hint})`));
  return { key, kind, input, read, write, row: h("div", { class: "workload-field", dataset: { key } }, label, input) };
}

function startForm(ctx, path, version, defaults) {
  const fields = Object.entries(defaults || {}).map(([key, value], i) => workloadField(key, value, i));
  const known = new Set(fields.map((f) => f.key));
  let extras = {}; // keys set in the JSON box that the playbook has no default for
  let asJson = !fields.length;
  const workload = h("textarea", { id: "workload-input", rows: 6, spellcheck: "false" }, "{}");
  const problem = h("div", { id: "start-message" });
  const extrasNote = h("p", { class: "muted small", id: "workload-extras", hidden: true });
  const fieldBox = h("div", { class: "workload-fields", id: "workload-fields" }, fields.map((f) => f.row), extrasNote);
  const jsonBox = h("div", { id: "workload-json" }, h("label", { class: "block", for: "workload-input" }, "Workload (JSON), merged over the playbook's defaults"), workload);
  const toggle = h("button", { type: "button", class: "link small", id: "workload-as-json" });
  const noWorker = document.body.dataset.workers === "0"
    ? h("p", { class: "notice warn" }, "No worker is alive: the execution will wait in the queue until one starts (noetl worker start).")
    : null;

  // The workload the fields make: only what differs from the defaults, typed as they are.
  function fromFields() {
    const out = {};
    for (const field of fields) {
      const { set, value } = field.read();
      if (set) out[field.key] = value;
    }
    return { ...extras, ...out };
  }

  function show() {
    fieldBox.hidden = asJson;
    jsonBox.hidden = !asJson;
    toggle.hidden = !fields.length;
    toggle.textContent = asJson ? "Edit as fields" : "Edit as JSON";
    const names = Object.keys(extras);
    extrasNote.hidden = !names.length;
    extrasNote.textContent = `Also sent, from the JSON: ${names.join(", ")}`;
  }

  toggle.addEventListener("click", () => {
    try {
      if (asJson) {
        const value = parseWorkload(workload.value);
        extras = Object.fromEntries(Object.entries(value).filter(([key]) => !known.has(key)));
        for (const field of fields) field.write(value[field.key]);
      } else {
        workload.value = jsonText(fromFields());
      }
    } catch (err) {
      fill(problem, h("p", { class: "notice error", role: "alert" }, err.message));
      return;
    }
    fill(problem);
    asJson = !asJson;
    show();
  });

  const form = h(
    "form",
    { id: "start-form" },
    h("h2", {}, "Start an execution", h("span", { class: "spacer" }), toggle),
    noWorker,
    fields.length ? h("p", { class: "muted small" }, "A field per key of the playbook's workload; what you leave as it is keeps its default.") : null,
    fieldBox,
    jsonBox,
    defaults && Object.keys(defaults).length
      ? h("details", {}, h("summary", { class: "muted small" }, "Defaults (secrets masked)"), h("pre", {}, jsonText(defaults)))
      : null,
    problem,
    h("div", { class: "toolbar" }, h("button", { type: "submit", id: "start" }, `Start v${version}`)),
  );
  show();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let body;
    try {
      body = { path, version, workload: asJson ? parseWorkload(workload.value) : fromFields() };
    } catch (err) {
      fill(problem, h("p", { class: "notice error", role: "alert" }, err.message));
      return;
    }
    try {
      const res = await api("/api/executions", { method: "POST", body });
      ctx.navigate(href(["executions", res.execution_id]));
    } catch (err) {
      const details = (err.body.diagnostics || err.body.errors || []).map((d) => h("li", {}, d.message || d.msg));
      fill(problem, h("div", { class: "notice error", role: "alert" }, `Not started: ${err.message}`, details.length ? h("ul", {}, details) : null));
    }
  });
  return h("section", { class: "panel" }, form);
}

export async function renderPlaybook(ctx, query) {
  const path = query.path || "";
  const version = query.version ? parseInt(query.version, 10) : null;
  const record = await api(`/api/playbooks/${path.split("/").map(encodeURIComponent).join("/")}`, { query: { version }, signal: ctx.signal });
  const latest = version === null ? record.version : (await api(`/api/playbooks/${path.split("/").map(encodeURIComponent).join("/")}`, { signal: ctx.signal })).version;
  const check = await api("/api/playbooks/validate", { method: "POST", body: { content: record.content, path: record.path }, signal: ctx.signal });
  if (ctx.signal.aborted) return;
  const versions = h(
    "select",
    { id: "version", "aria-label": "version" },
    Array.from({ length: latest }, (_, i) => latest - i).map((v) => h("option", { value: v, selected: v === record.version }, `v${v}${v === latest ? " (latest)" : ""}`)),
  );
  versions.addEventListener("change", () => ctx.navigate(href(["playbooks", "view"], { path, version: versions.value })));
  fill(
    ctx.root,
    h("h1", {}, "Playbook ", h("span", { class: "mono" }, record.path), versions),
    h(
      "p",
      { class: "muted" },
      `${record.name} · registered ${fmtTime(record.created_at)} · `,
      h("a", { href: href(["playbooks", "new"], { from: record.path, version: record.version }) }, "edit as a new version"),
    ),
    h(
      "div",
      { class: "row" },
      h("section", { class: "panel grow" }, h("h2", {}, "Text"), summaryOf(check), codeWithDiagnostics(record.content, check.diagnostics)),
      h("div", { class: "grow" }, startForm(ctx, record.path, record.version, record.workload ?? check.workload)),
    ),
  );
}

export async function renderPlaybookEditor(ctx, query) {
  let initial = "";
  if (query.from) {
    const source = await api(`/api/playbooks/${query.from.split("/").map(encodeURIComponent).join("/")}`, { query: { version: query.version }, signal: ctx.signal });
    initial = source.content;
  }
  const text = h("textarea", { id: "playbook-input", rows: 22, spellcheck: "false", placeholder: "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: example\n  path: team/example\nworkflow:\n  - step: start\n" }, initial);
  const pathInput = h("input", { type: "text", id: "playbook-path", placeholder: "catalog path (default: metadata.path)", size: 40, value: query.from || "" });
  const result = h("div", { id: "editor-result" });
  const message = h("div", { id: "editor-message" });
  let timer = null;
  let seq = 0;

  async function validate() {
    const content = text.value;
    if (!content.trim()) {
      fill(result);
      return null;
    }
    const mine = ++seq;
    const check = await api("/api/playbooks/validate", { method: "POST", body: { content, path: pathInput.value.trim() || null }, signal: ctx.signal });
    if (mine === seq) fill(result, summaryOf(check), codeWithDiagnostics(content, check.diagnostics));
    return check;
  }

  text.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => validate().catch(ctx.onError), 600);
  });
  const validateButton = h("button", { type: "button", class: "secondary", id: "validate", onclick: () => validate().catch(ctx.onError) }, "Validate");
  const register = h("button", { type: "submit", id: "register" }, "Register");
  const form = h("form", {}, text, h("div", { class: "toolbar" }, pathInput, validateButton, register), message);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const res = await api("/api/playbooks", { method: "POST", body: { content: text.value, path: pathInput.value.trim() || null } });
      ctx.navigate(href(["playbooks", "view"], { path: res.path, version: res.version }));
    } catch (err) {
      fill(message, h("p", { class: "notice error", role: "alert" }, `Not registered: ${err.message}`));
      if (err.body.diagnostics) fill(result, codeWithDiagnostics(text.value, err.body.diagnostics));
    }
  });
  fill(ctx.root, h("h1", {}, "Register a playbook"), h("section", { class: "panel" }, form), result);
  if (initial) validate().catch(ctx.onError);
}
