// One execution: header and cancel, the step graph, the selected step, the event timeline.
// Refreshed every 1.5 s while it runs (every 5 s after: a replay can reopen it). Work
// queued with no live worker to take it shows as "queued — no worker alive", and a step's
// pending dead letters can be replayed at once.
import { api } from "../api.js";
import { h, svg, fill, href, confirmDialog } from "../dom.js";
import { badge, fmtTime, fmtDuration, jsonText, waitingBadge, WAITING_LABEL } from "../format.js";
import { createGraphView, nodeCaption, runsLabel } from "../graph.js";
import { poll } from "../poll.js";
import { createGantt } from "./gantt.js";
import { createStepPanel } from "./step.js";
import { createTimeline } from "./timeline.js";
import { replayStep } from "./replay_all.js";

/** What makes a plan's complexity score (the tooltip of its number). */
function complexityParts(c) {
  return `${c.steps} steps, ${c.edges} edges, ${c.loop_items} loop items, ${c.unknown_loops} loops of unknown size, fan-out ${c.max_fanout}, ${c.sub_playbooks} sub-playbook calls`;
}

// The graph view draws statuses; a step whose queued tasks no worker takes is marked on
// top of it after each update: a dashed box and a label above it.
function markWaiting(box, waiting) {
  for (const node of box.querySelectorAll("g.node")) {
    const on = waiting.has(node.dataset.step);
    node.classList.toggle("waiting", on);
    const label = node.querySelector("text.waiting-label");
    if (!on) {
      delete node.dataset.waiting;
      if (label) label.remove();
    } else {
      node.dataset.waiting = "true";
      if (!label) node.appendChild(svg("text", { class: "waiting-label", x: 4, y: -5 }, WAITING_LABEL));
    }
  }
}

