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

// jobBranches are the kinds of job row jobs_row_valid decides by a branch
// of its own (migration 10), each as one path writes it: its state, run
// state and attempt outcome, and a valid row of that kind (the columns it
// does not name are NULL).
var jobBranches = []struct {
	name, state, runState, outcome string
	valid                          map[string]string
}{
	{"admitted", "queued", "queued", "", map[string]string{"available_at": "0", "lease_generation": "0", "attempts": "0",
		"max_attempts": "3", "run_version": "1", "run_last_seq": "1"}},
	{"leased", "leased", "running", "running", map[string]string{"available_at": "0", "lease_owner": "w",
		"lease_expires_at": "5", "lease_generation": "1", "attempts": "1", "max_attempts": "3", "run_version": "2",
		"run_last_seq": "1", "attempt_generation": "1", "attempt_number": "1", "attempt_worker": "w",
		"attempt_claimed_at": "5", "attempt_renewed_at": "5"}},
	{"completed", "completed", "completed", "completed", map[string]string{"available_at": "0", "lease_generation": "1",
		"attempts": "1", "max_attempts": "3", "run_version": "3", "run_last_seq": "2", "run_result": "{}",
		"run_finished_at": "5", "run_event_payload": "{}", "attempt_generation": "1", "attempt_number": "1",
		"attempt_worker": "w", "attempt_claimed_at": "5", "attempt_renewed_at": "5", "attempt_finished_at": "6"}},
}

