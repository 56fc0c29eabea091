package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/impl/postgres"
	"github.com/leasehold/leasehold/impl/postgres/pgtest"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/spec"
)

// jobColumnDomains are the values TestJobCheckMatchesMigration9 draws each
// column of a job row from: every value a conjunct treats differently
// (each state, run state, outcome and class, a bogus one, bounds around
// each limit) and NULL. "fresh" is the domain of a row drawn as an
// admission writes it (queued, run queued, no attempt: the new branch),
// with its nullable columns mostly NULL so that a row breaks one rule at a
// time; "any" is the domain of every other row.
var jobColumnDomains = []struct {
	column, fresh, any string
}{
	{"tenant", `'t'`, `'t'`},
	{"run_id", `'r'`, `'r'`},
	{"operation", `'work'`, `'work'`},
	{"state", `'queued'`, `'queued','queued','leased','leased','completed','dead','cancelled','paused',NULL`},
	{"available_at", `0,0,1,-1,NULL`, `0,1,-1,NULL`},
	{"lease_owner", nullMostly(`'w'`), `NULL,NULL,'w'`},
	{"lease_expires_at", nullMostly(`5,-1`), `NULL,NULL,5,0,-1`},
	{"lease_generation", `0,0,1,-1,NULL`, `0,1,2,-1,NULL`},
	{"attempts", `0,0,1,3,4,-1,NULL`, `0,1,2,3,4,-1,NULL`},
	{"max_attempts", `3,3,1,0,NULL`, `3,1,0,NULL`},
	{"last_error_code", `NULL,'boom'`, `NULL,'boom'`},
	{"run_state", `'queued'`, `'queued','running','running','completed','failed','cancelled','paused',NULL`},
	{"run_version", `1,1,2,0,NULL`, `1,2,0,NULL`},
	{"run_last_seq", `1,1,2,0,NULL`, `1,2,0,NULL`},
	{"run_error_code", nullMostly(`'boom'`), `NULL,NULL,'boom'`},
	{"run_result", nullMostly(`'{}'`), `NULL,NULL,'{}',repeat('x',65537)`},
	{"run_finished_at", nullMostly(`5,-1`), `NULL,NULL,5`},
	{"run_event_payload", nullMostly(`'{}'`), `NULL,NULL,'{}',repeat('x',4097)`},
	{"attempt_generation", nullMostly(`1,0`), `NULL,1,1,0,2`},
	{"attempt_number", nullMostly(`1,0`), `NULL,1,1,0,2`},
	{"attempt_worker", nullMostly(`'w'`), `NULL,'w','w'`},
	{"attempt_claimed_at", nullMostly(`5,-1`), `NULL,5,5,-1`},
	{"attempt_renewed_at", nullMostly(`5,4`), `NULL,5,5,4,6`},
	{"attempt_finished_at", nullMostly(`5,4`), `NULL,NULL,5,4,6`},
	{"attempt_outcome", `NULL`, `NULL,'running','running','completed','retried','dead','released','expired','cancelled','won'`},
	{"attempt_error_code", nullMostly(`'boom'`), `NULL,NULL,'boom'`},
	{"attempt_error_class", nullMostly(`'retryable','bogus'`), `NULL,NULL,'retryable','terminal','expired','bogus'`},
	{"attempt_retry_at", nullMostly(`5`), `NULL,NULL,5`},
}

// nullMostly is a domain that is NULL 24 draws in 25, else one of values.
func nullMostly(values string) string {
	return strings.Repeat("NULL,", 24*len(strings.Split(values, ","))) + values
}

// pick is SQL drawing one element of domain at random.
func pick(domain string) string {
	n := len(splitTop(domain))
	return fmt.Sprintf(`(ARRAY[%s]::text[])[1 + floor(random() * %d)::int]`, domain, n)
}

// splitTop splits a domain at its commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// migration9JobCheck is jobs_row_valid as migration 9 defined it, created
// under the name jobs_row_valid_9: the reference the later branch is held to.
func migration9JobCheck(t *testing.T) string {
	t.Helper()
	all, err := migrations.For(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.Version != 9 {
			continue
		}
		def := regexp.MustCompile(`(?s)CREATE FUNCTION jobs_row_valid\(.*?\n\$\$;`).FindString(m.SQL)
		if def == "" {
			t.Fatal("migration 9 has no CREATE FUNCTION jobs_row_valid")
		}
		return strings.Replace(def, "FUNCTION jobs_row_valid(", "FUNCTION jobs_row_valid_9(", 1)
	}
	t.Fatal("no migration 9")
	return ""
}

