// One step of an execution: status, loop progress, error, result preview, runs (a step
// on a cycle of the graph runs more than once), attempts.
import { api } from "../api.js";
import { h, fill, href, confirmDialog } from "../dom.js";
import { badge, fmtTime, fmtDuration, cut, waitingBadge } from "../format.js";
import { replayStep } from "./replay_all.js";

const ATTEMPT_PAGE = 50;

function parseResult(text) {
  const trimmed = text.trim();
  if (!trimmed) return undefined;
  try {
    return JSON.parse(trimmed);
  } catch (err) {
    throw new Error(`The result is not valid JSON: ${err.message}`);
  }
}

export function createStepPanel(ctx, executionId, { onShowEvents, onChanged } = {}) {
  const state = { step: null, status: "", run: "", offset: 0, data: null };
  const body = h("div", {});
  const message = h("div", { id: "step-message" });

  // An operator marks a parked, pending or stuck step done; it then routes on as if it
  // had finished by itself (its tasks still in flight are canceled).
  async function forceComplete(step) {
    const status = h("select", { id: "force-status" }, h("option", { value: "ok" }, "ok"), h("option", { value: "failed" }, "failed"));
    const result = h("textarea", { id: "force-result", rows: 4, placeholder: '{"rows": 0}' });
    const reason = h("textarea", { id: "force-reason", rows: 2 });
    const values = await confirmDialog({
      title: `Mark step ${step} done?`,
      content: [
        h("p", {}, "Its tasks still running are canceled, and the execution goes on from it as if it had finished by itself."),
        h("label", {}, "Status", status),
        h("label", {}, "Result (optional JSON, saved by its result.as)", result),
        h("label", {}, "Reason", reason),
      ],
      confirmLabel: "Mark done",
      danger: true,
      collect: () => {
        const body = { status: status.value, reason: reason.value.trim() || null };
        const parsed = parseResult(result.value);
        if (parsed !== undefined) body.result = parsed;
        return body;
      },
    });
    if (!values) return;
    try {
      await api(`/api/admin/executions/${encodeURIComponent(executionId)}/steps/${encodeURIComponent(step)}/force-complete`, { method: "POST", body: values });
      fill(message, h("p", { class: "notice ok", role: "status" }, `Step ${step} marked ${values.status}.`));
      if (onChanged) onChanged();
    } catch (err) {
      fill(message, h("p", { class: "notice error", role: "alert" }, `Not marked: ${err.message}`));
    }
  }

  // Every pending dead letter of the step (a loop's failed items) at once.
  async function replayAll(step, count) {
    const shown = await replayStep(executionId, step, count);
    if (!shown) return;
    fill(message, h("p", { class: `notice ${shown.kind}`, id: "step-replay-result", role: shown.kind === "error" ? "alert" : "status" }, shown.text));
    if (onChanged) onChanged();
  }

  const element = h("section", { class: "panel", id: "step-panel", hidden: true }, body);

  function showRun(run) {
    state.run = String(run);
    state.offset = 0;
    load().catch(ctx.onError);
  }

  // The runs of a step on a cycle, oldest first; a click shows that run's attempts.
  function runsTable(data) {
    const rows = data.run_history.map((r) =>
      h(
        "tr",
        { class: `clickable${String(r.run) === state.run ? " selected" : ""}`, dataset: { run: r.run, status: r.status }, onclick: () => showRun(r.run) },
        h("td", { class: "num" }, String(r.run)),
        h("td", {}, badge(r.status)),
        h("td", { class: "mono small" }, r.by || ""),
        h("td", { class: "mono small" }, fmtTime(r.started_at)),
        h("td", { class: "num" }, r.started_at && r.finished_at ? fmtDuration(r.finished_at - r.started_at) : ""),
        h("td", { class: "num" }, String(r.attempts)),
        h("td", { class: "wrap" }, r.error ? h("pre", { class: "error-text" }, r.error) : ""),
      ),
    );
    const shown = data.run_history.length;
    return [
      h("h3", {}, "Runs", shown < data.runs ? h("span", { class: "muted small" }, ` (the latest ${shown} of ${data.runs})`) : null),
      h(
        "div",
        { class: "scroll" },
        h(
          "table",
          { id: "runs" },
          h("thead", {}, h("tr", {}, ["Run", "Status", "Called by", "Started", "Took", "Attempts", "Error"].map((t) => h("th", {}, t)))),
          h("tbody", {}, rows),
        ),
      ),
    ];
  }

  /** What the attempt printed and logged, folded under its line count. */
  function printed(a) {
    const lines = a.stdout.replace(/\n$/, "").split("\n").length;
    return h(
      "details",
      { class: "step-output", open: a.status === "failed" },
      h("summary", { class: "small" }, `output (${lines} line${lines === 1 ? "" : "s"})`),
      h("pre", { class: "output-text" }, a.stdout),
    );
  }

  function attemptsTable(data) {
    const cycled = data.runs > 1;
    const rows = data.attempts.map((a) =>
      h(
        "tr",
        { dataset: { taskId: a.task_id, attempt: a.attempt, status: a.status, run: a.run } },
        cycled ? h("td", { class: "num" }, String(a.run)) : null,
        h("td", { class: "mono small" }, a.task_id),
        h("td", { class: "num" }, a.index === null ? "" : String(a.index)),
        h("td", { class: "num" }, String(a.attempt)),
        h("td", {}, badge(a.status)),
        h("td", { class: "mono small" }, fmtTime(a.started_at)),
        h("td", { class: "num" }, a.duration_ms === null ? "" : fmtDuration(a.duration_ms / 1000)),
        h(
          "td",
          { class: "wrap" },
          a.error ? h("pre", { class: "error-text" }, a.error) : a.output !== null ? h("code", {}, cut(a.output, 300)) : "",
          a.stdout ? printed(a) : null,
          a.delay_ms ? h("div", { class: "muted small" }, `retried after ${a.delay_ms} ms`) : null,
          a.worker_id ? h("div", { class: "muted small" }, `lost by worker ${a.worker_id}`) : null,
          a.replay ? h("div", { class: "muted small" }, "replayed from the dead-letter queue") : null,
          a.dead_lettered
            ? h("div", { class: "small" }, h("a", { href: href(["dlq", a.task_id]), class: "dlq-link" }, "dead-letter entry"))
            : null,
        ),
      ),
    );
    return h(
      "div",
      { class: "scroll" },
      h(
      "table",
      { id: "attempts" },
      h("thead", {}, h("tr", {}, [cycled ? "Run" : null, "Task", "Item", "Attempt", "Status", "Started", "Took", "Error / output"].filter(Boolean).map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: cycled ? 8 : 7, class: "muted" }, "No attempts."))),
      ),
    );
  }

  function draw() {
    const d = state.data;
    if (!d) return;
    const isLoop = d.total !== null && d.total !== undefined;
    const filter = h(
      "select",
      { id: "attempt-filter", "aria-label": "attempt status" },
      ["", "failed", "ok", "running", "lease_expired", "canceled"].map((s) => h("option", { value: s, selected: s === state.status }, s || "all attempts")),
    );
    filter.addEventListener("change", () => {
      state.status = filter.value;
      state.offset = 0;
      load().catch(ctx.onError);
    });
    const cycled = d.runs > 1;
    const runFilter = cycled
      ? h(
          "select",
          { id: "attempt-run", "aria-label": "run" },
          h("option", { value: "", selected: state.run === "" }, "all runs"),
          d.run_history.map((r) => h("option", { value: String(r.run), selected: String(r.run) === state.run }, `run ${r.run}`)),
        )
      : null;
    if (runFilter) runFilter.addEventListener("change", () => showRun(runFilter.value));
    const pageInfo = d.attempts_total
      ? `attempts ${d.offset + 1}–${d.offset + d.attempts.length} of ${d.attempts_total}`
      : "";
    const prev = h("button", { type: "button", class: "secondary", disabled: d.offset === 0, onclick: () => { state.offset = Math.max(0, state.offset - ATTEMPT_PAGE); load().catch(ctx.onError); } }, "← Previous");
    const next = h("button", { type: "button", class: "secondary", disabled: d.offset + d.attempts.length >= d.attempts_total, onclick: () => { state.offset += ATTEMPT_PAGE; load().catch(ctx.onError); } }, "Next →");
    fill(
      body,
      h(
        "h2",
        {},
        "Step ",
        h("span", { class: "mono", id: "step-name" }, d.step),
        " ",
        badge(d.status),
        d.waiting_without_workers ? [" ", waitingBadge("step-waiting")] : null,
        h("span", { class: "spacer" }),
        d.dead_letters
          ? h("button", { type: "button", class: "secondary small", id: "step-replay-all", onclick: () => replayAll(d.step, d.dead_letters) }, `Replay ${d.dead_letters} dead letter${d.dead_letters === 1 ? "" : "s"}…`)
          : null,
        ["running", "parked", "pending"].includes(d.status)
          ? h("button", { type: "button", class: "secondary small", id: "force-complete", onclick: () => forceComplete(d.step) }, "Mark done…")
          : null,
        h("button", { type: "button", class: "link small", onclick: () => onShowEvents && onShowEvents(d.step) }, "its events"),
      ),
      message,
      h(
        "dl",
        { class: "meta" },
        cycled ? [h("dt", {}, "Runs"), h("dd", { id: "step-runs" }, `${d.runs}; the times below are run ${d.run}'s`)] : null,
        h("dt", {}, "Started"), h("dd", {}, fmtTime(d.started_at)),
        h("dt", {}, "Finished"), h("dd", {}, fmtTime(d.finished_at)),
        h("dt", {}, "Took"), h("dd", {}, d.started_at && d.finished_at ? fmtDuration(d.finished_at - d.started_at) : "—"),
        isLoop ? [h("dt", {}, "Items"), h("dd", { id: "step-progress" }, `${d.completed}/${d.total} done: ${d.succeeded} ok, ${d.failed} failed`)] : null,
        d.error ? [h("dt", {}, "Error"), h("dd", {}, h("pre", { class: "error-text", id: "step-error" }, d.error))] : null,
      ),
      d.result !== null && !(d.status === "failed" && d.result === "null")
        ? [h("h3", {}, "Result", d.result_truncated ? h("span", { class: "muted small" }, " (beginning only)") : null), h("pre", { id: "step-result" }, d.result)]
        : null,
      cycled ? runsTable(d) : null,
      h("h3", {}, "Attempts"),
      h("div", { class: "toolbar" }, filter, runFilter, h("span", { class: "muted small" }, pageInfo)),
      attemptsTable(d),
      d.attempts_total > ATTEMPT_PAGE ? h("div", { class: "pager" }, prev, next) : null,
    );
  }

  async function load() {
    if (!state.step) return;
    const step = state.step;
    const data = await api(`/api/executions/${encodeURIComponent(executionId)}/steps/${encodeURIComponent(step)}`, {
      query: { status: state.status, run: state.run, limit: ATTEMPT_PAGE, offset: state.offset },
      signal: ctx.signal,
    });
    if (step !== state.step) return; // another step was chosen meanwhile
    state.data = data;
    element.hidden = false;
    draw();
  }

  /** Show `step` (null hides the panel). */
  function select(step) {
    if (step === state.step) return load();
    state.step = step;
    fill(message);
    state.status = "";
    state.run = "";
    state.offset = 0;
    state.data = null;
    element.hidden = !step;
    if (step) fill(body, h("p", { class: "muted" }, `Loading step ${step}…`));
    return load();
  }

  return { element, select, refresh: load, get step() { return state.step; } };
}
