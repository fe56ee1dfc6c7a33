import Foundation
import StorageProtocol
import Testing

/// POSIX lock rules, as `LockArithmetic` applies them on the server.
@Suite("lock arithmetic")
struct LockArithmeticTests {
    static func lock(_ owner: UInt64, _ type: LockType, _ start: UInt64, _ end: UInt64, session: String = "s-aaaaaaaaaaaaaaaa") -> HeldLock {
        HeldLock(session: session, owner: owner, type: type, start: start, end: end, pid: Int32(truncatingIfNeeded: owner))
    }

    /// (owner, type, start, end) of each lock, sorted, for comparing sets.
    static func shape(_ locks: [HeldLock]) -> [String] {
        locks.map { "\($0.owner) \($0.type.rawValue) \($0.start)-\($0.end == .max ? "max" : String($0.end))" }.sorted()
    }

    @Test("read locks share; a write lock conflicts with any other owner's overlapping lock, not with its own or a distant one")
    func conflicts() {
        let held = [Self.lock(1, .read, 0, 99)]
        #expect(LockArithmetic.conflict(held, Self.lock(2, .read, 50, 60)) == nil)
        #expect(LockArithmetic.conflict(held, Self.lock(2, .write, 50, 60)) == held[0])
        #expect(LockArithmetic.conflict(held, Self.lock(2, .write, 100, 200)) == nil)
        #expect(LockArithmetic.conflict(held, Self.lock(1, .write, 0, 99)) == nil, "an owner's own lock is never in its way")
        // The same owner number in another session (another mount) is another owner.
        #expect(LockArithmetic.conflict(held, Self.lock(1, .write, 0, 0, session: "s-bbbbbbbbbbbbbbbb")) == held[0])
        // To the end of the file, however far.
        #expect(LockArithmetic.conflict([Self.lock(1, .write, 10, .max)], Self.lock(2, .read, UInt64.max - 1, .max)) != nil)
        #expect(LockArithmetic.conflict(held, Self.lock(2, .unlock, 0, .max)) == nil)
    }

    @Test("an unlock in the middle splits a lock; a new type over part of a range replaces that part; touching locks of one type merge")
    func splitAndMerge() {
        var held = LockArithmetic.apply([], Self.lock(1, .write, 0, 99))
        held = LockArithmetic.apply(held, Self.lock(1, .unlock, 40, 59))
        #expect(Self.shape(held) == ["1 write 0-39", "1 write 60-99"])
        held = LockArithmetic.apply(held, Self.lock(1, .read, 30, 69))
        #expect(Self.shape(held) == ["1 read 30-69", "1 write 0-29", "1 write 70-99"])
        held = LockArithmetic.apply(held, Self.lock(1, .write, 30, 69))
        #expect(Self.shape(held) == ["1 write 0-99"])
        // Another owner's locks are left as they are.
        held = LockArithmetic.apply(held, Self.lock(2, .read, 200, .max))
        held = LockArithmetic.apply(held, Self.lock(1, .unlock, 0, .max))
        #expect(Self.shape(held) == ["2 read 200-max"])
        // Adjacent at the very end: no overflow.
        held = LockArithmetic.apply(held, Self.lock(2, .read, 100, 199))
        #expect(Self.shape(held) == ["2 read 100-max"])
        held = LockArithmetic.apply(held, Self.lock(2, .unlock, UInt64.max, .max))
        #expect(Self.shape(held) == ["2 read 100-18446744073709551614"])
    }

    @Test("a lock set survives JSON with ranges up to 2^64-1")
    func coding() throws {
        let locks = [Self.lock(UInt64.max, .write, UInt64.max - 1, .max)]
        let data = try JSONEncoder().encode(locks)
        #expect(try JSONDecoder().decode([HeldLock].self, from: data) == locks)
    }
}
