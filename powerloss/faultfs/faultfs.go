package faultfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted fault filesystem. Its methods are safe for concurrent use.
type FS struct {
	mnt   string // the mount point
	root  string // the disk: the tree under the mount point
	grave string // the disk: files unlinked or replaced by an operation not yet durable

	server *fuse.Server

	mu      sync.Mutex
	off     bool                // the power is off: every change fails with EIO
	files   map[uint64]*pending // by inode on the disk: files changed since their last flush
	journal []dirOp             // directory operations not yet durable, oldest first
	graves  int                 // names handed out under grave
	last    *write              // the last write not flushed
	armed   *trigger
	counts  Counts
}

// Counts are the operations the filesystem has seen since it was mounted
// (a Restart starts them again).
type Counts struct {
	Writes    int64 // writes (a write(2) may reach the filesystem as several)
	Syncs     int64 // fsync and fdatasync of files, and writes through O_SYNC/O_DSYNC descriptors
	DirSyncs  int64 // fsync of directories
	DirOps    int64 // directory operations
	Truncates int64 // truncates and fallocates
}

// Loss says how a power loss treats what is not durable.
type Loss struct {
	// Tear, when positive, keeps the first Tear bytes of the last write not
	// flushed (all of it when it is shorter); 0 drops it whole.
	Tear int
}

// Report is what a power loss dropped.
type Report struct {
	// Files is how many files had contents not flushed, Writes how many
	// writes to them were dropped (a torn one included).
	Files  int
	Writes int
	// DirOps is how many directory operations were undone.
	DirOps int
	// Torn describes the torn write ("" when none was torn).
	Torn string
}

// Dropped reports whether the power loss dropped anything.
func (r Report) Dropped() bool { return r.Writes > 0 || r.DirOps > 0 }

func (r Report) String() string {
	s := fmt.Sprintf("dropped %d writes to %d files and %d directory operations", r.Writes, r.Files, r.DirOps)
	if r.Torn != "" {
		s += "; tore " + r.Torn
	}
	return s
}

// Cut is a power loss that PowerLossAt armed, once it happened.
type Cut struct {
	Report Report
	Err    error // the disk could not be restored: the test can go no further
}

// trigger is a power loss armed by PowerLossAt.
type trigger struct {
	left int    // writing operations still allowed
	only string // a pattern the names of the operations counted match
	loss Loss
	done chan Cut
}

// matches reports whether an operation on name counts.
func (t *trigger) matches(name string) bool {
	if t.only == "" {
		return true
	}
	ok, _ := path.Match(t.only, name)
	return ok
}

// Mount creates dir/disk (the disk) and dir/mnt (the mount point) if they do
// not exist and mounts the filesystem at dir/mnt, on what dir/disk holds,
// all of it durable.
func Mount(dir string) (*FS, error) {
	f := &FS{mnt: filepath.Join(dir, "mnt"), root: filepath.Join(dir, "disk", "root"), grave: filepath.Join(dir, "disk", "grave")}
	for _, d := range []string{f.mnt, f.root, f.grave} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *FS) mount() error {
	f.files = map[uint64]*pending{}
	f.journal, f.last, f.armed, f.off = nil, nil, nil, false
	f.counts = Counts{}
	var st syscall.Stat_t
	if err := syscall.Stat(f.root, &st); err != nil {
		return err
	}
	lr := &fs.LoopbackRoot{Path: f.root, Dev: uint64(st.Dev)}
	lr.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, f: f}
	}
	lr.RootNode = lr.NewNode(lr, nil, "", &st)
	// Every change reaches the disk through this mount, so the kernel may
	// keep names and attributes as long as it likes; a power loss
	// remounts, dropping them.
	cache := time.Hour
	opts := &fs.Options{EntryTimeout: &cache, AttrTimeout: &cache, NegativeTimeout: &cache, MountOptions: fuse.MountOptions{
		FsName: "leasehold-faultfs",
		Name:   "faultfs",
		// Root mounts directly (no fusermount needed), and lets other
		// users in (PostgreSQL runs as postgres), the kernel checking
		// their permissions as on any filesystem.
		DirectMount: true,
		AllowOther:  os.Geteuid() == 0,
		Options:     []string{"default_permissions"},
	}}
	server, err := fs.Mount(f.mnt, lr.RootNode, opts)
	if err != nil {
		return fmt.Errorf("faultfs: mount at %s: %w", f.mnt, err)
	}
	f.server = server
	return nil
}

