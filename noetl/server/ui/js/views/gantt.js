// The timeline of an execution as a Gantt chart: a row per step from its first start to
// its end, and under a step a row per task (a loop: per item) with a segment per attempt,
// so a retry shows as a segment of its own and a failed attempt in red. The server lists
// a bounded number of tasks per step (GET .../timeline) and sums up the rest in one row.
import { api } from "../api.js";
import { h, fill } from "../dom.js";
import { fmtDuration, firstLine } from "../format.js";

export const GANTT_LIMIT = 20; // tasks listed per step
// The chart folds the whole log on the server: while the execution runs, read it again
// at most this often (the bars still grow in between).
const REFETCH_MS = 4000;
const STATUSES = new Set(["pending", "parked", "running", "ok", "failed", "skipped", "canceled", "lease_expired"]);
const TICKS = 5;

const statusClass = (status) => `status-${STATUSES.has(status) ? status : "pending"}`;

// Positions go through the CSSOM: the console's CSP allows no style attribute.
function placed(el, left, width) {
  if (left !== null) el.style.left = `${left.toFixed(3)}%`;
  if (width !== null) el.style.width = `${width.toFixed(3)}%`;
  return el;
}

/** The time window of the chart: the execution's start to its end (or `now`). */
export function ganttWindow(data, now) {
  let start = data.started_at;
  let end = data.finished_at ?? now;
  for (const step of data.steps) {
    if (step.started_at !== null && step.started_at < start) start = step.started_at;
    for (const s of step.spans) if (s.finished_at !== null && s.finished_at > end) end = s.finished_at;
  }
  return { start, end: Math.max(end, start + 0.001) };
}

/** The tasks of a step's spans, in the order they began: [{taskId, index, attempts}]. */
export function groupTasks(spans) {
  const tasks = new Map();
  for (const span of spans) {
    if (!tasks.has(span.task_id)) tasks.set(span.task_id, { taskId: span.task_id, index: span.index, run: span.run, attempts: [] });
    tasks.get(span.task_id).attempts.push(span);
  }
  return [...tasks.values()];
}

/** "3 ok, 1 failed" from {ok: 3, failed: 1}. */
export function statusCounts(statuses) {
  return Object.entries(statuses || {}).map(([status, n]) => `${n} ${status}`).join(", ");
}

