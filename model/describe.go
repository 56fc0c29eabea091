package model

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/leasehold/leasehold/spec"
)

// String renders the operation on one line for traces and linearizability
// reports (porcupine's DescribeOperation): its name, then each request field
// by its JSON name, JSON bytes as text, a lease as tenant/run@generation by
// owner; optional fields only when set. Idempotency keys are shown as given:
// the model only ever sees test keys, never production ones.
func (o Op) String() string {
	var b strings.Builder
	b.WriteString(string(o.Kind()))
	writeFields(&b, reflect.ValueOf(o.Req))
	if _, isRetry := o.Req.(spec.RetryRequest); isRetry {
		fmt.Fprintf(&b, " jitter=%d", o.Jitter)
	}
	return b.String()
}

// writeFields appends " name=value" for each field of the struct v.
func writeFields(b *strings.Builder, v reflect.Value) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if opts == "omitempty" && fv.IsZero() {
			continue
		}
		b.WriteString(" " + name + "=")
		switch x := fv.Interface().(type) {
		case spec.LeaseRef:
			b.WriteString(x.String())
		case []byte:
			b.Write(x)
		case []spec.Message:
			b.WriteString("[")
			for k, m := range x {
				if k > 0 {
					b.WriteString(";")
				}
				fmt.Fprintf(b, " %s %s", m.Subject, m.Payload)
			}
			b.WriteString(" ]")
		case []spec.OutboxKey:
			b.WriteString("[")
			for k, m := range x {
				if k > 0 {
					b.WriteString(" ")
				}
				fmt.Fprintf(b, "%s/%s#%d", m.Tenant, m.RunID, m.Seq)
			}
			b.WriteString("]")
		case []spec.CompleteRequest:
			b.WriteString("[")
			for k, m := range x {
				if k > 0 {
					b.WriteString(";")
				}
				writeFields(b, reflect.ValueOf(m))
			}
			b.WriteString(" ]")
		default:
			fmt.Fprintf(b, "%v", x)
		}
	}
}

// String renders the result on one line.
func (r Result) String() string {
	if r.Err != nil {
		if r.Err.State != "" {
			return fmt.Sprintf("error %s (%s)", r.Err.Code, r.Err.State)
		}
		return "error " + string(r.Err.Code)
	}
	run := func(u spec.Run) string {
		return fmt.Sprintf("run %s/%s %s v%d seq %d", u.Tenant, u.ID, u.State, u.Version, u.LastSeq)
	}
	job := func(j spec.Job) string {
		return fmt.Sprintf("job %s/%s %s gen %d attempts %d/%d available %d", j.Tenant, j.RunID, j.State, j.Generation, j.Attempts, j.MaxAttempts, j.AvailableAt)
	}
	lease := func(l spec.Lease) string {
		return fmt.Sprintf("%s/%s gen %d by %s until %d (attempt %d/%d)", l.Tenant, l.RunID, l.Generation, l.Owner, l.ExpiresAt, l.Attempt, l.MaxAttempts)
	}
	switch v := r.Value.(type) {
	case spec.CreateRunResult:
		if v.Replayed {
			return "replayed " + run(v.Run)
		}
		return "created " + run(v.Run)
	case spec.Run:
		return run(v)
	case spec.Job:
		return job(v)
	case spec.Lease:
		return "lease " + lease(v)
	case []spec.Lease:
		parts := make([]string, len(v))
		for i, l := range v {
			parts[i] = lease(l)
		}
		return "leases [" + strings.Join(parts, "; ") + "]"
	case []string:
		return "runs [" + strings.Join(v, " ") + "]"
	case int:
		return fmt.Sprintf("%d", v)
	case spec.EffectReservation:
		return fmt.Sprintf("%s: effect %s gen %d", v.Decision, v.Effect.State, v.Effect.Generation)
	case spec.Effect:
		return fmt.Sprintf("effect %s gen %d ref %q", v.State, v.Generation, v.ProviderRef)
	case []spec.BatchOutcome:
		parts := make([]string, len(v))
		for i, o := range v {
			parts[i] = Result{Value: o.Run}.String()
			if o.Err != nil {
				parts[i] = Result{Err: asError(o.Err)}.String()
			}
		}
		return "batch [" + strings.Join(parts, "; ") + "]"
	case []spec.CreateOutcome:
		parts := make([]string, len(v))
		for i, o := range v {
			parts[i] = Result{Value: o.Result}.String()
			if o.Err != nil {
				parts[i] = Result{Err: asError(o.Err)}.String()
			}
		}
		return "bulk [" + strings.Join(parts, "; ") + "]"
	case []spec.Event:
		return fmt.Sprintf("%d events", len(v))
	case []spec.Attempt:
		return fmt.Sprintf("%d attempts", len(v))
	case []spec.Effect:
		return fmt.Sprintf("%d effects", len(v))
	case []spec.OutboxMessage:
		parts := make([]string, len(v))
		for i, m := range v {
			parts[i] = fmt.Sprintf("%s/%s#%d by %s until %d (claim %d)", m.Tenant, m.RunID, m.Seq, m.Relay, m.ClaimExpiresAt, m.Claims)
		}
		return "messages [" + strings.Join(parts, "; ") + "]"
	case spec.Snapshot:
		return fmt.Sprintf("snapshot of %d runs, %d idempotency records, %d outbox messages", len(v.Runs), len(v.Idempotency), len(v.Outbox))
	}
	return fmt.Sprintf("%+v", r.Value)
}
