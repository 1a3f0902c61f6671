// Queue page (#/queue/NAME): configuration, charts of depth, age and rates
// over the history, processing-time percentiles, redeliveries and dead
// letters by reason; in cluster mode, where the queue is replicated (its
// leader, the voters, the standby learners and each one's lag).
import { h, replace, api, enc, fmtInt, fmtAge, fmtRate, fmtDuration, fmtTime, fmtBytes, badge, levelBadge, notice } from './dom.js';
import { lineChart } from './charts.js';
import { queueActions } from './actions.js';
import { CLUSTER } from './cluster.js';

export function render(main, name, ctx) {
  document.title = `${name} · Sluice`;
  const status = h('div', { class: 'status-slot' });
  const head = h('div', { class: 'page-head' });
  const tiles = h('div', { class: 'tiles' });
  const charts = h('div', { class: 'charts' });
  const side = h('div', { class: 'side' });
  const repl = h('section', { id: 'queue-replication', class: 'replication', hidden: true, 'aria-labelledby': 'repl-h' });
  let current = null;
  main.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/' }, 'Overview'), ' / ', name),
    head, queueActions(name, () => current), status, tiles, repl,
    h('div', { class: 'queue-grid' }, h('section', { 'aria-labelledby': 'charts-h' }, h('h2', { id: 'charts-h' }, 'Over time'), charts), side));

  let ctrl = null;
  let busy = false;
  let loaded = false;
  // Only in cluster mode (ctx.clustered): a single node answers 404.
  // With shards, the queue's own shard: its leader and members are not
  // shard 0's (the cluster view's).
  const loadReplication = async (q, signal) => {
    if (!(await ctx.clustered)) return;
    const shard = q.shard ?? undefined;
    try {
      const v = shard === undefined ? (await api(CLUSTER, { signal })).view : await api(`${CLUSTER}/shards/${shard}`, { signal });
      replicationSection(repl, v, shard);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 503 && shard !== undefined) replicationSection(repl, null, shard);
      else repl.hidden = true;
    }
  };
  const load = async () => {
    if (busy) return;
    busy = true;
    ctrl = new AbortController();
    try {
      const q = await api(`/sluice/v1/dashboard/queues/${enc(name)}`, { signal: ctrl.signal });
      draw(q);
      await loadReplication(q, ctrl.signal);
      loaded = true;
      notice(status, '');
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 404) {
        replace(head, h('h1', {}, name));
        notice(status, 'This queue does not exist (it may have been deleted).', 'error');
      } else if (!loaded) {
        notice(status, `Cannot load the queue: ${e.message}`, 'error');
      }
    } finally {
      busy = false;
    }
  };

  // Parts with links are rebuilt only when their data changed, so that
  // keyboard focus is not lost on every update.
  let headKey = '';
  let sideKey = '';
  const draw = (q) => {
    current = q;
    const hk = JSON.stringify([q.name, q.fifo, q.isDeadLetterQueue]);
    if (hk !== headKey) {
      headKey = hk;
      replace(head, h('h1', {}, q.name, ' ', q.fifo ? badge('FIFO', 'info') : null, q.isDeadLetterQueue ? badge('DLQ', 'dlq') : null),
        q.isDeadLetterQueue ? h('a', { class: 'button primary', href: `#/dlq/${enc(q.name)}` }, 'Triage dead letters') : null);
    }
    const r = q.rates;
    replace(tiles,
      tile('Visible', fmtInt(q.visible)),
      tile('In flight', fmtInt(q.inflight)),
      tile('Delayed', fmtInt(q.delayed)),
      tile('Waiting receives', fmtInt(q.waiting)),
      tile('Oldest message', fmtAge(q.oldestAgeSeconds)),
      tile('Sent', fmtRate(r && r.sent)),
      tile('Received', fmtRate(r && r.received)),
      tile('Deleted', fmtRate(r && r.deleted)),
      q.isDeadLetterQueue ? tile('Dead letters', fmtInt(q.depth), q.level, q.growth ? `+${fmtInt(q.growth.arrivals)} in ${Math.max(1, Math.round(q.growth.windowSeconds / 60))}m` : '')
        : tile('Dead-lettered', fmtRate(r && r.deadLettered)));
    const s = q.series;
    const mins = Math.round(q.historySeconds / 60);
    replace(charts,
      lineChart({ title: `Depth (last ${mins} min)`, t: s.t, fmt: (v) => fmtInt(v), series: [
        { name: 'Visible', values: s.visible, cls: 'c1' },
        { name: 'In flight', values: s.inflight, cls: 'c2' },
        { name: 'Delayed', values: s.delayed, cls: 'c3' }] }),
      lineChart({ title: 'Oldest message age', t: s.t, fmt: fmtAge, series: [{ name: 'Age', values: s.oldestAge, cls: 'c2' }] }),
      lineChart({ title: 'Rates (per second)', t: s.t, fmt: (v) => (v >= 10 ? Math.round(v) : +v.toFixed(1)).toString(), series: [
        { name: 'Sent', values: s.sent, cls: 'c1' },
        { name: 'Received', values: s.received, cls: 'c2' },
        { name: 'Deleted', values: s.deleted, cls: 'c3' }] }),
      lineChart({ title: 'Redeliveries and dead letters (per second)', t: s.t, fmt: (v) => (+v.toFixed(2)).toString(), series: [
        { name: 'Redelivered', values: s.redelivered, cls: 'c4' },
        { name: 'Dead-lettered', values: s.deadLettered, cls: 'c5' }] }));
    const sk = JSON.stringify([q.config, q.tags, q.sources, q.processing, q.redeliveries, q.deadLettersByReason, q.arrivalsByReason, q.breakdown]);
    if (sk === sideKey) return;
    sideKey = sk;
    replace(side, configSection(q), processingSection(q), redeliverySection(q), reasonsSection(q), breakdownSection(q));
  };

  load();
  const un = ctx.live.subscribe(() => load());
  return () => {
    un();
    if (ctrl) ctrl.abort();
  };
}

