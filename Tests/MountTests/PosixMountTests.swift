import Foundation
import Testing

/// Symlinks, hard links, special files and permissions through a real mount, before and after a
/// remount with an empty cache (pjdfstest and fsx results are in docs/SEMANTICS.md).
@Suite("mount: POSIX — links, special files, permissions")
struct PosixMountTests {
    /// Mounts with `-o allow_other` (other users can reach the mount); always cleans up.
    static func withSharedMount(_ body: (MountedFS) async throws -> Void) async throws {
        let m = MountedFS()
        defer { m.cleanup() }
        try m.startServer()
        try m.mountFS(extra: ["-o", "allow_other"])
        try await body(m)
    }

    @Test("symlinks (and their loops), hard links, a FIFO, a socket and a device node survive a remount")
    func nodesSurviveRemount() async throws {
        try await Self.withSharedMount { m in
            let d = m.mountpoint
            try m.sh(
                """
                cd \(d) && echo hi > target.txt && ln -s target.txt link && ln target.txt hard && ln -s loop1 loop2 && ln -s loop2 loop1 \
                && mkfifo fifo && mknod dev c 1 3 && python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('sock')"
                """)
            func check(_ when: String) throws {
                #expect(try m.sh("readlink \(d)/link") == "target.txt", "\(when)")
                #expect(try m.sh("cat \(d)/link") == "hi", "\(when)")
                #expect(try m.sh("stat -c %h \(d)/target.txt \(d)/hard") == "2\n2", "\(when)")
                #expect(try m.sh("cat \(d)/loop1 2>&1", expectFailure: true).contains("Too many levels of symbolic links"), "\(when)")
                #expect(try m.sh("stat -c '%F' \(d)/fifo") == "fifo", "\(when)")
                #expect(try m.sh("stat -c '%F' \(d)/sock") == "socket", "\(when)")
                #expect(try m.sh("stat -c '%F %t,%T' \(d)/dev") == "character special file 1,3", "\(when)")
            }
            try check("before the remount")
            try m.stowfs(["sync", d])
            try m.unmountFS()
            try FileManager.default.removeItem(atPath: m.cacheDirectory)
            try m.mountFS(extra: ["-o", "allow_other"])
            try check("after the remount")
            // Unlinking one name of a hard link keeps the other.
            try m.sh("rm \(d)/target.txt && cat \(d)/hard")
            #expect(try m.sh("stat -c %h \(d)/hard") == "1")
        }
    }

    @Test("a user other than root gets EACCES and EPERM where POSIX says; the sticky bit protects others' files")
    func permissions() async throws {
        try await Self.withSharedMount { m in
            let d = m.mountpoint
            let nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"
            let other = "setpriv --reuid=65533 --regid=65533 --clear-groups"
            try m.sh("mkdir \(d)/private && chmod 700 \(d)/private && echo secret > \(d)/private/f && mkdir -m 1777 \(d)/shared")
            #expect(try m.sh("\(nobody) ls \(d)/private 2>&1", expectFailure: true).contains("Permission denied"))
            #expect(try m.sh("\(nobody) sh -c 'echo x > \(d)/file' 2>&1", expectFailure: true).contains("Permission denied"))
            #expect(try m.sh("\(nobody) chmod 777 \(d)/private 2>&1", expectFailure: true).contains("Operation not permitted"))
            try m.sh("\(nobody) sh -c 'echo mine > \(d)/shared/mine'")
            #expect(try m.sh("stat -c '%u %a' \(d)/shared/mine") == "65534 644")
            #expect(try m.sh("\(other) rm -f \(d)/shared/mine 2>&1", expectFailure: true).contains("Operation not permitted"))
            try m.sh("\(nobody) rm \(d)/shared/mine")
            // Owners and modes are kept by the server.
            try m.sh("chown 65534:65534 \(d)/private/f && chmod 640 \(d)/private/f")
            try m.stowfs(["sync", d])
            try m.unmountFS()
            try m.mountFS(extra: ["-o", "allow_other"])
            #expect(try m.sh("stat -c '%u %g %a' \(d)/private/f") == "65534 65534 640")
            #expect(try m.sh("stat -c '%a' \(d)/shared") == "1777")
        }
    }
}
