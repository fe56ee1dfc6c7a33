import Foundation
import Glibc
import Logging
import Synchronization
import StorageClient
import StorageProtocol

/// Moves a crash left unfinished (`UploadJournal.Move`): a folder's rename or an exchange that
/// the server may have done before the records it carries were moved here.
extension StowFileSystem {
    /// What the server says of a move left unfinished.
    enum MoveOutcome: Equatable {
        /// Done (the moved inode at the new path), or not (still at the old one).
        case done(Bool)
        /// At neither path: moved on since (a later move of this mount's, settled after it, or
        /// another client's), or removed.
        case neither
        /// No answer.
        case unanswered
    }

    /// Settles, before anything is sent, each move the journal holds (`settle`), then drops the
    /// last mount's superseded records. A move the server cannot be asked about now (or `ask`
    /// false: a mount started offline) stays, with what it could carry held at both its paths;
    /// it is returned, for `settleMovesLeft`; its two paths are held (`pause(under:)`) until then.
    static func settleMoves(_ queue: UploadQueue, _ store: any ObjectStore, ask: Bool, logger: Logger) async -> [UploadJournal.Move] {
        let moves: [UploadJournal.Move]
        do {
            moves = try queue.journal.moves()
        } catch {
            logger.error("the moves the last mount left unfinished cannot be read: \(error)")
            return []
        }
        if moves.isEmpty { return [] }
        let left = ask ? await settle(moves, queue, store, logger: logger) : moves
        for move in left {
            await queue.pause(under: move.from)
            await queue.pause(under: move.to)
        }
        do {
            try await queue.dropSuperseded(outside: left.flatMap { [$0.from, $0.to] })
        } catch {
            logger.error("the uploads superseded at the moves' paths could not be dropped: \(error)")
        }
        if !left.isEmpty { logger.warning("\(left.count) move(s) left unfinished by the last mount wait for the server; the uploads at their paths wait too") }
        return left
    }

    /// Settles `moves` (the journal's, oldest first), or none of them: asks the server where each
    /// moved inode is (`moveOutcome`), newest first, each where the moves after it that the
    /// server did would have taken it (a folder renamed inside one renamed after it, or renamed
    /// again: the server did them in that order); then, oldest first, moves the records each move
    /// the server did carries, and forgets each. An inode at neither place (moved since by
    /// another client, or removed) is taken as not moved, and its records stay where they are.
    /// When one is not answered, the moves before it cannot be told, and nothing is settled.
    /// Returns the moves left: all, or none but the one the journal failed to forget and those after it.
    static func settle(_ moves: [UploadJournal.Move], _ queue: UploadQueue, _ store: any ObjectStore, logger: Logger) async
        -> [UploadJournal.Move]
    {
        var done: [Int64: Bool] = [:]
        var after: [UploadJournal.Move] = []  // the later moves the server did, oldest first
        for move in moves.sorted(by: { $0.id > $1.id }) {
            var there = move
            for later in after {
                there.from = later.rebase(there.from)
                there.to = later.rebase(there.to)
            }
            switch await moveOutcome(store, there) {
            case .unanswered:
                return moves
            case .neither:
                logger.warning("\(describe(move)): what moved is at neither path now; its uploads go to the paths they name")
                done[move.id] = false
            case .done(let happened):
                done[move.id] = happened
                if happened { after.insert(move, at: 0) }
            }
        }
        for (i, move) in moves.sorted(by: { $0.id < $1.id }).enumerated() {
            let happened = done[move.id] ?? false
            do {
                let carried = try await queue.settleMove(move, happened: happened)
                logger.notice("\(describe(move)): \(happened ? "the server did it; \(carried) upload(s) follow" : "not done on the server")")
            } catch {
                // The later ones wait (the journal failed; the next start asks again).
                logger.error("\(describe(move)) cannot be settled: \(error)")
                return Array(moves.sorted(by: { $0.id < $1.id })[i...])
            }
        }
        return []
    }

    private static func describe(_ move: UploadJournal.Move) -> String {
        "\(move.from) \(move.exchange ? "⇄" : "→") \(move.to), left unfinished by the last mount"
    }

    /// Where the server has the inode `move` moved: at its new path, at its old one, at neither;
    /// or no answer (asked again later). An answer that the path holds nothing there (404, or a
    /// parent on the path that is a file now: 409) says "not there": asked forever, the move
    /// would hold what it carries, and every `sync`, for good.
    static func moveOutcome(_ store: any ObjectStore, _ move: UploadJournal.Move) async -> MoveOutcome {
        guard let ns = move.from.namespace else { return .done(false) }
        for (path, happened) in [(move.to.path, true), (move.from.path, false)] {
            do {
                if try await store.record(ns, path).inode == move.inode { return .done(happened) }
            } catch let error as StorageError where error.saysNothingThere {
            } catch {
                return .unanswered
            }
        }
        return .neither
    }

    /// Settles the moves `settleMoves` left (asked once already), asking again every
    /// `movesLeftRetry` until the server answers; once settled, what they held goes, at the
    /// paths it now has.
    func settleMovesLeft() async {
        while true {
            try? await Task.sleep(for: configuration.movesLeftRetry)
            if Task.isCancelled { return }
            let left = movesLeft.withLock { $0 }
            if left.isEmpty { return }
            let still = await Self.settle(left, queue, store, logger: logger)
            let stillIDs = Set(still.map(\.id))
            if still.isEmpty {
                // The last mount's records that two of one path now make (held back at the start).
                do {
                    try await queue.dropSuperseded(outside: [])
                } catch {
                    logger.error("the uploads superseded at the moves' paths could not be dropped: \(error)")
                }
                // The files of the recovered uploads held back show, at their paths now (behind a
                // file written there meanwhile, which is newer and is sent after them).
                var shown: [UploadJournal.Record] = []
                for id in recoveredHeld.withLock({ $0 }) { if let r = await queue.record(id) { shown.append(r) } }
                state.withLock { s in
                    for r in shown where s.recovered[r.location] == nil { s.recovered[r.location] = r }
                }
                recoveredHeld.withLock { $0 = [] }
            }
            for move in left where !stillIDs.contains(move.id) {
                await queue.resume(under: move.from)
                await queue.resume(under: move.to)
            }
            // Last: a folder's move waiting for these (`waitForMovesLeft`) goes once all of the above is done.
            movesLeft.withLock { $0 = left.filter { stillIDs.contains($0.id) } }
            if still.isEmpty { return }
        }
    }

    /// Faults a test of the whole program puts in (`STOWFS_TEST_FAULT`, read by `stowfs mount`):
    /// a crash at a moment no signal from outside can hit.
    public enum TestFault: String, Sendable {
        /// The process ends (`_exit(137)`, as a `kill -9` would end it) once the server did a
        /// folder's move or an exchange, before the names change here.
        case exitAfterServerMove = "exit-after-server-move"
    }

    public func inject(_ fault: TestFault) {
        switch fault {
        case .exitAfterServerMove:
            afterServerMove.withLock {
                $0 = { @Sendable [logger] in
                    logger.critical("a fault put in by a test (STOWFS_TEST_FAULT=\(fault.rawValue)): the process ends now")
                    Glibc._exit(137)
                }
            }
        }
    }
}
