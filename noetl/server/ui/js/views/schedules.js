// Schedules: every schedule with its time table (cron or every), its next ticks, its last
// tick and that tick's execution; pause, resume and run now; a schedule's latest ticks,
// each with the execution it started.
import { api } from "../api.js";
import { h, fill, href } from "../dom.js";
import { fmtTime } from "../format.js";

function when(trigger) {
  if (trigger.webhook) return "webhook";
  if (trigger.nats) return `nats ${trigger.nats.subject}`;
  if (trigger.cron) return `${trigger.cron}${trigger.timezone ? ` (${trigger.timezone})` : ""}`;
  return `every ${trigger.every}`;
}

function lastTick(tick) {
  if (!tick) return h("span", { class: "muted" }, "none yet");
  const label = `${tick.time} ${tick.status}${tick.manual ? " (run now)" : ""}`;
  if (tick.execution_id && tick.status === "started") {
    return h("a", { href: href(["executions", tick.execution_id]) }, label);
  }
  return h("span", { title: tick.error || "" }, label);
}

export async function renderSchedules(ctx) {
  const status = h("p", { id: "schedule-status", hidden: true });
  const say = (kind, ...parts) => {
    status.className = `notice ${kind}`;
    status.hidden = false;
    fill(status, ...parts);
  };

  async function act(name, action) {
    try {
      const res = await api(`/api/schedules/${encodeURI(name)}/${action}`, { method: "POST", body: {} });
      // The table shows the change before the message says it is done.
      await load();
      if (action === "run") {
        if (res.execution_id) say("ok", `Started `, h("a", { href: href(["executions", res.execution_id]) }, res.execution_id), ".");
        else say("error", `${name} did not start: ${res.error}`);
      } else {
        say("ok", `${name} ${action === "pause" ? "paused" : "resumed"}.`);
      }
    } catch (err) {
      say("error", `${action} refused: ${err.message}`);
    }
  }

  function row(s) {
    const toggle = s.paused ? "resume" : "pause";
    return h(
      "tr",
      { dataset: { name: s.name } },
      h("td", { class: "mono" }, s.name),
      h("td", { class: "mono" }, h("a", { href: href(["playbooks", "view"], { path: s.path }) }, s.path)),
      h("td", { class: "mono" }, when(s.trigger)),
      h("td", {}, s.paused ? "paused" : "active"),
      h("td", {}, s.next_ticks.length ? s.next_ticks[0] : h("span", { class: "muted" }, "-")),
      h("td", {}, lastTick(s.last_tick)),
      h(
        "td",
        {},
        h("button", { type: "button", class: "small", onClick: () => act(s.name, toggle) }, toggle),
        " ",
        h("button", { type: "button", class: "small", onClick: () => act(s.name, "run") }, "run now"),
        " ",
        h("button", { type: "button", class: "small", onClick: () => showTicks(s.name) }, "ticks"),
      ),
    );
  }

  const history = h("section", { id: "schedule-ticks", hidden: true });
  async function showTicks(name) {
    try {
      const detail = await api(`/api/schedules/${encodeURI(name)}`, { signal: ctx.signal });
      const rows = detail.ticks.map((t) =>
        h(
          "tr",
          {},
          h("td", { class: "mono" }, `${t.time}${t.manual ? " (run now)" : ""}`),
          h("td", {}, t.status),
          h(
            "td",
            { class: "mono" },
            t.execution_id && t.status === "started"
              ? h("a", { href: href(["executions", t.execution_id]) }, t.execution_id)
              : h("span", { class: "muted", title: t.error || "" }, t.error || "-"),
          ),
          h("td", { class: "mono" }, t.owner),
        ),
      );
      fill(
        history,
        h("h2", {}, `Latest ticks of ${name}`),
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, ["Tick", "Outcome", "Execution", "Server"].map((t) => h("th", {}, t)))),
          h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No tick yet."))),
        ),
      );
      history.hidden = false;
    } catch (err) {
      say("error", `ticks of ${name}: ${err.message}`);
    }
  }

  const table = h("table", { id: "schedules" });
  async function load() {
    const data = await api("/api/schedules", { signal: ctx.signal });
    fill(
      table,
      h("thead", {}, h("tr", {}, ["Name", "Playbook", "When", "State", "Next tick", "Last tick", ""].map((t) => h("th", {}, t)))),
      h(
        "tbody",
        {},
        data.items.length
          ? data.items.map(row)
          : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No schedule: register a playbook with a triggers block, or `noetl schedule create`.")),
      ),
    );
  }
  await load();
  fill(ctx.root, h("h1", {}, "Schedules"), status, table, history, h("p", { class: "muted small" }, `Loaded ${fmtTime(Date.now() / 1000)}.`));
}
