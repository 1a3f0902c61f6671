// Inline SVG charts: sparklines for the overview, line charts with axes for
// the queue page. No library; each chart is rebuilt on every update.
import { h } from './dom.js';

const SVG = 'svg:';

function extent(values) {
  let max = 0;
  for (const v of values) if (v > max) max = v;
  return max;
}

function points(values, w, h0, max, pad = 2) {
  const n = values.length;
  const hh = h0 - 2 * pad;
  return values
    .map((v, i) => {
      const x = n === 1 ? w : (i / (n - 1)) * w;
      const y = pad + hh - (max > 0 ? (v / max) * hh : 0);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

// sparkline draws values (oldest first) in a small box. It is decorative:
// the number beside it carries the value, so it is hidden from assistive
// technology.
export function sparkline(values, { width = 88, height = 22, kind = '' } = {}) {
  const svg = h(SVG + 'svg', {
    class: `spark ${kind ? 'spark-' + kind : ''}`,
    width, height, viewBox: `0 0 ${width} ${height}`, 'aria-hidden': 'true', focusable: 'false',
  });
  if (!values || values.length === 0) {
    svg.append(h(SVG + 'line', { x1: 0, y1: height - 2, x2: width, y2: height - 2, class: 'spark-empty' }));
    return svg;
  }
  const max = extent(values);
  const pts = points(values, width, height, max);
  svg.append(h(SVG + 'polyline', { points: `0,${height} ${pts} ${width},${height}`, class: 'spark-area' }));
  svg.append(h(SVG + 'polyline', { points: pts, class: 'spark-line' }));
  return svg;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function clock(ms) {
  const d = new Date(ms);
  return d.toISOString().slice(11, 19);
}

// lineChart draws several series over a shared time axis t (Unix ms) as a
// figure with a caption, axes, a legend and a text summary for screen
// readers. series: [{name, values, cls}]; fmt formats axis values.
export function lineChart({ title, t, series, fmt = String, width = 640, height = 200 }) {
  const left = 56, right = 12, top = 10, bottom = 26;
  const w = width - left - right, hh = height - top - bottom;
  const max = niceMax(Math.max(0, ...series.map((s) => extent(s.values))));
  const svg = h(SVG + 'svg', {
    class: 'chart', viewBox: `0 0 ${width} ${height}`,
    role: 'img', 'aria-label': summary(title, t, series, fmt),
  });
  for (const f of [0, 0.5, 1]) {
    const y = top + hh - f * hh;
    svg.append(h(SVG + 'line', { x1: left, x2: left + w, y1: y, y2: y, class: 'grid' }));
    svg.append(h(SVG + 'text', { x: left - 6, y: y + 4, class: 'axis', 'text-anchor': 'end' }, fmt(max * f)));
  }
  if (t.length > 0) {
    svg.append(h(SVG + 'text', { x: left, y: height - 6, class: 'axis' }, clock(t[0])));
    svg.append(h(SVG + 'text', { x: left + w, y: height - 6, class: 'axis', 'text-anchor': 'end' }, clock(t[t.length - 1]) + ' UTC'));
  }
  const g = h(SVG + 'g', { transform: `translate(${left},${top})` });
  for (const s of series) {
    if (s.values.length === 0) continue;
    g.append(h(SVG + 'polyline', { points: points(s.values, w, hh, max, 0), class: `series ${s.cls}` }));
  }
  svg.append(g);
  const legend = h('ul', { class: 'legend' },
    series.map((s) => h('li', {}, h('span', { class: `swatch ${s.cls}`, 'aria-hidden': 'true' }), `${s.name}: `,
      h('strong', {}, s.values.length ? fmt(s.values[s.values.length - 1]) : '—'))));
  return h('figure', { class: 'chart-figure' }, h('figcaption', {}, title), svg, legend);
}

function summary(title, t, series, fmt) {
  if (t.length === 0) return `${title}: no samples yet`;
  const parts = series.map((s) => {
    const last = s.values[s.values.length - 1];
    return `${s.name} now ${fmt(last)}, peak ${fmt(extent(s.values))}`;
  });
  return `${title}, last ${Math.round((t[t.length - 1] - t[0]) / 60000)} minutes: ${parts.join('; ')}`;
}
