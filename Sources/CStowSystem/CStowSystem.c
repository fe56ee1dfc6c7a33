#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>
#include "CStowSystem.h"

int CStowSystem_punch_hole(int fd, off_t offset, off_t length) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length);
}

ssize_t CStowSystem_copy_file_range(int fd_in, int fd_out, size_t length) {
    return copy_file_range(fd_in, NULL, fd_out, NULL, length, 0);
}