// TestJobCheckMatchesMigration9 holds jobs_row_valid (migration 10: a
// branch of its own for a job as an admission writes it) to migration 9's
// conjunction: on 60,000 generated job rows, half drawn as an admission
// writes them with one rule at a time broken, the two refuse (return
// false) exactly the same rows. The draw is seeded, so a failure names the
// rows that differ and the same rows come back. Then the test shows it can
// fail: each argument of the branch's num_nonnulls and each of its bounds,
// taken out in turn, makes rows that migration 9 refuses pass.
func TestJobCheckMatchesMigration9(t *testing.T) {
	ctx := context.Background()
	dsn, schema := pgtest.Schema(t)
	s, err := postgres.Open(ctx, dsn, postgres.Options{Config: spec.DefaultConfig(), Schema: schema, MaxConns: 1, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn := pgtest.Conn(t, dsn, schema)
	exec := func(what, sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	exec("reference function", migration9JobCheck(t))

	fields := make([]string, len(jobColumnDomains))
	for i, d := range jobColumnDomains {
		fields[i] = fmt.Sprintf(`'%s', CASE WHEN fresh THEN %s ELSE %s END`, d.column, pick(d.fresh), pick(d.any))
	}
	exec("seed", `SELECT setseed(0.25)`)
	exec("rows", `CREATE TEMP TABLE drawn AS
		SELECT i, jsonb_populate_record(NULL::jobs, jsonb_build_object(`+strings.Join(fields, ", ")+`)) AS j
		FROM (SELECT i, i % 2 = 0 AS fresh FROM generate_series(1, 60000) AS i) AS g`)
	exec("reference verdicts", `CREATE TEMP TABLE judged AS
		SELECT i, j, jobs_row_valid_9(j) IS FALSE AS refused,
			(j).state = 'queued' AND (j).run_state = 'queued' AND (j).attempt_outcome IS NULL AS fresh FROM drawn`)

	var fresh, freshRefused, freshAccepted, differ int
	var example string
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE fresh), count(*) FILTER (WHERE fresh AND refused),
			count(*) FILTER (WHERE fresh AND NOT refused),
			count(*) FILTER (WHERE refused IS DISTINCT FROM (jobs_row_valid(j) IS FALSE)),
			coalesce(min(j::text) FILTER (WHERE refused IS DISTINCT FROM (jobs_row_valid(j) IS FALSE)), '')
		FROM judged`).Scan(&fresh, &freshRefused, &freshAccepted, &differ, &example)
	if err != nil {
		t.Fatal(err)
	}
	if differ != 0 {
		t.Fatalf("jobs_row_valid and migration 9's refuse different rows: %d of 60000 differ, e.g. %s", differ, example)
	}
	// The draw reaches both verdicts of the new branch often enough to mean something.
	if freshAccepted < 1000 || freshRefused < 1000 {
		t.Fatalf("the draw gave %d rows of the admission branch, %d accepted and %d refused: want at least 1000 of each",
			fresh, freshAccepted, freshRefused)
	}
	t.Logf("60000 rows, %d of them as an admission writes them (%d accepted, %d refused): the same verdicts",
		fresh, freshAccepted, freshRefused)

	// The comparison is strong enough to catch each rule of the branch
	// missing: a copy of the function without it lets through rows that
	// migration 9 refuses.
	var def string
	if err := conn.QueryRow(ctx, `SELECT pg_get_functiondef('jobs_row_valid(jobs)'::regprocedure)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	branch := regexp.MustCompile(`(?s)RETURN num_nonnulls\((.*?)\) = 0\n(.*?);\n`).FindStringSubmatch(def)
	if branch == nil {
		t.Fatalf("jobs_row_valid has no admission branch of the form RETURN num_nonnulls(...) = 0 AND ...:\n%s", def)
	}
	var mutants []string
	args := strings.Split(branch[1], ",")
	for i := range args {
		rest := append(append([]string{}, args[:i]...), args[i+1:]...)
		mutants = append(mutants, strings.Replace(def, branch[1], strings.Join(rest, ","), 1))
	}
	for _, bound := range regexp.MustCompile(`AND [^\n]+`).FindAllString(branch[2], -1) {
		mutants = append(mutants, strings.Replace(def, bound, "", 1))
	}
	if len(mutants) != 15+6 {
		t.Fatalf("found %d rules in the admission branch, want 15 columns and 6 lines of bounds:\n%s", len(mutants), branch[0])
	}
	for _, m := range mutants {
		m = strings.Replace(m, ".jobs_row_valid(", ".jobs_row_valid_mutant(", 1)
		exec("mutant", m)
		var caught int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM judged
			WHERE fresh AND refused IS DISTINCT FROM (jobs_row_valid_mutant(j) IS FALSE)`).Scan(&caught); err != nil {
			t.Fatal(err)
		}
		if caught == 0 {
			t.Errorf("a jobs_row_valid with a rule taken out refused the same rows as migration 9: the comparison cannot see it:\n%s", m)
		}
		exec("drop mutant", `DROP FUNCTION jobs_row_valid_mutant(jobs)`)
	}
}
