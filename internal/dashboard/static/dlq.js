// DLQ page (#/dlq/NAME): browse dead letters with their failure context
// (without receiving them), inspect and delete one, export, and redrive
// with a dry run, a rate and the safety stop, watching the task.
import { h, replace, api, enc, fmtInt, fmtAge, fmtTime, badge, levelBadge, notice } from './dom.js';
import { confirmAction } from './actions.js';

const REASONS = ['terminal', 'max_receives', 'delivery_limit', 'expired', 'maxlen'];
const ACTIVE = new Set(['RUNNING', 'CANCELLING', 'PAUSED']);
const PAGE = 50;

export function render(main, name, ctx) {
  document.title = `Dead letters: ${name} · Sluice`;
  const qpath = `/sluice/v1/queues/${enc(name)}`;
  const pageStatus = h('div', { class: 'status-slot' });
  const meters = h('div', { class: 'tiles', id: 'dlq-meters' });

  // Filters: one selection for browse, export, dry run and redrive.
  const f = {
    reason: h('select', { id: 'f-reason', name: 'reason' }, h('option', { value: '' }, 'any'), REASONS.map((r) => h('option', { value: r }, r))),
    errorClass: h('input', { id: 'f-class', name: 'errorClass', type: 'text', list: 'f-class-list', autocomplete: 'off', placeholder: 'e.g. KeyError' }),
    classList: h('datalist', { id: 'f-class-list' }),
    source: h('select', { id: 'f-source', name: 'sourceQueue' }, h('option', { value: '' }, 'any')),
    after: h('input', { id: 'f-after', name: 'sentAfter', type: 'datetime-local' }),
    before: h('input', { id: 'f-before', name: 'sentBefore', type: 'datetime-local' }),
    attribute: h('input', { id: 'f-attr', name: 'attribute', type: 'text', autocomplete: 'off', placeholder: 'name or name=value' }),
  };
  const field = (label, input, hint) => h('div', { class: 'field' }, h('label', { for: input.id }, label), input, hint ? h('small', {}, hint) : null);
  const filterStatus = h('div', { class: 'status-slot' });
  const filterForm = h('form', { class: 'filters compact', id: 'filters', 'aria-labelledby': 'filters-h' },
    h('h2', { id: 'filters-h' }, 'Filter'),
    h('div', { class: 'fields' },
      field('Reason', f.reason), field('Error class', f.errorClass), f.classList, field('Source queue', f.source),
      field('Sent after (local)', f.after), field('Sent before (local)', f.before), field('Attribute', f.attribute)),
    h('div', { class: 'actions' },
      h('button', { type: 'submit', class: 'primary' }, 'Apply filters'),
      h('button', { type: 'button', id: 'clear-filters', onclick: () => { filterForm.reset(); browse(true); } }, 'Clear')),
    filterStatus);
  filterForm.addEventListener('submit', (e) => {
    e.preventDefault();
    browse(true);
  });

  const search = h('input', { id: 'search', type: 'search', placeholder: 'body, error, id…', autocomplete: 'off' });
  const exportLink = h('a', { class: 'button', id: 'export', download: `${name}.jsonl` }, 'Export (JSONL)');
  const count = h('p', { class: 'muted', id: 'browse-count', role: 'status' });
  // Selection: checkboxes per loaded message, redriven together.
  const selected = new Set();
  const selectAll = h('input', { type: 'checkbox', id: 'select-all', 'aria-label': 'Select every shown message' });
  const redriveSelectedBtn = h('button', { type: 'button', id: 'redrive-selected', disabled: true, title: 'Select messages first' }, 'Redrive selected');
  const drawSelection = () => {
    const n = selected.size;
    redriveSelectedBtn.disabled = n === 0;
    redriveSelectedBtn.title = n === 0 ? 'Select messages first (the boxes in the first column)' : '';
    replace(redriveSelectedBtn, n ? `Redrive selected (${fmtInt(n)})` : 'Redrive selected');
  };
  const tbody = h('tbody', {});
  const table = h('table', { class: 'messages', id: 'messages' },
    h('caption', {}, 'Dead letters, oldest first. Browsing does not receive them or change their counts.'),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, selectAll), ['Message', 'Sent', 'Dead-lettered', 'Reason', 'Error', 'Attempts', 'Consumer', 'Source', ''].map((c) =>
      h('th', { scope: 'col' }, c || h('span', { class: 'visually-hidden' }, 'Actions'))))),
    tbody);
  const more = h('button', { type: 'button', id: 'load-more', hidden: true, onclick: () => browse(false) }, 'Load more');

  const dialog = h('dialog', { id: 'message-dialog', 'aria-labelledby': 'msg-h' });

  // Redrive.
  const dest = h('select', { id: 'r-dest', name: 'destination' }, h('option', { value: '' }, "each message's source queue"));
  const rate = h('input', { id: 'r-rate', name: 'rate', type: 'number', min: 1, max: 500, value: '50', required: true });
  const win = h('input', { id: 'r-window', name: 'safetyWindowSeconds', type: 'number', min: 1, max: 3600, value: '30' });
  const thr = h('input', { id: 'r-threshold', name: 'safetyThreshold', type: 'number', min: 1, max: 1000, value: '3' });
  const redriveStatus = h('div', { class: 'status-slot', id: 'redrive-status' });
  const dryResult = h('div', { id: 'dry-run-result' });
  const taskBox = h('div', { id: 'task' });
  const history = h('div', { id: 'task-history' });
  const dryBtn = h('button', { type: 'button', id: 'dry-run', onclick: () => redrive(true) }, 'Dry run');
  const startBtn = h('button', { type: 'button', id: 'start-redrive', class: 'primary', onclick: () => redrive(false) }, 'Start redrive');
  // A disabled button says why, next to it and to screen readers.
  const startWhy = h('small', { id: 'start-why', class: 'muted', role: 'status' });
  startBtn.setAttribute('aria-describedby', 'start-why');
  const blockStart = (t) => {
    const active = !!(t && ACTIVE.has(t.status));
    startBtn.disabled = active;
    const why = active ? `A redrive is ${t.status} on this queue (task ${t.id.slice(0, 8)}): ${t.status === 'PAUSED' ? 'resume or cancel' : 'cancel it or let it finish'} before starting another.` : '';
    startBtn.title = why;
    replace(startWhy, why);
  };
  const redriveForm = h('form', { class: 'redrive', id: 'redrive', 'aria-labelledby': 'redrive-h', onsubmit: (e) => e.preventDefault() },
    h('h2', { id: 'redrive-h' }, 'Redrive'),
    h('p', { class: 'muted small' }, 'Moves the messages selected by the filter back into service, oldest first, as new messages with a fresh receive count. ',
      h('strong', {}, 'Fix the consumer first'), ': a redrive before the fix pauses itself when the messages come back (the safety stop).'),
    h('div', { class: 'fields' },
      field('Destination', dest), field('Rate (messages/s)', rate, '1–500'),
      field('Safety window (s)', win), field('Safety threshold', thr, 'returns that pause the task')),
    h('div', { class: 'actions' }, dryBtn, startBtn, startWhy),
    redriveStatus, dryResult);

  // The page browses any queue; on one that is not a dead-letter queue it
  // says so in its heading.
  const heading = h('h1', { id: 'dlq-heading' }, 'Dead letters in ', name);
  main.append(
    h('nav', { class: 'crumbs', 'aria-label': 'Breadcrumb' }, h('a', { href: '#/' }, 'Overview'), ' / ', h('a', { href: `#/queue/${enc(name)}` }, name), ' / dead letters'),
    heading,
    pageStatus, meters,
    h('section', { class: 'task-panel', 'aria-labelledby': 'task-h' }, h('h2', { id: 'task-h' }, 'Redrive task'), taskBox, history),
    filterForm,
    // The redrive acts on the filter's selection: it sits between the
    // filter and the list, not below a long table.
    redriveForm,
    h('section', { 'aria-labelledby': 'msgs-h' },
      h('div', { class: 'section-head' }, h('h2', { id: 'msgs-h' }, 'Messages'),
        h('div', { class: 'inline-actions' },
          h('label', { for: 'search' }, 'Search loaded messages'), search,
          h('button', { type: 'button', id: 'refresh', onclick: () => browse(true) }, 'Refresh'), exportLink, redriveSelectedBtn)),
      count, h('div', { class: 'table-wrap' }, table), more),
    dialog);

  let loaded = [];
  let cursor = '';
  let gen = 0;
  let task = null;
  let taskTimer = null;
  let closed = false;

  // The current selection as query parameters and as a body filter.
  const selection = () => {
    const q = new URLSearchParams();
    const body = {};
    const put = (k, v, b = v) => {
      if (v) {
        q.set(k, v);
        body[k] = b;
      }
    };
    put('reason', f.reason.value);
    put('errorClass', f.errorClass.value.trim());
    put('sourceQueue', f.source.value);
    const iso = (v) => (v ? new Date(v).toISOString() : '');
    put('sentAfter', iso(f.after.value));
    put('sentBefore', iso(f.before.value));
    const a = f.attribute.value.trim();
    if (a) {
      q.set('attribute', a);
      const i = a.indexOf('=');
      body.attribute = i < 0 ? { name: a } : { name: a.slice(0, i), value: a.slice(i + 1) };
    }
    return { q, body };
  };

  const browse = async (reset) => {
    const my = ++gen;
    const { q } = selection();
    exportLink.href = `${qpath}/export${q.toString() ? '?' + q : ''}`;
    if (reset) {
      cursor = '';
      loaded = [];
    }
    q.set('limit', String(PAGE));
    if (cursor) q.set('cursor', cursor);
    try {
      const page = await api(`${qpath}/messages?${q}`);
      if (my !== gen || closed) return;
      loaded = loaded.concat(page.messages || []);
      cursor = page.next || '';
      more.hidden = !cursor;
      notice(filterStatus, '');
      drawRows();
    } catch (e) {
      if (my !== gen || closed) return;
      notice(filterStatus, e.code === 'NotFound' || e.status === 404 ? 'This queue does not exist.' : `Cannot browse: ${e.message}`, 'error');
    }
  };

  const matches = (m, text) => {
    if (!text) return true;
    const lf = m.lastFailure || {};
    const hay = [m.id, m.body, lf.errorClass, lf.message, lf.trace, lf.consumerId, lf.consumerVersion, m.traceHeader,
      ...(m.attributes || []).map((a) => `${a.name}=${a.stringValue || ''}`)].join('\n').toLowerCase();
    return hay.includes(text);
  };

  const drawRows = () => {
    const text = search.value.trim().toLowerCase();
    const shown = loaded.filter((m) => matches(m, text));
    replace(tbody, shown.map(row));
    replace(count, `Showing ${fmtInt(shown.length)} of ${fmtInt(loaded.length)} loaded${cursor ? ' (more to load)' : ''}.`);
    if (loaded.length === 0) replace(tbody, h('tr', {}, h('td', { colspan: 10, class: 'empty' }, 'No dead letters match.')));
    for (const id of [...selected]) if (!loaded.some((m) => m.id === id)) selected.delete(id);
    selectAll.checked = shown.length > 0 && shown.every((m) => selected.has(m.id));
    drawSelection();
  };
  search.addEventListener('input', drawRows);

  const row = (m) => {
    const dlx = m.deadLetter || {};
    const lf = m.lastFailure || {};
    const open = h('button', { type: 'button', class: 'small', onclick: () => show(m.id) }, 'Inspect');
    open.setAttribute('aria-label', `Inspect message ${m.id}`);
    const one = h('button', { type: 'button', class: 'small redrive-one', onclick: () => redriveIds([m.id]) }, 'Redrive');
    one.setAttribute('aria-label', `Redrive message ${m.id}`);
    const pick = h('input', { type: 'checkbox', class: 'pick', 'data-id': m.id, 'aria-label': `Select message ${m.id}` });
    pick.checked = selected.has(m.id);
    pick.addEventListener('change', () => {
      if (pick.checked) selected.add(m.id);
      else selected.delete(m.id);
      drawSelection();
    });
    return h('tr', { 'data-id': m.id },
      h('td', {}, pick),
      h('td', { 'data-label': 'Message' }, h('code', { title: m.id }, m.id.slice(0, 8))),
      h('td', { 'data-label': 'Sent' }, fmtTime(m.sentAt)),
      h('td', { 'data-label': 'Dead-lettered' }, fmtTime(dlx.deadLetteredAt)),
      h('td', { 'data-label': 'Reason' }, dlx.reason || '—'),
      h('td', { 'data-label': 'Error', class: 'err' }, lf.errorClass ? h('strong', {}, lf.errorClass) : '—', lf.message ? h('span', { class: 'errmsg' }, lf.message) : null),
      h('td', { 'data-label': 'Attempts' }, String(dlx.attempts || m.receiveCount || 0)),
      h('td', { 'data-label': 'Consumer' }, [lf.consumerId, lf.consumerVersion].filter(Boolean).join(' ') || '—'),
      h('td', { 'data-label': 'Source' }, dlx.sourceQueue || m.deadLetterSource || '—'),
      h('td', { class: 'row-actions' }, open, ' ', one));
  };

  // show opens one message, fetched fresh, in a modal dialog.
  const show = async (id) => {
    let m;
    try {
      m = await api(`${qpath}/messages/${enc(id)}`);
    } catch (e) {
      notice(filterStatus, e.status === 404 ? 'That message is gone (deleted or redriven).' : `Cannot load the message: ${e.message}`, 'error');
      return;
    }
    const dlx = m.deadLetter || {};
    const lf = m.lastFailure || {};
    const dstatus = h('div', { class: 'status-slot' });
    const del = h('button', { type: 'button', class: 'danger', id: 'delete-message' }, 'Delete message');
    const close = h('button', { type: 'button', id: 'close-dialog', onclick: () => dialog.close() }, 'Close');
    let armed = false;
    del.addEventListener('click', async () => {
      if (!armed) {
        armed = true;
        del.textContent = 'Confirm: delete permanently';
        notice(dstatus, 'Deleting cannot be undone. Export first if you may need it. Press again to delete.', 'warn');
        return;
      }
      try {
        await api(`${qpath}/messages/${enc(m.id)}`, { method: 'DELETE' });
        dialog.close();
        notice(filterStatus, `Message ${m.id} deleted.`, 'ok');
        loaded = loaded.filter((x) => x.id !== m.id);
        drawRows();
        ctx.live.refresh();
      } catch (e) {
        notice(dstatus, `Delete failed: ${e.message}`, 'error');
      }
    });
    const kv = (pairs) => h('dl', { class: 'kv' }, pairs.filter(([, v]) => v !== undefined && v !== null && v !== '').map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
    const body = m.bodyEncoding === 'base64' ? `(base64) ${m.body}` : prettyBody(m.body);
    replace(dialog,
      h('div', { class: 'dialog-head' }, h('h2', { id: 'msg-h' }, 'Message ', h('code', {}, m.id)), close),
      h('div', { class: 'dialog-body' },
        h('h3', {}, 'Failure'),
        kv([['Error class', lf.errorClass], ['Error message', lf.message], ['Consumer', lf.consumerId], ['Consumer version', lf.consumerVersion],
          ['Reported', lf.reportedAt && fmtTime(lf.reportedAt)], ['At attempt', lf.attempt]]),
        lf.trace ? [h('h3', {}, 'Trace'), h('pre', { class: 'trace', tabindex: 0 }, lf.trace)] : null,
        h('h3', {}, 'Dead-lettering'),
        kv([['Reason', dlx.reason], ['Source queue', dlx.sourceQueue || m.deadLetterSource], ['Attempts', dlx.attempts],
          ['First received', fmtTime(dlx.firstReceiveAt || m.firstReceiveAt)], ['Last received', fmtTime(dlx.lastReceiveAt)],
          ['Dead-lettered', fmtTime(dlx.deadLetteredAt)]]),
        h('h3', {}, 'Message'),
        kv([['Sent', fmtTime(m.sentAt)], ['Receive count', m.receiveCount], ['State', m.state], ['Group', m.groupId], ['Priority', m.priority], ['Trace header', m.traceHeader],
          ['Redriven', m.redrive ? `${m.redrive.count}× (original ${m.redrive.originalMessageId})` : '']]),
        (m.attributes || []).length ? [h('h3', {}, 'Attributes'), kv(m.attributes.map((a) => [a.name, `${a.stringValue ?? a.binaryValue ?? ''} (${a.dataType})`]))] : null,
        h('h3', {}, 'Body'), h('pre', { class: 'body', tabindex: 0 }, body)),
      h('div', { class: 'dialog-foot' }, dstatus, del));
    dialog.showModal();
    close.focus();
  };

  const redrive = async (dryRun) => {
    const { body } = selection();
    const req = { filter: body, rate: Number(rate.value) || 50, dryRun };
    if (dest.value) req.destination = dest.value;
    if (Number(win.value)) req.safetyWindowSeconds = Number(win.value);
    if (Number(thr.value)) req.safetyThreshold = Number(thr.value);
    dryBtn.disabled = startBtn.disabled = true;
    try {
      if (!dryRun) {
        // Confirm with the numbers of a dry run of the same request.
        const dry = await api(`${qpath}/redrive`, { method: 'POST', body: { ...req, dryRun: true } });
        if (closed) return;
        const dests = Object.entries(dry.byDestination || {}).map(([d, n]) => `${fmtInt(n)} to ${d}`).join(', ');
        const text = `Move ${fmtInt(dry.total)} message${dry.total === 1 ? '' : 's'} from ${name}${dests ? ` (${dests})` : ''} at ${req.rate} per second. ` +
          `They are delivered again as new messages, so consumers must be idempotent. The task pauses itself if ${req.safetyThreshold || 3} come back within ${req.safetyWindowSeconds || 30} s.`;
        if (!(await confirmAction({ title: 'Start redrive?', text, confirm: 'Start redrive' }))) return;
      }
      const res = await api(`${qpath}/redrive`, { method: 'POST', body: req });
      if (closed) return;
      if (dryRun) {
        const dests = Object.entries(res.byDestination || {});
        replace(dryResult, h('div', { class: 'dry', role: 'status' },
          h('p', {}, h('strong', {}, `Dry run: ${fmtInt(res.total)} message${res.total === 1 ? '' : 's'} would move`),
            dests.length ? ` — ${dests.map(([d, n]) => `${fmtInt(n)} to ${d}`).join(', ')}.` : '.'),
          (res.sample || []).length ? h('ul', { class: 'sample' }, res.sample.map((m) =>
            h('li', {}, h('code', {}, m.id.slice(0, 8)), ' ', (m.lastFailure && m.lastFailure.errorClass) || '', ' ', h('span', { class: 'muted' }, fmtTime(m.sentAt))))) : null));
        notice(redriveStatus, '');
      } else {
        replace(dryResult);
        notice(redriveStatus, `Redrive started: ${fmtInt(res.toMove)} messages at ${res.rate}/s.`, 'ok');
        setTask(res);
      }
    } catch (e) {
      notice(redriveStatus, e.code === 'TaskRunning' ? 'A redrive is already active on this queue: cancel or finish it first.' : `Redrive refused: ${e.message}`, 'error');
    } finally {
      dryBtn.disabled = false;
      blockStart(task);
    }
  };

  // redriveIds redrives the given messages (one row's, or the selection)
  // after a confirmation naming them, with the form's destination and rate.
  const redriveIds = async (ids) => {
    const req = { filter: { ids }, rate: Number(rate.value) || 50 };
    if (dest.value) req.destination = dest.value;
    const where = dest.value ? dest.value : ids.length === 1 ? 'the queue it came from' : 'the queues they came from';
    const what = ids.length === 1 ? `message ${ids[0]}` : `${fmtInt(ids.length)} selected messages`;
    const text = `Move ${what} from ${name} to ${where}, as new messages with a fresh receive count. Consumers must be idempotent.`;
    if (!(await confirmAction({ title: ids.length === 1 ? 'Redrive this message?' : 'Redrive the selection?', text, confirm: 'Redrive' }))) return;
    try {
      const res = await api(`${qpath}/redrive`, { method: 'POST', body: req });
      if (closed) return;
      for (const id of ids) selected.delete(id);
      drawSelection();
      notice(redriveStatus, `Redrive started: ${fmtInt(res.toMove)} message${res.toMove === 1 ? '' : 's'}.`, 'ok');
      setTask(res);
    } catch (e) {
      notice(filterStatus, e.code === 'TaskRunning' ? 'A redrive is already active on this queue: cancel or finish it first.' : `Redrive refused: ${e.message}`, 'error');
    }
  };
  selectAll.addEventListener('change', () => {
    const text = search.value.trim().toLowerCase();
    for (const m of loaded.filter((x) => matches(x, text))) {
      if (selectAll.checked) selected.add(m.id);
      else selected.delete(m.id);
    }
    drawRows();
  });
  redriveSelectedBtn.addEventListener('click', () => redriveIds([...selected]));

  const taskAction = async (action) => {
    try {
      setTask(await api(`/sluice/v1/tasks/${enc(task.id)}/${action}`, { method: 'POST', body: {} }));
    } catch (e) {
      notice(redriveStatus, `Cannot ${action} the task: ${e.message}`, 'error');
      pollTask();
    }
  };

  const setTask = (t) => {
    const was = task;
    task = t;
    drawTask();
    clearTimeout(taskTimer);
    blockStart(t);
    if (t && (t.status === 'RUNNING' || t.status === 'CANCELLING')) {
      taskTimer = setTimeout(pollTask, 1000);
    }
    if (was && t && was.id === t.id && was.moved !== t.moved) ctx.live.refresh();
    if (was && t && was.status !== t.status && !ACTIVE.has(t.status)) {
      browse(true);
      loadHistory();
      ctx.live.refresh();
    }
  };

  const pollTask = async () => {
    if (!task || closed) return;
    try {
      setTask(await api(`/sluice/v1/tasks/${enc(task.id)}`));
    } catch {
      taskTimer = setTimeout(pollTask, 2000);
    }
  };

  const drawTask = () => {
    if (!task) {
      replace(taskBox, h('p', { class: 'muted' }, 'No redrive has run on this queue recently.'));
      return;
    }
    const t = task;
    const kind = { RUNNING: 'info', COMPLETED: 'ok', PAUSED: 'warn', CANCELLING: 'warn', CANCELLED: 'muted', FAILED: 'critical' }[t.status] || 'muted';
    const buttons = [];
    if (t.status === 'RUNNING') buttons.push(h('button', { type: 'button', id: 'pause-task', onclick: () => taskAction('pause') }, 'Pause'));
    if (t.status === 'PAUSED') buttons.push(h('button', { type: 'button', id: 'resume-task', class: 'primary', onclick: () => taskAction('resume') }, 'Resume'));
    if (t.status === 'RUNNING' || t.status === 'PAUSED') buttons.push(h('button', { type: 'button', id: 'cancel-task', class: 'danger', onclick: () => taskAction('cancel') }, 'Cancel'));
    const pct = t.toMove > 0 ? Math.round((100 * t.moved) / t.toMove) : 100;
    replace(taskBox, h('div', { class: `task task-${t.status.toLowerCase()}`, 'data-status': t.status },
      h('p', { class: 'task-line' }, badge(t.status, kind), ' ', h('code', { title: t.id }, t.id.slice(0, 12)),
        ` · ${t.rate}/s · to ${t.destination || 'each source queue'} · started ${fmtTime(t.startedAt)}`),
      h('label', { for: 'task-progress', class: 'visually-hidden' }, 'Redrive progress'),
      h('progress', { id: 'task-progress', max: Math.max(1, t.toMove), value: t.moved }, `${pct}%`),
      h('p', { id: 'task-counts' }, h('strong', {}, `${fmtInt(t.moved)} of ${fmtInt(t.toMove)} moved`), ` (${pct}%)`,
        t.returned ? ` · ${fmtInt(t.returned)} came back${t.returnedClasses && t.returnedClasses.length ? ' (' + t.returnedClasses.join(', ') + ')' : ''}` : ''),
      t.failureReason ? h('p', { class: `notice ${t.status === 'PAUSED' ? 'notice-warn' : 'notice-error'}`, role: 'alert', id: 'task-reason' },
        t.status === 'PAUSED' && /SafetyStop/.test(t.failureReason) ? h('strong', {}, 'Safety stop. ') : null, t.failureReason) : null,
      buttons.length ? h('div', { class: 'actions' }, buttons) : null));
  };

  const loadHistory = async () => {
    try {
      const list = await api(`/sluice/v1/tasks?source=${enc(name)}`);
      if (closed) return;
      const tasks = list.tasks || [];
      if (!task && tasks.length) setTask(tasks[0]);
      else if (!task) drawTask();
      replace(history, tasks.length <= 1 ? null : h('details', {}, h('summary', {}, `Earlier tasks (${tasks.length - 1})`),
        h('table', { class: 'mini' }, h('thead', {}, h('tr', {}, ['Task', 'Status', 'Moved', 'Started', 'Reason'].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', {}, tasks.slice(1).map((t) => h('tr', {}, h('td', {}, h('code', {}, t.id.slice(0, 12))), h('td', {}, t.status),
            h('td', {}, `${fmtInt(t.moved)}/${fmtInt(t.toMove)}`), h('td', {}, fmtTime(t.startedAt)), h('td', { class: 'errmsg' }, t.failureReason || '')))))));
    } catch (e) {
      if (!closed) notice(pageStatus, e.status === 404 ? 'This queue does not exist.' : `Cannot load tasks: ${e.message}`, 'error');
    }
  };

  // Meters and the selects follow the live overview.
  let metersKey = '';
  const onOverview = (ov) => {
    const q = ov.queues.find((x) => x.name === name);
    if (!q) {
      notice(pageStatus, 'This queue does not exist (it may have been deleted).', 'error');
      return;
    }
    if (!q.isDeadLetterQueue) {
      replace(heading, 'Messages in ', name);
      notice(pageStatus, 'No queue names this one as its dead-letter queue, so a redrive needs an explicit destination.', 'warn');
    } else {
      replace(heading, 'Dead letters in ', name);
    }
    const growth = q.growth ? `+${fmtInt(q.growth.arrivals)} in ${Math.max(1, Math.round(q.growth.windowSeconds / 60))}m` : '';
    replace(meters,
      h('div', { class: `tile ${q.level && q.level !== 'ok' ? 'level-' + q.level : ''}`, id: 'dlq-depth' }, h('span', { class: 'tile-label' }, 'Dead letters'),
        h('span', { class: 'tile-value' }, fmtInt(q.depth), ' ', levelBadge(q.level)), growth ? h('span', { class: 'tile-extra' }, growth) : null),
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Oldest'), h('span', { class: 'tile-value' }, fmtAge(q.oldestAgeSeconds))),
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'In flight'), h('span', { class: 'tile-value' }, fmtInt(q.inflight))),
      h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Sources'), h('span', { class: 'tile-value small' }, q.sources.length ? q.sources.join(', ') : '—')));
    const key = JSON.stringify([q.sources, ov.queues.map((x) => x.name)]);
    if (key !== metersKey) {
      metersKey = key;
      keepValue(f.source, () => replace(f.source, h('option', { value: '' }, 'any'), q.sources.map((s) => h('option', { value: s }, s))));
      keepValue(dest, () => replace(dest, h('option', { value: '' }, "each message's source queue"),
        ov.queues.filter((x) => x.name !== name && !x.isDeadLetterQueue).map((x) => h('option', { value: x.name }, x.name))));
    }
  };

  // Error classes for the datalist, from the queue's current content.
  const loadClasses = async () => {
    try {
      const d = await api(`/sluice/v1/dashboard/queues/${enc(name)}`);
      const classes = Object.keys((d.breakdown && d.breakdown.errorClasses) || {}).filter((c) => c !== 'none');
      replace(f.classList, classes.map((c) => h('option', { value: c })));
    } catch {
      /* optional */
    }
  };

  drawTask();
  browse(true);
  loadHistory();
  loadClasses();
  const un = ctx.live.subscribe(onOverview);
  return () => {
    closed = true;
    un();
    clearTimeout(taskTimer);
    if (dialog.open) dialog.close();
  };
}

function keepValue(select, rebuild) {
  const v = select.value;
  rebuild();
  if ([...select.options].some((o) => o.value === v)) select.value = v;
}

function prettyBody(body) {
  const s = body || '';
  if (/^\s*[{[]/.test(s)) {
    try {
      return JSON.stringify(JSON.parse(s), null, 2);
    } catch {
      /* not JSON after all */
    }
  }
  return s;
}
