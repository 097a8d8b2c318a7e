// The step graph: a layered layout of the steps by their edges, drawn as SVG.
//
// layout() is pure (nodes and edges in, positions and paths out) so it can be tested on
// its own. Layers follow the longest path from the entry over forward edges; edges that
// go back up (loops through `next`) are drawn on the side. Within a layer, a few sweeps
// order nodes by the mean position of their neighbours, which removes most crossings.

import { svg, fill } from "./dom.js";
import { cut } from "./format.js";

export const NODE_W = 176;
export const NODE_H = 54;
const GAP_X = 36;
const GAP_Y = 56;
const MARGIN = 24;
const SIDE = 60; // room on the right for edges going back up

/**
 * Lay out `nodes` ([{id}], entry first) and `edges` ([{from, to}]).
 * Returns {width, height, positions: Map id -> {x, y, layer, order}, edges: [{edge, path,
 * back, label: {x, y}}]}.
 */
export function layout(nodes, edges) {
  const ids = nodes.map((n) => n.id);
  const index = new Map(ids.map((id, i) => [id, i]));
  const usable = edges.filter((e) => index.has(e.from) && index.has(e.to) && e.from !== e.to);
  const out = new Map(ids.map((id) => [id, []]));
  for (const e of usable) out.get(e.from).push(e.to);

  // Back edges: those reaching a step still on the depth-first path (a cycle).
  const back = new Set();
  const state = new Map(); // id -> 1 on the path, 2 done
  const visit = (root) => {
    const stack = [[root, 0]];
    state.set(root, 1);
    while (stack.length) {
      const top = stack[stack.length - 1];
      const [id, i] = top;
      const next = out.get(id);
      if (i < next.length) {
        top[1] += 1;
        const to = next[i];
        if (state.get(to) === 1) back.add(`${id}\u0000${to}`);
        else if (!state.has(to)) {
          state.set(to, 1);
          stack.push([to, 0]);
        }
      } else {
        state.set(id, 2);
        stack.pop();
      }
    }
  };
  for (const id of ids) if (!state.has(id)) visit(id);
  const isBack = (e) => back.has(`${e.from}\u0000${e.to}`);
  const forward = usable.filter((e) => !isBack(e));

  // Longest-path layers in topological order (Kahn), ties by workflow order.
  const indegree = new Map(ids.map((id) => [id, 0]));
  for (const e of forward) indegree.set(e.to, indegree.get(e.to) + 1);
  const layer = new Map(ids.map((id) => [id, 0]));
  const ready = ids.filter((id) => indegree.get(id) === 0);
  const succ = new Map(ids.map((id) => [id, []]));
  const pred = new Map(ids.map((id) => [id, []]));
  for (const e of forward) {
    succ.get(e.from).push(e.to);
    pred.get(e.to).push(e.from);
  }
  while (ready.length) {
    ready.sort((a, b) => index.get(a) - index.get(b));
    const id = ready.shift();
    for (const to of succ.get(id)) {
      layer.set(to, Math.max(layer.get(to), layer.get(id) + 1));
      indegree.set(to, indegree.get(to) - 1);
      if (indegree.get(to) === 0) ready.push(to);
    }
  }

  const layers = [];
  for (const id of ids) {
    const l = layer.get(id);
    (layers[l] ||= []).push(id);
  }
  for (let l = 0; l < layers.length; l++) layers[l] ||= [];

  // Barycenter sweeps: down by predecessors, up by successors.
  const order = new Map();
  const number = () => layers.forEach((row) => row.forEach((id, i) => order.set(id, i)));
  number();
  const sweep = (row, neighbours) => {
    const key = new Map(
      row.map((id) => {
        const ns = neighbours.get(id);
        const mean = ns.length ? ns.reduce((s, n) => s + order.get(n), 0) / ns.length : order.get(id);
        return [id, mean];
      }),
    );
    row.sort((a, b) => key.get(a) - key.get(b) || index.get(a) - index.get(b));
    row.forEach((id, i) => order.set(id, i));
  };
  for (let pass = 0; pass < 4; pass++) {
    for (let l = 1; l < layers.length; l++) sweep(layers[l], pred);
    for (let l = layers.length - 2; l >= 0; l--) sweep(layers[l], succ);
  }

  const widest = Math.max(1, ...layers.map((row) => row.length));
  const rowWidth = (n) => n * NODE_W + (n - 1) * GAP_X;
  const width = MARGIN * 2 + rowWidth(widest) + (back.size ? SIDE : 0);
  const height = MARGIN * 2 + layers.length * NODE_H + Math.max(0, layers.length - 1) * GAP_Y;
  const positions = new Map();
  layers.forEach((row, l) => {
    const offset = MARGIN + (rowWidth(widest) - rowWidth(row.length)) / 2;
    row.forEach((id, i) => {
      positions.set(id, { x: offset + i * (NODE_W + GAP_X), y: MARGIN + l * (NODE_H + GAP_Y), layer: l, order: i });
    });
  });

  const routed = usable.map((edge) => {
    const a = positions.get(edge.from);
    const b = positions.get(edge.to);
    if (isBack(edge) || b.layer <= a.layer) {
      // Out of the right side of the source, round, into the right side of the target.
      const sx = a.x + NODE_W, sy = a.y + NODE_H / 2;
      const tx = b.x + NODE_W, ty = b.y + NODE_H / 2;
      const bend = Math.max(sx, tx) + 30 + 12 * Math.abs(a.layer - b.layer);
      return {
        edge,
        back: true,
        path: `M ${sx} ${sy} C ${bend} ${sy}, ${bend} ${ty}, ${tx + 6} ${ty}`,
        label: { x: bend - 4, y: (sy + ty) / 2 },
      };
    }
    const sx = a.x + NODE_W / 2, sy = a.y + NODE_H;
    const tx = b.x + NODE_W / 2, ty = b.y - 6;
    const dy = Math.max(24, (ty - sy) / 2);
    return {
      edge,
      back: false,
      path: `M ${sx} ${sy} C ${sx} ${sy + dy}, ${tx} ${ty - dy}, ${tx} ${ty}`,
      label: { x: (sx + tx) / 2 + 4, y: (sy + ty) / 2 },
    };
  });
  return { width, height, positions, edges: routed };
}

