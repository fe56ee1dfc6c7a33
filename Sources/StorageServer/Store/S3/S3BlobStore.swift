import Crypto
public import Foundation
public import NIOCore
public import StorageProtocol

/// Blobs as objects of an S3-compatible bucket (`<prefix>/blobs/<id>`), and uploads in progress
/// staged in the bucket too, so that any replica can continue an upload another one began.
///
/// An upload in progress is an S3 multipart upload to its blob's key, created with its first
/// bytes. Its full parts (`partSize` bytes each, numbered by offset) are sent as they fill; the
/// bytes after the last full part are kept as an object of their own, `<prefix>/staging/<id>/…`
/// (the tail), and prepended to the next request's bytes. Where the upload stands — its parts
/// and their ETags, the tail — is recorded in the metadata store (`StagingLedger`) when a request
/// ends, only if no other request committed meanwhile (`version`): what a request sent is either
/// all recorded or none of it is (a body that breaks off keeps what arrived, as with staging
/// files; a chunk refused — too large, a wrong checksum — is `discard`ed). publish sends the tail
/// as the last part and completes the multipart upload: the blob appears whole, under its id.
///
/// Only `makeBlob` (truncate) still writes a file on this replica first, within one request.
///
/// Objects are immutable (an id is never written twice with other bytes), so a publish retried
/// after a crash writes the same bytes again.
public final class S3BlobStore: BlobStore {
    let client: S3Client
    let ledger: any StagingLedger
    /// `makeBlob`'s files, written and published within one request.
    let staging: LocalBlobStore
    /// The size of an upload's parts (S3: 5 MiB to 5 GiB a part, at most 10,000 parts): a file of
    /// up to 10,000 × this goes whole; a larger one declared at start gets larger parts.
    let partSize: Int64
    /// How old an object must be before a start-up sweep may remove it as an orphan (seconds).
    let sweepAge: TimeInterval

    public static let maxParts = 10_000

    public init(_ location: S3Location, ledger: any StagingLedger, stagingRoot: String, partSize: Int64 = 8 << 20, sweepAge: TimeInterval = 3600) throws {
        self.sweepAge = sweepAge
        self.ledger = ledger
        client = S3Client(location)
        staging = try LocalBlobStore(root: stagingRoot)
        self.partSize = max(5 << 20, partSize)
    }

    /// Checks that the store answers and the credentials are taken; makes the bucket if missing.
    public func prepare() async throws {
        try await client.ensureBucket()
    }

    func blobKey(_ id: String) -> String { client.key("blobs/" + id) }
    func stagingPrefix(_ id: String) -> String { client.key("staging/" + id + "/") }

    /// The part size for an upload of `size` bytes (nil: not known yet).
    func partSize(forUploadOf size: Int64?) -> Int64 {
        guard let size, size > partSize * Int64(Self.maxParts) else { return partSize }
        let mib: Int64 = 1 << 20
        // S3's largest part is 5 GiB (a file past 48 TiB cannot be stored: its last part is refused).
        return min(Self.largestPart, (size / Int64(Self.maxParts) + mib) / mib * mib)
    }

    /// The largest part S3 takes.
    static let largestPart: Int64 = 5 << 30

    // MARK: staging (in the bucket)

    public func stagedSize(_ id: String) async throws -> Int64? {
        if let state = try await ledger.stagingState(id) {
            guard state.parts.isEmpty && state.tailSize == 0 else { return state.offset }
            // Nothing came through the server: the parts sent straight to the store, if any.
            let parts = try await directlyStoredParts(state)
            if parts.isEmpty, try await blobSize(id) != nil { return nil }  // sent whole to the blob's key
            return parts.reduce(0) { $0 + $1.size }
        }
        return try await staging.stagedSize(id)
    }

    // MARK: straight to the store

    /// The largest object one PUT may make (S3's limit).
    static let largestPut: Int64 = 5 << 30

