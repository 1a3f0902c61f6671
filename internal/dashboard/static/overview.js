// Overview (#/): every queue's meters with sparklines, firing alerts on
// top, updated on every sample.
import { h, replace, fmtInt, fmtAge, fmtRate, fmtTime, badge, levelBadge, enc } from './dom.js';
import { sparkline } from './charts.js';
import { openCreateQueue } from './actions.js';

const COLUMNS = [
  { key: 'visible', label: 'Visible', title: 'Messages ready to be received' },
  { key: 'age', label: 'Oldest age', title: 'Age of the oldest message, any state' },
  { key: 'inflight', label: 'In flight', title: 'Received, not yet deleted' },
  { key: 'delayed', label: 'Delayed', title: 'Not visible yet because of a delay' },
  { key: 'sent', label: 'Sent', title: 'Messages sent per second (last minute)' },
  { key: 'received', label: 'Received', title: 'Messages received per second (last minute)' },
  { key: 'deleted', label: 'Deleted', title: 'Messages deleted (done) per second (last minute)' },
  { key: 'dlq', label: 'Dead letters', title: 'Depth of the dead-letter queue and its growth' },
];

export function render(main, _param, ctx) {
  document.title = 'Overview · Sluice';
  const alertsBody = h('div', {}, h('p', { class: 'muted' }, 'Checking alerts…'));
  const alertsSection = h('section', { class: 'alerts', 'aria-labelledby': 'alerts-h' },
    h('h2', { id: 'alerts-h' }, 'Firing alerts'), alertsBody);
  const summary = h('p', { class: 'summary', id: 'overview-summary' }, 'Loading queues…');
  // A cluster's shard whose leader could not be reached: its queues are
  // not in the table, and the page says so rather than look complete.
  const missing = h('p', { class: 'notice notice-warn', id: 'overview-missing', role: 'status', hidden: true });
  const tbody = h('tbody', {});
  const table = h('table', { class: 'queues', id: 'queues-table' },
    h('caption', {}, 'Every queue. Numbers are current; sparklines show the last minutes.'),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Queue'),
      COLUMNS.map((c) => h('th', { scope: 'col', title: c.title }, c.label)))),
    tbody);
  const empty = h('p', { class: 'empty', hidden: true },
    'No queues yet. Create one with any SQS client, e.g. ',
    h('code', {}, 'aws sqs create-queue --queue-name orders --endpoint-url ' + location.origin));
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Queues'),
      h('button', { type: 'button', id: 'create-queue', class: 'primary', onclick: () => openCreateQueue(last ? last.queues : []) }, 'Create queue…')),
    alertsSection,
    summary,
    missing,
    h('div', { class: 'table-wrap' }, table),
    empty,
    // The AMQP topology has its own page (#/topology, in the nav): asking
    // for it here would cost a 404 on every broker without AMQP.
  );

  const rows = new Map();
  let firing = [];
  let last = null;

  const update = (ov) => {
    last = ov;
    const byName = new Map(ov.queues.map((q) => [q.name, q]));
    const seen = new Set();
    ov.queues.forEach((q, i) => {
      seen.add(q.name);
      let row = rows.get(q.name);
      if (!row) {
        row = makeRow(q);
        rows.set(q.name, row);
      }
      if (tbody.children[i] !== row.tr) tbody.insertBefore(row.tr, tbody.children[i] || null);
      fillRow(row, q, byName, ov, firing);
    });
    for (const [name, row] of rows) {
      if (!seen.has(name)) {
        row.tr.remove();
        rows.delete(name);
      }
    }
    table.hidden = ov.queues.length === 0;
    empty.hidden = ov.queues.length > 0;
    const dlqs = ov.queues.filter((q) => q.isDeadLetterQueue);
    const dead = dlqs.reduce((n, q) => n + q.depth, 0);
    replace(summary, `${ov.queues.length} queue${ov.queues.length === 1 ? '' : 's'} · `,
      h('strong', {}, fmtInt(dead)), ` dead letter${dead === 1 ? '' : 's'} in ${dlqs.length} dead-letter queue${dlqs.length === 1 ? '' : 's'} · updated `,
      h('time', { datetime: ov.at }, fmtTime(ov.at)));
    const gaps = ov.missing || [];
    missing.hidden = gaps.length === 0;
    replace(missing, gaps.length === 0 ? '' : `Not listed: the queues of ${gaps.join('; ')}. Retrying with every update.`);
  };

  const renderAlerts = (alerts) => {
    firing = alerts.firing();
    if (alerts.available === false) {
      replace(alertsBody, h('p', { class: 'muted' }, 'Alerts are not enabled on this broker (it does not serve /sluice/v1/alerts).'));
    } else if (firing.length === 0) {
      replace(alertsBody, h('p', { class: 'ok-line' }, badge('ok', 'ok'), ' No alerts firing.'));
    } else {
      const order = { page: 0, critical: 1, warning: 2 };
      firing.sort((a, b) => (order[a.severity] ?? 3) - (order[b.severity] ?? 3) || a.queue.localeCompare(b.queue));
      replace(alertsBody, h('ul', { class: 'alert-list', id: 'firing-alerts' }, firing.map((a) =>
        h('li', { class: `alert alert-${a.severity}` },
          badge(a.severity, a.severity === 'warning' ? 'warn' : 'critical'), ' ',
          h('a', { href: `#/queue/${enc(a.queue)}` }, a.queue), ' ',
          h('span', { class: 'rule' }, a.rule), ': ', a.message,
          h('span', { class: 'since' }, ' · since ', h('time', { datetime: a.since }, fmtTime(a.since)))))));
    }
    alertsSection.classList.toggle('has-firing', firing.length > 0);
    if (last) update(last);
  };

  const un1 = ctx.live.subscribe(update);
  const un2 = ctx.alerts.subscribe(renderAlerts);
  return () => {
    un1();
    un2();
  };
}

