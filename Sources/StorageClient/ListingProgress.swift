public import StorageProtocol

/// What a folder's pages must show to be followed further: names that do not go back, a cursor
/// that moves, and an end in sight. A server (or anything between it and the mount) whose pages
/// say "more" forever would otherwise hold a `readdir` without end and grow the mount's memory
/// until the kernel kills it, with every file written and not yet stored.
///
/// Checked as each page is taken, by every way a folder is read (`pageByPage`, and
/// `HTTPObjectStore`'s pages read several at once). What it refuses is a protocol violation.
public struct ListingProgress: Sendable {
    /// A folder listed with more entries than this is refused. A `readdir` of it would hold
    /// several GB of records in the mount; far past any folder a person or program lists.
    public static let mostEntries = 10_000_000
    /// Pages in a row with no entry that still say "more". A server may send one at a range's
    /// edge; a run of them is a server that has stopped moving.
    public static let mostEmptyPages = 16

    private var last: FileName?
    private var entries = 0
    private var emptyInARow = 0
    private let folder: String
    private let mostEntries: Int

    public init(folder: String, mostEntries: Int = Self.mostEntries) {
        self.folder = folder
        self.mostEntries = mostEntries
    }

    /// Takes the names of one page, asked for after `cursor`, whose answer says `next` comes after it.
    public mutating func take<S: Sequence>(names: S, cursor: String?, next: String?) throws where S.Element == String {
        var count = 0
        for name in names {
            let name = FileName(name)
            // Non-decreasing, not increasing: a seed listing may name a folder and a file alike.
            if let last, name < last {
                throw StorageError(.protocolViolation, "the server listed \(folder) out of order: \"\(name)\" after \"\(last)\" (a cursor that went back?)")
            }
            last = name
            count += 1
        }
        entries += count
        guard entries <= mostEntries else {
            throw StorageError(.protocolViolation, "the server listed more than \(mostEntries) entries in \(folder); not followed further")
        }
        guard let next else { return }
        // The page after the same cursor is this page again.
        if next == cursor {
            throw StorageError(.protocolViolation, "the server answered a page of \(folder) with the cursor it was asked for as the one to go on from")
        }
        if count == 0 {
            emptyInARow += 1
            guard emptyInARow < Self.mostEmptyPages else {
                throw StorageError(.protocolViolation, "the server answered \(emptyInARow) pages of \(folder) in a row with nothing and more to come")
            }
        } else {
            emptyInARow = 0
        }
    }
}