    public func directUpload(_ id: String, size: Int64?, sha256: String?, expiresIn: Int) async throws -> DirectUpload? {
        let part = partSize(forUploadOf: size)
        guard let size else {
            // A deferred length: parts only, as many as the file turns out to need.
            return DirectUpload(url: nil, headers: nil, partSize: part, parts: 0, expiresAt: Timestamp.nowSeconds() + Int64(expiresIn))
        }
        var url: String?
        var headers: [(String, String)] = []
        if size <= Self.largestPut {
            // A declared SHA-256 signed into the URL: the store refuses a body that does not match.
            if let sha256, let digest = Self.bytes(hex: sha256) { headers = [("x-amz-checksum-sha256", Data(digest).base64EncodedString())] }
            url = client.presign("PUT", key: blobKey(id), headers: headers, expires: expiresIn)
        }
        return DirectUpload(
            url: url, headers: headers.isEmpty ? nil : Dictionary(headers, uniquingKeysWith: { $1 }), partSize: part,
            parts: Int((size + part - 1) / part), expiresAt: Timestamp.nowSeconds() + Int64(expiresIn))
    }

    public func directParts(_ id: String, size: Int64?, numbers: [Int], expiresIn: Int) async throws -> UploadPartsResponse? {
        let state = try await stagingFor(id, expecting: size)
        guard state.parts.isEmpty && state.tailSize == 0 else {
            throw BlobStoreError.conflict("this upload is being sent through the server's storage link; go on there")
        }
        // A deferred length may take any part the store allows; each is a whole part but the
        // last, which complete finds by its size.
        let count = size.map { Int(($0 + state.partSize - 1) / state.partSize) } ?? Self.maxParts
        let key = blobKey(id)
        let urls = numbers.filter { $0 >= 1 && $0 <= count }.map { n in
            UploadPartsResponse.Part(
                number: n, url: client.presign("PUT", key: key, query: [("partNumber", String(n)), ("uploadId", state.s3UploadID)], expires: expiresIn),
                size: size.map { min(state.partSize, $0 - Int64(n - 1) * state.partSize) } ?? state.partSize)
        }
        let stored = try await listedParts(state).values.sorted { $0.number < $1.number }
        return UploadPartsResponse(partSize: state.partSize, parts: urls, stored: stored.map { .init(number: $0.number, url: nil, size: $0.size) })
    }

    public func directRead(_ id: String, contentType: String, expiresIn: Int) -> String? {
        // The store's answer carries the file's content type, not the one it was stored with
        // (the object has none of its own: the record keeps it).
        client.presign("GET", key: blobKey(id), query: [("response-content-type", contentType)], expires: expiresIn)
    }

    /// Every part of a direct upload the store holds, by number (a part sent twice: the last).
    func listedParts(_ state: StagingState) async throws -> [Int: StagedPart] {
        var latest: [Int: StagedPart] = [:]
        for p in try await client.listParts(blobKey(state.uploadID), uploadID: state.s3UploadID) {
            latest[p.number] = StagedPart(number: p.number, size: p.size, etag: p.etag)
        }
        return latest
    }

    /// The parts of a direct upload the store holds, contiguous from 1 (each the size its place
    /// calls for: a full part, or the last one's rest).
    func directlyStoredParts(_ state: StagingState) async throws -> [StagedPart] {
        let latest = try await listedParts(state)
        var parts: [StagedPart] = []
        var n = 1
        while let p = latest[n] {
            parts.append(p)
            // Only the last part may be short.
            if p.size < state.partSize { break }
            n += 1
        }
        return parts
    }

