import Foundation
import StorageProtocol
import Synchronization

/// A bandwidth limit for one direction of a client (`stowfs mount --bwlimit`): a token bucket
/// shared by every request, whose rate can change at any moment (`stowfs set`).
///
/// `take(n)` reserves `n` bytes and sleeps for the debt: the bucket may go below zero, so a chunk
/// larger than the bucket waits for its own share and concurrent requests queue behind each other
/// in order; over any stretch of seconds the total is the rate, whatever the chunk sizes. The
/// bucket holds a tenth of a second of bytes, so an idle limiter lets only that much through at
/// once. A rate of 0 is no limit.
public final class BandwidthLimiter: Sendable {
    private struct State {
        var rate: Double = 0
        var tokens: Double = 0
        var last = ContinuousClock.now
        /// Bumped by `setRate`: a waiter sees it and takes its bytes again at the new rate.
        var generation = 0
    }

    private let state = Mutex(State())

    public init(bytesPerSecond: Int64 = 0) {
        setRate(bytesPerSecond)
    }

    /// Bytes per second; 0 for no limit.
    public var bytesPerSecond: Int64 { Int64(state.withLock { $0.rate }) }

    public func setRate(_ bytesPerSecond: Int64) {
        state.withLock { s in
            s.rate = Double(max(0, bytesPerSecond))
            // A new rate starts from a full bucket: debts made at the old rate are forgiven.
            s.tokens = s.rate / 10
            s.last = .now
            s.generation += 1
        }
    }

    /// Waits until `n` more bytes may go (at once without a limit).
    /// A rate change (`stowfs set`) reaches those already waiting within a quarter of a second:
    /// they take their bytes again at the new rate (the old debts are forgiven).
    public func take(_ n: Int) async {
        guard n > 0 else { return }
        while true {
            let (wait, generation): (Double, Int) = state.withLock { s in
                guard s.rate > 0 else { return (0, s.generation) }
                let now = ContinuousClock.now
                let elapsed = now - s.last
                s.last = now
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                s.tokens = min(s.rate / 10, s.tokens + seconds * s.rate) - Double(n)
                return (s.tokens >= 0 ? 0 : -s.tokens / s.rate, s.generation)
            }
            var left = min(wait, 86400)
            while left > 0 {
                let slice = min(left, 0.25)
                do { try await Task.sleep(for: .nanoseconds(Int64(slice * 1e9))) } catch { return }
                left -= slice
                if state.withLock({ $0.generation }) != generation { break }
            }
            if left <= 0 { return }
        }
    }
}

/// The limits of both directions of a mount.
public struct BandwidthLimits: Sendable {
    public let up: BandwidthLimiter
    public let down: BandwidthLimiter

    public init(up: Int64 = 0, down: Int64 = 0) {
        self.up = BandwidthLimiter(bytesPerSecond: up)
        self.down = BandwidthLimiter(bytesPerSecond: down)
    }

    /// `RATE` for both directions or `UP:DOWN`, in bytes per second with binary K, M, G (as
    /// rclone's --bwlimit: `10M` is 10 MiB/s); `off` or `0` is no limit. Nil when it is not one.
    public static func parse(_ text: String) -> (up: Int64, down: Int64)? {
        func one(_ t: Substring) -> Int64? {
            let s = t.trimmingCharacters(in: .whitespaces).lowercased()
            if s == "off" { return 0 }
            return s.isEmpty ? nil : ByteSize.parse(s)
        }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        switch parts.count {
        case 1: guard let r = one(parts[0]) else { return nil }; return (r, r)
        case 2: guard let u = one(parts[0]), let d = one(parts[1]) else { return nil }; return (u, d)
        default: return nil
        }
    }

    public func set(up: Int64, down: Int64) {
        self.up.setRate(up)
        self.down.setRate(down)
    }

    /// `10 MiB/s up, no limit down`.
    public var description: String { Self.describe(up: up.bytesPerSecond, down: down.bytesPerSecond) }

    /// `10 MiB/s up, no limit down` for these rates (0: no limit).
    public static func describe(up: Int64, down: Int64) -> String {
        func rate(_ r: Int64) -> String { r == 0 ? "no limit" : "\(ByteSize.format(r))/s" }
        return "\(rate(up)) up, \(rate(down)) down"
    }
}
