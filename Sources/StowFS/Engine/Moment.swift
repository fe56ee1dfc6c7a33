/// A `ContinuousClock.Instant` in 8 bytes: nanoseconds from a base taken before the process's
/// first use, for the inode records (an instant is 16 bytes, an optional one 17, and each of
/// 100,000 records carries two).
///
/// Instants outside the 292 years from the base are kept at its ends (a TTL of centuries is
/// "for ever" either way); `none` stands for nil.
struct Moment: Sendable, Equatable {
    private var nanoseconds: Int64

    /// Ten years before the clock's reading at first use: `forcedStale` (a year back) and any
    /// other past instant the engine makes stay within reach.
    private static let base = ContinuousClock.now - .seconds(10 * 365 * 86_400)

    static let none = Moment(nanoseconds: .min)

    private init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    init(_ instant: ContinuousClock.Instant) {
        let (seconds, attoseconds) = (instant - Self.base).components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow {
            nanoseconds = seconds < 0 ? .min + 1 : .max
            return
        }
        let (sum, over) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        nanoseconds = over ? (seconds < 0 ? .min + 1 : .max) : max(sum, .min + 1)
    }

    var instant: ContinuousClock.Instant { Self.base + .nanoseconds(nanoseconds) }
}