    static func bytes(hex: String) -> [UInt8]? {
        let chars = Array(hex.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        for i in stride(from: 0, to: chars.count, by: 2) {
            guard let b = UInt8(String(decoding: chars[i..<(i + 2)], as: UTF8.self), radix: 16) else { return nil }
            out.append(b)
        }
        return out
    }

    public func openStaged(_ id: String, at offset: Int64, expecting: Int64?) async throws -> any StagedWriter {
        let state = try await stagingFor(id, expecting: expecting)
        return try await S3StagedWriter.open(self, state, at: offset)
    }

    /// The upload's staging, begun (a new multipart upload) if it has none.
    func stagingFor(_ id: String, expecting: Int64?) async throws -> StagingState {
        if let state = try await ledger.stagingState(id) { return state }
        let key = blobKey(id)
        let s3ID = try await client.createMultipartUpload(key)
        let state = try await ledger.beginStaging(id, s3UploadID: s3ID, partSize: partSize(forUploadOf: expecting))
        // Another replica began it at the same moment, and its upload was recorded: ours goes.
        if state.s3UploadID != s3ID { try? await client.abortMultipartUpload(key, uploadID: s3ID) }
        return state
    }

    /// Grows an upload with zeros to `size` (a declared tail of zeros: S3 has no holes); a staging
    /// can only be cut back within its tail.
    public func truncateStaged(_ id: String, to size: Int64) async throws {
        guard let state = try await ledger.stagingState(id) else {
            if try await staging.stagedSize(id) != nil { return try await staging.truncateStaged(id, to: size) }
            if size == 0 { return }
            throw BlobStoreError.notFound(id)
        }
        if size == state.offset { return }
        var writer = try await S3StagedWriter.open(self, state, at: min(size, state.offset), allowCut: true)
        var remaining = size - writer.offset
        let zeros = ByteBuffer(repeating: 0, count: 1 << 20)
        while remaining > 0 {
            let n = Int(min(remaining, Int64(zeros.readableBytes)))
            try await writer.write(zeros.getSlice(at: 0, length: n)!)
            remaining -= Int64(n)
        }
        _ = try await writer.finish()
    }

    public func deleteStaged(_ id: String) async throws {
        if let state = try await ledger.stagingState(id) {
            try? await client.abortMultipartUpload(blobKey(id), uploadID: state.s3UploadID)
            for (key, _) in (try? await client.listKeys(prefix: stagingPrefix(id))) ?? [] { try? await client.deleteObject(key) }
            try await ledger.dropStaging(id)
        }
        try await staging.deleteStaged(id)
    }

    /// Uploads staged here that the start-up sweep may look at: this replica's files, and
    /// stagings older than `sweepAge` (another replica may be streaming a form or a copy into one
    /// it has not recorded an upload for yet).
    public func stagedIDs() async throws -> [String] {
        let cutoff = Timestamp.nowNanoseconds() - Int64(sweepAge * 1_000_000_000)
        return try await ledger.stagings().filter { $0.begunNs < cutoff }.map(\.id) + (try await staging.stagedIDs())
    }

    public func sha256(ofStaged id: String) async throws -> String {
        if try await staging.stagedSize(id) != nil { return try await staging.sha256(ofStaged: id) }
        // The parts of a multipart upload cannot be read before it completes: only a blob can be.
        guard let size = try await blobSize(id) else { throw BlobStoreError.notFound(id) }
        var hasher = SHA256()
        try await read(id, range: 0..<size) { hasher.update(data: $0.readableBytesView) }
        return hasher.finalize().hexString
    }

    /// Reading staged bytes back means reading the whole blob from the bucket: the upload route
    /// hashes after publishing, and only when it must check a declared SHA-256.
    public var hashesStagedBytesCheaply: Bool { false }

    /// Nothing of the request is recorded: the upload stands where it stood.
    public func discard(_ writer: inout any StagedWriter, of id: String, backTo offset: Int64) async throws {
        await writer.abandon()
    }

    // MARK: blobs (the bucket)

    public func publish(_ id: String) async throws {
        if let state = try await ledger.stagingState(id) {
            try await publishStaged(state)
        } else if try await staging.stagedSize(id) != nil {
            try await publishLocal(id)
        } else if try await blobSize(id) == nil {
            throw BlobStoreError.notFound(id)
        }
    }

    /// The tail as the last part, then the multipart upload completed (or, for a file smaller than
    /// a part, the tail copied to the blob's key and the multipart upload aborted).
    func publishStaged(_ state: StagingState) async throws {
        let key = blobKey(state.uploadID)
        var parts = state.parts
        if parts.isEmpty && state.tailSize == 0 {
            // A direct upload: its parts were sent straight to the store.
            parts = try await directlyStoredParts(state)
        }
        var tail = ByteBuffer()
        if let tailKey = state.tailKey, state.tailSize > 0 {
            tail.reserveCapacity(Int(state.tailSize))
            try await client.getObject(tailKey, range: 0..<state.tailSize) { chunk in
                var c = chunk
                tail.writeBuffer(&c)
            }
        }
        if parts.isEmpty {
            // Smaller than a part: one PUT, no multipart upload needed.
            try await client.putObject(key, .bytes(tail))
            try? await client.abortMultipartUpload(key, uploadID: state.s3UploadID)
        } else {
            if tail.readableBytes > 0 {
                let number = parts.count + 1
                let etag = try await client.uploadPart(key, uploadID: state.s3UploadID, number: number, .bytes(tail))
                parts.append(StagedPart(number: number, size: Int64(tail.readableBytes), etag: etag))
            }
            do {
                try await client.completeMultipartUpload(key, uploadID: state.s3UploadID, parts: parts.map { ($0.number, $0.etag) })
            } catch {
                // A publish retried after it completed once (a crash before the record): the blob is there.
                guard try await client.headObject(key) == parts.reduce(0, { $0 + $1.size }) else { throw error }
            }
        }
        for (k, _) in (try? await client.listKeys(prefix: stagingPrefix(state.uploadID))) ?? [] { try? await client.deleteObject(k) }
        try await ledger.dropStaging(state.uploadID)
    }

    /// A file of this replica (`makeBlob`): one PUT, or a multipart upload of `partSize` parts.
    func publishLocal(_ id: String) async throws {
        let path = staging.stagingDir + "/" + id
        guard let size = try await staging.stagedSize(id) else { throw BlobStoreError.notFound(id) }
        let key = blobKey(id)
        if size <= partSize {
            try await client.putObject(key, .file(path: path, offset: 0, length: size))
        } else {
            let uploadID = try await client.createMultipartUpload(key)
            do {
                var parts: [(number: Int, etag: String)] = []
                var offset: Int64 = 0
                while offset < size {
                    let n = min(partSize, size - offset)
                    let etag = try await client.uploadPart(key, uploadID: uploadID, number: parts.count + 1, .file(path: path, offset: offset, length: n))
                    parts.append((parts.count + 1, etag))
                    offset += n
                }
                try await client.completeMultipartUpload(key, uploadID: uploadID, parts: parts)
            } catch {
                try? await client.abortMultipartUpload(key, uploadID: uploadID)
                throw error
            }
        }
        try await staging.deleteStaged(id)
    }

    public func blobSize(_ id: String) async throws -> Int64? { try await client.headObject(blobKey(id)) }

    public func read(_ id: String, range: Range<Int64>, into consume: (ByteBuffer) async throws -> Void) async throws {
        try await client.getObject(blobKey(id), range: range, into: consume)
    }

    /// S3 has no holes: the zeros past the source's end are written (and sent). The SHA-256
    /// follows the same rule as the local store's (none past `hashedZeros` of zeros).
    public func makeBlob(_ id: String, fromPrefixOf source: BlobBytes, size: Int64) async throws -> String? {
        let digest = try await staging.makeStagedBlob(id, fromPrefixOf: source, size: size, blobs: self)
        try await publishLocal(id)
        return digest
    }

    public func deleteBlob(_ id: String) async throws { try await client.deleteObject(blobKey(id)) }

    public func allBlobIDs() async throws -> [String] {
        let prefix = client.key("blobs/")
        return try await client.listKeys(prefix: prefix).compactMap { $0.key.hasPrefix(prefix) ? String($0.key.dropFirst(prefix.count)) : nil }
    }

    /// Objects older than `sweepAge` only: the bucket is shared by replicas, and another one may
    /// have sent a blob a moment ago whose record it has not committed yet.
    public func blobIDs() async throws -> [String] {
        let prefix = client.key("blobs/")
        let cutoff = Date().addingTimeInterval(-sweepAge)
        return try await client.listKeys(prefix: prefix).compactMap { entry in
            guard entry.key.hasPrefix(prefix), let modified = entry.modified, modified < cutoff else { return nil }
            return String(entry.key.dropFirst(prefix.count))
        }
    }

    /// Multipart uploads under the blobs that no staging records, begun more than `sweepAge` ago
    /// (a replica that stopped between creating one and recording it; a staging dropped without
    /// its abort): aborted, with tail objects no staging names. Returns how many went.
    public func abortAbandonedUploads() async throws -> Int {
        let recorded = Set(try await ledger.stagings().map(\.s3UploadID))
        let cutoff = Date().addingTimeInterval(-sweepAge)
        var aborted = 0
        for upload in try await client.listMultipartUploads(prefix: client.key("blobs/")) where !recorded.contains(upload.uploadID) {
            guard let initiated = upload.initiated, initiated < cutoff else { continue }
            try? await client.abortMultipartUpload(upload.key, uploadID: upload.uploadID)
            aborted += 1
        }
        let tailsPrefix = client.key("staging/")
        let live = Set(try await ledger.stagings().map(\.id))
        for (key, modified) in try await client.listKeys(prefix: tailsPrefix) {
            let rest = key.dropFirst(tailsPrefix.count)
            guard let id = rest.split(separator: "/").first.map(String.init), !live.contains(id), let modified, modified < cutoff else { continue }
            try? await client.deleteObject(key)
            aborted += 1
        }
        return aborted
    }
}

/// Writes one request's bytes into an upload staged in the bucket (see `S3BlobStore`).
struct S3StagedWriter: StagedWriter {
    let store: S3BlobStore
    let base: StagingState
    /// Parts 1…keep stay; this request's full parts follow them.
    let keep: Int
    var buffer: ByteBuffer
    var added: [StagedPart] = []
    var offset: Int64
    var closed = false

