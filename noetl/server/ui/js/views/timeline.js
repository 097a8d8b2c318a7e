// The event timeline of an execution, a page at a time (the log can be very long).
// `seq` is gapless from 1 to last_seq, so any page of the unfiltered log is one request:
// after_seq = the seq before the page. With a type or step filter, pages go forward only.
import { api } from "../api.js";
import { h, fill } from "../dom.js";
import { fmtTime, jsonText, cut, firstLine } from "../format.js";

export const EVENT_PAGE = 100;
const TYPES = [
  "workflow.started", "step.called", "step.parked", "step.started", "loop.started",
  "loop.iteration.started", "loop.iteration.finished", "loop.finished", "tool.processed",
  "step.finished", "next.evaluated", "step.skipped", "retry.started", "retry.processed",
  "task.reclaimed", "task.canceled", "task.dead_lettered", "task.replayed",
  "workflow.reopened", "step.force_completed", "operator.refused", "loop.timed_out",
  "timer.fired", "compensation.started", "workflow.cancel_requested", "workflow.finished",
];

/** One line saying what an event means, from its (masked) payload. */
export function summarize(event) {
  const p = event.payload || {};
  switch (event.type) {
    case "workflow.started":
      return `workload: ${Object.keys(p.workload || {}).length} keys`;
    case "step.called":
      if (!p.by) return "";
      if (p.run) return `called by ${p.by}: run ${p.run}`;
      if (p.deferred) return `called by ${p.by} while running: runs again when done`;
      if (p.ignored === "running") return `called by ${p.by} (ignored: running)`;
      return `called by ${p.by}${p.ignored ? " (ignored: already ran)" : ""}`;
    case "loop.started":
      return `${(p.items || []).length} items${p.mode ? `, ${p.mode}` : ""}`;
    case "loop.iteration.started":
      return `item ${p.index}`;
    case "loop.iteration.finished":
      return `item ${p.index} ${p.ok ? "ok" : "failed"}${p.error ? ": " + firstLine(p.error) : ""}`;
    case "loop.finished":
      return `${p.succeeded ?? "?"} ok, ${p.failed ?? "?"} failed of ${p.total ?? "?"}`;
    case "tool.processed":
      return p.ok
        ? `ok${p.duration_ms !== undefined ? ` in ${p.duration_ms} ms` : ""}${p.attempt ? ` (attempt ${p.attempt})` : ""}`
        : `failed: ${firstLine(p.error)}${p.attempt ? ` (attempt ${p.attempt})` : ""}`;
    case "step.finished":
      return `${p.status}${p.error ? ": " + firstLine(p.error) : ""}`;
    case "next.evaluated":
      return (p.taken || []).length ? `→ ${p.taken.join(", ")}` : p.unhandled_failure ? "failure not handled" : "no edge taken";
    case "retry.started":
      return `attempt ${p.attempt}/${p.max_attempts} in ${p.delay_ms} ms (${p.reason}): ${firstLine(p.error)}`;
    case "retry.processed":
      return `${p.status} after ${p.attempts} attempts (${p.reason})`;
    case "task.reclaimed":
      return `lease expired${p.worker_id ? ` on ${p.worker_id}` : ""}; attempt ${p.attempt}`;
    case "task.canceled":
      return `${(p.task_ids || []).length} task(s) canceled`;
    case "workflow.finished":
      return `${p.status}${p.error ? ": " + firstLine(p.error) : ""}`;
    case "task.dead_lettered":
      return `dead letter (${p.reason}) after ${p.attempts} attempt(s): ${firstLine(p.error)}`;
    case "task.replayed":
      return `replayed${p.by ? ` by ${p.by}` : ""}${(p.patched || []).length ? `, patched ${p.patched.join(", ")}` : ""}`;
    case "workflow.reopened":
      return `reopened (was ${p.previous})${p.by ? ` by ${p.by}` : ""}`;
    case "step.force_completed":
      return `marked ${p.status}${p.by ? ` by ${p.by}` : ""}${p.reason ? `: ${p.reason}` : ""}`;
    case "operator.refused":
      return `${p.action} refused: ${p.reason}`;
    case "loop.timed_out":
      return `past its ${p.total_timeout_ms} ms budget: ${p.completed}/${p.total} done`;
    case "compensation.started":
      return `rolling back: ${(p.queue || []).join(", ")}`;
    case "workflow.cancel_requested":
      return p.by ? `by ${p.by}` : "";
    default:
      return "";
  }
}

