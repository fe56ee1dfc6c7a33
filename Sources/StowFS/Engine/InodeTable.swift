/// The engine's inodes by number: a dictionary's interface over records kept in chunks.
///
/// A `[InodeNumber: InodeEntry]` kept each record in its hash table's slots: with 100,000 files,
/// 262,144 slots of 336 bytes (88 MB), and while it grew past a power of two the old and the new
/// table at once. Here the hash table maps a number to a position (12 bytes a slot), and the
/// records sit in chunks of 1,024 that never move: the memory is that of the records, and
/// growing allocates one chunk. Positions freed by removals are used again. A record is 240
/// bytes (`InodeTableTests/recordSize`): its instants are 8 bytes each (`Moment`), and what few
/// files have is out of line (a folder's listing, a local copy, tags and metadata).
struct InodeTable: Sendable, Sequence {
    private static let chunkShift = 10
    private static let chunkSize = 1 << chunkShift
    private static let chunkMask = chunkSize - 1

    private var position: [InodeNumber: UInt32] = [:]
    private var chunks: [[StowFileSystem.InodeEntry?]] = []
    private var next: UInt32 = 0
    private var free: [UInt32] = []

    init() {}

    var count: Int { position.count }

    /// What `body` makes of the record of `ino`, read in place; nil if there is none. For a loop
    /// that reads a few fields of many records (`if let e = table[i]` copied each whole record,
    /// retaining its references, to read them).
    func read<R>(_ ino: InodeNumber, _ body: (borrowing StowFileSystem.InodeEntry) -> R) -> R? {
        guard let p = position[ino] else { return nil }
        return chunks[Int(p) >> Self.chunkShift][Int(p) & Self.chunkMask].map { body($0) }
    }

    /// Whether `ino` has a record (without reading it).
    func contains(_ ino: InodeNumber) -> Bool { position[ino] != nil }
    var keys: Dictionary<InodeNumber, UInt32>.Keys { position.keys }
    var values: Values { Values(table: self) }

    subscript(ino: InodeNumber) -> StowFileSystem.InodeEntry? {
        // Read in place: `s.inodes[i]?.kind` or `?.directory?.children[name]` borrows the record
        // instead of copying it (and retaining each of its references) first.
        _read {
            if let p = position[ino] {
                yield chunks[Int(p) >> Self.chunkShift][Int(p) & Self.chunkMask]
            } else {
                yield nil
            }
        }
        set {
            if let p = position[ino] {
                chunks[Int(p) >> Self.chunkShift][Int(p) & Self.chunkMask] = newValue
                if newValue.isEmptySlot { release(ino, p) }
            } else if let newValue {
                insert(ino, newValue)
            }
        }
        _modify {
            if let p = position[ino] {
                let c = Int(p) >> Self.chunkShift, o = Int(p) & Self.chunkMask
                // Also when the access throws (the code after `yield` would not run).
                defer { if chunks[c][o].isEmptySlot { release(ino, p) } }
                yield &chunks[c][o]
            } else {
                var added: StowFileSystem.InodeEntry?
                defer { if let added { insert(ino, added) } }
                yield &added
            }
        }
    }

    private mutating func insert(_ ino: InodeNumber, _ entry: StowFileSystem.InodeEntry) {
        let p: UInt32
        if let reused = free.popLast() {
            p = reused
        } else {
            p = next
            next += 1
            if Int(p) >> Self.chunkShift == chunks.count { chunks.append(Array(repeating: nil, count: Self.chunkSize)) }
        }
        chunks[Int(p) >> Self.chunkShift][Int(p) & Self.chunkMask] = entry
        position[ino] = p
    }

    private mutating func release(_ ino: InodeNumber, _ p: UInt32) {
        position[ino] = nil
        free.append(p)
    }

    struct Iterator: IteratorProtocol {
        fileprivate var positions: Dictionary<InodeNumber, UInt32>.Iterator
        fileprivate let chunks: [[StowFileSystem.InodeEntry?]]

        mutating func next() -> (key: InodeNumber, value: StowFileSystem.InodeEntry)? {
            while let (ino, p) = positions.next() {
                if let e = chunks[Int(p) >> InodeTable.chunkShift][Int(p) & InodeTable.chunkMask] { return (ino, e) }
            }
            return nil
        }
    }

    func makeIterator() -> Iterator { Iterator(positions: position.makeIterator(), chunks: chunks) }

    /// The records, in no order (as a dictionary's `values`).
    struct Values: Sequence {
        fileprivate let table: InodeTable
        func makeIterator() -> some IteratorProtocol<StowFileSystem.InodeEntry> {
            var all = table.makeIterator()
            return AnyIterator { all.next()?.value }
        }
    }
}

extension Optional where Wrapped == StowFileSystem.InodeEntry {
    /// Whether a slot of the table is empty, looked at in place: `slot == nil` copied the whole
    /// record first (the generic comparison with nil), on every change made through the table.
    var isEmptySlot: Bool {
        switch self {
        case .none: true
        case .some: false
        }
    }
}