    /// A writer at `offset`: the upload's current end, or 0 (a PUT starting over). `allowCut`:
    /// also an offset inside the tail (`truncateStaged`).
    static func open(_ store: S3BlobStore, _ state: StagingState, at offset: Int64, allowCut: Bool = false) async throws -> S3StagedWriter {
        let full = Int64(state.parts.count) * state.partSize
        let keep: Int
        // One part's room from the start (growing by doubling would hold 1.5 parts at a time), up
        // to 8 MiB: the larger parts of a huge upload grow as their bytes come, not on a promise.
        var buffer = ByteBufferAllocator().buffer(capacity: Int(min(state.partSize, 8 << 20)))
        if offset == 0 {
            keep = 0
        } else if offset == state.offset || (allowCut && offset >= full && offset < state.offset) {
            keep = state.parts.count
            let tailBytes = offset - full
            if tailBytes > 0, let tailKey = state.tailKey {
                // The bytes after the last full part, read back to go on from them.
                try await store.client.getObject(tailKey, range: 0..<tailBytes) { chunk in
                    var c = chunk
                    buffer.writeBuffer(&c)
                }
            }
        } else {
            throw BlobStoreError.offsetNotHeld(offset: offset, held: state.offset)
        }
        return S3StagedWriter(store: store, base: state, keep: keep, buffer: buffer, offset: offset)
    }

