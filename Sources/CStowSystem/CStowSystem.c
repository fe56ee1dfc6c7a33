#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <malloc.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <linux/openat2.h>
#include "CStowSystem.h"

int CStowSystem_file_identity(const char *path, int fd, long long *size, unsigned long long *inode) {
    struct stat st;
    int r = path ? stat(path, &st) : fstat(fd, &st);
    if (r != 0) return -1;
    *size = (long long)st.st_size;
    *inode = (unsigned long long)st.st_ino;
    return 0;
}

int CStowSystem_open_blob(const char *path) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    // Non-blocking (a FIFO must not hang the caller), no controlling terminal, and no symbolic
    // link anywhere on the way (nor /proc's magic links): the path names the file itself.
    how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
}

int CStowSystem_is_own_local_file(int fd, long long size) {
    struct stat st;
    if (fstat(fd, &st) != 0) return 0;
    if (!S_ISREG(st.st_mode) || (long long)st.st_size != size || st.st_uid != geteuid()) return 0;
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return 0;
    // On a local disk only: a read that waits on FUSE (this mount, even) or a network would hold
    // the FUSE thread that answers from it.
    switch ((unsigned long)fs.f_type) {
    case 0x65735546UL: /* FUSE */
    case 0x6969UL:     /* NFS */
    case 0xFF534D42UL: /* CIFS */
    case 0xFE534D42UL: /* SMB2 */
    case 0x517BUL:     /* SMB */
    case 0x01021997UL: /* 9P / v9fs */
    case 0x73757245UL: /* CODA */
    case 0x564C: /* NCP */
        return 0;
    default:
        return 1;
    }
}

int CStowSystem_link_count(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    return (int)st.st_nlink;
}

int CStowSystem_punch_hole(int fd, off_t offset, off_t length) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length);
}

int CStowSystem_preallocate(int fd, off_t offset, off_t length) {
    return fallocate(fd, 0, offset, length);
}

long long CStowSystem_data_end(int fd) {
    off_t end = 0, position = 0;
    for (;;) {
        off_t data = lseek(fd, position, SEEK_DATA);
        if (data < 0) return errno == ENXIO ? (long long)end : -1;  /* ENXIO: no data past `position` */
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0) return -1;
        if (hole <= data) return (long long)end;
        end = hole;
        position = hole;
    }
}

ssize_t CStowSystem_copy_file_range(int fd_in, off_t in_offset, int fd_out, off_t out_offset, size_t length) {
    loff_t in = in_offset, out = out_offset;
    return copy_file_range(fd_in, &in, fd_out, &out, length, 0);
}

int CStowSystem_copy_data(int fd_in, int fd_out, long long size) {
    off_t at = 0;
    while (at < size) {
        // Only the data: a hole stays one (SEEK_DATA past the last data is ENXIO: the rest is a hole).
        off_t data = lseek(fd_in, at, SEEK_DATA);
        if (data < 0) return errno == ENXIO ? 0 : -1;
        if (data >= size) return 0;
        off_t hole = lseek(fd_in, data, SEEK_HOLE);
        if (hole < 0) return -1;
        if (hole > size) hole = size;
        loff_t in = data, out = data;
        while (in < hole) {
            ssize_t n = copy_file_range(fd_in, &in, fd_out, &out, (size_t)(hole - in), 0);
            if (n < 0) { if (errno == EINTR) continue; return -1; }
            if (n == 0) { errno = EIO; return -1; }
        }
        at = hole;
    }
    return 0;
}

// MARK: - Writing around the page cache

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// At most DIRECT_MAX_OUT buffers (128 MiB) are in use at once, whatever the number of uploads:
// a writer that would pass it is refused (EBUSY) and its upload goes the usual way.
enum { DIRECT_ALIGN = 4096, DIRECT_BUFFER = 8 << 20, DIRECT_POOL = 8, DIRECT_MAX_OUT = 16 };

struct CStowSystem_direct_file {
    int fd;
    int direct;           // O_DIRECT still on
    int failed;           // a write failed: nothing past `written` is written any more
    int saved_errno;
    char *buffer[2];
    int active;           // the buffer being filled
    size_t fill;
    long long start;      // the file offset of the filling buffer's first byte
    char *rotated;        // the full buffer handed to write_rotated
    size_t rotated_length;
    long long rotated_start;
    long long written;    // bytes from the start of the file known written (contiguous)
};

