//go:build leasehold_mutants

package httpadmit_test

import (
	"testing"

	"github.com/leasehold/leasehold/impl/mutant"
	"github.com/leasehold/leasehold/impl/sqlite/sqlitetest"
)

// TestMutantTenantFromRequest: with the mutant that takes the tenant from a
// request header, the check of TestTenantOnlyFromAuthenticator must fail.
func TestMutantTenantFromRequest(t *testing.T) {
	defer mutant.Set(mutant.TenantFromRequest)()
	e := newEnv(t, sqlitetest.Factory, nil)
	problems := smuggledTenant(t, e)
	if len(problems) == 0 {
		t.Fatalf("mutant %s survived: tenant A acted for tenant B through a header and nothing noticed", mutant.TenantFromRequest)
	}
	t.Logf("mutant %s caught: %d findings, the first: %s", mutant.TenantFromRequest, len(problems), problems[0])
}
