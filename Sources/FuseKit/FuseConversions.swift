import CFuse
import StorageProtocol
import StowFS
#if canImport(Glibc)
import Glibc
#endif

/// Engine values ↔ C structs.
enum FuseConversions {
    static func typeBits(_ kind: NodeKind) -> UInt32 {
        switch kind {
        case .file: 0o100000
        case .directory: 0o040000
        case .symlink: 0o120000
        case .fifo: 0o010000
        case .socket: 0o140000
        case .characterDevice: 0o020000
        case .blockDevice: 0o060000
        }
    }

    static func timespec(_ t: TimeSpec) -> Glibc.timespec {
        Glibc.timespec(tv_sec: Int(t.seconds), tv_nsec: Int(t.subsecondNanoseconds))
    }

    static func stat(_ a: FileAttributes) -> Glibc.stat {
        var st = Glibc.stat()
        st.st_ino = UInt(a.ino)
        st.st_mode = typeBits(a.kind) | (a.mode & 0o7777)
        st.st_nlink = UInt(a.nlink)
        st.st_uid = a.uid
        st.st_gid = a.gid
        st.st_rdev = UInt(a.rdev)
        st.st_size = Int(a.size)
        st.st_blksize = 1 << 20
        st.st_blocks = Int(a.blocks)
        st.st_atim = timespec(a.atime)
        st.st_mtim = timespec(a.mtime)
        st.st_ctim = timespec(a.ctime)
        return st
    }

    static func entryParam(_ e: Entry) -> fuse_entry_param {
        var p = fuse_entry_param()
        p.ino = fuse_ino_t(e.ino)
        p.generation = 0
        p.attr = stat(e.attributes)
        p.attr_timeout = e.attributeTTL.seconds
        p.entry_timeout = e.entryTTL.seconds
        return p
    }

    /// A POSIX lock from the kernel (libfuse turned its range into `l_start`, `l_len`; a length
    /// of 0 is "to the end of the file"); nil for a type or range the kernel never sends.
    static func fileLock(_ l: Glibc.flock) -> FileLock? {
        let type: LockType
        switch Int32(l.l_type) {
        case F_RDLCK: type = .read
        case F_WRLCK: type = .write
        case F_UNLCK: type = .unlock
        default: return nil
        }
        guard l.l_start >= 0, l.l_len >= 0 else { return nil }
        let start = UInt64(l.l_start)
        let end = l.l_len == 0 ? UInt64.max : start + UInt64(l.l_len) - 1
        return FileLock(type: type, start: start, end: end, pid: l.l_pid)
    }

    /// F_GETLK's answer: the lock in the way, or `F_UNLCK` in the asked lock when none is.
    static func flock(answering asked: Glibc.flock, with conflict: FileLock?) -> Glibc.flock {
        var out = asked
        guard let conflict else {
            out.l_type = Int16(F_UNLCK)
            return out
        }
        out.l_type = Int16(conflict.type == .write ? F_WRLCK : F_RDLCK)
        out.l_whence = Int16(SEEK_SET)
        out.l_start = off_t(min(conflict.start, UInt64(Int64.max)))
        out.l_len = conflict.end >= UInt64(Int64.max) ? 0 : off_t(conflict.end - conflict.start + 1)
        out.l_pid = conflict.pid
        return out
    }

    /// A time a program set (utimensat), at the nearest one the engine holds: the product of a
    /// `tv_sec` past 2262 trapped.
    static func time(_ t: Glibc.timespec) -> TimeSpec {
        TimeSpec(seconds: Int64(t.tv_sec), nanoseconds: Int64(t.tv_nsec))
    }
}
