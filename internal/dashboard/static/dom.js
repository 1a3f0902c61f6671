// Shared helpers: DOM building (text only: nothing from the broker is ever
// parsed as HTML), formatting and the API client.

// h builds an element. attrs: plain attributes, plus "class", "text",
// "on<event>" handlers and boolean properties (hidden, disabled, checked).
export function h(tag, attrs, ...children) {
  const ns = tag.startsWith('svg:') ? 'http://www.w3.org/2000/svg' : null;
  const el = ns ? document.createElementNS(ns, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') el.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (!ns && (k === 'hidden' || k === 'disabled' || k === 'checked' || k === 'open')) el[k] = true;
    else if (k === 'value' && !ns) el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// replace swaps el's content.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function fmtInt(n) {
  if (n === undefined || n === null) return '—';
  return Math.round(n).toLocaleString('en-US');
}

// fmtAge renders seconds as 45s, 12m 30s, 3h 05m, 2d 04h; "—" for zero.
export function fmtAge(s) {
  if (!s || s <= 0) return '—';
  if (s < 1) return `${(s * 1000).toFixed(0)}ms`;
  if (s < 60) return `${Math.floor(s)}s`;
  const pad = (n) => String(Math.floor(n)).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 172800) return `${Math.floor(s / 3600)}h ${pad((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${pad((s % 86400) / 3600)}h`;
}

// fmtDuration renders a processing time or setting in seconds precisely.
export function fmtDuration(s) {
  if (s === undefined || s === null) return '—';
  if (s === 0) return '0s';
  if (s < 1) return `${Math.round(s * 1000)}ms`;
  if (s < 60) return `${+s.toFixed(2)}s`;
  if (s % 86400 === 0) return `${s / 86400}d`;
  if (s % 3600 === 0) return `${s / 3600}h`;
  if (s % 60 === 0) return `${s / 60}m`;
  return fmtAge(s);
}

export function fmtRate(r) {
  if (r === undefined || r === null) return '—';
  if (r === 0) return '0/s';
  if (r < 0.1) return `${(r * 60).toFixed(1)}/min`;
  if (r < 10) return `${r.toFixed(1)}/s`;
  return `${Math.round(r).toLocaleString('en-US')}/s`;
}

// fmtTime renders an RFC 3339 time as "2026-03-01 12:00:05 UTC".
export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC').replace(/Z$/, ' UTC');
}

export function fmtBytes(n) {
  if (n >= 1 << 20) return `${+(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1024) return `${+(n / 1024).toFixed(1)} KiB`;
  return `${n} B`;
}

// ApiError is an error answer: status, the stable code and the message.
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// api calls the broker and returns the decoded JSON (null for 204).
export async function api(path, { method = 'GET', body, signal } = {}) {
  const opts = { method, signal, headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    opts.body = JSON.stringify(body);
  }
  if (method !== 'GET' && method !== 'HEAD') {
    // The broker refuses state-changing admin requests without it.
    opts.headers['Content-Type'] = 'application/json';
  }
  let resp;
  try {
    resp = await fetch(path, opts);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'Unreachable', 'cannot reach the broker');
  }
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!resp.ok) {
    const err = data && data.error;
    throw new ApiError(resp.status, err ? err.code : 'HTTP', err ? err.message : `${resp.status} ${resp.statusText}`);
  }
  return data;
}

export const enc = encodeURIComponent;

// A live region per page reports outcomes ("3 messages deleted") and
// errors to screen readers and sighted users alike.
export function notice(el, text, kind = 'info') {
  replace(el, text ? h('p', { class: `notice notice-${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text) : null);
}

// badge is a coloured label whose text carries the meaning (never colour
// alone).
export function badge(text, kind) {
  return h('span', { class: `badge badge-${kind}` }, text);
}

export function levelBadge(level) {
  if (level === 'critical') return badge('critical', 'critical');
  if (level === 'warn') return badge('warning', 'warn');
  return null;
}
