import Synchronization

/// Blocks being prefetched right now, so that one block is not fetched twice at once.
final class InflightBlocks: Sendable {
    private let keys = Mutex<Set<String>>([])

    private static func key(_ etag: String, _ index: Int64) -> String { "\(etag)#\(index)" }

    /// Claims the blocks; false (claiming nothing) when any is claimed already.
    func begin(etag: String, blocks: [Int64]) -> Bool {
        keys.withLock { set in
            let ks = blocks.map { Self.key(etag, $0) }
            guard ks.allSatisfy({ !set.contains($0) }) else { return false }
            set.formUnion(ks)
            return true
        }
    }

    func end(etag: String, blocks: [Int64]) {
        keys.withLock { set in for b in blocks { set.remove(Self.key(etag, b)) } }
    }
}
