package amqp

// Stats are the AMQP front-end's live counts, for metrics.
type Stats struct {
	Connections int // open client connections
	Channels    int // open channels across them
	Consumers   int // basic.consume subscriptions across every queue
}

// Stats counts the open connections, their channels and the consumers.
// It takes each lock on its own (never two at once), so it is safe to call
// at any time, e.g. from a Prometheus scrape.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	st := Stats{Connections: len(conns)}
	for _, c := range conns {
		c.chMu.Lock()
		st.Channels += len(c.channels)
		c.chMu.Unlock()
	}
	t := s.topo
	t.mu.RLock()
	for _, v := range t.vhosts {
		for _, q := range v.queues {
			st.Consumers += len(q.consumers)
		}
	}
	t.mu.RUnlock()
	return st
}
