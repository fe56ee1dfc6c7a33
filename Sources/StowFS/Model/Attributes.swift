public import StorageProtocol

/// A FUSE inode number. 1 is the root; remote inodes keep the server's number (≥ 16); files
/// created in this mount and not yet stored get numbers from `InodeNumber.firstLocal` up.
public typealias InodeNumber = UInt64

extension InodeNumber {
    public static let root: InodeNumber = 1
    public static let firstLocal: InodeNumber = 1 << 48
}

/// Seconds and nanoseconds since the epoch, as `stat` has them.
public struct TimeSpec: Sendable, Equatable, Comparable {
    public var nanoseconds: Int64
    public init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    /// A `timespec`'s time, at the nearest one `nanoseconds` holds (1677 to 2262): the kernel
    /// passes on whatever a program sets (`touch -d 2300-01-01`), and filesystems keep a time
    /// past their range at its end, as Linux does for those with a narrower one.
    public init(seconds: Int64, nanoseconds fraction: Int64) {
        let (whole, o1) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (sum, o2) = whole.addingReportingOverflow(fraction)
        nanoseconds = o1 || o2 ? (seconds < 0 ? .min : .max) : sum
    }

    /// Whole seconds, rounded down (−1 for 1 ns before the epoch). Every `Int64` has one: the
    /// times are the server's, and `Int64.min` trapped in `nanoseconds - 999_999_999`.
    public var seconds: Int64 { nanoseconds / 1_000_000_000 - (nanoseconds % 1_000_000_000 < 0 ? 1 : 0) }
    /// The rest, 0 to 999,999,999.
    public var subsecondNanoseconds: Int64 {
        let rest = nanoseconds % 1_000_000_000
        return rest < 0 ? rest + 1_000_000_000 : rest
    }
    public static var now: TimeSpec { TimeSpec(nanoseconds: Timestamp.nowNanoseconds()) }
    public static func < (a: TimeSpec, b: TimeSpec) -> Bool { a.nanoseconds < b.nanoseconds }
}

/// What `stat` shows of an inode.
public struct FileAttributes: Sendable, Equatable {
    public var ino: InodeNumber
    public var kind: NodeKind
    /// Permission bits only (no file-type bits).
    public var mode: UInt32
    public var uid: UInt32
    public var gid: UInt32
    public var size: UInt64
    public var nlink: UInt32
    public var atime: TimeSpec
    public var mtime: TimeSpec
    public var ctime: TimeSpec
    public var rdev: UInt64

    public init(
        ino: InodeNumber, kind: NodeKind, mode: UInt32, uid: UInt32, gid: UInt32, size: UInt64, nlink: UInt32, atime: TimeSpec, mtime: TimeSpec,
        ctime: TimeSpec, rdev: UInt64 = 0
    ) {
        self.ino = ino
        self.kind = kind
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.size = size
        self.nlink = nlink
        self.atime = atime
        self.mtime = mtime
        self.ctime = ctime
        self.rdev = rdev
    }

    /// 512-byte blocks, as `du` counts them.
    public var blocks: UInt64 { (size + 511) / 512 }
}

extension FileAttributes {
    /// A folder's link count after a sub-folder came in. The count is the server's (a listing's
    /// record): at `UInt32.max` it stays there (`nlink += 1` trapped).
    mutating func addSubfolder() {
        if nlink < .max { nlink += 1 }
    }

    /// A folder's link count after a sub-folder went: never below 2 (the folder's name and its
    /// `.`). The server's count can be lower than the sub-folders this mount knows of (ext4 says
    /// 1 of a folder too large to count), and `nlink -= 1` trapped below 0.
    mutating func removeSubfolder() {
        if nlink > 2 { nlink -= 1 }
    }
}

/// The answer to lookup, create, mkdir…: an inode with its attributes and how long the kernel may cache them.
public struct Entry: Sendable, Equatable {
    public var attributes: FileAttributes
    public var attributeTTL: Duration
    public var entryTTL: Duration
    public var ino: InodeNumber { attributes.ino }
}

/// One entry of a directory listing.
public struct DirectoryEntry: Sendable, Equatable {
    public var name: String
    public var ino: InodeNumber
    public var kind: NodeKind
    /// The cookie the kernel passes back to continue after this entry.
    public var offset: Int64
    /// Filled for readdirplus (the lookup count was taken).
    public var entry: Entry?
}

/// A name of a folder's listing as an open folder keeps it until it is closed (32 bytes: a
/// `DirectoryEntry` with room for attributes took 168, 17 MB for 100,000 names). Its offset is its
/// place in the listing plus one.
struct ListedName: Sendable {
    var name: String
    var ino: InodeNumber
    var kind: NodeKind
}

/// Changes asked by setattr (chmod, chown, truncate, utimens).
public struct AttributeChanges: Sendable, Equatable {
    public enum TimeChange: Sendable, Equatable {
        case now
        case set(TimeSpec)
    }

    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public var size: UInt64?
    public var atime: TimeChange?
    public var mtime: TimeChange?

    public init(mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, size: UInt64? = nil, atime: TimeChange? = nil, mtime: TimeChange? = nil) {
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.size = size
        self.atime = atime
        self.mtime = mtime
    }
}

/// The caller of an operation (from the FUSE request).
public struct Caller: Sendable, Equatable {
    public var uid: UInt32
    public var gid: UInt32
    public var pid: Int32
    public init(uid: UInt32, gid: UInt32, pid: Int32 = 0) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
    }
    public static let root = Caller(uid: 0, gid: 0)
}

/// An open file.
public struct OpenedFile: Sendable, Equatable {
    public var handle: UInt64
    /// Keep the kernel's page cache of this file (its content is unchanged since it was cached).
    public var keepCache: Bool
}

/// Where a read's bytes are: a range of a local file (the block cache, or a file's local copy).
/// The segment keeps its file open for as long as it lives.
public struct FileSegment: Sendable {
    public var file: CacheFile
    public var offset: Int64
    public var length: Int
    /// Keeps the block cache from evicting these bytes until the segment is gone (the reply that
    /// splices them has been sent): eviction punches holes, and a hole reads as zeros.
    public var pin: BlockPin?

    public init(file: CacheFile, offset: Int64, length: Int, pin: BlockPin? = nil) {
        self.file = file
        self.offset = offset
        self.length = length
        self.pin = pin
    }
}

/// `statfs`.
public struct FileSystemStatistics: Sendable, Equatable {
    public var blockSize: UInt32 = 4096
    public var blocks: UInt64 = 1 << 40
    public var freeBlocks: UInt64 = 1 << 40
    public var files: UInt64 = 1 << 32
    public var freeFiles: UInt64 = 1 << 32
    public var nameMax: UInt32 = 255
}

/// A namespace and a path inside it; the namespace is nil only for the root of a `--all` mount.
public struct Location: Hashable, Sendable, CustomStringConvertible {
    public var namespace: Namespace?
    public var path: StoragePath

    public init(namespace: Namespace?, path: StoragePath) {
        self.namespace = namespace
        self.path = path
    }

    public var description: String { namespace.map { "\($0)/\(path)" } ?? "/" }

    /// Whether this lies inside (or is) `other`.
    public func isWithin(_ other: Location) -> Bool {
        if other.namespace == nil { return true }
        return namespace == other.namespace && path.isWithin(other.path)
    }

    /// `self` moved from under `old` to under `new`.
    public func rebased(from old: Location, to new: Location) -> Location {
        let rest = Array(path.segments.dropFirst(old.path.segments.count))
        return Location(namespace: new.namespace, path: (try? StoragePath(segments: new.path.segments + rest)) ?? new.path)
    }
}
