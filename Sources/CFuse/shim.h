#ifndef CFUSE_SHIM_H
#define CFUSE_SHIM_H

// 314 = FUSE_MAKE_VERSION(3, 14): the installed libfuse. From 312 on, with a libfuse
// built with versioned symbols (Debian's is), fuse_session_loop_mt is a real declaration.
#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif

#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <errno.h>
#include <signal.h>
#include <sys/mount.h>

// renameat2 flags live in <linux/fs.h>, which clashes with <sys/mount.h>.
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#define RENAME_EXCHANGE (1 << 1)
#endif

#endif
