// Package faultfs is a filesystem for power-loss tests: it passes every
// operation through to a directory on the real disk, remembers in memory
// what has not been flushed, and can lose power, after which the disk holds
// exactly what a machine that lost power would find on it.
//
// # What survives a power loss
//
//   - File contents and sizes are durable once the file is flushed: fsync or
//     fdatasync of any descriptor of it, or a write through a descriptor
//     opened with O_SYNC or O_DSYNC. A write, truncate or fallocate not
//     flushed is undone; a page is 4 KiB, and only the bytes an operation
//     changed are restored.
//   - Directory operations (create, mkdir, mknod, symlink, link, unlink,
//     rmdir, rename) are durable once a directory they changed is fsynced,
//     and they become durable in the order they were made: an fsync of
//     directory D makes durable every directory operation up to the last one
//     that changed D, whichever directories the earlier ones changed. So a
//     file created and fsynced in a directory that is never fsynced is gone
//     after a power loss (POSIX promises no more; ext4 and XFS happen to keep
//     it), an unlinked file comes back with its durable contents, and a
//     rename not followed by an fsync of its target directory is undone,
//     the file it replaced restored. This is stricter than LazyFS, whose
//     faults are about data only (a directory operation goes to its
//     underlying filesystem at once and survives every fault).
//   - Attributes (mode, owner, times) and extended attributes are durable at
//     once.
//
// PowerLoss drops everything not durable. With Loss.Tear it tears the last
// write not flushed instead of dropping it whole: its first Tear bytes
// survive (a prefix, as a disk that wrote some of a request's sectors in
// order leaves it), everything else not flushed is dropped. PowerLossAt
// makes the power go at a known point: instead of the n-th writing
// operation from now (a write, truncate, fallocate, fsync or directory
// change), which fails with EIO. After a power loss every change fails with
// EIO, as on a machine that is off, until Restart remounts the filesystem on
// what the disk holds, fresh as after a reboot (no page cache survives).
// Flushing does not fsync the real disk underneath: its durability is not
// what is under test. syncfs(2) and sync(2) do not reach the filesystem
// (go-fuse does not serve FUSE_SYNCFS), so here they make nothing durable:
// a program that relies on them loses more, never less, than on a real
// disk.
//
// # Why a FUSE filesystem
//
// The stores under test are a separate process (PostgreSQL), a library in
// a child process of the test (SQLite through modernc.org/sqlite, which
// maps its -shm file into memory) and an embedded server (NATS JetStream):
// only the kernel sees all of their writes and flushes, so only a
// filesystem the kernel mounts can keep them. A library shim (an SQLite VFS,
// an io/fs wrapper) would reach one store; LD_PRELOAD does not reach Go's
// raw system calls; a block device (dm-flakey, dm-log-writes) needs device
// mapper and a filesystem on it, where the ordering of metadata is the real
// filesystem's, not a rule of ours. FUSE (github.com/hanwen/go-fuse/v2,
// with the kernel's writeback cache off, so that every write reaches the
// filesystem when the caller makes it, and without FUSE passthrough, which
// would send writes around it) gives every flush to Go code that can keep
// the undo state exactly, in the test's own process.
//
// The filesystem keeps the disk up to date and remembers, per file, the
// durable bytes of each page changed since its last flush, and, per
// directory operation not yet durable, how to undo it (an unlinked or
// replaced file stays reachable as a hard link under the disk's grave
// directory until the operation is durable). A power loss restores those
// bytes, truncates each file to its durable size and undoes the directory
// operations newest first.
//
// Never serve a file of this filesystem to the process that mounted it by
// mmap: a page fault is not a system call, so a garbage collection that
// stops the world while one waits for the filesystem's goroutines
// deadlocks. Run such users (SQLite) in a child process.
//
// Mounting needs /dev/fuse and root (go-fuse then mounts directly), or
// fusermount3. MountForTest skips a test loudly where FUSE is missing, and
// fails it under CI=true or LEASEHOLD_REQUIRE_FUSE=1.
package faultfs
