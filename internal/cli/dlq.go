package cli

import (
	"context"
	"fmt"
)

const dlqUsage = `Usage: sluice dlq <command> [arguments] [flags]

Inspect and repair dead-letter queues through the admin API.

Commands:
  list                          dead-letter queues with depth, oldest age and sources
  peek QUEUE [filters]          browse messages without receiving them
  show QUEUE ID                 one message with its full failure context
  delete QUEUE (ID | filters | --all)
                                delete messages
  export QUEUE [filters]        write messages as JSONL to stdout (or --output)
  import QUEUE                  read JSONL from stdin (or --input) into QUEUE
  redrive QUEUE [--to DEST] [--rate N] [--dry-run] [--wait] [filters]
                                move messages back into service
  tasks QUEUE                   redrive tasks of a dead-letter queue
  cancel TASK                   cancel a running or paused redrive
  pause TASK                    pause a running redrive
  resume TASK                   resume a paused redrive

Filters: --reason, --error-class, --source, --since, --until, --attribute, --id.
Common flags: --endpoint URL (or $SLUICE_ENDPOINT; default http://127.0.0.1:9324), --json.
Run "sluice dlq <command> -h" for a command's flags.
`

// DLQ runs `sluice dlq <command>`.
func DLQ(ctx context.Context, args []string, env *Env) int {
	e := env.withDefaults()
	if len(args) == 0 {
		fmt.Fprint(e.Stderr, dlqUsage)
		return ExitUsage
	}
	cmds := map[string]func(context.Context, []string, *Env) int{
		"list":    dlqList,
		"peek":    dlqPeek,
		"show":    dlqShow,
		"delete":  dlqDelete,
		"export":  dlqExport,
		"import":  dlqImport,
		"redrive": dlqRedrive,
		"tasks":   dlqTasks,
		"cancel":  dlqCancel,
		"resume":  dlqResume,
		"pause":   dlqPause,
	}
	switch name := args[0]; name {
	case "help", "-h", "--help":
		fmt.Fprint(e.Stdout, dlqUsage)
		return ExitOK
	default:
		run, ok := cmds[name]
		if !ok {
			fmt.Fprintf(e.Stderr, "sluice dlq: unknown command %q\n\n%s", name, dlqUsage)
			return ExitUsage
		}
		return run(ctx, args[1:], e)
	}
}
