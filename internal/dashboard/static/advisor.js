// Advisor (#/advisor): the config advisor's findings, worst first, with a
// one-line reason each. The same data is `sluice doctor`.
import { h, replace, api, enc, fmtTime, badge, notice } from './dom.js';

const CHECKS = {
  visibility: 'Visibility timeout vs p99 processing time',
  max_receive_count: 'maxReceiveCount within 3–10',
  dlq: 'Dead-letter queue attached',
  dlq_consumers: 'No consumers on the DLQ',
  dlq_retention: 'DLQ retention longer than the source’s',
  dlq_alert: 'An alert rule watches the DLQ',
  dlq_owner: 'The DLQ has an owner',
  dlq_shared: 'One DLQ per consumer group',
  fifo_dlq_order: 'FIFO order vs dead-lettering acknowledged',
  prefetch: 'Prefetch within 1–50',
  fifo_groups: 'FIFO backlog spread over groups',
  retention: 'Messages well inside retention',
};
const KIND = { red: 'critical', yellow: 'warn', green: 'ok' };
const RANK = { red: 0, yellow: 1, green: 2 };

export function render(main, _param, ctx) {
  document.title = 'Advisor · Sluice';
  const status = h('div', { class: 'status-slot' });
  const summary = h('div', { class: 'tiles', id: 'advisor-summary' });
  const showGreen = h('input', { type: 'checkbox', id: 'show-green' });
  const tbody = h('tbody', {});
  const gaps = h('div', { id: 'advisor-gaps' });
  const table = h('table', { class: 'findings', id: 'findings' },
    h('caption', {}, 'Findings, worst first. Each is backed by the queue’s configuration or by what the broker observed.'),
    h('thead', {}, h('tr', {}, ['Verdict', 'Queue', 'Check', 'Reason'].map((c) => h('th', { scope: 'col' }, c)))), tbody);
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Advisor'),
      h('button', { type: 'button', id: 'refresh-advisor', onclick: () => load(true) }, 'Check again')),
    h('p', { class: 'muted' }, 'Configuration checks against live metrics: visibility timeouts, retry budgets, dead-letter setup, prefetch, FIFO groups and retention. ',
      'The same checks run from the command line with ', h('code', {}, 'sluice doctor'), '.'),
    status, summary,
    h('p', { class: 'inline-actions' }, showGreen, h('label', { for: 'show-green' }, 'Show passing checks')),
    h('div', { class: 'table-wrap' }, table), gaps);

  let data = null;
  let at = 0;
  const draw = () => {
    if (!data) return;
    const counts = { red: 0, yellow: 0, green: 0 };
    for (const f of data.findings) counts[f.verdict] = (counts[f.verdict] || 0) + 1;
    replace(summary,
      ['red', 'yellow', 'green'].map((v) => h('div', { class: `tile verdict-${v}` },
        h('span', { class: 'tile-label' }, { red: 'Red', yellow: 'Yellow', green: 'Green' }[v]),
        h('span', { class: 'tile-value' }, String(counts[v] || 0)))),
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Checked'), h('span', { class: 'tile-value small' }, fmtTime(data.at))));
    const rows = data.findings
      .filter((f) => showGreen.checked || f.verdict !== 'green')
      .sort((a, b) => RANK[a.verdict] - RANK[b.verdict] || a.queue.localeCompare(b.queue) || a.check.localeCompare(b.check));
    replace(tbody, rows.length ? rows.map((f) => h('tr', { class: `verdict-row-${f.verdict}` },
      h('td', { 'data-label': 'Verdict' }, badge(f.verdict, KIND[f.verdict])),
      h('th', { scope: 'row', 'data-label': 'Queue' }, h('a', { href: `#/queue/${enc(f.queue)}` }, f.queue)),
      h('td', { 'data-label': 'Check', title: CHECKS[f.check] || '' }, h('code', {}, f.check)),
      h('td', { 'data-label': 'Reason' }, f.reason, f.fix ? h('div', { class: 'fix small' }, h('strong', {}, 'Fix: '), h('code', {}, f.fix)) : null)))
      : h('tr', {}, h('td', { colspan: 4, class: 'empty' }, data.findings.length ? 'Every check passes.' : 'No queues to check yet.')));
    replace(gaps, (data.gaps || []).length ? h('details', {}, h('summary', {}, `Checks without data (${data.gaps.length})`),
      h('ul', {}, data.gaps.map((g) => h('li', {}, g)))) : null);
  };
  showGreen.addEventListener('change', draw);

  let closed = false;
  const load = async (force) => {
    if (!force && Date.now() - at < 15000) return;
    at = Date.now();
    try {
      data = await api('/sluice/v1/advisor');
      if (closed) return;
      notice(status, '');
      draw();
    } catch (e) {
      if (!closed) notice(status, e.status === 404 ? 'This broker does not serve the advisor.' : `Cannot run the advisor: ${e.message}`, 'error');
    }
  };
  load(true);
  const un = ctx.live.subscribe(() => load(false));
  return () => {
    closed = true;
    un();
  };
}
