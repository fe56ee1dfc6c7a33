import Foundation
import StorageProtocol

extension StowService {
    /// Direct uploads up to this size are stored inline.
    var inlineLimit: Int64 { min(config.inlineLimit, ServerConfiguration.inlineCeiling) }

    /// Finds a file's blob: only a file small enough to have been stored inline is looked up in
    /// the database.
    func locateBlob(_ id: String, size: Int64) async throws -> BlobBytes {
        if size <= ServerConfiguration.inlineCeiling, let data = try await store.inlineBlob(id) { return .inline(data) }
        return .stored(id)
    }
}
