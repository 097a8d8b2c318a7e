// The dead-letter queue: tasks that failed for good. List, look at one, replay it (with an
// optional patch of its spec or args) or discard it with a reason; both ask first.
import { api } from "../api.js";
import { h, fill, href, confirmDialog } from "../dom.js";
import { badge, fmtTime, fmtAgo, jsonText, cut, firstLine } from "../format.js";
import { poll } from "../poll.js";
import { noWorkerWarning, workersAlive } from "./replay_all.js";

export const DLQ_PAGE = 50;
const STATUSES = [
  ["pending", "Pending"],
  ["replayed", "Replayed"],
  ["discarded", "Discarded"],
  ["", "All"],
];

function unavailable(ctx, err) {
  // An older server without the DLQ API answers 404 for the route itself.
  fill(
    ctx.root,
    h("h1", {}, "Dead letters"),
    h("p", { class: "notice warn", role: "alert" }, `This server has no dead-letter API (${err.message}).`),
  );
}

export async function renderDlqList(ctx, query) {
  const status = query.status === undefined ? "pending" : STATUSES.some(([v]) => v === query.status) ? query.status : "pending";
  const executionId = query.execution_id || "";
  const page = Math.max(1, parseInt(query.page || "1", 10) || 1);
  const offset = (page - 1) * DLQ_PAGE;
  const go = (changes) => href(["dlq"], { status, execution_id: executionId, page: "", ...changes });

  const counters = new Map(STATUSES.map(([value]) => [value, h("span", { class: "muted small count" })]));
  const tabs = h(
    "nav",
    { class: "tabs", "aria-label": "status filter" },
    STATUSES.map(([value, label]) =>
      h("a", { href: go({ status: value }), class: value === status ? "active" : "", dataset: { filter: value } }, label, " ", counters.get(value)),
    ),
  );
  const execInput = h("input", { type: "text", id: "dlq-execution", placeholder: "execution id", value: executionId, size: 22 });
  const filterForm = h("form", { class: "toolbar" }, execInput, h("button", { type: "submit", class: "secondary" }, "Filter"));
  filterForm.addEventListener("submit", (event) => {
    event.preventDefault();
    ctx.navigate(go({ execution_id: execInput.value.trim() }));
  });
  const tbody = h("tbody", {});
  const range = h("span", { class: "muted" });
  const newer = h("button", { type: "button", class: "secondary", disabled: page === 1, onclick: () => ctx.navigate(go({ page: page - 1 > 1 ? page - 1 : "" })) }, "← Previous");
  const older = h("button", { type: "button", class: "secondary", disabled: true, onclick: () => ctx.navigate(go({ page: page + 1 })) }, "Next →");
  fill(
    ctx.root,
    h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Tasks that failed for good: attempts exhausted, a fatal error, or a message that could not be read. Replay one once its cause is fixed."),
    h("div", { class: "toolbar" }, tabs, h("span", { class: "spacer" }), filterForm),
    h(
      "table",
      { id: "dlq" },
      h("thead", {}, h("tr", {}, ["Task", "Execution", "Step", "Item", "Tool", "Attempts", "Reason", "Last error", "Last seen", "Status"].map((t) => h("th", {}, t)))),
      tbody,
    ),
    h("div", { class: "pager" }, newer, older, range),
  );

  const refresher = poll(
    async () => {
      let data;
      try {
        data = await api("/api/dlq", { query: { status, execution_id: executionId, limit: DLQ_PAGE, offset }, signal: ctx.signal });
      } catch (err) {
        if (err.status !== 404) throw err;
        refresher.stop();
        return unavailable(ctx, err);
      }
      if (ctx.signal.aborted) return;
      const counts = data.counts || {};
      const total = Object.values(counts).reduce((a, b) => a + b, 0);
      for (const [value, el] of counters) el.textContent = String(value ? counts[value] ?? 0 : total);
      const rows = data.items.map((e) =>
        h(
          "tr",
          { dataset: { messageId: e.message_id, status: e.status } },
          h("td", { class: "mono small" }, h("a", { href: href(["dlq", e.message_id]) }, e.message_id)),
          h("td", { class: "mono small" }, h("a", { href: href(["executions", e.execution_id]) }, e.execution_id)),
          h("td", { class: "mono" }, e.step),
          h("td", { class: "num" }, e.loop_index === null || e.loop_index === undefined ? "" : String(e.loop_index)),
          h("td", {}, e.tool_kind || ""),
          h("td", { class: "num" }, String(e.attempts)),
          h("td", {}, e.reason),
          h("td", { class: "wrap error-text", title: e.last_error || "" }, cut(firstLine(e.last_error), 140)),
          h("td", { title: fmtTime(e.last_seen) }, fmtAgo(e.last_seen)),
          h("td", {}, badge(e.status)),
        ),
      );
      fill(tbody, rows.length ? rows : h("tr", {}, h("td", { colspan: 10, class: "muted" }, "No dead letters here.")));
      range.textContent = rows.length ? `rows ${offset + 1}–${offset + rows.length}` : "";
      older.disabled = data.items.length < DLQ_PAGE;
    },
    3000,
    { signal: ctx.signal, onError: ctx.onError, onOk: ctx.onOk },
  );
}

function parsePatch(text) {
  const trimmed = text.trim();
  if (!trimmed) return null;
  let patch;
  try {
    patch = JSON.parse(trimmed);
  } catch (err) {
    throw new Error(`The patch is not valid JSON: ${err.message}`);
  }
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) {
    throw new Error('The patch must be a JSON object of dotted keys, e.g. {"spec.url": "http://..."}');
  }
  return patch;
}

