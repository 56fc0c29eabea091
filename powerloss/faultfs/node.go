package faultfs

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a file or directory: go-fuse's loopback node, with every
// operation that changes the disk or flushes it taken through the FS's
// bookkeeping. Each such operation holds FS.mu from its check of the power
// to its change of the disk, so that a power loss falls between operations.
type node struct {
	fs.LoopbackNode
	f *FS
}

// begin starts a writing operation on the file or directory name (a base
// name), counting it in count: EIO when the power is off, or goes off now (an
// armed PowerLossAt). f.mu is held.
func (f *FS) begin(count *int64, name string) syscall.Errno {
	if f.off {
		return syscall.EIO
	}
	if t := f.armed; t != nil && t.matches(name) {
		if t.left == 0 {
			rep, err := f.cut(t.loss)
			t.done <- Cut{Report: rep, Err: err}
			return syscall.EIO
		}
		t.left--
	}
	*count++
	return 0
}

// path is the node's path on the disk.
func (n *node) path() string {
	return filepath.Join(n.RootData.Path, n.Path(n.RootData.RootNode.EmbeddedInode()))
}

// name is the node's base name ("" for the root).
func (n *node) name() string {
	name, _ := n.Parent()
	return name
}

// ino is the inode of the node's file on the disk.
func (n *node) ino() (uint64, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(n.path(), &st); err != nil {
		return 0, fs.ToErrno(err)
	}
	return st.Ino, 0
}

// journal records a directory operation of this directory that succeeded.
func (n *node) journal(op dirOp) {
	if ino, errno := n.ino(); errno == 0 {
		op.dirs = append(op.dirs, ino)
	}
	n.f.journal = append(n.f.journal, op)
}

// readable turns a write-only open into a read-write one on the disk, so that
// the file's durable contents can be read through the same descriptor before
// a write changes them. The kernel has checked the caller's access already.
func readable(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		return flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

// truncating keeps what a truncate of the file at path to size will cut.
func (f *FS) truncating(path string, size int64) syscall.Errno {
	fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	p, err := f.pendingFor(st.Ino, fd)
	if err == nil {
		err = p.saveFrom(fd, size)
	}
	return fs.ToErrno(err)
}

var _ = (fs.NodeCreater)((*node)(nil))

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(&f.counts.DirOps, name); errno != 0 {
		return nil, nil, 0, errno
	}
	p := filepath.Join(n.path(), name)
	var st syscall.Stat_t
	existed := syscall.Lstat(p, &st) == nil
	if existed && flags&syscall.O_TRUNC != 0 {
		if errno := f.truncating(p, 0); errno != 0 {
			return nil, nil, 0, errno
		}
	}
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, readable(flags), mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := f.wrap(fh, flags, name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !existed {
		// A new file owns nothing a file of the same inode number,
		// removed before, left behind.
		f.flushFile(h.ino)
		n.journal(dirOp{kind: opCreate, path: p})
	}
	return ch, h, fuseFlags, 0
}

var _ = (fs.NodeOpener)((*node)(nil))

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.f
	if flags&syscall.O_TRUNC != 0 {
		f.mu.Lock()
		defer f.mu.Unlock()
		if errno := f.begin(&f.counts.Truncates, n.name()); errno != 0 {
			return nil, 0, errno
		}
		if errno := f.truncating(n.path(), 0); errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, readable(flags))
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := f.wrap(fh, flags, n.name())
	return h, fuseFlags, errno
}

var _ = (fs.NodeMkdirer)((*node)(nil))

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.creating(opMkdir, name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Mkdir(ctx, name, mode, out) })
}

var _ = (fs.NodeMknoder)((*node)(nil))

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.creating(opCreate, name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out) })
}

var _ = (fs.NodeSymlinker)((*node)(nil))

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.creating(opCreate, name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Symlink(ctx, target, name, out) })
}