// replicationSection shows where the queue's writes go, from the view of
// its Raft group: the one group's (the cluster view) without shards, else
// its shard's. A write is acknowledged once a majority of the voters has
// it, and the standby learners receive it too.
function replicationSection(el, v, shard) {
  el.hidden = false;
  const sharded = shard !== undefined;
  if (!v) {
    replace(el, h('h2', { id: 'repl-h' }, 'Replication'),
      h('p', { class: 'muted' }, sharded
        ? `No leader of shard ${shard} serves its view yet (an election, or its leader is unreachable).`
        : 'No leader serves the cluster view yet (an election, or the leader is unreachable).'));
    return;
  }
  const ids = (pred) => v.members.filter(pred).map((m) => m.id);
  const list = (xs) => (xs.length ? xs.join(', ') : '—');
  const voters = ids((m) => m.membership === 'voter');
  const standby = ids((m) => m.membership !== 'voter');
  replace(el, h('h2', { id: 'repl-h' }, 'Replication'), dl([
    sharded ? ['Shard', h('span', { class: 'repl-shard' }, `shard ${shard}`)] : null,
    ['Leader', h('span', { class: 'repl-leader' }, `node ${v.leader}`)],
    ['Voters', h('span', { class: 'repl-voters', title: 'A write is acknowledged once a majority of these has it on disk' },
      `${list(voters)} (replication factor ${v.replication_factor || voters.length})`)],
    ['Standby learners', h('span', { class: 'repl-standby', title: 'Receive every write; one replaces a voter that goes silent' }, list(standby))],
    ['Lag (log entries)', h('span', { class: 'repl-lag' }, v.members.filter((m) => m.id !== v.leader)
      .map((m) => `node ${m.id}: ${fmtInt(m.lag)}${m.in_sync ? '' : ' (not in sync)'}`).join(' · ') || '—')],
  ]), h('p', { class: 'muted' }, sharded
    ? `Shard ${shard}'s Raft group holds this queue: every queue of the shard shares these. `
    : 'One Raft group holds every queue: these are the same for all queues. ',
  h('a', { href: '#/cluster' }, 'Cluster page')));
}

function tile(label, value, level, extra) {
  return h('div', { class: `tile ${level && level !== 'ok' ? 'level-' + level : ''}` },
    h('span', { class: 'tile-label' }, label), h('span', { class: 'tile-value' }, value, ' ', levelBadge(level)),
    extra ? h('span', { class: 'tile-extra' }, extra) : null);
}