function stepsTable(graph, selected, onSelect, { waiting, deadLetters, onReplay }) {
  const letters = (node) => {
    const count = deadLetters[node.id] || 0;
    if (!count) return "";
    const replay = (event) => {
      event.stopPropagation(); // not a click on the row
      onReplay(node.id, count);
    };
    return [
      h("span", { class: "num" }, String(count), " "),
      h("button", { type: "button", class: "secondary small replay-all", dataset: { step: node.id }, onclick: replay }, "Replay all…"),
    ];
  };
  return h(
    "table",
    { id: "steps" },
    h("thead", {}, h("tr", {}, ["Step", "Status", "Runs", "Progress", "Dead letters", "Error"].map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      graph.nodes.map((node) =>
        h(
          "tr",
          { class: `clickable${node.id === selected ? " selected" : ""}`, dataset: { step: node.id, status: node.status, waiting: waiting.has(node.id) }, onclick: () => onSelect(node.id) },
          h("td", { class: "mono" }, node.id),
          h("td", {}, badge(node.status), waiting.has(node.id) ? [" ", waitingBadge(null)] : null),
          h("td", { class: "num runs" }, runsLabel(node)),
          h("td", { class: "num" }, node.total !== null && node.total !== undefined ? nodeCaption(node).split(" · ")[1] : ""),
          h("td", { class: "dead-letters" }, letters(node)),
          h("td", { class: "wrap error-text" }, node.error || ""),
        ),
      ),
    ),
  );
}

export async function renderExecution(ctx, executionId, query) {
  let detail = null;
  let graph = null;
  let selected = query.step || null;

  const title = h("h1", {}, "Execution ", h("span", { class: "mono", id: "execution-id" }, executionId));
  const message = h("div", { id: "execution-message" });
  const waitingBox = h("div", { id: "execution-waiting-box" });
  const meta = h("dl", { class: "meta", id: "execution-meta" });
  const graphBox = h("div", { class: "graph-box", id: "graph" });
  const stepsBox = h("div", { id: "steps-box" });
  const dataBox = h("div", {});
  const graphView = createGraphView(graphBox, { onSelect: (step) => select(step) });
  const panel = createStepPanel(ctx, executionId, {
    onShowEvents: (step) => timeline.showStep(step),
    onChanged: () => refresher.now(),
  });
  const timeline = createTimeline(ctx, executionId, { onStep: (step) => select(step) });
  const gantt = createGantt(ctx, executionId, { onStep: (step) => select(step) });
  const legend = h(
    "div",
    { class: "legend" },
    ["pending", "parked", "running", "ok", "failed", "skipped", "canceled"].map((s) => badge(s)),
    h("span", {}, "solid blue edge: taken; dashed: not taken; ×N: ran N times on a cycle (run N: under way)"),
  );

  fill(
    ctx.root,
    title,
    waitingBox,
    message,
    h("section", { class: "panel" }, meta),
    h(
      "div",
      { class: "row" },
      h("section", { class: "panel grow" }, h("h2", {}, "Graph"), graphBox, legend),
      h("section", { class: "panel grow" }, h("h2", {}, "Steps"), stepsBox),
    ),
    panel.element,
    gantt.element,
    timeline.element,
    dataBox,
  );

  function select(step) {
    selected = step;
    const q = new URLSearchParams({ step });
    history.replaceState(null, "", `${href(["executions", executionId])}?${q}`);
    if (graph) drawGraph();
    panel.select(step).catch(ctx.onError);
    panel.element.scrollIntoView({ block: "nearest" });
  }

  function drawGraph() {
    const waiting = new Set((detail && detail.waiting_steps) || []);
    graphView.update(graph, selected);
    markWaiting(graphBox, waiting);
    const deadLetters = (detail && detail.dead_letters) || {};
    fill(stepsBox, stepsTable(graph, selected, select, { waiting, deadLetters, onReplay: replayAll }));
  }

  async function replayAll(step, count) {
    const shown = await replayStep(executionId, step, count);
    if (!shown) return;
    fill(message, h("p", { class: `notice ${shown.kind}`, id: "replay-all-result", role: shown.kind === "error" ? "alert" : "status" }, shown.text));
    refresher.now();
  }

  async function cancel() {
    const ok = await confirmDialog({
      title: "Cancel this execution?",
      content: h("p", {}, "Running tasks are stopped and no further step runs. The execution ends as canceled."),
      confirmLabel: "Cancel execution",
      danger: true,
    });
    if (!ok) return;
    try {
      const res = await api(`/api/executions/${encodeURIComponent(executionId)}/cancel`, { method: "POST" });
      fill(message, h("p", { class: "notice ok", role: "status" }, res.canceled ? "Cancel requested." : `Not canceled: the execution had already ended (${res.status}).`));
      refresher.now();
    } catch (err) {
      fill(message, h("p", { class: "notice error", role: "alert" }, `Cancel failed: ${err.message}`));
    }
  }

  let shownData = "";
  function drawHeader() {
    const d = detail;
    const running = d.status === "running";
    fill(
      title,
      "Execution ",
      h("span", { class: "mono", id: "execution-id" }, executionId),
      h("span", { id: "execution-status" }, badge(d.status)),
      d.waiting_without_workers ? waitingBadge("execution-waiting") : null,
      running ? h("button", { type: "button", class: "danger", id: "cancel", onclick: cancel }, "Cancel") : null,
    );
    // The execution keeps the text it runs: its own page shows it, registered or not
    // (`noetl run` never registers the file it runs).
    const playbook = h(
      "a",
      { href: href(["executions", executionId, "playbook"]), id: "execution-playbook" },
      d.playbook_path || "inline playbook",
    );
    fill(
      waitingBox,
      d.waiting_without_workers
        ? h(
            "p",
            { class: "notice warn", id: "execution-waiting-notice", role: "status" },
            `${d.queued_tasks} task${d.queued_tasks === 1 ? "" : "s"} of step${d.waiting_steps.length === 1 ? "" : "s"} ${d.waiting_steps.join(", ")} wait${d.queued_tasks === 1 ? "s" : ""} in the queue: `,
            d.workers_alive ? "no live worker of their pool takes new tasks" : "no worker is alive",
            ". They run once one starts (noetl worker start).",
          )
        : null,
    );
    fill(
      meta,
      h("dt", {}, "Playbook"), h("dd", {}, d.playbook_name, " · ", playbook),
      h("dt", {}, "Started"), h("dd", {}, fmtTime(d.created_at)),
      h("dt", {}, "Finished"), h("dd", {}, fmtTime(d.finished_at)),
      h("dt", {}, "Duration"), h("dd", {}, fmtDuration(d.duration_s), running ? " so far" : ""),
      h("dt", {}, "Dead letters"), h("dd", {}, h("a", { href: href(["dlq"], { execution_id: executionId, status: "" }), id: "execution-dlq" }, "of this execution")),
      d.complexity ? [h("dt", {}, "Complexity"), h("dd", { id: "execution-complexity", title: complexityParts(d.complexity) }, String(d.complexity.score), d.too_complex ? [" ", h("span", { class: "badge status-failed", id: "too-complex" }, "too complex")] : null)] : null,
      d.queued_tasks ? [h("dt", {}, "Queued"), h("dd", { id: "execution-queued" }, `${d.queued_tasks} task${d.queued_tasks === 1 ? "" : "s"} · ${d.workers_alive} worker${d.workers_alive === 1 ? "" : "s"} alive`)] : null,
      d.parent_execution_id ? [h("dt", {}, "Parent"), h("dd", { class: "mono" }, h("a", { href: href(["executions", d.parent_execution_id]) }, d.parent_execution_id))] : null,
      d.error ? [h("dt", {}, "Error"), h("dd", {}, h("pre", { class: "error-text", id: "execution-error" }, d.error))] : null,
    );
    const data = jsonText([d.workload, d.context]);
    if (data !== shownData) {
      shownData = data;
      fill(
        dataBox,
        h("details", { class: "panel" }, h("summary", {}, "Workload"), h("pre", { id: "workload" }, jsonText(d.workload))),
        h("details", { class: "panel" }, h("summary", {}, "Context (results saved with as/collect)"), h("pre", { id: "context" }, jsonText(d.context))),
      );
    }
  }

  const base = `/api/executions/${encodeURIComponent(executionId)}`;
  const refresher = poll(
    async () => {
      const [d, g] = await Promise.all([api(base, { signal: ctx.signal }), api(`${base}/graph`, { signal: ctx.signal })]);
      if (ctx.signal.aborted) return;
      const wasRunning = detail && detail.status === "running";
      detail = d;
      graph = g;
      drawHeader();
      drawGraph();
      const work = [timeline.refresh(d.last_seq, g.nodes.map((n) => n.id)), gantt.refresh(d.last_seq, d.status === "running")];
      if (selected && (panel.step !== selected || d.status === "running" || wasRunning)) {
        work.push(panel.select(selected));
      }
      await Promise.all(work);
    },
    () => (detail && detail.status !== "running" ? 5000 : 1500),
    {
      signal: ctx.signal,
      onError: (err) => {
        if (err.status === 404) {
          refresher.stop(); // it will not appear later
          fill(ctx.root, h("h1", {}, "Execution not found"), h("p", { class: "notice error", role: "alert" }, err.message));
        } else ctx.onError(err);
      },
      onOk: ctx.onOk,
    },
  );
}
