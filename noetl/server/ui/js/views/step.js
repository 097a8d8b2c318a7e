// One step of an execution: status, loop progress, error, result preview, attempts.
import { api } from "../api.js";
import { h, fill, href } from "../dom.js";
import { badge, fmtTime, fmtDuration, cut } from "../format.js";

const ATTEMPT_PAGE = 50;

export function createStepPanel(ctx, executionId, { onShowEvents } = {}) {
  const state = { step: null, status: "", offset: 0, data: null };
  const body = h("div", {});
  const element = h("section", { class: "panel", id: "step-panel", hidden: true }, body);

  function attemptsTable(data) {
    // The last attempt of each task on this page: where a final failure may be dead-lettered.
    const lastOf = new Map();
    for (const a of data.attempts) lastOf.set(a.task_id, a);
    const rows = data.attempts.map((a) =>
      h(
        "tr",
        { dataset: { taskId: a.task_id, attempt: a.attempt, status: a.status } },
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
          a.delay_ms ? h("div", { class: "muted small" }, `retried after ${a.delay_ms} ms`) : null,
          a.worker_id ? h("div", { class: "muted small" }, `lost by worker ${a.worker_id}`) : null,
          a.status === "failed" && lastOf.get(a.task_id) === a
            ? h("div", { class: "small" }, h("a", { href: href(["dlq", a.task_id]) }, "dead-letter entry"))
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
      h("thead", {}, h("tr", {}, ["Task", "Item", "Attempt", "Status", "Started", "Took", "Error / output"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No attempts."))),
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
        h("span", { class: "spacer" }),
        h("button", { type: "button", class: "link small", onclick: () => onShowEvents && onShowEvents(d.step) }, "its events"),
      ),
      h(
        "dl",
        { class: "meta" },
        h("dt", {}, "Started"), h("dd", {}, fmtTime(d.started_at)),
        h("dt", {}, "Finished"), h("dd", {}, fmtTime(d.finished_at)),
        h("dt", {}, "Took"), h("dd", {}, d.started_at && d.finished_at ? fmtDuration(d.finished_at - d.started_at) : "—"),
        isLoop ? [h("dt", {}, "Items"), h("dd", { id: "step-progress" }, `${d.completed}/${d.total} done: ${d.succeeded} ok, ${d.failed} failed`)] : null,
        d.error ? [h("dt", {}, "Error"), h("dd", {}, h("pre", { class: "error-text", id: "step-error" }, d.error))] : null,
      ),
      d.result !== null
        ? [h("h3", {}, "Result", d.result_truncated ? h("span", { class: "muted small" }, " (beginning only)") : null), h("pre", { id: "step-result" }, d.result)]
        : null,
      h("h3", {}, "Attempts"),
      h("div", { class: "toolbar" }, filter, h("span", { class: "muted small" }, pageInfo)),
      attemptsTable(d),
      d.attempts_total > ATTEMPT_PAGE ? h("div", { class: "pager" }, prev, next) : null,
    );
  }

  async function load() {
    if (!state.step) return;
    const step = state.step;
    const data = await api(`/api/executions/${encodeURIComponent(executionId)}/steps/${encodeURIComponent(step)}`, {
      query: { status: state.status, limit: ATTEMPT_PAGE, offset: state.offset },
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
    state.status = "";
    state.offset = 0;
    state.data = null;
    element.hidden = !step;
    if (step) fill(body, h("p", { class: "muted" }, `Loading step ${step}…`));
    return load();
  }

  return { element, select, refresh: load, get step() { return state.step; } };
}
