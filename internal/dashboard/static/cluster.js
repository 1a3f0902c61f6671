// Cluster (#/cluster): in cluster mode, every member with its role, its
// membership (voter, or learner: until the leader promotes it, or a
// standby beyond the replication factor), whether it is in sync, term,
// commit and applied index, and how far its Raft log is behind the
// leader's; a member whose Raft node stopped (a failed write) is marked
// stopped and named in a warning. The data is GET /sluice/v1/cluster, which the node this
// browser talks to answers itself (with the leader's view of the
// members); a single node answers 404 and the page says so. With
// [cluster] shards above 1, a second table lists each shard (its own Raft
// group: leader, term, this node's role, indexes and members).
import { h, replace, api, fmtInt, badge, notice } from './dom.js';

export const CLUSTER = '/sluice/v1/cluster';

const SHARD_COLUMNS = [
  ['Shard', 'A Raft group of its own; each SQS queue lives on one shard'],
  ['Leader', 'The node whose engine serves this shard’s queues'],
  ['Term', 'The shard’s Raft term, as this node knows it'],
  ['This node', 'This node’s role in the shard'],
  ['Commit', 'Highest log index this node knows committed in the shard'],
  ['Applied', 'Highest log index of the shard applied on this node'],
  ['Voters', 'The shard’s voting members'],
  ['Learners', 'Members receiving the shard’s log without voting'],
];

const COLUMNS = [
  ['Node', ''],
  ['Role', 'As the member last reported it; stopped: a write of its Raft log or state store failed (it answers the leader’s probe so)'],
  ['Membership', 'Voter, or learner: receiving the log without voting, until the leader promotes it (once caught up, while the voters are fewer than the replication factor); a learner beyond the factor is a standby that replaces a silent voter'],
  ['In sync', 'The leader replicates to it normally, heard from it recently, and its log is close to the commit index'],
  ['Raft address', ''],
  ['Term', 'The Raft term the member is in'],
  ['Commit', 'Highest log index the member knows committed'],
  ['Applied', 'Highest log index applied to the member’s state'],
  ['Match', 'Highest log index the leader knows is on the member'],
  ['Lag', 'Entries the member’s log is behind the leader’s last index'],
  ['Clock', 'The member’s wall clock minus the cluster’s (the leader’s engine clock), as it measured it at its last report; the leader’s is its own clock minus the cluster’s, which it steers toward the median of the voters’ clocks'],
  ['Reported', 'Age of the member’s last report to the leader'],
];

function offset(ms) {
  if (ms === undefined || ms === null) return '—';
  return `${ms > 0 ? '+' : ''}${ms.toFixed(1)} ms`;
}

function ago(ms) {
  if (ms === undefined || ms === null) return 'never';
  if (ms < 1000) return 'now';
  return `${Math.round(ms / 1000)}s ago`;
}

