// Replaying every pending dead letter of one step at once (a loop's failed items): asks
// first with the count, then one call, POST /api/dlq/replay.
import { api } from "../api.js";
import { h, confirmDialog } from "../dom.js";

/** How many workers are alive now (the top bar's last count when the server does not say). */
export async function workersAlive() {
  try {
    const data = await api("/api/workers");
    return data.alive;
  } catch {
    const known = document.body.dataset.workers;
    return known === undefined ? null : Number(known);
  }
}

/** The warning shown in a replay dialog when no worker is alive, else null. */
export function noWorkerWarning(alive, what) {
  if (alive !== 0) return null;
  return h(
    "p",
    { class: "notice warn", id: "replay-no-worker" },
    `No worker is alive: ${what} wait${what.endsWith("s") ? "" : "s"} in the queue until one starts (noetl worker start).`,
  );
}

/**
 * Ask, then replay the `count` pending dead letters of `step`. Resolves to
 * {kind: "ok" | "error", text} to show, or null when the operator did not confirm.
 */
export async function replayStep(executionId, step, count) {
  const alive = await workersAlive();
  const plural = count === 1 ? "" : "s";
  const ok = await confirmDialog({
    title: `Replay ${count} dead letter${plural} of step ${step}?`,
    content: [
      h(
        "p",
        { id: "replay-all-summary" },
        `Each of the ${count} failed task${plural} runs again with its original id; the execution continues from step `,
        h("span", { class: "mono" }, step),
        ".",
      ),
      noWorkerWarning(alive, count === 1 ? "the replayed task" : "the replayed tasks"),
    ],
    confirmLabel: `Replay ${count}`,
  });
  if (!ok) return null;
  try {
    const res = await api("/api/dlq/replay", { method: "POST", body: { execution_id: executionId, step } });
    const done = res.replayed.filter((r) => r.replayed).length;
    const parts = [`Replayed ${done} dead letter${done === 1 ? "" : "s"} of step ${step}.`];
    if (res.refused.length) {
      const first = res.refused[0];
      parts.push(`${res.refused.length} could not run again (${first.message_id}: ${first.reason}).`);
    }
    if (res.remaining) parts.push(`${res.remaining} left pending: replay again for the rest.`);
    return { kind: res.refused.length && !done ? "error" : "ok", text: parts.join(" ") };
  } catch (err) {
    return { kind: "error", text: `Replay refused: ${err.message}` };
  }
}