export function createGantt(ctx, executionId, { onStep } = {}) {
  const state = { data: null, fetchedSeq: null, fetchedAt: 0 };
  const chart = h("div", { class: "gantt", id: "gantt-chart" });
  const info = h("span", { class: "muted small", id: "gantt-info" });

  // Where `ts` falls across the track, in percent.
  const placer = (win) => (ts) => (100 * (ts - win.start)) / (win.end - win.start);

  function bar(cls, from, to, place, attrs = {}) {
    const left = place(from);
    return placed(h("div", { class: `gantt-bar ${cls}`, ...attrs }), left, Math.max(0, place(to) - left));
  }

  function row(label, track, attrs = {}) {
    return h("div", { class: `gantt-row ${attrs.class || ""}`, dataset: attrs.dataset || {} }, h("div", { class: "gantt-label" }, label), h("div", { class: "gantt-track" }, track));
  }

  function attemptSegment(span, place, now) {
    const end = span.finished_at ?? now;
    const took = fmtDuration(end - span.started_at);
    const what = span.index === null ? "" : `item ${span.index}, `;
    const title = `${what}attempt ${span.attempt}: ${span.status}, ${took}${span.delay_ms ? ` (waited ${span.delay_ms} ms first)` : ""}${span.error ? "\n" + firstLine(span.error) : ""}`;
    const seg = bar(`gantt-seg ${statusClass(span.status)}`, span.started_at, end, place, {
      title,
      dataset: { status: span.status, attempt: span.attempt, index: span.index ?? "", taskId: span.task_id },
    });
    if (span.delay_ms) {
      // The wait before a retry ran, as a share of the segment.
      const share = Math.min(100, (100 * span.delay_ms) / 1000 / Math.max(end - span.started_at, 0.001));
      seg.appendChild(placed(h("span", { class: "gantt-wait" }), null, share));
    }
    return seg;
  }

  function stepRows(step, place, now) {
    const rows = [];
    const tasks = groupTasks(step.spans);
    const isLoop = step.spans.some((s) => s.index !== null) || step.tasks > 1;
    const name = h("button", { type: "button", class: "link mono", title: step.step, onclick: () => onStep && onStep(step.step) }, step.step);
    const band = step.started_at === null ? null : bar(`gantt-step ${statusClass(step.status)}`, step.started_at, step.finished_at ?? now, place, {
      title: `${step.step}: ${step.status}, ${fmtDuration((step.finished_at ?? now) - step.started_at)}${step.runs > 1 ? ` over ${step.runs} runs` : ""}`,
    });
    // A step without a loop draws its attempts on its own row; a loop has a row per item.
    const segments = isLoop ? [] : step.spans.map((s) => attemptSegment(s, place, now));
    const retries = step.attempts - step.tasks;
    const note = h(
      "span",
      { class: "gantt-note" },
      isLoop ? `${step.tasks} ${step.spans.some((s) => s.index !== null) ? "task" : "run"}${step.tasks === 1 ? "" : "s"}` : "",
      retries > 0 ? `${isLoop ? ", " : ""}${retries} retr${retries === 1 ? "y" : "ies"}` : "",
    );
    rows.push(row([name, note], [band, segments], { class: "gantt-step-row", dataset: { step: step.step, status: step.status } }));
    if (!isLoop) return rows;
    for (const task of tasks) {
      const label = task.index === null ? `run ${task.run}` : `item ${task.index}${step.runs > 1 ? ` (run ${task.run})` : ""}`;
      const failed = task.attempts.some((a) => a.status === "failed");
      rows.push(
        row(h("span", { class: "mono small" }, label), task.attempts.map((s) => attemptSegment(s, place, now)), {
          class: "gantt-item-row",
          dataset: { step: step.step, index: task.index ?? "", attempts: task.attempts.length, failed: String(failed) },
        }),
      );
    }
    const hidden = step.hidden;
    if (hidden) {
      const counts = statusCounts(hidden.statuses);
      const failed = (hidden.statuses.failed || 0) > 0;
      const agg =
        hidden.started_at === null
          ? null
          : bar(`gantt-agg${failed ? " has-failed" : ""}`, hidden.started_at, hidden.finished_at ?? now, place, {
              title: `${hidden.tasks} more: ${hidden.attempts} attempts (${counts})`,
            });
      rows.push(
        row(h("span", { class: "small muted" }, `${hidden.tasks} more`), [agg, h("span", { class: "gantt-agg-text small muted" }, counts)], {
          class: "gantt-more-row",
          dataset: { step: step.step, tasks: hidden.tasks, attempts: hidden.attempts },
        }),
      );
    }
    return rows;
  }

  function draw() {
    const data = state.data;
    if (!data) return;
    const running = data.finished_at === null;
    // While it runs, the bars grow with the time since the answer.
    const now = data.now + (running ? (Date.now() - state.fetchedAt) / 1000 : 0);
    const win = ganttWindow(data, now);
    const place = placer(win);
    const span = win.end - win.start;
    const axis = Array.from({ length: TICKS + 1 }, (_, i) =>
      placed(h("span", { class: `gantt-tick${i === TICKS ? " last" : ""}` }, fmtDuration((span * i) / TICKS)), (100 * i) / TICKS, null),
    );
    const started = data.steps.filter((s) => s.started_at !== null);
    fill(
      chart,
      row(h("span", { class: "muted small" }, "since start"), axis, { class: "gantt-axis" }),
      started.length ? started.map((s) => stepRows(s, place, now)) : h("p", { class: "muted" }, "No step has started yet."),
    );
    const never = data.steps.length - started.length;
    info.textContent = `${fmtDuration(span)}${running ? " so far" : ""}${never ? `; ${never} step${never === 1 ? "" : "s"} not started` : ""}`;
  }

  /** Called with every refresh of the execution: fetched again when the log grew. */
  async function refresh(lastSeq, running = false) {
    const recent = Date.now() - state.fetchedAt < REFETCH_MS;
    if (lastSeq === state.fetchedSeq || (running && recent && state.data)) {
      draw();
      return;
    }
    const data = await api(`/api/executions/${encodeURIComponent(executionId)}/timeline`, { query: { limit: GANTT_LIMIT }, signal: ctx.signal });
    if (ctx.signal.aborted) return;
    state.data = data;
    state.fetchedSeq = lastSeq;
    state.fetchedAt = Date.now();
    draw();
  }

  const legend = h(
    "div",
    { class: "legend" },
    ["running", "ok", "failed", "lease_expired", "canceled"].map((s) => h("span", { class: "gantt-key" }, h("span", { class: `gantt-swatch ${statusClass(s)}` }), s)),
    h("span", {}, `a segment per attempt; a loop lists at most ${GANTT_LIMIT} items (failed, retried and running first)`),
  );
  const element = h("section", { class: "panel", id: "gantt" }, h("h2", {}, "Timeline ", info), chart, legend);
  return { element, refresh };
}
