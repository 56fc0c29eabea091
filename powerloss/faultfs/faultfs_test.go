package faultfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The tests write through the mount with the os package (system calls, no
// mmap) from the process that serves it, which is safe (see the package doc).

func writeFile(t *testing.T, path string, data []byte, off int64, flush bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if flush {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// durableFile creates name with data, durable (the file flushed, its
// directory too).
func durableFile(t *testing.T, f *FS, name string, data []byte) string {
	t.Helper()
	p := f.Path(name)
	writeFile(t, p, data, 0, true)
	syncDir(t, filepath.Dir(p))
	return p
}

// loseAndRestart loses power as l says and mounts again.
func loseAndRestart(t *testing.T, f *FS, l Loss) Report {
	t.Helper()
	rep, err := f.PowerLoss(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restart(); err != nil {
		t.Fatal(err)
	}
	return rep
}

func wantContent(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("after the power loss: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after the power loss %s holds %d bytes %s, want %d bytes %s", filepath.Base(path), len(got), summary(got), len(want), summary(want))
	}
}

func wantGone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after the power loss %s: %v, want it gone", filepath.Base(path), err)
	}
}

// summary shows a run-length form of b: "a×4096 b×1000".
func summary(b []byte) string {
	var parts []string
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && b[j] == b[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%q×%d", b[i], j-i))
		i = j
	}
	return strings.Join(parts, " ")
}

func fill(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }

func TestUnflushedWriteIsLost(t *testing.T) {
	f := MountForTest(t)
	p := durableFile(t, f, "f", nil)
	writeFile(t, p, []byte("acknowledged but never flushed"), 0, false)
	rep := loseAndRestart(t, f, Loss{})
	wantContent(t, p, nil)
	if rep.Writes != 1 || rep.Files != 1 {
		t.Fatalf("report %+v, want one write to one file dropped", rep)
	}
}

func TestFlushedWriteSurvives(t *testing.T) {
	f := MountForTest(t)
	p := durableFile(t, f, "f", fill('a', 10000))
	writeFile(t, p, fill('b', 3000), 5000, true) // flushed
	writeFile(t, p, fill('c', 100), 6000, false) // not flushed: only it goes
	writeFile(t, p, fill('d', 50), 12000, false) // an extension, not flushed
	rep := loseAndRestart(t, f, Loss{})
	wantContent(t, p, append(append(fill('a', 5000), fill('b', 3000)...), fill('a', 2000)...))
	if rep.Writes != 2 {
		t.Fatalf("report %+v, want 2 writes dropped", rep)
	}
}

func TestFdatasyncFlushes(t *testing.T) {
	f := MountForTest(t)
	p := durableFile(t, f, "f", nil)
	fh, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(fill('a', 5000)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fdatasync(int(fh.Fd())); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	loseAndRestart(t, f, Loss{})
	wantContent(t, p, fill('a', 5000))
}

func TestSyncDescriptorWritesAreDurable(t *testing.T) {
	f := MountForTest(t)
	p := durableFile(t, f, "f", nil)
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(fill('s', 100)); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	loseAndRestart(t, f, Loss{})
	wantContent(t, p, fill('s', 100))
}

func TestTornWrite(t *testing.T) {
	t.Run("within the durable size", func(t *testing.T) {
		f := MountForTest(t)
		p := durableFile(t, f, "f", fill('a', 8192))
		writeFile(t, p, fill('x', 700), 0, false) // dropped whole: not the last write
		writeFile(t, p, fill('b', 6000), 4096, false)
		rep := loseAndRestart(t, f, Loss{Tear: 1000})
		wantContent(t, p, append(append(fill('a', 4096), fill('b', 1000)...), fill('a', 3096)...))
		if !strings.Contains(rep.Torn, "kept 1000 of its 6000 bytes") || rep.Writes != 2 {
			t.Fatalf("report %+v", rep)
		}
	})
	t.Run("past the durable end", func(t *testing.T) {
		f := MountForTest(t)
		p := durableFile(t, f, "f", fill('a', 100))
		writeFile(t, p, fill('b', 500), 100, false)
		loseAndRestart(t, f, Loss{Tear: 200})
		wantContent(t, p, append(fill('a', 100), fill('b', 200)...))
	})
	t.Run("flushed last write is not torn", func(t *testing.T) {
		f := MountForTest(t)
		p := durableFile(t, f, "f", fill('a', 100))
		writeFile(t, p, fill('b', 50), 0, false)
		writeFile(t, p, fill('c', 50), 50, true) // flushes both
		rep := loseAndRestart(t, f, Loss{Tear: 10})
		wantContent(t, p, append(fill('b', 50), fill('c', 50)...))
		if rep.Torn != "" || rep.Dropped() {
			t.Fatalf("report %+v, want nothing dropped or torn", rep)
		}
	})
}

func TestTruncateIsUndone(t *testing.T) {
	f := MountForTest(t)
	p := durableFile(t, f, "f", fill('a', 10000))
	if err := os.Truncate(p, 10); err != nil {
		t.Fatal(err)
	}
	q := durableFile(t, f, "g", fill('g', 5000))
	fh, err := os.OpenFile(q, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.Write([]byte("new"))
	fh.Close()
	loseAndRestart(t, f, Loss{})
	wantContent(t, p, fill('a', 10000))
	wantContent(t, q, fill('g', 5000))
}

func TestCreateIsDurableOnlyAfterItsDirectoryIsSynced(t *testing.T) {
	f := MountForTest(t)
	kept, lost := f.Path("kept"), f.Path("lost")
	writeFile(t, kept, []byte("flushed, its directory synced"), 0, true)
	syncDir(t, f.Dir())
	writeFile(t, lost, []byte("flushed, its directory never synced"), 0, true)
	if err := os.Mkdir(f.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	rep := loseAndRestart(t, f, Loss{})
	wantContent(t, kept, []byte("flushed, its directory synced"))
	wantGone(t, lost)
	wantGone(t, f.Path("d"))
	if rep.DirOps != 2 {
		t.Fatalf("report %+v, want 2 directory operations undone", rep)
	}
}

func TestUnlinkIsUndone(t *testing.T) {
	f := MountForTest(t)
	p := durableFile(t, f, "f", fill('a', 5000))
	q := durableFile(t, f, "g", fill('g', 10))
	h := durableFile(t, f, "h", fill('h', 10))
	writeFile(t, p, fill('b', 10), 0, false) // not flushed, then unlinked
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(q); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir()) // both unlinks are durable
	if err := os.WriteFile(p, []byte("a new file under the old name"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h); err != nil {
		t.Fatal(err)
	}
	rep := loseAndRestart(t, f, Loss{})
	wantGone(t, p)
	wantGone(t, q)
	wantContent(t, h, fill('h', 10))
	if rep.DirOps != 2 {
		t.Fatalf("report %+v, want 2 directory operations undone (the create of f, the unlink of h)", rep)
	}

	// An unlinked file whose unlink is not durable comes back with its
	// durable contents, not the ones written after.
	writeFile(t, h, fill('x', 3), 0, false)
	if err := os.Remove(h); err != nil {
		t.Fatal(err)
	}
	loseAndRestart(t, f, Loss{})
	wantContent(t, h, fill('h', 10))
}

func TestRenameIsUndone(t *testing.T) {
	f := MountForTest(t)
	x := durableFile(t, f, "x", fill('x', 100))
	y := durableFile(t, f, "y", fill('y', 200))
	if err := os.Rename(x, y); err != nil {
		t.Fatal(err)
	}
	loseAndRestart(t, f, Loss{})
	wantContent(t, x, fill('x', 100))
	wantContent(t, y, fill('y', 200))

	// Renamed and the directory synced: durable, the replaced file gone.
	if err := os.Rename(x, y); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir())
	loseAndRestart(t, f, Loss{})
	wantGone(t, x)
	wantContent(t, y, fill('x', 100))

	// The write-then-rename without fsync of the file: the new name is
	// durable, its contents are not.
	z := f.Path("z.tmp")
	writeFile(t, z, nil, 0, true)
	syncDir(t, f.Dir())
	writeFile(t, z, fill('z', 300), 0, false)
	if err := os.Rename(z, y); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir())
	loseAndRestart(t, f, Loss{})
	wantGone(t, z)
	wantContent(t, y, nil)
}

func TestRmdirIsUndone(t *testing.T) {
	f := MountForTest(t)
	d := f.Path("d")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f.Dir())
	if err := os.Remove(d); err != nil {
		t.Fatal(err)
	}
	loseAndRestart(t, f, Loss{})
	st, err := os.Stat(d)
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("after the power loss d: %v, %v; want the directory back, mode 0700", st, err)
	}
	if err := os.Remove(d); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d, "f"), nil, 0, true)
	if err := os.Remove(d); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir of a directory with a file: %v, want ENOTEMPTY", err)
	}
}

