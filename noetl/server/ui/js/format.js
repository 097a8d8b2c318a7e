// Formatting values for people: times, durations, statuses, JSON.
import { h } from "./dom.js";

const pad = (n, width = 2) => String(n).padStart(width, "0");

/** Epoch seconds as local "YYYY-MM-DD HH:MM:SS". */
export function fmtTime(epoch) {
  if (epoch === null || epoch === undefined) return "—";
  const d = new Date(epoch * 1000);
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

/** A duration in seconds as "850 ms", "12.3 s", "4 m 05 s" or "2 h 03 m". */
export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  const s = Math.max(0, seconds);
  if (s < 0.01) return `${(s * 1000).toFixed(1)} ms`;
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${pad(Math.floor(s % 60))} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${pad(Math.floor((s % 3600) / 60))} m`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** "3 s ago", "5 m ago", from epoch seconds. */
export function fmtAgo(epoch) {
  if (epoch === null || epoch === undefined) return "—";
  return `${fmtDuration(Date.now() / 1000 - epoch)} ago`;
}

const KNOWN = /^[a-z_]{1,24}$/;

/** A coloured status label. The class comes from a closed set of names. */
export function badge(status) {
  const name = KNOWN.test(String(status)) ? status : "unknown";
  return h("span", { class: `badge status-${name}`, dataset: { status: String(status) } }, String(status));
}

export const WAITING_LABEL = "queued — no worker alive";

/** The badge of work waiting in the queue with no live worker to take it. */
export function waitingBadge(id) {
  const title = "Its tasks wait in the queue: no live worker takes them. Start one: noetl worker start";
  return h("span", { class: "badge status-waiting", id, title, dataset: { status: "waiting" } }, WAITING_LABEL);
}

/** Pretty JSON text of a value (already masked by the API). */
export function jsonText(value) {
  if (value === undefined) return "";
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** At most `n` characters, with an ellipsis when cut. */
export function cut(text, n) {
  const s = text === null || text === undefined ? "" : String(text);
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

/** The first line of a (multi-line) error. */
export function firstLine(text) {
  return text ? String(text).split("\n", 1)[0] : "";
}
