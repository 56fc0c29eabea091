package pgtest

import (
	"slices"
	"strings"
	"testing"
)

// TestReferencingFirst: every table comes before the tables its foreign
// keys reference, tables outside the list are left out, and a cycle is
// refused.
func TestReferencingFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tables  []string
		refs    map[string][]string
		want    []string
		wantErr string
	}{
		{"no keys", []string{"a", "b"}, nil, []string{"b", "a"}, ""},
		{"chain", []string{"runs", "jobs", "effects"}, map[string][]string{"jobs": {"runs"}, "effects": {"jobs"}}, []string{"effects", "jobs", "runs"}, ""},
		{"two referencing one", []string{"jobs", "attempts", "effects"}, map[string][]string{"attempts": {"jobs"}, "effects": {"jobs"}},
			[]string{"effects", "attempts", "jobs"}, ""},
		{"a referenced table outside the list", []string{"a"}, map[string][]string{"a": {"migrations"}}, []string{"a"}, ""},
		{"cycle", []string{"a", "b"}, map[string][]string{"a": {"b"}, "b": {"a"}}, nil, "cycle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := referencingFirst(tc.tables, tc.refs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("referencingFirst = %v, %v; want an error about a %s", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("referencingFirst = %v, %v; want %v", got, err, tc.want)
			}
			for i, table := range got {
				for _, ref := range tc.refs[table] {
					if j := slices.Index(got, ref); j >= 0 && j < i {
						t.Errorf("%s is emptied after %s, which it references", table, ref)
					}
				}
			}
		})
	}
}
