// The executions list: status filter, server-side paging, refreshed every two seconds.
import { api } from "../api.js";
import { h, fill, href } from "../dom.js";
import { badge, fmtTime, fmtDuration, cut } from "../format.js";
import { poll } from "../poll.js";

export const PAGE_SIZE = 50;
const FILTERS = [
  ["", "All"],
  ["running", "Running"],
  ["ok", "Ok"],
  ["fail", "Failed"],
  ["canceled", "Canceled"],
];

function durationOf(item) {
  const end = item.finished_at ?? (item.status === "running" ? Date.now() / 1000 : item.updated_at);
  return fmtDuration(end - item.created_at);
}

function row(item) {
  const link = href(["executions", item.execution_id]);
  const open = (event) => {
    if (!event.target.closest("a")) location.hash = link;
  };
  return h(
    "tr",
    { class: "clickable", dataset: { executionId: item.execution_id }, onclick: open },
    h("td", { class: "mono" }, h("a", { href: link }, item.execution_id)),
    h(
      "td",
      {},
      h("div", {}, cut(item.playbook_name, 80)),
      item.playbook_path ? h("div", { class: "muted small" }, cut(item.playbook_path, 100)) : null,
    ),
    h("td", {}, badge(item.status)),
    h("td", { title: String(item.created_at) }, fmtTime(item.created_at)),
    h("td", { class: "num" }, durationOf(item)),
    h(
      "td",
      { class: "mono small" },
      item.parent_execution_id ? h("a", { href: href(["executions", item.parent_execution_id]) }, item.parent_execution_id) : "",
    ),
  );
}

export async function renderExecutions(ctx, query) {
  const status = FILTERS.some(([value]) => value === query.status) ? query.status : "";
  const page = Math.max(1, parseInt(query.page || "1", 10) || 1);
  const offset = (page - 1) * PAGE_SIZE;
  const go = (p) => href(["executions"], { status, page: p > 1 ? p : "" });

  const tabs = h(
    "nav",
    { class: "tabs", "aria-label": "status filter" },
    FILTERS.map(([value, label]) =>
      h("a", { href: href(["executions"], { status: value }), class: value === status ? "active" : "", dataset: { filter: value } }, label),
    ),
  );
  const tbody = h("tbody", {});
  const range = h("span", { class: "muted", id: "range" });
  const updated = h("span", { class: "muted small", id: "updated" });
  const newer = h("button", { type: "button", class: "secondary", id: "newer", disabled: page === 1, onclick: () => ctx.navigate(go(page - 1)) }, "← Newer");
  const older = h("button", { type: "button", class: "secondary", id: "older", disabled: true, onclick: () => ctx.navigate(go(page + 1)) }, "Older →");
  fill(
    ctx.root,
    h("h1", {}, "Executions"),
    h("div", { class: "toolbar" }, tabs, h("span", { class: "spacer" }), updated),
    h(
      "table",
      { id: "executions" },
      h("thead", {}, h("tr", {}, ["Execution", "Playbook", "Status", "Started", "Duration", "Parent"].map((t) => h("th", {}, t)))),
      tbody,
    ),
    h("div", { class: "pager" }, newer, older, range),
  );

  poll(
    async () => {
      const data = await api("/api/executions", { query: { status, limit: PAGE_SIZE, offset }, signal: ctx.signal });
      if (ctx.signal.aborted) return;
      if (data.items.length) {
        fill(tbody, data.items.map(row));
        range.textContent = `rows ${offset + 1}–${offset + data.items.length}`;
      } else {
        fill(tbody, h("tr", {}, h("td", { colspan: 6, class: "muted" }, page > 1 ? "No executions on this page." : "No executions yet.")));
        range.textContent = "";
      }
      older.disabled = data.next_offset === null || data.next_offset === undefined;
      updated.textContent = `updated ${fmtTime(Date.now() / 1000)}`;
    },
    2000,
    { signal: ctx.signal, onError: ctx.onError, onOk: ctx.onOk },
  );
}