// TestDirectoryOperationsBecomeDurableInOrder: an fsync of one directory
// makes durable every directory operation before the last one that changed
// it, in any directory, and none after it.
func TestDirectoryOperationsBecomeDurableInOrder(t *testing.T) {
	f := MountForTest(t)
	for _, d := range []string{"d1", "d2"} {
		if err := os.Mkdir(f.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	syncDir(t, f.Dir())
	writeFile(t, f.Path("d1/a"), nil, 0, false)
	writeFile(t, f.Path("d2/b"), nil, 0, false)
	writeFile(t, f.Path("d1/c"), nil, 0, false)
	syncDir(t, f.Path("d2"))
	loseAndRestart(t, f, Loss{})
	wantContent(t, f.Path("d1/a"), nil)
	wantContent(t, f.Path("d2/b"), nil)
	wantGone(t, f.Path("d1/c"))
}

func TestPowerLossAtAKnownOperation(t *testing.T) {
	f := MountForTest(t)
	p := durableFile(t, f, "f", fill('a', 100))
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	durableFile(t, f, "other", nil)
	cut := f.PowerLossAt(3, "f", Loss{Tear: 5})
	if _, err := fh.WriteAt(fill('b', 10), 0); err != nil {
		t.Fatal(err)
	}
	writeFile(t, f.Path("other"), []byte("not counted"), 0, true)
	if _, err := fh.WriteAt(fill('c', 10), 10); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cut:
		t.Fatal("the power went before the third operation")
	default:
	}
	if err := fh.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the fsync the power went at: %v, want EIO", err)
	}
	c := <-cut
	if c.Err != nil || c.Report.Writes != 2 || c.Report.Files != 1 || !strings.Contains(c.Report.Torn, "kept 5 of its 10 bytes at offset 10") && !strings.Contains(c.Report.Torn, "at offset 10: kept 5 of its 10 bytes") {
		t.Fatalf("cut %+v", c)
	}
	if _, err := fh.WriteAt([]byte("z"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a write with the power off: %v, want EIO", err)
	}
	if err := os.Mkdir(f.Path("d"), 0o755); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a mkdir with the power off: %v, want EIO", err)
	}
	fh.Close()
	if err := f.Restart(); err != nil {
		t.Fatal(err)
	}
	wantContent(t, p, append(append(fill('a', 10), fill('c', 5)...), fill('a', 85)...))
}