export function createTimeline(ctx, executionId, { onStep } = {}) {
  const state = { afterSeq: 0, type: "", step: "", follow: true, lastSeq: 0, items: [], fetchedKey: null };
  const open = new Set(); // seqs whose payload is shown
  const tbody = h("tbody", {});
  const info = h("span", { class: "muted small", id: "events-range" });
  const typeSelect = h("select", { id: "event-type", "aria-label": "event type" }, h("option", { value: "" }, "all types"), TYPES.map((t) => h("option", { value: t }, t)));
  const stepSelect = h("select", { id: "event-step", "aria-label": "step" }, h("option", { value: "" }, "all steps"));
  const follow = h("input", { type: "checkbox", id: "event-follow", checked: true });
  const filtered = () => Boolean(state.type || state.step);
  const latest = () => Math.max(0, state.lastSeq - EVENT_PAGE);
  const btn = (label, id, fn) => h("button", { type: "button", class: "secondary", id, onclick: fn }, label);
  const first = btn("First", "events-first", () => jump(0));
  const prev = btn("← Previous", "events-prev", () => jump(Math.max(0, state.afterSeq - EVENT_PAGE)));
  const next = btn("Next →", "events-next", () => {
    const last = state.items[state.items.length - 1];
    if (last) jump(last.seq);
  });
  const last = btn("Latest", "events-latest", () => {
    state.follow = follow.checked = !filtered();
    jump(filtered() ? state.afterSeq : latest());
  });

  function jump(afterSeq) {
    state.follow = follow.checked = !filtered() && afterSeq >= latest();
    state.afterSeq = afterSeq;
    load(true).catch(ctx.onError);
  }

  typeSelect.addEventListener("change", () => {
    state.type = typeSelect.value;
    jump(0);
  });
  stepSelect.addEventListener("change", () => {
    state.step = stepSelect.value;
    jump(0);
  });
  follow.addEventListener("change", () => {
    state.follow = follow.checked;
    if (state.follow) {
      state.type = state.step = typeSelect.value = stepSelect.value = "";
      jump(latest());
    }
  });

  function eventRows(event) {
    const rows = [];
    const toggle = () => {
      if (open.has(event.seq)) open.delete(event.seq);
      else open.add(event.seq);
      draw();
    };
    rows.push(
      h(
        "tr",
        { class: "clickable", dataset: { seq: event.seq, type: event.type }, onclick: toggle },
        h("td", { class: "num mono" }, String(event.seq)),
        h("td", { class: "mono small" }, fmtTime(event.ts) + "." + String(Math.floor((event.ts % 1) * 1000)).padStart(3, "0")),
        h("td", { class: "mono" }, event.type),
        h(
          "td",
          {},
          event.step
            ? h("button", { type: "button", class: "link", onclick: (e) => { e.stopPropagation(); if (onStep) onStep(event.step); } }, event.step)
            : "",
        ),
        h("td", { class: "wrap" }, cut(summarize(event), 200)),
      ),
    );
    if (open.has(event.seq)) {
      rows.push(h("tr", { class: "payload" }, h("td", {}), h("td", { colspan: 4 }, h("pre", {}, jsonText(event.payload)))));
    }
    return rows;
  }

  function draw() {
    if (!state.items.length) {
      fill(tbody, h("tr", {}, h("td", { colspan: 5, class: "muted" }, filtered() ? "No matching events after this point." : "No events.")));
    } else {
      fill(tbody, state.items.map(eventRows));
    }
    const a = state.items[0];
    const z = state.items[state.items.length - 1];
    info.textContent = a ? `events ${a.seq}–${z.seq} of ${state.lastSeq}` : `${state.lastSeq} events`;
    prev.disabled = filtered() || state.afterSeq === 0;
    first.disabled = state.afterSeq === 0;
    next.disabled = !z || z.seq >= state.lastSeq || state.items.length < EVENT_PAGE;
  }

  async function load(force = false) {
    const key = JSON.stringify([state.afterSeq, state.type, state.step, state.lastSeq]);
    if (!force && key === state.fetchedKey) return;
    const data = await api(`/api/executions/${encodeURIComponent(executionId)}/events`, {
      query: { after_seq: state.afterSeq, limit: EVENT_PAGE, event_type: state.type, step: state.step },
      signal: ctx.signal,
    });
    state.items = data.items;
    state.fetchedKey = key;
    draw();
  }

  /** Called with every refresh of the execution: its last_seq and step names. */
  async function refresh(lastSeq, steps) {
    const known = new Set([...stepSelect.options].map((o) => o.value));
    for (const name of steps) if (!known.has(name)) stepSelect.appendChild(h("option", { value: name }, name));
    const grew = lastSeq !== state.lastSeq;
    state.lastSeq = lastSeq;
    if (state.follow && !filtered()) state.afterSeq = latest();
    // A page that was not full may have more now; a full page does not change.
    if (grew && (state.follow || state.items.length < EVENT_PAGE)) await load();
    else if (state.fetchedKey === null) await load();
    else draw();
  }

  function showStep(step) {
    state.step = stepSelect.value = step;
    jump(0);
  }

  const element = h(
    "section",
    { class: "panel", id: "timeline" },
    h("h2", {}, "Events"),
    h("div", { class: "toolbar" }, typeSelect, stepSelect, h("label", {}, follow, "follow the latest"), h("span", { class: "spacer" }), info),
    h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, ["Seq", "Time", "Type", "Step", "Summary"].map((t) => h("th", {}, t)))), tbody)),
    h("div", { class: "pager" }, first, prev, next, last),
  );
  return { element, refresh, showStep };
}