const STATUSES = new Set(["pending", "parked", "running", "ok", "failed", "skipped", "canceled"]);

function statusClass(status) {
  return `status-${STATUSES.has(status) ? status : "pending"}`;
}

/** "running · 37/100" for a loop, the status alone otherwise. */
export function nodeCaption(node) {
  if (node.total !== null && node.total !== undefined) {
    return `${node.status} · ${node.completed ?? 0}/${node.total}`;
  }
  return node.status;
}

const ACTIVE = new Set(["pending", "parked", "running"]);

/**
 * The failed items of a loop node: {failed, total, share, label}, or null for a step
 * without a loop or a loop with no failed item. The label ("3 failed", or "✕3" when the
 * caption leaves no room) sits at the right of the caption.
 */
export function loopFailures(node) {
  if (node.total === null || node.total === undefined || !node.failed) return null;
  const share = node.total ? Math.min(1, node.failed / node.total) : 1;
  const long = `${node.failed} failed`;
  const label = nodeCaption(node).length + long.length > 25 ? `\u2715${node.failed}` : long;
  return { failed: node.failed, total: node.total, share, label };
}

/**
 * The runs badge of a step on a cycle of the graph: "run 3" while its third run is under
 * way, "×3" once it has finished; "" for a step that ran at most once.
 */
export function runsLabel(node) {
  if (!node.runs || node.runs < 2) return "";
  return ACTIVE.has(node.status) ? `run ${node.run}` : `×${node.runs}`;
}

function nodeTitle(node) {
  const runs = node.runs > 1 ? ` (run ${node.run} of ${node.runs})` : "";
  const failures = loopFailures(node);
  const items = failures ? `; ${failures.failed} of ${failures.total} items failed` : "";
  const head = `${node.id}: ${node.status}${runs}${items}`;
  return node.error ? `${head}\n${node.error}` : head;
}

function whenText(when) {
  if (when === null || when === undefined || when === true) return "";
  return typeof when === "string" ? when.replace(/^\{\{\s*|\s*\}\}$/g, "") : String(when);
}

/**
 * A graph view inside `container`. update(graph, selected) redraws only what changed: the
 * layout is computed again only when the steps or edges change.
 */