var _ = (fs.NodeLinker)((*node)(nil))

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.creating(opCreate, name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Link(ctx, target, name, out) })
}

// creating runs an operation that makes a new name in this directory.
func (n *node) creating(kind opKind, name string, op func() (*fs.Inode, syscall.Errno)) (*fs.Inode, syscall.Errno) {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(&f.counts.DirOps, name); errno != 0 {
		return nil, errno
	}
	ch, errno := op()
	if errno == 0 {
		n.journal(dirOp{kind: kind, path: filepath.Join(n.path(), name)})
	}
	return ch, errno
}

var _ = (fs.NodeUnlinker)((*node)(nil))

// Unlink keeps the file as a hard link in the grave until the unlink is
// durable, so that a power loss can bring it back.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(&f.counts.DirOps, name); errno != 0 {
		return errno
	}
	p := filepath.Join(n.path(), name)
	g := f.newGrave()
	if err := syscall.Link(p, g); err != nil {
		return fs.ToErrno(err)
	}
	if err := syscall.Unlink(p); err != nil {
		syscall.Unlink(g)
		return fs.ToErrno(err)
	}
	n.journal(dirOp{kind: opUnlink, path: p, grave: g})
	return 0
}

var _ = (fs.NodeRmdirer)((*node)(nil))

// Rmdir moves the empty directory into the grave until the removal is
// durable.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(&f.counts.DirOps, name); errno != 0 {
		return errno
	}
	p := filepath.Join(n.path(), name)
	if errno := emptyDir(p); errno != 0 {
		return errno
	}
	g := f.newGrave()
	if err := os.Rename(p, g); err != nil {
		return fs.ToErrno(err)
	}
	n.journal(dirOp{kind: opRmdir, path: p, grave: g})
	return 0
}

func emptyDir(p string) syscall.Errno {
	entries, err := os.ReadDir(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	if len(entries) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0
}

var _ = (fs.NodeRenamer)((*node)(nil))

// Rename keeps the file it replaces in the grave until the rename is
// durable.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	f := n.f
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(&f.counts.DirOps, name); errno != 0 {
		return errno
	}
	p1, p2 := filepath.Join(n.path(), name), filepath.Join(np.path(), newName)
	op := dirOp{kind: opRename, path: p1, path2: p2}
	if d, errno := np.ino(); errno == 0 {
		op.dirs = append(op.dirs, d)
	}
	var undoGrave func()
	var st2 syscall.Stat_t
	switch {
	case flags&unix.RENAME_EXCHANGE != 0:
		op.kind = opExchange
	case flags&unix.RENAME_NOREPLACE != 0 || syscall.Lstat(p2, &st2) != nil:
		// Nothing is replaced.
	case st2.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		// Only an empty directory may be replaced, and only by one: the
		// checks rename makes, made before the directory moves away.
		var st1 syscall.Stat_t
		if err := syscall.Lstat(p1, &st1); err != nil {
			return fs.ToErrno(err)
		}
		if st1.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return syscall.EISDIR
		}
		if errno := emptyDir(p2); errno != 0 {
			return errno
		}
		op.grave = f.newGrave()
		if err := os.Rename(p2, op.grave); err != nil {
			return fs.ToErrno(err)
		}
		undoGrave = func() { os.Rename(op.grave, p2) }
	default:
		op.grave = f.newGrave()
		if err := syscall.Link(p2, op.grave); err != nil {
			return fs.ToErrno(err)
		}
		undoGrave = func() { syscall.Unlink(op.grave) }
	}
	if errno := n.LoopbackNode.Rename(ctx, name, &np.LoopbackNode, newName, flags); errno != 0 {
		if undoGrave != nil {
			undoGrave()
		}
		return errno
	}
	n.journal(op)
	return 0
}