export async function renderDlqEntry(ctx, messageId) {
  const message = h("div", { id: "dlq-message" });
  const body = h("div", {});
  fill(ctx.root, h("h1", {}, "Dead letter ", h("span", { class: "mono", id: "dlq-id" }, messageId)), message, body);
  const base = `/api/dlq/${encodeURIComponent(messageId)}`;

  const say = (kind, text, extra) => fill(message, h("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text, extra || null));

  async function replay(entry) {
    const patch = h("textarea", { id: "replay-patch", rows: 5, placeholder: '{"spec.url": "http://fixed.example/api", "args.limit": 10}' });
    const alive = await workersAlive();
    const values = await confirmDialog({
      title: "Replay this task?",
      content: [
        h("p", {}, "The task runs again with its original id, and execution ", h("span", { class: "mono" }, entry.execution_id), " continues from step ", h("span", { class: "mono" }, entry.step), "."),
        noWorkerWarning(alive, "the replayed task"),
        h("label", {}, "Patch (optional): a JSON object of dotted keys of the task to change", patch),
      ],
      confirmLabel: "Replay",
      collect: () => ({ patch: parsePatch(patch.value) }),
    });
    if (!values) return;
    try {
      const res = await api(`${base}/replay`, { method: "POST", body: values.patch ? { patch: values.patch } : {} });
      const link = h("a", { href: href(["executions", res.execution_id]), id: "replayed-execution" }, "open the execution");
      say("ok", res.replayed ? `Replayed; the execution is ${res.status}. ` : `Already replayed; the execution is ${res.status}. `, link);
      await load();
    } catch (err) {
      say("error", `Replay refused: ${err.message}`);
    }
  }

  async function discard() {
    const reason = h("textarea", { id: "discard-reason", rows: 3, "aria-required": "true" });
    const values = await confirmDialog({
      title: "Discard this task?",
      content: [h("p", {}, "It will not be replayed; the execution stays failed."), h("label", {}, "Reason (required)", reason)],
      confirmLabel: "Discard",
      danger: true,
      collect: () => {
        const text = reason.value.trim();
        if (!text) throw new Error("Say why it is discarded.");
        return { reason: text };
      },
    });
    if (!values) return;
    try {
      await api(`${base}/discard`, { method: "POST", body: values });
      say("ok", "Discarded.");
      await load();
    } catch (err) {
      say("error", `Discard refused: ${err.message}`);
    }
  }

  function draw(e) {
    const pending = e.status === "pending";
    fill(
      body,
      h(
        "div",
        { class: "toolbar" },
        badge(e.status),
        h("button", { type: "button", id: "replay", disabled: !pending, onclick: () => replay(e) }, "Replay…"),
        h("button", { type: "button", id: "discard", class: "danger", disabled: !pending, onclick: discard }, "Discard…"),
      ),
      h(
        "section",
        { class: "panel" },
        h(
          "dl",
          { class: "meta" },
          h("dt", {}, "Execution"), h("dd", { class: "mono" }, h("a", { href: href(["executions", e.execution_id], { step: e.step }) }, e.execution_id)),
          h("dt", {}, "Step"), h("dd", { class: "mono" }, e.step),
          e.loop_index !== null && e.loop_index !== undefined ? [h("dt", {}, "Loop item"), h("dd", {}, String(e.loop_index), e.loop_key !== null && e.loop_key !== undefined ? ` (key ${jsonText(e.loop_key)})` : "")] : null,
          h("dt", {}, "Tool"), h("dd", {}, e.tool_kind || "—", e.sink_id ? ` · sink ${e.sink_id}` : ""),
          h("dt", {}, "Reason"), h("dd", {}, e.reason, e.error_type ? ` · ${e.error_type}` : ""),
          h("dt", {}, "Attempts"), h("dd", {}, String(e.attempts)),
          h("dt", {}, "First seen"), h("dd", {}, fmtTime(e.first_seen)),
          h("dt", {}, "Last seen"), h("dd", {}, fmtTime(e.last_seen)),
          h("dt", {}, "Replays"), h("dd", {}, String(e.replays ?? 0)),
          typeof e.payload?.complexity === "number" ? [h("dt", {}, "Plan complexity"), h("dd", { id: "dlq-complexity" }, String(e.payload.complexity), e.payload.too_complex ? [" ", h("span", { class: "badge status-failed", id: "dlq-too-complex" }, "too complex")] : null)] : null,
          e.discard_reason ? [h("dt", {}, "Discarded because"), h("dd", {}, e.discard_reason)] : null,
        ),
      ),
      h("section", { class: "panel" }, h("h2", {}, "Last error"), h("pre", { class: "error-text", id: "dlq-error" }, e.last_error || "")),
      e.last_stack ? h("details", { class: "panel" }, h("summary", {}, "Stack"), h("pre", { id: "dlq-stack" }, e.last_stack)) : null,
      h("section", { class: "panel" }, h("h2", {}, "Task (secrets masked)"), h("pre", { id: "dlq-payload" }, jsonText(e.payload))),
      e.context_excerpt ? h("details", { class: "panel" }, h("summary", {}, "Context excerpt"), h("pre", {}, e.context_excerpt)) : null,
    );
  }

  async function load() {
    const entry = await api(base, { signal: ctx.signal });
    if (!ctx.signal.aborted) draw(entry);
  }

  try {
    await load();
  } catch (err) {
    if (err.status === 404) {
      const missing = err.code === "not_found" && /dlq|dead|entry|message/i.test(err.message) ? err.message : `No dead-letter entry ${messageId} (${err.message}).`;
      fill(body, h("p", { class: "notice warn", role: "alert" }, missing));
      return;
    }
    throw err;
  }
}
