#ifndef CSTOWSYSTEM_H
#define CSTOWSYSTEM_H

#include <sys/types.h>
#include <sys/xattr.h>  /* setxattr, getxattr, listxattr: not in Swift's Glibc module */

// Linux calls that Swift's Glibc module does not export (they need _GNU_SOURCE).
// Each returns what the call returns (-1 and errno on failure).

/// fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length)
int CStowSystem_punch_hole(int fd, off_t offset, off_t length);

/// fallocate(fd, 0, offset, length): blocks given to a range before it is written (ext4 then
/// reserves no block per page as each write lands); the file grows to the range's end. (Not with
/// FALLOC_FL_KEEP_SIZE: ext4 punches no hole past the end of a file, so blocks given there could
/// not be given back.) -1 with errno on failure.
int CStowSystem_preallocate(int fd, off_t offset, off_t length);
/* Flushes the whole filesystem holding `fd` (syncfs(2)): one call for many files. */
int CStowSystem_syncfs(int fd);

/// Fixes glibc's mmap threshold (allocations of `bytes` or more are mapped, and unmapped when
/// freed) instead of letting it grow with freed blocks: a server that allocates buffers of many
/// MiB (S3 parts) otherwise keeps freed ones in its heap, and its resident memory only grows.
/// Returns 1 on success (0 where malloc is not glibc's).
int CStowSystem_fix_mmap_threshold(int bytes);

/// Gives the heap's free pages back to the system (glibc's malloc_trim(0), every arena): after a
/// burst of short-lived allocations (a kept tree of 100,000 names read at a mount's start), the
/// freed memory otherwise stays resident. Returns 1 if memory was released (0 where malloc is not
/// glibc's, or nothing was).
int CStowSystem_release_free_memory(void);

/// Where the data of `fd` ends: the end of its last data region (SEEK_DATA / SEEK_HOLE), so a
/// file whose tail is a hole (extended by truncate) reports less than its size. -1 with errno
/// on failure; the size where the filesystem does not report holes.
long long CStowSystem_data_end(int fd);

/// The size and inode number of the file at `path` (stat) or open as `fd` (fstat, when `path` is
/// NULL). 0, or -1 with errno.
int CStowSystem_file_identity(const char *path, int fd, long long *size, unsigned long long *inode);
/// Opens a server's blob file for reading: non-blocking, no symbolic link on the way (`openat2`
/// with RESOLVE_NO_SYMLINKS); -1 with errno on failure.
int CStowSystem_open_blob(const char *path);
/// 1 when `fd` is a regular file of exactly `size` bytes, owned by this process's user, on a local
/// filesystem (not FUSE, NFS, SMB, 9P); else 0.
int CStowSystem_is_own_local_file(int fd, long long size);
/// The open file's link count (0 once removed), -1 on failure.
int CStowSystem_link_count(int fd);

/// The first `size` bytes of `fd_in` into `fd_out` at the same offsets, by copy_file_range, data
/// only (holes left as holes); 0, or -1 with errno (EXDEV: not on one filesystem).
int CStowSystem_copy_data(int fd_in, int fd_out, long long size);

/// copy_file_range from `in_offset` of `fd_in` to `out_offset` of `fd_out`, leaving both
/// descriptors' file offsets alone.
ssize_t CStowSystem_copy_file_range(int fd_in, off_t in_offset, int fd_out, off_t out_offset, size_t length);

// A file written around the page cache (O_DIRECT), for stowd's staging files: large uploads
// would otherwise pass through fresh page-cache pages, which cost more than the disk on a VM
// (docs/performance.md). Bytes are copied into one of two aligned buffers; a full buffer is
// written (blocking: on a thread pool) while the other fills. The last partial block goes
// through the page cache. Not thread-safe: one writer, and at most one write in flight.
typedef struct CStowSystem_direct_file CStowSystem_direct_file;

/// Opens `path` for writing (created if missing, cut to `offset`), the next byte at `offset`.
/// NULL with errno on failure; EINVAL when `offset` is not a multiple of 4096 or the filesystem
/// refuses O_DIRECT (the caller then writes the usual way).
CStowSystem_direct_file *CStowSystem_direct_open(const char *path, long long offset);

/// Copies up to `length` bytes into the filling buffer; returns how many fit (fewer than
/// `length` when it is full: then `rotate`, write the full one, and append the rest).
size_t CStowSystem_direct_append(CStowSystem_direct_file *f, const void *data, size_t length);

/// Hands the full buffer over to `write_rotated` and starts filling the other one. Only once the
/// previous `write_rotated` returned.
void CStowSystem_direct_rotate(CStowSystem_direct_file *f);

/// Writes the buffer `rotate` handed over. Blocking. 0, or -1 with errno.
int CStowSystem_direct_write_rotated(CStowSystem_direct_file *f);

/// Writes what is buffered (a rotated buffer not written yet, then the rest; the last partial
/// block through the page cache) and fsyncs. Blocking; only once the previous `write_rotated`
/// returned. 0, or -1 with errno (also for an earlier failed write).
int CStowSystem_direct_finish(CStowSystem_direct_file *f);

/// The offset the next byte goes to.
long long CStowSystem_direct_offset(const CStowSystem_direct_file *f);

/// Closes the file and frees the writer (its buffers are kept for the next one).
void CStowSystem_direct_close(CStowSystem_direct_file *f);

/// Sends `message` (`length` bytes) as one datagram to the AF_UNIX socket `socket_path`, as
/// systemd's sd_notify does with $NOTIFY_SOCKET (a leading `@` names an abstract socket).
/// 0, or -1 with errno (EINVAL: an empty path or one too long for sockaddr_un).
int CStowSystem_notify(const char *socket_path, const char *message, size_t length);

/// Whether standard error is the stream `journal_stream` names (`$JOURNAL_STREAM`: "DEVICE:INODE",
/// set by systemd when it connects a service's output to the journal): 1 if so, else 0.
int CStowSystem_stderr_is_journal(const char *journal_stream);

/// Raises this process's soft limit of open descriptors to its hard limit; returns the soft limit
/// in force afterwards (-1 if it cannot be read).
long long CStowSystem_raise_file_limit(void);

#endif
