import Foundation
import StorageProtocol
import Synchronization

/// Signed read URLs, asked for in batches and reused until shortly before they expire.
final class SignedURLCache: Sendable {
    struct Signed {
        var url: String
        var expires: ContinuousClock.Instant
    }

    private let urls = Mutex<[Location: Signed]>([:])
    /// A URL is renewed when less than this is left of its life.
    let margin: Duration = .seconds(300)

    func url(for location: Location) -> String? {
        urls.withLock { m in
            guard let s = m[location], s.expires - .now > margin else { return nil }
            return s.url
        }
    }

    func insert(_ location: Location, url: String, lifetime: Duration) {
        urls.withLock { $0[location] = Signed(url: url, expires: .now + lifetime) }
    }

    func forget(_ location: Location) {
        urls.withLock { _ = $0.removeValue(forKey: location) }
    }

    /// Forgets every URL at or under `location` (it was renamed or deleted).
    func forget(under location: Location) {
        urls.withLock { m in m = m.filter { !$0.key.isWithin(location) } }
    }
}