    mutating func write(_ bytes: ByteBuffer) async throws {
        var bytes = bytes
        while bytes.readableBytes > 0 {
            let room = Int(base.partSize) - buffer.readableBytes
            var slice = bytes.readSlice(length: min(room, bytes.readableBytes))!
            offset += Int64(slice.readableBytes)
            buffer.writeBuffer(&slice)
            if buffer.readableBytes == Int(base.partSize) { try await sendPart() }
        }
    }

    /// A full part to the multipart upload (recorded at `finish`).
    mutating func sendPart() async throws {
        let number = keep + added.count + 1
        guard number <= S3BlobStore.maxParts else { throw BlobStoreError.tooLarge(limit: Int64(S3BlobStore.maxParts) * base.partSize) }
        let etag = try await store.client.uploadPart(store.blobKey(base.uploadID), uploadID: base.s3UploadID, number: number, .bytes(buffer))
        added.append(StagedPart(number: number, size: Int64(buffer.readableBytes), etag: etag))
        buffer.clear()
    }

    /// Keeps the bytes after the last full part as the tail, and records the parts and the tail,
    /// if no other request committed since this one began (409 otherwise).
    mutating func finish() async throws -> Int64 {
        closed = true
        var tailKey: String?
        if buffer.readableBytes > 0 {
            let key = store.stagingPrefix(base.uploadID) + "tail-\(offset)-\(UInt32.random(in: 0...UInt32.max))"
            try await store.client.putObject(key, .bytes(buffer))
            tailKey = key
        }
        let committed = try await store.ledger.commitStaging(
            base.uploadID, expected: base.version, keep: keep, added: added, tailKey: tailKey, tailSize: Int64(buffer.readableBytes))
        guard committed else {
            if let tailKey { try? await store.client.deleteObject(tailKey) }
            throw BlobStoreError.conflict("another request wrote this upload meanwhile; ask for its offset and resume from there")
        }
        if let old = base.tailKey, old != tailKey { try? await store.client.deleteObject(old) }
        return offset
    }

    mutating func abandon() async {
        closed = true
    }
}