function makeRow(q) {
  const cells = {};
  const name = h('th', { scope: 'row', class: 'qname' });
  const tr = h('tr', { 'data-queue': q.name }, name);
  for (const c of COLUMNS) {
    cells[c.key] = h('td', { 'data-label': c.label, class: `m-${c.key}` });
    tr.append(cells[c.key]);
  }
  // Links are created once so that keyboard focus survives updates.
  const link = h('a', { href: `#/queue/${enc(q.name)}` }, q.name);
  const tags = h('span', { class: 'tags' });
  const triage = h('a', { class: 'triage', href: `#/dlq/${enc(q.name)}` }, 'Triage');
  name.append(link, tags, triage);
  const dlqLink = h('a', { class: 'dlq-link' });
  const dlqMeter = h('div', { class: 'meter' });
  const growth = h('span', { class: 'growth', title: 'Arrivals in the dead-letter queue over the growth window' });
  const level = h('span', { class: 'lvl' });
  cells.dlq.append(h('div', { class: 'dlq-wrap' }, dlqMeter, h('div', { class: 'sub' }, level, growth, ' ', dlqLink)));
  return { tr, cells, tags, triage, dlqLink, dlqMeter, growth, level };
}

function meter(cell, text, series, kind, level) {
  replace(cell, h('div', { class: 'meter' }, h('span', { class: 'val' }, text), levelBadge(level), sparkline(series, { kind, width: 52 })));
  cell.className = cell.className.replace(/\blevel-\S+/g, '').trim() + (level && level !== 'ok' ? ` level-${level}` : '');
}

function alertLevel(firing, queue, rule) {
  let level = null;
  for (const a of firing) {
    if (a.queue !== queue || a.rule !== rule) continue;
    if (a.severity === 'warning' && !level) level = 'warn';
    else level = 'critical';
  }
  return level;
}

function fillRow(row, q, byName, ov, firing) {
  const s = q.series || {};
  const r = q.rates;
  replace(row.tags, q.fifo ? badge('FIFO', 'info') : null, q.isDeadLetterQueue ? badge('DLQ', 'dlq') : null,
    q.paused ? badge('PAUSED', 'warn') : null,
    // A cluster with shards: where the queue lives and who leads it.
    q.shard !== undefined ? badge(`shard ${q.shard} · node ${q.leader}`, 'info') : null);
  row.triage.hidden = !q.isDeadLetterQueue;
  row.triage.setAttribute('aria-label', `Triage dead letters of ${q.name}`);
  meter(row.cells.visible, fmtInt(q.visible), s.visible, 'visible', alertLevel(firing, q.name, 'queue_depth'));
  meter(row.cells.age, fmtAge(q.oldestAgeSeconds), s.oldestAge, 'age', alertLevel(firing, q.name, 'oldest_message_age'));
  meter(row.cells.inflight, fmtInt(q.inflight), s.inflight, 'inflight');
  meter(row.cells.delayed, fmtInt(q.delayed), s.delayed, 'delayed');
  meter(row.cells.sent, fmtRate(r && r.sent), s.sent, 'rate');
  meter(row.cells.received, fmtRate(r && r.received), s.received, 'rate');
  meter(row.cells.deleted, fmtRate(r && r.deleted), s.deleted, 'rate');

  // The DLQ meter: a DLQ shows its own depth; a source shows its DLQ's.
  const dlq = q.isDeadLetterQueue ? q : byName.get(q.deadLetterQueue);
  const cell = row.cells.dlq;
  cell.className = 'm-dlq';
  if (!dlq) {
    replace(row.dlqMeter, h('span', { class: 'muted' }, q.deadLetterQueue ? `${q.deadLetterQueue} (missing)` : 'no DLQ'));
    row.dlqLink.hidden = true;
    row.growth.textContent = '';
    replace(row.level);
    return;
  }
  const level = dlq.level || 'ok';
  const growth = dlq.growth;
  replace(row.dlqMeter,
    h('span', { class: 'val' }, fmtInt(dlq.depth)), sparkline(dlq.series && dlq.series.depth, { kind: 'dlq', width: 52 }));
  replace(row.level, levelBadge(level), level !== 'ok' ? ' ' : null);
  row.growth.textContent = growth ? `+${fmtInt(growth.arrivals)} in ${Math.max(1, Math.round(growth.windowSeconds / 60))}m` : '';
  row.growth.classList.toggle('growing', !!growth && growth.arrivals > 0);
  if (level !== 'ok') cell.classList.add(`level-${level}`);
  if (q.isDeadLetterQueue) {
    row.dlqLink.hidden = true;
  } else {
    row.dlqLink.hidden = false;
    row.dlqLink.href = `#/dlq/${enc(dlq.name)}`;
    row.dlqLink.textContent = dlq.name;
    row.dlqLink.setAttribute('aria-label', `Triage ${dlq.name}, dead-letter queue of ${q.name}`);
  }
  cell.setAttribute('data-threshold', `${ov.thresholds.dlqWarn}/${ov.thresholds.dlqCritical}`);
}
