// Building DOM nodes without HTML strings. Every piece of data becomes a text node or an
// attribute value, never markup: playbook names, errors and results are user-controlled.

const SVG_NS = "http://www.w3.org/2000/svg";

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "dataset") {
      for (const [name, v] of Object.entries(value)) el.dataset[name] = String(v);
    } else if (key === "value" && "value" in el) {
      el.value = String(value);
    } else if (key === "checked" || key === "disabled" || key === "hidden" || key === "selected") {
      el[key] = Boolean(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** An HTML element: h("a", {href: "#/x", class: "y"}, "text", otherNode, [more]). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** An SVG element, the same way. */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** Replace everything inside `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A `#/...` link; `parts` are path segments (encoded) and `query` an object. */
export function href(parts, query = {}) {
  const path = parts.map((p) => encodeURIComponent(String(p))).join("/");
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== null && value !== undefined && value !== "") params.set(key, String(value));
  }
  const qs = params.toString();
  return `#/${path}${qs ? "?" + qs : ""}`;
}

/**
 * A modal dialog asking to confirm an action. `content` is a node or nodes shown above the
 * buttons; `collect` (optional) reads the values of inputs inside it and returns them, or
 * throws an Error whose message is shown (the dialog stays open). Resolves to the collected
 * values (true without `collect`) or null when canceled. Leaving the page (another hash
 * route, the back button) cancels it: a dialog never stays over the next page.
 */
export function confirmDialog({ title, content, confirmLabel = "Confirm", danger = false, collect }) {
  return new Promise((resolve) => {
    const problem = h("p", { class: "error-text", hidden: true, role: "alert" });
    const ok = h("button", { type: "submit", class: danger ? "danger" : "" }, confirmLabel);
    const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
    const form = h("form", {}, h("h2", {}, title), content, problem, h("menu", {}, cancel, ok));
    const dialog = h("dialog", { class: "confirm" }, form);
    let settled = false;
    const leave = () => done(null);
    const done = (value) => {
      if (settled) return;
      settled = true;
      window.removeEventListener("hashchange", leave);
      window.removeEventListener("popstate", leave);
      dialog.close();
      dialog.remove();
      resolve(value);
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      try {
        done(collect ? collect() : true);
      } catch (err) {
        problem.textContent = err.message;
        problem.hidden = false;
      }
    });
    cancel.addEventListener("click", () => done(null));
    dialog.addEventListener("cancel", () => done(null));
    window.addEventListener("hashchange", leave);
    window.addEventListener("popstate", leave);
    document.body.appendChild(dialog);
    dialog.showModal();
    const first = dialog.querySelector("textarea, input");
    (first || ok).focus();
  });
}