// Dir is the mount point.
func (f *FS) Dir() string { return f.mnt }

// Path is name under the mount point.
func (f *FS) Path(name string) string { return filepath.Join(f.mnt, name) }

// Counts returns the operations seen since the filesystem was mounted.
func (f *FS) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

// Sync makes everything durable, as sync(2) on a filesystem that honours it:
// a test's setup can start its workload from a durable state.
func (f *FS) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off {
		return errOff
	}
	f.files = map[uint64]*pending{}
	f.last = nil
	return f.commit(len(f.journal))
}

var errOff = errors.New("faultfs: the power is off; Restart first")

// PowerLoss cuts the power now: everything not durable is dropped from the
// disk (the last write torn as l says), and every change fails with EIO until
// Restart. Stop whatever uses the filesystem, then Restart.
func (f *FS) PowerLoss(l Loss) (Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.off {
		return Report{}, errOff
	}
	return f.cut(l)
}

// PowerLossAfter ends an armed power loss: if the power went at the armed
// operation it returns that cut and true; if not, the power goes now, and it
// returns this cut and false. Either way the power is off after it.
func (f *FS) PowerLossAfter(armed <-chan Cut, l Loss) (Cut, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// A trigger that fired sent its cut before letting go of f.mu.
	select {
	case c := <-armed:
		return c, true
	default:
	}
	if f.off {
		return Cut{Err: errOff}, false
	}
	rep, err := f.cut(l)
	return Cut{Report: rep, Err: err}, false
}

// PowerLossAt arms a power loss at the n-th writing operation from now (1:
// the next) on a file or directory whose base name matches the pattern only
// (path.Match; "" matches every name): a write, truncate, fallocate, fsync or
// directory operation (named by the entry it makes or removes). The power
// goes instead of that operation, which fails with EIO, and the cut is sent
// on the returned channel (buffered). A later call replaces an armed one;
// PowerLoss and Restart disarm it.
func (f *FS) PowerLossAt(n int, only string, l Loss) <-chan Cut {
	if n < 1 {
		panic("faultfs: PowerLossAt wants n >= 1")
	}
	if _, err := path.Match(only, ""); err != nil {
		panic("faultfs: PowerLossAt: " + err.Error())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &trigger{left: n - 1, only: only, loss: l, done: make(chan Cut, 1)}
	f.armed = t
	return t.done
}

// Off reports whether the power is off.
func (f *FS) Off() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.off
}

// Restart unmounts the filesystem and mounts it again on what the disk
// holds, all of it durable: the machine coming back after a power loss (or
// a clean reboot, when the power is on: then nothing is dropped, as at a
// clean shutdown). Every process using the mount must have stopped; the
// unmount fails if one still holds a file open.
func (f *FS) Restart() error {
	if err := f.unmount(); err != nil {
		return err
	}
	return f.mount()
}

// Unmount unmounts the filesystem, leaving the disk as it is (a power loss
// before it stays). Every process using the mount must have stopped.
func (f *FS) Unmount() error { return f.unmount() }

func (f *FS) unmount() error {
	if f.server == nil {
		return nil
	}
	f.mu.Lock()
	if !f.off {
		// A clean shutdown writes everything out.
		f.files, f.last = map[uint64]*pending{}, nil
		if err := f.commit(len(f.journal)); err != nil {
			f.mu.Unlock()
			return err
		}
	}
	f.off, f.armed = true, nil
	f.mu.Unlock()
	if err := f.server.Unmount(); err != nil {
		return fmt.Errorf("faultfs: unmount %s (does a process still use it?): %w", f.mnt, err)
	}
	f.server = nil
	return nil
}
