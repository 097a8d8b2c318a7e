// Polling that is cheap for the server: one request at a time, paused while the tab is
// hidden, stopped when the view goes away (its AbortSignal), slower after failures.

/**
 * Call `fn()` now and then every `intervalMs` (the next call waits for the previous one).
 * `interval` may be a function returning the delay, so a view can slow down once its
 * execution finished. `onError(err)` sees failures; `onOk()` the recoveries. Returns {now(), stop()}.
 */
export function poll(fn, interval, { signal, onError, onOk } = {}) {
  let timer = null;
  let running = false;
  let again = false; // asked for a refresh while one was under way
  let failures = 0;
  let stopped = false;
  const delay = () => {
    const base = typeof interval === "function" ? interval() : interval;
    return failures ? Math.min(base * 2 ** failures, 30000) : base;
  };
  const schedule = (ms) => {
    if (stopped || (signal && signal.aborted)) return;
    clearTimeout(timer);
    timer = setTimeout(tick, ms);
  };
  async function tick() {
    if (stopped || (signal && signal.aborted)) return;
    if (running) {
      again = true;
      return;
    }
    if (document.hidden) return; // resumed by the visibility listener
    running = true;
    try {
      await fn();
      if (failures && onOk) onOk();
      failures = 0;
    } catch (err) {
      if (err && err.name === "AbortError") return;
      failures = Math.min(failures + 1, 5);
      if (onError) onError(err);
    } finally {
      running = false;
    }
    schedule(again ? 0 : delay());
    again = false;
  }
  const onVisible = () => {
    if (!document.hidden) tick();
  };
  document.addEventListener("visibilitychange", onVisible);
  if (signal) {
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisible);
    });
  }
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisible);
  };
  tick();
  return { now: tick, stop };
}