export function render(main, _param, ctx) {
  document.title = 'Cluster · Sluice';
  const status = h('div', { class: 'status-slot' });
  const summary = h('div', { class: 'tiles', id: 'cluster-summary' });
  const tbody = h('tbody', {});
  const table = h('table', { class: 'findings members', id: 'cluster-members' },
    h('caption', {}, 'Every member, as the leader sees it. Lag counts log entries not yet on the member.'),
    h('thead', {}, h('tr', {}, COLUMNS.map(([c, title]) => h('th', { scope: 'col', title }, c)))), tbody);
  const shardBody = h('tbody', {});
  const shards = h('div', { class: 'table-wrap', hidden: true },
    h('table', { class: 'findings shards', id: 'cluster-shards' },
      h('caption', {}, 'Every shard, as this node sees it: each elects its own leader among its voters; a queue’s page shows its shard’s members and their lag.'),
      h('thead', {}, h('tr', {}, SHARD_COLUMNS.map(([c, title]) => h('th', { scope: 'col', title }, c)))), shardBody));
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Cluster')),
    h('p', { class: 'muted' }, 'The Raft group this broker runs in, from ', h('code', {}, 'GET /sluice/v1/cluster'),
      '. Each node’s own view: ', h('code', {}, 'sluice cluster status'), ' and its ', h('code', {}, 'sluice_raft_*'), ' metrics.'),
    status, summary, h('div', { class: 'table-wrap' }, table), shards);

  const drawShards = (list) => {
    shards.hidden = !list || list.length === 0;
    const ids = (v) => (v && v.length ? v.join(', ') : '—');
    replace(shardBody, (list || []).map((sh) => h('tr', { 'data-shard': sh.shard },
      h('th', { scope: 'row', 'data-label': 'Shard' }, String(sh.shard)),
      h('td', { 'data-label': 'Leader', class: 's-leader' }, sh.leader ? String(sh.leader) : badge('none', 'warn')),
      h('td', { 'data-label': 'Term', class: 's-term' }, String(sh.term)),
      h('td', { 'data-label': 'This node', class: 's-role' }, badge(sh.role, sh.role === 'leader' ? 'info' : sh.role === 'follower' ? 'ok' : 'warn')),
      h('td', { 'data-label': 'Commit', class: 's-commit' }, fmtInt(sh.commit)),
      h('td', { 'data-label': 'Applied', class: 's-applied' }, fmtInt(sh.applied)),
      h('td', { 'data-label': 'Voters', class: 's-voters' }, ids(sh.voters)),
      h('td', { 'data-label': 'Learners', class: 's-learners' }, ids(sh.learners)))));
  };

  const draw = (rep) => {
    drawShards(rep.shards);
    const me = rep.node;
    const v = rep.view;
    const leader = v ? v.leader : me.leader;
    replace(summary,
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'This node'),
        h('span', { class: 'tile-value', id: 'cluster-self' }, `${me.id} (${me.role})`)),
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Leader'),
        h('span', { class: 'tile-value', id: 'cluster-leader' }, leader ? String(leader) : 'none')),
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Term'),
        h('span', { class: 'tile-value', id: 'cluster-term' }, String(v ? v.term : me.term))),
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Leader’s last index'),
        h('span', { class: 'tile-value' }, v ? fmtInt(v.last_index) : '—')),
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Replication factor'),
        h('span', { class: 'tile-value', id: 'cluster-rf', title: 'Voters the leader keeps; a write is acknowledged once a majority of them has it' },
          v && v.replication_factor ? `${v.replication_factor} voters` : '—')));
    if (!v) {
      notice(status, 'No leader serves the cluster view yet (an election, or the leader is unreachable); this node’s own status is above.', 'error');
      replace(tbody);
      return;
    }
    // The node's warnings (GET /sluice/v1/cluster `warnings`, computed by
    // the node: internal/cluster warnings.go), each a sentence without its
    // first capital and full stop, as `sluice cluster status` prints them.
    const warnings = (rep.warnings || []).map((w) => `${w.message.charAt(0).toUpperCase()}${w.message.slice(1)}.`);
    notice(status, warnings.join(' '), 'warn');
    replace(tbody, v.members.map((m) => h('tr', { 'data-member': m.id, class: m.id === me.id ? 'self' : null },
      h('th', { scope: 'row', 'data-label': 'Node' }, String(m.id), m.id === me.id ? h('span', { class: 'muted' }, ' (this node)') : null),
      h('td', { 'data-label': 'Role', class: 'm-role' }, m.stopped ? badge('stopped', 'critical') : m.role ? badge(m.role, m.role === 'leader' ? 'info' : m.role === 'follower' ? 'ok' : 'warn') : h('span', { class: 'muted' }, 'unknown')),
      h('td', { 'data-label': 'Membership', class: 'm-membership' }, m.membership ? badge(m.membership, m.membership === 'voter' ? 'ok' : 'warn') : '—'),
      h('td', { 'data-label': 'In sync', class: 'm-insync' }, m.in_sync ? badge('yes', 'ok') : badge('no', 'warn')),
      h('td', { 'data-label': 'Raft address' }, h('code', {}, m.raft)),
      h('td', { 'data-label': 'Term', class: 'm-term' }, m.role ? String(m.term) : '—'),
      h('td', { 'data-label': 'Commit', class: 'm-commit' }, m.role ? fmtInt(m.commit) : '—'),
      h('td', { 'data-label': 'Applied', class: 'm-applied' }, m.role ? fmtInt(m.applied) : '—'),
      h('td', { 'data-label': 'Match', class: 'm-match' }, fmtInt(m.match)),
      h('td', { 'data-label': 'Lag', class: `m-lag${m.lag > 0 ? ' lagging' : ''}` }, fmtInt(m.lag)),
      h('td', { 'data-label': 'Clock', class: `m-clock${Math.abs(m.clock_offset_ms || 0) > 500 ? ' lagging' : ''}` }, offset(m.clock_offset_ms)),
      h('td', { 'data-label': 'Reported', class: 'm-reported' }, ago(m.reported_ms_ago)))));
  };

  let closed = false;
  let busy = false;
  const load = async () => {
    if (busy) return;
    busy = true;
    try {
      const rep = await api(CLUSTER);
      if (!closed) draw(rep);
    } catch (e) {
      if (!closed) {
        notice(status, e.status === 404 ? 'This broker is a single node: it runs no cluster.' : `Cannot read the cluster status: ${e.message}`, 'error');
      }
    } finally {
      busy = false;
    }
  };
  load();
  // Refreshed with every overview sample, like the other pages.
  const un = ctx.live.subscribe(load);
  return () => {
    closed = true;
    un();
  };
}
