import Foundation
import StorageClient
import StorageProtocol
import Testing

/// Names and xattr values are bytes: compared, stored and returned exactly, as ext4 does.
@Suite("mount: names and xattr values are bytes", .serialized)
struct BytesMountTests {
    @Test("café in NFC and in NFD are two files, here, on the server and after a remount with an empty cache")
    func canonicallyEquivalentNames() async throws {
        try await withMount { m in
            let nfc = "caf\u{e9}", nfd = "cafe\u{301}"
            #expect(nfc == nfd && !nfc.isSameName(nfd))  // equal Strings, different bytes
            try m.sh("cd \(m.mountpoint) && echo one > $'caf\\xc3\\xa9' && echo two > $'cafe\\xcc\\x81' && mkdir $'dir\\xc3\\xa9' $'dire\\xcc\\x81'")
            #expect(try m.sh("ls \(m.mountpoint) | wc -l") == "4")
            #expect(try m.sh("cat \(m.mountpoint)/$'caf\\xc3\\xa9'") == "one")
            #expect(try m.sh("cat \(m.mountpoint)/$'cafe\\xcc\\x81'") == "two")
            try m.stowfs(["sync", m.mountpoint])
            let names = try await m.withClient { c in try await c.list(m.namespace, folder: .root, after: nil, limit: 100).entries.map(\.fileName) }
            #expect(names.filter { $0.hasPrefix("caf") }.count == 2, "\(names)")
            try m.unmountFS()
            try FileManager.default.removeItem(atPath: m.cacheDirectory)
            try m.mountFS()
            #expect(try m.sh("ls \(m.mountpoint) | wc -l") == "4")
            #expect(try m.sh("cat \(m.mountpoint)/$'caf\\xc3\\xa9'") == "one")
            #expect(try m.sh("cat \(m.mountpoint)/$'cafe\\xcc\\x81'") == "two")
            try m.sh("rm \(m.mountpoint)/$'cafe\\xcc\\x81'")
            #expect(try m.sh("cat \(m.mountpoint)/$'caf\\xc3\\xa9'") == "one")
        }
    }

    @Test("a name that is not UTF-8 is refused with EILSEQ, and nothing is made")
    func notUTF8() async throws {
        try await withMount { m in
            let out = try m.sh("touch \(m.mountpoint)/$'bad\\xff' 2>&1", expectFailure: true)
            #expect(out.contains("Invalid or incomplete multibyte or wide character"), "\(out)")
            #expect(try m.sh("ls -A \(m.mountpoint)").isEmpty)
        }
    }

    @Test("any xattr value round-trips exactly, through a remount; listxattr lists only what was set, so cp -a copies it")
    func xattrValuesAreBytes() async throws {
        try await withMount { m in
            let f = m.mountpoint + "/f"
            try m.sh("echo x > \(f) && setfattr -n user.bin -v 0x00ff10e28099 \(f) && setfattr -n user.text -v 'base64:AAAA' \(f)")
            try m.sh("setfattr -n user.tags -v 'a,b' \(f) && setfattr -n 'user.with space' -v 1 \(f)")
            let dump = "getfattr --absolute-names -d -m - -e hex \(f)"
            let expected = """
                # file: \(f)
                user.bin=0x00ff10e28099
                user.tags=0x612c62
                user.text=0x6261736536343a41414141
                user.with space=0x31
                """
            let first = try m.sh(dump)
            #expect(first == expected, "\(first)")
            // The virtual names are still there, by name.
            #expect(try m.sh("getfattr --absolute-names --only-values -n user.stow.content-type \(f)") == "application/octet-stream")
            try m.sh("cp -a \(f) \(m.mountpoint)/g")
            try m.stowfs(["sync", m.mountpoint])
            try m.unmountFS()
            try FileManager.default.removeItem(atPath: m.cacheDirectory)
            try m.mountFS()
            let again = try m.sh(dump)
            #expect(again == expected, "\(again)")
            let copied = try m.sh("getfattr --absolute-names -d -m - -e hex \(m.mountpoint)/g")
            #expect(copied == expected.replacingOccurrences(of: "# file: \(f)", with: "# file: \(m.mountpoint)/g"), "\(copied)")
            // A control character in a name is refused at the call, as the server would refuse it.
            #expect(try m.sh("setfattr -n $'user.a\\x01' -v 1 \(f) 2>&1", expectFailure: true).contains("Invalid argument"))
        }
    }

    @Test("folder times set by rsync -a survive the uploads landing after them: a second rsync after a remount changes nothing")
    func folderTimesSurvive() async throws {
        try await withMount { m in
            try m.sh("""
                mkdir -p src/a/b src/c && for i in 1 2 3; do echo $i > src/a/f$i; echo $i > src/a/b/g$i; echo $i > src/c/h$i; done
                touch -d '2020-01-02 03:04:05' src/a/b src/a src/c src
                rsync -a src/ \(m.mountpoint)/dst/
                """)
            try m.stowfs(["sync", m.mountpoint])
            #expect(try m.sh("stat -c %y \(m.mountpoint)/dst/a").hasPrefix("2020-01-02 03:04:05"))
            try m.unmountFS()
            try FileManager.default.removeItem(atPath: m.cacheDirectory)
            try m.mountFS()
            #expect(try m.sh("stat -c %y \(m.mountpoint)/dst/a/b").hasPrefix("2020-01-02 03:04:05"))
            #expect(try m.sh("rsync -a --itemize-changes src/ \(m.mountpoint)/dst/") == "")
        }
    }
}
