#ifndef CSTOWSYSTEM_H
#define CSTOWSYSTEM_H

#include <sys/types.h>
#include <sys/xattr.h>  /* setxattr, getxattr, listxattr: not in Swift's Glibc module */

// Linux calls that Swift's Glibc module does not export (they need _GNU_SOURCE).
// Each returns what the call returns (-1 and errno on failure).

/// fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length)
int CStowSystem_punch_hole(int fd, off_t offset, off_t length);

/// copy_file_range from `in_offset` of `fd_in` to `out_offset` of `fd_out`, leaving both
/// descriptors' file offsets alone.
ssize_t CStowSystem_copy_file_range(int fd_in, off_t in_offset, int fd_out, off_t out_offset, size_t length);

#endif
