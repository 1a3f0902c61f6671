// The Sluice dashboard: a hash-routed single-page app. Pages render into
// <main>; live data comes from the server-sent event stream, falling back
// to polling the overview when the stream is unavailable.
import { h, replace, api } from './dom.js';
import * as overview from './overview.js';
import * as queue from './queue.js';
import * as dlq from './dlq.js';
import * as advisor from './advisor.js';
import * as topology from './topology.js';
import * as cluster from './cluster.js';

const EVENTS = '/sluice/v1/dashboard/events';
const OVERVIEW = '/sluice/v1/dashboard/overview';
const ALERTS = '/sluice/v1/alerts';

// Live holds the latest overview and tells subscribers of every new one.
class Live {
  constructor(onMode) {
    this.last = null;
    this.subs = new Set();
    this.onMode = onMode;
    this.es = null;
    this.pollGen = 0;
    this.retry = null;
  }

  subscribe(fn) {
    this.subs.add(fn);
    if (this.last) fn(this.last);
    return () => this.subs.delete(fn);
  }

  publish(data) {
    this.last = data;
    for (const fn of this.subs) {
      try {
        fn(data);
      } catch (e) {
        console.error('dashboard: a page failed to update', e);
      }
    }
  }

  interval() {
    return Math.max(1000, ((this.last && this.last.sampleIntervalSeconds) || 5) * 1000);
  }

  start() {
    clearTimeout(this.retry);
    if (!('EventSource' in window)) {
      this.poll();
      return;
    }
    const es = new EventSource(EVENTS);
    this.es = es;
    es.addEventListener('overview', (e) => {
      this.pollGen++; // a working stream stops the polling
      this.onMode('live');
      this.publish(JSON.parse(e.data));
    });
    es.onerror = () => {
      // The stream is gone (broker restarting, a proxy that buffers, too
      // many streams): poll, and try the stream again later.
      es.close();
      if (this.es === es) this.es = null;
      this.poll();
      this.retry = setTimeout(() => this.start(), 30000);
    };
  }

  poll() {
    const gen = ++this.pollGen;
    const tick = async () => {
      if (gen !== this.pollGen) return;
      try {
        const data = await api(OVERVIEW);
        if (gen !== this.pollGen) return;
        this.onMode('polling');
        this.publish(data);
      } catch {
        if (gen !== this.pollGen) return;
        this.onMode('offline');
      }
      setTimeout(tick, this.interval());
    };
    tick();
  }

  // refresh fetches the overview at once (after an action changed it).
  async refresh() {
    try {
      this.publish(await api(OVERVIEW));
    } catch {
      /* the next event or poll will tell */
    }
  }
}

// Alerts follows GET /sluice/v1/alerts. available is null until the first
// answer, false when the broker does not serve alerts (404).
class Alerts {
  constructor() {
    this.available = null;
    this.states = [];
    this.subs = new Set();
    this.fetchedAt = 0;
    this.busy = false;
  }

  subscribe(fn) {
    this.subs.add(fn);
    if (this.available !== null) fn(this);
    return () => this.subs.delete(fn);
  }

  firing() {
    return this.states.filter((s) => s.status === 'firing');
  }

  async update(force = false) {
    const now = Date.now();
    const wait = this.available === false ? 60000 : 4000;
    if (this.busy || (!force && now - this.fetchedAt < wait)) return;
    this.busy = true;
    this.fetchedAt = now;
    try {
      const d = await api(ALERTS);
      // {"alerts": [...]}, or a bare array.
      this.states = Array.isArray(d) ? d : (d && d.alerts) || [];
      this.available = true;
    } catch (e) {
      if (e.status === 404 || e.status === 405) {
        this.available = false;
        this.states = [];
      } else if (this.available === null) {
        this.available = false;
      }
    } finally {
      this.busy = false;
    }
    for (const fn of this.subs) {
      try {
        fn(this);
      } catch (e) {
        console.error('dashboard: alerts update failed', e);
      }
    }
  }
}

const routes = [
  { re: /^#?\/?$/, page: overview, nav: 'overview' },
  { re: /^#\/queue\/(.+)$/, page: queue, nav: 'overview' },
  { re: /^#\/dlq\/(.+)$/, page: dlq, nav: 'overview' },
  { re: /^#\/advisor$/, page: advisor, nav: 'advisor' },
  { re: /^#\/topology$/, page: topology, nav: 'topology' },
  { re: /^#\/cluster$/, page: cluster, nav: 'cluster' },
];

function setMode(mode) {
  const text = { live: 'Live', polling: 'Polling', offline: 'Broker unreachable' }[mode] || 'Connecting…';
  const el = document.getElementById('live');
  el.dataset.mode = mode;
  replace(document.getElementById('live-text'), text);
}

function main() {
  const live = new Live(setMode);
  const alerts = new Alerts();
  live.subscribe(() => alerts.update());
  // The Cluster page is in the nav only in cluster mode, where every
  // answer of the leader's server names its term (X-Sluice-Term), this
  // app's own files included. ctx.clustered resolves to whether this is a
  // cluster, so pages ask cluster-only endpoints (GET /sluice/v1/cluster
  // answers 404 on a single node) only there.
  const clustered = fetch('favicon.svg', { method: 'HEAD', cache: 'no-store' })
    .then((r) => !!r.headers.get('X-Sluice-Term'), () => false);
  const ctx = { live, alerts, clustered };
  const mainEl = document.getElementById('main');
  let cleanup = null;
  let first = true;

  const route = () => {
    if (cleanup) cleanup();
    cleanup = null;
    const hash = location.hash || '#/';
    let match = null;
    let r = null;
    for (const c of routes) {
      match = hash.match(c.re);
      if (match) {
        r = c;
        break;
      }
    }
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (r && a.dataset.nav === r.nav) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    replace(mainEl);
    if (!r) {
      document.title = 'Not found · Sluice';
      mainEl.append(h('h1', {}, 'Not found'), h('p', {}, 'No such page. ', h('a', { href: '#/' }, 'Back to the overview.')));
    } else {
      const param = match[1] ? decodeURIComponent(match[1]) : undefined;
      cleanup = r.page.render(mainEl, param, ctx) || null;
    }
    if (!first) mainEl.focus({ preventScroll: false });
    first = false;
  };
  window.addEventListener('hashchange', route);
  route();
  live.start();
  const navCluster = document.getElementById('nav-cluster');
  clustered.then((yes) => {
    if (yes) navCluster.hidden = false;
    navCluster.dataset.probed = '1';
  });
}

main();