function dl(pairs) {
  return h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

function configSection(q) {
  const c = q.config;
  const dlq = c.deadLetter;
  const rp = c.retry;
  const tags = Object.entries(q.tags || {});
  return h('section', { 'aria-labelledby': 'cfg-h' }, h('h2', { id: 'cfg-h' }, 'Configuration'), dl([
    ['Visibility timeout', fmtDuration(c.visibilityTimeoutSeconds)],
    ['Dead-letter queue', dlq ? (dlq.routed ? 'routed (AMQP dead-letter exchange)' : h('a', { href: `#/dlq/${enc(dlq.target)}` }, dlq.target)) : h('span', { class: 'muted' }, 'none')],
    ['maxReceiveCount', dlq ? (dlq.maxReceiveCount || 'no limit') : '—'],
    ['Retry policy', rp ? `${rp.strategy}, base ${fmtDuration(rp.baseSeconds)}, cap ${fmtDuration(rp.capSeconds)}` : 'none (visible again when the lease ends)'],
    ['Retention', fmtDuration(c.retentionSeconds)],
    ['Delivery delay', fmtDuration(c.delaySeconds)],
    ['Receive wait', fmtDuration(c.receiveWaitSeconds)],
    ['Maximum message size', fmtBytes(c.maxMessageSize)],
    c.messageTtlSeconds !== undefined && ['Message TTL', fmtDuration(c.messageTtlSeconds)],
    c.maxLength && ['Maximum length', `${fmtInt(c.maxLength)} (${c.overflow || 'drop-head'})`],
    c.paused && ['Delivery', h('strong', {}, 'paused by an operator (messages held visible; resume with sluice queues resume)')],
    c.requeue && ['Requeue (AMQP nack)', c.requeue],
    c.crashLimit && ['Crash-loop quarantine', `${c.crashLimit} deliveries without a verdict within ${fmtDuration(c.crashWindowSeconds)}`],
    c.retryBudgetPercent && ['Retry budget', `${c.retryBudgetPercent}% of first deliveries`],
    c.unknownFailure && ['Unclassified failure (AMQP nack)', c.unknownFailure === 'deadletter' ? 'dead-lettered at once' : 'retried'],
    c.fifo && ['FIFO', `dedup ${c.contentBasedDeduplication ? 'content-based' : 'by id'}, scope ${c.deduplicationScope}, throughput ${c.fifoThroughputLimit || 'perQueue'}`],
    q.isDeadLetterQueue && ['Dead-letter queue of', q.sources.map((s, i) => [i ? ', ' : '', h('a', { href: `#/queue/${enc(s)}` }, s)])],
    ['Created', fmtTime(q.createdAt)],
    tags.length > 0 && ['Tags', tags.map(([k, v]) => `${k}=${v}`).join(', ')],
  ]));
}

function processingSection(q) {
  const p = q.processing;
  const mins = Math.round(p.windowSeconds / 60);
  return h('section', { 'aria-labelledby': 'proc-h' }, h('h2', { id: 'proc-h' }, 'Processing time'),
    p.samples === 0
      ? h('p', { class: 'muted' }, `No message deleted in the last ${mins} minutes.`)
      : [h('p', { class: 'muted small' }, `From receive to delete, over ${fmtInt(p.samples)} messages in the last ${mins} minutes.`),
        h('table', { class: 'mini', id: 'percentiles' },
          h('thead', {}, h('tr', {}, ['p50', 'p90', 'p99', 'max'].map((x) => h('th', { scope: 'col' }, x)))),
          h('tbody', {}, h('tr', {}, [p.p50Seconds, p.p90Seconds, p.p99Seconds, p.maxSeconds].map((v) => h('td', {}, fmtDuration(v))))))],
    q.config.visibilityTimeoutSeconds < p.p99Seconds
      ? h('p', { class: 'notice notice-error' }, `The visibility timeout (${fmtDuration(q.config.visibilityTimeoutSeconds)}) is shorter than p99: duplicate deliveries are coming. See the `, h('a', { href: '#/advisor' }, 'advisor'), '.')
      : null);
}

function redeliverySection(q) {
  const r = q.redeliveries;
  const share = r.receivedInWindow > 0 ? ` (${((100 * r.inWindow) / r.receivedInWindow).toFixed(1)}% of receives)` : '';
  return h('section', { 'aria-labelledby': 'redel-h' }, h('h2', { id: 'redel-h' }, 'Redeliveries'), dl([
    [`Last ${Math.max(1, Math.round(r.windowSeconds / 60))} min`, `${fmtInt(r.inWindow)}${share}`],
    ['Since the broker started', fmtInt(r.total)],
  ]));
}

function countTable(id, caption, counts) {
  const entries = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]);
  if (entries.length === 0) return h('p', { class: 'muted' }, `${caption}: none.`);
  return h('table', { class: 'mini', id },
    h('caption', {}, caption),
    h('tbody', {}, entries.map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, fmtInt(v))))));
}

function reasonsSection(q) {
  return h('section', { 'aria-labelledby': 'dead-h' }, h('h2', { id: 'dead-h' }, 'Dead letters by reason'),
    h('p', { class: 'muted small' }, 'Since the broker started.'),
    countTable('dead-from', 'Dead-lettered from this queue', q.deadLettersByReason),
    q.isDeadLetterQueue ? countTable('dead-into', 'Arrived in this queue', q.arrivalsByReason) : null);
}

function breakdownSection(q) {
  const b = q.breakdown;
  if (!b) return null;
  return h('section', { 'aria-labelledby': 'bd-h' }, h('h2', { id: 'bd-h' }, 'What is in it now'),
    h('p', { class: 'muted small' }, `${fmtInt(b.scanned)} messages${b.truncated ? ' (the oldest; there are more)' : ''}.`),
    countTable('bd-classes', 'By error class', b.errorClasses),
    countTable('bd-reasons', 'By reason', b.reasons),
    countTable('bd-sources', 'By source queue', b.sources));
}
