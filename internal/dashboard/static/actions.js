// Everyday queue actions: create, send, purge, delete. Every action that
// changes state opens a confirmation that says exactly what will happen
// ("Delete queue orders and its 12 messages"), and only the confirm button
// in it sends the request (JSON, same origin, like every dashboard call).
import { h, replace, api, enc, fmtInt, notice } from './dom.js';

// confirmAction shows a modal confirmation and resolves to true when the
// operator confirms, false when they cancel (button, Escape).
export function confirmAction({ title, text, confirm, danger = false }) {
  let d = document.getElementById('confirm-dialog');
  if (!d) {
    d = h('dialog', { id: 'confirm-dialog', 'aria-labelledby': 'confirm-h', 'aria-describedby': 'confirm-text' });
    document.body.append(d);
  }
  return new Promise((resolve) => {
    let settled = false;
    // A close without an answer (Escape) is a cancel. The close event of
    // an earlier confirmation may arrive after this one opened: it finds
    // the dialog open and is ignored.
    const onClose = () => {
      if (!d.open) done(false);
    };
    const done = (v) => {
      if (settled) return;
      settled = true;
      d.removeEventListener('close', onClose);
      if (d.open) d.close();
      resolve(v);
    };
    replace(d,
      h('div', { class: 'dialog-head' }, h('h2', { id: 'confirm-h' }, title)),
      h('div', { class: 'dialog-body' }, h('p', { id: 'confirm-text' }, text)),
      h('div', { class: 'dialog-foot' },
        h('button', { type: 'button', id: 'confirm-cancel', onclick: () => done(false) }, 'Cancel'),
        h('button', { type: 'button', id: 'confirm-ok', class: danger ? 'danger' : 'primary', onclick: () => done(true) }, confirm)));
    d.addEventListener('close', onClose);
    d.showModal();
  });
}

const field = (label, input, hint) => h('div', { class: 'field' }, h('label', { for: input.id }, label), input, hint ? h('small', {}, hint) : null);

// formDialog opens a dialog holding a form; onSubmit(close) runs on submit.
function formDialog(id, title, fields, submitLabel, onSubmit) {
  let d = document.getElementById(id);
  if (d) d.remove();
  const status = h('div', { class: 'status-slot', id: `${id}-status` });
  const form = h('form', { class: 'dialog-form', id: `${id}-form` },
    h('div', { class: 'dialog-head' }, h('h2', { id: `${id}-h` }, title)),
    h('div', { class: 'dialog-body' }, fields, status),
    h('div', { class: 'dialog-foot' },
      h('button', { type: 'button', id: `${id}-cancel`, onclick: () => d.close() }, 'Cancel'),
      h('button', { type: 'submit', id: `${id}-submit`, class: 'primary' }, submitLabel)));
  d = h('dialog', { id, 'aria-labelledby': `${id}-h` }, form);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    await onSubmit(d, status);
  });
  document.body.append(d);
  d.showModal();
  return d;
}

// parseAttributes reads "name=value" lines into an object.
function parseAttributes(text) {
  const out = {};
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf('=');
    if (i <= 0) throw new Error(`attribute line "${t}" is not name=value`);
    out[t.slice(0, i).trim()] = t.slice(i + 1).trim();
  }
  return out;
}

// openCreateQueue asks for a new queue's settings, confirms, creates it
// and opens its page.
export function openCreateQueue(queues) {
  const name = h('input', { id: 'cq-name', name: 'name', type: 'text', required: true, autocomplete: 'off', placeholder: 'orders' });
  const fifo = h('input', { id: 'cq-fifo', name: 'fifo', type: 'checkbox' });
  // The second choice is the queue's own dead-letter queue, created with
  // it (ownDeadLetterQueue); it is told by its position, not its value,
  // since any string could be an (AMQP) queue's name.
  const ownOption = h('option', { id: 'cq-dlq-own', value: '' }, 'its own (NAME-dlq), created with it');
  const dlq = h('select', { id: 'cq-dlq', name: 'deadLetterQueue' }, h('option', { value: '' }, 'none'), ownOption,
    queues.map((q) => h('option', { value: q.name }, q.name)));
  const maxRecv = h('input', { id: 'cq-max', name: 'maxReceiveCount', type: 'number', min: 1, max: 1000, value: '5' });
  formDialog('create-dialog', 'Create a queue', [
    field('Name', name, 'Letters, digits, - and _; a FIFO queue ends in .fifo.'),
    h('div', { class: 'field checkbox' }, fifo, h('label', { for: 'cq-fifo' }, 'FIFO queue')),
    field('Dead-letter queue', dlq, 'Where messages go after too many receives.'),
    field('Max receives', maxRecv, 'Used with a dead-letter queue.'),
  ], 'Create…', async (d, status) => {
    const req = { name: name.value.trim(), fifo: fifo.checked };
    if (ownOption.selected) {
      req.ownDeadLetterQueue = true;
      req.maxReceiveCount = Number(maxRecv.value);
    } else if (dlq.value) {
      req.deadLetterQueue = dlq.value;
      req.maxReceiveCount = Number(maxRecv.value);
    }
    // The own DLQ's name, as the broker makes it (admin dlqName).
    const own = req.fifo ? `${req.name.replace(/\.fifo$/, '')}-dlq.fifo` : `${req.name}-dlq`;
    const what = `Create the ${req.fifo ? 'FIFO' : 'standard'} queue ${req.name}` +
      (req.ownDeadLetterQueue ? ` and its dead-letter queue ${own}, dead-lettering into it after ${req.maxReceiveCount} receives.`
        : req.deadLetterQueue ? `, dead-lettering into ${req.deadLetterQueue} after ${req.maxReceiveCount} receives.` : ', without a dead-letter queue.');
    if (!(await confirmAction({ title: 'Create queue?', text: what, confirm: 'Create queue' }))) return;
    try {
      await api('/sluice/v1/queues', { method: 'POST', body: req });
      d.close();
      location.hash = `#/queue/${enc(req.name)}`;
    } catch (e) {
      notice(status, `Not created: ${e.message}`, 'error');
    }
  });
}

