//go:build ignore

// gen writes docs/protocol from the Go types (go generate ./internal/protoschema).
package main

import (
	"fmt"
	"os"

	"github.com/leasehold/leasehold/internal/protoschema"
	"github.com/leasehold/leasehold/spec"
)

func main() {
	const root = "../.."
	files, err := protoschema.Generate(root, spec.Operations())
	if err == nil {
		err = protoschema.Write(root, files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "protoschema:", err)
		os.Exit(1)
	}
	fmt.Printf("protoschema: %d files in %s\n", len(files), protoschema.Dir)
}
