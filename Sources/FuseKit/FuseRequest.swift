import CFuse
import StowFS
#if canImport(Glibc)
import Glibc
#endif

/// One kernel request. libfuse owns it until exactly one `fuse_reply_*` is sent, from any thread.
///
/// `@unchecked Sendable`: the raw `fuse_req_t` is only ever used to send that single reply (and to
/// read the caller's credentials), which libfuse documents as safe from any thread. Only the
/// per-operation adapters in this module reply, each exactly once.
struct FuseRequest: @unchecked Sendable {
    let raw: fuse_req_t
    let operation: FuseOperation
    /// Told of the answer (nil: nobody listens, and the clock is not read).
    let observer: (any FuseObserver)?
    let started: ContinuousClock.Instant?

    init(_ raw: fuse_req_t?, _ operation: FuseOperation) {
        self.raw = raw!
        self.operation = operation
        observer = adapter(raw).observer
        started = observer == nil ? nil : ContinuousClock.now
    }

    /// After the reply: tells the observer (the request itself is libfuse's again by then).
    func finished(errno: Int32 = 0, bytes: Int = 0) {
        guard let observer, let started else { return }
        observer.finished(operation, after: ContinuousClock.now - started, errno: errno, bytes: bytes)
    }

    /// Who asked (uid, gid, pid).
    var caller: Caller {
        guard let ctx = fuse_req_ctx(raw) else { return Caller(uid: 0, gid: 0) }
        return Caller(uid: ctx.pointee.uid, gid: ctx.pointee.gid, pid: ctx.pointee.pid)
    }

    func reply(error: FSError) {
        if case .io(let why) = error { adapter(raw).warnIO(operation, why) }
        fuse_reply_err(raw, error.errno)
        finished(errno: error.errno)
    }
    func reply(errno: Int32) {
        fuse_reply_err(raw, errno)
        finished(errno: errno)
    }
    func replyOK() {
        fuse_reply_err(raw, 0)
        finished()
    }
    func replyNone() {
        fuse_reply_none(raw)
        finished()
    }

    func reply(entry: Entry) {
        var e = FuseConversions.entryParam(entry)
        fuse_reply_entry(raw, &e)
        finished()
    }

    func reply(attributes: FileAttributes, ttl: Duration) {
        var st = FuseConversions.stat(attributes)
        fuse_reply_attr(raw, &st, ttl.seconds)
        finished()
    }

    func reply(open file: OpenedFile, fileInfo: UnsafeMutablePointer<fuse_file_info>?) {
        var fi = fileInfo?.pointee ?? fuse_file_info()
        fi.fh = file.handle
        fi.keep_cache = file.keepCache ? 1 : 0
        fuse_reply_open(raw, &fi)
        finished()
    }

    func reply(create entry: Entry, file: OpenedFile, fileInfo: UnsafeMutablePointer<fuse_file_info>?) {
        var e = FuseConversions.entryParam(entry)
        var fi = fileInfo?.pointee ?? fuse_file_info()
        fi.fh = file.handle
        fi.keep_cache = file.keepCache ? 1 : 0
        fuse_reply_create(raw, &e, &fi)
        finished()
    }

    func reply(written count: Int) {
        fuse_reply_write(raw, count)
        finished(bytes: count)
    }

    func reply(readlink target: String) {
        fuse_reply_readlink(raw, target)
        finished()
    }

    func reply(bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { b in
            _ = b.withMemoryRebound(to: CChar.self) { fuse_reply_buf(raw, $0.baseAddress, $0.count) }
        }
        finished(bytes: operation == .read ? bytes.count : 0)
    }

    /// Replies with file ranges; libfuse reads them from the descriptors.
    func reply(segments: [FileSegment]) {
        guard let first = segments.first else {
            fuse_reply_buf(raw, nil, 0)
            finished()
            return
        }
        if segments.count == 1 {
            var bufv = fuse_bufvec()
            bufv.count = 1
            bufv.idx = 0
            bufv.off = 0
            bufv.buf.size = first.length
            bufv.buf.flags = fuse_buf_flags(rawValue: FUSE_BUF_IS_FD.rawValue | FUSE_BUF_FD_SEEK.rawValue | FUSE_BUF_FD_RETRY.rawValue)
            bufv.buf.fd = first.file.descriptor
            bufv.buf.pos = off_t(first.offset)
            fuse_reply_data(raw, &bufv, FUSE_BUF_SPLICE_MOVE)
            withExtendedLifetime(first) {}
            finished(bytes: first.length)
            return
        }
        // Several ranges (never from the engine today): read them into one buffer.
        var out = [UInt8]()
        for s in segments {
            var chunk = [UInt8](repeating: 0, count: s.length)
            let n = chunk.withUnsafeMutableBytes { pread(s.file.descriptor, $0.baseAddress, s.length, off_t(s.offset)) }
            if n > 0 { out += chunk[0..<n] }
        }
        reply(bytes: out)
    }

    func reply(statfs s: FileSystemStatistics) {
        var st = statvfs()
        st.f_bsize = UInt(s.blockSize)
        st.f_frsize = UInt(s.blockSize)
        st.f_blocks = fsblkcnt_t(s.blocks)
        st.f_bfree = fsblkcnt_t(s.freeBlocks)
        st.f_bavail = fsblkcnt_t(s.freeBlocks)
        st.f_files = fsfilcnt_t(s.files)
        st.f_ffree = fsfilcnt_t(s.freeFiles)
        st.f_favail = fsfilcnt_t(s.freeFiles)
        st.f_namemax = UInt(s.nameMax)
        fuse_reply_statfs(raw, &st)
        finished()
    }

    /// getxattr/listxattr: the size when asked for 0 bytes, ERANGE when the buffer is too small.
    func reply(xattr value: [UInt8], size: Int) {
        if size == 0 {
            fuse_reply_xattr(raw, value.count)
            finished()
        } else if size < value.count {
            fuse_reply_err(raw, ERANGE)
            finished(errno: ERANGE)
        } else {
            reply(bytes: value)
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