// queueActions is the action bar of a queue page: browse, send, purge,
// delete, with its own status line for the outcomes (the page's status
// is rewritten on every live update). getQueue returns the latest data.
export function queueActions(name, getQueue) {
  const status = h('div', { class: 'status-slot', id: 'queue-action-status' });
  const send = () => {
    const q = getQueue() || {};
    const body = h('textarea', { id: 'send-body', name: 'body', rows: 6, required: true, placeholder: '{"id":"o-42"}' });
    const attrs = h('textarea', { id: 'send-attrs', name: 'attributes', rows: 3, placeholder: 'tenant=acme' });
    const group = h('input', { id: 'send-group', name: 'groupId', type: 'text', autocomplete: 'off', required: !!q.fifo });
    const dedup = h('input', { id: 'send-dedup', name: 'deduplicationId', type: 'text', autocomplete: 'off' });
    formDialog('send-dialog', `Send a message to ${name}`, [
      field('Body', body),
      field('Attributes', attrs, 'One name=value per line (String attributes).'),
      field('Group id', group, q.fifo ? 'Required on a FIFO queue.' : 'Optional (fair queues).'),
      q.fifo ? field('Deduplication id', dedup, 'Needed unless the queue deduplicates by content.') : null,
    ], 'Send…', async (d, st) => {
      let attributes;
      try {
        attributes = parseAttributes(attrs.value);
      } catch (e) {
        notice(st, e.message, 'error');
        return;
      }
      const req = { body: body.value, attributes };
      if (group.value) req.groupId = group.value;
      if (dedup.value) req.deduplicationId = dedup.value;
      const n = Object.keys(attributes).length;
      const what = `Send one message (${fmtInt(new Blob([req.body]).size)} bytes${n ? `, ${n} attribute${n > 1 ? 's' : ''}` : ''}` +
        `${req.groupId ? `, group ${req.groupId}` : ''}) to ${name}. Consumers of ${name} will receive it.`;
      if (!(await confirmAction({ title: 'Send message?', text: what, confirm: 'Send message' }))) return;
      try {
        const res = await api(`/sluice/v1/queues/${enc(name)}/messages`, { method: 'POST', body: req });
        d.close();
        notice(status, `Sent message ${res.messageId} to ${name}.`);
      } catch (e) {
        notice(st, `Not sent: ${e.message}`, 'error');
      }
    });
  };
  // fresh reads the queue's current counts and sources, so a confirmation
  // never quotes a number from before the last action.
  const fresh = async () => {
    try {
      return await api(`/sluice/v1/queues/${enc(name)}`);
    } catch {
      return getQueue() || {};
    }
  };
  const purge = async () => {
    const q = await fresh();
    const n = (q.visible || 0) + (q.inflight || 0) + (q.delayed || 0);
    const text = `Delete all ${fmtInt(n)} message${n === 1 ? '' : 's'} in ${name} (visible, in flight and delayed). The queue stays; the messages cannot be recovered.`;
    if (!(await confirmAction({ title: `Purge ${name}?`, text, confirm: 'Purge queue', danger: true }))) return;
    try {
      const res = await api(`/sluice/v1/queues/${enc(name)}/purge`, { method: 'POST', body: {} });
      notice(status, `Purged ${name}: ${fmtInt(res.purged)} message(s) deleted.`);
    } catch (e) {
      notice(status, `Not purged: ${e.message}`, 'error');
    }
  };
  const del = async () => {
    const q = await fresh();
    const n = (q.visible || 0) + (q.inflight || 0) + (q.delayed || 0);
    const srcs = q.sources && q.sources.length ? ` It is the dead-letter queue of ${q.sources.join(', ')}; their dead letters will have nowhere to go.` : '';
    const text = `Delete the queue ${name} and its ${fmtInt(n)} message${n === 1 ? '' : 's'}. This cannot be undone.${srcs}`;
    if (!(await confirmAction({ title: `Delete ${name}?`, text, confirm: 'Delete queue', danger: true }))) return;
    try {
      await api(`/sluice/v1/queues/${enc(name)}`, { method: 'DELETE', body: {} });
      location.hash = '#/';
    } catch (e) {
      notice(status, `Not deleted: ${e.message}`, 'error');
    }
  };
  return h('div', {},
    h('div', { class: 'actions queue-actions', id: 'queue-actions', role: 'group', 'aria-label': 'Queue actions' },
      h('a', { class: 'button', id: 'browse-messages', href: `#/dlq/${enc(name)}` }, 'Browse messages'),
      h('button', { type: 'button', id: 'send-message', onclick: send }, 'Send message…'),
      h('button', { type: 'button', id: 'purge-queue', class: 'danger', onclick: purge }, 'Purge…'),
      h('button', { type: 'button', id: 'delete-queue', class: 'danger', onclick: del }, 'Delete queue…')),
    status);
}
