import Foundation
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

    /// A move left unfinished, and the paths held (`pause(under:)`) until it is settled.
    struct MoveLeft: Sendable {
        var move: UploadJournal.Move
        let held: [Location]
    }

    /// Settles, before anything is sent, each move the journal holds (`settle`), then drops the
    /// last mount's superseded records. A move the server cannot be asked about now (or `ask`
    /// false: a mount started offline) stays, with what it could carry held at both its paths;
    /// it is returned, for `settleMovesLeft`.
    static func settleMoves(_ queue: UploadQueue, _ store: any ObjectStore, ask: Bool, logger: Logger) async -> [MoveLeft] {
        let moves: [UploadJournal.Move]
        do {
            moves = try queue.journal.moves()
        } catch {
            logger.error("the moves the last mount left unfinished cannot be read: \(error)")
            return []
        }
        if moves.isEmpty { return [] }
        let left = ask ? await settle(moves, queue, store, logger: logger).left : moves
        var held: [MoveLeft] = []
        for move in left {
            await queue.pause(under: move.from)
            await queue.pause(under: move.to)
            held.append(MoveLeft(move: move, held: [move.from, move.to]))
        }
        do {
            try await queue.dropSuperseded(outside: left.flatMap { [$0.from, $0.to] })
        } catch {
            logger.error("the uploads superseded at the moves' paths could not be dropped: \(error)")
        }
        if !left.isEmpty { logger.warning("\(left.count) move(s) left unfinished by the last mount wait for the server; the uploads at their paths wait too") }
        return held
    }

    /// Settles what it can of `moves` (oldest first): asks the server where each moved inode is
    /// (`moveOutcome`) and, when it did the move, moves the records it carries. A move done
    /// moves the paths of those still to settle that lie under it (a folder renamed inside one
    /// renamed after, or one renamed again). One whose inode is at neither path is asked again
    /// after the others, since one of those may explain it, and taken as not done when none
    /// does. Returns the moves the server did not answer for (their paths as they are now), and
    /// the records moved.
    static func settle(_ moves: [UploadJournal.Move], _ queue: UploadQueue, _ store: any ObjectStore, logger: Logger) async
        -> (left: [UploadJournal.Move], moved: [(id: Int64, from: Location, to: Location)])
    {
        var pending = moves
        var moved: [(id: Int64, from: Location, to: Location)] = []
        var last: [Int64: MoveOutcome] = [:]
        var finalRound = false
        while !pending.isEmpty {
            var progress = false
            var i = 0
            while i < pending.count {
                let move = pending[i]
                var outcome = await moveOutcome(store, move)
                last[move.id] = outcome
                if finalRound, outcome == .neither {
                    logger.warning("\(describe(move)): what moved is at neither path now; its uploads go to the paths they name")
                    outcome = .done(false)
                }
                guard case .done(let happened) = outcome else {
                    i += 1
                    continue
                }
                do {
                    let these = try await queue.settleMove(move, happened: happened)
                    moved += these
                    logger.notice("\(describe(move)): \(happened ? "the server did it; \(these.count) upload(s) follow" : "not done on the server")")
                } catch {
                    logger.error("\(describe(move)) cannot be settled: \(error)")
                    last[move.id] = .unanswered
                    i += 1
                    continue
                }
                pending.remove(at: i)
                progress = true
                guard happened else { continue }
                for j in pending.indices {
                    var m = pending[j]
                    m.from = move.rebase(m.from)
                    m.to = move.rebase(m.to)
                    guard m != pending[j] else { continue }
                    pending[j] = m
                    do {
                        try queue.journal.updateMove(m)
                    } catch {
                        logger.error("\(describe(m)): its paths after \(describe(move)) could not be journaled: \(error)")
                    }
                }
            }
            if progress { continue }
            // Nothing settled this round: those at neither path are taken as not done (once).
            guard !finalRound, pending.contains(where: { last[$0.id] == .neither }) else { break }
            finalRound = true
        }
        return (pending, moved)
    }

    private static func describe(_ move: UploadJournal.Move) -> String {
        "\(move.from) \(move.exchange ? "⇄" : "→") \(move.to), left unfinished by the last mount"
    }

    /// Where the server has the inode `move` moved: at its new path, at its old one, at neither;
    /// or no answer.
    static func moveOutcome(_ store: any ObjectStore, _ move: UploadJournal.Move) async -> MoveOutcome {
        guard let ns = move.from.namespace else { return .done(false) }
        for (path, happened) in [(move.to.path, true), (move.from.path, false)] {
            do {
                if try await store.record(ns, path).inode == move.inode { return .done(happened) }
            } catch let error as StorageError where error.kind == .notFound {
            } catch {
                return .unanswered
            }
        }
        return .neither
    }

    /// Settles the moves `settleMoves` left, asking again every 2 s until the server answers;
    /// each settled lets what it held go, at the paths it now has.
    func settleMovesLeft() async {
        while !Task.isCancelled {
            let before = movesLeft.withLock { $0 }
            if before.isEmpty { return }
            let (left, moved) = await Self.settle(before.map(\.move), queue, store, logger: logger)
            state.withLock { s in
                // The files shown for recovered uploads follow their records.
                let shown = moved.compactMap { m in s.recovered[m.from].flatMap { $0.id == m.id ? (m, $0) : nil } }
                for (m, _) in shown { s.recovered[m.from] = nil }
                for (m, r) in shown {
                    var r = r
                    r.location = m.to
                    s.recovered[m.to] = r
                }
            }
            let leftIDs = Set(left.map(\.id))
            movesLeft.withLock { list in
                list = before.filter { leftIDs.contains($0.move.id) }.map { m in
                    MoveLeft(move: left.first { $0.id == m.move.id } ?? m.move, held: m.held)
                }
            }
            for m in before where !leftIDs.contains(m.move.id) {
                for location in m.held { await queue.resume(under: location) }
            }
            if left.isEmpty { return }
            try? await Task.sleep(for: .seconds(2))
        }
    }
}
