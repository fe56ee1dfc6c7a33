import Synchronization

/// Blocks being fetched right now, and the reads waiting for them: a block is fetched once, however
/// many reads (and read-aheads) want it at the same time.
final class InflightBlocks: Sendable {
    struct Key: Hashable {
        let etag: String
        let index: Int64
    }

    /// A claimed block → the reads waiting for it.
    private let claims = Mutex<[Key: [CheckedContinuation<Void, Never>]]>([:])

    /// Claims those of `blocks` that nobody is fetching, and returns them: the caller fetches
    /// them and calls `end` for each, whatever happens.
    func claim(etag: String, blocks: [Int64]) -> [Int64] {
        claims.withLock { c in
            blocks.filter { b in
                let key = Key(etag: etag, index: b)
                guard c[key] == nil else { return false }
                c[key] = []
                return true
            }
        }
    }

    /// Returns when nobody is fetching `block` any more (at once if nobody is). The block may
    /// still be missing after (its fetch failed): look again.
    func wait(etag: String, block: Int64) async {
        await withCheckedContinuation { (k: CheckedContinuation<Void, Never>) in
            let queued = claims.withLock { c -> Bool in
                let key = Key(etag: etag, index: block)
                guard c[key] != nil else { return false }
                c[key]!.append(k)
                return true
            }
            if !queued { k.resume() }
        }
    }

    /// The fetch of `block` is over (stored or failed): wakes its waiters.
    func end(etag: String, block: Int64) {
        let waiters = claims.withLock { c in c.removeValue(forKey: Key(etag: etag, index: block)) ?? [] }
        for k in waiters { k.resume() }
    }
}
