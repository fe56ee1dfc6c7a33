#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>
#include "CStowSystem.h"

int CStowSystem_punch_hole(int fd, off_t offset, off_t length) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length);
}

ssize_t CStowSystem_copy_file_range(int fd_in, off_t in_offset, int fd_out, off_t out_offset, size_t length) {
    loff_t in = in_offset, out = out_offset;
    return copy_file_range(fd_in, &in, fd_out, &out, length, 0);
}
