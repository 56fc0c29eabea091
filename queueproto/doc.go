// Package queueproto is the queue-adapter protocol (docs/ADAPTERS.md): a
// job queue written in any language is probed by leasehold through a small
// adapter program that reads requests as newline-delimited JSON on stdin,
// answers and reports its handlers' starts on stdout, and logs on stderr.
//
// The types here are the protocol's one definition: the runner (package
// probe) decodes every message into them strictly, and Go adapters (the
// control adapter over leasehold's own stores, peers/river) encode with
// them through Serve. docs/adapter.schema.json is the JSON Schema of the
// same messages, held to these types by TestSchemaMatchesTheTypes.
package queueproto
