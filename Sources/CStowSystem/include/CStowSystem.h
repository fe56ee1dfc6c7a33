#ifndef CSTOWSYSTEM_H
#define CSTOWSYSTEM_H

#include <sys/types.h>

// Linux calls that Swift's Glibc module does not export (they need _GNU_SOURCE).
// Each returns what the call returns (-1 and errno on failure).

/// fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length)
int CStowSystem_punch_hole(int fd, off_t offset, off_t length);

/// copy_file_range(in, NULL, out, NULL, length, 0): copies from the descriptors' current offsets.
ssize_t CStowSystem_copy_file_range(int fd_in, int fd_out, size_t length);

#endif
