// Package cmdtest runs leasehold's checks on a store given as a command,
// through the store protocol (package storeproto): what
// `leasehold verify --store-cmd CMD` runs. Its tests read the command from
// LEASEHOLD_STORE_CMD (run with sh -c in LEASEHOLD_STORE_DIR, default the
// repository root); with none set they check the Python port in this
// repository, ports/python-sqlite, so that `go test ./...` proves it too.
package cmdtest