// jobColumnValues are the values TestJobCheckMatchesMigration9 puts in each
// column of a job row (NULL is in every list): each value a conjunct
// treats differently — each state, run state, outcome and class and a
// bogus one, both sides of each bound and of each length limit.
var jobColumnValues = map[string][]string{
	"state":               {"queued", "leased", "completed", "dead", "cancelled", "paused"},
	"available_at":        {"-1", "0", "1"},
	"lease_owner":         {"w"},
	"lease_expires_at":    {"-1", "0", "5"},
	"lease_generation":    {"-1", "0", "1", "2"},
	"attempts":            {"-1", "0", "1", "2", "3", "4"},
	"max_attempts":        {"0", "1", "3"},
	"last_error_code":     {"boom"},
	"run_state":           {"queued", "running", "completed", "failed", "cancelled", "paused"},
	"run_version":         {"0", "1", "2", "3"},
	"run_last_seq":        {"0", "1", "2"},
	"run_error_code":      {"boom"},
	"run_result":          {"{}", strings.Repeat("x", 65536), strings.Repeat("x", 65537)},
	"run_finished_at":     {"-1", "5"},
	"run_event_payload":   {"{}", strings.Repeat("x", 4096), strings.Repeat("x", 4097)},
	"attempt_generation":  {"0", "1", "2"},
	"attempt_number":      {"0", "1", "2"},
	"attempt_worker":      {"w"},
	"attempt_claimed_at":  {"-1", "5"},
	"attempt_renewed_at":  {"4", "5", "6"},
	"attempt_finished_at": {"4", "5", "6"},
	"attempt_outcome":     {"running", "completed", "retried", "dead", "released", "expired", "cancelled", "won"},
	"attempt_error_code":  {"boom"},
	"attempt_error_class": {"retryable", "terminal", "expired", "bogus"},
	"attempt_retry_at":    {"5"},
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
// branch of its own for a job as an admission, a claim and a completion
// write it) to migration 9's conjunction. From a valid row of each branch
// it makes every row that differs from it in one or two columns, each
// column taking every value of jobColumnValues and NULL (16,000 rows or so,
// in and out of the branches), and wants the two functions to refuse
// (return false) exactly the same rows. Then it shows it can fail: each
// argument of a branch's num_nulls and num_nonnulls and each of its lines
// of bounds, taken out in turn, makes rows of that branch that migration 9
// refuses pass.
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

	var values []string
	for col, vals := range jobColumnValues {
		values = append(values, fmt.Sprintf("('%s', NULL)", col))
		for _, v := range vals {
			values = append(values, fmt.Sprintf("('%s', '%s')", col, v))
		}
	}
	exec("values", `CREATE TEMP TABLE dom (col text, val text)`)
	exec("values", `INSERT INTO dom VALUES `+strings.Join(values, ", "))
	exec("valid rows", `CREATE TEMP TABLE base (branch text, r jsonb)`)
	branchOf := "CASE"
	for _, b := range jobBranches {
		r := map[string]any{"tenant": "t", "run_id": "r", "operation": "work", "state": b.state, "run_state": b.runState}
		outcome := "NULL"
		if b.outcome != "" {
			r["attempt_outcome"] = b.outcome
			outcome = "'" + b.outcome + "'"
		}
		for col, v := range b.valid {
			r[col] = v
		}
		exec("valid row", `INSERT INTO base VALUES ($1, $2)`, b.name, r)
		branchOf += fmt.Sprintf(` WHEN (j).state = '%s' AND (j).run_state = '%s' AND (j).attempt_outcome IS NOT DISTINCT FROM %s THEN '%s'`,
			b.state, b.runState, outcome, b.name)
	}
	branchOf += " ELSE 'other' END"
	exec("rows", `CREATE TEMP TABLE judged AS
		SELECT j, jobs_row_valid_9(j) IS FALSE AS refused, `+branchOf+` AS branch
		FROM (SELECT jsonb_populate_record(NULL::jobs, r) AS j FROM base
			UNION ALL SELECT jsonb_populate_record(NULL::jobs, r || jsonb_build_object(d.col, d.val)) FROM base, dom AS d
			UNION ALL SELECT jsonb_populate_record(NULL::jobs, r || jsonb_build_object(d.col, d.val, e.col, e.val))
				FROM base, dom AS d, dom AS e WHERE d.col < e.col) AS rows`)

	var total, differ int
	var example string
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE refused IS DISTINCT FROM (jobs_row_valid(j) IS FALSE)),
			coalesce(min(j::text) FILTER (WHERE refused IS DISTINCT FROM (jobs_row_valid(j) IS FALSE)), '') FROM judged`).Scan(&total, &differ, &example); err != nil {
		t.Fatal(err)
	}
	if differ != 0 {
		t.Fatalf("jobs_row_valid and migration 9's refuse different rows: %d of %d differ, e.g. %s", differ, total, example)
	}
	for _, b := range jobBranches {
		var accepted, refused int
		var validRefused bool
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT refused), count(*) FILTER (WHERE refused),
				(SELECT jobs_row_valid_9(jsonb_populate_record(NULL::jobs, r)) IS FALSE FROM base WHERE branch = $1)
			FROM judged WHERE branch = $1`, b.name).Scan(&accepted, &refused, &validRefused); err != nil {
			t.Fatal(err)
		}
		if validRefused {
			t.Fatalf("the valid %s row of the test is refused by migration 9's conjunction: %v", b.name, b.valid)
		}
		t.Logf("%s branch: %d rows accepted, %d refused, the same by both", b.name, accepted, refused)
	}
	t.Logf("%d rows in all, the same verdicts", total)

	// The comparison is strong enough to catch each rule of a branch
	// missing: a copy of the function without it lets through rows of the
	// branch that migration 9 refuses.
	var def string
	if err := conn.QueryRow(ctx, `SELECT pg_get_functiondef('jobs_row_valid(jobs)'::regprocedure)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile(`(?s)IF j\.state = '(\w+)' .*? THEN\s*RETURN (.*?);\n`).FindAllStringSubmatch(def, -1)
	if len(blocks) != len(jobBranches) {
		t.Fatalf("jobs_row_valid has %d branches of the form IF j.state = ... THEN RETURN ...; want %d:\n%s", len(blocks), len(jobBranches), def)
	}
	for k, block := range blocks {
		branch, expr := jobBranches[k].name, block[2]
		type mutant struct{ without, expr string }
		var mutants []mutant
		for _, call := range regexp.MustCompile(`num_(?:non)?nulls\(([^)]*)\)`).FindAllStringSubmatch(expr, -1) {
			args := strings.Split(call[1], ",")
			for i := range args {
				rest := append(append([]string{}, args[:i]...), args[i+1:]...)
				fewer := strings.Replace(call[0], call[1], strings.Join(rest, ","), 1)
				mutants = append(mutants, mutant{strings.TrimSpace(args[i]) + " in " + strings.SplitN(call[0], "(", 2)[0],
					strings.Replace(expr, call[0], fewer, 1)})
			}
		}
		lines := strings.Split(expr, "\n")
		for i, line := range lines {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "AND ") && strings.Count(l, "(") == strings.Count(l, ")") {
				rest := append(append([]string{}, lines[:i]...), lines[i+1:]...)
				mutants = append(mutants, mutant{l, strings.Join(rest, "\n")})
			}
		}
		caughtAll := true
		for _, m := range mutants {
			fn := strings.Replace(strings.Replace(def, expr, m.expr, 1), ".jobs_row_valid(", ".jobs_row_valid_mutant(", 1)
			exec("mutant", fn)
			var caught int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM judged
				WHERE branch = $1 AND refused IS DISTINCT FROM (jobs_row_valid_mutant(j) IS FALSE)`, branch).Scan(&caught); err != nil {
				t.Fatal(err)
			}
			if caught == 0 {
				caughtAll = false
				t.Errorf("the %s branch without %q refused the same rows as migration 9: the comparison cannot see it missing", branch, m.without)
			}
			exec("drop mutant", `DROP FUNCTION jobs_row_valid_mutant(jobs)`)
		}
		if caughtAll {
			t.Logf("%s branch: %d rules taken out in turn, each caught", branch, len(mutants))
		}
	}
}