func TestCleanRestartKeepsEverything(t *testing.T) {
	f := MountForTest(t)
	writeFile(t, f.Path("f"), []byte("not flushed, but the machine shut down cleanly"), 0, false)
	if err := f.Restart(); err != nil {
		t.Fatal(err)
	}
	rep := loseAndRestart(t, f, Loss{})
	wantContent(t, f.Path("f"), []byte("not flushed, but the machine shut down cleanly"))
	if rep.Dropped() {
		t.Fatalf("report %+v, want nothing dropped", rep)
	}
}

func TestSyncMakesEverythingDurable(t *testing.T) {
	f := MountForTest(t)
	writeFile(t, f.Path("f"), []byte("setup"), 0, false)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	loseAndRestart(t, f, Loss{})
	wantContent(t, f.Path("f"), []byte("setup"))
}

// TestMissingFUSE: without FUSE a test skips, saying why, or fails when
// required.
func TestMissingFUSE(t *testing.T) {
	for _, required := range []bool{false, true} {
		if required {
			t.Setenv(EnvRequire, "1")
		} else {
			t.Setenv(EnvRequire, "")
			t.Setenv("CI", "")
		}
		r := &recorder{TB: t}
		unavailable(r, errors.New("open /dev/fuse: no such file or directory"))
		got := r.skipped
		if required {
			got = r.failed
		}
		if !strings.HasPrefix(got, "NO FUSE FOR THIS POWER-LOSS TEST: open /dev/fuse") || (r.skipped != "") == required {
			t.Fatalf("required=%v: skipped %q, failed %q", required, r.skipped, r.failed)
		}
	}
}

type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skip(args ...any)                  { r.skipped = args[0].(string) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// TestKillUsers: a process whose working directory is on the mount, and one
// holding a file of it open, are killed.
func TestKillUsers(t *testing.T) {
	f := MountForTest(t)
	durableFile(t, f, "f", nil)
	inside := exec.Command("sleep", "600")
	inside.Dir = f.Dir()
	holding := exec.Command("sh", "-c", "exec 3<"+f.Path("f")+"; echo open; exec sleep 600")
	out, err := holding.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{inside, holding} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "open\n" {
		t.Fatalf("the holding process said %q, %v", line, err)
	}
	if err := f.KillUsers(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{inside, holding} {
		if err := c.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("%s: %v, want killed", c, err)
		}
	}
	if err := f.Restart(); err != nil {
		t.Fatalf("the mount is still in use: %v", err)
	}
}

// TestPowerLossAfter: an armed power loss that did not come is cut now; one
// that came is returned.
func TestPowerLossAfter(t *testing.T) {
	f := MountForTest(t)
	p := durableFile(t, f, "f", nil)
	cut := f.PowerLossAt(100, "", Loss{})
	writeFile(t, p, []byte("x"), 0, false)
	c, fired := f.PowerLossAfter(cut, Loss{})
	if fired || c.Err != nil || c.Report.Writes != 1 || !f.Off() {
		t.Fatalf("not fired: %+v, %v, power off %v; want a cut now dropping 1 write", c, fired, f.Off())
	}
	if err := f.Restart(); err != nil {
		t.Fatal(err)
	}
	cut = f.PowerLossAt(1, "", Loss{})
	fh, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write([]byte("y")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the write the power went at: %v", err)
	}
	fh.Close()
	if c, fired := f.PowerLossAfter(cut, Loss{}); !fired || c.Err != nil {
		t.Fatalf("fired: %+v, %v; want the armed cut", c, fired)
	}
}

// TestMountFrom: what the fill writes before the mount is durable.
func TestMountFrom(t *testing.T) {
	f := MountForTestFrom(t, func(root string) error {
		return os.WriteFile(filepath.Join(root, "seed"), []byte("setup"), 0o600)
	})
	loseAndRestart(t, f, Loss{})
	wantContent(t, f.Path("seed"), []byte("setup"))
}
