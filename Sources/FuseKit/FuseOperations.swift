import CFuse
import StowFS
#if canImport(Glibc)
import Glibc
#endif

/// The adapter behind a request (the session's userdata; the session holds the +1).
@inline(__always)
func adapter(_ req: fuse_req_t?) -> FuseAdapter {
    Unmanaged<FuseAdapter>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}

/// A name (or symlink target) from the kernel, as UTF-8 exactly: never repaired, since a repaired
/// name is another file's name. A name that is not valid UTF-8 answers the request `EILSEQ`
/// (and gives nil): the server keeps names as UTF-8 (JSON, URLs), so it could not store it.
@inline(__always)
private func utf8(_ p: UnsafePointer<CChar>?, _ req: fuse_req_t?) -> String? {
    guard let p else { return "" }
    if let s = String(validatingCString: p) { return s }
    fuse_reply_err(req, EILSEQ)
    return nil
}

/// The table of low-level operations: non-capturing trampolines into `FuseAdapter`.
func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.`init` = { userdata, conn in
        guard let conn else { return }
        let capable = conn.pointee.capable
        var want = conn.pointee.want
        for cap in [FUSE_CAP_ASYNC_READ, FUSE_CAP_ATOMIC_O_TRUNC, FUSE_CAP_PARALLEL_DIROPS, FUSE_CAP_READDIRPLUS, FUSE_CAP_SPLICE_WRITE] where capable & UInt32(cap) != 0 {
            want |= UInt32(cap)
        }
        // Always readdirplus: the listing already carries every child's attributes.
        want &= ~UInt32(FUSE_CAP_READDIRPLUS_AUTO)
        want &= ~UInt32(FUSE_CAP_WRITEBACK_CACHE)
        conn.pointee.want = want
        if conn.pointee.max_readahead < 1 << 20 { conn.pointee.max_readahead = min(conn.pointee.max_readahead, 1 << 20) }
    }
    ops.lookup = { req, parent, name in
        guard let name = utf8(name, req) else { return }
        adapter(req).lookup(FuseRequest(req, .lookup), parent: parent, name: name)
    }
    ops.forget = { req, ino, n in
        adapter(req).forget(ino, count: n)
        fuse_reply_none(req)
    }
    ops.forget_multi = { req, count, forgets in
        let a = adapter(req)
        for i in 0..<count {
            if let f = forgets?[i] { a.forget(f.ino, count: f.nlookup) }
        }
        fuse_reply_none(req)
    }
    ops.getattr = { req, ino, _ in adapter(req).getattr(FuseRequest(req, .getattr), ino: ino) }
    ops.setattr = { req, ino, attr, toSet, fi in
        adapter(req).setattr(FuseRequest(req, .setattr), ino: ino, attr: attr?.pointee ?? Glibc.stat(), toSet: toSet, handle: fi?.pointee.fh)
    }
    ops.readlink = { req, ino in adapter(req).readlink(FuseRequest(req, .readlink), ino: ino) }
    ops.mknod = { req, parent, name, mode, rdev in
        guard let name = utf8(name, req) else { return }
        adapter(req).mknod(FuseRequest(req, .mknod), parent: parent, name: name, mode: mode, rdev: UInt64(rdev))
    }
    ops.mkdir = { req, parent, name, mode in
        guard let name = utf8(name, req) else { return }
        adapter(req).mkdir(FuseRequest(req, .mkdir), parent: parent, name: name, mode: mode)
    }
    ops.unlink = { req, parent, name in
        guard let name = utf8(name, req) else { return }
        adapter(req).unlink(FuseRequest(req, .unlink), parent: parent, name: name)
    }
    ops.rmdir = { req, parent, name in
        guard let name = utf8(name, req) else { return }
        adapter(req).rmdir(FuseRequest(req, .rmdir), parent: parent, name: name)
    }
    ops.symlink = { req, target, parent, name in
        guard let target = utf8(target, req) else { return }
        guard let name = utf8(name, req) else { return }
        adapter(req).symlink(FuseRequest(req, .symlink), target: target, parent: parent, name: name)
    }
    ops.rename = { req, parent, name, newParent, newName, flags in
        guard let name = utf8(name, req) else { return }
        guard let newName = utf8(newName, req) else { return }
        adapter(req).rename(FuseRequest(req, .rename), parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
    }
    ops.link = { req, ino, newParent, newName in
        guard let newName = utf8(newName, req) else { return }
        adapter(req).link(FuseRequest(req, .link), ino: ino, newParent: newParent, newName: newName)
    }
    ops.create = { req, parent, name, mode, fi in
        guard let name = utf8(name, req) else { return }
        adapter(req).create(FuseRequest(req, .create), parent: parent, name: name, mode: mode, fileInfo: FileInfoBox(fi))
    }
    ops.open = { req, ino, fi in adapter(req).open(FuseRequest(req, .open), ino: ino, flags: fi?.pointee.flags ?? 0, fileInfo: FileInfoBox(fi)) }
    ops.read = { req, ino, size, off, fi in adapter(req).read(FuseRequest(req, .read), ino: ino, size: size, offset: Int64(off), handle: fi?.pointee.fh ?? 0) }
    ops.write = { req, ino, buf, size, off, fi in
        adapter(req).write(FuseRequest(req, .write), ino: ino, buffer: buf, size: size, offset: Int64(off), handle: fi?.pointee.fh ?? 0)
    }
    ops.flush = { req, ino, fi in adapter(req).flush(FuseRequest(req, .flush), ino: ino, handle: fi?.pointee.fh ?? 0, lockOwner: fi?.pointee.lock_owner ?? 0) }
    ops.release = { req, ino, fi in
        let flockOwner = fi.map { $0.pointee.flock_release != 0 ? $0.pointee.lock_owner : nil } ?? nil
        adapter(req).release(FuseRequest(req, .release), ino: ino, handle: fi?.pointee.fh ?? 0, flockOwner: flockOwner)
    }
    // Locks shared with other mounts (libfuse asks the kernel for FUSE_CAP_POSIX_LOCKS and
    // FUSE_CAP_FLOCK_LOCKS because these are set).
    ops.getlk = { req, ino, fi, lock in
        adapter(req).getlk(FuseRequest(req, .getlk), ino: ino, owner: fi?.pointee.lock_owner ?? 0, lock: lock?.pointee ?? Glibc.flock())
    }
    ops.setlk = { req, ino, fi, lock, sleep in
        adapter(req).setlk(FuseRequest(req, .setlk), ino: ino, owner: fi?.pointee.lock_owner ?? 0, lock: lock?.pointee ?? Glibc.flock(), sleep: sleep != 0)
    }
    ops.flock = { req, ino, fi, op in adapter(req).flock(FuseRequest(req, .flock), ino: ino, owner: fi?.pointee.lock_owner ?? 0, op: op) }
    ops.fsync = { req, ino, _, fi in adapter(req).fsync(FuseRequest(req, .fsync), ino: ino, handle: fi?.pointee.fh ?? 0) }
    ops.opendir = { req, ino, fi in adapter(req).opendir(FuseRequest(req, .opendir), ino: ino, fileInfo: fi) }
    ops.readdir = { req, ino, size, off, fi in
        adapter(req).readdir(FuseRequest(req, .readdir), ino: ino, size: size, offset: Int64(off), handle: fi?.pointee.fh ?? 0, plus: false)
    }
    ops.readdirplus = { req, ino, size, off, fi in
        adapter(req).readdir(FuseRequest(req, .readdirplus), ino: ino, size: size, offset: Int64(off), handle: fi?.pointee.fh ?? 0, plus: true)
    }
    ops.releasedir = { req, ino, fi in adapter(req).releasedir(FuseRequest(req, .releasedir), ino: ino, handle: fi?.pointee.fh ?? 0) }
    ops.fsyncdir = { req, _, _, _ in adapter(req).fsyncdir(FuseRequest(req, .fsyncdir)) }
    ops.statfs = { req, _ in adapter(req).statfs(FuseRequest(req, .statfs)) }
    ops.setxattr = { req, ino, name, value, size, flags in
        let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
        guard let name = utf8(name, req) else { return }
        adapter(req).setxattr(FuseRequest(req, .setxattr), ino: ino, name: name, value: bytes, flags: flags)
    }
    ops.getxattr = { req, ino, name, size in
        guard let name = utf8(name, req) else { return }
        adapter(req).getxattr(FuseRequest(req, .getxattr), ino: ino, name: name, size: size)
    }
    ops.listxattr = { req, ino, size in adapter(req).listxattr(FuseRequest(req, .listxattr), ino: ino, size: size) }
    ops.removexattr = { req, ino, name in
        guard let name = utf8(name, req) else { return }
        adapter(req).removexattr(FuseRequest(req, .removexattr), ino: ino, name: name)
    }
    return ops
}
