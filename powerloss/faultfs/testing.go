package faultfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// EnvRequire, set to 1 (or CI=true), makes a missing FUSE fail a test
// instead of skipping it.
const EnvRequire = "LEASEHOLD_REQUIRE_FUSE"

// Required reports whether a test may not skip for want of FUSE.
func Required() bool { return os.Getenv(EnvRequire) == "1" || os.Getenv("CI") == "true" }

// MountForTest mounts a fault filesystem in a temporary directory, unmounted
// and removed when t ends. Every user may reach the mount point (a server
// may run as a user of its own). Where FUSE is missing it skips t loudly, or
// fails it when Required.
func MountForTest(t testing.TB) *FS {
	t.Helper()
	return MountForTestFrom(t, nil)
}

// MountForTestFrom is MountForTest on a disk that fill, when not nil, fills
// first: it is given the directory the mount point will show, and what it
// writes there is durable (a test's setup, without the filesystem's cost).
func MountForTestFrom(t testing.TB, fill func(root string) error) *FS {
	t.Helper()
	dir, err := os.MkdirTemp("", "leasehold-faultfs-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil && fill != nil {
		root := filepath.Join(dir, "disk", "root")
		if err = os.MkdirAll(root, 0o755); err == nil {
			err = fill(root)
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	f, err := Mount(dir)
	if err != nil {
		os.RemoveAll(dir)
		unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("faultfs: %v (left in %s)", err, dir)
			return
		}
		os.RemoveAll(dir)
	})
	return f
}

// unavailable skips or fails t because no fault filesystem could be mounted.
func unavailable(t testing.TB, err error) {
	t.Helper()
	msg := fmt.Sprintf("NO FUSE FOR THIS POWER-LOSS TEST: %v. It mounts a fault-injecting filesystem, which needs /dev/fuse and "+
		"root (or fusermount3 from Debian's fuse3 package).", err)
	if Required() {
		t.Fatalf("%s (%s=1 or CI=true: a power-loss test may not skip)", msg, EnvRequire)
	} else {
		t.Skip(msg)
	}
}
