import Crypto
import Foundation
public import NIOCore
import NIOFileSystem
import NIOFoundationCompat
import NIOPosix
import StorageProtocol

/// Blobs as files in a local folder: `blobs/ab/<id>` for published blobs, `uploads/<id>` for
/// uploads in progress. Ids are random hex strings chosen by the server.
public final class LocalBlobStore: BlobStore {
    let root: String
    var blobsDir: String { root + "/blobs" }
    var stagingDir: String { root + "/uploads" }
    private let fs = FileSystem.shared
    private static let chunk = ByteCount.mebibytes(1)

    public init(root: String) throws {
        for dir in [root, root + "/blobs", root + "/uploads"] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        // Absolute, plain and without symbolic links (`realpath`), so that `localPath` means the same
        // to a client in another folder, and one that refuses links on the way can open it.
        self.root = URL(fileURLWithPath: root).resolvingSymlinksInPath().standardizedFileURL.path
    }

    /// A published blob's file: written once (renamed into place whole), never changed after, and
    /// removed only `blobGrace` after no record names it.
    public func localPath(_ id: String) -> String? {
        // Ids are the server's own hex strings; anything else never names a path.
        guard !id.isEmpty, id.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) || $0 == 45 }) else { return nil }
        return blobPath(id).string
    }

    func stagedPath(_ id: String) -> FilePath { FilePath(stagingDir + "/" + id) }
    func blobPath(_ id: String) -> FilePath { FilePath(blobsDir + "/" + shard(id) + "/" + id) }
    private func shard(_ id: String) -> String { String(id.prefix(2)) }

    public func stagedSize(_ id: String) async throws -> Int64? {
        try await fs.info(forFileAt: stagedPath(id)).map { Int64($0.size) }
    }

    public func blobSize(_ id: String) async throws -> Int64? {
        try await fs.info(forFileAt: blobPath(id)).map { Int64($0.size) }
    }

    public func openStaged(_ id: String, at offset: Int64, expecting: Int64?) async throws -> any StagedWriter {
        // Large writes around the page cache, where the filesystem and the offset allow it (the
        // writer's 16 MiB of buffers are not worth it for a few MiB); the usual way otherwise.
        if expecting.map({ $0 >= DirectStagedWriter.worthwhile }) ?? true,
            let direct = try await DirectStagedWriter.open(stagedPath(id).string, at: offset)
        {
            return direct
        }
        let handle = try await mapErrors { try await fs.openFile(forWritingAt: stagedPath(id), options: .modifyFile(createIfNecessary: true)) }
        do {
            try await mapErrors { try await handle.resize(to: .bytes(offset)) }
        } catch {
            await closeEvenIfCancelled(handle)
            throw error
        }
        return LocalStagedWriter(handle: handle, writer: handle.bufferedWriter(startingAtAbsoluteOffset: offset, capacity: Self.chunk), offset: offset)
    }

    public func truncateStaged(_ id: String, to size: Int64) async throws {
        try await mapErrors {
            try await fs.withFileHandle(forWritingAt: stagedPath(id), options: .modifyFile(createIfNecessary: false)) { handle in
                try await handle.resize(to: .bytes(size))
                try await handle.synchronize()
            }
        }
    }

    public func publish(_ id: String) async throws {
        let source = stagingDir + "/" + id
        let dir = blobsDir + "/" + shard(id)
        let target = dir + "/" + id
        try await NIOThreadPool.singleton.runIfActive {
            try Posix.makeDirectoryDurably(dir)
            // No fsync of the file here: every writer of a staging file fsyncs it before its
            // request answers (`finish`, `truncateStaged`, `makeBlob`), so it is durable already.
            try Posix.rename(source, target)
            try Posix.fsyncDirectory(dir)
        }
    }

    public func read(_ id: String, range: Range<Int64>, into consume: (ByteBuffer) async throws -> Void) async throws {
        guard !range.isEmpty else { return }
        try await fs.withFileHandle(forReadingAt: blobPath(id)) { handle in
            for try await chunk in handle.readChunks(in: range, chunkLength: .kibibytes(256)) {
                try await consume(chunk)
            }
        }
    }

    public func makeBlob(_ id: String, fromPrefixOf source: BlobBytes, size: Int64) async throws -> String? {
        let digest = try await makeStagedBlob(id, fromPrefixOf: source, size: size, blobs: self)
        try await publish(id)
        return digest
    }

    /// Writes the staging file of `makeBlob` (fsynced), reading the source from `blobs`; returns its SHA-256, if hashed.
    func makeStagedBlob(_ id: String, fromPrefixOf source: BlobBytes, size: Int64, blobs: any BlobStore) async throws -> String? {
        let sourceSize: Int64
        switch source {
        case .inline(let data): sourceSize = Int64(data.count)
        case .stored(let sourceID): sourceSize = try await blobs.blobSize(sourceID) ?? 0
        }
        let copyEnd = min(size, sourceSize)
        var hasher = SHA256()
        let hashed = size - copyEnd <= BlobStoreLimits.hashedZeros
        try await mapErrors {
            try await fs.withFileHandle(forWritingAt: stagedPath(id), options: .newFile(replaceExisting: true)) { out in
                var writer = out.bufferedWriter(capacity: Self.chunk)
                if copyEnd > 0 {
                    try await source.read(0..<copyEnd, from: blobs) { chunk in
                        hasher.update(data: chunk.readableBytesView)
                        try await writer.write(contentsOf: chunk)
                    }
                }
                try await writer.flush()
                // The zeros past the old end are a hole: no disk space, no bytes written.
                if size > copyEnd { try await out.resize(to: .bytes(size)) }
                try await out.synchronize()
            }
        }
        if hashed {
            var remaining = size - copyEnd
            let zeros = [UInt8](repeating: 0, count: 1 << 20)
            while remaining > 0 {
                let n = Int(min(remaining, Int64(zeros.count)))
                hasher.update(data: zeros[0..<n])
                remaining -= Int64(n)
            }
        }
        return hashed ? hasher.finalize().hexString : nil
    }

    public func sha256(ofStaged id: String) async throws -> String {
        var hasher = SHA256()
        let path = try await fs.info(forFileAt: stagedPath(id)) != nil ? stagedPath(id) : blobPath(id)
        try await fs.withFileHandle(forReadingAt: path) { handle in
            for try await chunk in handle.readChunks(chunkLength: Self.chunk) {
                hasher.update(data: chunk.readableBytesView)
            }
        }
        return hasher.finalize().hexString
    }

    public func deleteStaged(_ id: String) async throws {
        _ = try await fs.removeItem(at: stagedPath(id), recursively: false)
    }

    public func deleteBlob(_ id: String) async throws {
        _ = try await fs.removeItem(at: blobPath(id), recursively: false)
    }

    public func blobIDs() async throws -> [String] {
        let dir = blobsDir
        return try await NIOThreadPool.singleton.runIfActive {
            var ids: [String] = []
            for shard in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] {
                ids += (try? FileManager.default.contentsOfDirectory(atPath: dir + "/" + shard)) ?? []
            }
            return ids
        }
    }

    public func stagedIDs() async throws -> [String] {
        let dir = stagingDir
        return try await NIOThreadPool.singleton.runIfActive { (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] }
    }

}

