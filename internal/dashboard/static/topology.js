// Topology (#/topology): the AMQP front-end's exchanges, their bindings
// and the queues they route to, per virtual host, from
// GET /sluice/v1/amqp/topology. A queue with a dead-letter exchange gets a
// "dead letters" arrow to that exchange and on to the queues bound to it
// (its dead-letter queues), each with its depth coloured like the
// overview's DLQ meter. A broker without AMQP answers 404: the page says so.
//
// The drawing is nested lists with connecting lines, not a picture: it
// reads in order with a screen reader, every queue is a link, every
// exchange reference is a button that moves focus to that exchange, and
// it wraps down to phone width.
import { h, replace, api, enc, fmtInt, fmtDuration, fmtTime, badge, levelBadge, notice } from './dom.js';

const TOPOLOGY = '/sluice/v1/amqp/topology';
const THRESHOLDS = { dlqWarn: 50, dlqCritical: 200 };

export function render(main, _param, ctx) {
  document.title = 'Topology · Sluice';
  const status = h('div', { class: 'status-slot' });
  const summary = h('p', { class: 'summary', id: 'topology-summary' }, 'Loading the AMQP topology…');
  const body = h('div', { id: 'topology' });
  main.append(
    h('h1', {}, 'Topology'),
    h('p', { class: 'muted intro' }, 'AMQP exchanges, their bindings and the queues they route to. ',
      'A queue’s dead letters go to its dead-letter exchange and from there to the queues bound to it, its dead-letter queues (',
      badge('DLQ', 'dlq'), '). Queue names open the queue page.'),
    status, summary, body);

  let closed = false;
  let busy = false;
  let at = 0;
  let shapeKey = '';
  let updaters = [];
  let absent = false;

  const thresholds = () => (ctx.live.last && ctx.live.last.thresholds) || THRESHOLDS;

  const draw = (topo) => {
    const th = thresholds();
    const vhosts = [...(topo.vhosts || [])].sort((a, b) => (a.name === '/' ? -1 : b.name === '/' ? 1 : a.name.localeCompare(b.name)));
    const models = vhosts.map(model);
    // Rebuild only when the shape changed (exchanges, queues, bindings,
    // settings); otherwise update the numbers in place, so that keyboard
    // focus stays where it is.
    const key = JSON.stringify(vhosts.map(shape));
    if (key !== shapeKey) {
      shapeKey = key;
      updaters = [];
      const reg = (fn) => updaters.push(fn);
      replace(body, models.length ? models.map((m, i) => vhostSection(m, i, reg)) :
        h('p', { class: 'empty' }, 'No virtual hosts yet: nothing has been declared over AMQP.'));
    }
    const byQueue = new Map();
    for (const m of models) for (const q of m.vh.queues) byQueue.set(`${m.vh.name}\u0000${q.name}`, q);
    for (const fn of updaters) fn(byQueue, th);
    let dead = 0;
    let dlqs = 0;
    for (const m of models) {
      for (const n of m.dlqs) {
        dlqs++;
        dead += depth(m.queues.get(n));
      }
    }
    replace(summary, `${models.length} virtual host${models.length === 1 ? '' : 's'} · `,
      h('strong', {}, fmtInt(dead)), ` dead letter${dead === 1 ? '' : 's'} in ${dlqs} dead-letter queue${dlqs === 1 ? '' : 's'} · updated `,
      h('time', { datetime: new Date().toISOString() }, fmtTime(new Date().toISOString())));
  };

  const load = async (force) => {
    if (busy || absent || (!force && Date.now() - at < 4000)) return;
    busy = true;
    at = Date.now();
    try {
      const topo = await api(TOPOLOGY);
      if (closed) return;
      notice(status, '');
      draw(topo || {});
    } catch (e) {
      if (closed) return;
      if (e.status === 404) {
        // No AMQP front-end on this broker: say so once and stop asking.
        absent = true;
        replace(summary);
        replace(body, h('p', { class: 'notice notice-info', id: 'topology-absent' },
          'This broker does not serve an AMQP topology (no AMQP front-end). Queues created over SQS are on the ',
          h('a', { href: '#/' }, 'overview'), '.'));
      } else {
        notice(status, `Cannot load the topology: ${e.message}`, 'error');
      }
    } finally {
      busy = false;
    }
  };
  load(true);
  const un = ctx.live.subscribe(() => load(false));
  return () => {
    closed = true;
    un();
  };
}

