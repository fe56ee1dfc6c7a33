import Crypto
public import Foundation
public import NIOCore

/// Blobs as objects of an S3-compatible bucket (`<prefix>/blobs/<id>`); uploads in progress stay
/// staging files on this replica's disk (a `LocalBlobStore` in the data directory) until they are
/// published, which sends them to the bucket and removes them here.
///
/// This is the first S3 slice: the bytes of an upload pass through the stowd that received it,
/// and an upload must finish on that replica. Presigned PUT and part URLs for clients, and
/// staging in S3 multipart uploads so that any replica can continue one, come next.
///
/// Objects are immutable (an id is never written twice with other bytes), so a publish retried
/// after a crash between the PUT and the local delete writes the same bytes again.
public final class S3BlobStore: BlobStore {
    let client: S3Client
    let staging: LocalBlobStore
    /// Files larger than this go up as multipart uploads of parts this size (S3: 5 MiB to 5 GiB a part).
    let partSize: Int64
    /// How old an object must be before a start-up sweep may remove it as an orphan (seconds).
    let sweepAge: TimeInterval

    public init(_ location: S3Location, stagingRoot: String, partSize: Int64 = 16 << 20, sweepAge: TimeInterval = 3600) throws {
        self.sweepAge = sweepAge
        client = S3Client(location)
        staging = try LocalBlobStore(root: stagingRoot)
        self.partSize = max(5 << 20, partSize)
    }

    /// Checks that the store answers and the credentials are taken; makes the bucket if missing.
    public func prepare() async throws {
        try await client.ensureBucket()
    }

    func blobKey(_ id: String) -> String { client.key("blobs/" + id) }

    // MARK: staging (local)

    public func stagedSize(_ id: String) async throws -> Int64? { try await staging.stagedSize(id) }
    public func openStaged(_ id: String, at offset: Int64, expecting: Int64?) async throws -> any StagedWriter {
        try await staging.openStaged(id, at: offset, expecting: expecting)
    }
    public func truncateStaged(_ id: String, to size: Int64) async throws { try await staging.truncateStaged(id, to: size) }
    public func deleteStaged(_ id: String) async throws { try await staging.deleteStaged(id) }
    public func stagedIDs() async throws -> [String] { try await staging.stagedIDs() }

    public func sha256(ofStaged id: String) async throws -> String {
        if try await staging.stagedSize(id) != nil { return try await staging.sha256(ofStaged: id) }
        var hasher = SHA256()
        guard let size = try await blobSize(id) else { throw BlobStoreError.notFound(id) }
        try await read(id, range: 0..<size) { hasher.update(data: $0.readableBytesView) }
        return hasher.finalize().hexString
    }

    // MARK: blobs (the bucket)

    public func publish(_ id: String) async throws {
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
        try await publish(id)
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
}
