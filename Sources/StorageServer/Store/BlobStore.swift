public import NIOCore
public import StorageProtocol

/// Where file contents live: immutable blobs by id, and staging files for uploads in progress.
///
/// An upload writes its staging file (`write`), which is fsynced before each answer, so that the
/// offset it reports survives a crash. `publish` moves the finished staging file to its blob
/// path with an atomic rename and fsyncs the folder. Blobs are never changed afterwards; an
/// overwrite makes a new blob and the old one is deleted later by the garbage collector.
public protocol BlobStore: Sendable {
    /// Bytes received so far for an upload; nil when nothing was ever written.
    func stagedSize(_ id: String) async throws -> Int64?
    /// Opens an upload's staging file for writing at `offset` (bytes past it are cut off).
    /// `expecting`: how many bytes the caller means to write, nil when unknown (a store may pick
    /// its way of writing by it).
    ///
    /// Write with `StagedWriter.write`, then `finish` (flush and fsync). When a body fails midway,
    /// call `finish` anyway: the bytes that did arrive are kept for a later resume.
    func openStaged(_ id: String, at offset: Int64, expecting: Int64?) async throws -> any StagedWriter
    /// Cuts an upload's staging file back to `size` bytes (a chunk that failed its checksum).
    func truncateStaged(_ id: String, to size: Int64) async throws
    /// Moves an upload's staging file to its blob path, durably. The staging file must have been
    /// fsynced by its writer (`finish` does it).
    func publish(_ id: String) async throws
    func blobSize(_ id: String) async throws -> Int64?
    /// Hands the bytes of a blob in `range` to `consume`, chunk by chunk (at the consumer's pace).
    func read(_ id: String, range: Range<Int64>, into consume: (ByteBuffer) async throws -> Void) async throws
    /// Writes a blob from the first `size` bytes of another (zeros past its end, as a hole: the
    /// disk does not take them), for truncate; returns its SHA-256 (hex), or nil when the zeros
    /// past the end are more than `BlobStoreLimits.hashedZeros` (hashing a terabyte of zeros
    /// would hold the request for many minutes; the file then has no SHA-256 until rewritten).
    func makeBlob(_ id: String, fromPrefixOf source: BlobBytes, size: Int64) async throws -> String?
    /// SHA-256 (hex) of an upload's staging file, or of a blob.
    func sha256(ofStaged id: String) async throws -> String
    func deleteStaged(_ id: String) async throws
    func deleteBlob(_ id: String) async throws
    /// Ids of the blobs a start-up sweep may remove when no record names them: all of them for
    /// a store of this machine's; only those old enough that no publish in flight can still be
    /// about to record them, for a store that several servers share.
    func blobIDs() async throws -> [String]
    func stagedIDs() async throws -> [String]
    /// Checks, before the server serves, that the store answers (and makes what it needs).
    func prepare() async throws
    /// The ids of every stored blob, whatever its age (for tests and tools that count them).
    func allBlobIDs() async throws -> [String]
    /// Undoes what `writer` wrote since `offset`, where its request began (a chunk refused: too
    /// large, a wrong checksum). The writer is closed after.
    func discard(_ writer: inout any StagedWriter, of id: String, backTo offset: Int64) async throws
    /// Whether the bytes of an upload in progress can be read back cheaply to hash them (a local
    /// file); when not, a SHA-256 the upload did not compute on the way is computed only when one
    /// was declared, from the published blob.
    var hashesStagedBytesCheaply: Bool { get }
    /// Removes uploads in progress the store holds that no record names, left long enough ago
    /// (a server stopped between beginning one and recording it). Returns how many went.
    func abortAbandonedUploads() async throws -> Int
    /// How a client may send an upload of `size` bytes straight to the store (presigned URLs
    /// valid `expiresIn` seconds); nil when the store takes bytes only through the server.
    /// `sha256` (hex, declared): the store checks the whole-file PUT against it. `size` nil: a
    /// deferred length, sent in parts only (their number is not known yet).
    func directUpload(_ id: String, size: Int64?, sha256: String?, expiresIn: Int) async throws -> DirectUpload?
    /// Presigned URLs of these parts of a direct upload (its multipart upload begun if needed),
    /// and the parts the store has already; nil when the store takes no direct uploads. `size`
    /// nil: a deferred length, whose parts may be any of the store's (each `partSize` but the last).
    func directParts(_ id: String, size: Int64?, numbers: [Int], expiresIn: Int) async throws -> UploadPartsResponse?
    /// A URL a client may GET a blob's bytes from, straight from the store (presigned, valid
    /// `expiresIn` seconds; `Range` honoured; answered with `contentType`); nil when the store
    /// serves bytes only through the server.
    func directRead(_ id: String, contentType: String, expiresIn: Int) -> String?
    /// The absolute path of a published blob's file on this machine, for a client beside the
    /// server to read itself; nil when blobs are not local files.
    func localPath(_ id: String) -> String?
}

extension BlobStore {
    public func prepare() async throws {}
    public func allBlobIDs() async throws -> [String] { try await blobIDs() }
    public func discard(_ writer: inout any StagedWriter, of id: String, backTo offset: Int64) async throws {
        do {
            _ = try await writer.finish()
        } catch {
            await writer.abandon()
        }
        try await truncateStaged(id, to: offset)
    }
    public var hashesStagedBytesCheaply: Bool { true }
    public func abortAbandonedUploads() async throws -> Int { 0 }
    public func directUpload(_ id: String, size: Int64?, sha256: String?, expiresIn: Int) async throws -> DirectUpload? { nil }
    public func directParts(_ id: String, size: Int64?, numbers: [Int], expiresIn: Int) async throws -> UploadPartsResponse? { nil }
    public func directRead(_ id: String, contentType: String, expiresIn: Int) -> String? { nil }
    public func localPath(_ id: String) -> String? { nil }
}

/// Writes one upload's staging file, sequentially, buffering about a MiB at a time.
public protocol StagedWriter {
    /// The offset the next byte goes to.
    var offset: Int64 { get }
    mutating func write(_ buffer: ByteBuffer) async throws
    /// Flushes, fsyncs and closes; returns the file's size.
    mutating func finish() async throws -> Int64
    /// Closes without caring about the result (after a failure).
    mutating func abandon() async
}

public enum BlobStoreError: Error, Sendable, Equatable {
    /// The body would grow the file past its limit.
    case tooLarge(limit: Int64)
    /// The disk (or quota) is full.
    case noSpace
    case notFound(String)
    /// The store cannot be reached, or refused the request (an object store's answer): 503.
    case unavailable(String)
    /// A write at an offset the upload does not stand at (409 `offset_mismatch`).
    case offsetNotHeld(offset: Int64, held: Int64)
    /// Another request wrote the same upload at the same time (409).
    case conflict(String)
}

public enum BlobStoreLimits {
    /// Zeros added by an extending truncate that are still hashed (64 MiB): beyond, no SHA-256.
    public static let hashedZeros: Int64 = 64 << 20
}
