import Foundation
import StowFS
import Testing

/// The control socket's folder is checked before use: under /tmp another user could make it first
/// and plant a socket that `stowfs sync` or `unmount` would then talk to.
@Suite("control socket folder")
struct ControlSocketTests {
    func withFolder(_ body: (String) throws -> Void) throws {
        let base = FileManager.default.temporaryDirectory.path + "/stow-ctl-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        try body(base)
    }

    @Test("made 0700 when missing, accepted when it is ours and private")
    func made() throws {
        try withFolder { base in
            let dir = base + "/stowfs"
            try ControlSocket.prepareDirectory(dir)
            let mode = try FileManager.default.attributesOfItem(atPath: dir)[.posixPermissions] as? NSNumber
            #expect(mode?.intValue == 0o700)
            try ControlSocket.prepareDirectory(dir)
        }
    }

    @Test("refused when writable by others, a link, or (as root) owned by someone else")
    func refused() throws {
        try withFolder { base in
            let open = base + "/open"
            try FileManager.default.createDirectory(atPath: open, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o777])
            chmod(open, 0o777)
            #expect(throws: ControlSocket.UnsafeDirectory.self) { try ControlSocket.prepareDirectory(open) }
            let link = base + "/link"
            let target = base + "/target"
            try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
            #expect(throws: ControlSocket.UnsafeDirectory.self) { try ControlSocket.prepareDirectory(link) }
            if geteuid() == 0 {
                let foreign = base + "/foreign"
                try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
                chown(foreign, 65534, 65534)
                #expect(throws: ControlSocket.UnsafeDirectory.self) { try ControlSocket.prepareDirectory(foreign) }
            }
        }
    }
}