export function createGraphView(container, { onSelect } = {}) {
  let structureKey = null;
  let nodeEls = new Map();
  let edgeEls = new Map(); // index in graph.edges -> its elements

  function build(graph) {
    const laid = layout(graph.nodes, graph.edges);
    const defs = svg(
      "defs",
      {},
      ["plain", "taken"].map((kind) =>
        svg(
          "marker",
          { id: `arrow-${kind}`, class: kind, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
          svg("path", { d: "M 0 0 L 10 5 L 0 10 z" }),
        ),
      ),
    );
    const where = new Map(graph.edges.map((edge, i) => [edge, i]));
    edgeEls = new Map();
    const edgeGroups = laid.edges.map(({ edge, path, label }) => {
      const line = svg("path", { class: "edge", d: path });
      const text = whenText(edge.when);
      const group = svg(
        "g",
        { class: "edge-group", dataset: { from: edge.from, to: edge.to } },
        line,
        text ? svg("text", { class: "edge-label", x: label.x, y: label.y }, cut(text, 28), svg("title", {}, text)) : null,
      );
      edgeEls.set(where.get(edge), { line, group });
      return group;
    });
    nodeEls = new Map();
    const nodes = graph.nodes.map((node) => {
      const p = laid.positions.get(node.id);
      const caption = svg("text", { class: "sub", x: 10, y: 40 });
      const bar = svg("rect", { class: "bar", x: 10, y: NODE_H - 7, height: 3, width: 0 });
      const barBg = svg("rect", { class: "bar-bg", x: 10, y: NODE_H - 7, height: 3, width: NODE_W - 20 });
      const barFail = svg("rect", { class: "bar-fail", x: 10, y: NODE_H - 8, height: 5, width: 0 });
      const fails = svg("text", { class: "fails", x: NODE_W - 10, y: 40, "text-anchor": "end" });
      const title = svg("title", {});
      // Over the top-right corner, clear of the name.
      const runsBox = svg("rect", { class: "runs-box", y: -8, height: 16, rx: 8, ry: 8 });
      const runsText = svg("text", { class: "runs-text", y: 4, "text-anchor": "middle" });
      const runs = svg("g", { class: "runs-badge", visibility: "hidden" }, runsBox, runsText);
      const g = svg(
        "g",
        { class: "node", transform: `translate(${p.x} ${p.y})`, tabindex: 0, role: "button", dataset: { step: node.id } },
        title,
        svg("rect", { class: "box", width: NODE_W, height: NODE_H, rx: 8, ry: 8 }),
        svg("text", { class: "name", x: 10, y: 21 }, cut(node.id, 22)),
        caption,
        fails,
        barBg,
        bar,
        barFail,
        runs,
      );
      const select = () => onSelect && onSelect(node.id);
      g.addEventListener("click", select);
      g.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          select();
        }
      });
      nodeEls.set(node.id, { g, caption, bar, barBg, barFail, fails, title, runs, runsBox, runsText });
      return g;
    });
    const root = svg(
      "svg",
      { class: "graph", width: laid.width, height: laid.height, viewBox: `0 0 ${laid.width} ${laid.height}`, role: "img", "aria-label": "step graph" },
      defs,
      svg("g", { class: "edges" }, edgeGroups),
      svg("g", { class: "nodes" }, nodes),
    );
    fill(container, root);
  }

  function update(graph, selected) {
    const key = JSON.stringify([graph.nodes.map((n) => n.id), graph.edges.map((e) => [e.from, e.to, e.origin])]);
    if (key !== structureKey) {
      build(graph);
      structureKey = key;
    }
    for (const node of graph.nodes) {
      const el = nodeEls.get(node.id);
      if (!el) continue;
      // A loop where only some items failed is not drawn all red: its bar shows the share.
      const failures = loopFailures(node);
      const partial = failures !== null && failures.failed < failures.total;
      el.g.setAttribute("class", `node ${statusClass(node.status)}${partial ? " partial" : ""}${node.id === selected ? " selected" : ""}`);
      el.g.dataset.status = node.status;
      el.caption.textContent = nodeCaption(node);
      el.title.textContent = nodeTitle(node);
      const runs = runsLabel(node);
      el.g.dataset.runs = String(node.runs ?? 0);
      el.runs.setAttribute("visibility", runs ? "visible" : "hidden");
      if (runs && el.runsText.textContent !== runs) {
        const width = 12 + 6.5 * runs.length;
        const middle = NODE_W - 10 - width / 2;
        el.runsText.textContent = runs;
        el.runsText.setAttribute("x", String(middle));
        el.runsBox.setAttribute("x", String(middle - width / 2));
        el.runsBox.setAttribute("width", String(width));
      }
      const isLoop = node.total !== null && node.total !== undefined;
      el.bar.setAttribute("visibility", isLoop ? "visible" : "hidden");
      el.barBg.setAttribute("visibility", isLoop ? "visible" : "hidden");
      el.barFail.setAttribute("visibility", failures ? "visible" : "hidden");
      el.fails.textContent = failures ? failures.label : "";
      el.g.dataset.failed = String(failures ? failures.failed : 0);
      if (isLoop) {
        // The items that succeeded, then those that failed, along one bar.
        const span = NODE_W - 20;
        const done = node.total ? Math.min(1, (node.completed || 0) / node.total) : 0;
        const failedShare = failures ? failures.share : 0;
        const okWidth = Math.round(span * Math.max(0, done - failedShare));
        const failWidth = failures ? Math.max(2, Math.round(span * failedShare)) : 0;
        el.bar.setAttribute("width", String(okWidth));
        el.barFail.setAttribute("x", String(10 + okWidth));
        el.barFail.setAttribute("width", String(failWidth));
      }
    }
    graph.edges.forEach((edge, i) => {
      const el = edgeEls.get(i);
      if (!el) return;
      const classes = ["edge"];
      if (edge.taken) classes.push("taken");
      if (edge.origin === "compensate") classes.push("compensate");
      el.line.setAttribute("class", classes.join(" "));
      el.line.setAttribute("marker-end", `url(#arrow-${edge.taken ? "taken" : "plain"})`);
      el.group.dataset.taken = String(Boolean(edge.taken));
    });
  }

  return { update };
}