var _ = (fs.NodeSetattrer)((*node)(nil))

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	inner := fh
	if h, ok := fh.(*handle); ok {
		inner = h.lf
	}
	size, ok := in.GetSize()
	if !ok {
		return n.LoopbackNode.Setattr(ctx, inner, in, out)
	}
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(&f.counts.Truncates, n.name()); errno != 0 {
		return errno
	}
	if errno := f.truncating(n.path(), int64(size)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Setattr(ctx, inner, in, out)
}

var _ = (fs.NodeFsyncer)((*node)(nil))

// Fsync flushes a file's contents, or a directory's operations (with every
// directory operation before them).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Lstat(n.path(), &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		if errno := f.begin(&f.counts.DirSyncs, n.name()); errno != 0 {
			return errno
		}
		return fs.ToErrno(f.commitDir(st.Ino))
	}
	if errno := f.begin(&f.counts.Syncs, n.name()); errno != 0 {
		return errno
	}
	ino := st.Ino
	if h, ok := fh.(*handle); ok {
		ino = h.ino // the file may have been unlinked or replaced since
	}
	f.flushFile(ino)
	return 0
}

var _ = (fs.NodeOpendirHandler)((*node)(nil))

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.path())
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{ds: ds, n: n}, 0, 0
}

// dirHandle is an open directory: the loopback's, with fsync taken to the
// node.
type dirHandle struct {
	ds fs.DirStream
	n  *node
}

var (
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileReleasedirer)((*dirHandle)(nil))
	_ = (fs.FileFsyncdirer)((*dirHandle)(nil))
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, nil, flags)
}

// handle is an open file: the loopback's, with every change taken through
// the FS's bookkeeping. It offers no passthrough descriptor (the kernel would
// write around the filesystem) and no vectored write.
type handle struct {
	lf   *fs.LoopbackFile
	name string // the file's base name when it was opened
	fd   int
	ino  uint64
	sync bool // opened O_SYNC or O_DSYNC: every write is flushed
	f    *FS
}

var (
	_ = (fs.FileReader)((*handle)(nil))
	_ = (fs.FileWriter)((*handle)(nil))
	_ = (fs.FileReleaser)((*handle)(nil))
	_ = (fs.FileFlusher)((*handle)(nil))
	_ = (fs.FileGetattrer)((*handle)(nil))
	_ = (fs.FileLseeker)((*handle)(nil))
	_ = (fs.FileAllocater)((*handle)(nil))
)

// wrap wraps the loopback's file handle for a file opened with flags.
func (f *FS) wrap(fh fs.FileHandle, flags uint32, name string) (*handle, syscall.Errno) {
	lf := fh.(*fs.LoopbackFile)
	fd, _ := lf.PassthroughFd()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		lf.Release(context.Background())
		return nil, fs.ToErrno(err)
	}
	return &handle{lf: lf, name: name, fd: fd, ino: st.Ino, sync: flags&syscall.O_DSYNC != 0, f: f}, 0
}

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(&f.counts.Writes, h.name); errno != 0 {
		return 0, errno
	}
	p, err := f.pendingFor(h.ino, h.fd)
	if err == nil {
		err = p.save(h.fd, off, int64(len(data)))
	}
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	written, errno := h.lf.Write(ctx, data, off)
	if written > 0 {
		p.writes++
		f.last = &write{ino: h.ino, off: off, data: slices.Clone(data[:written])}
	}
	if h.sync {
		f.counts.Syncs++
		f.flushFile(h.ino)
	}
	return written, errno
}

func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := f.begin(&f.counts.Truncates, h.name); errno != 0 {
		return errno
	}
	p, err := f.pendingFor(h.ino, h.fd)
	if err == nil && mode&^unix.FALLOC_FL_KEEP_SIZE != 0 {
		// Punching, zeroing, collapsing or inserting a range changes
		// contents from off on; plain allocation changes only the size.
		err = p.saveFrom(h.fd, int64(off))
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	return h.lf.Allocate(ctx, off, size, mode)
}

func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }

func (h *handle) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}
