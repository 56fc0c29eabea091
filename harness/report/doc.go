// Package report is what a failing check leaves for a person and for a
// replay: the report of a failed history (WriteReport: porcupine's
// visualization, the history file, the verdict in Markdown), the failfiles
// rapid writes, kept under reports/failfiles with how to replay them, and
// the one-line replay commands (TestCommand). It judges nothing itself:
// the verdict comes from package validate.
package report