/// Turns a full disk into `BlobStoreError.noSpace`; other errors pass unchanged.
@discardableResult
func mapErrors<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as FileSystemError {
            if let cause = error.cause as? FileSystemError.SystemCallError, cause.errno == .noSpace || cause.errno == .diskQuotaExceeded {
                throw BlobStoreError.noSpace
            }
            if error.code == .resourceExhausted { throw BlobStoreError.noSpace }
            throw error
        } catch let error as Posix.Failure where error.errno == ENOSPC || error.errno == EDQUOT {
            throw BlobStoreError.noSpace
        }
}

struct LocalStagedWriter: StagedWriter {
    let handle: WriteFileHandle
    var writer: BufferedWriter<WriteFileHandle>
    var offset: Int64
    var closed = false

    mutating func write(_ buffer: ByteBuffer) async throws {
        offset += Int64(buffer.readableBytes)
        try await mapErrors { try await writer.write(contentsOf: buffer) }
    }

    mutating func finish() async throws -> Int64 {
        closed = true
        do {
            try await mapErrors {
                try await writer.flush()
                try await handle.synchronize()
            }
        } catch {
            await closeEvenIfCancelled(handle)
            throw error
        }
        let h = handle
        try await Task { try await h.close() }.value
        return offset
    }

    mutating func abandon() async {
        guard !closed else { return }
        closed = true
        await closeEvenIfCancelled(handle)
    }
}

extension Digest {
    /// Lowercase hex.
    var hexString: String { Hex.lowercase(self) }
}

/// Closes a handle even from a cancelled task: NIOFileSystem refuses work in one, and a handle
/// dropped while open is a fatal error.
func closeEvenIfCancelled(_ handle: WriteFileHandle) async {
    // An unstructured task does not inherit the caller's cancellation.
    try? await Task { try await handle.close() }.value
}
