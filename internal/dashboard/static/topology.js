// AMQP TOPOLOGY: placeholder. When the AMQP front-end lands, this page
// shows exchanges, bindings and the queues they route to (with dead-letter
// exchanges drawn to their queues), from an endpoint such as
// /sluice/v1/dashboard/topology. The route #/topology already exists; add a
// "Topology" link to the nav in index.html at the marked place.
import { h } from './dom.js';

export function render(main) {
  document.title = 'Topology · Sluice';
  main.append(h('h1', {}, 'Topology'),
    h('p', {}, 'The AMQP topology (exchanges, bindings, dead-letter exchanges) will appear here when the AMQP front-end is available.'),
    h('p', {}, h('a', { href: '#/' }, 'Back to the overview')));
}