function push(map, k, v) {
  const list = map.get(k);
  if (list) list.push(v);
  else map.set(k, [v]);
}

function depth(q) {
  return q ? (q.ready || 0) + (q.unacked || 0) : 0;
}

function level(n, th) {
  if (n >= th.dlqCritical) return 'critical';
  if (n >= th.dlqWarn) return 'warn';
  return 'ok';
}

// dlxOf is the exchange a queue dead-letters to, or null. An empty
// exchange with a dead-letter routing key is the default exchange (the
// key names the queue); empty without one is no dead-lettering.
function dlxOf(q) {
  if (q.deadLetterExchange) return q.deadLetterExchange;
  if (q.deadLetterRoutingKey) return '';
  return null;
}

// model indexes one vhost: bindings by source, queues by name, the
// exchanges used for dead letters and the queues they feed.
function model(vh) {
  vh = { name: vh.name, exchanges: vh.exchanges || [], queues: vh.queues || [], bindings: vh.bindings || [] };
  const exchanges = new Map(vh.exchanges.map((x) => [x.name, x]));
  const queues = new Map(vh.queues.map((q) => [q.name, q]));
  const out = new Map();
  const bound = new Set(); // queues with a binding from a named exchange
  for (const b of vh.bindings) {
    if (b.source === '') continue; // the default exchange's implicit bindings
    push(out, b.source, b);
    if (b.destinationType !== 'exchange') bound.add(b.destination);
  }
  for (const list of out.values()) list.sort((a, b) => a.routingKey.localeCompare(b.routingKey) || a.destination.localeCompare(b.destination));
  const dlxSources = new Map();
  for (const q of vh.queues) {
    const x = dlxOf(q);
    if (x !== null) push(dlxSources, x, q);
  }
  const dlqs = new Set();
  for (const [x, sources] of dlxSources) {
    for (const t of dlTargets(x, sources[0], out, queues)) if (t.queue) dlqs.add(t.name);
  }
  return { vh, exchanges, queues, out, bound, dlxSources, dlqs };
}

// dlTargets lists where dead letters sent to exchange x go: the queues and
// exchanges bound to it, or for the default exchange the queue the
// dead-letter routing key names.
function dlTargets(x, q, out, queues) {
  if (x === '') {
    const name = q.deadLetterRoutingKey;
    return [{ name, key: name, queue: true, exists: queues.has(name) }];
  }
  return (out.get(x) || []).map((b) => ({ name: b.destination, key: bindingKey(b), queue: b.destinationType !== 'exchange', exists: b.destinationType === 'exchange' || queues.has(b.destination) }));
}

// shape is everything drawn except the message counts.
function shape(vh) {
  return [vh.name, vh.exchanges, (vh.queues || []).map((q) => ({ ...q, ready: 0, unacked: 0, consumers: 0 })), vh.bindings];
}

function bindingKey(b) {
  const args = b.arguments && Object.keys(b.arguments).length ? b.arguments : null;
  if (args && ('x-match' in args || !b.routingKey)) {
    return Object.entries(args).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(', ');
  }
  return b.routingKey;
}

