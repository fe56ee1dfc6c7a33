/// How often, and how patiently, a failed call is tried again: `attempts` tries in all, waiting
/// `baseDelay`, then twice that, and so on up to `maxDelay`, with ±25% jitter.
public struct RetryPolicy: Sendable {
    public var attempts: Int
    public var baseDelay: Duration
    public var maxDelay: Duration

    public init(attempts: Int = 3, baseDelay: Duration = .milliseconds(200), maxDelay: Duration = .seconds(5)) {
        self.attempts = max(1, attempts)
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    public static let `default` = RetryPolicy()
    public static let none = RetryPolicy(attempts: 1)

    /// The pause before try number `attempt + 1` (attempt counts from 1).
    public func delay(after attempt: Int) -> Duration {
        var d = baseDelay
        for _ in 1..<max(1, attempt) where d < maxDelay { d = d * 2 }
        d = min(d, maxDelay)
        let jitter = Double.random(in: 0.75...1.25)
        return d * jitter
    }

    /// Runs `body`, retrying transient `StorageError`s. Cancellation stops the waiting at once.
    public func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch let error as StorageError where error.isTransient && attempt < attempts {
                try await sleep(delay(after: attempt))
                attempt += 1
            }
        }
    }

    func sleep(_ d: Duration) async throws {
        do {
            try await Task.sleep(for: d)
        } catch {
            throw StorageError(.cancelled, "cancelled")
        }
    }
}
