import CStowSystem
import NIOCore
import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

/// Writes a staging file around the page cache (O_DIRECT), through two aligned buffers in
/// CStowSystem: while one is written on the thread pool, the next bytes fill the other.
///
/// Why: a large upload written the usual way passes through fresh page-cache pages, and on the
/// VMs this runs on the first touch of a page costs more than the disk's write (`stowd` spent
/// up to 3 s of kernel time per GiB copying into the page cache, where `dd oflag=direct` writes
/// it in 0.5–0.9 s; docs/performance.md). A staging file is read back at most once, by a
/// download after publication, so the cache it skips is rarely missed.
final class DirectStagedWriter: StagedWriter {
    /// The C writer; used by one task at a time (the receiving request), and by the thread pool
    /// only for the write in flight, which the task awaits before touching the writer again.
    private final class Handle: @unchecked Sendable {
        let file: OpaquePointer
        init(_ file: OpaquePointer) { self.file = file }
    }

    /// Writes of fewer bytes go the usual way.
    static let worthwhile: Int64 = 4 << 20

    private let handle: Handle
    private let path: String
    private var inFlight: Task<Void, any Error>?
    private var closed = false

    private init(_ handle: Handle, path: String) {
        self.handle = handle
        self.path = path
    }

    /// A writer at `offset`, or nil when this filesystem or offset does not allow O_DIRECT, or when
    /// 8 writers hold their buffers already (16 of 8 MiB at most, whatever the number of uploads).
    static func open(_ path: String, at offset: Int64) async throws -> DirectStagedWriter? {
        guard offset % 4096 == 0 else { return nil }
        let opened: Handle? = try await NIOThreadPool.singleton.runIfActive {
            guard let file = CStowSystem_direct_open(path, offset) else {
                // EINVAL: no O_DIRECT here; EBUSY: the buffers of enough writers are out (memory stays bounded).
                if errno == EINVAL || errno == EBUSY { return nil }
                throw Posix.Failure(call: "open", path: path, errno: errno)
            }
            return Handle(file)
        }
        return opened.map { DirectStagedWriter($0, path: path) }
    }

    var offset: Int64 { Int64(CStowSystem_direct_offset(handle.file)) }

    func write(_ buffer: ByteBuffer) async throws {
        var rest = buffer
        while rest.readableBytes > 0 {
            let file = handle.file
            let taken = rest.withUnsafeReadableBytes { CStowSystem_direct_append(file, $0.baseAddress, $0.count) }
            rest.moveReaderIndex(forwardBy: taken)
            if rest.readableBytes > 0 {
                // A buffer is full: the previous write must be done before it is handed over.
                try await mapErrors { try await waitForWrite() }
                CStowSystem_direct_rotate(file)
                let handle = self.handle
                let path = self.path
                inFlight = Task {
                    try await NIOThreadPool.singleton.runIfActive {
                        if CStowSystem_direct_write_rotated(handle.file) != 0 { throw Posix.Failure(call: "write", path: path, errno: errno) }
                    }
                }
            }
        }
    }

    private func waitForWrite() async throws {
        guard let task = inFlight else { return }
        inFlight = nil
        try await task.value
    }

    func finish() async throws -> Int64 {
        defer { close() }
        // A write in flight that failed (or never ran) is finish's to report: the C writer keeps
        // the error, writes a buffer still owed, and keeps only what was written whole.
        _ = try? await waitForWrite()
        let handle = self.handle
        let path = self.path
        try await mapErrors {
            try await NIOThreadPool.singleton.runIfActive {
                if CStowSystem_direct_finish(handle.file) != 0 { throw Posix.Failure(call: "write", path: path, errno: errno) }
            }
        }
        return offset
    }

    func abandon() async {
        _ = try? await waitForWrite()
        close()
    }

    private func close() {
        guard !closed else { return }
        closed = true
        CStowSystem_direct_close(handle.file)
    }

    deinit {
        // Dropped without finish or abandon (a cancelled request): nothing may still use it.
        guard !closed else { return }
        let handle = self.handle
        let inFlight = self.inFlight
        Task {
            _ = try? await inFlight?.value
            CStowSystem_direct_close(handle.file)
        }
    }
}