// group merges an exchange's bindings to the same destination: one line
// per queue or exchange, with all its keys.
function group(bindings) {
  const out = [];
  const at = new Map();
  for (const b of bindings) {
    const exchange = b.destinationType === 'exchange';
    const id = `${exchange ? 'x' : 'q'}\u0000${b.destination}`;
    let g = at.get(id);
    if (!g) {
      g = { destination: b.destination, exchange, keys: [] };
      at.set(id, g);
      out.push(g);
    }
    const k = bindingKey(b);
    if (!g.keys.includes(k)) g.keys.push(k);
  }
  return out;
}

function xLabel(name) {
  return name === '' ? '(default exchange)' : name;
}

const BUILTIN = /^amq\.(direct|fanout|topic|headers|match)$/;

function vhostSection(m, vi, reg) {
  const { vh, exchanges, out, bound, dlxSources, dlqs } = m;
  const ids = new Map(); // exchange name → id of its heading
  const shown = [];
  const idle = [];
  const names = [...exchanges.keys()];
  // The exchanges that matter first: declared ones, then dead-letter
  // exchanges and built-ins in use; unused built-ins and the default
  // exchange are listed in one line.
  for (const name of names) {
    const used = out.has(name) || dlxSources.has(name);
    // The default exchange's bindings are implicit (every queue by its
    // name): it is not drawn; see "Queues without bindings".
    if (name === '') continue;
    if (BUILTIN.test(name) && !used) idle.push(name);
    else shown.push(name);
  }
  // Entry exchanges (where publishers publish) first, then the ones
  // other exchanges feed (bindings, alternates), then dead-letter
  // exchanges: roughly the way messages flow.
  const fed = new Set();
  for (const [, list] of out) for (const b of list) if (b.destinationType === 'exchange') fed.add(b.destination);
  for (const x of exchanges.values()) if (x.alternateExchange) fed.add(x.alternateExchange);
  const rank = (n) => (dlxSources.has(n) ? 2 : fed.has(n) ? 1 : 0);
  shown.sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  shown.forEach((n, i) => ids.set(n, `x-${vi}-${i}`));

  const jump = (name) => {
    const id = ids.get(name);
    if (!id) return h('span', { class: 'x-ref' + (name === '' ? '' : ' missing') }, xLabel(name));
    return h('button', {
      type: 'button', class: 'x-ref', 'data-key': `jump:${vi}:${name}`, 'aria-label': `Go to exchange ${xLabel(name)}`,
      onclick: () => {
        const el = document.getElementById(id);
        if (el) {
          el.scrollIntoView({ block: 'center' });
          el.focus({ preventScroll: true });
        }
      },
    }, xLabel(name));
  };

  const missingX = (name) => h('span', { class: 'x-ref missing' }, h('code', {}, name), ' ', badge('missing', 'critical'));

  // The dead-letter path of a source queue: → DLX → its queues.
  const dlPath = (q) => {
    const x = dlxOf(q);
    if (x === null) return null;
    const exists = x === '' || exchanges.has(x);
    const targets = exists ? dlTargets(x, q, out, m.queues) : [];
    const xd = exchanges.get(x);
    return h('div', { class: 'dl-path', 'data-dlx': x },
      h('span', { class: 'dl-label' }, 'dead letters', q.deadLetterRoutingKey ? h('span', { class: 'dl-key' }, ' with key ', h('code', {}, q.deadLetterRoutingKey)) : null),
      h('span', { class: 'arrow', 'aria-hidden': 'true' }, '⇢'), h('span', { class: 'visually-hidden' }, ' go to exchange '),
      exists ? jump(x) : missingX(x), xd ? h('span', { class: 'x-type' }, xd.type) : null,
      exists && targets.length === 0 ? h('span', { class: 'dl-none' }, ' ', badge('no queue bound', 'warn'), ' dead letters are dropped') : null,
      targets.length ? h('ul', { class: 'dl-targets' }, targets.map((t) => h('li', {},
        h('span', { class: 'arrow', 'aria-hidden': 'true' }, '→'), h('span', { class: 'visually-hidden' }, ' then to '),
        t.queue ? dlqChip(vh.name, t, reg) : jump(t.name)))) : null);
  };

  // A queue as a route's destination: name, flags, counts, settings and
  // its dead-letter path.
  const queueNode = (name, keyPrefix) => {
    const q = m.queues.get(name);
    if (!q) return h('div', { class: 'q-node' }, h('code', {}, name), ' ', badge('missing', 'critical'));
    const isDLQ = dlqs.has(name);
    const counts = h('span', { class: 'q-counts' });
    const node = h('div', { class: 'q-node', 'data-queue': name },
      h('div', { class: 'q-head' },
        h('a', { href: `#/queue/${enc(q.engineQueue || name)}`, class: 'q-link', 'data-key': `${keyPrefix}:${name}` }, name),
        isDLQ ? badge('DLQ', 'dlq') : null,
        q.exclusive ? badge('exclusive', 'muted') : null,
        q.autoDelete ? badge('auto-delete', 'muted') : null,
        !q.durable ? badge('transient', 'muted') : null,
        isDLQ ? h('a', { class: 'triage', href: `#/dlq/${enc(q.engineQueue || name)}`, 'aria-label': `Triage dead letters of ${name}` }, 'Triage') : null),
      counts, settings(q), dlPath(q));
    reg((byQueue, th) => {
      const cur = byQueue.get(`${vh.name}\u0000${name}`) || q;
      const d = depth(cur);
      const lvl = isDLQ ? level(d, th) : 'ok';
      replace(counts,
        isDLQ ? h('span', { class: 'val' }, `${fmtInt(d)} dead letter${d === 1 ? '' : 's'}`) : null,
        isDLQ && lvl !== 'ok' ? [' ', levelBadge(lvl)] : null,
        isDLQ ? ' · ' : null,
        `${fmtInt(cur.ready)} ready · ${fmtInt(cur.unacked)} unacked · ${fmtInt(cur.consumers)} consumer${cur.consumers === 1 ? '' : 's'}`);
      node.classList.toggle('level-warn', lvl === 'warn');
      node.classList.toggle('level-critical', lvl === 'critical');
    });
    return node;
  };

  const dlqChip = (vhost, t, reg2) => {
    if (!t.exists) return h('span', { class: 'dlq-chip' }, h('code', {}, t.name), ' ', badge('missing', 'critical'));
    const q = m.queues.get(t.name);
    const val = h('span', { class: 'val' });
    const lvlEl = h('span', { class: 'lvl' });
    const chip = h('span', { class: 'dlq-chip', 'data-dlq': t.name },
      h('a', { href: `#/queue/${enc(q.engineQueue || t.name)}`, 'data-key': `dlq:${vi}:${t.name}` }, t.name), ' ', badge('DLQ', 'dlq'), ' ', val, lvlEl);
    reg2((byQueue, th) => {
      const cur = byQueue.get(`${vhost}\u0000${t.name}`) || q;
      const d = depth(cur);
      const lvl = level(d, th);
      val.textContent = fmtInt(d);
      val.title = `${fmtInt(d)} messages (ready and unacked)`;
      replace(lvlEl, lvl !== 'ok' ? [' ', levelBadge(lvl)] : null);
      chip.classList.toggle('level-warn', lvl === 'warn');
      chip.classList.toggle('level-critical', lvl === 'critical');
    });
    return chip;
  };

  const card = (name) => {
    const x = exchanges.get(name);
    const routes = out.get(name) || [];
    const sources = dlxSources.get(name) || [];
    const flags = [
      x.durable ? null : badge('transient', 'muted'),
      x.autoDelete ? badge('auto-delete', 'muted') : null,
      x.internal ? badge('internal', 'muted') : null,
      sources.length ? badge('DLX', 'dlq') : null,
    ];
    const fanout = x.type === 'fanout';
    return h('li', { class: 'x-card' + (sources.length ? ' is-dlx' : ''), 'data-exchange': name },
      h('h3', { class: 'x-head', id: ids.get(name), tabindex: '-1' },
        h('span', { class: `x-type t-${x.type}` }, x.type), ' ', h('span', { class: 'x-name' }, xLabel(name)), ' ', flags),
      sources.length ? h('p', { class: 'x-note' }, 'Dead-letter exchange of ',
        sources.map((q, i) => [i ? ', ' : '', h('code', {}, q.name)])) : null,
      x.alternateExchange ? h('p', { class: 'x-note' }, 'Unroutable messages go to ',
        exchanges.has(x.alternateExchange) ? jump(x.alternateExchange) : missingX(x.alternateExchange), ' (alternate exchange)') : null,
      routes.length ? h('ul', { class: 'routes', 'aria-label': `Bindings of ${xLabel(name)}` }, group(routes).map((g) =>
        h('li', { class: 'route', 'data-dest': g.destination },
          h('span', { class: 'keys' }, fanout ? h('span', { class: 'key any' }, 'any key') :
            g.keys.map((k) => h('span', { class: 'key' }, k === '' ? '(empty key)' : h('code', {}, k)))),
          h('span', { class: 'arrow', 'aria-hidden': 'true' }, '→'), h('span', { class: 'visually-hidden' }, ' routes to '),
          g.exchange ? h('div', { class: 'x-dest' }, 'exchange ', jump(g.destination)) : queueNode(g.destination, `q:${vi}:${name}`)))) :
        h('p', { class: 'x-note muted' }, x.alternateExchange ? 'No bindings.' : 'No bindings: messages published here are dropped.'));
  };

  const byName = vh.queues.filter((q) => !bound.has(q.name)).map((q) => q.name).sort();
  const nq = vh.queues.length;
  const nb = vh.bindings.filter((b) => b.source !== '').length;
  return h('section', { class: 'vhost', 'aria-labelledby': `vh-${vi}`, 'data-vhost': vh.name },
    h('h2', { id: `vh-${vi}` }, 'Virtual host ', h('code', {}, vh.name)),
    h('p', { class: 'muted small' }, `${shown.length} exchange${shown.length === 1 ? '' : 's'} in use · ${nq} queue${nq === 1 ? '' : 's'} · ${nb} binding${nb === 1 ? '' : 's'}`),
    shown.length ? h('ul', { class: 'x-list' }, shown.map(card)) : null,
    byName.length ? h('section', { class: 'by-name', 'aria-labelledby': `byname-${vi}` },
      h('h3', { id: `byname-${vi}` }, 'Queues without bindings'),
      h('p', { class: 'muted small' }, 'Reached through the default exchange by their name only.'),
      h('ul', { class: 'routes plain' }, byName.map((n) => h('li', { class: 'route' }, queueNode(n, `n:${vi}`))))) : null,
    !nq && !shown.length ? h('p', { class: 'empty' }, 'Nothing declared in this virtual host yet.') : null,
    idle.length ? h('p', { class: 'muted small idle' }, 'Built-in exchanges without bindings: ',
      idle.map((n, i) => [i ? ', ' : '', h('code', {}, n)])) : null);
}

// settings are the queue arguments worth seeing next to the queue.
function settings(q) {
  const parts = [];
  if (q.messageTTLMs !== null && q.messageTTLMs !== undefined) parts.push(`TTL ${fmtDuration(q.messageTTLMs / 1000)}`);
  if (q.maxLength !== null && q.maxLength !== undefined) parts.push(`max ${fmtInt(q.maxLength)}${q.overflow ? ` (${q.overflow})` : ''}`);
  if (q.deliveryLimit !== null && q.deliveryLimit !== undefined) parts.push(`delivery limit ${fmtInt(q.deliveryLimit)}`);
  return parts.length ? h('span', { class: 'q-settings' }, parts.join(' · ')) : null;
}
