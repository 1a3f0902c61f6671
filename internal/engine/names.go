package engine

import "strings"

// MaxQueueNameLength is the longest queue name the SQS rule allows, a
// ".fifo" suffix included.
const MaxQueueNameLength = 80

// ValidQueueName reports whether name follows the SQS queue-name rule:
// 1–80 characters of [A-Za-z0-9_-], optionally ending in ".fifo", which
// counts towards the 80. It is the one definition of that rule: the SQS
// front-end and the admin API's create routes require it. The engine
// itself does not, since AMQP queue names follow AMQP's own rules.
func ValidQueueName(name string) bool {
	if len(name) == 0 || len(name) > MaxQueueNameLength {
		return false
	}
	base := strings.TrimSuffix(name, ".fifo")
	if base == "" {
		return false
	}
	for i := 0; i < len(base); i++ {
		b := base[i]
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}