// Freed buffers, kept for the next writer: fresh memory is what this avoids.
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static char *pool[DIRECT_POOL];
static int pool_count = 0;
static int buffers_out = 0;

// Two buffers for one writer, or none (EBUSY past DIRECT_MAX_OUT, ENOMEM).
static int take_buffers(char **a, char **b) {
    *a = *b = NULL;
    pthread_mutex_lock(&pool_lock);
    if (buffers_out + 2 > DIRECT_MAX_OUT) {
        pthread_mutex_unlock(&pool_lock);
        errno = EBUSY;
        return -1;
    }
    buffers_out += 2;
    if (pool_count > 0) *a = pool[--pool_count];
    if (pool_count > 0) *b = pool[--pool_count];
    pthread_mutex_unlock(&pool_lock);
    if ((*a == NULL && posix_memalign((void **)a, DIRECT_ALIGN, DIRECT_BUFFER) != 0) ||
        (*b == NULL && posix_memalign((void **)b, DIRECT_ALIGN, DIRECT_BUFFER) != 0)) {
        errno = ENOMEM;
        return -1;  // the caller gives back what it got
    }
    return 0;
}

static void give_buffer(char *b) {
    pthread_mutex_lock(&pool_lock);
    buffers_out -= 1;
    if (b == NULL) {
        pthread_mutex_unlock(&pool_lock);
        return;
    }
    if (pool_count < DIRECT_POOL) {
        pool[pool_count++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    free(b);
}

static int set_direct(CStowSystem_direct_file *f, int on) {
    int flags = fcntl(f->fd, F_GETFL);
    if (flags < 0) return -1;
    if (fcntl(f->fd, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT)) < 0) return -1;
    f->direct = on;
    return 0;
}

// Writes all of it at `offset`; a filesystem that refuses O_DIRECT midway gets the rest the usual way.
static int write_all(CStowSystem_direct_file *f, const char *data, size_t length, long long offset) {
    if (f->failed) {
        errno = f->saved_errno;
        return -1;
    }
    size_t done = 0;
    while (done < length) {
        ssize_t n = pwrite(f->fd, data + done, length - done, (off_t)(offset + (long long)done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EINVAL && f->direct) {
            if (set_direct(f, 0) == 0) continue;
        }
        if (n <= 0) {
            f->failed = 1;
            f->saved_errno = n < 0 ? errno : EIO;
            errno = f->saved_errno;
            return -1;
        }
        done += (size_t)n;
        if (offset + (long long)done > f->written) f->written = offset + (long long)done;
    }
    return 0;
}

CStowSystem_direct_file *CStowSystem_direct_open(const char *path, long long offset) {
    if (offset < 0 || offset % DIRECT_ALIGN != 0) {
        errno = EINVAL;
        return NULL;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_DIRECT, 0644);
    if (fd < 0) return NULL;
    if (ftruncate(fd, (off_t)offset) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    CStowSystem_direct_file *f = calloc(1, sizeof *f);
    if (f == NULL) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    if (take_buffers(&f->buffer[0], &f->buffer[1]) != 0) {
        int e = errno;
        if (e != EBUSY) {  // EBUSY took nothing; otherwise both count as out until given back
            give_buffer(f->buffer[0]);
            give_buffer(f->buffer[1]);
        }
        free(f);
        close(fd);
        errno = e;
        return NULL;
    }
    f->fd = fd;
    f->direct = 1;
    f->start = offset;
    f->written = offset;
    return f;
}

size_t CStowSystem_direct_append(CStowSystem_direct_file *f, const void *data, size_t length) {
    size_t space = DIRECT_BUFFER - f->fill;
    size_t n = length < space ? length : space;
    memcpy(f->buffer[f->active] + f->fill, data, n);
    f->fill += n;
    return n;
}

void CStowSystem_direct_rotate(CStowSystem_direct_file *f) {
    f->rotated = f->buffer[f->active];
    f->rotated_length = f->fill;
    f->rotated_start = f->start;
    f->start += (long long)f->fill;
    f->active ^= 1;
    f->fill = 0;
}

int CStowSystem_direct_write_rotated(CStowSystem_direct_file *f) {
    if (f->rotated == NULL) return 0;
    int rc = write_all(f, f->rotated, f->rotated_length, f->rotated_start);
    f->rotated = NULL;
    return rc;
}

int CStowSystem_direct_finish(CStowSystem_direct_file *f) {
    size_t aligned = f->fill & ~(size_t)(DIRECT_ALIGN - 1);
    // A rotated buffer whose write never ran (the thread pool was gone) goes first: no hole.
    int rc = CStowSystem_direct_write_rotated(f);
    if (rc == 0 && aligned > 0) rc = write_all(f, f->buffer[f->active], aligned, f->start);
    if (rc == 0 && aligned < f->fill) {
        // The last partial block: O_DIRECT writes whole blocks only.
        if (f->direct && set_direct(f, 0) != 0) rc = -1;
        if (rc == 0) rc = write_all(f, f->buffer[f->active] + aligned, f->fill - aligned, f->start + (long long)aligned);
    }
    if (rc == 0) {
        f->start += (long long)f->fill;
        f->fill = 0;
    } else {
        // Keep only what was written whole: no hole may pass for received bytes.
        int e = errno;
        if (ftruncate(f->fd, (off_t)f->written) != 0) { /* the size stays; fsync below still runs */ }
        errno = e;
    }
    int e = errno;
    if (fsync(f->fd) != 0 && rc == 0) return -1;
    errno = e;
    return rc;
}

long long CStowSystem_direct_offset(const CStowSystem_direct_file *f) { return f->start + (long long)f->fill; }

void CStowSystem_direct_close(CStowSystem_direct_file *f) {
    if (f == NULL) return;
    close(f->fd);
    give_buffer(f->buffer[0]);
    give_buffer(f->buffer[1]);
    free(f);
}

int CStowSystem_fix_mmap_threshold(int bytes) {
#if defined(__GLIBC__)
    return mallopt(M_MMAP_THRESHOLD, bytes);
#else
    (void)bytes;
    return 0;
#endif
}

// MARK: - systemd notifications

#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

int CStowSystem_notify(const char *socket_path, const char *message, size_t length) {
    struct sockaddr_un address;
    memset(&address, 0, sizeof address);
    address.sun_family = AF_UNIX;
    size_t n = strlen(socket_path);
    if (n == 0 || n >= sizeof address.sun_path) {
        errno = EINVAL;
        return -1;
    }
    memcpy(address.sun_path, socket_path, n);
    socklen_t address_length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (socket_path[0] == '@') {
        address.sun_path[0] = 0;  // abstract: the name is the bytes after the NUL, not terminated
    } else {
        address_length += 1;
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    ssize_t sent = sendto(fd, message, length, MSG_NOSIGNAL, (struct sockaddr *)&address, address_length);
    int saved = errno;
    close(fd);
    errno = saved;
    return sent < 0 ? -1 : 0;
}

#include <stdio.h>
#include <sys/stat.h>

int CStowSystem_stderr_is_journal(const char *journal_stream) {
    unsigned long long device = 0, inode = 0;
    char tail = 0;
    if (journal_stream == NULL || sscanf(journal_stream, "%llu:%llu%c", &device, &inode, &tail) != 2) return 0;
    struct stat st;
    if (fstat(2, &st) != 0) return 0;
    return (unsigned long long)st.st_dev == device && (unsigned long long)st.st_ino == inode;
}

int CStowSystem_syncfs(int fd) {
    return syncfs(fd);
}

#include <sys/resource.h>

long long CStowSystem_raise_file_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = { rl.rlim_max, rl.rlim_max };
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl.rlim_cur = rl.rlim_max;
    }
    return rl.rlim_cur == RLIM_INFINITY ? (long long)1 << 40 : (long long)rl.rlim_cur;
}

int CStowSystem_release_free_memory(void) {
#ifdef __GLIBC__
    return malloc_trim(0);
#else
    return 0;
#endif
}
