package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/api"
)

const dlqShowUsage = `
Usage: sluice dlq show QUEUE ID [--json]

ID may be any unique prefix of the message id (as "sluice dlq peek"
prints it).

Print one message with everything Sluice knows about it: body, attributes,
why and when it was dead-lettered, the last failure its consumer reported
(error class, message, trace, consumer and version), and its redrive
history. Showing a message does not receive it.
`

func dlqShow(ctx context.Context, args []string, env *Env) int {
	c := newCommand(env, "sluice dlq show", dlqShowUsage)
	return c.run(args, 2, 2, func(pos []string) int {
		cl := c.client()
		id, err := resolveID(ctx, cl, pos[0], pos[1])
		if err != nil {
			return c.fail(err)
		}
		var m api.Message
		if err := cl.call(ctx, "GET", queuePath(pos[0], "messages", id), nil, nil, &m); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(m)
		}
		printMessage(c.env.Stdout, &m)
		return ExitOK
	})
}

// printMessage writes m as "key: value" lines, sections for the context.
func printMessage(w io.Writer, m *api.Message) {
	kv := func(indent, k, v string) {
		if v != "" && v != "-" {
			fmt.Fprintf(w, "%s%-17s %s\n", indent, k+":", v)
		}
	}
	kv("", "id", m.ID)
	kv("", "state", m.State)
	kv("", "sent", stamp(m.SentAt))
	kv("", "first received", stamp(m.FirstReceiveAt))
	kv("", "receives", strconv.Itoa(m.ReceiveCount))
	kv("", "group", m.GroupID)
	kv("", "trace header", m.TraceHeader)
	if len(m.Attributes) > 0 {
		fmt.Fprintln(w, "attributes:")
		for _, a := range m.Attributes {
			v := a.StringValue
			if a.BinaryValue != nil {
				v = fmt.Sprintf("(%d bytes)", len(a.BinaryValue))
			}
			fmt.Fprintf(w, "  %s (%s) = %s\n", a.Name, a.DataType, v)
		}
	}
	if d := m.DeadLetter; d != nil {
		fmt.Fprintln(w, "dead-lettered:")
		kv("  ", "from", d.SourceQueue)
		kv("  ", "reason", d.Reason)
		kv("  ", "attempts", strconv.Itoa(d.Attempts))
		kv("  ", "first receive", stamp(d.FirstReceiveAt))
		kv("  ", "last receive", stamp(d.LastReceiveAt))
		kv("  ", "at", stamp(d.DeadLetteredAt))
	}
	if f := m.LastFailure; f != nil {
		fmt.Fprintln(w, "last failure:")
		kv("  ", "error class", f.ErrorClass)
		kv("  ", "message", f.Message)
		kv("  ", "consumer", f.ConsumerID)
		kv("  ", "version", f.ConsumerVersion)
		kv("  ", "attempt", strconv.Itoa(f.Attempt))
		kv("  ", "reported", stamp(f.ReportedAt))
		if f.Trace != "" {
			fmt.Fprintln(w, "  trace:")
			for _, l := range strings.Split(strings.TrimRight(f.Trace, "\n"), "\n") {
				fmt.Fprintln(w, "    "+l)
			}
		}
	}
	if r := m.Redrive; r != nil {
		fmt.Fprintln(w, "redriven:")
		kv("  ", "original id", r.OriginalMessageID)
		kv("  ", "times", strconv.Itoa(r.Count))
		kv("  ", "by task", r.TaskID)
		kv("  ", "at", stamp(r.At))
	}
	enc := ""
	if m.BodyEncoding != "" {
		enc = " (" + m.BodyEncoding + ")"
	}
	fmt.Fprintf(w, "body%s:\n%s\n", enc, m.Body)
}
