package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/engine"
)

// taskCollector exports the progress of redrive (move) tasks, read from
// the engine at each scrape: for every task the engine keeps (the last ten
// per dead-letter queue), how many messages it has moved, how many it set
// out to move, and how many came back within the safety window, labelled
// with its source queue, id and status. A dashboard shows a running
// redrive's progress as moved / to_move; an alert can watch for PAUSED.
type taskCollector struct {
	eng                       *engine.Engine
	moved, toMove, returnedTo *prometheus.Desc
}

func newTaskCollector(eng *engine.Engine) taskCollector {
	labels := []string{"source", "task", "status"}
	return taskCollector{
		eng:        eng,
		moved:      prometheus.NewDesc("sluice_redrive_task_moved_messages", "Messages a redrive task has moved so far.", labels, nil),
		toMove:     prometheus.NewDesc("sluice_redrive_task_to_move_messages", "Messages a redrive task set out to move (fixed when it starts).", labels, nil),
		returnedTo: prometheus.NewDesc("sluice_redrive_task_returned_messages", "Moved messages that came back to the dead-letter queue within the task's safety window.", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c taskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.moved
	ch <- c.toMove
	ch <- c.returnedTo
}

// Collect implements prometheus.Collector.
func (c taskCollector) Collect(ch chan<- prometheus.Metric) {
	for _, name := range c.eng.ListQueues("") {
		tasks, err := c.eng.MoveTasks(name)
		if err != nil {
			continue // deleted since ListQueues
		}
		for _, tk := range tasks {
			for _, g := range []struct {
				d *prometheus.Desc
				v int
			}{{c.moved, tk.Moved}, {c.toMove, tk.ToMove}, {c.returnedTo, tk.Returned}} {
				ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(g.v), tk.Source, tk.ID, tk.Status)
			}
		}
	}
}
