import Foundation
import Testing
@testable import StowFS

@Suite("engine: the upload scheduler's wake-up")
struct WakeupTests {
    @Test("a wait ends at its timeout, at a signal, or at once for a signal sent before it", .timeLimit(.minutes(3)))
    func endsOnTimeoutOrSignal() async throws {
        let wake = Wakeup()
        // The upper bounds tell the outcome apart from a wait of an hour, and are not a speed: with
        // the mount tests in the same process (2 cores, blocked threads), a signal 100 ms on once
        // ended its wait 9 s later.
        // The timeout.
        var start = ContinuousClock.now
        await wake.wait(timeout: .milliseconds(200))
        var took = ContinuousClock.now - start
        #expect(took >= .milliseconds(190))
        #expect(took < .seconds(60))
        // A signal while it waits (an hour).
        start = .now
        Task {
            try await Task.sleep(for: .milliseconds(100))
            wake.signal()
        }
        await wake.wait(timeout: .seconds(3600))
        took = ContinuousClock.now - start
        #expect(took >= .milliseconds(90))
        #expect(took < .seconds(60))
        // A signal kept for the next wait; then the one after it waits again.
        wake.signal()
        start = .now
        await wake.wait(timeout: .seconds(3600))
        #expect(ContinuousClock.now - start < .seconds(60))
        start = .now
        await wake.wait(timeout: .milliseconds(150))
        #expect(ContinuousClock.now - start >= .milliseconds(140))
        // A timer cancelled with its wait does not signal later: the next wait runs its own course.
        for _ in 0..<200 {
            wake.signal()
            await wake.wait(timeout: .milliseconds(50))
        }
        try await Task.sleep(for: .milliseconds(120))
        start = .now
        await wake.wait(timeout: .milliseconds(300))
        #expect(ContinuousClock.now - start >= .milliseconds(290))
        // Absurd timeouts are taken as they come (no overflow, no trap).
        wake.signal()
        await wake.wait(timeout: .seconds(Int64.max))
        wake.signal()
        await wake.wait(timeout: .seconds(-5))
    }
}
