public import Foundation
import NIOCore

/// Where a blob's bytes are: inside the metadata store (small files, see `publishInline`) or a
/// file of the blob store.
public enum BlobBytes: Sendable {
    case inline(Data)
    case stored(String)

    /// Hands the bytes in `range` to `consume`.
    func read(_ range: Range<Int64>, from blobs: any BlobStore, into consume: (ByteBuffer) async throws -> Void) async throws {
        switch self {
        case .inline(let data):
            guard !range.isEmpty else { return }
            let start = data.startIndex + Int(range.lowerBound), end = data.startIndex + Int(range.upperBound)
            guard end <= data.endIndex else { throw BlobStoreError.notFound("inline blob shorter than \(range.upperBound) bytes") }
            try await consume(ByteBuffer(bytes: data[start..<end]))
        case .stored(let id):
            try await blobs.read(id, range: range, into: consume)
        }
    }
}
