package faultfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// pageSize is the unit in which contents are saved before they change.
const pageSize = 4096

// pending is a file's contents as of its last flush, as far as they have
// changed since.
type pending struct {
	size   int64            // the size at the last flush
	pages  map[int64][]byte // by page index: the durable bytes of each page changed since (short at the durable end)
	writes int              // writes since the last flush
}

// write is the last write not flushed, kept for tearing.
type write struct {
	ino  uint64
	off  int64
	data []byte
}

// opKind is a kind of directory operation.
type opKind int

const (
	opCreate   opKind = iota // a file, device, fifo, socket, symlink or hard link appeared at path
	opMkdir                  // a directory appeared at path
	opUnlink                 // path was unlinked; grave holds it
	opRmdir                  // the empty directory path was removed; grave holds it
	opRename                 // path moved to path2; grave holds what path2 named before, if anything
	opExchange               // path and path2 were exchanged
)

// dirOp is a directory operation not yet durable, and how to undo it.
type dirOp struct {
	kind        opKind
	path, path2 string   // on the disk, as they were
	grave       string   // under FS.grave
	dirs        []uint64 // the inodes of the directories it changed
}

// pendingFor returns the undo state of the file ino, open as fd, starting it
// at the file's first change since its last flush.
func (f *FS) pendingFor(ino uint64, fd int) (*pending, error) {
	if p := f.files[ino]; p != nil {
		return p, nil
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	p := &pending{size: st.Size, pages: map[int64][]byte{}}
	f.files[ino] = p
	return p, nil
}

// save keeps the durable bytes of every page that [off, off+n) overlaps, read
// through fd, before they change. A page already kept is kept as it was.
func (p *pending) save(fd int, off, n int64) error {
	end := min(off+n, p.size)
	for pg := off / pageSize; pg*pageSize < end; pg++ {
		if _, ok := p.pages[pg]; ok {
			continue
		}
		buf := make([]byte, min(pageSize, p.size-pg*pageSize))
		for done := 0; done < len(buf); {
			// A page beyond the file's current end was kept when the
			// file was cut short, so a short read here is not expected;
			// its rest would read as zeros.
			k, err := syscall.Pread(fd, buf[done:], pg*pageSize+int64(done))
			if err != nil {
				return err
			}
			if k == 0 {
				break
			}
			done += k
		}
		p.pages[pg] = buf
	}
	return nil
}

// saveFrom keeps every durable page from off to the durable end (a truncate
// to off, or an fallocate that moves or zeroes contents after off).
func (p *pending) saveFrom(fd int, off int64) error { return p.save(fd, off, max(0, p.size-off)) }

// flushFile makes the file ino's contents durable.
func (f *FS) flushFile(ino uint64) {
	delete(f.files, ino)
	if f.last != nil && f.last.ino == ino {
		f.last = nil
	}
}

// newGrave returns a fresh path under the grave.
func (f *FS) newGrave() string {
	f.graves++
	return filepath.Join(f.grave, strconv.Itoa(f.graves))
}

// commitDir makes durable every directory operation up to the last one that
// changed the directory ino.
func (f *FS) commitDir(ino uint64) error {
	last := -1
	for i, op := range f.journal {
		if slices.Contains(op.dirs, ino) {
			last = i
		}
	}
	return f.commit(last + 1)
}

// commit makes the first n directory operations of the journal durable,
// letting go of what they removed.
func (f *FS) commit(n int) error {
	var errs []error
	for _, op := range f.journal[:n] {
		if op.grave != "" {
			errs = append(errs, os.RemoveAll(op.grave))
		}
	}
	f.journal = slices.Delete(f.journal, 0, n)
	return errors.Join(errs...)
}

// cut is the power loss: it drops from the disk everything not durable
// (tearing the last write as l says) and leaves the power off. f.mu is held.
func (f *FS) cut(l Loss) (Report, error) {
	f.off, f.armed = true, nil
	var rep Report
	var errs []error
	paths, err := f.inodePaths()
	errs = append(errs, err)
	for ino, p := range f.files {
		rep.Files++
		rep.Writes += p.writes
		// A file not found was created by an operation undone below, or
		// removed for good: nothing of it survives anyway.
		if path, ok := paths[ino]; ok {
			errs = append(errs, restore(path, p))
		}
	}
	for i := len(f.journal) - 1; i >= 0; i-- {
		errs = append(errs, undo(f.journal[i]))
	}
	rep.DirOps = len(f.journal)
	if w := f.last; l.Tear > 0 && w != nil {
		keep := min(l.Tear, len(w.data))
		paths, err := f.inodePaths()
		errs = append(errs, err)
		if path, ok := paths[w.ino]; ok {
			errs = append(errs, pwriteAt(path, w.data[:keep], w.off))
			rel, _ := filepath.Rel(f.root, path)
			rep.Torn = fmt.Sprintf("the last write, to %s at offset %d: kept %d of its %d bytes", rel, w.off, keep, len(w.data))
		} else {
			rep.Torn = "nothing: the file of the last write did not survive"
		}
	}
	f.files, f.journal, f.last = map[uint64]*pending{}, nil, nil
	graves, err := os.ReadDir(f.grave)
	errs = append(errs, err)
	for _, g := range graves {
		errs = append(errs, os.RemoveAll(filepath.Join(f.grave, g.Name())))
	}
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("faultfs: restoring the disk after the power loss: %w", err)
	}
	return rep, nil
}

// inodePaths maps the inode of every regular file on the disk (the tree and
// the grave) to a path of it.
func (f *FS) inodePaths() (map[uint64]string, error) {
	out := map[uint64]string{}
	for _, top := range []string{f.root, f.grave} {
		err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(path, &st); err != nil {
				return err
			}
			out[st.Ino] = path
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// restore puts back the durable bytes p kept and the durable size.
func restore(path string, p *pending) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	for pg, b := range p.pages {
		if _, err := syscall.Pwrite(fd, b, pg*pageSize); err != nil {
			return err
		}
	}
	return syscall.Ftruncate(fd, p.size)
}

func pwriteAt(path string, b []byte, off int64) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	_, err = syscall.Pwrite(fd, b, off)
	return err
}

// undo reverses one directory operation; the operations after it are undone
// already.
func undo(op dirOp) error {
	switch op.kind {
	case opCreate:
		return syscall.Unlink(op.path)
	case opMkdir:
		return os.RemoveAll(op.path)
	case opUnlink, opRmdir:
		return os.Rename(op.grave, op.path)
	case opRename:
		if err := os.Rename(op.path2, op.path); err != nil {
			return err
		}
		if op.grave != "" {
			return os.Rename(op.grave, op.path2)
		}
		return nil
	case opExchange:
		return unix.Renameat2(unix.AT_FDCWD, op.path, unix.AT_FDCWD, op.path2, unix.RENAME_EXCHANGE)
	}
	return fmt.Errorf("faultfs: no undo for directory operation %d", op.kind)
}
